"""Weight files, read from their headers alone.

A safetensors file is an 8-byte little-endian header length, a JSON header naming every
tensor (dtype, shape, byte range) and then the raw data. Everything hfdoctor says about
weights comes from those first kilobytes: the data region is never read, so checking a
16 GB checkpoint costs what reading its headers costs.

What lives here:
- `read_safetensors_header`: the header reader, as strict as the safetensors library
  itself (bounded length, JSON, dtypes, shapes, contiguous in-range offsets, file size).
- `repo_weights`: every weight file of a ModelRepo sorted into readable headers, broken
  files and git-lfs pointers, plus which files hold the model (the index's shards),
  cached on the repo.
- `WeightsLayout` / `infer_weights_families`: what the headers look like (layers, hidden
  size, vocabulary, q_norm/k_norm, biases...) and which registry families fit. Pure
  Python, no torch: lineage.py calls it on every check.
- `expected_layout`: the tensor names and shapes of the model config.json declares. For
  the upstream configs hfdoctor knows they are precomputed (upstream_templates/layouts.json,
  written by make_layouts.py), so a check of a stock checkpoint never imports torch or
  transformers; any other config is built by transformers on torch's meta device (imported
  only there) and remembered for the rest of the process. Nothing is written to disk.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hfdoctor import registry

if TYPE_CHECKING:
    from hfdoctor.registry import Family
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
# model-00001-of-00005.safetensors: shards of a sharded checkpoint.
SHARD_NAME = re.compile(r"^(?P<stem>.+)-\d{5}-of-\d{5}\.safetensors$")


class WeightFileError(Exception):
    """A weight file that no loader can read; the message says why (for weights-unreadable)."""


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


def _open_regular(path: Path) -> os.stat_result:
    """stat() a weight file, turning every way it can fail to be a file into a WeightFileError."""
    try:
        st = os.stat(path)  # follows symlinks: the Hugging Face cache is all symlinks to blobs
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise WeightFileError("is a symbolic link loop") from None
        if err.errno == errno.ENOENT and os.path.islink(path):
            raise WeightFileError(f"is a broken symbolic link (to {os.readlink(path)})") from None
        raise WeightFileError(f"cannot be read: {err.strerror or err}") from None
    if stat.S_ISDIR(st.st_mode):
        raise WeightFileError("is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        # Opening a FIFO would block forever; a device could be endless.
        raise WeightFileError("is not a regular file (a FIFO, socket or device)")
    return st


def read_safetensors_header(path: str | os.PathLike[str], rel: str | None = None) -> SafetensorsHeader:
    """Parse and validate a safetensors header without touching the tensor data.

    Raises WeightFileError with a user-facing reason for every file the safetensors
    library would refuse: bad length, non-JSON, unknown dtype, bad shape, offsets out of
    range, overlapping or leaving gaps, and a file size that disagrees with the header.
    """
    path = Path(path)
    rel = rel or path.name
    size = _open_regular(path).st_size
    if size == 0:
        raise WeightFileError("is empty (0 bytes)")
    if size < 8:
        raise WeightFileError(f"is truncated: {size} bytes, not even the 8-byte header length")
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER_BYTES:
                raise WeightFileError(
                    f"declares a {length:,}-byte header (the first 8 bytes), above the 100 MB safetensors "
                    "allows: this is not a safetensors file, or its start is corrupt"
                )
            if 8 + length > size:
                raise WeightFileError(
                    f"is truncated: the header length says {length:,} bytes but only {size - 8:,} follow"
                )
            raw = f.read(length)
    except OSError as err:
        raise WeightFileError(f"cannot be read: {err.strerror or err}") from None
    if len(raw) != length:
        raise WeightFileError(f"is truncated while reading the {length:,}-byte header")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise WeightFileError(f"has a header that is not UTF-8 text (byte {err.start})") from None
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
        bits = math.prod(shape) * DTYPE_BITS[dtype]
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


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def lfs_pointer(path: str | os.PathLike[str], rel: str) -> LfsPointer | None:
    """The git-lfs pointer a weight file holds instead of its data, or None."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > LFS_POINTER_MAX_BYTES:
            return None
        with open(path, "rb") as f:
            data = f.read(LFS_POINTER_MAX_BYTES)
    except OSError:
        return None
    if not data.startswith(LFS_POINTER_PREFIX):
        return None
    text = data.decode("utf-8", "replace")
    oid = re.search(r"^oid (\S+)", text, re.MULTILINE)
    size = re.search(r"^size (\d+)", text, re.MULTILINE)
    return LfsPointer(rel, oid.group(1) if oid else None, int(size.group(1)) if size else None)


