"""Severity from evidence (hfdoctor.lint.policy), conflicting lineage, and the smaller noise fixes
of issue 21, on real data: the ../shared/upstream folders and the seed incident. Cases that change
one thing of an upstream folder and expect one rule's severity are in tests/rules/*.yml."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, UPSTREAM, check_json, run_cli

SEED = ROOT / "fixtures" / "seed-incident"


def by_rule(report: dict, rule: str) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == rule]


@pytest.fixture(scope="module")
def seed_with_weights(tmp_path_factory):
    """The incident as it happened: Llama-3.1-8B weights (sparse) under Qwen3 config and tokenizer."""
    out = tmp_path_factory.mktemp("seed") / "seed-incident"
    subprocess.run([sys.executable, str(ROOT / "fixtures" / "make_seed_incident.py"), "--with-weights",
                    "--out", str(out)], check=True, capture_output=True)
    return out


# --- conflicting lineage ----------------------------------------------------------------------------


def test_weights_against_config_and_tokenizer_is_a_conflict(seed_with_weights):
    report, proc = check_json(seed_with_weights)
    assert proc.returncode == 1
    lineage = report["lineage"]
    assert lineage["confidence"] == "conflict" and lineage["disagree"] == ["weights"]
    assert "llama3" in lineage["by_source"]["weights"] and "qwen3" in lineage["by_source"]["config"]
    # No fix that picks a side is safe; the unsafe one says what else must change.
    card = by_rule(report, "base-model-mismatch")[0]
    assert card["fix"]["applicability"] == "unsafe" and "weights" in card["fix"]["title"]
    assert "sources disagree" in card["message"]
    assert all(f["fix"] is None or f["fix"]["applicability"] == "unsafe" for f in report["findings"])
    assert by_rule(report, "missing-chat-template")[0]["fix"] is None
    # The weights line and compat say plainly that the weights do not load into the config.
    assert report["weights"]["matches_config"].startswith("no")
    status = {e["engine"]: e["status"] for e in report["compat"]}
    assert status["transformers-5"] == status["vllm"] == "fails"


def test_metadata_only_seed_is_not_a_conflict():
    report, _ = check_json(SEED)
    assert report["lineage"]["confidence"] == "high" and report["lineage"]["disagree"] == []
    card = by_rule(report, "base-model-mismatch")[0]
    assert card["fix"]["applicability"] == "safe"


def test_fix_then_check_the_seed_is_clean(tmp_path):
    folder = tmp_path / "seed"
    shutil.copytree(SEED, folder)
    assert run_cli("fix", str(folder)).returncode == 0
    report, proc = check_json(folder)
    assert proc.returncode == 0
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    # The template it wrote is Qwen3-8B's own: what remains says so.
    reasons = {f["severity_reason"] for f in by_rule(report, "prefix-instability")}
    assert reasons and all("Qwen/Qwen3-8B" in r for r in reasons)


# --- the policy, rule by rule -------------------------------------------------------------------------


def test_engine_findings_are_info_unless_targeted(copy_upstream):
    folder = copy_upstream("openai--gpt-oss-20b")
    jinja_only = by_rule(check_json(folder)[0], "consumer-incompatible")
    assert [f["severity"] for f in jinja_only] == ["info"] and "does not show" in jinja_only[0]["severity_reason"]
    assert jinja_only[0]["fix"]["applicability"] == "unsafe"  # a second copy of the template can drift
    card = folder / "README.md"
    card.write_text(card.read_text() + "\n\nServe it with Text Generation Inference (TGI).\n")
    targeted = by_rule(check_json(folder)[0], "consumer-incompatible")
    assert [f["severity"] for f in targeted] == ["warning"] and "card names" in targeted[0]["severity_reason"]


def test_json_string_arguments_crash_is_a_capability_note_null_content_stays_a_warning():
    minimax = by_rule(check_json(UPSTREAM / "MiniMaxAI--MiniMax-M2")[0], "chat-template-render-error")
    string_args = [f for f in minimax if "JSON string" in f["message"]]
    assert string_args and string_args[0]["severity"] == "info" and "HTTP 500" not in string_args[0]["message"]
    assert "parse them into an object" in string_args[0]["severity_reason"]
    qwq = by_rule(check_json(UPSTREAM / "Qwen--QwQ-32B")[0], "chat-template-render-error")
    assert [f["severity"] for f in qwq if "content null" in f["message"]] == ["warning"]


def test_base_checkpoint_chat_rules_are_info_and_variant_unknown():
    report, _ = check_json(UPSTREAM / "Qwen--Qwen3-4B-Base")
    assert report["lineage"]["stage"] == "pretrained" and report["lineage"]["variant"] is None
    assert report["lineage"]["base_model"] == "Qwen/Qwen3-4B-Base"
    eos = by_rule(report, "eos-not-end-of-turn")
    assert [f["severity"] for f in eos] == ["info"] and "pre-trained" in eos[0]["severity_reason"]


def test_pad_token_by_family_design_is_info_elsewhere_a_warning(copy_upstream):
    # SmolLM3-3B itself: its tokenizer pads with <|im_end|> while its own config.json and
    # generation_config.json say pad_token_id 128004. A contradiction inside one repository, and
    # the upstream would be the repository itself: never "by design".
    smollm3 = by_rule(check_json(UPSTREAM / "HuggingFaceTB--SmolLM3-3B")[0], "pad-token-is-eos")
    assert [f["severity"] for f in smollm3] == ["warning"]
    # A fine-tune of it under another name, whose config names no other pad id: SmolLM3's design.
    folder = copy_upstream("HuggingFaceTB--SmolLM3-3B", "my-smollm3-sft")
    for name in ("config.json", "generation_config.json"):
        data = json.loads((folder / name).read_text())
        data.pop("pad_token_id", None)
        (folder / name).write_text(json.dumps(data))
    sft = by_rule(check_json(folder)[0], "pad-token-is-eos")
    assert [f["severity"] for f in sft] == ["info"] and "SmolLM3" in sft[0]["severity_reason"]
    # The same fine-tune saved under the upstream's own folder name: not lowered (never circular).
    (folder.parent / "HuggingFaceTB--SmolLM3-3B").mkdir()
    for item in folder.iterdir():
        item.rename(folder.parent / "HuggingFaceTB--SmolLM3-3B" / item.name)
    itself = by_rule(check_json(folder.parent / "HuggingFaceTB--SmolLM3-3B")[0], "pad-token-is-eos")
    assert [f["severity"] for f in itself] == ["warning"] and "itself" in itself[0]["severity_reason"]
    # A Qwen3 fine-tune that pads with <|im_end|>: not Qwen's design (it pads with <|endoftext|>).
    folder = copy_upstream("Qwen--Qwen3-8B")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["pad_token"] = "<|im_end|>"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    qwen = by_rule(check_json(folder)[0], "pad-token-is-eos")
    assert [f["severity"] for f in qwen] == ["warning"]


# --- smaller -----------------------------------------------------------------------------------------------


def test_empty_directory_is_not_a_model_and_nothing_loads(tmp_path):
    report, proc = check_json(tmp_path)
    assert proc.returncode == 1 and [f["rule"] for f in report["findings"]] == ["not-a-model-repo"]
    assert {e["status"] for e in report["compat"]} == {"fails"}


def test_summary_counts_only_what_fix_applies(seed_with_weights):
    report, _ = check_json(seed_with_weights)
    safe = sum(1 for f in report["findings"] if f["fix"] and f["fix"]["applicability"] == "safe")
    assert report["summary"]["fixable"] == safe == 0
    assert report["summary"]["unsafe_fixable"] >= 1


def test_explain_prints_no_broken_escapes():
    out = run_cli("explain", "TPL010").stdout
    assert '"\n"' not in out and "Severity" in run_cli("explain", "TPL007").stdout


# --- false-positive classes and misses, on real templates and metadata ---------------------------------


def test_text_after_the_end_of_turn_token_is_not_a_prefix_divergence(copy_upstream):
    """Llama 3.1's template with a newline after each <|eot_id|> and before each turn: the
    finished turn ends "<|eot_id|>\\n", the next request has "<|eot_id|>\\n\\n" (one token). But
    the model stops on <|eot_id|> and never writes the newline after it, so no server caches
    it: what it cached is a prefix of the next request in tokens. (Before, this was reported
    as tokens that merge differently.)"""
    folder = copy_upstream("meta-llama--Llama-3.1-8B-Instruct")
    path = folder / "chat_template.jinja"
    text = path.read_text()
    turn = ("        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim "
            "+ '<|eot_id|>' }}")
    prompt = "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    assert turn in text and prompt in text
    text = text.replace(turn, "        {{- '\\n' }}\n" + turn.replace("'<|eot_id|>' }}", "'<|eot_id|>\\n' }}"), 1)
    path.write_text(text.replace(prompt, "    {{- '\\n<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"))
    found = by_rule(check_json(folder)[0], "prefix-instability")
    assert not [f for f in found if f["message"].startswith("a reply followed by the next user message")], found


def test_config_and_generation_config_ids_that_disagree():
    # DeepSeek's own distill keeps Qwen2.5's bos in config.json: true, and harmless (info).
    report, _ = check_json(UPSTREAM / "deepseek-ai--DeepSeek-R1-Distill-Qwen-32B")
    bos = [f for f in by_rule(report, "special-token-ids-mismatch") if "bos_token_id" in f["message"]]
    assert [f["severity"] for f in bos] == ["info"] and "151643" in bos[0]["message"]
    # Upstream eos lists that extend config.json's (Qwen3-8B, gpt-oss) are not disagreements.
    for name in ("Qwen--Qwen3-8B", "openai--gpt-oss-20b", "meta-llama--Llama-3.1-8B-Instruct"):
        report, _ = check_json(UPSTREAM / name)
        assert not by_rule(report, "special-token-ids-mismatch")


def test_eos_ids_that_share_nothing_are_a_warning(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    generation = json.loads((folder / "generation_config.json").read_text())
    generation["eos_token_id"] = [151643]  # config.json says 151645
    (folder / "generation_config.json").write_text(json.dumps(generation))
    found = [f for f in by_rule(check_json(folder)[0], "special-token-ids-mismatch") if "eos_token_id" in f["message"]]
    assert [f["severity"] for f in found] == ["warning"]
    assert "151645 (<|im_end|>)" in found[0]["message"] and "151643 (<|endoftext|>)" in found[0]["message"]
