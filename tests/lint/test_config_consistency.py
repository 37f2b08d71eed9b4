"""config-inconsistent on upstream configs, broken copies, and tiny real models whose loading shows the harm."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import UPSTREAM, read_json, rules_alone, run_cli, write_json
from hfdoctor.knowledge.upstream import Upstream
from weights_util import model_tensors, upstream_weight_map, write_checkpoint

OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)


def findings(folder: Path, code: str = "CFG005"):
    return rules_alone(folder, [code], OFFLINE)


def tiny_model(folder: Path, tie: bool):
    """A tiny random Llama saved by transformers (weights are real safetensors)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=2,
                         num_hidden_layers=1, vocab_size=128, tie_word_embeddings=tie)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    return model


def rewrite_weights(folder: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def load_info(folder: Path):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    return AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)


def test_upstream_configs():
    """Silent everywhere but SmolLM3's use_cache: false (info: it ships a generation_config.json)."""
    for folder in sorted(p for p in UPSTREAM.iterdir() if p.is_dir()):
        found = findings(folder)
        if folder.name == "HuggingFaceTB--SmolLM3-3B":
            assert [(f.pointer, str(f.severity)) for f in found] == [("/use_cache", "info")]
        else:
            assert not found, (folder.name, [f.message for f in found])


def test_untied_config_without_lm_head(tmp_path):
    folder = tmp_path / "untied"
    tiny_model(folder, tie=False)
    assert not findings(folder)
    rewrite_weights(folder, lambda t: t.pop("lm_head.weight"))
    _, info = load_info(folder)
    assert "lm_head.weight" in info["missing_keys"]  # transformers initialises it at random
    [finding] = findings(folder)
    assert str(finding.severity) == "error" and "at random" in finding.message
    assert str(finding.fix.applicability) == "unsafe"
    report = findings(folder, "WGT003")
    assert not report  # one finding for one cause: config-inconsistent owns the absent head
    run_cli("fix", "--unsafe-fixes", str(folder))
    _, info = load_info(folder)
    assert not info["missing_keys"] and not findings(folder)


def test_tied_config_with_a_trained_lm_head(tmp_path):
    import torch

    folder = tmp_path / "tied"
    model = tiny_model(folder, tie=True)
    head = torch.randn_like(model.model.embed_tokens.weight)
    rewrite_weights(folder, lambda t: t.__setitem__("lm_head.weight", head.clone()))
    loaded, _ = load_info(folder)
    # transformers 5 loads the shipped head untied; 4.46 (checked by hand) ties it to the
    # embedding and never reads it: the same files give different logits.
    assert torch.equal(loaded.lm_head.weight, head) and loaded.lm_head.weight is not loaded.model.embed_tokens.weight
    [finding] = findings(folder)
    assert str(finding.severity) == "warning" and "transformers 4.x and vLLM tie" in finding.message
    run_cli("fix", "--unsafe-fixes", str(folder))
    assert read_json(folder / "config.json")["tie_word_embeddings"] is False
    loaded, _ = load_info(folder)
    assert torch.equal(loaded.lm_head.weight, head) and not findings(folder)


def test_declared_dtype_differs_from_the_weights(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    write_checkpoint(folder, model_tensors(folder / "config.json"), upstream_weight_map(folder))
    assert not findings(folder)
    config = read_json(folder / "config.json")
    config["torch_dtype"] = "float16"
    write_json(folder / "config.json", config)
    [finding] = findings(folder)
    assert "'float16'" in finding.message and "100% of the weights are bfloat16" in finding.message
    assert "overflows" in finding.message
    run_cli("fix", str(folder))
    assert read_json(folder / "config.json")["torch_dtype"] == "bfloat16" and not findings(folder)


def test_llama3_rope_missing_keys(copy_upstream):
    from transformers import AutoConfig

    folder = copy_upstream("meta-llama--Llama-3.1-8B-Instruct")
    config = read_json(folder / "config.json")
    del config["rope_scaling"]["low_freq_factor"]
    write_json(folder / "config.json", config)
    with pytest.raises(KeyError):
        AutoConfig.from_pretrained(folder)
    [finding] = findings(folder)
    assert str(finding.severity) == "error" and "low_freq_factor" in finding.message and finding.fix is None


def test_yarn_without_original_length(copy_upstream):
    """Qwen3's README extends context with yarn; without original_max_position_embeddings
    transformers 5 takes max_position_embeddings (40960) as the original length."""
    from transformers import AutoConfig

    folder = copy_upstream("Qwen--Qwen3-8B")
    config = read_json(folder / "config.json")
    config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    write_json(folder / "config.json", config)
    assert AutoConfig.from_pretrained(folder).rope_parameters["original_max_position_embeddings"] == 40960
    [finding] = findings(folder)
    assert "original_max_position_embeddings" in finding.message and "40960" in finding.message
    config["rope_scaling"]["original_max_position_embeddings"] = 32768
    write_json(folder / "config.json", config)
    assert not findings(folder)


def test_use_cache_false(tmp_path):
    """Without generation_config.json, generate() recomputes the whole sequence per token."""
    import torch

    folder = tmp_path / "nocache"
    tiny_model(folder, tie=False)
    config = read_json(folder / "config.json")
    config["use_cache"] = False
    write_json(folder / "config.json", config)
    (folder / "generation_config.json").unlink()

    def step_lengths() -> list[int]:
        model, _ = load_info(folder)
        lengths: list[int] = []
        model.model.register_forward_pre_hook(
            lambda _m, _a, kw: lengths.append(kw["input_ids"].shape[1] if kw.get("input_ids") is not None
                                              else kw["inputs_embeds"].shape[1]), with_kwargs=True)
        model.generate(torch.tensor([[5, 6, 7, 8]]), max_new_tokens=3, do_sample=False, pad_token_id=0)
        return lengths

    assert step_lengths() == [4, 5, 6]
    [finding] = findings(folder)
    assert str(finding.severity) == "warning" and "KV cache" in finding.message
    run_cli("fix", str(folder))
    assert step_lengths() == [4, 1, 1] and not findings(folder)
