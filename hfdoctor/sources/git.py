"""A commit of a git repository: the tree being pushed, not the working tree.

Files come from git's object store (`git ls-tree`, `git cat-file`), so uncommitted edits
neither hide a broken file nor break a good push. A file stored in git-lfs is read from
`.git/lfs/objects` when its object is there (a clone after `git lfs pull`); otherwise the
pointer itself is what the commit holds, and lfs-pointer says so. An LFS oid is used only
when it is 64 hexadecimal digits (a pointer is repository data: `oid sha256:../../x` must
not become a path). Symbolic links are followed inside the tree; one that leaves it is an
`outside` entry, never read.

git runs hardened (hfdoctor.programs): no global or system configuration, and no setting
of the repository's own .git/config that runs a program (fsmonitor, hooks, filters,
textconv, transports). Nothing here writes. A blob is read at most once, by one process,
and only as far as the readers need it, charged to the repository's byte budget.
"""

from __future__ import annotations

import os
import posixpath
import string
import subprocess
from functools import cached_property
from pathlib import Path

from hfdoctor.budget import Budget
from hfdoctor.programs import ProgramMissing, git_command, hardened_env, run_git
from hfdoctor.sources import history
from hfdoctor.sources.base import SKIPPED_DIRS, Entry, Source, SourceError, Unreadable, read_limit
from hfdoctor.sources.history import PushedBlob

GIT_TIMEOUT_S = 60
LFS_PREFIX = b"version https://git-lfs.github.com/spec/"
LFS_POINTER_MAX = 1024
HEX = frozenset(string.hexdigits.lower())
# The most of one plain blob a ranged read pulls into memory (the pickle scanner reads up
# to 64 MB of a file; headers are far smaller).
MAX_BLOB_PREFIX = 128 * 1024 * 1024


def _git(cwd: Path, *args: str, stdin: str | None = None) -> bytes:
    try:
        done = run_git(cwd, *args, timeout=GIT_TIMEOUT_S, stdin=stdin.encode() if stdin is not None else None)
    except ProgramMissing as err:
        raise SourceError(str(err)) from None
    except subprocess.TimeoutExpired:
        raise SourceError(f"git {args[0]} took more than {GIT_TIMEOUT_S} s") from None
    except OSError as err:
        raise SourceError(f"git cannot be run: {err.strerror or err}") from None
    if done.returncode != 0:
        raise SourceError(f"git {' '.join(args[:2])} failed: {done.stderr.decode(errors='replace').strip()[:300]}")
    return done.stdout


def lfs_oid(pointer: bytes) -> tuple[str, int] | None:
    """(sha256 oid, size) of a git-lfs pointer; None unless the oid is 64 hex digits."""
    text = pointer.decode("utf-8", "replace")
    oid = next((line[len("oid sha256:"):].strip() for line in text.splitlines() if line.startswith("oid sha256:")), "")
    size = next((line[len("size "):].strip() for line in text.splitlines() if line.startswith("size ")), "")
    if len(oid) != 64 or not set(oid) <= HEX or not (size.isascii() and size.isdecimal()):
        return None
    return oid, int(size)


