"""The baseline end to end: written once, then only new findings fail (CONTRACT 0.5), on the seed incident.

The seed incident (fixtures/seed-incident, a real Qwen3-8B fine-tune's metadata as it was
published broken) has two errors: CARD001 on README.md and TPL001 on tokenizer_config.json.
"""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import ROOT, read_json, run_cli, write_json

SEED = ROOT / "fixtures" / "seed-incident"


@pytest.fixture
def seed(tmp_path):
    folder = tmp_path / "seed"
    shutil.copytree(SEED, folder)
    return folder


def check(*args):
    proc = run_cli("check", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_old_findings_pass_and_a_new_one_fails(seed, tmp_path):
    baseline = tmp_path / "hfdoctor-baseline.json"
    assert check(str(seed)).returncode == 1
    wrote = check(str(seed), "--write-baseline", str(baseline))
    assert wrote.returncode == 0 and f"to {baseline}" in wrote.stderr
    first = baseline.read_bytes()
    assert check(str(seed), "--write-baseline", str(baseline)).returncode == 0
    assert baseline.read_bytes() == first  # stable: the same findings, the same bytes
    data = json.loads(first)
    assert data["version"] == 1 and {(e["target"], e["file"], e["code"]) for e in data["findings"]} >= {
        ("seed", "README.md", "CARD001"), ("seed", "tokenizer_config.json", "TPL001")}

    accepted = check(str(seed), "--baseline", str(baseline), "--fail-on", "warning")
    assert accepted.returncode == 0, accepted.stdout
    assert f"{len(data['findings'])} more accepted by the baseline" in accepted.stdout

    # An edit above a finding moves it (a line of the card's front matter): still the same finding.
    card = (seed / "README.md").read_text()
    (seed / "README.md").write_text(card.replace("---\n", "---\n# edited\n", 1))
    moved = json.loads(check(str(seed), "--baseline", str(baseline), "--format", "json").stdout)
    assert moved["findings"] == [] or all(f["severity"] == "info" for f in moved["findings"])

    # A new problem: generation_config.json stops on <|endoftext|> only (two warnings); only it fails the check.
    config = read_json(seed / "generation_config.json")
    config["eos_token_id"] = 151643
    write_json(seed / "generation_config.json", config)
    new = check(str(seed), "--baseline", str(baseline), "--fail-on", "warning")
    assert new.returncode == 1 and "TOK012" in new.stdout
    assert "CARD001" not in new.stdout and "TPL001" not in new.stdout


def test_the_configuration_names_the_baseline_and_a_missing_one_is_exit_2(seed, tmp_path):
    baseline = seed / "hfdoctor-baseline.json"
    assert check(str(seed), "--write-baseline", str(baseline)).returncode == 0
    entries = json.loads(baseline.read_text())["findings"]
    assert {e["target"] for e in entries} == {"."}  # written beside the repository's files: the repository is "."
    (seed / ".hfdoctor.toml").write_text('baseline = "hfdoctor-baseline.json"\n')
    assert check(str(seed)).returncode == 0  # read from inside the repository
    report = json.loads(check(str(seed), "--format", "json").stdout)
    assert report["baseline"]["file"] == "hfdoctor-baseline.json" and report["baseline"]["accepted"] == len(entries)
    assert check(str(seed), "--isolated").returncode == 1
    (seed / ".hfdoctor.toml").write_text('baseline = "../outside.json"\n')
    proc = check(str(seed))
    assert proc.returncode == 2 and "not a path inside the repository" in proc.stdout
    proc = check(str(seed), "--isolated", "--baseline", str(tmp_path / "none.json"))
    assert proc.returncode == 2 and "no such file" in proc.stderr and proc.stdout == ""


def test_a_repository_own_baseline_cannot_accept_an_unsafe_pickle(seed):
    (seed / "optimizer.pkl").write_bytes(b"\x80\x02cposix\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03.")
    baseline = seed / "hfdoctor-baseline.json"
    assert check(str(seed), "--write-baseline", str(baseline)).returncode == 0
    assert check(str(seed), "--baseline", str(baseline)).returncode == 0  # the user's own word: accepted
    (seed / ".hfdoctor.toml").write_text('baseline = "hfdoctor-baseline.json"\n')
    proc = check(str(seed))
    assert proc.returncode == 1 and "SEC001" in proc.stdout and "CARD001" not in proc.stdout
