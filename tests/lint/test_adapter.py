"""adapter-inconsistent on real PEFT adapters (made with peft on a SmolLM2-sized model), on
broken copies whose harm PEFT itself shows, and on adapter configs published on GitHub."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import TESTS, UPSTREAM, check_json, read_json, rules_alone, run_cli, write_json
from hfdoctor.lint.check import run_rules
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules import selected_rules
from hfdoctor.knowledge.upstream import Upstream

OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
CORPUS = TESTS / "corpus" / "adapters" / "adapters.json"


def findings(folder: Path):
    return rules_alone(folder, ["ADP001"], OFFLINE)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory, smollm2_checkpoint):
    """A model of SmolLM2-135M's architecture and size (random weights) saved by transformers."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(smollm2_checkpoint)
    model = AutoModelForCausalLM.from_config(config)
    folder = tmp_path_factory.mktemp("base") / "SmolLM2-135M"
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, base_model):
    """A real LoRA adapter saved by peft (r=8 on q_proj/v_proj), as PEFT writes it: its
    base_model_name_or_path is the training machine's folder."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_model)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                  task_type="CAUSAL_LM"))
    folder = tmp_path_factory.mktemp("adapter") / "smol-lora"
    peft_model.save_pretrained(folder)
    return folder


def copy_adapter(adapter: Path, tmp_path: Path, base: str | None = SMOLLM2, card_base: str | None = SMOLLM2,
                 **config_changes) -> Path:
    folder = tmp_path / "lora"
    shutil.copytree(adapter, folder)
    config = read_json(folder / "adapter_config.json")
    if base is not None:
        config["base_model_name_or_path"] = base
    config.update(config_changes)
    write_json(folder / "adapter_config.json", config)
    if card_base is not None:
        (folder / "README.md").write_text(f"---\nbase_model: {card_base}\nlibrary_name: peft\nlicense: apache-2.0\n"
                                          "pipeline_tag: text-generation\n---\n# LoRA\n", encoding="utf-8")
    return folder


def peft_loads(base_model: Path, folder: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_model), folder)


def test_clean_adapter_loads_and_is_silent(adapter, base_model, tmp_path):
    folder = copy_adapter(adapter, tmp_path)
    peft_loads(base_model, folder)
    assert findings(folder) == []
    report, _ = check_json(folder)
    # A PEFT repo needs no config.json: no false file-unreadable.
    assert "file-unreadable" not in {f["rule"] for f in report["findings"]}, report["findings"]
    assert report["lineage"]["family"] == "smollm2" and "adapter" in report["lineage"]["evidence"]


def test_local_base_path_as_peft_writes_it(adapter, tmp_path):
    folder = copy_adapter(adapter, tmp_path, base=None)
    assert read_json(folder / "adapter_config.json")["base_model_name_or_path"].startswith("/")
    [finding] = findings(folder)
    assert "a folder of the machine that trained it" in finding.message and SMOLLM2 in finding.message
    assert str(finding.fix.applicability) == "unsafe"
    run_cli("fix", "--unsafe-fixes", str(folder))
    assert read_json(folder / "adapter_config.json")["base_model_name_or_path"] == SMOLLM2 and findings(folder) == []


def test_rank_that_differs_from_the_weights(adapter, base_model, tmp_path):
    folder = copy_adapter(adapter, tmp_path, r=16)
    with pytest.raises(RuntimeError, match="size mismatch"):
        peft_loads(base_model, folder)
    [finding] = findings(folder)
    assert str(finding.severity) == "error" and "rank 8 but adapter_config.json gives r=16" in finding.message


def test_a_lora_weight_that_is_not_a_matrix(adapter, base_model, tmp_path):
    """A scalar lora_A (shape []) crashed ADP001 (IndexError, exit 2); PEFT's load fails on it."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = copy_adapter(adapter, tmp_path)
    tensors = load_file(folder / "adapter_model.safetensors")
    name = sorted(k for k in tensors if k.endswith("lora_A.weight"))[0]
    tensors[name] = torch.zeros((), dtype=tensors[name].dtype)
    save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
    with pytest.raises(RuntimeError, match="size mismatch"):
        peft_loads(base_model, folder)
    [finding] = findings(folder)
    assert str(finding.severity) == "error" and "1 LoRA module(s) save A or B as something other than a matrix" \
        in finding.message and "A []" in finding.message


