"""One repository's allowance of time and bytes, passed down to everything that reads or runs.

A hostile repository can make each single step look reasonable and the whole unbounded: a
hundred templates that each take their full render limit, four 89 MB headers, sixteen hard
links to one 500 MB pickle, a commit full of large blobs, thirty small templates that each
render a megabyte into every prompt. So every check of a repository gets one Budget (a
deadline, a byte allowance for reading, and one for what the check keeps in memory of what it
derives), created with its ModelRepo and handed to the readers and workers: each asks before it
starts (`remaining`, `take`, `keeping_left`), and what it had to leave out is recorded (`skip`,
once per thing and a bounded number of times), for the `check-incomplete` finding. Budgets are
explicit values passed down, never module globals.

Nothing here imports the rest of hfdoctor.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field

# What one `check` of one repository may spend. A real checkpoint's metadata is checked in
# about a second and its headers are kilobytes to a few MB; the limits only bind on hostile
# or pathological repositories, and then the report says what was left out.
DEFAULT_SECONDS = 30.0
DEFAULT_BYTES = 2 * 1024**3
# What one check may keep in memory of what it computed from the repository (its templates'
# renders): a real repository keeps a few MB. Past it, more analyses are left out (and said).
DEFAULT_KEEP_BYTES = 256 * 1024**2
# Entries `skipped` keeps; past them only a count (a GGUF of 20,000 named templates skips each).
MAX_SKIPPED = 64


@dataclass
class Budget:
    seconds: float = DEFAULT_SECONDS
    bytes: int = DEFAULT_BYTES
    started: float = field(default_factory=time.monotonic)
    spent_bytes: int = 0
    keep_bytes: int = DEFAULT_KEEP_BYTES
    kept_bytes: int = 0
    # "what was not checked (why)", in the order it happened; each `what` (or key) once, the
    # first MAX_SKIPPED of them, and how many more there were
    skipped: list[str] = field(default_factory=list)
    skipped_more: int = 0
    _skip_keys: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def from_env(cls) -> "Budget":
        """The default budget, or HFDOCTOR_BUDGET_SECONDS / HFDOCTOR_BUDGET_BYTES when set (a
        trusted, very large repository; a test that needs a small budget)."""
        def number(name: str, default: float) -> float:
            try:
                value = float(os.environ.get(name, ""))
            except ValueError:
                return default
            return value if value > 0 else default

        return cls(seconds=number("HFDOCTOR_BUDGET_SECONDS", DEFAULT_SECONDS),
                   bytes=int(number("HFDOCTOR_BUDGET_BYTES", DEFAULT_BYTES)))

    @property
    def deadline(self) -> float:
        return self.started + self.seconds

    def remaining(self) -> float:
        """Seconds left (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def bytes_left(self) -> int:
        return max(0, self.bytes - self.spent_bytes)

    def take(self, nbytes: int) -> bool:
        """Charge `nbytes` of reading; False (and nothing charged) when they do not fit."""
        if nbytes > self.bytes_left():
            return False
        self.spent_bytes += nbytes
        return True

    def keeping_left(self) -> int:
        """Bytes the check may still keep of what it derives (never negative)."""
        return max(0, self.keep_bytes - self.kept_bytes)

    def keep(self, nbytes: int) -> None:
        """Charge `nbytes` kept in memory until the check ends (charged after the fact: what is
        kept is known once computed, and each piece is bounded on its own)."""
        self.kept_bytes += nbytes

    def skip(self, what: str, why: str, key: str | None = None) -> None:
        """Record that `what` was not (fully) checked, and why; once per `key` (by default `what`:
        a caller that names each file it skips passes one key for "X and the files after it")."""
        key = what if key is None else key
        if key in self._skip_keys:
            return
        self._skip_keys.add(key)
        if len(self.skipped) < MAX_SKIPPED:
            self.skipped.append(f"{what} ({why})")
        else:
            self.skipped_more += 1

    def noted(self, key: str) -> bool:
        """Whether a skip was recorded under `key` (or with `what` equal to it)."""
        return key in self._skip_keys

    def skip_for_time(self, what: str, key: str | None = None) -> None:
        self.skip(what, f"the {self.seconds:g} s time budget of this repository ran out", key)

    def skip_for_bytes(self, what: str) -> None:
        self.skip(what, f"the {self.bytes / 1024**3:g} GiB read budget of this repository ran out")


def read_at_most(fd: int, limit: int) -> bytes | None:
    """The bytes of an open file, read in 1 MiB steps and never more than limit + 1 of them; None when
    the file holds more than `limit` bytes (it may have grown since its size was checked)."""
    chunks, total = [], 0
    while total <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks) if total <= limit else None


class NotReadable(Exception):
    """Why read_regular_file refused a path: it cannot be opened, is not a regular file, or is too large."""


def read_regular_file(path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, opened without blocking (a FIFO is refused, never
    waited on) and, with follow_symlinks=False, never through a symbolic link; NotReadable says why not."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise NotReadable(f"cannot be read: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotReadable("not a regular file")
        if info.st_size > limit:
            raise NotReadable(f"{info.st_size:,} bytes, more than the {limit:,} hfdoctor reads")
        data = read_at_most(fd, limit)
    except OSError as err:
        raise NotReadable(f"cannot be read: {err.strerror or err}") from None
    finally:
        os.close(fd)
    if data is None:  # it grew while read
        raise NotReadable(f"more than the {limit:,} bytes hfdoctor reads")
    return data
