"""A commit of a git repository: the tree being pushed, not the working tree.

Files come from git's object store (`git ls-tree`, `git cat-file`), so uncommitted edits
neither hide a broken file nor break a good push. A file stored in git-lfs is read from
`.git/lfs/objects` when its object is there (a clone after `git lfs pull`); otherwise the
pointer itself is what the commit holds, and lfs-pointer says so. An LFS oid is used only
when it is 64 hexadecimal digits (a pointer is repository data: `oid sha256:../../x` must
not become a path). Symbolic links are followed inside the tree; one that leaves it is an
`outside` entry, never read.

Only the repository's own objects are read: a `.git` that is a file (worktree, submodule),
objects/info/alternates, a link that leaves .git, or an included configuration file would
make git read another repository's, and is refused before git runs (own_repository).

git runs hardened (hfdoctor.bounded.programs): no global or system configuration, and no setting
of the repository's own .git/config that runs a program (fsmonitor, hooks, filters,
textconv, transports). Nothing here writes. A blob is read at most once, by one process,
and only as far as the readers need it, charged to the repository's byte budget.
"""

from __future__ import annotations

import io
import os
import posixpath
import string
import subprocess
import threading
from collections import OrderedDict
from functools import cached_property
from pathlib import Path
from typing import IO

from hfdoctor.bounded.budget import Budget
from hfdoctor.bounded.programs import ProgramMissing, git_command, hardened_env, run_git
from hfdoctor.sources import history
from hfdoctor.sources.base import SKIPPED_DIRS, Entry, Source, SourceError, Unreadable, read_limit
from hfdoctor.sources.history import PushedBlob
from hfdoctor.sources.local import MAX_WALK_ENTRIES

GIT_TIMEOUT_S = 60
LFS_PREFIX = b"version https://git-lfs.github.com/spec/"
LFS_POINTER_MAX = 1024
HEX = frozenset(string.hexdigits.lower())
# The most of one plain blob a ranged read pulls into memory (the pickle scanner reads up
# to 64 MB of a file; headers are far smaller).
MAX_BLOB_PREFIX = 128 * 1024 * 1024
# Of the prefixes read, the most recent are kept (a reader reads one file in several steps) up
# to this many bytes in all, never those of every blob: 5.6 MB of .git held 1.16 GB that way.
MAX_KEPT_PREFIX_BYTES = 128 * 1024 * 1024
MAX_LINK_BYTES = 4096  # PATH_MAX: a symbolic link's target
SMALL_BATCH_BYTES = 8 * 1024 * 1024  # of small blobs one `git cat-file --batch` returns
MAX_SMALL_BYTES = 64 * 1024 * 1024  # of small blobs kept in memory (a tree of 60,000 links)
MAX_CONTROL_FILE = 1024 * 1024  # .git/config, objects/info/alternates
MAX_GIT_DIR_ENTRIES = 1_000_000  # what is looked at below .git for links that leave it


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


def own_repository(directory: Path) -> tuple[Path, Path]:
    """(work tree, .git directory) of the repository git finds from `directory`, both real
    paths, when every object git would read lies in that .git directory; SourceError otherwise.

    git would also read objects from elsewhere: through a `.git` that is a file (a worktree
    or submodule: `gitdir: ../../elsewhere`), `objects/info/alternates` (another repository's
    object store), a link inside .git that leaves it, or a configuration file it includes.
    Each is refused here, before git runs, so that no outside object, ref or file can reach
    a report. (hooks/ is not looked at: git runs no hook for hfdoctor.)"""
    real = Path(os.path.realpath(directory))
    for top in (real, *real.parents):
        dot_git = top / ".git"
        if os.path.lexists(dot_git):
            break
    else:
        raise SourceError("is not inside a git repository")
    if dot_git.is_symlink() or not dot_git.is_dir():
        raise SourceError(f"{dot_git} is not a directory (a worktree, a submodule, or a link to another "
                          "repository's): hfdoctor reads only a repository's own .git directory; check the main "
                          "work tree, or this folder without --git-rev")
    config = _small_file(dot_git / "config")
    if any(line.strip().lower().startswith(("[include", "[includeif")) for line in config.splitlines()):
        raise SourceError(f"{dot_git / 'config'} includes another configuration file: hfdoctor reads only a "
                          "repository's own files")
    alternates = _small_file(dot_git / "objects" / "info" / "alternates")
    if any(line.strip() and not line.startswith("#") for line in alternates.splitlines()):
        raise SourceError(f"{dot_git} borrows objects from another repository (objects/info/alternates): hfdoctor "
                          "reads only a repository's own objects; `git repack -a -d` and removing that file makes "
                          "them its own")
    leaving = _link_leaving(dot_git)
    if leaving is not None:
        raise SourceError(f"{leaving} is a symbolic link out of {dot_git}: hfdoctor reads only a repository's own "
                          "files")
    return top, dot_git


