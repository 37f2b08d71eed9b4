"""A repository that is a directory on this disk.

Only regular files are read, and never in a way that can block: a file is opened with
O_NONBLOCK and checked with fstat before a byte is read, so a FIFO or a device named
config.json is reported, not waited on. A symlink is followed only when it stays inside
the repository; one that leaves it is an entry of its own (`outside`), never read
through. A Hugging Face cache snapshot (models--ORG--NAME/snapshots/REV/), whose files
are symlinks into the same model folder's blobs/, counts that blobs/ folder as inside.
"""

from __future__ import annotations

import errno
import os
import stat
from functools import cached_property
from pathlib import Path

from hfdoctor.bounded.budget import Budget, read_at_most
from hfdoctor.sources.base import SKIPPED_DIRS, WEIGHT_SUFFIXES, Entry, Source, Unreadable, read_limit

# How much of a tree is walked: no model repository is this deep or this large, and a
# hostile one that is must not hang the walk (os.walk recurses in Python 3.11).
MAX_WALK_DEPTH = 64
MAX_WALK_ENTRIES = 200_000
# A directory named like a file hfdoctor reads is an entry of its own ("is a directory, not
# a file"), so that the rule reading it says so instead of finding nothing.
FILE_LIKE_SUFFIXES = (*WEIGHT_SUFFIXES, ".json", ".jinja", ".md", ".model", ".txt", ".yaml", ".yml", ".gitattributes")


def _kind_of_mode(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class LocalSource(Source):
    kind = "directory"

    def __init__(self, root: str | os.PathLike[str], only: str | None = None):
        # only: the one file of `root` that is the repository (a single .gguf given as TARGET);
        # nothing else of the folder is listed or read.
        self.root = Path(root)
        self.only = only

    @property
    def label(self) -> str:
        return str(self.root)

    @property
    def local_dir(self) -> Path:
        return self.root

    @cached_property
    def allowed_roots(self) -> tuple[Path, ...]:
        """Real directories a symlink may point into: the root, and a cache snapshot's blobs/."""
        real = self.root.resolve()
        roots = [real]
        if real.parent.name == "snapshots" and real.parent.parent.name.startswith(("models--", "datasets--")):
            roots.append(real.parent.parent / "blobs")
        return tuple(roots)

    def _inside(self, real: Path) -> bool:
        return any(real == r or real.is_relative_to(r) for r in self.allowed_roots)

    def entry_of(self, rel: str) -> Entry:
        """What the path `rel` is, without opening it."""
        path = self.root / rel
        try:
            st = os.lstat(path)
        except OSError:
            return Entry(rel, "broken", detail="is missing")
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            real = Path(os.path.realpath(path))
            if not self._inside(real):
                return Entry(rel, "outside", detail=f"is a symbolic link to {target}, outside the repository")
            try:
                st = os.stat(path)
            except OSError as err:
                if err.errno == errno.ELOOP:
                    return Entry(rel, "broken", detail="is a symbolic link loop")
                return Entry(rel, "broken", detail=f"is a broken symbolic link (to {target})")
        if stat.S_ISDIR(st.st_mode):
            return Entry(rel, "dir", detail="is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            return Entry(rel, "special", detail=f"is {_kind_of_mode(st.st_mode)}, not a regular file: not read")
        return Entry(rel, "file", size=st.st_size)

    @cached_property
    def _entries(self) -> dict[str, Entry]:
        """One walk of the tree, iterative and bounded (MAX_WALK_DEPTH, MAX_WALK_ENTRIES).

        Symlinked directories are not followed (a link loop cannot hang the walk); one that
        leaves the repository is an entry of its own. A directory that cannot be listed, or
        lies too deep, is left out and said (the budget's `skipped`, check-incomplete).
        """
        if self.only is not None:
            return {self.only: self.entry_of(self.only)}
        budget = self.budget or Budget()
        found: dict[str, Entry] = {}
        pending: list[tuple[str, int]] = [("", 0)]
        while pending:
            rel_dir, depth = pending.pop()
            try:
                with os.scandir(self.root / rel_dir if rel_dir else self.root) as listing:
                    children = sorted(listing, key=lambda e: e.name)
            except OSError as err:
                budget.skip(f"the files below {rel_dir or '.'}/", f"the directory cannot be listed: {err.strerror or err}")
                continue
            for child in children:
                rel = f"{rel_dir}/{child.name}" if rel_dir else child.name
                if len(found) >= MAX_WALK_ENTRIES:
                    budget.skip("the files after the first " + f"{MAX_WALK_ENTRIES:,}", "too many files to list")
                    return dict(sorted(found.items()))
                try:
                    is_dir = child.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir:
                    if child.name in SKIPPED_DIRS:
                        continue
                    if rel.lower().endswith(FILE_LIKE_SUFFIXES):
                        found[rel] = self.entry_of(rel)
                    if depth + 1 >= MAX_WALK_DEPTH:
                        budget.skip(f"the files below {rel}/", f"more than {MAX_WALK_DEPTH} directories deep")
                        continue
                    pending.append((rel, depth + 1))
                else:
                    found[rel] = self.entry_of(rel)
        return dict(sorted(found.items()))

    def entries(self) -> dict[str, Entry]:
        return self._entries

    def _open(self, rel: str) -> int:
        """A descriptor of the regular file `rel`, opened without blocking and checked."""
        entry = self._entries.get(rel)
        if entry is None:
            if self.only is not None:
                raise Unreadable("is not part of the target (one file)")
            entry = self.entry_of(rel)
        if not entry.is_file:
            raise Unreadable(entry.detail)
        try:
            fd = os.open(self.root / rel, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        except OSError as err:
            raise Unreadable(f"cannot be read: {err.strerror or err}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # it changed since the walk
            os.close(fd)
            raise Unreadable(f"is {_kind_of_mode(st.st_mode)}, not a regular file: not read")
        return fd

    def read(self, rel: str, limit: int | None = None) -> bytes:
        limit = read_limit(rel) if limit is None else limit
        fd = self._open(rel)
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                raise Unreadable(f"is {size:,} bytes, more than the {limit:,} hfdoctor reads of such a file")
            data = read_at_most(fd, limit)
            if data is None:  # it grew while we read
                raise Unreadable(f"is more than the {limit:,} bytes hfdoctor reads of such a file")
            return data
        except OSError as err:
            raise Unreadable(f"cannot be read: {err.strerror or err}") from None
        finally:
            os.close(fd)

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        fd = self._open(rel)
        try:
            return os.pread(fd, length, start)
        except OSError as err:
            raise Unreadable(f"cannot be read: {err.strerror or err}") from None
        finally:
            os.close(fd)

    def open(self, rel: str):
        fd = self._open(rel)
        return os.fdopen(fd, "rb")

    def identity(self, rel: str) -> tuple | None:
        """The inode: hard links to one file are one file (read, scanned and charged once)."""
        try:
            st = os.stat(self.root / rel)
        except OSError:
            return None
        return ("inode", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
