"""The local Hugging Face cache: read offline (HF_HUB_OFFLINE=1), and written with `--cache`.

The layout is huggingface_hub's, so either tool reads what the other wrote:

    HF_HUB_CACHE/models--ORG--NAME/
        blobs/ID                      a file's bytes, named by their git blob id (sha1) or,
                                      for an LFS file, their sha256
        snapshots/COMMIT/FILE         a relative symlink to ../../blobs/ID
        refs/REVISION                 the commit a branch or tag named (refs/pr/N below refs/refs/pr/)
        .no_exist/COMMIT/FILE         an empty file: FILE is not in that commit

hfdoctor writes it itself, with names it built: the blob id is computed from the bytes it
downloaded, the commit is the listing's (a commit id, checked), the files are the rule files
hfdoctor names. huggingface_hub's own download would name the blob after the HEAD reply's
ETag and folders after its X-Repo-Commit, which a hostile endpoint (HF_ENDPOINT names
mirrors) sets to `/abs/path` or `../..`: nothing a server says becomes a path here. Every
file is written to a temporary name opened with O_EXCL|O_NOFOLLOW and renamed into place,
in a folder whose real path is inside the repository's cache folder.

Reading is as careful: a ref is a small regular file (never a link) holding a commit id,
and the snapshot is read as a directory whose links may lead only into its own blobs/.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from hfdoctor.sources.base import Source, SourceError, Unreadable
from hfdoctor.sources.hub import HubSource
from hfdoctor.sources.local import LocalSource
from hfdoctor.sources.revisions import check_revision, is_commit_id, is_repo_id

# The files rules read from a Hub repo's metadata; a cached snapshot is complete when it
# has each of them or knows it does not exist. (vocab.json counts only without tokenizer.json.)
RULE_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
              "special_tokens_map.json", "chat_template.jinja", "chat_template.json", "README.md",
              "adapter_config.json")
MAX_REF_BYTES = 128  # a ref file holds a commit id (40 or 64 hex digits) and a newline


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def cache_folder(repo_id: str) -> Path:
    """The repository's folder in the cache; only for a repo id, which can never climb out of it."""
    if not is_repo_id(repo_id):
        raise SourceError(f"{str(repo_id)[:100]!r} is not a Hub repo id: it names no folder of the HF cache")
    return hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def ref_commit(folder: Path, rev: str) -> str | None:
    """The commit the cache's ref file `refs/REV` records, or None when there is none. The file
    is read only when it is a small regular file (never through a link), and what it holds is
    used only when it is a commit id: a ref is joined into a path next. `rev` must have passed
    check_revision."""
    ref = folder / "refs" / rev
    try:
        fd = os.open(ref, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not _regular(fd) or os.fstat(fd).st_size > MAX_REF_BYTES:
            return None
        commit = os.read(fd, MAX_REF_BYTES + 1).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    if not is_commit_id(commit):
        raise SourceError(f"the local HF cache's ref {rev!r} does not hold a commit id")
    return commit


def _regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def cached_snapshot(repo_id: str, revision: str | None) -> Source:
    """The local HF cache's snapshot of `repo_id` at `revision`, if complete for the rules."""
    folder = cache_folder(repo_id)
    rev = check_revision(revision or "main")
    commit = rev if is_commit_id(rev) else ref_commit(folder, rev)
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


# --- writing (--cache) ---------------------------------------------------------------------


def blob_id(data: bytes, lfs: bool) -> str:
    """The name huggingface_hub gives these bytes in blobs/ (the Hub's ETag of a genuine file):
    the sha256 of an LFS file, the git blob id of any other."""
    if lfs:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_cache(source: HubSource) -> None:
    """`--cache`: store the rule files of this commit in the HF cache (and record the absent ones
    in .no_exist/), so that an offline check can use them. Only names hfdoctor built are written."""
    folder = cache_folder(source.repo_id)
    commit = source.commit
    if not is_commit_id(commit):  # HubSource checked it; a path is built from it next
        raise SourceError(f"--cache: {commit[:60]!r} is not a commit id")
    entries = source.entries()
    names = list(RULE_FILES) + (["vocab.json"] if "tokenizer.json" not in entries else [])
    writer = CacheWriter(folder)
    for name in names:
        entry = entries.get(name)
        if entry is None or not entry.is_file:
            writer.put(f".no_exist/{commit}/{name}", b"")
            continue
        try:
            data = source.read(name)
        except Unreadable as err:
            raise SourceError(f"--cache could not store {name}: it {err}") from None
        blob = blob_id(data, entry.lfs is not None)
        writer.put(f"blobs/{blob}", data)
        writer.link(f"snapshots/{commit}/{name}", f"../../blobs/{blob}")
    requested = check_revision(source.requested or "main")
    if not is_commit_id(requested):
        # so that an offline check of ORG/NAME@requested finds this commit (refs/pr/1 is a
        # file below refs/refs/pr/, as huggingface_hub writes it)
        writer.put(f"refs/{requested}", commit.encode("ascii"))


class CacheWriter:
    """Writes below one repository's cache folder, and nowhere else."""

    def __init__(self, folder: Path):
        self.folder = folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SourceError(f"--cache cannot create {folder}: {err.strerror or err}") from None

    def _parent(self, rel: str) -> Path:
        """The folder `rel` goes in, made one level at a time below the cache folder, none of them a
        link (`snapshots -> /elsewhere`, planted in the cache, is refused before anything is made)."""
        parts = rel.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise SourceError(f"--cache: {rel[:100]!r} is not a path below the cache folder")
        parent = self.folder
        for part in parts[:-1]:
            parent = parent / part
            try:
                if parent.is_symlink() or (os.path.lexists(parent) and not parent.is_dir()):
                    raise SourceError(f"--cache: {parent} is a symbolic link or not a folder: nothing written "
                                      "through it")
                if not os.path.lexists(parent):
                    parent.mkdir()
            except OSError as err:
                raise SourceError(f"--cache cannot create {parent}: {err.strerror or err}") from None
        return parent

    def put(self, rel: str, data: bytes) -> None:
        parent = self._parent(rel)
        name = rel.rsplit("/", 1)[-1]
        self._replace(parent, name, lambda tmp: _write_new(tmp, data))

    def link(self, rel: str, target: str) -> None:
        parent = self._parent(rel)
        name = rel.rsplit("/", 1)[-1]
        self._replace(parent, name, lambda tmp: os.symlink(target, tmp))

    @staticmethod
    def _replace(parent: Path, name: str, make) -> None:
        tmp = parent / f".{name}.hfdoctor-{os.getpid()}.tmp"
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            make(tmp)
            os.replace(tmp, parent / name)
        except OSError as err:
            try:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
            except OSError:
                pass
            raise SourceError(f"--cache cannot write {parent / name}: {err.strerror or err}") from None


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