def _small_file(path: Path) -> str:
    """A git control file's text ("" when it is absent); SourceError when it cannot be one."""
    if not os.path.lexists(path):
        return ""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_CONTROL_FILE:
            raise SourceError(f"{path} is not a git control file hfdoctor reads")
        return path.read_bytes().decode("utf-8", "replace")
    except OSError as err:
        raise SourceError(f"{path} cannot be read: {err.strerror or err}") from None


def _link_leaving(git_dir: Path) -> Path | None:
    """The first symbolic link below `git_dir` (hooks/ aside) whose target is outside it."""
    pending, seen = [git_dir], 0
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as listing:
                children = list(listing)
        except OSError as err:
            raise SourceError(f"{folder} cannot be listed: {err.strerror or err}") from None
        for child in children:
            seen += 1
            if seen > MAX_GIT_DIR_ENTRIES:
                raise SourceError(f"{git_dir} holds more than {MAX_GIT_DIR_ENTRIES:,} files (loose objects): "
                                  "`git gc` packs them")
            path = Path(child.path)
            if child.is_symlink():
                real = os.path.realpath(path)
                if not (real == str(git_dir) or real.startswith(str(git_dir) + os.sep)):
                    return path
            elif child.is_dir(follow_symlinks=False) and not (folder == git_dir and child.name == "hooks"):
                pending.append(path)
    return None


