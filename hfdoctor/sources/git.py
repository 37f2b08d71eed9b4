"""A commit of a git repository: the tree being pushed, not the working tree.

Files come from git's object store (`git ls-tree`, `git cat-file`), so uncommitted edits
neither hide a broken file nor break a good push. A file stored in git-lfs is read from
`.git/lfs/objects` when its object is there (a clone after `git lfs pull`); otherwise the
pointer itself is what the commit holds, and lfs-pointer says so. Symbolic links are
followed inside the tree; one that leaves it is an `outside` entry, never read. Nothing
here writes, and git is run without a shell, with a timeout.
"""

from __future__ import annotations

import os
import posixpath
import subprocess
from functools import cached_property
from pathlib import Path

from hfdoctor.sources.base import SKIPPED_DIRS, Entry, Source, SourceError, Unreadable, read_limit

GIT_TIMEOUT_S = 60
LFS_PREFIX = b"version https://git-lfs.github.com/spec/"
LFS_POINTER_MAX = 1024


def _git(cwd: Path, *args: str, data: bool = False) -> bytes:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise SourceError("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise SourceError(f"git {args[0]} took more than {GIT_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise SourceError(f"git {' '.join(args[:2])} failed: {done.stderr.decode(errors='replace').strip()[:300]}")
    return done.stdout


class GitSource(Source):
    kind = "git"

    def __init__(self, directory: str | os.PathLike[str], rev: str):
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise SourceError(f"{directory}: no such directory")
        self.top = Path(_git(self.directory, "rev-parse", "--show-toplevel").decode().strip())
        self.prefix = _git(self.directory, "rev-parse", "--show-prefix").decode().strip()
        self.commit = _git(self.directory, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
        common = Path(_git(self.directory, "rev-parse", "--git-common-dir").decode().strip())
        self.lfs_objects = (common if common.is_absolute() else self.directory / common) / "lfs" / "objects"
        self.revision = {"requested": rev, "commit": self.commit}

    @property
    def label(self) -> str:
        return f"{self.directory}@{self.commit[:12]}"

    @cached_property
    def _tree(self) -> dict[str, tuple[str, str, int | None]]:
        """path below the target directory -> (mode, blob sha, size)."""
        out = _git(self.top, "ls-tree", "-r", "-l", "-z", self.commit, "--", self.prefix or ".")
        tree = {}
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _, path = record.partition(b"\t")
            mode, kind, sha, size = meta.decode().split()
            rel = path.decode("utf-8", "surrogateescape")[len(self.prefix):]
            if kind == "blob" and not any(part in SKIPPED_DIRS for part in rel.split("/")[:-1]):
                tree[rel] = (mode, sha, int(size) if size.isdigit() else None)
        return tree

    def _blob(self, sha: str, limit: int) -> bytes:
        size = int(_git(self.top, "cat-file", "-s", sha).decode().strip())
        if size > limit:
            raise Unreadable(f"is {size:,} bytes, more than the {limit:,} hfdoctor reads of such a file")
        return _git(self.top, "cat-file", "blob", sha)

    def _resolve(self, rel: str, depth: int = 0) -> tuple[str, str, int | None] | str:
        """The blob a path ends at (following in-tree symlinks), or why it cannot be read."""
        found = self._tree.get(rel)
        if found is None:
            return "is missing"
        mode, sha, size = found
        if mode != "120000":
            return found
        if depth > 16:
            return "is a symbolic link loop"
        target = self._blob(sha, 4096).decode("utf-8", "replace")
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
        if target.startswith("/") or joined.startswith(".."):
            return f"outside:is a symbolic link to {target}, outside the repository"
        return self._resolve(joined, depth + 1)

    def _lfs_object(self, pointer: bytes) -> tuple[Path, int] | None:
        text = pointer.decode("utf-8", "replace")
        oid = next((line.split(":", 1)[1] for line in text.splitlines() if line.startswith("oid sha256:")), None)
        size = next((line.split()[1] for line in text.splitlines() if line.startswith("size ")), None)
        if not oid or not size or not size.isdigit():
            return None
        path = self.lfs_objects / oid[:2] / oid[2:4] / oid
        return (path, int(size)) if path.is_file() and path.stat().st_size == int(size) else None

    @cached_property
    def _entries(self) -> dict[str, Entry]:
        found: dict[str, Entry] = {}
        for rel in sorted(self._tree):
            resolved = self._resolve(rel)
            if isinstance(resolved, str):
                kind, _, detail = resolved.partition(":") if resolved.startswith("outside:") else ("broken", "", resolved)
                found[rel] = Entry(rel, kind, detail=detail)
                continue
            _, sha, size = resolved
            lfs = None
            if size is not None and size <= LFS_POINTER_MAX:
                blob = self._blob(sha, LFS_POINTER_MAX)
                obj = self._lfs_object(blob) if blob.startswith(LFS_PREFIX) else None
                if obj is not None:
                    size = obj[1]
                    lfs = (obj[0].name, obj[1])
            found[rel] = Entry(rel, "file", size=size, lfs=lfs)
        return found

    def entries(self) -> dict[str, Entry]:
        return self._entries

    def _content(self, rel: str, limit: int) -> tuple[Path | None, bytes | None]:
        """(an LFS object file, None) or (None, the blob's bytes)."""
        resolved = self._resolve(rel)
        if isinstance(resolved, str):
            raise Unreadable(resolved.partition(":")[2] if resolved.startswith("outside:") else resolved)
        _, sha, size = resolved
        entry = self._entries.get(rel)
        if entry is not None and entry.lfs is not None:
            obj = self.lfs_objects / entry.lfs[0][:2] / entry.lfs[0][2:4] / entry.lfs[0]
            return obj, None
        return None, self._blob(sha, limit)

    def read(self, rel: str, limit: int | None = None) -> bytes:
        limit = read_limit(rel) if limit is None else limit
        path, data = self._content(rel, limit)
        if path is None:
            return data or b""
        if path.stat().st_size > limit:
            raise Unreadable(f"is {path.stat().st_size:,} bytes, more than the {limit:,} hfdoctor reads of such a file")
        return path.read_bytes()

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        entry = self._entries.get(rel)
        if entry is not None and entry.lfs is not None:
            path = self.lfs_objects / entry.lfs[0][:2] / entry.lfs[0][2:4] / entry.lfs[0]
            with open(path, "rb") as f:
                return os.pread(f.fileno(), length, start)
        resolved = self._resolve(rel)
        if isinstance(resolved, str):
            raise Unreadable(resolved.partition(":")[2] if resolved.startswith("outside:") else resolved)
        return self._blob_prefix(resolved[1], start + length)[start:]

    def _blob_prefix(self, sha: str, n: int) -> bytes:
        """The first `n` bytes of a blob, without reading the rest (a weight file kept in git)."""
        proc = subprocess.Popen(["git", "cat-file", "blob", sha], cwd=self.top, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        try:
            data = proc.stdout.read(n) if proc.stdout else b""
        finally:
            proc.kill()
            proc.wait(timeout=GIT_TIMEOUT_S)
        return data
