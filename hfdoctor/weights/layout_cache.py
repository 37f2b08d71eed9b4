"""The user's cache of layouts transformers built: each config is built once per transformers version.

A config that neither the shipped table nor hfdoctor.weights.computed knows is built by
transformers in a bounded child (hfdoctor.weights.build): a few seconds, mostly the torch import.
Its outcome (the layout, or why there is none) is kept in the user's cache directory, so the next
check of the same config (the next push of the same repository) reads it back in a millisecond.

- Where: $HFDOCTOR_CACHE_DIR when it is set (an absolute path; any other value turns the cache
  off), else $XDG_CACHE_HOME/hfdoctor, else ~/.cache/hfdoctor; under it, layouts/. Never inside
  the repository being checked: `check` writes nothing there.
- Key: sha256 of the whole config.json as canonical JSON, the transformers version that built it
  and hfdoctor's LAYOUT_VERSION. Another transformers (or a new hfdoctor form) builds anew.
- Read: at most MAX_ENTRY_BYTES, parsed and validated (its key, versions and every name and
  shape); anything else is ignored as if absent, and rebuilt.
- Write: a temporary file in the same directory, fsynced, then renamed over the entry
  (os.replace): a reader sees the old entry, the new one or none, never a part. At most
  MAX_ENTRIES entries are kept; the oldest go first. A failure to write is not an error: the
  cache only saves time.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import suppress
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from hfdoctor.bounded.budget import NotReadable, read_regular_file
from hfdoctor.bounded.parsing import load_json
from hfdoctor.weights.outcome import CannotVerify, Outcome, outcome_from_json, outcome_to_json

MAX_ENTRY_BYTES = 32 << 20  # DeepSeek-V3's 61 irregular layers of 256 experts: ~5 MB
MAX_ENTRIES = 512
MAX_NAME_CHARS = 512
MAX_TENSORS = 2_000_000
MAX_DIM = 1 << 40
SUFFIX = ".json"


def cache_dir(forbidden: Path | None = None) -> Path | None:
    """The layouts cache directory, or None when there is none to use (off, or inside `forbidden`)."""
    override = os.environ.get("HFDOCTOR_CACHE_DIR")
    if override is not None:
        base = Path(override) if os.path.isabs(override) else None
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        try:
            root = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
        except (RuntimeError, KeyError):  # no $HOME and no passwd entry
            return None
        base = root / "hfdoctor"
    if base is None:
        return None
    directory = base / "layouts"
    if forbidden is not None:
        real, refused = Path(os.path.realpath(directory)), Path(os.path.realpath(forbidden))
        if real == refused or refused in real.parents:
            return None
    return directory


def transformers_version() -> str | None:
    """The installed transformers' version, read from its metadata (no import)."""
    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


def entry_key(config: dict[str, Any], built_with: str, layout_version: int) -> str:
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    text = f"{layout_version}\0{built_with}\0{canonical}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def cacheable(outcome: Outcome) -> bool:
    """Only what the config and the transformers version decide: not a timeout, not a missing torch."""
    if isinstance(outcome, CannotVerify):
        return not outcome.transient and "not installed" not in str(outcome)
    return True


