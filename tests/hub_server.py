"""A Hugging Face Hub on 127.0.0.1, for tests: the real huggingface_hub client code talks to it.

It speaks the endpoints huggingface_hub uses to read a model repo:
- GET  /api/models/{org}/{name}[/revision/{rev}]  model info (sha, siblings with sizes and LFS)
- GET  /api/models/{org}/{name}/tree/{rev}[/{path}]  the file listing
- HEAD/GET /{org}/{name}/resolve/{rev}/{path}  file metadata and content, with Range (206);
  LFS files redirect (302) to a second server on another port (the "CDN"), as the Hub does
- the Hub's errors: 404 RepoNotFound / RevisionNotFound / EntryNotFound (X-Error-Code), 401
  GatedRepo without a token;
- what `create_commit(create_pr=True)` and `get_repo_discussions` call, for `fix --pr`:
  POST /api/validate-yaml, POST /api/models/{org}/{name}/preupload/{rev} (every file
  "regular"), POST /api/models/{org}/{name}/commit/{rev}?create_pr=1 (ndjson; a stale
  `parentCommit` is refused with 412, as the Hub does), GET .../discussions; a pull request
  is the revision `refs/pr/N`. Writes need the test token; `read_only` repos answer 403.
- discussions and their comments (list, details, create, comment, edit) and whoami, for the
  webhook runner: tests/hub_discussions.py, with its faults (503s, calls that hang).
Repos are dicts of path -> bytes or a file on disk (sparse weights: only the requested
ranges are read). Every body byte sent is counted per repo. A repo named `*/hang` never
answers (until the server stops). Only 127.0.0.1 is bound.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from hub_discussions import DiscussionsHub, DiscussionsMixin, new_discussion

TOKEN = "hf_test_token"
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".gguf")


@dataclass
class HubRepo:
    files: dict[str, bytes | Path]  # the files of the latest commit
    gated: bool = False
    read_only: bool = False  # the token may read but not write (opening a PR answers 403)
    commits: list[str] = field(default_factory=list)
    history: dict[str, dict[str, bytes | Path]] = field(default_factory=dict)  # commit -> its files
    refs: dict[str, str] = field(default_factory=dict)  # "refs/pr/1" -> commit
    discussions: list[dict] = field(default_factory=list)  # pull requests, as the API lists them

    def __post_init__(self):
        if not self.commits:
            self.commits.append(self._commit_of(self.files))
        self.history[self.commits[-1]] = self.files

    def at(self, commit: str) -> "HubRepo":
        """This repo as it was at `commit` (reads serve that commit's files)."""
        return HubRepo(self.history[commit], self.gated, self.read_only, [commit], {commit: self.history[commit]})

    @staticmethod
    def _commit_of(files: dict[str, bytes | Path]) -> str:
        digest = hashlib.sha1()
        for path, content in sorted(files.items()):
            digest.update(path.encode())
            digest.update(content if isinstance(content, bytes) else str(content.stat().st_size).encode())
        return digest.hexdigest()

    @property
    def commit(self) -> str:
        return self.commits[-1]

    def size(self, path: str) -> int:
        content = self.files[path]
        return len(content) if isinstance(content, bytes) else content.stat().st_size

    def read(self, path: str, start: int, end: int) -> bytes:
        content = self.files[path]
        if isinstance(content, bytes):
            return content[start:end]
        with open(content, "rb") as f:
            f.seek(start)
            return f.read(end - start)

    def blob_id(self, path: str) -> str:
        content = self.files[path]
        if isinstance(content, bytes):  # git's blob id: equal bytes, equal id
            return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
        return hashlib.sha1(f"{path}:{self.size(path)}".encode()).hexdigest()


class FakeHub(DiscussionsHub):
    def __init__(self, repos: dict[str, HubRepo] | None = None):
        self._init_discussions()
        self.repos: dict[str, HubRepo] = dict(repos or {})
        self.sent: dict[str, int] = {}  # repo id -> body bytes sent
        self.sent_files: dict[tuple[str, str], int] = {}  # (repo id, path) -> file bytes sent
        self.requests: list[str] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.api = _server(self, cdn=False)
        self.cdn = _server(self, cdn=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.api.server_address[1]}"

    @property
    def cdn_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.cdn.server_address[1]}"

    def start(self) -> "FakeHub":
        for server in (self.api, self.cdn):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        for server in (self.api, self.cdn):
            server.shutdown()
            server.server_close()

    def push(self, repo_id: str, files: dict[str, bytes | Path]) -> str:
        """A new commit of `repo_id`; returns its sha."""
        repo = self.repos[repo_id]
        repo.files = dict(files)
        repo.commits.append(hashlib.sha1(f"{HubRepo._commit_of(files)}:{len(repo.commits)}".encode()).hexdigest())
        repo.history[repo.commit] = repo.files
        return repo.commit

    def count(self, repo_id: str, n: int, path: str | None = None) -> None:
        with self.lock:
            self.sent[repo_id] = self.sent.get(repo_id, 0) + n
            if path is not None:
                self.sent_files[(repo_id, path)] = self.sent_files.get((repo_id, path), 0) + n


