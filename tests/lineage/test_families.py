"""The families people fine-tune, on real data: community folders (tests/corpus/community), the
makers' files (../shared/upstream) and the vocabulary fingerprints read from llama.cpp's
ggml-vocab-*.gguf files (upstream_templates/vocab_fingerprints.json).

Issue 30: Llama 1/2 and TinyLlama tokenizers were called Mistral (<s>=1, </s>=2), Qwen1.5 was
compared with Qwen2.5, upstream design (TinyLlama-Chat's text markers, the R1 distills' tool
markers, remote-code-only families) was reported as the repository's fault, and chat uploads
whose card shows chat usage but ship no template went unreported.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, UPSTREAM, check_json
from hfdoctor import lineage
from hfdoctor.knowledge import registry
from hfdoctor.repo import ModelRepo

COMMUNITY = ROOT / "tests" / "corpus" / "community"


def _loader():
    path = ROOT / "tests" / "corpus" / "community_load.py"
    if not path.is_file() or not COMMUNITY.is_dir():
        return None
    spec = importlib.util.spec_from_file_location("community_load", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def community(tmp_path_factory):
    """community("slug") -> that community folder written out, byte for byte (tests/corpus/community)."""
    loader = _loader()
    out = tmp_path_factory.mktemp("community")

    def folder(slug: str):
        if loader is None:
            pytest.skip("the community corpus (tests/corpus/community) is not in this checkout")
        if slug not in loader.slugs():
            pytest.skip(f"{slug} is not in the community corpus")
        return loader.materialise_one(slug, out) if not (out / slug).is_dir() else out / slug

    return folder


def by_rule(report: dict, rule: str) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == rule]


# --- the vocabularies -------------------------------------------------------------------------------------


def test_vocab_fingerprints_come_from_llama_cpp_with_their_source():
    data = json.loads(registry.data_file("vocab_fingerprints.json").read_text(encoding="utf-8"))
    assert data["source"]["repo"] == "ggml-org/llama.cpp" and len(data["source"]["commit"]) == 40
    by_file = {v["file"]: v for v in data["vocabularies"]}
    llama, phi3 = by_file["models/ggml-vocab-llama-spm.gguf"], by_file["models/ggml-vocab-phi-3.gguf"]
    assert llama["converted_from"] == "meta-llama/Llama-2-7b-hf" and llama["size"] == 32000
    # Phi-3 is the Llama 2 vocabulary plus added tokens: one group.
    assert llama["sample"] == phi3["sample"] and llama["group"] == phi3["group"] == "llama-spm"
    # Mistral's 32,000-entry vocabulary is another one, though both have <s>=1 and </s>=2.
    assert registry.vocab_groups()[llama["sample"]] == "llama-spm"
    assert "mistral-v1-spm" not in {v["group"] for v in data["vocabularies"]}
    for entry in data["vocabularies"]:
        assert len(entry["git_blob"]) == 40 and entry["size"] > 0
        if entry["group"] is not None:
            assert registry.vocab_groups()[entry["sample"]] == entry["group"]


@pytest.mark.parametrize("slug, group", [
    ("AliAbdien__Fine-Tuning-LLaMA-2-7B-", "llama-spm"),          # a Llama-2-7B adapter's tokenizer.json
    ("Dheena731__tinyLlama-finetune", "llama-spm"),               # TinyLlama ships Llama 2's tokenizer
    ("Decentralised-AI__WizardCoder-15B-1.0-GPTQ", "starcoder-bpe"),  # StarCoder 1 (llama.cpp's "refact")
    ("HashirDS__smart-tutor-phi2-model", "gpt2-bpe"),             # phi-2 uses GPT-2's vocabulary
])
def test_real_tokenizers_have_the_sample_llama_cpp_vocabularies_give(community, slug, group):
    repo = ModelRepo(community(slug))
    assert registry.vocab_groups()[lineage.vocab_sample(repo)] == group


# --- families the registry does not know are not mistaken for ones it does -----------------------------------


@pytest.mark.parametrize("slug", [
    "AliAbdien__Fine-Tuning-LLaMA-2-7B-",                 # Llama-2-7B chat adapter
    "Dheena731__tinyLlama-finetune",                     # TinyLlama-Chat checkpoint
    "rohit1253__llama_2_13_B_chat_GPTQ",                 # Llama-2-13B-chat GPTQ
    "itdevwu__Genz-70b-GPTQ",                            # a Llama-2-70B fine-tune (Llama 3.3's hidden size and depth)
    "CesarChaMal__Wizard-Vicuna-30B-Uncensored-GPTQ",    # a Llama 1 fine-tune
])
def test_llama_1_2_and_tinyllama_are_never_mistral(community, slug):
    report, _ = check_json(community(slug))
    assert report["lineage"]["family"] == "llama2"
    assert "mistral" not in json.dumps(report["lineage"]["by_source"])
    assert report["lineage"]["confidence"] != "conflict"
    assert not by_rule(report, "tokenizer-lineage-mismatch")
    assert not [f for f in by_rule(report, "template-drift") if "mistralai/" in f["message"]]


def test_mistral_is_still_mistral_by_its_own_vocabulary(community):
    for folder in (UPSTREAM / "mistralai--Mistral-7B-Instruct-v0.2", UPSTREAM / "mistralai--Mistral-7B-Instruct-v0.3",
                   community("syGOAT__Mistral-v0.2-Translator-bf16")):
        found = lineage.detect(ModelRepo(folder))
        assert found.family == "mistral" and "tokenizer" in found.evidence, folder.name
    # The adapter names Mistral-7B-Instruct-v0.2: the SentencePiece variant, never compared with Nemo's.
    report, _ = check_json(community("syGOAT__Mistral-v0.2-Translator-bf16"))
    assert report["lineage"]["variant"] == "spm"
    assert not [f for f in by_rule(report, "template-drift") if "Nemo" in f["message"]]


def test_a_vocabulary_two_families_share_names_neither_alone(community):
    """phi-2's tokenizer is GPT-2's, as Falcon-RW's is: the tokenizer says phi, gpt2 or falcon-rw; only the
    adapter's base names phi."""
    repo = ModelRepo(community("HashirDS__smart-tutor-phi2-model"))
    assert {f.key for f in lineage.tokenizer_families(repo)} == {"phi1", "gpt2", "falcon-rw"}
    assert lineage.detect(repo).family == "phi1" and "adapter" in lineage.detect(repo).evidence
    # The same tokenizer files without the adapter: nothing singles one family out.
    alone = ModelRepo(_only(community("HashirDS__smart-tutor-phi2-model"), ("tokenizer.json", "tokenizer_config.json",
                                                                          "vocab.json", "merges.txt",
                                                                          "special_tokens_map.json", "added_tokens.json")))
    assert lineage.detect(alone).family is None


