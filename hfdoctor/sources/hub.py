"""A repository on the Hugging Face Hub at a revision, read through huggingface_hub.

One `model_info(files_metadata=True)` call lists every file with its size and pins the
revision to a commit sha; every later read asks for that commit, so a repo that changes
while it is checked is read consistently, and a repo that changed since the last check
is checked at its new commit. Only the files rules read are fetched: whole metadata
files (each bounded like a local one), and for weights only byte ranges (safetensors
headers, GGUF headers, the zip directory and `data.pkl` of torch archives). Nothing is
written: not the HF cache, not anywhere.

Bounds: every request has a timeout, every read counts against a total byte budget,
and the whole source has a deadline after which any further request fails. The errors
huggingface_hub raises become SourceError messages a user can act on (exit 2).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import cached_property

from hfdoctor.sources.base import MB, Entry, Source, SourceError, Unreadable, read_limit
from hfdoctor.sources.revisions import check_revision, is_commit_id

# A safetensors header of an 8B model is ~20 KB; one request of this size usually holds it.
HEAD_WINDOW = 256 * 1024


@dataclass(frozen=True)
class HubLimits:
    request_s: float = 10.0  # connect and read timeout of one request
    deadline_s: float = 120.0  # everything this source does
    total_bytes: int = 1024 * MB  # all it downloads


def endpoint() -> str:
    """HF_ENDPOINT as it is now (huggingface_hub reads it once, at import)."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


class HubSource(Source):
    kind = "hub"

    def __init__(self, repo_id: str, revision: str | None = None, *, token: str | None = None,
                 limits: HubLimits | None = None, hub_endpoint: str | None = None):
        self.repo_id = repo_id
        self.requested = check_revision(revision) if revision is not None else None
        self.limits = limits or HubLimits()
        self.endpoint = hub_endpoint or endpoint()
        self.token = token
        self.started = time.monotonic()
        self.downloaded = 0
        self.requests = 0
        self._head: dict[str, bytes] = {}  # the first HEAD_WINDOW bytes of weight files
        info = self._model_info()
        # The answer is checked as a request's would be: the commit pins every later URL
        # (and names a cache folder with --cache), and a listed path is joined to folders.
        if not isinstance(info.sha, str) or not is_commit_id(info.sha):
            raise SourceError(f"the Hub at {self.endpoint} answered a commit id that is not one: "
                              f"{str(info.sha)[:60]!r}")
        self.commit: str = info.sha
        self.revision = {"requested": revision or "main", "commit": info.sha}
        self._files = {s.rfilename: s for s in info.siblings or []}
        leaving = next((name for name in self._files if not _relative_path(name)), None)
        if leaving is not None:
            raise SourceError(f"the Hub at {self.endpoint} listed a file path no repository can hold: {leaving[:80]!r}")

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.commit[:12]}"

    def _timeout(self) -> float:
        left = self.limits.deadline_s - (time.monotonic() - self.started)
        if left <= 0:
            raise SourceError(f"the Hub at {self.endpoint} did not answer within the "
                              f"{self.limits.deadline_s:g} s hfdoctor allows a repository (--timeout)")
        return min(self.limits.request_s, left)

    def _model_info(self):
        from huggingface_hub import HfApi
        from huggingface_hub.errors import (
            GatedRepoError, HfHubHTTPError, HFValidationError, RepositoryNotFoundError, RevisionNotFoundError,
        )

        api = HfApi(endpoint=self.endpoint, token=self.token)
        self.requests += 1
        try:
            return api.model_info(self.repo_id, revision=self.requested, files_metadata=True, timeout=self._timeout())
        except GatedRepoError:
            raise SourceError(f"a gated repository: request access at {self.endpoint}/{self.repo_id} "
                              "and set HF_TOKEN (or log in with `hf auth login`)") from None
        except RevisionNotFoundError:
            raise SourceError(f"the repository has no revision {self.requested!r}") from None
        except RepositoryNotFoundError:
            raise SourceError(f"no such repository on {self.endpoint} (if it is private, set HF_TOKEN)"
                              ) from None
        except HfHubHTTPError as err:
            raise SourceError(f"the Hub answered {_status(err)}") from None
        except HFValidationError as err:
            raise SourceError(f"not a valid Hub repo id: {err}") from None
        except Exception as err:  # httpx timeouts, refused connections, DNS: all "cannot reach"
            raise SourceError(_network_failure(self, err)) from None

    @cached_property
    def _entries(self) -> dict[str, Entry]:
        found = {}
        for rel, sibling in sorted(self._files.items()):
            lfs = sibling.lfs
            size = lfs.size if lfs is not None else sibling.size
            found[rel] = Entry(rel, "file", size=size, lfs=(lfs.sha256, lfs.size) if lfs is not None else None)
        return found

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
            raise SourceError(_network_failure(self, err)) from None
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
        if end <= HEAD_WINDOW:  # headers: one request for the start of the file, kept
            if rel not in self._head:
                self._head[rel] = self._get(rel, 0, min(HEAD_WINDOW, size))
            return self._head[rel][start:end]
        return self._get(rel, start, end - start)

    def bytes_read(self) -> int:
        return self.downloaded


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
