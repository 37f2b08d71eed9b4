"""Broken copies derived from real upstream folders, through the command line: exit 1, no traceback.

The cases that break one thing and expect one rule's findings are data: tests/rules/*.yml."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, UPSTREAM, check_json, read_json, rules_fired, run_cli, write_json


def assert_fires(folder: Path, rule: str, severity: str = "error") -> tuple[dict, dict]:
    """Check `folder`; `rule` must fire at `severity`. Returns the report and its first such finding."""
    report, proc = check_json(folder)
    assert rule in rules_fired(report, severity), report["findings"]
    assert proc.returncode == (1 if severity == "error" else proc.returncode)
    finding = next(f for f in report["findings"] if f["rule"] == rule and f["severity"] == severity)
    return report, finding


def test_originals_are_clean_for_these_rules():
    for name in ("Qwen--Qwen3-8B", "meta-llama--Llama-3.1-8B-Instruct"):
        report, proc = check_json(UPSTREAM / name)
        assert not rules_fired(report, "error"), report["findings"]
        assert proc.returncode == 0


def test_base_model_of_another_family_keeps_the_lineage(copy_upstream):
    # The finding itself is tests/rules/CARD001.yml; here: the command exits 1, and the card's
    # wrong base_model does not change the lineage the other evidence gives.
    folder = copy_upstream("Qwen--Qwen3-8B")
    card = (folder / "README.md").read_text()
    (folder / "README.md").write_text(card.replace("- Qwen/Qwen3-8B-Base", "- meta-llama/Meta-Llama-3.1-8B"))
    report, _ = assert_fires(folder, "base-model-mismatch")
    assert report["lineage"]["family"] == "qwen3"


def test_special_token_not_in_vocab(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    tc = read_json(folder / "tokenizer_config.json")
    tc["eos_token"] = "<|im_stop|>"
    write_json(folder / "tokenizer_config.json", tc, ensure_ascii=False)
    report, _ = assert_fires(folder, "special-token-missing")
    assert any("<|im_stop|>" in f["message"] for f in report["findings"])


def test_eos_id_beyond_vocab(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    gen = read_json(folder / "generation_config.json")
    gen["eos_token_id"] = [151645, 999999]
    write_json(folder / "generation_config.json", gen, ensure_ascii=False)
    assert_fires(folder, "special-token-id-unknown")


def test_directory_that_is_not_a_checkpoint(tmp_path):
    proc = run_cli("check", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_seed_incident_fixture():
    # Its TPL001 and CARD001 findings are rule cases (tests/rules/); here, the command's exit and lineage.
    fixture = ROOT / "fixtures" / "seed-incident"
    report, proc = check_json(fixture)
    assert proc.returncode == 1
    assert rules_fired(report, "error") >= {"missing-chat-template", "base-model-mismatch"}
    assert report["lineage"]["family"] == "qwen3" and report["lineage"]["base_model"] == "Qwen/Qwen3-8B"