def _only(folder, names):
    out = folder.parent / (folder.name + "-tokenizer-only")
    if not out.is_dir():
        out.mkdir()
        for name in names:
            if (folder / name).is_file():
                shutil.copy2(folder / name, out / name)
    return out


def test_qwen15_is_not_compared_with_qwen25(community):
    report, _ = check_json(community("DracoUnion__Qwen1.5-moe-8x0.5B-Chat"))
    assert report["lineage"]["family"] == "qwen1.5"
    assert not by_rule(report, "template-drift")


def test_qwen25_and_qwen3_upstream_keep_their_families():
    for name, family in (("Qwen--Qwen2.5-Coder-32B-Instruct", "qwen2.5"), ("Qwen--Qwen3-8B", "qwen3"),
                         ("microsoft--phi-4", "phi4"), ("meta-llama--Llama-3.1-8B-Instruct", "llama3")):
        assert lineage.detect(ModelRepo(UPSTREAM / name)).family == family, name


# --- upstream revisions and upstream design ----------------------------------------------------------------


def test_llama3_templates_that_differ_only_in_the_default_date_are_not_drift(copy_upstream):
    folder = copy_upstream("meta-llama--Llama-3.1-8B-Instruct", "my-llama-sft")
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    original = config["chat_template"]
    config["chat_template"] = original.replace('"26 Jul 2024"', '"01 Dec 2024"')
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert not by_rule(check_json(folder)[0], "template-drift")
    # Another change than the date still is drift.
    config["chat_template"] = original.replace("Cutting Knowledge Date", "Knowledge cutoff")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert [f["severity"] for f in by_rule(check_json(folder)[0], "template-drift")] == ["warning"]


def test_llama3_launch_template_is_upstreams_own(community):
    """Meta-Llama-3-8B-Instruct's April 2024 template, in a merge of Llama 3 fine-tunes: never drift."""
    folder = community("YouriLalain__1PARAMMYL-8B-ModelStock")
    sha = hashlib.sha256(ModelRepo(folder).chat_template.text.encode()).hexdigest()
    fam, variant = registry.variant_of_template(sha)
    assert fam.key == "llama3" and "Meta-Llama-3-8B-Instruct" in variant.template_name(sha)
    assert all(f["severity"] == "info" for f in by_rule(check_json(folder)[0], "template-drift"))


