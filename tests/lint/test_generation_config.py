"""generation-config: the defaults servers generate with, on real upstream files and broken copies."""

from __future__ import annotations

from pathlib import Path

from conftest import UPSTREAM, check_json, read_json, rules_alone, run_cli, write_json
from hfdoctor.knowledge.upstream import Upstream
from weights_util import model_tensors, upstream_weight_map, write_checkpoint

OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)


def findings(folder: Path, code: str = "CFG004"):
    return rules_alone(folder, [code], OFFLINE)


def with_weights(folder: Path) -> Path:
    """Give an upstream copy its (sparse) weights, so it is a checkpoint, not a metadata folder."""
    write_checkpoint(folder, model_tensors(folder / "config.json"), upstream_weight_map(folder))
    return folder


def test_silent_on_every_upstream_folder_but_phi4():
    for folder in sorted(p for p in UPSTREAM.iterdir() if p.is_dir()):
        found = findings(folder)
        if folder.name == "microsoft--phi-4":
            # True: config.json's eos is <|endoftext|> only; mlx-lm before 0.30.1 never stops on
            # <|im_end|>. Newer mlx-lm reads generation_config.json: info.
            assert [(f.file, str(f.severity)) for f in found] == [("config.json", "info")]
            assert "0.30.1" in found[0].message
            assert "100265" in found[0].message and found[0].fix is not None
        else:
            assert not found, (folder.name, [f.message for f in found])


def test_missing_generation_config_on_a_chat_checkpoint(copy_upstream):
    """LLaMA-Factory #7454: exported without generation_config.json, config.json's eos is <|endoftext|>."""
    folder = with_weights(copy_upstream("Qwen--Qwen3-8B"))
    (folder / "generation_config.json").unlink()
    config = read_json(folder / "config.json")
    config["eos_token_id"] = 151643
    write_json(folder / "config.json", config)
    [finding] = findings(folder)
    assert finding.file == "generation_config.json" and str(finding.severity) == "warning"
    assert "never on the end-of-turn '<|im_end|>' (151645)" in finding.message
    assert "temperature=0.6" in finding.message and "Qwen/Qwen3-8B generation_config.json" in finding.message
    proc = run_cli("fix", str(folder))
    assert proc.returncode in (0, 1), proc.stderr
    created = read_json(folder / "generation_config.json")
    assert created == {"bos_token_id": 151643, "eos_token_id": [151643, 151645]}
    # The safe fix writes ids only; sampling changes how the model decodes, so it stays a choice.
    [left] = findings(folder)
    assert "decodes greedily" in left.message and str(left.fix.applicability) == "unsafe"
    report, _ = check_json(folder)
    assert "eos-not-end-of-turn" not in {f["rule"] for f in report["findings"]}
    run_cli("fix", "--unsafe-fixes", str(folder))
    assert read_json(folder / "generation_config.json")["temperature"] == 0.6 and not findings(folder)
    # A second run changes nothing (the sparse weights are never read: 16 GB of holes).
    metadata = [p for p in folder.iterdir() if p.is_file() and p.suffix != ".safetensors"]
    before = {p.name: p.read_bytes() for p in metadata}
    run_cli("fix", "--unsafe-fixes", str(folder))
    assert before == {p.name: p.read_bytes() for p in metadata}


def test_missing_generation_config_is_silent_without_weights_or_on_a_base_model(copy_upstream):
    metadata_only = copy_upstream("Qwen--Qwen3-8B")
    (metadata_only / "generation_config.json").unlink()
    assert not findings(metadata_only)  # a metadata folder, not a checkpoint: the file may live elsewhere
    base = with_weights(copy_upstream("Qwen--Qwen3-4B-Base"))
    (base / "generation_config.json").unlink()
    assert not findings(base)  # a base model stops on its eos, and has no chat defaults to lose


def test_end_of_turn_only_in_generation_config(copy_upstream):
    folder = copy_upstream("meta-llama--Llama-3.1-8B-Instruct")
    config = read_json(folder / "config.json")
    config["eos_token_id"] = 128001
    write_json(folder / "config.json", config)
    [finding] = findings(folder)
    assert finding.file == "config.json" and "'<|eot_id|>' (128009)" in finding.message and "mlx-lm" in finding.message
    run_cli("fix", str(folder))
    assert read_json(folder / "config.json")["eos_token_id"] == [128001, 128009]
    assert not findings(folder)


def test_sampling_flags_without_do_sample(copy_upstream):
    """transformers #29988: do_sample false with temperature/top_p: 4.x cannot save_pretrained it."""
    from transformers import GenerationConfig

    folder = copy_upstream("Qwen--Qwen3-8B")
    gen = read_json(folder / "generation_config.json")
    gen["do_sample"] = False
    write_json(folder / "generation_config.json", gen)
    [finding] = findings(folder)
    assert "temperature=0.6, top_p=0.95, top_k=20" in finding.message and "save_pretrained" in finding.message
    assert str(finding.fix.applicability) == "unsafe"
    assert run_cli("fix", str(folder)).returncode in (0, 1)
    assert read_json(folder / "generation_config.json")["do_sample"] is False  # unsafe: not without --unsafe-fixes
    run_cli("fix", "--unsafe-fixes", str(folder))
    fixed = read_json(folder / "generation_config.json")
    assert fixed == {**gen, "do_sample": True}
    GenerationConfig.from_pretrained(folder).validate(strict=True)
    assert not findings(folder)


def test_greedy_reasoning_model(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    original = read_json(folder / "generation_config.json")
    greedy = {k: v for k, v in original.items() if k not in ("do_sample", "temperature", "top_p", "top_k")}
    write_json(folder / "generation_config.json", greedy)
    [finding] = findings(folder)
    assert "decodes greedily" in finding.message and "mlx-lm #139" in finding.message
    run_cli("fix", "--unsafe-fixes", str(folder))
    assert read_json(folder / "generation_config.json") == original
    assert not findings(folder)
    # Llama 3.1 Instruct is not a reasoning model: greedy defaults are the author's choice.
    llama = copy_upstream("meta-llama--Llama-3.1-8B-Instruct")
    gen = read_json(llama / "generation_config.json")
    write_json(llama / "generation_config.json", {k: v for k, v in gen.items() if k not in ("do_sample", "temperature", "top_p")})
    assert not findings(llama)