def _server(hub: FakeHub, cdn: bool) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"hub": hub, "cdn": cdn})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    return server


class _Handler(DiscussionsMixin, BaseHTTPRequestHandler):
    hub: FakeHub
    cdn: bool
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    # --- helpers ------------------------------------------------------------------------

    def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None, repo_id: str | None = None,
              head: bool = False, path: str | None = None) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)
            if repo_id:
                self.hub.count(repo_id, len(body), path)

    def _error(self, code: int, error_code: str, message: str = "", head: bool = False) -> None:
        body = json.dumps({"error": message or error_code}).encode()
        self._send(code, body, {"X-Error-Code": error_code, "X-Error-Message": message or error_code,
                                "Content-Type": "application/json"}, head=head)

    def _repo(self, repo_id: str, head: bool = False) -> HubRepo | None:
        if repo_id.endswith("/hang"):
            while not self.hub.stopping.wait(0.2):
                pass
            return None
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", head=head)
            return None
        if repo.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._error(401, "GatedRepo", "Access to this model is restricted", head=head)
            return None
        return repo

    def _commit(self, repo: HubRepo, revision: str, head: bool = False) -> str | None:
        if revision in repo.refs:
            return repo.refs[revision]
        if revision in ("main", "HEAD") or revision in repo.commits or revision in repo.refs.values():
            return repo.commit if revision in ("main", "HEAD") else revision
        self._error(404, "RevisionNotFound", head=head)
        return None

    # --- endpoints ----------------------------------------------------------------------

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        self.hub.requests.append(f"POST {url.path}")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if parts == ["api", "validate-yaml"]:
            return self._send(200, b'{"errors": [], "warnings": []}', {"Content-Type": "application/json"})
        if parts[:2] == ["api", "models"] and len(parts) >= 5 and parts[4] == "discussions":
            return self._discussion_post("/".join(parts[2:4]), parts, body)
        if parts[:2] != ["api", "models"] or len(parts) < 6 or parts[4] not in ("preupload", "commit"):
            return self._error(404, "NotFound")
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
        repo_id = "/".join(parts[2:4])
        repo = self._repo(repo_id)
        if repo is None:
            return
        if repo.read_only:
            return self._error(403, "Forbidden", "You don't have the rights to create a pull request in this repo")
        if parts[4] == "preupload":
            files = json.loads(body)["files"]
            answer = {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
            return self._send(200, json.dumps(answer).encode(), {"Content-Type": "application/json"})
        self._pull_request(repo_id, repo, body, parse_qs(url.query))

    def _pull_request(self, repo_id: str, repo: HubRepo, body: bytes, query: dict) -> None:
        import base64

        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header = next(item["value"] for item in lines if item["key"] == "header")
        if query.get("create_pr") != ["1"]:
            return self._error(400, "BadRequest", "this test Hub only opens pull requests")
        parent = header.get("parentCommit")
        if parent is not None and parent != repo.commit:
            return self._error(412, "PreconditionFailed", "A commit has happened since. Please refresh and try again.")
        files = dict(repo.files)
        for item in lines:
            if item["key"] == "file":
                files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
        with self.hub.lock:
            num = len(repo.discussions) + 1
            commit = hashlib.sha1(f"{repo.commit}:pr{num}".encode()).hexdigest()
            repo.history[commit] = files
            repo.refs[f"refs/pr/{num}"] = commit
            discussion = new_discussion(repo_id, num, header["summary"], "hfdoctor-test", header.get("description", ""),
                                        True)
            discussion["files"] = sorted(item["value"]["path"] for item in lines if item["key"] == "file")
            repo.discussions.append(discussion)
        answer = {"commitUrl": f"{self.hub.endpoint}/{repo_id}/commit/{commit}", "commitOid": commit,
                  "pullRequestUrl": f"{self.hub.endpoint}/{repo_id}/discussions/{num}"}
        self._send(200, json.dumps(answer).encode(), {"Content-Type": "application/json"})

    def _route(self, head: bool) -> None:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        self.hub.requests.append(f"{'HEAD' if head else 'GET'} {url.path}")
        if self.cdn:
            return self._cdn(parts, head)
        if parts == ["api", "whoami-v2"]:
            return self._whoami()
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo_id = "/".join(parts[2:4])
            if len(parts) >= 6 and parts[4] == "tree":
                return self._tree(repo_id, parts[5], "/".join(parts[6:]), parse_qs(url.query))
            if len(parts) == 5 and parts[4] == "discussions":
                return self._discussions(repo_id, parse_qs(url.query))
            if len(parts) == 6 and parts[4] == "discussions":
                return self._details(repo_id, parts[5])
            revision = parts[5] if len(parts) >= 6 and parts[4] == "revision" else "main"
            return self._model_info(repo_id, revision)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), head)
        self._error(404, "NotFound", head=head)

    def _siblings(self, repo: HubRepo) -> list[dict]:
        out = []
        for path in sorted(repo.files):
            size = repo.size(path)
            item = {"rfilename": path, "size": size, "blobId": repo.blob_id(path)}
            if path.endswith(LFS_SUFFIXES):
                item["lfs"] = {"sha256": hashlib.sha256(repo.blob_id(path).encode()).hexdigest(), "size": size,
                               "pointerSize": 134}
            out.append(item)
        return out

    def _model_info(self, repo_id: str, revision: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        commit = self._commit(repo, revision)
        if commit is None:
            return
        repo = repo.at(commit)
        body = json.dumps({"_id": repo_id, "id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
                           "gated": "auto" if repo.gated else False, "tags": [],
                           "siblings": self._siblings(repo)}).encode()
        self._send(200, body, {"Content-Type": "application/json"}, repo_id=repo_id)

    def _tree(self, repo_id: str, revision: str, path: str, query: dict) -> None:
        repo = self._repo(repo_id)
        commit = self._commit(repo, revision) if repo is not None else None
        if repo is None or commit is None:
            return
        repo = repo.at(commit)
        items = [{"type": "file", "oid": s["blobId"], "size": s["size"], "path": s["rfilename"],
                  **({"lfs": {"oid": s["lfs"]["sha256"], "size": s["size"], "pointerSize": 134}} if "lfs" in s else {})}
                 for s in self._siblings(repo) if s["rfilename"].startswith(path)]
        self._send(200, json.dumps(items).encode(), {"Content-Type": "application/json"}, repo_id=repo_id)

    def _resolve(self, repo_id: str, revision: str, path: str, head: bool) -> None:
        repo = self._repo(repo_id, head=head)
        if repo is None:
            return
        commit = self._commit(repo, revision, head=head)
        if commit is None:
            return
        repo = repo.at(commit)
        if path not in repo.files:
            return self._send(404, b'{"error":"Entry not found"}', {"X-Error-Code": "EntryNotFound",
                                                                    "X-Repo-Commit": commit}, head=head)
        etag = f'"{repo.blob_id(path)}"'
        headers = {"X-Repo-Commit": commit, "ETag": etag, "Accept-Ranges": "bytes"}
        if path.endswith(LFS_SUFFIXES):  # to the CDN, as the Hub redirects LFS files
            headers.update({"Location": f"{self.hub.cdn_endpoint}/{repo_id}/{commit}/{path}",
                            "X-Linked-Size": str(repo.size(path)), "X-Linked-ETag": etag})
            return self._send(302, b"", headers, head=head)
        self._content(repo_id, repo, path, headers, head)

    def _cdn(self, parts: list[str], head: bool) -> None:
        repo_id, commit, path = "/".join(parts[:2]), parts[2], "/".join(parts[3:])
        repo = self.hub.repos.get(repo_id)
        repo = repo.at(commit) if repo is not None and commit in repo.history else None
        if repo is None or path not in repo.files:
            return self._send(404, b"", head=head)
        self._content(repo_id, repo, path, {"ETag": f'"{repo.blob_id(path)}"', "Accept-Ranges": "bytes"}, head)

    def _content(self, repo_id: str, repo: HubRepo, path: str, headers: dict[str, str], head: bool) -> None:
        size = repo.size(path)
        wanted = self.headers.get("Range")
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted[len("bytes="):].partition("-")
            start, end = int(first), min(int(last) + 1 if last else size, size)
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
            return self._send(206, b"" if head else repo.read(path, start, end), headers, repo_id, head, path)
        if head:
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            return
        self._send(200, repo.read(path, 0, size), headers, repo_id, path=path)


def folder_files(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes | Path]:
    """The files of a local folder as a hub repo: small ones as bytes, weights by path."""
    files: dict[str, bytes | Path] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not any(rel.startswith(s) for s in skip):
            files[rel] = path if rel.endswith(LFS_SUFFIXES) else path.read_bytes()
    return files


def wait_until(predicate, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False
