"""The loopback Hub's discussions and comments (tests/hub_server.py mixes this in).

The endpoints and JSON fields are the ones huggingface_hub 2.x's HfApi calls and reads
(hf_api.py: get_repo_discussions, get_discussion_details, create_discussion, comment_discussion,
edit_discussion_comment, whoami; community.py: deserialize_event):
- GET  /api/whoami-v2                                         {"name": ..., "type": "user"}
- GET  /api/models/{org}/{name}/discussions?type=&status=&author=&p=  {"discussions", "count", "start"}
- GET  /api/models/{org}/{name}/discussions/{num}             details, with "events" (comments)
- POST /api/models/{org}/{name}/discussions                   {"title", "description", "pullRequest"} -> {"num"}
- POST /api/models/{org}/{name}/discussions/{num}/comment     {"comment"} -> {"newMessage": event}
- POST /api/models/{org}/{name}/discussions/{num}/comment/{id}/edit  {"content"} -> {"updatedComment": event}
As on the Hub: writes need a token, a discussion's description is its first comment, and only a
comment's author may edit it (403 otherwise).

For the tests' own doing: `FakeHub.open_pr` / `push_pr` (a pull request and new commits on its
ref), `FakeHub.add_comment` (a comment by someone else), `comments`; and faults by operation
name (whoami, list, details, create, comment, edit): `fail_next[op] = n` answers the next n calls
with 503, `hang_ops` never answers them (until the server stops).
"""

from __future__ import annotations

import hashlib
import itertools
import json

DISCUSSION_PAGE = 50
USERS = {"hf_test_token": "hfdoctor-test"}
_ids = itertools.count(1)


def event_id() -> str:
    return f"{next(_ids):024x}"


def comment_event(author: str, text: str, edits: int = 0) -> dict:
    return {"id": event_id(), "type": "comment", "createdAt": "2026-11-23T00:00:00.000Z", "author": {"name": author},
            "data": {"edited": edits > 0, "hidden": False, "numEdits": edits,
                     "latest": {"raw": text, "html": "", "updatedAt": "2026-11-23T00:00:00.000Z",
                                "author": {"name": author}}}}


def new_discussion(repo_id: str, num: int, title: str, author: str, description: str, pull_request: bool) -> dict:
    return {"num": num, "title": title, "status": "open", "author": {"name": author},
            "createdAt": "2026-11-23T00:00:00.000Z", "isPullRequest": pull_request,
            "repo": {"name": repo_id, "type": "model"}, "description": description, "files": [],
            "events": [comment_event(author, description)], "changes": {"base": "refs/heads/main"}}


PUBLIC_FIELDS = ("num", "title", "status", "author", "createdAt", "isPullRequest", "repo")


