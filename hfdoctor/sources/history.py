"""The blobs a push carries besides its tip: every file version the pushed commits bring.

The Hub refuses a push that carries a plain blob over 10 MiB whatever the tip holds, and
a pickle payload added in one commit and removed in the next stays downloadable by
revision. So the pre-push hook judges blob-level properties (size, pickle imports) over
every object the push sends: `git rev-list --objects TIP --not WHAT-THE-REMOTE-HAS`, the
set git's own pack is built from, merges and any number of commits included. What the
remote has is the commit its ref points at (`since`, when it is here) and the tracking
refs of *that* remote (`refs/remotes/NAME/*`), never another remote's: a fork that never
saw a commit is sent it. With no remote named, nothing else is taken as known. Repository-
level rules keep judging the tip: that is what gets served.

Each blob is listed once, with the first pushed commit that adds it (read from the first
MAX_COMMITS commits, oldest first; a blob only a merge brings, or one past them, is listed
with no commit); blobs that the tip itself holds are left to the ordinary rules (judged
once, not twice). A push of more than MAX_PUSHED_OBJECTS objects is judged that far, and
the rest is said (check-incomplete). git runs hardened (hfdoctor.bounded.programs), as for
the rest of the git source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from hfdoctor.sources.base import SourceError

ZERO = frozenset("0")
HEX_ID = re.compile(r"[0-9a-fA-F]{4,64}")
MAX_COMMITS = 10_000  # commits read for who added a blob (the oldest first)
MAX_PUSHED_OBJECTS = 1_000_000  # objects of one push judged (check-incomplete says when there are more)
GLOB = frozenset("*?[\\")


@dataclass(frozen=True)
class PushedBlob:
    commit: str  # the first pushed commit that adds this blob ("" when none of the commits read shows it)
    path: str  # its path (where the push first shows it), below the checked directory
    sha: str
    size: int


def is_null(sha: str | None) -> bool:
    """git's all-zero id (a new branch in the pre-push protocol), or nothing."""
    return not sha or set(sha) <= ZERO


def check_since(since: str | None) -> None:
    """`since` must be a commit id (what git gives a pre-push hook): anything else, an option
    included, is refused before it can reach git's command line."""
    if since is not None and not is_null(since) and not HEX_ID.fullmatch(since):
        raise SourceError(f"--git-since {since[:60]!r} is not a commit id (4 to 64 hexadecimal digits)")


def check_remote(remote: str | None) -> None:
    """The remote a push goes to (its name, or the URL it was given as): printable, and never an option."""
    if remote is not None and (not remote.isprintable() or remote.startswith("-") or len(remote) > 4096):
        raise SourceError(f"--git-remote {remote[:60]!r} is not a remote's name or URL")


def known_to_remote(git, since: str | None, remote: str | None) -> list[str]:
    """What the remote has, as rev-list arguments to put after --not: the commit its ref points at,
    when it is here (not after a force push from elsewhere), and that remote's tracking refs. A
    remote given as a URL, or whose name is a glob, has no tracking refs here to trust."""
    known = [since] if not is_null(since) and _exists(git, since) else []
    if remote and not set(remote) & GLOB and "://" not in remote:
        known.append(f"--remotes={remote}")
    return known


def pushed_commits(git, tip: str, since: str | None, remote: str | None = None) -> list[str]:
    """The first MAX_COMMITS commits a push of `tip` carries, oldest first. `git` runs git in the repository."""
    out = git("rev-list", "--reverse", tip, "--not", *known_to_remote(git, since, remote), "--")
    return [line for line in out.decode().split()[:MAX_COMMITS] if line]