# --- the weights of one repo -------------------------------------------------------------


@dataclass
class RepoWeights:
    """Every weight file of a repo, sorted by what can be said about it."""

    headers: dict[str, SafetensorsHeader] = field(default_factory=dict)  # readable safetensors
    broken: dict[str, str] = field(default_factory=dict)  # rel -> why no loader can read it
    pointers: dict[str, LfsPointer] = field(default_factory=dict)  # git-lfs pointers (any weight file)
    index: dict[str, str] | None = None  # tensor -> shard, from model.safetensors.index.json
    main_files: list[str] = field(default_factory=list)  # the safetensors files that hold the model

    @property
    def missing_files(self) -> list[str]:
        """Main files that are not in the checkout at all."""
        return [f for f in self.main_files if f not in self.headers and f not in self.broken and f not in self.pointers]

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

    @cached_property
    def layout(self) -> "WeightsLayout | None":
        """What the main tensors look like; once per repo (lineage and two rules ask, and a
        128-expert MoE's 18,867 names take ~30 ms)."""
        return weights_layout(self.main_tensors())


def repo_weights(repo: "ModelRepo") -> RepoWeights:
    """Read (once per repo) every safetensors header and spot every lfs pointer."""
    cached = getattr(repo, "_repo_weights", None)
    if cached is not None:
        return cached
    view = RepoWeights()
    for rel in repo.weight_files:
        pointer = lfs_pointer(repo.root / rel, rel)
        if pointer is not None:
            view.pointers[rel] = pointer
            continue
        try:
            if rel.endswith(".safetensors"):
                view.headers[rel] = read_safetensors_header(repo.root / rel, rel)
            elif _open_regular(repo.root / rel).st_size == 0:
                raise WeightFileError("is empty (0 bytes)")
        except WeightFileError as err:
            view.broken[rel] = str(err)
    for rel in repo.weight_dirs:
        view.broken[rel] = "is a directory, not a file"
    index = repo.json_object(INDEX_FILE) if repo.exists(INDEX_FILE) else None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if isinstance(weight_map, dict) and all(isinstance(v, str) for v in weight_map.values()):
        view.index = weight_map
        view.main_files = sorted(set(weight_map.values()))
    else:
        # No usable index: the top-level safetensors files are the model, except Mistral's
        # consolidated.safetensors (another naming of the same weights) and PEFT adapters.
        view.main_files = sorted(
            rel for rel in [*view.headers, *view.broken, *view.pointers]
            if "/" not in rel and rel.endswith(".safetensors")
            and not rel.startswith(("consolidated", "adapter_model"))
        )
    repo._repo_weights = view  # type: ignore[attr-defined]
    return view


# --- what the headers look like (no torch) ------------------------------------------------