def _batch_blobs(top: Path, shas: list[str]) -> dict[str, bytes]:
    """sha -> bytes of each blob, from one `git cat-file --batch` (its output: a line
    `SHA TYPE SIZE`, SIZE bytes, a newline; or `SHA missing`)."""
    out = _git(top, "cat-file", "--batch", stdin="\n".join(shas) + "\n")
    found, at = {}, 0
    while at < len(out):
        end = out.find(b"\n", at)
        if end < 0:
            break
        parts = out[at:end].split()
        at = end + 1
        if len(parts) != 3 or not parts[2].isdigit():
            continue  # `SHA missing`
        size = int(parts[2])
        if parts[1] == b"blob":
            found[parts[0].decode()] = out[at:at + size]
        at += size + 1
    return found


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

    def __init__(self, directory: str | os.PathLike[str], rev: str, since: str | None = None,
                 remote: str | None = None):
        # since: the remote's commit of a push (the pre-push hook), or all zeros for a new
        # branch; then `pushed` lists the blobs of every pushed commit, not only the tip's.
        # remote: the remote pushed to (its name or URL): its tracking refs are what it has.
        history.check_since(since)
        history.check_remote(remote)
        if not rev or rev.startswith("-") or not rev.isprintable():
            raise SourceError(f"--git-rev {rev[:60]!r} is not a revision (it must not start with '-')")
        self.since = since
        self.remote = remote
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise SourceError("no such directory")
        top, git_dir = own_repository(self.directory)
        self.top = Path(_git(self.directory, "rev-parse", "--show-toplevel").decode().strip())
        reported = [Path(_git(self.directory, "rev-parse", flag).decode().strip()) for flag in
                    ("--absolute-git-dir", "--git-common-dir")]
        if os.path.realpath(self.top) != str(top) or any(
                os.path.realpath(p if p.is_absolute() else self.directory / p) != str(git_dir) for p in reported):
            raise SourceError(f"git does not take {git_dir} as this repository's own (core.worktree or a "
                              "worktree setting points elsewhere): hfdoctor reads only a repository's own objects")
        self.prefix = _git(self.directory, "rev-parse", "--show-prefix").decode().strip()
        self.commit = _git(self.directory, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
        self.git_dir = git_dir
        self.lfs_objects = git_dir / "lfs" / "objects"
        self.revision = {"requested": rev, "commit": self.commit}
        self._prefixes: OrderedDict[str, bytes] = OrderedDict()  # blob sha -> the bytes read of it, latest last

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
                if len(tree) >= MAX_WALK_ENTRIES:
                    (self.budget or Budget()).skip(f"the files after the first {MAX_WALK_ENTRIES:,}",
                                                   "too many files to list")
                    break
                tree[rel] = (mode, sha, int(size) if size.isascii() and size.isdecimal() else None)
        return tree

    @cached_property
    def _small(self) -> dict[str, bytes]:
        """The bytes of the tree's blobs that could be LFS pointers or link targets, read by
        one `git cat-file --batch` per SMALL_BATCH_BYTES (two processes a file took minutes
        for 20,000 small files). Past MAX_SMALL_BYTES in all the rest are read one by one."""
        wanted: dict[str, int] = {}
        for mode, sha, size in self._tree.values():
            if size is not None and size <= (MAX_LINK_BYTES if mode == "120000" else LFS_POINTER_MAX):
                wanted[sha] = size
        found: dict[str, bytes] = {}
        batch: list[str] = []
        batch_bytes = total = 0
        for sha, size in sorted(wanted.items()):
            if total + size > MAX_SMALL_BYTES:
                break
            batch.append(sha)
            batch_bytes, total = batch_bytes + size + 64, total + size + 64  # with its header line
            if batch_bytes >= SMALL_BATCH_BYTES:
                found.update(_batch_blobs(self.top, batch))
                batch, batch_bytes = [], 0
        if batch:
            found.update(_batch_blobs(self.top, batch))
        return found

    def _blob(self, sha: str, limit: int) -> bytes:
        small = self._small.get(sha) if limit <= MAX_LINK_BYTES else None
        if small is not None:
            if len(small) > limit:
                raise Unreadable(f"is {len(small):,} bytes, more than the {limit:,} hfdoctor reads of such a file")
            return small
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
        target = self._blob(sha, MAX_LINK_BYTES).decode("utf-8", "replace")
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
        if target.startswith("/") or joined.startswith(".."):
            return f"outside:is a symbolic link to {target}, outside the repository"
        return self._resolve(joined, depth + 1)

    def _lfs_path(self, oid: str) -> Path:
        return self.lfs_objects / oid[:2] / oid[2:4] / oid

    def _lfs_object(self, oid: str, size: int) -> bool:
        """Whether the LFS object is in this repository's own store, whole (no link, as git-lfs writes it)."""
        path = self._lfs_path(oid)
        try:
            return path.is_file() and not path.is_symlink() and path.stat().st_size == size
        except OSError:
            return False

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
                    if self._lfs_object(*pointer):
                        size, lfs = pointer[1], pointer
            found[rel] = Entry(rel, "file", size=size, lfs=lfs)
        return found

    def entries(self) -> dict[str, Entry]:
        return self._entries

    @cached_property
    def pushed(self) -> list[PushedBlob]:
        """Blobs the push sends that the tip does not hold (empty unless `since` was given): blob-level
        rules judge these too (hfdoctor.sources.history)."""
        if self.since is None:
            return []
        self.pushed_unjudged = False

        def git(*args: str, stdin: str | None = None) -> bytes:
            return _git(self.top, *args, stdin=stdin)

        objects, more = history.pushed_objects(self._git_lines, git, self.commit, self.since, self.remote,
                                               self.prefix)
        if more:
            self.pushed_unjudged = True  # what came after was never read: SEC009 says it is not proven safe
            (self.budget or Budget()).skip(f"the objects of this push after the first {history.MAX_PUSHED_OBJECTS:,}",
                                           "too many to judge")
        commits = history.pushed_commits(git, self.commit, self.since, self.remote)
        tip = {sha for _, sha, _ in self._tree.values()}
        return history.pushed_blobs(git, objects, commits, self.prefix, tip)

    def _git_lines(self, *args: str, limit: int):
        """The first `limit` lines git prints, read as it prints them (never all of them at once)."""
        proc = subprocess.Popen(git_command(*args, forbidden=[self.top]), cwd=self.top, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=hardened_env())
        timer = threading.Timer(GIT_TIMEOUT_S, proc.kill)
        timer.start()
        count = 0
        try:
            for line in proc.stdout or ():
                yield line
                count += 1
                if count >= limit:
                    return  # as many as asked for: git is stopped, not failed
        finally:
            timer.cancel()
            proc.kill()
            code = proc.wait(timeout=GIT_TIMEOUT_S)
        if code != 0:
            raise SourceError(f"git {args[0]} failed or took more than {GIT_TIMEOUT_S} s")

    def open_pushed(self, blob: PushedBlob, limit: int) -> IO[bytes] | None:
        """A pushed blob as a loader gets it: the LFS object a pointer names, when it is in this
        repository's store (git-lfs uploads it with the push), else the blob's own bytes (at most
        `limit`, charged to the budget). None for a pointer whose object is not here (nothing of it
        is uploaded). Unreadable when it is larger than `limit` or the budget ran out."""
        if blob.size > limit:
            raise Unreadable(f"is {blob.size:,} bytes, more than the {limit // (1 << 20)} MB hfdoctor reads of a "
                             "blob of an earlier commit")
        data = self.read_blob(blob.sha, limit, blob.size)
        pointer = lfs_oid(data) if len(data) <= LFS_POINTER_MAX and data.startswith(LFS_PREFIX) else None
        if pointer is None:
            return io.BytesIO(data)
        if not self._lfs_object(*pointer):
            return None
        return open(self._lfs_path(pointer[0]), "rb")

    def read_blob(self, sha: str, limit: int, size: int | None = None) -> bytes:
        """A pushed blob's bytes (at most `limit`; its size, when known, or `limit` charged to the budget)."""
        budget = self.budget or Budget()
        if not budget.take(min(limit, size) if size is not None else limit):
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
            if have:
                self._prefixes.move_to_end(sha)
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
        self._keep_prefix(sha, data)
        return data

    def _keep_prefix(self, sha: str, data: bytes) -> None:
        """Keep `data` as the latest prefix; drop the oldest others past MAX_KEPT_PREFIX_BYTES."""
        self._prefixes.pop(sha, None)
        self._prefixes[sha] = data
        kept = sum(len(prefix) for prefix in self._prefixes.values())
        while kept > MAX_KEPT_PREFIX_BYTES and len(self._prefixes) > 1:
            _, dropped = self._prefixes.popitem(last=False)
            kept -= len(dropped)
