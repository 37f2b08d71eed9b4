"""Weight files, read from their headers alone: safetensors headers and git-lfs pointers.

A safetensors file is an 8-byte little-endian header length, a JSON header naming every
tensor (dtype, shape, byte range) and then the raw data. Everything hfdoctor says about
weights comes from those first kilobytes: the data region is never read, so checking a
16 GB checkpoint costs what reading its headers costs.

- `read_safetensors_header`: the header reader, as strict as the safetensors library
  itself (bounded length, JSON, dtypes, shapes, contiguous in-range offsets, file size).
- `repo_weights`: every weight file of a ModelRepo sorted into readable headers, broken
  files and git-lfs pointers, plus which files hold the model (the index's shards),
  cached on the repo.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hfdoctor.bounded import patterns
from hfdoctor.bounded.budget import Budget
from hfdoctor.bounded.parsing import too_many_values
from hfdoctor.sources.base import WEIGHT_SUFFIXES, Source, Unreadable
from hfdoctor.sources.local import LocalSource
from hfdoctor.repo.facts import fact

if TYPE_CHECKING:
    from hfdoctor.repo import ModelRepo

# The safetensors library refuses headers above 100 MB (MAX_HEADER_SIZE); so do we, before
# allocating anything, so that a length of 2**60 is a finding and not a MemoryError.
MAX_HEADER_BYTES = 100_000_000
# Bits per element of every dtype the safetensors format defines (sub-byte floats included).
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "I64": 64, "U64": 64, "F64": 64,
}
LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/"
# A git-lfs pointer is ~130 bytes; anything this large is real data.
LFS_POINTER_MAX_BYTES = 1024
INDEX_FILE = "model.safetensors.index.json"
BIN_INDEX_FILE = "pytorch_model.bin.index.json"
# The most tensors hfdoctor reads of one repository's headers: the largest published
# checkpoints hold ~100k (DeepSeek-V3 with its fp8 scales); a header with millions is a
# denial of service (~100 bytes of JSON each), left unread and said (check-incomplete).
MAX_REPO_TENSORS = 400_000
# model-00001-of-00005.safetensors: shards of a sharded checkpoint.
SHARD_NAME = patterns.compile(r"^(?P<stem>.+)-\d{5}-of-\d{5}\.safetensors$")


class WeightFileError(Exception):
    """A weight file that no loader can read; the message says why (for weights-unreadable)."""


class HeaderSkipped(Exception):
    """A header left unread: the repository's byte or time budget ran out (check-incomplete)."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    start: int  # data offsets, relative to the end of the header
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class SafetensorsHeader:
    file: str
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str] | None
    header_bytes: int  # the JSON header's length (the file starts with 8 + header_bytes of metadata)
    file_size: int


@dataclass(frozen=True)
class LfsPointer:
    file: str
    oid: str | None
    size: int | None


def _file_size(source: Source, rel: str) -> int:
    """The size of a weight file, turning every way it can fail to be a file into a WeightFileError."""
    entry = source.entries().get(rel)
    if entry is None:
        raise WeightFileError("is missing")
    if not entry.is_file or entry.size is None:
        raise WeightFileError(entry.detail or "is not a regular file")
    return entry.size