# Structural features a checkpoint's tensor names show, and how the message names them.
FEATURE_TEXT = {
    "qk_norm": "q_norm/k_norm",
    "qkv_bias": "q/k/v bias",
    "fused_qkv": "fused qkv_proj",
    "sandwich_norm": "pre/post-feedforward norms",
    "experts": "mixture of experts",
    "mla": "latent attention (q_a/kv_a projections)",
    "sinks": "attention sinks",
}
# The features each model type's checkpoints have (dense llama-style layers have none).
# Model types with the same features cannot be told apart by names; dimensions decide.
MODEL_TYPE_FEATURES: dict[str, frozenset[str]] = {
    "llama": frozenset(), "mistral": frozenset(), "smollm3": frozenset(), "gemma": frozenset(),
    "granite": frozenset(), "qwen2": frozenset({"qkv_bias"}), "qwen3": frozenset({"qk_norm"}),
    "qwen3_moe": frozenset({"qk_norm", "experts"}), "qwen2_moe": frozenset({"qkv_bias", "experts"}),
    "mixtral": frozenset({"experts"}), "gemma2": frozenset({"sandwich_norm"}),
    "gemma3": frozenset({"sandwich_norm", "qk_norm"}), "gemma3_text": frozenset({"sandwich_norm", "qk_norm"}),
    "phi3": frozenset({"fused_qkv"}), "deepseek_v3": frozenset({"mla", "experts"}),
    "gpt_oss": frozenset({"qkv_bias", "experts", "sinks"}),
}
EMBEDDING_SUFFIXES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "tok_embeddings.weight")
LAYER_INDEX = re.compile(r"^(?P<prefix>(?:.*\.)?(?:layers|h|blocks))\.(?P<i>\d+)\.(?P<rest>.+)$")
EXPERT_INDEX = re.compile(r"\.experts\.(\d+)\.")


@dataclass(frozen=True)
class WeightsLayout:
    """What a checkpoint's tensor names and shapes say about its architecture."""

    layers: int | None
    hidden_size: int | None
    vocab_size: int | None  # rows of the input embedding
    num_experts: int | None
    features: frozenset[str]
    embedding: str | None  # name of the input embedding tensor
    parameters: int

    def describe(self) -> str:
        parts = []
        if self.layers is not None:
            parts.append(f"{self.layers} layers")
        if self.hidden_size is not None:
            parts.append(f"hidden size {self.hidden_size}")
        if self.vocab_size is not None:
            parts.append(f"vocab {self.vocab_size}")
        if self.num_experts:
            parts.append(f"{self.num_experts} experts")
        for feature in ("qk_norm", "qkv_bias"):
            parts.append(("" if feature in self.features else "no ") + FEATURE_TEXT[feature])
        parts.extend(FEATURE_TEXT[f] for f in sorted(self.features - {"qk_norm", "qkv_bias", "experts"}))
        return ", ".join(parts)

    def model_types(self) -> list[str]:
        """Model types whose checkpoints have exactly these structural features."""
        return [mt for mt, feats in MODEL_TYPE_FEATURES.items() if feats == self.features]


def weights_layout(tensors: dict[str, TensorInfo]) -> WeightsLayout | None:
    if not tensors:
        return None
    # The decoder stack is the layer prefix with the most distinct layer indices.
    by_prefix: dict[str, set[int]] = {}
    layer_rest: dict[str, set[str]] = {}
    for name in tensors:
        m = LAYER_INDEX.match(name)
        if m:
            by_prefix.setdefault(m.group("prefix"), set()).add(int(m.group("i")))
            layer_rest.setdefault(m.group("prefix"), set()).add(m.group("rest"))
    prefix = max(by_prefix, key=lambda p: len(by_prefix[p]), default=None)
    layers = max(by_prefix[prefix]) + 1 if prefix is not None else None
    rests = layer_rest.get(prefix, set()) if prefix is not None else set()
    features = set()
    if any("q_norm" in r or "k_norm" in r for r in rests):
        features.add("qk_norm")
    if any(r.endswith(("q_proj.bias", "k_proj.bias")) for r in rests):
        features.add("qkv_bias")
    if any("qkv_proj" in r for r in rests):
        features.add("fused_qkv")
    if any("pre_feedforward_layernorm" in r for r in rests):
        features.add("sandwich_norm")
    if any(".experts." in f".{r}" or "block_sparse_moe" in r for r in rests):
        features.add("experts")
    if any("kv_a_proj" in r for r in rests):
        features.add("mla")
    if any(r.endswith("sinks") for r in rests):
        features.add("sinks")
    experts = {int(m.group(1)) for r in rests if (m := EXPERT_INDEX.search(f".{r}"))}
    embedding = next((n for n in sorted(tensors, key=len) if n.endswith(EMBEDDING_SUFFIXES)), None)
    shape = tensors[embedding].shape if embedding else ()
    return WeightsLayout(
        layers=layers,
        hidden_size=shape[1] if len(shape) == 2 else None,
        vocab_size=shape[0] if len(shape) == 2 else None,
        num_experts=max(experts) + 1 if experts else None,
        features=frozenset(features),
        embedding=embedding,
        parameters=sum(math.prod(t.shape) for t in tensors.values()),
    )