class DiscussionsMixin:
    """Handler methods; `self.hub` is the FakeHub, `self._send`, `self._error`, `self._repo` its helpers."""

    def _user(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return USERS.get(auth[len("Bearer "):]) if auth.startswith("Bearer ") else None

    def _fault(self, op: str) -> bool:
        """Answer as the test asked for this operation (503, or never); True when it did."""
        if op in self.hub.hang_ops:
            while not self.hub.stopping.wait(0.2):
                pass
            return True
        with self.hub.lock:
            left = self.hub.fail_next.get(op, 0)
            if left:
                self.hub.fail_next[op] = left - 1
        if left:
            self._error(503, "ServiceUnavailable", "the test Hub is down for this call")
            return True
        return False

    def _json_answer(self, data: dict) -> None:
        self._send(200, json.dumps(data).encode(), {"Content-Type": "application/json"})

    def _whoami(self) -> None:
        if self._fault("whoami"):
            return
        user = self._user()
        if user is None:
            return self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
        self._json_answer({"type": "user", "name": user, "fullname": user, "auth": {"type": "access_token"}})

    def _discussions(self, repo_id: str, query: dict) -> None:
        if self._fault("list"):
            return
        repo = self._repo(repo_id)
        if repo is None:
            return
        status, kind = query.get("status", ["all"])[0], query.get("type", ["all"])[0]
        author = query.get("author", [None])[0]
        wanted = [d for d in reversed(repo.discussions)  # the Hub lists the newest first
                  if status in ("all", d["status"])
                  and kind in ("all", "pull_request" if d["isPullRequest"] else "discussion")
                  and author in (None, d["author"]["name"])]
        page = int(query.get("p", ["0"])[0])
        shown = wanted[page * DISCUSSION_PAGE:(page + 1) * DISCUSSION_PAGE]
        public = [{k: d[k] for k in PUBLIC_FIELDS} for d in shown]
        self._json_answer({"discussions": public, "count": len(wanted), "start": page * DISCUSSION_PAGE,
                           "numClosedDiscussions": 0})

    def _discussion(self, repo_id: str, num: str):
        repo = self._repo(repo_id)
        if repo is None:
            return None, None
        found = next((d for d in repo.discussions if str(d["num"]) == num), None)
        if found is None:
            self._error(404, "NotFound", "Discussion not found")
        return repo, found

    def _details(self, repo_id: str, num: str) -> None:
        if self._fault("details"):
            return
        repo, found = self._discussion(repo_id, num)
        if found is None:
            return
        with self.hub.lock:
            body = {k: found[k] for k in PUBLIC_FIELDS} | {"events": found["events"], "pinned": False}
            if found["isPullRequest"]:
                body |= {"changes": found["changes"], "filesWithConflicts": [], "diff": ""}
            self._json_answer(body)

    def _discussion_post(self, repo_id: str, parts: list[str], body: bytes) -> None:
        """POST .../discussions, .../discussions/{num}/comment, .../comment/{id}/edit."""
        op = "create" if len(parts) == 5 else ("comment" if len(parts) == 7 else "edit")
        if self._fault(op):
            return
        user = self._user()
        if user is None:
            return self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
        repo = self._repo(repo_id)
        if repo is None:
            return
        data = json.loads(body or b"{}")
        if op == "create":
            with self.hub.lock:
                num = len(repo.discussions) + 1
                repo.discussions.append(new_discussion(repo_id, num, data["title"], user, data.get("description", ""),
                                                       bool(data.get("pullRequest"))))
            return self._json_answer({"num": num, "url": f"{self.hub.endpoint}/{repo_id}/discussions/{num}"})
        _, found = self._discussion(repo_id, parts[5])
        if found is None:
            return
        with self.hub.lock:
            if op == "comment":
                event = comment_event(user, data["comment"])
                found["events"].append(event)
                return self._json_answer({"newMessage": event})
            event = next((e for e in found["events"] if e["id"] == parts[7]), None)
            if event is None:
                return self._error(404, "NotFound", "Comment not found")
            if event["author"]["name"] != user:
                return self._error(403, "Forbidden", "You can only edit your own comments")
            edits = event["data"]["numEdits"] + 1
            event["data"] |= {"edited": True, "numEdits": edits}
            event["data"]["latest"] |= {"raw": data["content"]}
            self._json_answer({"updatedComment": event})


class DiscussionsHub:
    """FakeHub's side: faults, and what the tests do as other Hub users."""

    def _init_discussions(self) -> None:
        self.fail_next: dict[str, int] = {}
        self.hang_ops: set[str] = set()

    def open_pr(self, repo_id: str, files: dict, title: str = "Update files", author: str = "contributor") -> int:
        """A pull request by someone else whose head holds `files`; its number."""
        from hub_server import HubRepo

        repo = self.repos[repo_id]
        with self.lock:
            num = len(repo.discussions) + 1
            # Named by what it holds, as git's are (the runner remembers checks by commit id).
            commit = hashlib.sha1(f"{HubRepo._commit_of(files)}:pr{num}".encode()).hexdigest()
            repo.history[commit] = dict(files)
            repo.refs[f"refs/pr/{num}"] = commit
            repo.discussions.append(new_discussion(repo_id, num, title, author, "Please merge.", True))
        return num

    def push_pr(self, repo_id: str, num: int, files: dict) -> str:
        """New commit on pull request `num`; its sha."""
        from hub_server import HubRepo

        repo = self.repos[repo_id]
        with self.lock:
            commit = hashlib.sha1(f"{HubRepo._commit_of(files)}:pr{num}".encode()).hexdigest()
            repo.history[commit] = dict(files)
            repo.refs[f"refs/pr/{num}"] = commit
        return commit

    def add_comment(self, repo_id: str, num: int, text: str, author: str = "someone-else") -> None:
        with self.lock:
            self.repos[repo_id].discussions[num - 1]["events"].append(comment_event(author, text))

    def comments(self, repo_id: str, num: int, author: str | None = "hfdoctor-test") -> list[str]:
        """The text of the comments on discussion `num` (by `author`; None: everyone's)."""
        with self.lock:
            events = self.repos[repo_id].discussions[num - 1]["events"]
            return [e["data"]["latest"]["raw"] for e in events
                    if e["type"] == "comment" and author in (None, e["author"]["name"])]
