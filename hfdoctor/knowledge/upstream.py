"""Find upstream model files: --upstream directories, the local HF cache, then the Hub.

An upstream directory holds one folder per model named `<org>--<name>/` (the layout of
the project's shared/upstream). The Hugging Face cache is read in place
(`models--<org>--<name>/snapshots/<rev>/`), never written. The Hub is asked only when
online (HF_HUB_OFFLINE unset) and over huggingface_hub's session, imported only then.

What names a file here can come from a checked repository (an adapter's
base_model_name_or_path, a card's base_model), and a cache or an upstream folder can hold
links. So a name is used only when it is a Hub repo id; a file is read only when its real
path, links resolved, is inside the root it was looked up in (the upstream directory, the
model's cache folder), when it is a regular file, and up to a byte limit; the cache's
`refs/main` is read bounded and used only when it holds a commit id; and the Hub's answer is
read as stored, up to a byte limit, within a deadline.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import time
from urllib.parse import urlparse
from dataclasses import dataclass
from pathlib import Path

from hfdoctor.knowledge.registry import CanonicalTemplate, Variant, data_file
from hfdoctor.sources.base import SourceError
from hfdoctor.sources.hub_cache import cache_folder, hf_cache_dir, ref_commit
from hfdoctor.sources.revisions import check_revision, is_repo_id
from hfdoctor.bounded.budget import NotReadable, read_regular_file
from hfdoctor.bounded.memo import memoized

# The most read of one upstream file (tokenizer_config.json, chat_template.jinja, config.json);
# callers may ask for less.
MAX_UPSTREAM_FILE = 16 * 1024 * 1024
HUB_DEADLINE_S = 10.0  # one file from the Hub, all of it


@dataclass(frozen=True)
class Upstream:
    """Where to look for upstream files, in order."""

    dirs: tuple[Path, ...] = ()
    use_cache: bool = True
    use_hub: bool = True

    @classmethod
    def from_options(cls, dirs: list[str] | None = None) -> "Upstream":
        paths = [Path(d) for d in dirs or []]
        env = os.environ.get("HFDOCTOR_UPSTREAM")
        if env:
            paths.extend(Path(p) for p in env.split(os.pathsep) if p)
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        return cls(tuple(paths), use_cache=True, use_hub=not offline)

    def describe(self) -> str:
        where = [str(d) for d in self.dirs] + ["the local Hugging Face cache"]
        if self.use_hub:
            where.append("the Hub")
        return ", ".join(where)


def read_inside(root: Path, rel: str, limit: int = MAX_UPSTREAM_FILE) -> bytes | None:
    """The bytes of root/rel when its real path (links resolved) is inside root's, it is a regular
    file and holds at most `limit` bytes; None otherwise (not found here)."""
    try:
        real_root = root.resolve(strict=True)
        real = (root / rel).resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a link loop
        return None
    if not real.is_relative_to(real_root):
        return None
    try:
        return read_regular_file(real, limit)
    except NotReadable:
        return None


def _from_cache(repo_id: str, filename: str, revision: str | None,
                limit: int = MAX_UPSTREAM_FILE) -> tuple[Path, bytes] | None:
    """(path, bytes) of the file in the cache's snapshot of `revision` (else of main, else of any
    snapshot), read only inside the model's cache folder (its snapshots link into its blobs/)."""
    try:
        folder = cache_folder(repo_id)
        rev = check_revision(revision) if revision is not None else ref_commit(folder, "main")
    except SourceError:
        return None
    if not folder.is_dir():
        return None
    candidates = [f"snapshots/{rev}/{filename}"] if rev else []
    if revision is None and (folder / "snapshots").is_dir():
        try:
            with os.scandir(folder / "snapshots") as listing:
                names = sorted(entry.name for entry in listing)[:1000]
        except OSError:
            names = []
        candidates += [f"snapshots/{name}/{filename}" for name in names]
    for rel in candidates:
        data = read_inside(folder, rel, limit)
        if data is not None:
            return folder / rel, data
    return None


