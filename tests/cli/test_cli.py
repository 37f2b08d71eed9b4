"""The command line as users and pipelines see it (CONTRACT.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, UPSTREAM, run_cli
from hfdoctor.lint.rules import standing_for

QWEN3 = UPSTREAM / "Qwen--Qwen3-8B"
FIXTURE = ROOT / "fixtures" / "seed-incident"


def contract_rule_names() -> set[str]:
    """The rule names ../shared/CONTRACT.md fixes (its "Rule names" table)."""
    import re

    text = (UPSTREAM.parent / "CONTRACT.md").read_text(encoding="utf-8")
    table = text[text.index("## Rule names"):]
    return set(re.findall(r"^\| `([a-z0-9-]+)` \|", table, re.MULTILINE))


def test_rules_lists_every_contract_name():
    proc = run_cli("rules", "--format", "json")
    assert proc.returncode == 0
    rules = json.loads(proc.stdout)
    names = {r["rule"] for r in rules}
    contract = contract_rule_names()
    assert len(contract) >= 40
    # Every contract name means what CONTRACT.md says; remote-code and system-prompt-dropped are
    # hfdoctor's own additions, and so are the rules split from a contract name (TOK001, SEC001),
    # which keep it as an alias.
    split = {r.name for old in ("TOK001", "SEC001") for r in standing_for(old)}
    own = {"remote-code", "system-prompt-dropped"}
    assert names - contract == own | (split - contract), names - contract
    assert {"generation-config", "pad-token-is-eos", "tokenizer-adds-eos", "config-inconsistent",
            "adapter-inconsistent", "quantization-inconsistent", "unsafe-pickle"} <= names
    assert len({r["code"] for r in rules}) == len(rules)


def test_rules_markdown_has_a_row_per_rule():
    rows = [line for line in run_cli("rules", "--markdown").stdout.splitlines() if line.startswith("| <a id=")]
    assert len(rows) == len(json.loads(run_cli("rules", "--format", "json").stdout))


def test_every_rule_explains_itself():
    for rule in json.loads(run_cli("rules", "--format", "json").stdout):
        proc = run_cli("explain", rule["code"])
        assert proc.returncode == 0 and len(proc.stdout) > 400, rule["code"]


def test_explain_by_code_and_name():
    by_code = run_cli("explain", "TPL001")
    by_name = run_cli("explain", "missing-chat-template")
    assert by_code.returncode == 0 and by_code.stdout == by_name.stdout
    assert "Why" in by_code.stdout and "Fix" in by_code.stdout


def test_explain_unknown_rule_is_a_usage_error():
    proc = run_cli("explain", "NOPE999")
    assert proc.returncode == 2 and "unknown rule" in proc.stderr


def test_json_shape_matches_contract():
    proc = run_cli("check", str(FIXTURE), "--format", "json")
    report = json.loads(proc.stdout)
    assert set(report) >= {"hfdoctor", "target", "lineage", "findings", "summary"}
    assert set(report["lineage"]) >= {"family", "base_model", "evidence"}
    lineage = report["lineage"]
    assert lineage["architecture"] == "qwen3" and lineage["confidence"] == "high" and lineage["variant"] == "hybrid"
    assert set(lineage["by_source"]) >= {"config", "tokenizer"} and "qwen3" in lineage["by_source"]["tokenizer"]
    for finding in report["findings"]:
        assert set(finding) == {"code", "rule", "severity", "severity_reason", "file", "line", "pointer", "message",
                                "fix"}
        assert finding["severity"] in ("error", "warning", "info")
    assert set(report["summary"]) == {"error", "warning", "info", "fixable", "unsafe_fixable"}
    assert report["summary"]["error"] == sum(f["severity"] == "error" for f in report["findings"])


def test_select_and_ignore():
    only = json.loads(run_cli("check", str(FIXTURE), "--format", "json", "--select", "CARD").stdout)
    assert {f["code"][:4] for f in only["findings"]} == {"CARD"}
    without = json.loads(run_cli("check", str(FIXTURE), "--format", "json", "--ignore", "base-model-mismatch,TPL001").stdout)
    assert not {"base-model-mismatch", "missing-chat-template"} & {f["rule"] for f in without["findings"]}


def test_unknown_selector_is_a_usage_error():
    assert run_cli("check", str(FIXTURE), "--select", "XYZ").returncode == 2


def test_exit_codes_follow_fail_on(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    card = folder / "README.md"
    card.write_text(card.read_text().replace("license: apache-2.0\n", ""))  # one warning
    assert run_cli("check", str(folder)).returncode == 0
    assert run_cli("check", str(folder), "--fail-on", "warning").returncode == 1
    assert run_cli("check", str(FIXTURE)).returncode == 1


def test_several_targets_in_one_run():
    proc = run_cli("check", str(QWEN3), str(FIXTURE), "--format", "json")
    reports = json.loads(proc.stdout)
    assert [r["target"] for r in reports] == [str(QWEN3), str(FIXTURE)]
    assert proc.returncode == 1


def test_text_output_names_file_line_and_fixability():
    proc = run_cli("check", str(FIXTURE))
    assert "README.md:5" in proc.stdout and "CARD001" in proc.stdout and "lineage: qwen3" in proc.stdout


def test_help_and_rules_import_neither_torch_nor_transformers():
    for args in (["--help"], ["rules"], ["check", str(FIXTURE)]):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "hfdoctor", *args], capture_output=True, text=True)
        imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
        assert "torch" not in imported and "transformers" not in imported, args


def test_hook_install(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    proc = run_cli("hook", "install", "--repo", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    hook = tmp_path / ".git" / "hooks" / "pre-push"
    assert "run check --git-rev" in hook.read_text() and hook.stat().st_mode & 0o111  # fail-on: the configuration's
    assert run_cli("hook", "install", "--repo", str(tmp_path), "--fail-on", "warning").returncode == 0
    assert "run check --fail-on warning --git-rev" in hook.read_text()
    assert run_cli("hook", "install", "--repo", str(tmp_path)).returncode == 0  # ours: replaced


def test_hook_keeps_a_foreign_hook_and_runs_it_after_the_check(tmp_path):
    """Another tool's pre-push hook (pre-commit's, git-lfs's) is never replaced: it is kept
    byte for byte and runs, with git's arguments and input, once hfdoctor's check passes."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    hook = tmp_path / ".git" / "hooks" / "pre-push"
    hook.write_text('#!/bin/sh\necho "mine $1" >&2\ncat >&2\nexit 7\n')
    hook.chmod(0o755)
    proc = run_cli("hook", "install", "--repo", str(tmp_path))
    assert proc.returncode == 0 and "kept the pre-push hook" in proc.stdout, proc.stderr
    chained = tmp_path / ".git" / "hooks" / "pre-push.hfdoctor-chained"
    assert "mine" in chained.read_text() and "hfdoctor" in hook.read_text()
    ran = subprocess.run([str(hook), "origin", "url"], cwd=tmp_path, capture_output=True, text=True,
                         input="(delete) " + "0" * 40 + " refs/heads/x " + "1" * 40 + "\n")
    assert ran.returncode == 7 and "mine origin" in ran.stderr and "refs/heads/x" in ran.stderr
    assert run_cli("hook", "install", "--repo", str(tmp_path), "--force").returncode == 0  # still kept
    assert "mine" in chained.read_text()