def repo_layout(repo: "ModelRepo") -> WeightsLayout | None:
    return repo_weights(repo).layout


def matching_bases(layout: WeightsLayout) -> list[tuple["Family", registry.BaseModel]]:
    """Registry base models whose recorded dimensions and layout the weights have."""
    model_types = set(layout.model_types())
    found = []
    inferred = {"hidden_size": layout.hidden_size, "num_hidden_layers": layout.layers,
                "vocab_size": layout.vocab_size, "num_experts": layout.num_experts}
    for fam in registry.families():
        if not model_types & set(fam.model_types):
            continue
        for base in fam.bases:
            if "model_type" in base.dims and base.dims["model_type"] not in model_types:
                continue
            if all(inferred.get(k) in (None, v) for k, v in base.dims.items() if k != "model_type"):
                found.append((fam, base))
    # The family a model type is primarily released as first (Llama 3 before R1's Llama distill).
    return sorted(found, key=lambda fb: not (model_types & set(fb[0].primary_for)))


def infer_weights_families(repo: "ModelRepo") -> list["Family"] | None:
    """Families whose checkpoints look like this repo's safetensors headers.

    None when there are no readable weights; [] when they match no known family.
    Headers only, no torch: lineage calls this on every check.
    """
    layout = repo_layout(repo)
    if layout is None or layout.layers is None:
        return None
    by_size = [fam for fam, _ in matching_bases(layout)]
    if by_size:
        return list(dict.fromkeys(by_size))
    model_types = set(layout.model_types())
    return [fam for fam in registry.families() if model_types & set(fam.model_types)]


def looks_like(layout: WeightsLayout) -> str:
    """'32 layers, ..., no q_norm/k_norm: the layout of llama/mistral/...; sized like Llama 3 (...)'."""
    text = layout.describe()
    types = layout.model_types()
    if types:
        text += f": the layout of {'/'.join(types)} checkpoints"
    bases = matching_bases(layout)
    if bases:
        text += "; sized like " + ", ".join(f"{fam.display} ({base.repo})" for fam, base in bases[:3])
    return text


# --- what config.json declares (transformers, meta device) -------------------------------


class CannotVerify(Exception):
    """The declared model cannot be built here (unknown architecture, quantized, no torch)."""


class ConfigRejected(Exception):
    """transformers refuses config.json itself."""