@memoized("hub reachability", 1)
def hub_reachable(host: str = "huggingface.co", timeout: float = 2.0) -> bool:
    """One quick TCP connect per process: offline machines must not wait on retries."""
    endpoint = os.environ.get("HF_ENDPOINT")
    if endpoint:
        host = urlparse(endpoint).hostname or host
    port = 443
    if endpoint:
        parsed = urlparse(endpoint)
        port = parsed.port or (80 if parsed.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def _from_hub(repo_id: str, filename: str, revision: str | None, limit: int = MAX_UPSTREAM_FILE) -> bytes | None:
    """The file's bytes from the Hub, read into memory as stored, at most `limit` of them, within
    HUB_DEADLINE_S (the HF cache is never written)."""
    if not hub_reachable():
        return None
    try:
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session
    except ImportError:
        return None
    headers = {**build_hf_headers(), "Accept-Encoding": "identity"}  # no gzip to inflate past the limit
    deadline = time.monotonic() + HUB_DEADLINE_S
    chunks, total = [], 0
    try:
        with get_session().stream("GET", hf_hub_url(repo_id, filename, revision=revision), headers=headers,
                                  timeout=HUB_DEADLINE_S, follow_redirects=True) as response:
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if response.status_code != 200 or encoding not in ("", "identity"):
                return None
            for chunk in response.iter_raw(64 * 1024):
                total += len(chunk)
                if total > limit or time.monotonic() > deadline:
                    return None
                chunks.append(chunk)
    except Exception:  # network trouble means "not found here", never a crash
        return None
    return b"".join(chunks)


def read_file(upstream: Upstream, repo_id: str, filename: str, revision: str | None = None,
              limit: int = MAX_UPSTREAM_FILE) -> tuple[str, bytes] | None:
    """(where it was found, its bytes) from the upstream dirs, the HF cache, then the Hub; None when
    `repo_id` is no Hub repo id, or the file is not found, leaves its root, or is over `limit` bytes."""
    if not is_repo_id(repo_id):
        return None
    for directory in upstream.dirs:
        rel = f"{repo_id.replace('/', '--')}/{filename}"
        data = read_inside(directory, rel, limit)
        if data is not None:
            return str(directory / rel), data
    if upstream.use_cache:
        found = _from_cache(repo_id, filename, revision, limit)
        if found is not None:
            return str(found[0]), found[1]
    if upstream.use_hub:
        data = _from_hub(repo_id, filename, revision, limit)
        if data is not None:
            return f"https://huggingface.co/{repo_id}/blob/{revision or 'main'}/{filename}", data
    return None


@dataclass(frozen=True)
class TemplateLookup:
    text: str | None
    source: str  # where it came from, or why it was not found
    pinned: bool = True  # the text is the revision hfdoctor's registry pins (sha256 verified)


def shipped_template(variant: Variant) -> str | None:
    """The canonical template hfdoctor ships for `variant` (upstream_templates/templates/),
    verified against the registry's sha256; None when it is not shipped."""
    pinned = variant.template
    if pinned is None:
        return None
    for name, entry in _shipped_manifest().items():
        if entry.get("sha256") == pinned.sha256:
            try:
                text = data_file(f"templates/{name}").read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                return None
            return text if hashlib.sha256(text.encode()).hexdigest() == pinned.sha256 else None
    return None


def shipped_revisions(variant: Variant) -> list[tuple[str, str]]:
    """(sha256, text) of the variant's other upstream templates that hfdoctor ships (another
    release's, an earlier revision: MANIFEST.json entries marked "revision_of"), each verified
    against its sha256, which the registry lists among the variant's template_revisions."""
    found = []
    for name, entry in _shipped_manifest().items():
        sha = entry.get("sha256")
        if not entry.get("revision_of") or sha not in variant.template_revisions:
            continue
        try:
            text = data_file(f"templates/{name}").read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if hashlib.sha256(text.encode()).hexdigest() == sha:
            found.append((sha, text))
    return found


@functools.lru_cache(maxsize=1)
def _shipped_manifest() -> dict[str, dict]:
    try:
        return json.loads(data_file("templates/MANIFEST.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def canonical_template(upstream: Upstream, variant: Variant) -> TemplateLookup:
    """The variant's canonical chat template.

    An --upstream directory that holds the canonical repo overrides everything (a newer
    revision the user downloaded: used as it is, and said so when it is not the pinned
    one). Otherwise the text hfdoctor ships, then the local HF cache and the Hub, all
    verified against the registry's sha256.
    """
    # Several rules ask for the same template; the cache dir is part of the key because
    # HF_HUB_CACHE may change within one process (tests, library users).
    return _canonical_template(upstream, variant, str(hf_cache_dir()))


def _template_text(filename: str, raw: bytes) -> str | None:
    try:
        decoded = raw.decode("utf-8")
        text = decoded if filename.endswith(".jinja") else json.loads(decoded).get("chat_template")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    return text if isinstance(text, str) else None


@memoized("canonical templates", 64)
def _canonical_template(upstream: Upstream, variant: Variant, cache_dir: str) -> TemplateLookup:
    pinned: CanonicalTemplate | None = variant.template
    if pinned is None:
        return TemplateLookup(None, f"the registry pins no canonical template for {variant.display}")
    for directory in upstream.dirs:
        for filename in ("chat_template.jinja", "tokenizer_config.json"):
            path = directory / pinned.repo.replace("/", "--") / filename
            raw = read_inside(directory, f"{pinned.repo.replace('/', '--')}/{filename}")
            text = _template_text(filename, raw) if raw is not None else None
            if text is not None:
                same = hashlib.sha256(text.encode()).hexdigest() == pinned.sha256
                note = "" if same else f", a revision other than the one hfdoctor pins ({pinned.sha256[:12]})"
                return TemplateLookup(text, f"{pinned.repo} ({path}{note})", pinned=same)
    shipped = shipped_template(variant)
    if shipped is not None:
        return TemplateLookup(shipped, f"{pinned.repo} (shipped with hfdoctor)")
    tried = []
    # The template may be stored as chat_template.jinja or inside tokenizer_config.json.
    for filename in ("chat_template.jinja", "tokenizer_config.json"):
        found = read_file(Upstream((), upstream.use_cache, upstream.use_hub), pinned.repo, filename, pinned.revision)
        if found is None:
            continue
        where, raw = found
        text = _template_text(filename, raw)
        if text is not None and hashlib.sha256(text.encode()).hexdigest() == pinned.sha256:
            return TemplateLookup(text, f"{pinned.repo} ({where})")
        tried.append(f"{where} ({'unreadable' if text is None else 'sha256 differs from the pinned ' + pinned.sha256[:12]})")
    detail = f"; tried {', '.join(tried)}" if tried else ""
    return TemplateLookup(
        None,
        f"the {pinned.repo} template does not ship with this hfdoctor and was not found in {upstream.describe()}"
        f"{detail}. Pass --upstream DIR (a folder holding {pinned.repo.replace('/', '--')}/) or set HFDOCTOR_UPSTREAM",
    )

