"""GGUF files, read from their header alone: metadata (chat template, tokens) and tensor shapes.

A GGUF file is `GGUF`, a version, the tensor and key-value counts, the key-value pairs
(architecture, tokenizer, chat template...), the tensor descriptions, then the tensor
data. llama.cpp's gguf package maps the whole file into memory; this reader reads the
header only, through a source (a file on disk, a Hub file by HTTP range), with a bound
on every count and length, so a hostile header is a finding, not a MemoryError or an
endless loop. Versions 2 and 3 (64-bit counts) are read; version 1 is refused.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import IO, Any

from hfdoctor.sources.base import Source, Unreadable

MAGIC = b"GGUF"
MAX_HEADER_BYTES = 512 * 1024 * 1024  # a 256k vocabulary with merges is ~20 MB
MAX_COUNT = 16_000_000  # keys, tensors, array elements
MAX_STRING = 64 * 1024 * 1024
MAX_DIMS = 8
# value type -> struct format (strings, arrays and bools are handled apart)
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY, BOOL = 8, 9, 7
# ggml tensor types hfdoctor names in messages (the rest are shown by number).
GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
              11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 24: "I8", 25: "I16", 26: "I32",
              27: "I64", 28: "F64", 30: "BF16", 39: "MXFP4"}


class GGUFError(Exception):
    """A GGUF header no loader can read; the message completes "<file> ..."."""


@dataclass(frozen=True)
class GgufTensor:
    name: str
    shape: tuple[int, ...]  # as GGUF stores it (fastest-varying dimension first)
    ggml_type: int
    offset: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.ggml_type, f"type {self.ggml_type}")


@dataclass(frozen=True)
class GgufHeader:
    file: str
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, GgufTensor]
    header_bytes: int

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    def arch_value(self, key: str) -> Any:
        """`<architecture>.<key>` (llama.block_count, llama.embedding_length...)."""
        return self.metadata.get(f"{self.architecture}.{key}") if self.architecture else None

    @property
    def tokens(self) -> list[str]:
        value = self.metadata.get("tokenizer.ggml.tokens")
        return value if isinstance(value, list) else []


class _Reader:
    def __init__(self, handle: IO[bytes]):
        self.handle = handle
        self.read_bytes = 0

    def take(self, n: int) -> bytes:
        if self.read_bytes + n > MAX_HEADER_BYTES:
            raise GGUFError(f"has a header larger than the {MAX_HEADER_BYTES // (1024 * 1024)} MB hfdoctor reads")
        data = self.handle.read(n)
        if len(data) != n:
            raise GGUFError(f"is truncated inside its header (at byte {self.read_bytes + len(data):,})")
        self.read_bytes += n
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, what: str) -> int:
        n = self.unpack("<Q")
        if n > MAX_COUNT:
            raise GGUFError(f"declares {n:,} {what}, more than any real model has: the header is corrupt")
        return n

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > MAX_STRING:
            raise GGUFError(f"declares a string of {n:,} bytes: the header is corrupt")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as err:
            raise GGUFError(f"has a string that is not UTF-8 (byte {err.start})") from None

    def value(self, kind: int, depth: int = 0) -> Any:
        if kind in SCALARS:
            return self.unpack(SCALARS[kind])
        if kind == BOOL:
            return self.take(1) != b"\0"
        if kind == STRING:
            return self.string()
        if kind == ARRAY and depth == 0:
            item = self.unpack("<I")
            n = self.count("array elements")
            if item in SCALARS:  # numbers: one read, not one call per element
                size = struct.calcsize(SCALARS[item])
                data = self.take(size * n)
                return list(struct.unpack(f"<{n}{SCALARS[item][1]}", data))
            return [self.value(item, depth + 1) for _ in range(n)]
        raise GGUFError(f"has a value of unknown type {kind}")


def parse_gguf(handle: IO[bytes], rel: str) -> GgufHeader:
    """Read a GGUF header from an open binary file; GGUFError for anything a loader would refuse."""
    reader = _Reader(handle)
    if reader.take(4) != MAGIC:
        raise GGUFError("does not start with the GGUF magic: it is not a GGUF file")
    version = reader.unpack("<I")
    if version not in (2, 3):
        raise GGUFError(f"is GGUF version {version}; hfdoctor reads versions 2 and 3")
    tensor_count = reader.count("tensors")
    kv_count = reader.count("metadata keys")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = reader.string()
        metadata[key] = reader.value(reader.unpack("<I"))
    tensors: dict[str, GgufTensor] = {}
    for _ in range(tensor_count):
        name = reader.string()
        n_dims = reader.unpack("<I")
        if n_dims > MAX_DIMS:
            raise GGUFError(f"tensor {name!r} declares {n_dims} dimensions")
        shape = tuple(reader.unpack("<Q") for _ in range(n_dims))
        tensors[name] = GgufTensor(name, shape, reader.unpack("<I"), reader.unpack("<Q"))
    return GgufHeader(rel, version, metadata, tensors, reader.read_bytes)


def read_gguf_metadata(source: Source, rel: str) -> GgufHeader:
    """The header of the GGUF file `rel` of `source` (GGUFError when unreadable)."""
    try:
        with source.open(rel) as raw:
            handle = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw, 1 << 20)
            return parse_gguf(handle, rel)
    except Unreadable as err:
        raise GGUFError(str(err)) from None
    except (OSError, struct.error) as err:
        raise GGUFError(f"cannot be read: {err}") from None
