"""Write small GGUF files with llama.cpp's own writer (the gguf package), from upstream tokenizers.

The file holds what convert_hf_to_gguf.py writes for the tokenizer and template (model,
pre-tokenizer, tokens, token types, merges, special ids, add_bos, chat template) and one
tiny tensor; no weights are needed by the rules that read GGUF metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CONTROL, NORMAL, USER_DEFINED = 3, 1, 4


def write_gguf(path: Path, upstream: Path, template: str | None, arch: str = "qwen3",
               eos: str | None = None, extra: dict | None = None) -> Path:
    """A GGUF of `upstream`'s tokenizer (tokenizer.json + tokenizer_config.json) and `template`."""
    import gguf

    tok = json.loads((upstream / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((upstream / "tokenizer_config.json").read_text(encoding="utf-8"))
    vocab = dict(tok["model"]["vocab"])
    added = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}
    vocab.update(added)
    size = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [USER_DEFINED] * size
    for token, i in vocab.items():
        tokens[i] = token
        types[i] = CONTROL if token in added else NORMAL
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(upstream.name)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    merges = tok["model"].get("merges", [])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    eos_token = eos or (config.get("eos_token") if isinstance(config.get("eos_token"), str) else None)
    if eos_token:
        writer.add_eos_token_id(vocab[eos_token])
    pad = config.get("pad_token")
    if isinstance(pad, str) and pad in vocab:
        writer.add_pad_token_id(vocab[pad])
    writer.add_add_bos_token(False)
    if template is not None:
        writer.add_chat_template(template)
    for key, value in (extra or {}).items():
        writer.add_string(key, value)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