def read_safetensors_header(where: str | os.PathLike[str] | Source, rel: str | None = None,
                            budget: Budget | None = None, max_tensors: int | None = None) -> SafetensorsHeader:
    """Parse and validate a safetensors header without touching the tensor data.

    `where` is a source (with `rel` the file in it) or a path. Raises WeightFileError with
    a user-facing reason for every file the safetensors library would refuse: bad length,
    non-JSON, unknown dtype, bad shape, offsets out of range, overlapping or leaving gaps,
    and a file size that disagrees with the header.
    """
    if isinstance(where, Source):
        source, rel = where, rel or ""
    else:
        path = Path(where)
        source, rel = LocalSource(path.parent), path.name
    size = _file_size(source, rel)
    if size == 0:
        raise WeightFileError("is empty (0 bytes)")
    if size < 8:
        raise WeightFileError(f"is truncated: {size} bytes, not even the 8-byte header length")
    try:
        (length,) = struct.unpack("<Q", source.read_range(rel, 0, 8))
        if length > MAX_HEADER_BYTES:
            raise WeightFileError(
                f"declares a {length:,}-byte header (the first 8 bytes), above the 100 MB safetensors "
                "allows: this is not a safetensors file, or its start is corrupt"
            )
        if 8 + length > size:
            raise WeightFileError(f"is truncated: the header length says {length:,} bytes but only {size - 8:,} follow")
        if budget is not None and not budget.take(length):
            raise HeaderSkipped(f"its {length:,}-byte header would pass the read budget of this check")
        raw = source.read_range(rel, 8, length)
    except (Unreadable, struct.error) as err:
        raise WeightFileError(str(err) or "cannot be read") from None
    if len(raw) != length:
        raise WeightFileError(f"is truncated while reading the {length:,}-byte header")
    if max_tensors is not None and raw.count(b'"data_offsets"') > max_tensors:
        raise HeaderSkipped(f"its header describes more tensors than the {MAX_REPO_TENSORS:,} hfdoctor reads of "
                            "one repository")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise WeightFileError(f"has a header that is not UTF-8 text (byte {err.start})") from None
    too_many = too_many_values(raw)  # 100 MB of `{}` would be 33 million dicts
    if too_many is not None:
        raise HeaderSkipped(f"its header holds {too_many}, more than hfdoctor parses")
    try:
        header = json.loads(text, object_pairs_hook=_object_without_duplicates)
    except json.JSONDecodeError as err:
        raise WeightFileError(f"has a header that is not valid JSON: {err.msg} at character {err.pos}") from None
    except ValueError as err:  # a duplicate key, or an integer of over 4300 digits
        why = "an integer far beyond 64 bits" if "integer string conversion" in str(err) else str(err)
        raise WeightFileError(f"has a header that is not valid JSON: {why}") from None
    except RecursionError:
        raise WeightFileError("has a header that is not valid JSON: nested too deeply") from None
    if not isinstance(header, dict):
        raise WeightFileError(f"has a header that is a JSON {type(header).__name__}, not an object")
    return _validate(rel, header, length, size)


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys; the safetensors library refuses a header
    # that names a tensor twice, and so do we.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {duplicate!r} appears twice")
    return obj


