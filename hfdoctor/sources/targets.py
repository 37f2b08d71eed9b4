"""TARGET text -> a Source: a directory, a Hub repo at a revision, or a git commit.

- `--git-rev REV DIR`: the tree of commit REV of the git repository at DIR (GitSource).
- an existing directory: read from disk (LocalSource); a `.gguf` file: that file alone.
- `ORG/NAME`, `ORG/NAME@REV`, or `--revision REV`: a Hub repo (HubSource), always at the
  revision's current commit; nothing is cached unless `cache=True`. With
  HF_HUB_OFFLINE=1, the local HF cache's snapshot of that revision, only when it is
  complete for what the rules read (each file is there, or recorded as absent in
  `.no_exist/`), and the report names its commit (hfdoctor.sources.hub_cache). Every
  revision is checked first (hfdoctor.sources.revisions): what reaches a cache path stays
  in the cache.
- anything else that looks like a path (`./x`, `/x`, `~/x`, `checkpoints/x` where
  `checkpoints/` exists here, more than one slash) is a missing directory, never sent to
  the Hub as a repo id.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from hfdoctor.sources.base import Source, SourceError
from hfdoctor.sources.git import GitSource
from hfdoctor.sources.hub import HubLimits, HubSource
from hfdoctor.sources.hub_cache import cached_snapshot, write_cache
from hfdoctor.sources.local import LocalSource
from hfdoctor.sources.revisions import check_revision

REPO_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.\-]{0,95}/[A-Za-z0-9][\w.\-]{0,95})(?:@(?P<rev>[^\s@]{1,255}))?$")


@dataclass(frozen=True)
class TargetOptions:
    revision: str | None = None  # --revision, for Hub ids
    git_rev: str | None = None  # --git-rev, for directories
    git_since: str | None = None  # --git-since: the commits after it are pushed too (blob rules)
    git_remote: str | None = None  # --git-remote: the remote pushed to (what its tracking refs have is not sent)
    cache: bool = False  # write what a Hub check downloads into the HF cache
    timeout_s: float = 120.0  # the deadline of one Hub repository


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def looks_like_path(target: str) -> bool:
    # A revision may hold slashes (`ORG/NAME@refs/pr/1`, a pull request): count them before '@'.
    name = target.split("@", 1)[0] if REPO_ID.match(target) else target
    if target.startswith(("./", "../", "/", "~", ".\\")) or name.count("/") > 1 or os.sep != "/" and os.sep in name:
        return True
    first = target.split("/", 1)[0]
    return "/" in target and os.path.isdir(first)


def open_source(target: str, options: TargetOptions | None = None) -> Source:
    """The source TARGET names; SourceError with a message for the user when there is none.

    Messages do not name the target: whoever reports them does, once.
    """
    options = options or TargetOptions()
    if options.git_rev is not None:
        return GitSource(target, options.git_rev, since=options.git_since, remote=options.git_remote)
    if os.path.isdir(target):
        if options.revision is not None:
            raise SourceError("--revision is for Hub repositories; this is a directory (use --git-rev)")
        return LocalSource(target)
    if os.path.isfile(target) and target.lower().endswith(".gguf"):
        if options.revision is not None:
            raise SourceError("--revision is for Hub repositories; this is a file")
        return LocalSource(os.path.dirname(target) or ".", only=os.path.basename(target))
    if os.path.exists(target):
        raise SourceError("is a file; give the checkpoint directory that holds it (or a .gguf file)")
    match = REPO_ID.match(target)
    if match is None or looks_like_path(target):
        raise SourceError("no such directory")
    repo_id, revision = match.group("repo"), match.group("rev") or options.revision
    if match.group("rev") and options.revision and match.group("rev") != options.revision:
        raise SourceError(f"names revision {match.group('rev')!r} but --revision says {options.revision!r}")
    if revision is not None:
        check_revision(revision)
    try:
        if offline():
            return cached_snapshot(repo_id, revision)
        source = HubSource(repo_id, revision, limits=HubLimits(deadline_s=options.timeout_s))
    except SourceError as err:
        if match.group("rev") or options.revision:
            raise
        # ORG/NAME is also how a folder two levels down is written: say both readings failed.
        raise SourceError(f"no such folder here, and as a Hub repository: {err}") from None
    if options.cache:
        write_cache(source)
    return source