class GitSource(Source):
    kind = "git"

    def __init__(self, directory: str | os.PathLike[str], rev: str, since: str | None = None):
        # since: the remote's commit of a push (the pre-push hook), or all zeros for a new
        # branch; then `pushed` lists the blobs of every pushed commit, not only the tip's.
        history.check_since(since)
        self.since = since
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise SourceError(f"{directory}: no such directory")
        self.top = Path(_git(self.directory, "rev-parse", "--show-toplevel").decode().strip())
        self.prefix = _git(self.directory, "rev-parse", "--show-prefix").decode().strip()
        self.commit = _git(self.directory, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
        common = Path(_git(self.directory, "rev-parse", "--git-common-dir").decode().strip())
        self.lfs_objects = (common if common.is_absolute() else self.directory / common) / "lfs" / "objects"
        self.revision = {"requested": rev, "commit": self.commit}
        self._prefixes: dict[str, bytes] = {}  # blob sha -> the bytes read of it so far

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
                tree[rel] = (mode, sha, int(size) if size.isascii() and size.isdecimal() else None)
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

    def _lfs_path(self, oid: str) -> Path:
        return self.lfs_objects / oid[:2] / oid[2:4] / oid

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
                pointer = lfs_oid(blob) if blob.startswith(LFS_PREFIX) else None
                if pointer is not None:
                    path = self._lfs_path(pointer[0])
                    if path.is_file() and not path.is_symlink() and path.stat().st_size == pointer[1]:
                        size, lfs = pointer[1], pointer
            found[rel] = Entry(rel, "file", size=size, lfs=lfs)
        return found

    def entries(self) -> dict[str, Entry]:
        return self._entries

    @cached_property
    def pushed(self) -> list[PushedBlob]:
        """Blobs the pushed commits add that the tip does not hold (empty unless `since` was
        given): blob-level rules judge these too (hfdoctor.sources.history)."""
        if self.since is None:
            return []

        def git(*args: str, stdin: str | None = None) -> bytes:
            return _git(self.top, *args, stdin=stdin)

        commits = history.pushed_commits(git, self.commit, self.since)
        tip = {sha for _, sha, _ in self._tree.values()}
        return history.added_blobs(git, [c for c in commits if c != self.commit] + [self.commit], self.prefix, tip)

    def read_blob(self, sha: str, limit: int) -> bytes:
        """A pushed blob's bytes (at most `limit`, charged to the budget)."""
        budget = self.budget or Budget()
        if not budget.take(limit):
            budget.skip_for_bytes("blobs of earlier pushed commits")
            raise Unreadable("was not read: the read budget of this check ran out")
        return self._blob(sha, limit)

    def identity(self, rel: str) -> tuple | None:
        resolved = self._resolve(rel)
        if isinstance(resolved, str):
            return None
        entry = self._entries.get(rel)
        return ("lfs", entry.lfs[0]) if entry is not None and entry.lfs else ("blob", resolved[1])

    def _content(self, rel: str, limit: int) -> tuple[Path | None, bytes | None]:
        """(an LFS object file, None) or (None, the blob's bytes)."""
        resolved = self._resolve(rel)
        if isinstance(resolved, str):
            raise Unreadable(resolved.partition(":")[2] if resolved.startswith("outside:") else resolved)
        _, sha, size = resolved
        entry = self._entries.get(rel)
        if entry is not None and entry.lfs is not None:
            return self._lfs_path(entry.lfs[0]), None
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
            with open(self._lfs_path(entry.lfs[0]), "rb") as f:
                return os.pread(f.fileno(), length, start)
        resolved = self._resolve(rel)
        if isinstance(resolved, str):
            raise Unreadable(resolved.partition(":")[2] if resolved.startswith("outside:") else resolved)
        return self._blob_prefix(resolved[1], resolved[2], start + length)[start:start + length]

    def _blob_prefix(self, sha: str, size: int | None, n: int) -> bytes:
        """At least the first `n` bytes of a blob (all of it when shorter), from one `git
        cat-file` per doubling of what was read: sequential small reads cost one pass."""
        have = self._prefixes.get(sha, b"")
        whole = size is not None and len(have) >= size
        if len(have) >= n or whole:
            return have
        want = min(max(n, 2 * len(have), 1 << 20), MAX_BLOB_PREFIX)
        if want <= len(have):
            raise Unreadable(f"is read beyond the first {MAX_BLOB_PREFIX // (1 << 20)} MB hfdoctor takes of a git blob")
        budget = self.budget or Budget()
        if not budget.take(want - len(have)):
            budget.skip_for_bytes("the rest of large git blobs")
            raise Unreadable("was not read further: the read budget of this check ran out")
        proc = subprocess.Popen(git_command("cat-file", "blob", sha, forbidden=[self.top]), cwd=self.top,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=hardened_env())
        try:
            data = proc.stdout.read(want) if proc.stdout else b""
        finally:
            proc.kill()
            proc.wait(timeout=GIT_TIMEOUT_S)
        self._prefixes[sha] = data
        return data