def test_a_checkpoint_trained_from_another_format_is_not_compared(community):
    slug = "TFM-HITESH__MedAI__SmolLM135M_SmolLM-135M-Instru-b94f69-meadow_medical_flashcards-100epochs"  # SmolLM v1
    assert not by_rule(check_json(community(slug))[0], "template-drift")


def test_a_fine_tune_of_the_pretrained_release_has_its_own_template(community):
    # SmolLM2-135M (the base, config.json's _name_or_path) fine-tuned with TRL's ChatML: said at info.
    found = by_rule(check_json(community("matteobonotto__smol-course__SmolLM2-FT-MyDataset"))[0], "template-drift")
    assert [f["severity"] for f in found] == ["info"]
    assert "its own format" in found[0]["message"]


def test_tinyllama_chat_markers_are_tinyllamas_design(community):
    report, _ = check_json(community("Dheena731__tinyLlama-finetune"))
    unknown = by_rule(report, "template-unknown-token")
    assert {f["message"].split("'")[1] for f in unknown} == {"<|user|>", "<|system|>", "<|assistant|>"}
    assert all(f["severity"] == "info" and "TinyLlama/TinyLlama-1.1B-Chat-v1.0" in f["severity_reason"]
               for f in unknown)


def test_r1_distill_tool_markers_are_the_distills_design(community, tmp_path):
    # The stored copy leaves out its 7 MB tokenizer.json, so its added tokens alone are at hand: no marker can be
    # called unknown. Given the base vocabulary it was built on (Qwen2.5's vocab.json and merges.txt, byte for byte
    # those of another Qwen2.5 folder of the corpus), the distill's tool markers are its design: info.
    folder = tmp_path / "r1-distill-adapter"
    shutil.copytree(community("prchigoyal01__Reasoning-Bias__BiasGuard_sft_model"), folder)
    assert by_rule(check_json(folder)[0], "template-unknown-token") == []
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(community("Bwin-AI__LiverGPT") / name, folder / name)
    unknown = by_rule(check_json(folder)[0], "template-unknown-token")
    assert unknown and all(f["severity"] == "info" and "DeepSeek-R1-Distill" in f["severity_reason"] for f in unknown)


def test_a_marker_no_upstream_writes_stays_an_error(community, tmp_path):
    folder = tmp_path / "tinyllama-edited"
    shutil.copytree(community("Dheena731__tinyLlama-finetune"), folder)
    template = (folder / "chat_template.jinja").read_text()
    (folder / "chat_template.jinja").write_text(template.replace("<|user|>", "<|human|>"))
    unknown = {f["message"].split("'")[1]: f["severity"] for f in by_rule(check_json(folder)[0], "template-unknown-token")}
    assert unknown["<|human|>"] == "error" and unknown["<|assistant|>"] == "info"


@pytest.mark.parametrize("slug, family", [
    ("O5-7__chat_glm2_in4_LIL_prefix__checkpoint-3000", "ChatGLM"),
    ("GowthamNats__MicrosoftPhi1_5_finetuned-", "Phi"),
])
def test_remote_code_only_families_are_upstream_design(community, slug, family):
    remote = by_rule(check_json(community(slug))[0], "remote-code")
    assert remote and all(f["severity"] == "info" and family in f["severity_reason"] for f in remote)


# --- misses --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("slug, marker", [
    ("CesarChaMal__Wizard-Vicuna-30B-Uncensored-GPTQ", "USER:"),   # the card's prompt_template: Vicuna
    ("itdevwu__Genz-70b-GPTQ", "### User:"),                       # the card's prompt_template: User-Assistant
])
def test_chat_uploads_whose_card_shows_chat_usage_need_a_template(community, slug, marker):
    missing = by_rule(check_json(community(slug))[0], "missing-chat-template")
    assert [f["severity"] for f in missing] == ["warning"] and marker in missing[0]["message"]


def test_llama2_chat_without_a_template_is_an_error_with_its_template_as_fix(community):
    missing = by_rule(check_json(community("rohit1253__llama_2_13_B_chat_GPTQ"))[0], "missing-chat-template")
    assert [f["severity"] for f in missing] == ["error"]
    assert missing[0]["fix"] is not None and "Llama-2-7b-chat-hf" in json.dumps(missing[0]["fix"])


def test_card_usage_is_no_chat_evidence_for_base_models():
    for name in ("Qwen--Qwen3-4B-Base", "Qwen--Qwen2.5-7B", "meta-llama--Llama-3.1-8B"):
        assert lineage.card_chat_usage(ModelRepo(UPSTREAM / name)) is None, name
    assert lineage.card_chat_usage(ModelRepo(UPSTREAM / "Qwen--Qwen3-8B")) is not None


