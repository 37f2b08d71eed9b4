"""GGUF files, read from their header alone: metadata (chat template, tokens) and tensor shapes.

A GGUF file is `GGUF`, a version, the tensor and key-value counts, the key-value pairs
(architecture, tokenizer, chat template...), the tensor descriptions, then the tensor
data. llama.cpp's gguf package maps the whole file into memory; this reader reads the
header only, through a source (a file on disk, a Hub file by HTTP range), with a bound
on every count and length, so a hostile header is a finding, not a MemoryError or an
endless loop. Versions 2 and 3 (64-bit counts) are read; version 1 is refused.

Every length and count is checked against the bytes left (of the file and of the header
bound) before anything is allocated from it: an array of 2**40 strings in a 1 MB file is
refused at once. Only the arrays hfdoctor reads are kept (`tokenizer.ggml.tokens` and
`token_type`); the others (merges, scores: the bulk of a header) are walked and dropped,
numbers by one read. A copy of a file is told equal by its size and header bytes
(`header_digest`; hfdoctor.repo.gguf_tokenizer reads equal files once).

What is kept is bounded per repository, not only per file (`KeptArrays`): a vocabulary of more
than MAX_VOCABULARY strings is walked and dropped like merges, an array equal to one kept
already (the same vocabulary in another quantization) is that array, and the distinct strings
kept across the repository's files stop at MAX_KEPT_STRINGS. Three files of two million tokens
each held two gigabytes.
"""

from __future__ import annotations

import hashlib
import io
import struct
import time
from dataclasses import dataclass
from typing import IO, Any

from hfdoctor.sources.base import Source, Unreadable

MAGIC = b"GGUF"
MAX_HEADER_BYTES = 128 * 1024 * 1024  # a 256k vocabulary with merges is ~20 MB
MAX_COUNT = 4_000_000  # tensors, array elements (15 times the largest real vocabulary)
# Strings in all the metadata arrays of one header: a 262k vocabulary and 500k merges are
# under a million; walking each costs about a microsecond.
MAX_STRINGS = 4_000_000
MAX_KEYS = 65_536  # metadata keys: real files have 20 to 60 (and a few named templates)
MAX_STRING = 64 * 1024 * 1024
# The metadata arrays read into memory; any other array is walked and dropped.
KEPT_ARRAYS = frozenset({"tokenizer.ggml.tokens", "tokenizer.ggml.token_type"})
# Strings of one kept array (4 times the largest real vocabulary: 262,144), and of all the distinct
# kept arrays of one repository's GGUF files (a vocabulary costs about 150 bytes a token once
# read and indexed).
MAX_VOCABULARY = 1_000_000
MAX_KEPT_STRINGS = 2_000_000
MIN_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 8: 8, 9: 12, 10: 8, 11: 8, 12: 8}  # bytes per element
MAX_DIMS = 8
# value type -> struct format (strings, arrays and bools are handled apart)
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY, BOOL = 8, 9, 7


class GGUFError(Exception):
    """A GGUF header no loader can read; the message completes "<file> ..."."""

    read_bytes: int = 0


@dataclass(frozen=True)
class GgufTensor:
    name: str
    shape: tuple[int, ...]  # as GGUF stores it (fastest-varying dimension first)
    ggml_type: int
    offset: int


@dataclass(frozen=True)
class DroppedArray:
    """A metadata array that was walked but not kept (merges, scores...)."""

    item_type: int
    count: int


@dataclass(frozen=True)
class GgufHeader:
    file: str
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, GgufTensor]
    header_bytes: int
    # arrays it holds that were walked but not kept past a bound: (metadata key, why)
    dropped: tuple[tuple[str, str], ...] = ()

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    @property
    def tokens(self) -> list[str]:
        value = self.metadata.get("tokenizer.ggml.tokens")
        return value if isinstance(value, list) else []


class KeptArrays:
    """The metadata arrays kept from one repository's GGUF files: equal arrays are one list, and
    the distinct strings kept stop at MAX_KEPT_STRINGS."""

    def __init__(self) -> None:
        self._by_length: dict[int, list[list]] = {}
        self.strings = 0

    def can_keep(self, n: int, strings: bool) -> bool:
        return n <= MAX_VOCABULARY and (not strings or self.strings + n <= MAX_KEPT_STRINGS)

    def share(self, values: list, strings: bool) -> list:
        """`values`, or the equal list kept before it (compared at C speed, only with lists of its length)."""
        same_length = self._by_length.setdefault(len(values), [])
        for kept in same_length:
            if kept == values:
                return kept
        same_length.append(values)
        if strings:
            self.strings += len(values)
        return values


