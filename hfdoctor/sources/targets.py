"""TARGET text -> a Source: a directory, a Hub repo at a revision, or a git commit.

- `--git-rev REV DIR`: the tree of commit REV of the git repository at DIR (GitSource).
- an existing directory: read from disk (LocalSource); a `.gguf` file: that file alone.
- `ORG/NAME`, `ORG/NAME@REV`, or `--revision REV`: a Hub repo (HubSource), always at the
  revision's current commit; nothing is cached unless `cache=True`. With
  HF_HUB_OFFLINE=1, the local HF cache's snapshot of that revision, only when it is
  complete for what the rules read (each file is there, or huggingface_hub recorded it
  as absent in `.no_exist/`), and the report names its commit. Every revision is checked
  first (hfdoctor.sources.revisions): what reaches a cache path stays in the cache.
- anything else that looks like a path (`./x`, `/x`, `~/x`, `checkpoints/x` where
  `checkpoints/` exists here, more than one slash) is a missing directory, never sent to
  the Hub as a repo id.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from hfdoctor.sources.base import Source, SourceError
from hfdoctor.sources.git import GitSource
from hfdoctor.sources.hub import HubLimits, HubSource
from hfdoctor.sources.local import LocalSource
from hfdoctor.sources.revisions import check_revision, is_commit_id

REPO_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.\-]{0,95}/[A-Za-z0-9][\w.\-]{0,95})(?:@(?P<rev>[^\s@]{1,255}))?$")
# The files rules read from a Hub repo's metadata; a cached snapshot is complete when it
# has each of them or knows it does not exist. (vocab.json counts only without tokenizer.json.)
RULE_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
              "special_tokens_map.json", "chat_template.jinja", "chat_template.json", "README.md",
              "adapter_config.json")


@dataclass(frozen=True)
class TargetOptions:
    revision: str | None = None  # --revision, for Hub ids
    git_rev: str | None = None  # --git-rev, for directories
    git_since: str | None = None  # --git-since: the commits after it are pushed too (blob rules)
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
        return GitSource(target, options.git_rev, since=options.git_since)
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


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def _cache_folder(repo_id: str) -> Path:
    return hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def _ref_commit(folder: Path, rev: str) -> str | None:
    """The commit the cache's ref file `refs/REV` records, or None when there is none. The
    file is read only when it is a small regular file (never through a link), and what it
    holds is used only when it is a commit id: a ref is joined into a path next."""
    ref = folder / "refs" / rev
    try:
        if ref.is_symlink() or not ref.is_file() or ref.stat().st_size > 128:
            return None
        commit = ref.read_bytes().decode("ascii", "replace").strip()
    except OSError:
        return None
    if not is_commit_id(commit):
        raise SourceError(f"the local HF cache's ref {rev!r} does not hold a commit id")
    return commit


def cached_snapshot(repo_id: str, revision: str | None) -> Source:
    """The local HF cache's snapshot of `repo_id` at `revision`, if complete for the rules."""
    folder = _cache_folder(repo_id)
    rev = check_revision(revision or "main")
    commit = rev if is_commit_id(rev) else _ref_commit(folder, rev)
    snapshot = folder / "snapshots" / commit if commit is not None else None
    if snapshot is None or snapshot.is_symlink() or not snapshot.is_dir():
        named = f"its revision {rev!r}" if revision else "it"
        raise SourceError(f"offline (HF_HUB_OFFLINE) and {named} is not in the local HF cache ({hf_cache_dir()})")
    absent = folder / ".no_exist" / commit
    needed = list(RULE_FILES)
    if not (snapshot / "tokenizer.json").exists() and not (absent / "tokenizer.json").exists():
        needed.append("vocab.json")
    if (snapshot / "config.json").exists():
        needed.remove("adapter_config.json")  # a model, not a PEFT adapter (caches made before may not record it)
    unknown = [name for name in needed if not (snapshot / name).exists() and not (absent / name).exists()]
    if unknown:
        raise SourceError(
            f"offline, and the cached snapshot {commit[:12]} of revision {rev!r} is incomplete: it neither holds nor "
            f"records as absent {', '.join(unknown)}, so checking it would be guessing. Check it online once with "
            "--cache."
        )
    source = LocalSource(snapshot)
    source.revision = {"requested": rev, "commit": commit, "from": "local HF cache (offline)"}
    return source


def write_cache(source: HubSource) -> None:
    """`--cache`: store the rule files of this commit in the HF cache, through huggingface_hub
    (which also records the absent ones in .no_exist/), so an offline check can use them."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    names = list(RULE_FILES) + (["vocab.json"] if "tokenizer.json" not in source.entries() else [])
    for name in names:
        try:
            hf_hub_download(source.repo_id, name, revision=source.commit, cache_dir=hf_cache_dir(),
                            endpoint=source.endpoint)
        except EntryNotFoundError:
            continue  # recorded as absent by huggingface_hub
        except Exception as err:  # the check itself already succeeded: caching is best effort, said plainly
            raise SourceError(f"--cache could not store {name}: {type(err).__name__}: {err}") from None
    requested = check_revision(source.requested or "main")
    if not is_commit_id(requested) and is_commit_id(source.commit):
        # so that an offline check of ORG/NAME@requested finds this commit (refs/pr/1 is a
        # file below refs/refs/pr/, as huggingface_hub writes it)
        ref = _cache_folder(source.repo_id) / "refs" / requested
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(source.commit)
