"""A random-weight checkpoint of a real model's shape, for the probe benches.

The metadata folder of a real model (config.json, tokenizer files, chat template; no weights) plus bf16 weights
drawn from N(0, 0.02) with seed 0, built on the GPU when there is one. Config fields can be overridden
(num_hidden_layers=1 hidden_size=64 makes a CPU-sized copy of the same vocabulary and template). The weights
know nothing: they never think, never stop, and their sampling distributions are nearly flat. They measure
load time, memory and decode speed, never behaviour. (The same recipe as ../shared/gpu/make_random.py, here so
that the benches need nothing outside the repository but the metadata.)
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

COPIED_SUFFIXES = (".json", ".jinja", ".txt", ".md")


def build(src: Path, dest: Path, overrides: dict[str, int] | None = None, device: str | None = None,
          tokenizer_from: Path | None = None) -> dict[str, Any]:
    """Write the checkpoint into `dest`; return what was built (params, bytes, seconds, device).

    tokenizer_from: another metadata folder whose tokenizer and template to use (a config-only folder such as
    Qwen3-30B-A3B's takes Qwen3-8B's: the same vocabulary)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    dest.mkdir(parents=True, exist_ok=True)
    for folder in (tokenizer_from, src):
        for f in folder.iterdir() if folder else ():
            if f.is_file() and f.suffix in COPIED_SUFFIXES and "index" not in f.name:
                shutil.copy(f, dest / f.name)
    if overrides:
        config = json.loads((dest / "config.json").read_text())
        config.update(overrides)
        if "layer_types" in config:
            config["layer_types"] = config["layer_types"][: config["num_hidden_layers"]]
        (dest / "config.json").write_text(json.dumps(config, indent=2))
    generation = next(((f / "generation_config.json").read_text() for f in (src, tokenizer_from)
                       if f and (f / "generation_config.json").is_file()), None)
    config = AutoConfig.from_pretrained(dest)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    started = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    for p in model.parameters():
        p.data.normal_(0, 0.02)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(dest, max_shard_size="5GB")
    if generation is not None:  # save_pretrained writes its own; the eos ids must stay upstream's
        (dest / "generation_config.json").write_text(generation)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {"params": params, "bytes_bf16": 2 * params, "build_s": round(time.perf_counter() - started, 1),
            "device": device}


def bytes_read_per_token(config: dict[str, Any], weights_bytes: int) -> int:
    """What decoding one token at batch 1 must read from memory at least: every weight once, except the
    embedding table (one row is gathered) and, for a mixture of experts, the experts not routed to."""
    text = config.get("text_config") or config
    vocab, hidden = text["vocab_size"], text["hidden_size"]
    dtype_bytes = 2
    per_token = weights_bytes
    if not text.get("tie_word_embeddings", False):
        per_token -= vocab * hidden * dtype_bytes
    experts, routed = text.get("num_experts"), text.get("num_experts_per_tok")
    if experts and routed:
        expert_bytes = 3 * hidden * text["moe_intermediate_size"] * dtype_bytes  # gate, up, down
        per_token -= text["num_hidden_layers"] * (experts - routed) * expert_bytes
    return per_token