def test_hook_blocks_a_bad_push(tmp_path):
    """The installed hook checks the pushed commit (git's stdin) and its exit code stops the push;
    a deleted ref (all-zero sha) is nothing to check."""
    import shutil

    repo = tmp_path / "model"
    shutil.copytree(FIXTURE, repo)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    run_cli("hook", "install", "--repo", str(repo))
    hook = repo / ".git" / "hooks" / "pre-push"
    push = f"refs/heads/main {sha} refs/heads/main {'0' * 40}\n"
    proc = subprocess.run([str(hook)], cwd=repo, capture_output=True, text=True, input=push)
    assert proc.returncode == 1 and "missing-chat-template" in proc.stdout
    delete = f"(delete) {'0' * 40} refs/heads/old {sha}\n"
    assert subprocess.run([str(hook)], cwd=repo, capture_output=True, text=True, input=delete).returncode == 0


def test_hub_id_from_local_cache_offline(tmp_path):
    """Offline, a Hub repo id is its snapshot in a local cache laid out like the Hub's, when the
    snapshot holds or records as absent (.no_exist/) every file the rules read."""
    import shutil

    cache = tmp_path / "hub"
    commit = "abc123" + "0" * 34  # the cache names snapshots by their 40-hex commit id
    snap = cache / "models--Qwen--Qwen3-8B" / "snapshots" / commit
    shutil.copytree(QWEN3, snap)
    (cache / "models--Qwen--Qwen3-8B" / "refs").mkdir()
    (cache / "models--Qwen--Qwen3-8B" / "refs" / "main").write_text(commit)
    proc = run_cli("check", "Qwen/Qwen3-8B", env={"HF_HUB_CACHE": str(cache)})
    assert proc.returncode == 2 and "incomplete" in proc.stderr + proc.stdout and "special_tokens_map.json" in proc.stdout
    absent = cache / "models--Qwen--Qwen3-8B" / ".no_exist" / commit
    absent.mkdir(parents=True)
    for name in ("special_tokens_map.json", "chat_template.json"):
        (absent / name).touch()
    proc = run_cli("check", "Qwen/Qwen3-8B", "--format", "json", env={"HF_HUB_CACHE": str(cache)})
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["target"] == "Qwen/Qwen3-8B" and report["lineage"]["family"] == "qwen3"
    assert report["revision"] == {"requested": "main", "commit": commit, "from": "local HF cache (offline)"}
    assert run_cli("check", "Qwen/Nope-1B", env={"HF_HUB_CACHE": str(cache)}).returncode == 2


