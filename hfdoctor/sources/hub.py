"""A repository on the Hugging Face Hub at a revision, read over huggingface_hub's HTTP session.

One listing (the Hub's model info with file metadata, `/api/models/ORG/NAME?blobs=true`)
names every file with its size and pins the revision to a commit sha; every later read
asks for that commit, so a repo that changes while it is checked is read consistently,
and a repo that changed since the last check is checked at its new commit. Only the files
rules read are fetched: whole metadata files (each bounded like a local one), and for
weights only byte ranges (safetensors headers, GGUF headers, the zip directory and
`data.pkl` of torch archives). Nothing is written here (`--cache` is hfdoctor.sources.hub_cache).

The endpoint is untrusted (HF_ENDPOINT names mirrors): the listing is read as raw bytes up
to MAX_LISTING_BYTES and at most MAX_LISTED_FILES files, its commit must be a commit id and
its file names relative paths, and nothing a reply names (an ETag, X-Repo-Commit) is used
at all. Every request has a timeout, every read counts against a total byte budget, the
whole source has a deadline after which any further request fails, and the header windows
kept for weight files are a few (HEAD_WINDOWS_KEPT), not one per file. Errors become
SourceError messages a user can act on (exit 2).
"""

from __future__ import annotations

import json
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import quote

from hfdoctor.sources.base import MB, Entry, Source, SourceError, Unreadable, read_limit
from hfdoctor.sources.local import MAX_WALK_ENTRIES
from hfdoctor.sources.revisions import check_revision, is_commit_id, is_repo_id

# A safetensors header of an 8B model is ~20 KB; one request of this size usually holds it.
HEAD_WINDOW = 256 * 1024
# Readers take a file's header in a few reads one after the other: the windows of the last
# few files are kept, not of all 4,000 shards of a hostile listing (1 GB).
HEAD_WINDOWS_KEPT = 16
# The Hub's listing of a repository: about 250 bytes a file. As many files as a directory
# may list (hfdoctor.sources.local), in a reply of at most this many bytes.
MAX_LISTING_BYTES = 64 * MB
MAX_LISTED_FILES = MAX_WALK_ENTRIES
# Objects and arrays in it: a file and its LFS record, the model card's metadata and the rest.
MAX_LISTING_CONTAINERS = 4 * MAX_LISTED_FILES


@dataclass(frozen=True)
class HubLimits:
    request_s: float = 10.0  # connect and read timeout of one request
    deadline_s: float = 120.0  # everything this source does
    total_bytes: int = 1024 * MB  # all it downloads


# Statuses after which another try may succeed (SourceError.transient).
TRANSIENT_STATUSES = (408, 429, 500, 502, 503, 504)