class _Reader:
    def __init__(self, handle: IO[bytes], size: int | None = None, deadline: float | None = None,
                 kept: KeptArrays | None = None):
        self.handle, self.deadline = handle, deadline
        self.read_bytes = 0
        self.limit = MAX_HEADER_BYTES if size is None else min(MAX_HEADER_BYTES, size)
        self.strings_left = MAX_STRINGS
        self.kept = kept if kept is not None else KeptArrays()
        self.dropped: list[tuple[int, str]] = []  # (count, why) of the arrays it would have kept

    def left(self) -> int:
        return self.limit - self.read_bytes

    def _check(self, n: int) -> None:
        if n > self.left():
            if self.read_bytes + n > MAX_HEADER_BYTES:
                raise GGUFError(f"has a header larger than the {MAX_HEADER_BYTES // (1024 * 1024)} MB hfdoctor reads")
            raise GGUFError(f"is truncated inside its header (at byte {self.read_bytes:,}: {n:,} more bytes "
                            "declared than the file holds)")

    def take(self, n: int) -> bytes:
        self._check(n)
        data = self.handle.read(n)
        if len(data) != n:
            raise GGUFError(f"is truncated inside its header (at byte {self.read_bytes + len(data):,})")
        self.read_bytes += n
        return data

    def skip(self, n: int) -> None:
        """Pass over n header bytes that are not kept (in 1 MB reads: the bytes must be there)."""
        while n > 0:
            n -= len(self.take(min(n, 1 << 20)))

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, what: str, element_size: int = 1, bound: int = MAX_COUNT) -> int:
        """A count, refused when it passes `bound` or when `element_size` bytes each cannot
        fit in what is left of the header: checked before anything is sized from it."""
        n = self.unpack("<Q")
        if n > bound:
            raise GGUFError(f"declares {n:,} {what}, more than any real model has: the header is corrupt")
        self._check(n * element_size)
        return n

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > MAX_STRING:
            raise GGUFError(f"declares a string of {n:,} bytes: the header is corrupt")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as err:
            raise GGUFError(f"has a string that is not UTF-8 (byte {err.start})") from None

    def strings(self, n: int, keep: bool) -> list[str]:
        """n strings, parsed from 1 MB blocks (a vocabulary is hundreds of thousands of them:
        one read each would be most of a check); the bytes read past the last are given back.
        All the string arrays of one header together hold at most MAX_STRINGS strings."""
        self.strings_left -= n
        if self.strings_left < 0:
            raise GGUFError(f"declares more than {MAX_STRINGS:,} strings in its metadata arrays, more than any real "
                            "model has: the header is corrupt")
        values: list[str] = []
        append, unpack_from = values.append, struct.unpack_from
        buffer, at, end = b"", 0, 0
        for i in range(n):
            if not i & 0xFFFF:
                self.tick(i)
            if at + 8 > end:
                buffer, at = buffer[at:] + self._block(8 - (end - at)), 0
                end = len(buffer)
            (length,) = unpack_from("<Q", buffer, at)
            at += 8
            if length:
                if length > MAX_STRING:
                    raise GGUFError(f"declares a string of {length:,} bytes: the header is corrupt")
                if at + length > end:
                    buffer, at = buffer[at:] + self._block(length - (end - at)), 0
                    end = len(buffer)
                if keep:
                    try:
                        append(buffer[at:at + length].decode("utf-8"))
                    except UnicodeDecodeError as err:
                        raise GGUFError(f"has a string that is not UTF-8 (byte {err.start})") from None
                at += length
            elif keep:
                append("")
        if end - at:
            self.handle.seek(at - end, io.SEEK_CUR)
            self.read_bytes -= end - at
        return values

    def _block(self, at_least: int) -> bytes:
        """At least `at_least` more header bytes, and up to 1 MB (never past the header bound)."""
        want = max(at_least, min(1 << 20, self.left()))
        if want > self.left():
            self._check(at_least)
            want = at_least
        data = self.handle.read(want)
        if len(data) < at_least:
            raise GGUFError(f"is truncated inside its header (at byte {self.read_bytes + len(data):,})")
        self.read_bytes += len(data)
        return data

    def tick(self, i: int) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise GGUFError("was not read to the end: the time budget of this check ran out in its header")

    def value(self, kind: int, keep: bool = True) -> Any:
        if kind in SCALARS:
            return self.unpack(SCALARS[kind])
        if kind == BOOL:
            return self.take(1) != b"\0"
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item = self.unpack("<I")
            if item not in MIN_SIZE or item == ARRAY:
                raise GGUFError(f"has an array of unknown type {item}")
            n = self.count("array elements", MIN_SIZE[item])
            if keep and not self.kept.can_keep(n, item == STRING):
                self.dropped.append((n, f"{n:,} values, past the {MAX_VOCABULARY:,} hfdoctor reads of one array"
                                     if n > MAX_VOCABULARY else f"the {MAX_KEPT_STRINGS:,} values hfdoctor keeps of "
                                     "a repository's GGUF vocabularies ran out"))
                keep = False
            if item in SCALARS:  # numbers: one read, not one call per element
                size = struct.calcsize(SCALARS[item])
                if not keep:
                    self.skip(size * n)
                    return DroppedArray(item, n)
                return self.kept.share(list(struct.unpack(f"<{n}{SCALARS[item][1]}", self.take(size * n))), False)
            if item == BOOL:
                data = self.take(n)
                return self.kept.share([b != 0 for b in data], False) if keep else DroppedArray(item, n)
            values = self.strings(n, keep)
            return self.kept.share(values, item == STRING) if keep else DroppedArray(item, n)
        raise GGUFError(f"has a value of unknown type {kind}")


