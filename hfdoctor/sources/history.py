"""The blobs a push carries besides its tip: every file version added by the pushed commits.

The Hub refuses a push that carries a plain blob over 10 MiB whatever the tip holds, and
a pickle payload added in one commit and removed in the next stays downloadable by
revision. So the pre-push hook judges blob-level properties (size, pickle imports) over
every commit being pushed: `remote..local` for an existing branch, and for a new one
every commit no remote-tracking ref has. Repository-level rules keep judging the tip:
that is what gets served.

Each blob is listed once, with the first pushed commit that adds it; blobs that the tip
itself holds are left to the ordinary rules (judged once, not twice). git runs hardened
(hfdoctor.bounded.programs), as for the rest of the git source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hfdoctor.sources.base import SourceError

ZERO = frozenset("0")
HEX_ID = re.compile(r"[0-9a-fA-F]{4,64}")
MAX_COMMITS = 10_000  # a push of more is listed that far (check-incomplete says so)


@dataclass(frozen=True)
class PushedBlob:
    commit: str  # the first pushed commit that adds this blob
    path: str  # its path in that commit, below the checked directory
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


def pushed_commits(git, tip: str, since: str | None) -> list[str]:
    """The commits a push of `tip` carries, oldest first. `git` runs git in the repository."""
    if is_null(since) or not _exists(git, since):
        args = ["rev-list", "--reverse", f"--max-count={MAX_COMMITS}", tip, "--not", "--remotes"]
    else:
        args = ["rev-list", "--reverse", f"--max-count={MAX_COMMITS}", f"{since}..{tip}"]
    return [line for line in git(*args).decode().split() if line]


def _exists(git, sha: str) -> bool:
    try:
        git("cat-file", "-e", f"{sha}^{{commit}}")
    except Exception:  # noqa: BLE001 - SourceError: the remote's commit is not here (a force push)
        return False
    return True


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


def _sizes(git, shas: list[str]) -> dict[str, int]:
    out = git("cat-file", "--batch-check=%(objectname) %(objectsize)", stdin="\n".join(shas) + "\n")
    sizes = {}
    for line in out.decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdecimal():
            sizes[parts[0]] = int(parts[1])
    return sizes
