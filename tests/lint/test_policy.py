"""The severity policy's table (hfdoctor.lint.policy.TABLE), row by row, and the precedence
between rows a finding can match at once. Each finding is judged against a real repository:
folders of ../shared/upstream (Qwen3-8B: family certain, its card names vLLM but not TGI;
Qwen3-4B-Base: a pre-trained checkpoint) and a bare config.json whose family is unknown.
The severity_reason texts are asserted whole: users and pipelines read them."""

from __future__ import annotations

import json

import pytest

from conftest import UPSTREAM
from hfdoctor.findings import Facet, FacetKind, Finding, Severity
from hfdoctor.knowledge.upstream import Upstream
from hfdoctor.lint import policy
from hfdoctor.repo import ModelRepo

OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
QWEN3 = UPSTREAM / "Qwen--Qwen3-8B"
BASE = UPSTREAM / "Qwen--Qwen3-4B-Base"
BASE_EVIDENCE = "the model card is titled 'Qwen3-4B-Base'; the model card gives its training stage as pretraining"
UNTARGETED = ("only Text Generation Inference affected, and the repository does not show that it targets it (no "
              "mention in the card, no files or tags for it)")
UNCERTAIN = ("only reasoning blocks differ, and the family is not known for certain (no upstream template to "
             "compare with): read as the template's design")


@pytest.fixture(scope="module")
def unknown_family(tmp_path_factory):
    """A llama config.json alone: no family known for certain, not pre-trained."""
    folder = tmp_path_factory.mktemp("policy") / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    return folder


def judged(folder, *facets: Facet, severity: Severity = Severity.WARNING) -> tuple[Severity, str | None]:
    finding = Finding(code="TST001", rule="test-rule", severity=severity, file=None, line=None, pointer=None,
                      message="a finding", facets=facets)
    [after] = policy.apply(ModelRepo(folder, upstream=OFFLINE), [finding])
    assert after.facets == finding.facets and after.message == finding.message
    return after.severity, after.severity_reason


def engine(key: str) -> Facet:
    return Facet(FacetKind.ENGINE, key)


# --- the table as a whole -------------------------------------------------------------------------------


def test_the_docstring_lists_the_rows_in_table_order():
    lines = [line.strip() for line in policy.__doc__.splitlines()]
    for number, row in enumerate(policy.TABLE, 1):
        assert any(line.startswith(f"{number}. {row.kind.value}") for line in lines), (number, row.kind)
    assert len(policy.TABLE) == 13


def test_rows_never_raise():
    assert all(row.lowers_to in (None, Severity.INFO) for row in policy.TABLE)
    # An error whose engine the repository targets stays an error; it does not become louder either.
    assert judged(QWEN3, engine("vllm"), severity=Severity.ERROR)[0] == Severity.ERROR


def test_info_findings_and_findings_without_facets_are_left_alone():
    assert judged(QWEN3, engine("tgi"), severity=Severity.INFO) == (Severity.INFO, None)
    assert judged(BASE, severity=Severity.ERROR) == (Severity.ERROR, None)


# --- one test per row, in the table's order -----------------------------------------------------------


def test_row1_engine_not_targeted_is_info():
    assert judged(QWEN3, engine("tgi")) == (Severity.INFO, UNTARGETED)
    assert judged(QWEN3, engine("tgi"), engine("open-llm-leaderboard")) == (
        Severity.INFO, "only Text Generation Inference or the Open LLM Leaderboard's submission validator affected, "
                       "and the repository does not show that it targets it (no mention in the card, no files or "
                       "tags for it)")


def test_row2_engine_targeted_keeps_its_severity_and_says_why():
    assert judged(QWEN3, engine("vllm")) == (Severity.WARNING, "the repository targets vLLM: the model card names 'vllm'")
    # One targeted engine among several is enough; the reason names it.
    assert judged(QWEN3, engine("tgi"), engine("vllm")) == (
        Severity.WARNING, "the repository targets vLLM: the model card names 'vllm'")


def test_row3_canonical_is_info_naming_the_template():
    facet = Facet(FacetKind.CANONICAL, "the upstream Qwen/Qwen3-8B template")
    assert judged(QWEN3, facet) == (
        Severity.INFO, "the upstream Qwen/Qwen3-8B template: upstream's own design")


def test_row4_design_of_another_repository_is_info():
    facet = Facet(FacetKind.UPSTREAM_DESIGN, "Qwen3 upstream (the Qwen/Qwen3-32B template does the same)")
    assert judged(QWEN3, facet) == (
        Severity.INFO, "by design of Qwen3 upstream (the Qwen/Qwen3-32B template does the same)")