@dataclass(frozen=True)
class Slot:
    """Where one config's outcome is kept: read() it, write() it."""

    directory: Path
    key: str
    built_with: str  # the transformers version
    layout_version: int

    @property
    def path(self) -> Path:
        return self.directory / f"{self.key}{SUFFIX}"

    def read(self) -> Outcome | None:
        """The cached outcome, or None when there is none that passes validation. The entry is
        read only as the regular file write() makes (never through a link, never a FIFO's wait)
        and parsed within the bounded parser's limits (32 MB of `{},` is a billion bytes of dicts)."""
        data = _read_entry(self.path)
        if data is None:
            return None
        try:
            entry = load_json(data.decode("utf-8"), data)
            if not (isinstance(entry, dict) and entry.get("key") == self.key
                    and entry.get("transformers") == self.built_with
                    and entry.get("layout_version") == self.layout_version and _valid_outcome(entry.get("outcome"))):
                return None
            return outcome_from_json(entry["outcome"])
        except (ValueError, TypeError, KeyError, RecursionError):  # ParseError and UnicodeDecodeError too
            return None

    def write(self, outcome: Outcome) -> None:
        """Store `outcome`, atomically; nothing (silently) when it is not cacheable or cannot be written."""
        if not cacheable(outcome):
            return
        entry = {"key": self.key, "transformers": self.built_with, "layout_version": self.layout_version,
                 "outcome": outcome_to_json(outcome)}
        data = json.dumps(entry, separators=(",", ":")).encode("utf-8")
        if len(data) > MAX_ENTRY_BYTES:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.key[:16]}.", suffix=".tmp", dir=self.directory)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except OSError:
            with suppress(OSError):
                os.unlink(tmp)
            return
        _prune(self.directory)


def _read_entry(path: Path) -> bytes | None:
    """An entry's bytes: a regular file (a FIFO under its name is refused, never waited on), never read through
    a link, at most MAX_ENTRY_BYTES; None otherwise (it is then rebuilt)."""
    try:
        return read_regular_file(path, MAX_ENTRY_BYTES, follow_symlinks=False)
    except NotReadable:
        return None


def slot(config: dict[str, Any], layout_version: int, forbidden: Path | None = None) -> Slot | None:
    """The cache slot of `config`, or None when there is no cache (off, no transformers, inside `forbidden`)."""
    directory, built_with = cache_dir(forbidden), transformers_version()
    if directory is None or built_with is None:
        return None
    return Slot(directory, entry_key(config, built_with, layout_version), built_with, layout_version)


def _prune(directory: Path) -> None:
    """Keep the newest MAX_ENTRIES entries."""
    try:
        entries = [(p.stat().st_mtime_ns, p) for p in directory.iterdir() if p.name.endswith(SUFFIX)]
    except OSError:
        return
    if len(entries) <= MAX_ENTRIES:
        return
    for _, path in sorted(entries)[: len(entries) - MAX_ENTRIES]:
        with suppress(OSError):
            path.unlink()


def _is_dim(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_DIM


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS


def _is_shapes(value: Any) -> bool:
    return isinstance(value, dict) and len(value) <= MAX_TENSORS and all(
        _is_name(name) and isinstance(shape, list) and len(shape) <= 8 and all(_is_dim(d) for d in shape)
        for name, shape in value.items())


def _valid_outcome(outcome: Any) -> bool:
    """The JSON form of an outcome (hfdoctor.weights.outcome), every field of the type it must have."""
    if not isinstance(outcome, dict) or len(outcome) != 1:
        return False
    (kind, value), = outcome.items()
    if kind in ("cannot_verify", "rejected"):
        return isinstance(value, str) and len(value) <= 4096
    if kind != "layout" or not isinstance(value, dict):
        return False
    repeated = value.get("repeated_layers")
    total = len(value.get("tensors") or {})
    if not (isinstance(repeated, list) and len(repeated) <= 64):
        return False
    for stack in repeated:
        if not (isinstance(stack, dict) and _is_name(stack.get("prefix")) and _is_dim(stack.get("count"))
                and _is_shapes(stack.get("tensors"))):
            return False
        total += stack["count"] * len(stack["tensors"])
    return (total <= MAX_TENSORS and _is_name(value.get("model_class")) and _is_shapes(value.get("tensors"))
            and isinstance(value.get("base_model_prefix"), str) and len(value["base_model_prefix"]) <= MAX_NAME_CHARS
            and all(isinstance(value.get(k), list) and len(value[k]) <= 256 and all(_is_name(n) for n in value[k])
                    for k in ("optional", "ignore_missing", "ignore_unexpected")))
