"""The runner's calls to the Hub, through huggingface_hub's HfApi, each bounded and retried.

- Every request has a timeout. HfApi's discussion calls take none, so while the runner serves,
  huggingface_hub's shared HTTP client gets a default one (`session_timeout`); the calls that pass
  their own (the listing, the check's reads) keep theirs.
- A call that fails for a reason that may pass (a timeout, a refused connection, HTTP 408, 429
  or 5xx) is tried again after 1, 2, 4... times `backoff_s` (a 429's Retry-After when it says
  more, up to a minute), `attempts` times in all; then it is HubUnavailable, which the runner
  logs as the delivery's failure. Any other refusal (401, 403, 404...) is HubRefused at once.
  Waits end early when the runner stops.
- The token goes to the Hub endpoint only, in huggingface_hub's Authorization header; no
  message made here holds it, and the runner's log masks it besides.
- Whose comments are whose is read from the Hub (`whoami`): the runner edits only comments
  its own account wrote, found by their marker (hfdoctor.webhook.comment).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeVar

from hfdoctor.sources.base import SourceError
from hfdoctor.sources.hub import TRANSIENT_STATUSES

T = TypeVar("T")
MAX_RETRY_AFTER_S = 60.0
MAX_DISCUSSIONS_READ = 50  # open discussions of ours read when looking for a push's marker


class HubUnavailable(Exception):
    """The Hub failed or did not answer on every try."""


class HubRefused(Exception):
    """The Hub refused the call for a reason another try does not change."""


@contextmanager
def session_timeout(seconds: float) -> Iterator[None]:
    """huggingface_hub's shared client gets a default timeout while the block runs."""
    from huggingface_hub.utils import get_session

    session = get_session()
    previous = session.timeout
    session.timeout = seconds
    try:
        yield
    finally:
        session.timeout = previous


def status_of(err: BaseException) -> int | None:
    response = getattr(err, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def describe(err: BaseException) -> str:
    """One short line for the log: the HTTP status, or the kind of network failure."""
    first = str(err).splitlines()[0][:200] if str(err) else ""
    code = status_of(err)
    return f"HTTP {code}: {first}" if code else f"{type(err).__name__}: {first}"


def transient(err: BaseException) -> bool:
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(err, SourceError):  # hfdoctor's own bounded reads (the listing) say which they are
        return err.transient
    if isinstance(err, HfHubHTTPError):
        code = status_of(err)
        return code is None or code in TRANSIENT_STATUSES
    # huggingface_hub raises the HTTP client's own exceptions for timeouts and refused connections.
    return not isinstance(err, (ValueError, TypeError, KeyError, AttributeError))


def retry_after(err: BaseException) -> float:
    response = getattr(err, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        return min(float(headers.get("Retry-After", 0)), MAX_RETRY_AFTER_S)
    except (TypeError, ValueError):
        return 0.0


@dataclass
class HubCalls:
    token: str
    endpoint: str
    attempts: int = 4
    backoff_s: float = 1.0
    stopping: threading.Event = field(default_factory=threading.Event)
    _me: str | None = None

    def __post_init__(self) -> None:
        from huggingface_hub import HfApi

        self.api = HfApi(endpoint=self.endpoint, token=self.token, library_name="hfdoctor-webhook")

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        for attempt in range(self.attempts):
            try:
                return fn(*args, **kwargs)
            except (HubUnavailable, HubRefused):  # a call inside `fn` already tried as often as it may
                raise
            except Exception as err:  # noqa: BLE001 - sorted below: transient or not
                if not transient(err):
                    raise HubRefused(f"{what}: {describe(err)}") from None
                if attempt == self.attempts - 1:
                    raise HubUnavailable(f"{what}: {describe(err)} ({self.attempts} tries)") from None
                if self.stopping.wait(max(self.backoff_s * 2**attempt, retry_after(err))):
                    raise HubUnavailable(f"{what}: {describe(err)} (stopped while waiting to retry)") from None
        raise AssertionError("unreachable")

    # --- reads ---------------------------------------------------------------------------

    def me(self) -> str:
        """The name of the account the token belongs to (whose comments are ours)."""
        if self._me is None:
            info = self.call("whoami", self.api.whoami)
            name = info.get("name") if isinstance(info, dict) else None
            if not isinstance(name, str) or not name:
                raise HubRefused("whoami: the Hub named no account for the token")
            self._me = name
        return self._me

    def commit_of(self, repo_id: str, revision: str, timeout: float) -> str:
        """The commit a revision is at, from the repository's listing read within check's bounds (a
        listing of millions of files is refused, not read into memory) and checked to be a commit id."""
        from hfdoctor.sources.hub import HubLimits, HubSource

        def listed_commit() -> str:
            return HubSource(repo_id, revision, token=self.token, hub_endpoint=self.endpoint,
                             limits=HubLimits(request_s=timeout, deadline_s=timeout)).commit

        return self.call(f"read {revision} of {repo_id}", listed_commit)

    def pull_request(self, repo_id: str, num: int):
        return self.call(f"read pull request #{num} of {repo_id}", self.api.get_discussion_details, repo_id, num)

    def my_comment(self, details, marker: str):
        """Our comment on a discussion that carries `marker` (the first, if ever there were two)."""
        me = self.me()
        for event in details.events:
            content = getattr(event, "content", None)
            if event.type == "comment" and event.author == me and isinstance(content, str) and marker in content:
                return event
        return None

    def my_open_discussions(self, repo_id: str, pull_requests: bool) -> list:
        kind = "pull_request" if pull_requests else "discussion"

        def listed() -> list:
            found = []
            for discussion in self.api.get_repo_discussions(repo_id, author=self.me(), discussion_type=kind,
                                                            discussion_status="open"):
                found.append(discussion)
                if len(found) >= MAX_DISCUSSIONS_READ:
                    break
            return found

        return self.call(f"list the open {kind}s of {repo_id}", listed)

    def discussion_with_marker(self, repo_id: str, marker: str) -> int | None:
        """The number of an open discussion of ours whose opening text carries `marker`."""
        for discussion in self.my_open_discussions(repo_id, pull_requests=False):
            details = self.call(f"read discussion #{discussion.num} of {repo_id}", self.api.get_discussion_details,
                                repo_id, discussion.num)
            if self.my_comment(details, marker) is not None:
                return discussion.num
        return None

    # --- writes --------------------------------------------------------------------------
    # One try each, never retried alone: a write whose answer was lost may have happened. The
    # runner retries the whole step instead (`call` around read, decide, write), so the next try
    # reads first and finds the comment or discussion if it is there.

    def comment(self, repo_id: str, num: int, text: str) -> None:
        self.api.comment_discussion(repo_id, num, text)

    def edit(self, repo_id: str, num: int, comment_id: str, text: str) -> None:
        self.api.edit_discussion_comment(repo_id, num, comment_id, text)

    def open_discussion(self, repo_id: str, title: str, body: str) -> int:
        return self.api.create_discussion(repo_id, title, description=body).num