def test_targets_without_weights_and_weights_without_targets(adapter, tmp_path):
    folder = copy_adapter(adapter, tmp_path, target_modules=["q_proj", "v_proj", "query_key_value"])
    [finding] = findings(folder)
    assert "names query_key_value but the adapter holds no LoRA weights" in finding.message
    folder2 = copy_adapter(adapter, tmp_path / "b", target_modules=["q_proj"])
    [finding] = findings(folder2)
    assert "LoRA weights for 30 modules target_modules does not match" in finding.message


def test_base_of_another_size(adapter, tmp_path):
    folder = copy_adapter(adapter, tmp_path, base="Qwen/Qwen3-8B", card_base="Qwen/Qwen3-8B")
    [finding] = findings(folder)
    assert str(finding.severity) == "error" and "does not fit Qwen/Qwen3-8B (hidden size 4096" in finding.message
    assert "reads 576 features" in finding.message


def test_card_of_another_family(adapter, tmp_path):
    folder = copy_adapter(adapter, tmp_path, card_base="meta-llama/Llama-3.2-1B-Instruct")
    [finding] = findings(folder)
    assert str(finding.severity) == "error" and "model card's base_model is 'meta-llama/Llama-3.2-1B-Instruct'" \
        in finding.message


def test_quantized_base_copy(adapter, tmp_path):
    folder = copy_adapter(adapter, tmp_path, base="unsloth/SmolLM2-135M-Instruct-bnb-4bit", card_base=None)
    [finding] = findings(folder)
    assert "a quantized copy" in finding.message and f"({SMOLLM2})" in finding.message


def test_modules_to_save_is_refused_by_vllm(base_model, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_model)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["lm_head"],
                                                  task_type="CAUSAL_LM"))
    peft_model.save_pretrained(tmp_path / "raw")
    folder = copy_adapter(tmp_path / "raw", tmp_path)
    [finding] = findings(folder)
    assert "modules_to_save being None" in finding.message and "lm_head" in finding.message


def test_no_adapter_weights(adapter, tmp_path):
    folder = copy_adapter(adapter, tmp_path)
    (folder / "adapter_model.safetensors").unlink()
    [finding] = findings(folder)
    assert "no adapter_model.safetensors" in finding.message


def test_published_adapter_configs():
    """Base references in adapter configs people publish, against a hand label each."""
    corpus = read_json(CORPUS)
    said = {"local": "a folder of the machine", "quantized": "a quantized copy", "missing": "names no base"}
    cases = [(entry["config"].get("base_model_name_or_path"), entry["config"], entry["base_kind"], entry["repo"])
             for entry in corpus["files"]]
    cases += [(q["value"], {"base_model_name_or_path": q["value"], "peft_type": "LORA"}, q["base_kind"], q["source"])
              for q in corpus["quoted_values"]]
    import tempfile

    for _, config, kind, where in cases:
        with tempfile.TemporaryDirectory() as tmp:
            write_json(Path(tmp) / "adapter_config.json", config)
            messages = [f.message for f in findings(Path(tmp)) if "no adapter_model" not in f.message]
        base_messages = [m for m in messages if any(s in m for s in said.values())]
        if kind in ("hub", "not-an-adapter"):
            assert base_messages == [], (where, messages)
        else:
            assert len(base_messages) == 1 and said[kind] in base_messages[0], (where, messages)


def test_adapter_repo_on_the_hub_gets_what_it_gets_on_disk(adapter, tmp_path, monkeypatch):
    """An adapter repo served by a Hub on 127.0.0.1: the same findings as on disk, from its
    adapter_config.json and the adapter's header (ranged read), no config.json needed."""
    from hub_server import FakeHub, HubRepo, folder_files

    from hfdoctor.lint.check import Options, check_target

    folder = copy_adapter(adapter, tmp_path, r=16)
    server = FakeHub({"acme/smol-lora": HubRepo(folder_files(folder))}).start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    try:
        from_hub = check_target("acme/smol-lora", Options())
    finally:
        server.stop()
    on_disk = check_target(str(folder), Options())
    assert {(f.rule, f.file, f.message) for f in from_hub.findings} == {(f.rule, f.file, f.message) for f in on_disk.findings}
    assert any("rank 8 but adapter_config.json gives r=16" in f.message for f in from_hub.findings)
    assert "file-unreadable" not in {f.rule for f in from_hub.findings}