def test_offline_machine_does_not_wait_on_the_hub(copy_upstream):
    """Without HF_HUB_OFFLINE and without network, upstream lookups give up at once."""
    import os
    import time

    folder = copy_upstream("Qwen--Qwen3-8B")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env["HF_ENDPOINT"] = "https://hub.invalid"  # a host that never resolves, even on a networked machine
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", "check", str(folder)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - start < 20


def test_github_annotations():
    proc = run_cli("check", str(FIXTURE), "--format", "github")
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 1
    assert any(l.startswith("::error file=") and "README.md,line=5,title=CARD001 base-model-mismatch::" in l for l in lines)
    assert all(l.startswith("::") and "\n" not in l for l in lines)


def test_sarif_is_valid_shape():
    proc = run_cli("check", str(FIXTURE), "--format", "sarif")
    sarif = json.loads(proc.stdout)
    run = sarif["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert sarif["version"] == "2.1.0" and "TPL001" in rule_ids
    for result in run["results"]:
        assert rule_ids[result["ruleIndex"]] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note")
        # relative to the directory hfdoctor ran in (%SRCROOT%), as code scanning expects
        location = result["locations"][0]["physicalLocation"]["artifactLocation"]
        assert location["uri"].startswith("fixtures/seed-incident") and location["uriBaseId"] == "%SRCROOT%"


def test_help_prints_no_type_after_flags():
    for command in (["fix", "--help"], ["check", "--help"], ["hook", "install", "--help"]):
        out = run_cli(*command).stdout
        assert "<bool>" not in out, command
    assert "<error|warning|info>" in run_cli("check", "--help").stdout  # options with values keep theirs


def test_options_may_come_between_targets_and_usage_errors_are_exit_2():
    proc = run_cli("check", str(QWEN3), "--format", "json", str(FIXTURE), "--select", "TPL001")
    assert [r["target"] for r in json.loads(proc.stdout)] == [str(QWEN3), str(FIXTURE)] and proc.returncode == 1
    for args, said in ((["check", str(FIXTURE), "--jobs", "-1"], "below the minimum 0"),
                       (["check", str(FIXTURE), "--format", "xml"], "invalid choice: 'xml'"),
                       (["check", str(FIXTURE), "--timeout", "0.5"], "below the minimum 1.0"),
                       (["check", str(FIXTURE), "--sel", "TPL001"], "unrecognized arguments: --sel"),  # no abbreviations
                       (["probe", "--max-new-tokens", "x"], "'x' is not an int"),
                       (["nonsense"], "invalid choice: 'nonsense'"),
                       (["hook", "remove"], "invalid choice: 'remove'"),
                       ([], "usage: hfdoctor"), (["hook"], "usage: hfdoctor hook")):
        proc = run_cli(*args)
        assert proc.returncode == 2 and said in proc.stderr and proc.stdout == "", (args, proc.stderr)
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("hfdoctor ")
    assert run_cli("hook", "--help").stdout.count("install") >= 1 and run_cli("explain", "--help").returncode == 0


def test_check_starts_without_a_cli_framework_or_process_pool():
    """A pre-push check pays only for what it uses: no typer, click or pydantic (0.2 s of a
    check's CPU went to building pydantic validators for typer's options), no process pool."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "hfdoctor", "check", str(FIXTURE), "--format",
                           "json"], capture_output=True, text=True)
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert proc.returncode == 1 and json.loads(proc.stdout)["findings"]
    assert not {"typer", "click", "pydantic", "concurrent.futures.process"} & imported