def endpoint() -> str:
    """HF_ENDPOINT as it is now (huggingface_hub reads it once, at import)."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


class HubSource(Source):
    kind = "hub"

    def __init__(self, repo_id: str, revision: str | None = None, *, token: str | None = None,
                 limits: HubLimits | None = None, hub_endpoint: str | None = None):
        if not is_repo_id(repo_id):
            raise SourceError(f"{str(repo_id)[:100]!r} is not a Hub repo id (ORG/NAME)")
        self.repo_id = repo_id
        self.requested = check_revision(revision) if revision is not None else None
        self.limits = limits or HubLimits()
        self.endpoint = hub_endpoint or endpoint()
        self.token = token
        self.started = time.monotonic()
        self.downloaded = 0
        self.requests = 0
        self._head: OrderedDict[str, bytes] = OrderedDict()  # the first HEAD_WINDOW bytes of weight files
        self.commit, self._entries = self._listing()
        self.revision = {"requested": revision or "main", "commit": self.commit}

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.commit[:12]}"

    def _timeout(self) -> float:
        left = self.limits.deadline_s - (time.monotonic() - self.started)
        if left <= 0:
            raise SourceError(f"the Hub at {self.endpoint} did not answer within the "
                              f"{self.limits.deadline_s:g} s hfdoctor allows a repository (--timeout)", transient=True)
        return min(self.limits.request_s, left)

    def _listing(self) -> tuple[str, dict[str, Entry]]:
        """(commit, files) of the requested revision, from the Hub's listing read within every bound."""
        url = f"{self.endpoint}/api/models/{self.repo_id}"
        if self.requested is not None:
            url += f"/revision/{quote(self.requested, safe='')}"
        body = self._fetch(url + "?blobs=true", MAX_LISTING_BYTES, "the listing of the repository")
        # Each object or array costs Python a few hundred bytes: 64 MB of `{},` would be 1.5 GB.
        if body.count(b"{") + body.count(b"[") > MAX_LISTING_CONTAINERS:
            raise SourceError(f"the Hub at {self.endpoint} answered a listing of more than "
                              f"{MAX_LISTING_CONTAINERS:,} objects: not read")
        try:
            info = json.loads(body)
        except (ValueError, RecursionError):
            raise SourceError(f"the Hub at {self.endpoint} answered a listing that is not JSON") from None
        return listing_entries(info, self.endpoint)

    def _fetch(self, url: str, limit: int, what: str) -> bytes:
        """A GET of the Hub's API, its reply read as stored, at most `limit` bytes, within the deadline;
        the Hub's errors (by status and X-Error-Code, never by what the body says) as SourceError."""
        from huggingface_hub.utils import build_hf_headers, get_session

        headers = build_hf_headers(token=self.token)
        headers["Accept-Encoding"] = "identity"  # what is read is what is counted (no gzip to inflate)
        self.requests += 1
        chunks: list[bytes] = []
        try:
            with get_session().stream("GET", url, headers=headers, timeout=self._timeout(),
                                      follow_redirects=True) as response:
                if response.status_code >= 400:
                    raise SourceError(_api_error(self, response.status_code, response.headers.get("X-Error-Code")),
                                      transient=response.status_code in TRANSIENT_STATUSES)
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise SourceError(f"the Hub at {self.endpoint} sent {what} encoded ({encoding[:40]!r}) though "
                                      "asked for it as stored")
                got = 0
                for chunk in response.iter_raw(64 * 1024):
                    got += len(chunk)
                    self.downloaded += len(chunk)
                    if got > limit:
                        raise SourceError(f"the Hub at {self.endpoint} sent {what} larger than the "
                                          f"{limit // MB} MB hfdoctor reads of it")
                    chunks.append(chunk)
                    self._timeout()  # the deadline holds between chunks too
        except SourceError:
            raise
        except Exception as err:  # httpx timeouts, refused connections, DNS: all "cannot reach"
            raise SourceError(_network_failure(self, err), transient=True) from None
        return b"".join(chunks)

    def entries(self) -> dict[str, Entry]:
        return self._entries

    def _get(self, rel: str, start: int | None = None, length: int | None = None) -> bytes:
        """GET the file at the pinned commit (a byte range of it), within every bound."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.errors import HfHubHTTPError
        from huggingface_hub.utils import build_hf_headers, get_session

        entry = self._entries.get(rel)
        if entry is None:
            raise Unreadable("is not in the repository")
        headers = build_hf_headers(token=self.token)
        # The bytes as stored: a Content-Encoding the client would undo expands without a
        # bound (a gzip bomb), and the bounds here count what is read.
        headers["Accept-Encoding"] = "identity"
        if start is not None and length is not None:
            headers["Range"] = f"bytes={start}-{start + length - 1}"
        want = length if length is not None else (entry.size or 0)
        if self.downloaded + want > self.limits.total_bytes:
            raise Unreadable(f"was not read: the {self.limits.total_bytes // MB} MB hfdoctor downloads for one "
                             "repository are spent")
        url = hf_hub_url(self.repo_id, rel, revision=self.commit, endpoint=self.endpoint)
        self.requests += 1
        chunks: list[bytes] = []
        try:
            with get_session().stream("GET", url, headers=headers, timeout=self._timeout(),
                                      follow_redirects=True) as response:
                if response.status_code >= 400:  # said by its code: the body is not read (any length)
                    raise Unreadable(f"cannot be downloaded: the Hub answered HTTP {response.status_code}")
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise Unreadable(f"was sent encoded ({encoding[:40]!r}) though asked for as stored: not read")
                got = 0
                for chunk in response.iter_raw(64 * 1024):
                    got += len(chunk)
                    self.downloaded += len(chunk)
                    if got > want or self.downloaded > self.limits.total_bytes:
                        raise Unreadable(f"sent more than the {want:,} bytes asked for: not read")
                    chunks.append(chunk)
                    self._timeout()  # the deadline holds between chunks too
        except (Unreadable, SourceError):
            raise
        except HfHubHTTPError as err:
            raise Unreadable(f"cannot be downloaded: the Hub answered {_status(err)}") from None
        except Exception as err:
            raise SourceError(_network_failure(self, err), transient=True) from None
        return b"".join(chunks)

    def read(self, rel: str, limit: int | None = None) -> bytes:
        limit = read_limit(rel) if limit is None else limit
        entry = self._entries.get(rel)
        if entry is None:
            raise Unreadable("is not in the repository")
        if entry.size is not None and entry.size > limit:
            raise Unreadable(f"is {entry.size:,} bytes, more than the {limit:,} hfdoctor reads of such a file")
        return self._get(rel)

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        entry = self._entries.get(rel)
        size = entry.size if entry is not None and entry.size is not None else start + length
        end = min(start + length, size)
        if start >= end:
            return b""
        if end <= HEAD_WINDOW:  # headers: one request for the start of the file, kept a while
            window = self._head.get(rel)
            if window is None:
                window = self._head[rel] = self._get(rel, 0, min(HEAD_WINDOW, size))
                while len(self._head) > HEAD_WINDOWS_KEPT:
                    self._head.popitem(last=False)
            self._head.move_to_end(rel)
            return window[start:end]
        return self._get(rel, start, end - start)

    def bytes_read(self) -> int:
        return self.downloaded


def listing_entries(info: object, endpoint: str) -> tuple[str, dict[str, Entry]]:
    """(commit, path -> Entry) from the Hub's listing, every field checked before it is used: the
    commit pins every later URL and names a cache folder (--cache), and a listed path is joined
    to folders (fix --pr's scratch copy, the cache's snapshot)."""
    if not isinstance(info, dict):
        raise SourceError(f"the Hub at {endpoint} answered a listing that is not an object")
    sha = info.get("sha")
    if not isinstance(sha, str) or not is_commit_id(sha):
        raise SourceError(f"the Hub at {endpoint} answered a commit id that is not one: {str(sha)[:60]!r}")
    siblings = info.get("siblings") or []
    if not isinstance(siblings, list):
        raise SourceError(f"the Hub at {endpoint} answered a listing whose files are not a list")
    if len(siblings) > MAX_LISTED_FILES:
        raise SourceError(f"the Hub at {endpoint} lists {len(siblings):,} files, more than the "
                          f"{MAX_LISTED_FILES:,} hfdoctor checks in one repository")
    entries: dict[str, Entry] = {}
    for sibling in siblings:
        name = sibling.get("rfilename") if isinstance(sibling, dict) else None
        if not _relative_path(name):
            raise SourceError(f"the Hub at {endpoint} listed a file path no repository can hold: {str(name)[:80]!r}")
        size, lfs = _count(sibling.get("size")), sibling.get("lfs")
        pointer = None
        if isinstance(lfs, dict) and isinstance(lfs.get("sha256"), str) and _count(lfs.get("size")) is not None:
            pointer = (lfs["sha256"], lfs["size"])
            size = lfs["size"]
        entries[name] = Entry(name, "file", size=size, lfs=pointer)
    return sha, dict(sorted(entries.items()))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _api_error(source: "HubSource", status: int, code: str | None) -> str:
    """What the Hub's error reply means for the user, by its status and X-Error-Code (as
    huggingface_hub reads them), in hfdoctor's words."""
    if code == "GatedRepo":
        return (f"a gated repository: request access at {source.endpoint}/{source.repo_id} "
                "and set HF_TOKEN (or log in with `hf auth login`)")
    if code == "RevisionNotFound":
        return f"the repository has no revision {source.requested!r}"
    if code == "RepoNotFound" or status in (401, 404):
        return f"no such repository on {source.endpoint} (if it is private, set HF_TOKEN)"
    if code == "DisabledRepo" or status == 403:
        return f"the Hub answered HTTP {status}: access to this repository is not allowed"
    return f"the Hub answered HTTP {status}"


def _relative_path(name: object) -> bool:
    """A path git could hold: relative, `/`-separated, no empty, `.` or `..` part, no NUL."""
    if not isinstance(name, str) or not name or "\0" in name or name.startswith("/"):
        return False
    return not any(part in ("", ".", "..") for part in name.split("/"))


def _status(err: Exception) -> str:
    response = getattr(err, "response", None)
    code = getattr(response, "status_code", None)
    return f"HTTP {code}" if code else str(err).splitlines()[0]


def _network_failure(source: HubSource, err: Exception) -> str:
    kind = type(err).__name__
    if "Timeout" in kind:
        waited = min(source.limits.request_s, source.limits.deadline_s)
        return f"the Hub at {source.endpoint} did not answer within {waited:g} s ({kind})"
    return (f"cannot reach the Hub at {source.endpoint} ({kind}: {str(err)[:200]}); offline, "
            "set HF_HUB_OFFLINE=1 to check a complete copy in the local cache")