def test_added_tokens_beyond_the_base_embedding_without_saved_embeddings(adapter, base_model, smollm2_checkpoint,
                                                                          tmp_path):
    """A trainer that adds a token to the tokenizer, resizes the embeddings, but saves a LoRA without them
    (modules_to_save null): the base (its real config.json in --upstream) has 49,152 rows and the new id
    indexes past them. Not reported without the added token, nor when the embeddings are saved."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    upstream_dir = tmp_path / "upstream"
    (upstream_dir / SMOLLM2.replace("/", "--")).mkdir(parents=True)
    shutil.copy(smollm2_checkpoint / "config.json", upstream_dir / SMOLLM2.replace("/", "--") / "config.json")
    upstream = Upstream((upstream_dir,), use_cache=False, use_hub=False)

    def adp001(folder: Path):
        found, internal = run_rules(ModelRepo(folder, upstream=upstream), selected_rules(["ADP001"]))
        assert not internal, internal
        return [f for f in found if "embedding rows" in f.message]

    tokenizer = AutoTokenizer.from_pretrained(smollm2_checkpoint)
    folder = copy_adapter(adapter, tmp_path)
    tokenizer.save_pretrained(folder)
    assert adp001(folder) == []
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|tool_call|>"]})
    tokenizer.save_pretrained(folder)
    [finding] = adp001(folder)
    assert str(finding.severity) == "error" and "49,152 embedding rows" in finding.message
    assert "'<|tool_call|>' (49152)" in finding.message and "modules_to_save None" in finding.message
    # The harm, on the base PEFT loads: the new id indexes past its embedding.
    base = AutoModelForCausalLM.from_pretrained(base_model)
    with pytest.raises(IndexError):
        base(torch.tensor([tokenizer.convert_tokens_to_ids(["<|tool_call|>"])]))
    # Saved with the resized embeddings: nothing to report.
    base.resize_token_embeddings(len(tokenizer))
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj"], task_type="CAUSAL_LM",
                                                 modules_to_save=["embed_tokens", "lm_head"]))
    peft_model.save_pretrained(tmp_path / "with-embeddings")
    saved = copy_adapter(tmp_path / "with-embeddings", tmp_path / "b")
    tokenizer.save_pretrained(saved)
    assert adp001(saved) == []


def test_added_tokens_beyond_gemma2_rows_known_from_the_registry(tmp_path):
    """A published LoRA of google/gemma-2-2b-it (hwsonnn/mlb-gemma-llm, community corpus) adds <|im_start|> and
    <|im_end|> at ids 256000+ and saves no embeddings. Without the base's files, the registry knows every
    Gemma 2 release has 256,000 embedding rows: an error. Not reported when the embeddings are saved."""
    import sys

    sys.path.insert(0, str(TESTS / "corpus"))
    import community_load
    from weights_util import write_sparse_safetensors

    folder = community_load.materialise_one("hwsonnn__mlb-gemma-llm__lora_adapter", tmp_path)
    lora = {f"base_model.model.model.layers.{i}.self_attn.q_proj.lora_{ab}.weight": shape
            for i in range(26) for ab, shape in (("A", (8, 2304)), ("B", (2048, 8)))}
    write_sparse_safetensors(folder / "adapter_model.safetensors", lora)
    offline = Upstream((), use_cache=False, use_hub=False)
    found = [f for f in rules_alone(folder, ["ADP001"], offline) if "embedding rows" in f.message]
    assert [str(f.severity) for f in found] == ["error"], found
    assert "256,000 embedding rows of its base google/gemma-2-2b-it (hfdoctor's registry" in found[0].message
    assert "'<|im_start|>'" in found[0].message
    write_sparse_safetensors(folder / "adapter_model.safetensors",
                             {**lora, "base_model.model.model.embed_tokens.weight": (256004, 2304)})
    assert [f for f in rules_alone(folder, ["ADP001"], offline) if "embedding rows" in f.message] == []