def test_row5_reasoning_only_is_info_only_when_the_family_is_uncertain(unknown_family):
    reasoning = Facet(FacetKind.REASONING_ONLY)
    assert judged(unknown_family, reasoning) == (Severity.INFO, UNCERTAIN)
    assert judged(QWEN3, reasoning) == (Severity.WARNING, None)


NO_FAMILY = ("no file names a model family hfdoctor knows and the template's format is none of theirs, so no upstream "
             "template can tell whether the release it comes from renders this way by design")


def test_template_behaviour_is_info_only_when_nothing_names_a_family(unknown_family, tmp_path):
    behaviour = Facet(FacetKind.TEMPLATE_BEHAVIOUR)
    assert judged(unknown_family, behaviour) == (Severity.INFO, NO_FAMILY)
    assert judged(QWEN3, behaviour) == (Severity.WARNING, None)
    # A Llama 2 template on a model of no known family (a published Taiwan-ELM LoRA's): the format's family is
    # the yardstick, so the warning stays.
    folder = tmp_path / "elm-lora"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "openelm"}))
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + m['content'] + ' [/INST]' }}"
        "{% elif m['role'] == 'system' %}{{ '<<SYS>>\\n' + m['content'] + '\\n<</SYS>>\\n\\n' }}"
        "{% else %}{{ ' ' + m['content'] + ' ' + eos_token }}{% endif %}{% endfor %}")
    assert judged(folder, behaviour) == (Severity.WARNING, None)
    # A template published without a model (a trainer's, a template collection's) is its publisher's own.
    alone = tmp_path / "template-only"
    alone.mkdir()
    (alone / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    assert judged(alone, behaviour) == (Severity.WARNING, None)


def test_row6_hub_inferred_is_info():
    assert judged(QWEN3, Facet(FacetKind.HUB_INFERRED)) == (
        Severity.INFO, "the Hub infers it from config.json when the card does not say")


def test_row7_capability_is_info_with_its_detail_or_a_default():
    assert judged(QWEN3, Facet(FacetKind.CAPABILITY, "servers parse it first")) == (
        Severity.INFO, "servers parse it first")
    assert judged(QWEN3, Facet(FacetKind.CAPABILITY)) == (Severity.INFO, "a shape the template does not support")


def test_row8_avoidable_is_info_saying_how():
    how = "transformers loads qwen3 natively since 4.51.0, without this code"
    assert judged(QWEN3, Facet(FacetKind.AVOIDABLE, how)) == (Severity.INFO, how)


def test_row9_chat_only_is_info_only_on_a_pretrained_checkpoint():
    chat = Facet(FacetKind.CHAT_ONLY)
    assert judged(BASE, chat) == (Severity.INFO, f"a pre-trained (base) checkpoint: {BASE_EVIDENCE}")
    assert judged(QWEN3, chat) == (Severity.WARNING, None)


def test_row10_design_of_the_repository_itself_is_not_lowered():
    facet = Facet(FacetKind.UPSTREAM_DESIGN, "Qwen3 upstream (the Qwen/Qwen3-8B template does the same)")
    assert judged(QWEN3, facet) == (
        Severity.WARNING, "not lowered: the upstream it would be the design of is Qwen/Qwen3-8B, this repository itself")
    # A whole id only: Qwen/Qwen3-8B-Base is another repository than Qwen/Qwen3-8B.
    other = Facet(FacetKind.UPSTREAM_DESIGN, "Qwen3 upstream (Qwen/Qwen3-8B-Base)")
    assert judged(QWEN3, other) == (Severity.INFO, "by design of Qwen3 upstream (Qwen/Qwen3-8B-Base)")


# --- precedence between rows that can both match --------------------------------------------------------


def test_engine_rows_come_first_and_hide_every_other_facet():
    chat = Facet(FacetKind.CHAT_ONLY)
    assert judged(BASE, engine("tgi"), chat) == (Severity.INFO, UNTARGETED)
    assert judged(BASE, engine("transformers-4"), chat) == (
        Severity.WARNING, "the repository targets transformers 4.x: config.json makes it a transformers checkpoint")


def test_canonical_comes_before_reasoning_only(unknown_family):
    facets = (Facet(FacetKind.CHAT_ONLY), Facet(FacetKind.REASONING_ONLY),
              Facet(FacetKind.CANONICAL, "the upstream Qwen/QwQ-32B template"))
    assert judged(unknown_family, *facets) == (Severity.INFO, "the upstream Qwen/QwQ-32B template: upstream's own design")


def test_design_of_another_comes_before_reasoning_only_and_chat_only(unknown_family):
    design = Facet(FacetKind.UPSTREAM_DESIGN, "Qwen3 upstream (the Qwen/Qwen3-8B template does the same)")
    expected = (Severity.INFO, "by design of Qwen3 upstream (the Qwen/Qwen3-8B template does the same)")
    assert judged(unknown_family, Facet(FacetKind.REASONING_ONLY), design) == expected
    assert judged(BASE, Facet(FacetKind.CHAT_ONLY), design) == expected


def test_reasoning_only_comes_before_chat_only(unknown_family):
    # Both hold where the family is uncertain and the checkpoint pre-trained: a bare config whose
    # card is titled as a base model.
    folder = unknown_family.parent / "my-model-Base"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_bytes((unknown_family / "config.json").read_bytes())
    (folder / "README.md").write_text("# my-model-Base\n\nA pre-trained model.\n")
    assert judged(folder, Facet(FacetKind.CHAT_ONLY)) == (
        Severity.INFO, "a pre-trained (base) checkpoint: the model card is titled 'my-model-Base'")
    assert judged(folder, Facet(FacetKind.CHAT_ONLY), Facet(FacetKind.REASONING_ONLY)) == (Severity.INFO, UNCERTAIN)


def test_design_of_itself_comes_last_so_a_later_reason_still_lowers():
    # Qwen3-4B-Base's own folder: the upstream named is the repository itself (row 13), but the
    # finding is chat-only on a pre-trained checkpoint (row 9), which decides.
    itself = Facet(FacetKind.UPSTREAM_DESIGN, "Qwen3 upstream (the Qwen/Qwen3-4B-Base tokenizer)")
    assert judged(BASE, itself)[1].startswith("not lowered: the upstream it would be the design of is "
                                              "Qwen/Qwen3-4B-Base")
    assert judged(BASE, itself, Facet(FacetKind.CHAT_ONLY)) == (
        Severity.INFO, f"a pre-trained (base) checkpoint: {BASE_EVIDENCE}")


def test_generation_findings_are_info_on_a_model_that_generates_nothing(tmp_path):
    # Qwen3-8B's own config.json with a sequence-classification head (a reward model): how generation
    # stops is no problem of a model that never generates; the same finding on Qwen3-8B keeps its severity.
    folder = tmp_path / "reward-model"
    folder.mkdir()
    config = json.loads((QWEN3 / "config.json").read_text())
    config["architectures"] = ["Qwen3ForSequenceClassification"]
    (folder / "config.json").write_text(json.dumps(config))
    reason = "config.json's architectures (Qwen3ForSequenceClassification) have a head that generates no text"
    assert judged(folder, Facet(FacetKind.GENERATION), severity=Severity.ERROR) == (Severity.INFO, reason)
    assert judged(folder, Facet(FacetKind.CHAT_ONLY)) == (Severity.INFO, reason)
    assert judged(QWEN3, Facet(FacetKind.GENERATION), severity=Severity.ERROR) == (Severity.ERROR, None)


def test_an_encoder_model_type_or_a_classification_adapter_generates_nothing(tmp_path):
    encoder = tmp_path / "sentence-embedder"
    encoder.mkdir()
    (encoder / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    assert judged(encoder, Facet(FacetKind.GENERATION)) == (
        Severity.INFO, "model_type 'bert' is an encoder: it generates no text")
    adapter = tmp_path / "classifier-lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "task_type": "SEQ_CLS", "base_model_name_or_path": "Qwen/Qwen3-8B"}))
    assert judged(adapter, Facet(FacetKind.GENERATION)) == (
        Severity.INFO, "the adapter's task_type is SEQ_CLS: the model encodes and generates no text")


def test_a_sentence_transformers_folder_generates_nothing(tmp_path):
    # Qwen3-Embedding keeps Qwen3ForCausalLM in architectures: modules.json is what says it embeds.
    folder = tmp_path / "embedder"
    folder.mkdir()
    (folder / "config.json").write_text((QWEN3 / "config.json").read_text())
    assert judged(folder, Facet(FacetKind.GENERATION)) == (Severity.WARNING, None)
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]))
    assert judged(folder, Facet(FacetKind.GENERATION)) == (
        Severity.INFO, "a sentence-transformers model (modules.json, config_sentence_transformers.json): it embeds text")
