"""What a Hub webhook delivery asks for: its payload read, checked, and turned into tasks.

The payload format is the Hub's (https://huggingface.co/docs/hub/webhooks): `event.scope` and
`event.action`, `repo` (type, name, private, headSha), `discussion` (num, isPullRequest, status,
changes.base) on community events, `updatedRefs` (ref, oldSha, newSha) on content events. Every
field is outside text: names must be Hub repo ids, numbers positive integers, shas commit ids,
or the delivery is malformed (400). Unknown scopes and fields are accepted and ignored, as the
Hub's documentation asks of handlers.

Two kinds of task come out:
- a pull request to (re)check: a `discussion` event on an open pull request, or new commits on
  its ref `refs/pr/N` (a `repo.content` event);
- a push to main to check: `refs/heads/main` moved from one commit to another.
Everything else (comments, other branches, tags, datasets and Spaces, a new repository's
first commit, which has nothing before it to compare with) is accepted and ignored.

The delivery key makes a delivery handled once: the Hub's `Webhook-Id` header (the same on
its retries and on a replay from the webhook's activity tab), or, when a delivery has none,
a digest of the fields that say what happened.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from hfdoctor.sources.revisions import is_commit_id
from hfdoctor.sources.targets import REPO_ID

MAIN = "refs/heads/main"
PR_REF_PREFIX = "refs/pr/"
MAX_DELIVERY_ID = 128  # Webhook-Id: an opaque token; anything longer is not one
ACTIVE_STATUSES = ("open", "draft")


class MalformedPayload(ValueError):
    """The body is not a Hub webhook payload (answered 400)."""


@dataclass(frozen=True)
class Task:
    """One piece of work a delivery asks for."""

    kind: str  # "pull-request" | "push"
    repo_id: str
    pr_num: int | None = None  # pull-request
    base_ref: str | None = None  # pull-request: the branch it targets, when the payload says
    old_sha: str | None = None  # push
    new_sha: str | None = None  # push

    @property
    def label(self) -> str:
        if self.kind == "pull-request":
            return f"pull request #{self.pr_num}"
        return f"push {short(self.old_sha)}..{short(self.new_sha)}"


@dataclass(frozen=True)
class Delivery:
    key: str
    repo_id: str
    private: bool
    scope: str
    action: str
    tasks: tuple[Task, ...] = ()
    ignored: str = ""  # why nothing is to be done, when `tasks` is empty


def short(sha: str | None) -> str:
    return sha[:12] if sha else "-"


def read_delivery(body: bytes, delivery_id: str | None = None) -> Delivery:
    """The delivery this body (and Webhook-Id header) is; MalformedPayload when it is none."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise MalformedPayload("the body is not JSON") from None
    payload = _object(data, "the payload")
    event = _object(payload.get("event"), "event")
    scope, action = _text(event, "scope"), _text(event, "action")
    repo = _object(payload.get("repo"), "repo")
    repo_type, repo_id = _text(repo, "type"), _text(repo, "name")
    private = repo.get("private") is True
    discussion = payload.get("discussion")
    refs = _updated_refs(payload.get("updatedRefs"))
    key = _key(delivery_id, scope, action, repo_type, repo_id, repo.get("headSha"), discussion, refs, payload)

    def delivery(tasks: tuple[Task, ...] = (), ignored: str = "") -> Delivery:
        return Delivery(key, repo_id, private, scope, action, tasks, ignored)

    if repo_type != "model":
        return delivery(ignored=f"a {repo_type} repository: hfdoctor checks model repositories")
    if REPO_ID.fullmatch(repo_id) is None or "@" in repo_id:
        raise MalformedPayload("repo.name is not a Hub repository id")
    if scope == "discussion" and discussion is not None:
        task = _discussion_task(repo_id, _object(discussion, "discussion"), action)
        return delivery((task,)) if task else delivery(ignored="not an open pull request created or updated")
    if scope == "repo.content":
        tasks = tuple(task for ref in refs if (task := _ref_task(repo_id, ref)) is not None)
        return delivery(tasks) if tasks else delivery(ignored="no new commit on main or on a pull request")
    return delivery(ignored=f"scope {scope!r}: hfdoctor acts on pull requests and pushes to main")


def _discussion_task(repo_id: str, discussion: dict, action: str) -> Task | None:
    num = discussion.get("num")
    if not isinstance(num, int) or isinstance(num, bool) or num <= 0:
        raise MalformedPayload("discussion.num is not a positive integer")
    if discussion.get("isPullRequest") is not True or action not in ("create", "update"):
        return None
    if discussion.get("status") not in ACTIVE_STATUSES:
        return None
    changes = discussion.get("changes")
    base = changes.get("base") if isinstance(changes, dict) else None
    base_ref = base if isinstance(base, str) and base.startswith("refs/heads/") and len(base) < 256 else None
    return Task("pull-request", repo_id, pr_num=num, base_ref=base_ref)


def _ref_task(repo_id: str, ref: dict) -> Task | None:
    name, old, new = ref["ref"], ref["oldSha"], ref["newSha"]
    if new is None:
        return None  # a deleted ref
    if name.startswith(PR_REF_PREFIX):
        number = name[len(PR_REF_PREFIX):]
        if number.isdigit() and number.isascii() and 0 < int(number) < 10**9:
            return Task("pull-request", repo_id, pr_num=int(number))
        return None
    if name == MAIN and old is not None:  # a new main has no previous revision to compare with
        return Task("push", repo_id, old_sha=old, new_sha=new)
    return None


def _updated_refs(value: object) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > 1000:
        raise MalformedPayload("updatedRefs is not a list of refs")
    refs = []
    for item in value:
        ref = _object(item, "updatedRefs[]")
        name = _text(ref, "ref")
        shas = {key: ref.get(key) for key in ("oldSha", "newSha")}
        for key, sha in shas.items():
            if sha is not None and not (isinstance(sha, str) and is_commit_id(sha)):
                raise MalformedPayload(f"updatedRefs[].{key} is not a commit id")
        refs.append({"ref": name, **shas})
    return refs


def _object(value: object, what: str) -> dict:
    if not isinstance(value, dict):
        raise MalformedPayload(f"{what} is not a JSON object")
    return value


def _text(obj: dict, key: str, limit: int = 256) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise MalformedPayload(f"{key} is missing or not a short string")
    return value


def _key(delivery_id: str | None, scope, action, repo_type, repo_id, head_sha, discussion, refs, payload) -> str:
    if delivery_id:
        return "id:" + delivery_id
    discussion = discussion if isinstance(discussion, dict) else {}
    comment = payload.get("comment") if isinstance(payload.get("comment"), dict) else {}
    what = [scope, action, repo_type, repo_id, head_sha, discussion.get("num"), discussion.get("status"),
            discussion.get("title"), comment.get("id"), refs]
    return "content:" + hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def delivery_id_of(header: str | None) -> str | None:
    """The Webhook-Id header when it is one (printable ASCII, short); None otherwise."""
    if header is None:
        return None
    header = header.strip()
    if not header or len(header) > MAX_DELIVERY_ID or not (header.isascii() and header.isprintable()):
        return None
    return header