@dataclass(frozen=True)
class ExpectedLayout:
    """The checkpoint transformers would write (and expects to load) for a config."""

    model_class: str
    tensors: dict[str, tuple[int, ...]]
    optional: frozenset[str]  # tied weights: usually absent from the checkpoint
    ignore_missing: tuple[str, ...]  # regexes transformers does not miss on load
    ignore_unexpected: tuple[str, ...]  # regexes transformers ignores on load
    base_model_prefix: str = ""

    def to_json(self) -> dict[str, Any]:
        """The compact form layouts.json stores.

        A decoder stack whose layers all hold the same names and shapes (the common case,
        MoE experts included) is one template plus a layer count: Qwen3-30B-A3B's 18,867
        tensors become ~400 entries. A stack whose layers differ (mixed layer types, dense
        first layers before MoE ones) stays in `tensors`, name by name.
        """
        stacks: dict[str, dict[int, dict[str, list[int]]]] = {}
        for name, shape in self.tensors.items():
            m = LAYER_INDEX.match(name)
            if m:
                stacks.setdefault(m.group("prefix"), {}).setdefault(int(m.group("i")), {})[m.group("rest")] = list(shape)
        flat = {name: list(shape) for name, shape in self.tensors.items()}
        repeated = []
        for prefix, layers in sorted(stacks.items()):
            template = layers[min(layers)]
            if sorted(layers) != list(range(len(layers))) or any(layer != template for layer in layers.values()):
                continue  # irregular: stored in full
            repeated.append({"prefix": prefix, "count": len(layers), "tensors": template})
            for i in range(len(layers)):
                for rest in template:
                    del flat[f"{prefix}.{i}.{rest}"]
        return {
            "model_class": self.model_class,
            "tensors": flat,
            "repeated_layers": repeated,
            "optional": sorted(self.optional),
            "ignore_missing": list(self.ignore_missing),
            "ignore_unexpected": list(self.ignore_unexpected),
            "base_model_prefix": self.base_model_prefix,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ExpectedLayout":
        tensors = {name: tuple(shape) for name, shape in data["tensors"].items()}
        for stack in data["repeated_layers"]:
            for i in range(stack["count"]):
                for rest, shape in stack["tensors"].items():
                    tensors[f"{stack['prefix']}.{i}.{rest}"] = tuple(shape)
        return cls(
            model_class=data["model_class"],
            tensors=tensors,
            optional=frozenset(data["optional"]),
            ignore_missing=tuple(data["ignore_missing"]),
            ignore_unexpected=tuple(data["ignore_unexpected"]),
            base_model_prefix=data["base_model_prefix"],
        )


Outcome = ExpectedLayout | CannotVerify | ConfigRejected

# The precomputed table: upstream_templates/layouts.json, written by make_layouts.py.
# Bump LAYOUT_VERSION when _build, the JSON form or config_key changes what is recorded: a
# table of another version is ignored (every config then takes the slow path) until regenerated.
LAYOUTS_FILE = "layouts.json"
LAYOUT_VERSION = 4


def _is_number(value: Any, low: float, high: float, kinds: tuple[type, ...] = (int, float)) -> bool:
    return isinstance(value, kinds) and not isinstance(value, bool) and low <= value <= high


def _is_token_ids(value: Any) -> bool:
    return all(i is None or _is_number(i, 0, math.inf, (int,)) for i in (value if isinstance(value, list) else [value]))


def _is_default_rope(value: Any) -> bool:
    # What transformers 5 writes for a plain rope_theta: {"rope_theta": ..., "rope_type": "default"}.
    return (isinstance(value, dict) and value.get("rope_type") == "default" and set(value) <= {"rope_type", "rope_theta"}
            and _is_number(value.get("rope_theta", 1.0), 1, 1e12))


def _is_attention_layer_types(value: Any, config: dict[str, Any]) -> bool:
    # Full and sliding-window attention layers hold the same tensors; other layer types
    # (linear attention, mamba) may not, and transformers refuses a list of the wrong length.
    return (isinstance(value, list) and len(value) == config.get("num_hidden_layers")
            and all(t in ("full_attention", "sliding_attention") for t in value))


# Keys that change no tensor's name or shape, and do not make transformers refuse the config,
# as long as their value passes the test beside them. Such a key is left out of the lookup
# key, so a fine-tune re-saved by another transformers version (another dtype, rope_theta,
# context length, token ids, an explicit layer_types...) finds its shipped layout. A value
# that fails the test (a negative eps, an unknown activation) stays in the key: transformers
# judges it on the slow path. Only configs the table ships can hit it, and tests/
# test_weights.py proves every key here on each shipped model type (change or delete it,
# rebuild on the meta device, same outcome). Keys whose effect depends on the model type
# (tie_word_embeddings, head_dim, rope_scaling dicts, partial_rotary_factor) stay in the key.
NON_SHAPING_CONFIG_KEYS: dict[str, Callable[[Any, dict[str, Any]], bool]] = {
    "transformers_version": lambda v, c: True,
    "_name_or_path": lambda v, c: True,
    "use_cache": lambda v, c: True,
    "torch_dtype": lambda v, c: True,
    "dtype": lambda v, c: True,
    "initializer_range": lambda v, c: _is_number(v, 0, 1, (float,)),
    "attention_dropout": lambda v, c: _is_number(v, 0, 1, (float,)),
    "rms_norm_eps": lambda v, c: _is_number(v, 0, 1, (float,)),
    "rope_theta": lambda v, c: _is_number(v, 1, 1e12),
    "rope_parameters": lambda v, c: _is_default_rope(v),
    "rope_scaling": lambda v, c: v is None,
    "max_position_embeddings": lambda v, c: _is_number(v, 1, 2**40, (int,)),
    "bos_token_id": lambda v, c: _is_token_ids(v),
    "eos_token_id": lambda v, c: _is_token_ids(v),
    "pad_token_id": lambda v, c: _is_token_ids(v),
    "sliding_window": lambda v, c: v is None or _is_number(v, 1, 2**40, (int,)),
    "use_sliding_window": lambda v, c: isinstance(v, bool),
    "max_window_layers": lambda v, c: _is_number(v, 0, 2**40, (int,)),
    "hidden_act": lambda v, c: v in ("silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new", "relu"),
    "layer_types": _is_attention_layer_types,
}
# Every outcome this process has looked up or built, by config key. Memory only: `check`
# writes nothing, not even a cache in the user's home.
_OUTCOMES: dict[str, Outcome] = {}


def shaping_config(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a config that can change the layout: what config_key hashes."""
    shaping = {
        key: value for key, value in config.items()
        if not (key in NON_SHAPING_CONFIG_KEYS and NON_SHAPING_CONFIG_KEYS[key](value, config))
    }
    if isinstance(shaping.get("architectures"), list):
        shaping["architectures"] = shaping["architectures"][:1]  # _build reads only the first
    return shaping


def config_key(config: dict[str, Any]) -> str:
    """The lookup key of a config: sha256 of its shaping part as canonical JSON."""
    canonical = json.dumps(shaping_config(config), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def outcome_to_json(outcome: Outcome) -> dict[str, Any]:
    if isinstance(outcome, ExpectedLayout):
        return {"layout": outcome.to_json()}
    return {"cannot_verify" if isinstance(outcome, CannotVerify) else "rejected": str(outcome)}


def outcome_from_json(data: dict[str, Any]) -> Outcome:
    if "cannot_verify" in data:
        return CannotVerify(data["cannot_verify"])
    if "rejected" in data:
        return ConfigRejected(data["rejected"])
    return ExpectedLayout.from_json(data["layout"])


@lru_cache(maxsize=1)
def shipped_layouts() -> dict[str, dict[str, Any]]:
    """config_key -> outcome JSON, for every upstream config the package ships a layout of.

    Empty when the file is missing (a broken install: slow, not wrong) or was written for
    another LAYOUT_VERSION.
    """
    try:
        table = json.loads(registry.data_file(LAYOUTS_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    if table.get("layout_version") != LAYOUT_VERSION:
        return {}
    return table["layouts"]


def expected_layout(config: dict[str, Any]) -> ExpectedLayout:
    """Names and shapes of the model `config` declares; raises CannotVerify / ConfigRejected.

    Looked up in the shipped table first (no torch, no transformers: ~1 ms), then among
    the layouts this process built; otherwise built with transformers on the meta device
    (~2-3 s for the torch + transformers import, ~50 ms per build) and kept in memory.
    The table holds what the transformers version recorded in layouts.json builds;
    tests/test_weights.py rebuilds it with the installed transformers to catch drift.
    """
    key = config_key(config)
    result = _OUTCOMES.get(key)
    if result is None:
        entry = shipped_layouts().get(key)
        result = outcome_from_json(entry) if entry is not None else build_outcome(config)
        _OUTCOMES[key] = result
    if isinstance(result, Exception):
        raise result
    return result


def build_outcome(config: dict[str, Any]) -> Outcome:
    """What `_build` makes of a config, its refusals included (the slow path, and make_layouts.py)."""
    try:
        return _build(config)
    except (CannotVerify, ConfigRejected) as err:
        return err


def _build(config: dict[str, Any]) -> ExpectedLayout:
    """Instantiate the declared model on the meta device (no memory, no download, no remote code)."""
    model_type = config.get("model_type")
    if config.get("quantization_config") or config.get("quantization"):
        method = (config.get("quantization_config") or config.get("quantization") or {})
        method = method.get("quant_method", "mlx") if isinstance(method, dict) else "unknown"
        raise CannotVerify(f"the weights are quantized ({method}): their tensors are not the model's parameters")
    # config.json is untrusted: a million layers would keep the meta build busy for hours.
    for key, limit in (("num_hidden_layers", 1024), ("num_experts", 8192), ("num_local_experts", 8192),
                       ("n_routed_experts", 8192)):
        value = registry.config_value(config, key)
        if isinstance(value, int) and value > limit:
            raise CannotVerify(f"{key} is {value}, more than hfdoctor builds to compare ({limit})")
    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError as err:
        raise CannotVerify(f"torch/transformers are not installed ({err.name}): pip install 'hfdoctor[probe]'") from None
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise CannotVerify(f"transformers {transformers.__version__} does not know model_type {model_type!r}")
    with _quiet_transformers():
        try:
            cfg = AutoConfig.for_model(**config)
        except Exception as err:  # transformers raises ValueError, TypeError, KeyError... on bad configs
            raise ConfigRejected(f"{type(err).__name__}: {err}") from None
        # The class transformers' AutoModelForCausalLM builds, unless `architectures` names
        # another class of the same model type (a vision-language wrapper, a classifier).
        arch = (config.get("architectures") or [None])[0]
        cls = None
        if isinstance(arch, str) and arch in registry.architectures().get(model_type, ()):
            cls = getattr(transformers, arch, None)
        try:
            with torch.device("meta"):
                if cls is not None:
                    model = cls(cfg)
                else:
                    try:
                        model = AutoModelForCausalLM.from_config(cfg)
                    except ValueError:  # not a causal LM model type: the bare model
                        model = AutoModel.from_config(cfg)
        except Exception as err:  # the model's __init__ rejects the dimensions
            raise ConfigRejected(f"building the model fails: {type(err).__name__}: {err}") from None
        state = model.state_dict()
        try:
            # What save_pretrained writes: transformers 5 fuses some tensors (MoE experts) on
            # load and splits them back on save; checkpoints hold the saved form.
            from transformers.core_model_loading import revert_weight_conversion

            state = revert_weight_conversion(model, dict(state))
        except Exception:
            pass
    # all_tied_weights_keys (transformers 5) holds the ties this config really makes;
    # the class attribute _tied_weights_keys lists possible ties, tied or not.
    tied = getattr(model, "all_tied_weights_keys", None)
    if tied is None:
        tied = (getattr(model, "_tied_weights_keys", None) or ()) if getattr(cfg, "tie_word_embeddings", False) else ()
    ignore_unexpected = list(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ())
    if any(name.endswith("rotary_emb.inv_freq") for name, _ in model.named_buffers()):
        # Old checkpoints saved the RoPE buffer; transformers drops it on load (as here).
        ignore_unexpected.append(r"rotary_emb\.inv_freq")
    return ExpectedLayout(
        model_class=type(model).__name__,
        tensors={name: tuple(t.shape) for name, t in state.items()},
        optional=frozenset(tied),
        ignore_missing=tuple(sorted(getattr(model, "_keys_to_ignore_on_load_missing", None) or ())),
        ignore_unexpected=tuple(sorted(ignore_unexpected)),
        base_model_prefix=getattr(model, "base_model_prefix", "") or "",
    )


class _quiet_transformers:
    """Silence transformers' logging and warnings while it builds a model for us."""

    def __enter__(self):
        import warnings

        from transformers.utils import logging

        self._level = logging.get_verbosity()
        logging.set_verbosity_error()
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc):
        from transformers.utils import logging

        self._warnings.__exit__(*exc)
        logging.set_verbosity(self._level)
        return False