def parse_gguf(handle: IO[bytes], rel: str, size: int | None = None, deadline: float | None = None,
               kept: KeptArrays | None = None) -> GgufHeader:
    """Read a GGUF header from an open binary file (of `size` bytes, when known: nothing is
    sized past it); GGUFError for anything a loader would refuse or a bound stops. `kept`: what
    the repository's other GGUF files kept already."""
    reader = _Reader(handle, size, deadline, kept)
    try:
        return _parse(reader, rel)
    except GGUFError as err:
        err.read_bytes = reader.read_bytes  # how much of the file decided it (an equal copy fails alike)
        raise


def _parse(reader: _Reader, rel: str) -> GgufHeader:
    if reader.take(4) != MAGIC:
        raise GGUFError("does not start with the GGUF magic: it is not a GGUF file")
    version = reader.unpack("<I")
    if version not in (2, 3):
        raise GGUFError(f"is GGUF version {version}; hfdoctor reads versions 2 and 3")
    tensor_count = reader.count("tensors", 24)  # name length, dimension count, type, offset
    kv_count = reader.count("metadata keys", 12, MAX_KEYS)
    metadata: dict[str, Any] = {}
    dropped: list[tuple[str, str]] = []
    for _ in range(kv_count):
        key = reader.string()
        metadata[key] = reader.value(reader.unpack("<I"), keep=key in KEPT_ARRAYS)
        if reader.dropped:
            dropped.append((key, reader.dropped.pop()[1]))
    tensors: dict[str, GgufTensor] = {}
    for i in range(tensor_count):
        if not i & 0xFFFF:
            reader.tick(i)
        name = reader.string()
        n_dims = reader.unpack("<I")
        if n_dims > MAX_DIMS:
            raise GGUFError(f"tensor {name!r} declares {n_dims} dimensions")
        shape = tuple(reader.unpack("<Q") for _ in range(n_dims))
        tensors[name] = GgufTensor(name, shape, reader.unpack("<I"), reader.unpack("<Q"))
    return GgufHeader(rel, version, metadata, tensors, reader.read_bytes, tuple(dropped))


def header_digest(handle: IO[bytes], nbytes: int) -> bytes | None:
    """A digest of a file's first `nbytes` bytes (None when it is shorter)."""
    digest, left = hashlib.blake2b(digest_size=20), nbytes
    while left > 0:
        chunk = handle.read(min(left, 1 << 20))
        if not chunk:
            return None
        digest.update(chunk)
        left -= len(chunk)
    return digest.digest()


def read_gguf_metadata(source: Source, rel: str, deadline: float | None = None,
                       kept: KeptArrays | None = None) -> GgufHeader:
    """The header of the GGUF file `rel` of `source` (GGUFError when unreadable)."""
    try:
        with source.open(rel) as raw:
            handle = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw, 1 << 20)
            return parse_gguf(handle, rel, file_size(handle), deadline, kept)
    except Unreadable as err:
        raise GGUFError(str(err)) from None
    except (OSError, struct.error) as err:
        raise GGUFError(f"cannot be read: {err}") from None


def file_size(handle: IO[bytes]) -> int | None:
    try:
        handle.seek(0, io.SEEK_END)
        size = handle.tell()
        handle.seek(0)
        return size
    except (OSError, ValueError):
        return None
