"""Record what real quantizers write: tests/corpus/quantized/<name>/{config.json,header.json}.

hfdoctor reads quantized weights from their safetensors headers alone, so the headers
(tensor names, dtypes, shapes) and config.json of a real quantizer's output are the
test data; the tensors themselves are not needed (tests rebuild sparse files from the
headers). This script quantizes one tiny random Llama (2 layers, hidden 128, the
SmolLM2 tokenizer's 49,152 tokens) with each quantizer that runs on a CPU:

- mlx-lm `convert(quantize=True)` (4-bit, group 64): the MLX format of lmstudio/mlx-community;
- compressed-tensors `ModelCompressor` pack-quantized (W4A16, group 32, lm_head ignored),
  with group-wise absmax scales (what a min-max observer computes);
- bitsandbytes 4-bit NF4 and 8-bit through transformers' BitsAndBytesConfig, saved by
  save_pretrained.

    pip install "mlx[cpu]" mlx-lm compressed-tensors bitsandbytes accelerate
    python tests/corpus/make_quantized.py --tokenizer DIR   # a folder with SmolLM2's tokenizer files

MANIFEST.json records the library versions. Nothing here runs in the test suite.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import tempfile
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent / "quantized"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def header_of(path: Path) -> dict:
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    return {
        "metadata": header.pop("__metadata__", None),
        "tensors": {name: {"dtype": t["dtype"], "shape": t["shape"]} for name, t in sorted(header.items())},
    }


def record(folder: Path, name: str) -> None:
    out = HERE / name
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(folder / "config.json", out / "config.json")
    shards = sorted(folder.glob("*.safetensors"))
    assert len(shards) == 1, shards
    (out / "header.json").write_text(json.dumps(header_of(shards[0]), indent=1) + "\n")


def tiny_model(folder: Path, tokenizer: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=2, vocab_size=49152, tie_word_embeddings=False)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer / name, folder / name)


def mlx(dense: Path, scratch: Path) -> None:
    from mlx_lm import convert

    convert(str(dense), mlx_path=str(scratch / "mlx"), quantize=True, q_group_size=64, q_bits=4)
    record(scratch / "mlx", "mlx-4bit")


def compressed(dense: Path, scratch: Path) -> None:
    import torch
    from compressed_tensors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig, QuantizationScheme,
                                                 apply_quantization_config)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(dense, dtype=torch.bfloat16)
    weights = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)
    config = QuantizationConfig(config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=weights)},
                                ignore=["lm_head"], format="pack-quantized")
    apply_quantization_config(model, config)
    for module in model.modules():
        if hasattr(module, "weight_scale"):
            w = module.weight.data.float()
            scale = w.reshape(w.shape[0], -1, 32).abs().amax(-1) / 7
            module.weight_scale.data.copy_(scale.to(module.weight_scale.dtype).reshape(module.weight_scale.shape))
            if hasattr(module, "weight_zero_point"):
                module.weight_zero_point.data.zero_()
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    compressor.compress_model(model)
    model.save_pretrained(scratch / "ct")
    compressor.update_config(str(scratch / "ct"))
    record(scratch / "ct", "compressed-tensors-w4a16")


def bitsandbytes(dense: Path, scratch: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    for name, config in (
        ("bitsandbytes-nf4", BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                bnb_4bit_compute_dtype=torch.bfloat16)),
        ("bitsandbytes-int8", BitsAndBytesConfig(load_in_8bit=True)),
    ):
        model = AutoModelForCausalLM.from_pretrained(dense, quantization_config=config, device_map="cpu")
        model.save_pretrained(scratch / name)
        record(scratch / name, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        tiny_model(scratch / "dense", args.tokenizer)
        record(scratch / "dense", "dense-bf16")
        mlx(scratch / "dense", scratch)
        compressed(scratch / "dense", scratch)
        bitsandbytes(scratch / "dense", scratch)
    libraries = ("torch", "transformers", "mlx", "mlx-lm", "compressed-tensors", "bitsandbytes", "accelerate")
    (HERE / "MANIFEST.json").write_text(json.dumps({
        "made_by": "tests/corpus/make_quantized.py",
        "model": "tiny random LlamaForCausalLM (2 layers, hidden 128, intermediate 256, 4 heads, 2 kv heads, "
                 "vocab 49152), bfloat16",
        "libraries": {name: version(name) for name in libraries},
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