def pushed_objects(lines: Callable[..., Iterable[bytes]], git, tip: str, since: str | None, remote: str | None,
                   prefix: str) -> tuple[dict[str, str], bool]:
    """(object id -> its path below `prefix`, whether there were more than MAX_PUSHED_OBJECTS): the
    trees and blobs the push sends. `lines(*args, limit=N)` yields git's first N output lines."""
    found: dict[str, str] = {}
    args = ("rev-list", "--objects", tip, "--not", *known_to_remote(git, since, remote), "--")
    count = 0
    for line in lines(*args, limit=MAX_PUSHED_OBJECTS + 1):
        count += 1
        if count > MAX_PUSHED_OBJECTS:
            return found, True
        sha, sep, path = line.rstrip(b"\n").partition(b" ")
        if not sep:
            continue  # a commit
        rel = path.decode("utf-8", "surrogateescape")
        if rel.startswith(prefix) and rel != prefix.rstrip("/"):
            found.setdefault(sha.decode("ascii", "replace"), rel[len(prefix):])
    return found, False


def _exists(git, sha: str) -> bool:
    try:
        git("cat-file", "-e", f"{sha}^{{commit}}")
    except Exception:  # noqa: BLE001 - SourceError: the remote's commit is not here (a force push)
        return False
    return True


def pushed_blobs(git, objects: dict[str, str], commits: list[str], prefix: str,
                 tip_blobs: set[str]) -> list[PushedBlob]:
    """The blobs among `objects` that the tip does not hold, each with the first of `commits` that adds it."""
    if not objects:
        return []
    kinds = _kinds(git, list(objects))
    wanted = {sha: path for sha, path in objects.items() if kinds.get(sha, ("", 0))[0] == "blob"
              and sha not in tip_blobs}
    if not wanted:
        return []
    attributed = [blob for blob in added_blobs(git, commits, prefix, tip_blobs) if blob.sha in wanted]
    seen = {blob.sha for blob in attributed}
    rest = [PushedBlob("", path, sha, kinds[sha][1]) for sha, path in sorted(wanted.items(), key=lambda item: item[1])
            if sha not in seen]
    return attributed + rest


def added_blobs(git, commits: list[str], prefix: str, tip_blobs: set[str]) -> list[PushedBlob]:
    """Blobs the commits add or modify below `prefix`, not in the tip, each once."""
    seen: set[str] = set(tip_blobs)
    found: list[tuple[str, str, str]] = []
    if not commits:
        return []
    # One process for all commits: `--stdin` prints each commit's id, then its changes
    # (`:META\0PATH\0`), in the order given.
    out = git("diff-tree", "--stdin", "-r", "-z", "--root", "--no-renames", "--", prefix or ".",
              stdin="\n".join(commits) + "\n")
    fields = iter(out.split(b"\0"))
    commit = ""
    for field in fields:
        if not field.startswith(b":"):
            commit = field.decode("ascii", "replace").strip()
            continue
        path = next(fields, b"")
        parts = field.decode("ascii", "replace").split()
        if len(parts) < 5 or parts[4][:1] not in ("A", "M", "T") or parts[1] in ("120000", "160000"):
            continue
        sha = parts[3]
        if sha in seen:
            continue
        seen.add(sha)
        found.append((commit, path.decode("utf-8", "surrogateescape")[len(prefix):], sha))
    if not found:
        return []
    sizes = _sizes(git, [sha for _, _, sha in found])
    return [PushedBlob(commit, path, sha, sizes.get(sha, 0)) for commit, path, sha in found]


def _kinds(git, shas: list[str]) -> dict[str, tuple[str, int]]:
    """object id -> (its type, its size), by one `git cat-file --batch-check`."""
    out = git("cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)", stdin="\n".join(shas) + "\n")
    kinds = {}
    for line in out.decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdecimal():
            kinds[parts[0]] = (parts[1], int(parts[2]))
    return kinds


def _sizes(git, shas: list[str]) -> dict[str, int]:
    out = git("cat-file", "--batch-check=%(objectname) %(objectsize)", stdin="\n".join(shas) + "\n")
    sizes = {}
    for line in out.decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdecimal():
            sizes[parts[0]] = int(parts[1])
    return sizes
