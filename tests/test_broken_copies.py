"""Broken copies derived from real upstream folders: each fires its rule, exit 1, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import UPSTREAM, check_json, rules_fired, run_cli


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def dump(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def remove_templates(folder: Path) -> None:
    tc = load(folder / "tokenizer_config.json")
    tc.pop("chat_template", None)
    dump(folder / "tokenizer_config.json", tc)
    (folder / "chat_template.jinja").unlink(missing_ok=True)


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


def test_template_removed(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    remove_templates(folder)
    _, finding = assert_fires(folder, "missing-chat-template")
    assert finding["code"] == "TPL001" and finding["file"] == "tokenizer_config.json"
    assert "<|im_end|>" in finding["message"]  # says why it is a chat model


def test_template_removed_from_base_model_is_not_an_error(copy_upstream):
    # Qwen3-4B-Base: eos <|endoftext|>, no chat tags: a base model may ship without a template.
    folder = copy_upstream("Qwen--Qwen3-4B-Base")
    remove_templates(folder)
    report, _ = check_json(folder)
    assert "missing-chat-template" not in rules_fired(report)


def test_base_model_of_another_family(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    card = (folder / "README.md").read_text()
    (folder / "README.md").write_text(card.replace("- Qwen/Qwen3-8B-Base", "- meta-llama/Meta-Llama-3.1-8B"))
    report, finding = assert_fires(folder, "base-model-mismatch")
    assert finding["file"] == "README.md" and finding["line"] == 6
    assert "Qwen3" in finding["message"] and "meta-llama/Meta-Llama-3.1-8B" in finding["message"]
    assert report["lineage"]["family"] == "qwen3"


def test_base_model_of_another_size_is_a_warning(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    card = (folder / "README.md").read_text()
    (folder / "README.md").write_text(card.replace("- Qwen/Qwen3-8B-Base", "- Qwen/Qwen3-14B"))
    assert_fires(folder, "base-model-mismatch", severity="warning")


def test_eos_without_end_of_turn(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    gen = load(folder / "generation_config.json")
    gen["eos_token_id"] = [151643]
    dump(folder / "generation_config.json", gen)
    _, finding = assert_fires(folder, "eos-not-end-of-turn")
    assert "151645" in finding["message"] and finding["file"] == "generation_config.json"


def test_eos_without_end_of_turn_llama(copy_upstream):
    folder = copy_upstream("meta-llama--Llama-3.1-8B-Instruct")
    gen = load(folder / "generation_config.json")
    gen["eos_token_id"] = 128001
    dump(folder / "generation_config.json", gen)
    _, finding = assert_fires(folder, "eos-not-end-of-turn")
    assert "<|eot_id|>" in finding["message"]


def test_tokenizer_from_another_family(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    (folder / "tokenizer.json").write_bytes((UPSTREAM / "meta-llama--Llama-3.1-8B-Instruct" / "tokenizer.json").read_bytes())
    report, finding = assert_fires(folder, "tokenizer-lineage-mismatch")
    assert "Llama" in finding["message"] and "qwen3" in finding["message"]
    # Its added tokens no longer agree with tokenizer_config.json's either.
    assert "added-tokens-inconsistent" in rules_fired(report)


def test_llama_config_with_qwen_tokenizer(copy_upstream):
    folder = copy_upstream("meta-llama--Llama-3.1-8B-Instruct")
    (folder / "tokenizer.json").write_bytes((UPSTREAM / "Qwen--Qwen3-8B" / "tokenizer.json").read_bytes())
    assert_fires(folder, "tokenizer-lineage-mismatch")


@pytest.mark.parametrize("filename", ["config.json", "tokenizer_config.json", "generation_config.json", "tokenizer.json"])
def test_truncated_json(copy_upstream, filename):
    folder = copy_upstream("Qwen--Qwen3-8B")
    data = (folder / filename).read_bytes()
    (folder / filename).write_bytes(data[: len(data) // 2])
    _, finding = assert_fires(folder, "file-unreadable")
    assert finding["file"] == filename and "truncated" in finding["message"]


def test_json_that_is_not_an_object(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    (folder / "config.json").write_text("[1, 2, 3]\n")
    assert_fires(folder, "file-unreadable")


def test_card_with_broken_yaml(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    card = (folder / "README.md").read_text()
    (folder / "README.md").write_text(card.replace("base_model:\n- Qwen/Qwen3-8B-Base", "base_model: [Qwen/Qwen3-8B-Base\n\tbad: x"))
    _, finding = assert_fires(folder, "card-metadata")
    assert finding["file"] == "README.md" and finding["line"] is not None


def test_card_missing_fields(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    card = (folder / "README.md").read_text()
    (folder / "README.md").write_text(card.replace("license: apache-2.0\n", ""))
    report, _ = check_json(folder)
    assert any(f["rule"] == "card-metadata" and "license" in f["message"] for f in report["findings"])


def test_architecture_of_another_family(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    config = load(folder / "config.json")
    config["architectures"] = ["LlamaForCausalLM"]
    dump(folder / "config.json", config)
    _, finding = assert_fires(folder, "config-architecture-mismatch")
    assert finding["pointer"] == "/architectures/0" and finding["line"] is not None


def test_impossible_dimensions(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    config = load(folder / "config.json")
    config["num_key_value_heads"] = 5
    dump(folder / "config.json", config)
    assert_fires(folder, "config-architecture-mismatch")


def test_special_token_not_in_vocab(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    tc = load(folder / "tokenizer_config.json")
    tc["eos_token"] = "<|im_stop|>"
    dump(folder / "tokenizer_config.json", tc)
    report, _ = assert_fires(folder, "special-token-missing")
    assert any("<|im_stop|>" in f["message"] for f in report["findings"])


def test_eos_id_beyond_vocab(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    gen = load(folder / "generation_config.json")
    gen["eos_token_id"] = [151645, 999999]
    dump(folder / "generation_config.json", gen)
    assert_fires(folder, "special-token-id-unknown")


def test_added_token_renamed(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    tc = load(folder / "tokenizer_config.json")
    tc["added_tokens_decoder"]["151667"]["content"] = "<thinking>"
    dump(folder / "tokenizer_config.json", tc)
    assert_fires(folder, "added-tokens-inconsistent")


def test_template_sources_conflict(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    jinja = folder / "chat_template.jinja"
    jinja.write_text(jinja.read_text().replace("<|im_start|>system", "<|im_start|>developer", 1))
    assert_fires(folder, "chat-template-conflict", severity="warning")


def test_directory_that_is_not_a_checkpoint(tmp_path):
    proc = run_cli("check", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_seed_incident_fixture():
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "seed-incident"
    report, proc = check_json(fixture)
    assert proc.returncode == 1
    assert rules_fired(report, "error") >= {"missing-chat-template", "base-model-mismatch"}
    assert report["lineage"]["family"] == "qwen3" and report["lineage"]["base_model"] == "Qwen/Qwen3-8B"