def _validate(rel: str, header: dict[str, Any], length: int, size: int) -> SafetensorsHeader:
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise WeightFileError("has a __metadata__ that is not a map of strings to strings")
    try:  # json.loads accepts "\\ud800" escapes; the safetensors library (serde_json) does not
        "".join([*header, *(metadata or {}), *(metadata or {}).values()]).encode("utf-8")
    except UnicodeEncodeError:
        raise WeightFileError("has a name in its header that is not valid Unicode (an unpaired \\ud800-\\udfff escape)") from None
    tensors: dict[str, TensorInfo] = {}
    for name, info in header.items():
        if not isinstance(info, dict):
            raise WeightFileError(f"tensor {name!r}: its entry is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise WeightFileError(f"tensor {name!r} has an unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise WeightFileError(f"tensor {name!r} has an invalid shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
            raise WeightFileError(f"tensor {name!r} has invalid data_offsets {offsets!r}")
        start, end = offsets
        if end < start:
            raise WeightFileError(f"tensor {name!r} ends (byte {end:,}) before it starts (byte {start:,})")
        elements = math.prod(shape)
        if elements >= COUNT_LIMIT:  # safetensors' own reader refuses it (an overflow of usize)
            raise WeightFileError(f"tensor {name!r} has more than 2**64 elements")
        bits = elements * DTYPE_BITS[dtype]
        if bits % 8:
            raise WeightFileError(f"tensor {name!r}: {dtype} x {shape} is not a whole number of bytes")
        if end - start != bits // 8:
            raise WeightFileError(
                f"tensor {name!r}: data_offsets span {end - start:,} bytes but {dtype} x {shape} needs {bits // 8:,}"
            )
        tensors[name] = TensorInfo(dtype, tuple(shape), start, end)
    # The data region must be tiled exactly: no overlap, no gap, nothing past the end.
    data_size = size - 8 - length
    position, previous = 0, None
    for name, t in sorted(tensors.items(), key=lambda kv: (kv[1].start, kv[1].end)):
        if t.start < position:
            raise WeightFileError(
                f"has overlapping tensors: {name!r} starts at byte {t.start:,}, inside {previous!r} "
                f"(which ends at {position:,})"
            )
        if t.start > position:
            raise WeightFileError(
                f"has a gap in the data: nothing covers bytes {position:,}-{t.start:,} before {name!r}"
            )
        position, previous = t.end, name
    if position > data_size:
        raise WeightFileError(
            f"is truncated: its tensors need {position:,} bytes of data but the file holds {data_size:,}"
        )
    if position < data_size:
        raise WeightFileError(
            f"has {data_size - position:,} bytes after the last tensor: the file size disagrees with its header"
        )
    return SafetensorsHeader(rel, tensors, metadata, length, size)


# safetensors writes shapes and offsets as u64 (usize): a larger number is no safetensors file, and
# the product of a few such dimensions must never reach a message (Python refuses to print an
# int of over 4,300 digits).
COUNT_LIMIT = 2**64


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < COUNT_LIMIT


def parse_lfs_pointer(data: bytes, rel: str) -> LfsPointer | None:
    """The git-lfs pointer `data` is, or None."""
    if len(data) > LFS_POINTER_MAX_BYTES or not data.startswith(LFS_POINTER_PREFIX):
        return None
    text = data.decode("utf-8", "replace")
    oid = re.search(r"^oid (\S+)", text, re.MULTILINE)
    size = re.search(r"^size (\d+)", text, re.MULTILINE)
    return LfsPointer(rel, oid.group(1) if oid else None, int(size.group(1)) if size else None)


def lfs_pointer(source: Source, rel: str) -> LfsPointer | None:
    """The git-lfs pointer a file of `source` holds instead of its data, or None."""
    entry = source.entries().get(rel)
    if entry is None or not entry.is_file or entry.size is None or entry.size > LFS_POINTER_MAX_BYTES:
        return None
    try:
        return parse_lfs_pointer(source.read(rel, LFS_POINTER_MAX_BYTES), rel)
    except Unreadable:
        return None


# --- the weights of one repo -------------------------------------------------------------


@dataclass
class RepoWeights:
    """Every weight file of a repo, sorted by what can be said about it."""

    headers: dict[str, SafetensorsHeader] = field(default_factory=dict)  # readable safetensors
    skipped: dict[str, str] = field(default_factory=dict)  # rel -> why it was not read (budget)
    broken: dict[str, str] = field(default_factory=dict)  # rel -> why no loader can read it
    pointers: dict[str, LfsPointer] = field(default_factory=dict)  # git-lfs pointers (any weight file)
    index: dict[str, str] | None = None  # tensor -> shard, from model.safetensors.index.json
    main_files: list[str] = field(default_factory=list)  # the safetensors files that hold the model

    @property
    def present(self) -> set[str]:
        """Every safetensors file in the checkout, whatever could be read of it."""
        return set(self.headers) | set(self.broken) | set(self.pointers) | set(self.skipped)

    @property
    def missing_files(self) -> list[str]:
        """Main files that are not in the checkout at all."""
        present = self.present
        return [f for f in self.main_files if f not in present]

    @property
    def complete(self) -> bool:
        """Every main file is present and readable."""
        return bool(self.main_files) and all(f in self.headers for f in self.main_files)

    def main_tensors(self) -> dict[str, TensorInfo]:
        """Tensor name -> info over the readable main files (the first shard wins a duplicate)."""
        tensors: dict[str, TensorInfo] = {}
        for rel in self.main_files:
            header = self.headers.get(rel)
            if header is not None:
                for name, info in header.tensors.items():
                    tensors.setdefault(name, info)
        return tensors


@fact
def repo_weights(repo: "ModelRepo") -> RepoWeights:
    """Read (once per repo: a fact) every safetensors header and spot every lfs pointer."""
    view = RepoWeights()
    source, budget = repo.source, repo.budget
    tensor_count = 0
    for rel, entry in repo.entries.items():
        if not rel.endswith(WEIGHT_SUFFIXES) or entry.kind == "outside":
            continue  # a link leaving the repository is symlink-outside-repo's, never read
        pointer = lfs_pointer(source, rel)
        if pointer is not None:
            view.pointers[rel] = pointer
            continue
        try:
            if rel.endswith(".safetensors"):
                if budget.expired():
                    raise HeaderSkipped("the time budget of this check ran out")
                header = read_safetensors_header(source, rel, budget, MAX_REPO_TENSORS - tensor_count)
                view.headers[rel] = header
                tensor_count += len(header.tensors)
            elif rel.endswith(".gguf") and rel in repo.gguf.errors:
                raise WeightFileError(repo.gguf.errors[rel])
            elif _file_size(source, rel) == 0:
                raise WeightFileError("is empty (0 bytes)")
        except WeightFileError as err:
            view.broken[rel] = str(err)
        except HeaderSkipped as err:
            view.skipped[rel] = str(err)
            budget.skip(f"the safetensors header of {rel} and of the weights after it", str(err))
    index = repo.json_object(INDEX_FILE) if repo.exists(INDEX_FILE) else None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if isinstance(weight_map, dict) and all(isinstance(v, str) for v in weight_map.values()):
        view.index = weight_map
        view.main_files = sorted(set(weight_map.values()))
    else:
        # No usable index: the top-level safetensors files are the model, except Mistral's
        # consolidated.safetensors (another naming of the same weights) and PEFT adapters.
        view.main_files = sorted(
            rel for rel in [*view.headers, *view.broken, *view.pointers, *view.skipped]
            if "/" not in rel and rel.endswith(".safetensors")
            and not rel.startswith(("consolidated", "adapter_model"))
        )
    return view


@dataclass(frozen=True)
class IndexedShards:
    """The shards an index names, against what this checkout holds (weights-index-inconsistent
    judges them; the report's weights section says what could not be checked)."""

    index_file: str
    shards: list[str]  # sorted
    missing: list[str]  # named but not in this checkout
    # Every one missing and no weight file of that format here: a metadata-only folder (a download
    # with allow_patterns, a git repository that publishes its weights elsewhere), not a broken one.
    none_here: bool


def safetensors_index_shards(repo: "ModelRepo") -> IndexedShards | None:
    """The shards model.safetensors.index.json names (None: no usable index, or an empty weight_map)."""
    view = repo_weights(repo)
    if not view.index:
        return None
    present = view.present
    shards = sorted(set(view.index.values()))
    missing = [s for s in shards if s not in present]
    none_here = bool(missing) and len(missing) == len(shards) and not any(f.endswith(".safetensors") for f in present)
    return IndexedShards(INDEX_FILE, shards, missing, none_here)


def bin_index_shards(repo: "ModelRepo") -> IndexedShards | None:
    """The shards pytorch_model.bin.index.json names (None: no such index, or no weight_map object)."""
    if not repo.exists(BIN_INDEX_FILE):
        return None
    index = repo.json_object(BIN_INDEX_FILE)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        return None
    shards = sorted({s for s in weight_map.values() if isinstance(s, str)})
    files = set(repo.files)
    missing = [s for s in shards if s not in files]
    none_here = bool(missing) and len(missing) == len(shards) and not any(f.endswith(".bin") for f in files)
    return IndexedShards(BIN_INDEX_FILE, shards, missing, none_here)
