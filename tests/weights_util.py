"""Write sparse safetensors checkpoints for tests and benchmarks.

The header is real (names, dtypes, shapes, offsets); the data region is a hole made by
os.truncate, so a full-size 8B checkpoint takes no disk and any read of tensor data is
visible (slow, and in /proc/<pid>/io rchar). Names and shapes come from transformers'
models built on the meta device from the real upstream configs, independently of
hfdoctor's own code.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import threading
from functools import lru_cache
from pathlib import Path

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "U8": 1, "I8": 1, "I32": 4, "U32": 4, "F8_E4M3": 1}


@lru_cache(maxsize=None)
def _meta_state(config_json: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    config = AutoConfig.for_model(**json.loads(config_json))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    # save_pretrained leaves tied weights out of the checkpoint.
    tied = set(getattr(model, "all_tied_weights_keys", None) or ())
    return tuple((name, tuple(t.shape)) for name, t in model.state_dict().items() if name not in tied)


def model_tensors(config_path: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """name -> shape of the checkpoint save_pretrained would write for this config.json."""
    text = Path(config_path).read_text(encoding="utf-8")
    return dict(_meta_state(json.dumps(json.loads(text), sort_keys=True)))


def header_bytes(tensors: dict[str, tuple[int, ...]], dtype: str = "BF16", metadata: dict | None = None) -> tuple[bytes, int]:
    """(8-byte length + JSON header, data size) with tensors laid out back to back."""
    header: dict = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name, shape in tensors.items():
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes
    return struct.pack("<Q", len(raw)) + raw, offset


def write_mixed_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]],
                            metadata: dict | None = None) -> int:
    """Like write_sparse_safetensors, with a dtype per tensor: name -> (dtype, shape)."""
    header: dict = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + offset)
    return offset


def write_sparse_safetensors(path: Path, tensors: dict[str, tuple[int, ...]], dtype: str = "BF16") -> int:
    """Write a safetensors file whose data region is a hole; returns the tensors' byte total."""
    head, data_size = header_bytes(tensors, dtype)
    with open(path, "wb") as f:
        f.write(head)
    os.truncate(path, len(head) + data_size)
    return data_size


def write_checkpoint(
    dest: Path,
    tensors: dict[str, tuple[int, ...]],
    weight_map: dict[str, str] | None = None,
    shards: int = 1,
    dtype: str = "BF16",
) -> dict[str, str]:
    """Write `tensors` as sparse shards (+ model.safetensors.index.json when sharded).

    weight_map (tensor -> shard file, e.g. from a real upstream index) decides the
    sharding; tensors it does not name go to the last shard. Otherwise `shards` files
    are cut in order, named like save_pretrained does. Returns the weight map written.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if weight_map is None:
        names = list(tensors)
        if shards == 1:
            write_sparse_safetensors(dest / "model.safetensors", tensors, dtype)
            return {n: "model.safetensors" for n in names}
        per = math.ceil(len(names) / shards)
        weight_map = {n: f"model-{i // per + 1:05d}-of-{shards:05d}.safetensors" for i, n in enumerate(names)}
    else:
        last = sorted(set(weight_map.values()))[-1]
        weight_map = {n: weight_map.get(n, last) for n in tensors}
    by_file: dict[str, dict[str, tuple[int, ...]]] = {}
    for name, file in weight_map.items():
        by_file.setdefault(file, {})[name] = tensors[name]
    total = 0
    for file, part in sorted(by_file.items()):
        total += write_sparse_safetensors(dest / file, part, dtype)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return weight_map


def upstream_weight_map(folder: Path) -> dict[str, str] | None:
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return None
    return json.loads(index.read_text())["weight_map"]


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict[str, int]]:
    """Run a command; return its result and its /proc/<pid>/io counters at exit.

    The child is waited for with WNOWAIT, so its /proc entry (and io accounting) is still
    there to read before it is reaped. rchar: bytes returned by read()-like calls (page
    cache and sparse holes included); read_bytes: bytes fetched from the block device.
    """
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    # Drain the pipes in threads so a large output cannot block the child.
    out: dict[str, bytes] = {}
    threads = [
        threading.Thread(target=lambda k=k, s=s: out.__setitem__(k, s.read()))
        for k, s in (("stdout", proc.stdout), ("stderr", proc.stderr))
    ]
    for t in threads:
        t.start()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    counters: dict[str, int] = {}
    with open(f"/proc/{proc.pid}/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            counters[key.strip()] = int(value)
    proc.wait()
    for t in threads:
        t.join()
    result = subprocess.CompletedProcess(cmd, proc.returncode, out["stdout"].decode(), out["stderr"].decode())
    return result, counters