def test_gemma2_bos_that_is_another_token_fires(community, tmp_path):
    source = community("Hosiny89__Gemma2-fine-tuning")
    assert not by_rule(check_json(source)[0], "family-bos-mismatch")
    folder = tmp_path / "gemma2-bos"
    shutil.copytree(source, folder)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        data = json.loads((folder / name).read_text())
        data["bos_token"] = "<start_of_turn>"
        (folder / name).write_text(json.dumps(data))
    report, _ = check_json(folder)
    assert report["lineage"]["family"] == "gemma2"
    bos = [f for f in by_rule(report, "family-bos-mismatch") if "<bos>" in f["message"]]
    assert [f["severity"] for f in bos] == ["error"]


def test_the_fingerprint_maker_samples_the_ids_lineage_samples():
    spec = importlib.util.spec_from_file_location("make_vocab_fingerprints",
                                                  ROOT / "upstream_templates" / "make_vocab_fingerprints.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert list(module.SAMPLE_IDS) == list(lineage.VOCAB_SAMPLE_IDS)


def test_remote_code_only_families_have_no_native_class():
    native = registry.architectures()
    only_remote = [f for f in registry.families() if f.remote_code_repo]
    assert {f.key for f in only_remote} >= {"chatglm", "qwen1", "internlm2", "mimo", "phi1"}
    for fam in only_remote:
        assert any(t not in native for t in fam.model_types), fam.key
    assert registry.remote_code_family("chatglm").key == "chatglm"
    assert registry.remote_code_family("llama") is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.text(max_size=3000), prompt=st.one_of(st.none(), st.text(max_size=200)))
def test_card_usage_reader_takes_any_card(tmp_path, body, prompt):
    """The card is untrusted text: any body and any prompt_template give a reason or None."""
    front = f"---\nprompt_template: {json.dumps(prompt)}\n---\n" if prompt is not None else ""
    (tmp_path / "README.md").write_text(front + body, encoding="utf-8", errors="surrogatepass")
    found = lineage.card_chat_usage(ModelRepo(tmp_path))
    assert found is None or isinstance(found, str)


@pytest.mark.parametrize("slug, severity", [
    ("AliAbdien__Fine-Tuning-LLaMA-2-7B-", "warning"), ("syGOAT__Mistral-v0.2-Translator-bf16", "warning"),
    # TinyLlama-1.1B-Chat-v1.0's own tokenizer pads with </s>: a LoRA that kept it carries the release's design.
    ("Dheena731__tinyLlama-finetune", "info")])
def test_chat_fine_tunes_padding_with_their_end_of_turn_still_warned(community, slug, severity):
    """</s> alone is no chat evidence; the chat release a checkpoint ships the template of, or was
    trained from, is: pad </s> masks every end of turn of these chat fine-tunes (a warning, unless the
    release itself pads so)."""
    assert lineage.chat_evidence(ModelRepo(community(slug)))
    assert [f["severity"] for f in by_rule(check_json(community(slug))[0], "pad-token-is-eos")] == [severity]


def test_a_base_model_adapter_is_no_chat_model(community):
    """KZ-Shi/LLaMA-E: a LoRA on meta-llama/Llama-2-7b-hf (the base): nothing says chat."""
    repo = ModelRepo(community("KZ-Shi__LLaMA-E"))
    assert lineage.chat_evidence(repo, lineage.detect(repo).family_ref) == []
    assert not by_rule(check_json(community("KZ-Shi__LLaMA-E"))[0], "missing-chat-template")


@pytest.mark.parametrize("slug, family", [
    ("YouriLalain__2PRYMMAL-Yi1.5-6B-SLERP", "yi"),  # Yi-1.5-6B's tokenizer.json, copied by a merge of it
    ("2001wjh__SeaSageAI_InternLM2_5__model_Seasage_InternLM2-7b", "internlm2"),  # InternLM2's added tokens
])
def test_registry_fingerprints_from_public_copies(tmp_path, slug, family):
    """The families whose tokenizers llama.cpp's snapshot lacks are told by fingerprints taken from public
    copies (families.json's _source names each): the community folder the fingerprint was read from is that
    family, for certain, and a Yi-1.5 merge's eos finding still names the right ids."""
    import sys
    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    import community_load

    folder = community_load.materialise_one(slug, tmp_path)
    found = lineage.detect(ModelRepo(folder))
    assert (found.family, found.certain) == (family, True), found
