"""What every source offers: entries, bounded reads, ranged reads, a seekable open.

A source lists every path below the repository root once (`entries`), each with what
it is: a regular file (with its size), or something hfdoctor will not read through (a
FIFO or device, a symlink that leaves the repository, a broken link, a link loop).
Reads are bounded: a whole-file read names the most it will take (READ_LIMITS by kind of
file), and failing to read is an `Unreadable` with a message for the finding.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable

from hfdoctor.bounded.budget import Budget

MB = 1024 * 1024
# The most hfdoctor reads of one file, by name (README.md says so). Metadata is small;
# tokenizer.json is the one large file (Gemma 3's is 33 MB, Qwen's 11 MB).
READ_LIMITS = {"tokenizer.json": 256 * MB}
DEFAULT_READ_LIMIT = 64 * MB
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".gguf")
# Directories that are never part of the model (VCS, caches, virtualenvs).
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", ".cache", "__pycache__", ".venv", "node_modules"})


def read_limit(rel: str) -> int:
    return READ_LIMITS.get(PurePosixPath(rel).name, DEFAULT_READ_LIMIT)


class SourceError(Exception):
    """The target cannot be checked at all (no such repo, no access, offline, time out): exit 2.

    `transient`: another try may succeed (no answer in time, a refused connection, HTTP 408, 429 or 5xx);
    a long-running caller (the webhook runner) retries those, the command line reports them."""

    def __init__(self, message: str, *, transient: bool = False):
        super().__init__(message)
        self.transient = transient


class Unreadable(Exception):
    """One file exists but cannot be read; the message completes "<file> ..." in a finding."""


@dataclass(frozen=True)
class Entry:
    """One path of the repository and what it is."""

    rel: str  # posix path relative to the root
    kind: str  # file | dir | special | outside | broken
    size: int | None = None
    detail: str = ""  # for anything but a file: what it is ("a FIFO", "a symlink to /etc/passwd")
    # The Hub and git know a file's LFS object without reading it: (sha256, size).
    lfs: tuple[str, int] | None = None

    @property
    def is_file(self) -> bool:
        return self.kind == "file"


class Source(ABC):
    """A read-only view of one repository's files."""

    kind: str = "directory"
    # What reports call the target's origin, and for Hub and git, the revision read.
    revision: dict[str, Any] | None = None
    # The repository's allowance of time and bytes (ModelRepo sets it; hfdoctor.bounded.budget).
    budget: Budget | None = None

    @property
    @abstractmethod
    def label(self) -> str:
        """How messages name the repository."""

    @property
    def local_dir(self) -> Path | None:
        """The directory the files are in, when they are on this disk (fix, probe)."""
        return None

    @abstractmethod
    def entries(self) -> dict[str, Entry]:
        """Every path below the root (files and what is not a file), VCS dirs skipped."""

    @abstractmethod
    def read(self, rel: str, limit: int | None = None) -> bytes:
        """The whole file; Unreadable when it is not a regular file or larger than `limit`."""

    @abstractmethod
    def read_range(self, rel: str, start: int, length: int) -> bytes:
        """`length` bytes from `start` (fewer at the end of the file)."""

    def open(self, rel: str) -> IO[bytes]:
        """A seekable binary file object (the caller bounds how much it reads)."""
        entry = self.entries().get(rel)
        if entry is None or not entry.is_file or entry.size is None:
            raise Unreadable("is not a file of the repository")
        return io.BufferedReader(RangedFile(self, rel, entry.size), buffer_size=64 * 1024)

    def identity(self, rel: str) -> tuple | None:
        """A key equal for files of equal content known without reading them (the same inode,
        blob or LFS object), so a scan of one serves the others; None when unknown."""
        entry = self.entries().get(rel)
        return ("lfs", entry.lfs[0]) if entry is not None and entry.lfs is not None else None

    def bytes_read(self) -> int:
        """Bytes transferred so far (for the Hub: what a check downloads)."""
        return 0

    def close(self) -> None:
        """Release what the source holds (processes, connections)."""


class ByteRange(io.RawIOBase):
    """`size` bytes that `read_at(offset, n)` returns, as a seekable read-only file: a file
    of a source read by ranges (RangedFile), a member inside a container's file."""

    def __init__(self, read_at: Callable[[int, int], bytes], size: int):
        self.read_at, self.size, self.position = read_at, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer) -> int:
        want = min(len(buffer), max(0, self.size - self.position))
        if want == 0:
            return 0
        data = self.read_at(self.position, want)
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


class RangedFile(ByteRange):
    """A file of a source, read by ranges as the reader asks for them."""

    def __init__(self, source: Source, rel: str, size: int):
        super().__init__(lambda start, length: source.read_range(rel, start, length), size)
