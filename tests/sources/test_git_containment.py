"""`--git-rev` and the pre-push path (`--git-since`) read only the target repository's own
objects: a `.git` that is a file (`gitdir: ../elsewhere`: a worktree, a submodule, or a
forgery), `objects/info/alternates`, a link inside .git that leaves it, and an included
configuration file each make git read another repository. Each is refused with exit 2 and
a message that names why, and nothing of the other repository reaches the report.

Each case runs the real command line under the audit hook of tests/test_hostile.py: no file
outside the repository opened by hfdoctor, nothing written, no connection, git hardened.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, TESTS

AUDIT_RUN = TESTS / "audit_run.py"
SEED = ROOT / "fixtures" / "seed-incident"
SECRET_NAME = "SECRET-outside-7f3a.bin"
GIT_HARDENING = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "protocol.allow=never")


class Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def git(cwd: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True).stdout


def outside_repository(root: Path) -> Path:
    """A repository whose commit holds a file whose name any report would show (a pickle payload)."""
    other = root / "elsewhere"
    other.mkdir(parents=True)
    (other / "config.json").write_text('{"model_type": "llama"}\n')
    (other / SECRET_NAME).write_bytes(pickle.dumps(Payload()))
    git(other, "init", "-q")
    git(other, "add", "-A")
    git(other, "commit", "-qm", "outside")
    return other


def committed_repository(repo: Path) -> Path:
    """A git repository at `repo` whose one commit holds an empty config.json."""
    repo.mkdir()
    (repo / "config.json").write_text("{}\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "x")
    return repo


def gitdir_file(root: Path) -> Path:
    other = outside_repository(root)
    repo = root / "repo"
    repo.mkdir()
    (repo / ".git").write_text("gitdir: ../elsewhere/.git\n")
    (repo / "config.json").write_text("{}\n")
    return repo


def alternates(root: Path) -> Path:
    other = outside_repository(root)
    repo = root / "repo"
    git(root, "clone", "-q", "--shared", str(other), str(repo))
    return repo


def objects_link(root: Path) -> Path:
    other = outside_repository(root)
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    for name in ("objects", "refs", "HEAD"):
        target = repo / ".git" / name
        if target.is_dir():
            import shutil
            shutil.rmtree(target)
        else:
            target.unlink()
    (repo / ".git" / "objects").symlink_to(other / ".git" / "objects")
    (repo / ".git" / "refs").symlink_to(other / ".git" / "refs")
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return repo


def worktree(root: Path) -> Path:
    other = outside_repository(root)
    repo = root / "repo"
    git(other, "worktree", "add", "-q", "-b", "side", str(repo))
    return repo


def included_config(root: Path) -> Path:
    outside_repository(root)
    repo = committed_repository(root / "repo")
    with open(repo / ".git" / "config", "a") as f:
        f.write("[include]\n\tpath = ../../elsewhere/.git/config\n")
    return repo


CASES = {"gitdir_file": gitdir_file, "alternates": alternates, "objects_link": objects_link, "worktree": worktree,
         "included_config": included_config}


def audited(repos: list[Path], log: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, str(AUDIT_RUN), str(log), "--", "check", *map(str, repos), *args, "--format", "json"]
    proc = subprocess.run(cmd, cwd=log.parent, capture_output=True, text=True, env=env, timeout=240)
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, events


def assert_contained(events: list[dict], repos: list[Path], case_root: Path) -> None:
    for event in events:
        kind, args = event["event"], event["args"]
        assert kind not in ("socket.connect", "socket.getaddrinfo", "http.client.connect", "os.remove", "os.rename",
                            "os.symlink", "os.chmod"), event
        assert kind != "open-write" or args[0] == os.devnull, event
        if kind == "subprocess.Popen" and os.path.basename(str(args[0])) == "git":
            assert all(flag in args[1] for flag in GIT_HARDENING), event
        if kind == "open-read":
            path = Path(str(args[0]))
            if path.is_absolute() and path.resolve().is_relative_to(case_root.resolve()):
                assert any(path.resolve().is_relative_to(repo.resolve()) for repo in repos), event


@pytest.mark.parametrize("since", [None, "0" * 40])  # --git-rev alone, and the pre-push path
def test_objects_of_another_repository_are_never_read(tmp_path, since):
    """Every case in one audited command (several targets): each is its own exit-2 error."""
    repos = [CASES[name](tmp_path / name) for name in sorted(CASES)]
    args = ["--git-rev", "HEAD"] + (["--git-since", since] if since else [])
    proc, events = audited(repos, tmp_path / "audit.log", *args)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert SECRET_NAME not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    results = json.loads(proc.stdout)
    assert [r["target"] for r in results] == [str(repo) for repo in repos]
    for name, result in zip(sorted(CASES), results):
        assert "hfdoctor reads only a repository's own" in result.get("error", ""), (name, result)
    assert_contained(events, repos, tmp_path)


def test_the_repository_itself_is_still_read(tmp_path):
    """The same command on a plain repository (a clone, not --shared) reads its commit."""
    other = outside_repository(tmp_path / "case")
    repo = tmp_path / "case" / "repo"
    git(tmp_path, "clone", "-q", "--no-local", str(other), str(repo))
    proc, events = audited([repo], tmp_path / "audit.log", "--git-rev", "HEAD")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert SECRET_NAME in proc.stdout  # its own commit holds the payload: found
    assert_contained(events, [repo], tmp_path / "case")


def test_hooks_that_are_links_do_not_refuse_a_repository(tmp_path):
    """Linked hooks are common (a project's scripts/): git runs none for hfdoctor, so they are no reason to refuse."""
    repo = committed_repository(tmp_path / "repo")
    (repo / ".git" / "hooks" / "pre-commit").symlink_to("/bin/true")
    from hfdoctor.sources.git import GitSource

    assert list(GitSource(repo, "HEAD").entries()) == ["config.json"]


@pytest.mark.parametrize("rev", ["--output=/tmp/x", "-h", ""])
def test_a_git_rev_that_is_an_option_is_refused_before_git_runs(tmp_path, rev):
    from hfdoctor.sources.base import SourceError
    from hfdoctor.sources.git import GitSource

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    with pytest.raises(SourceError, match="is not a revision"):
        GitSource(repo, rev)


def test_many_small_files_of_a_commit_are_read_by_a_few_git_processes(tmp_path):
    """5,000 small files and 500 links in a commit: each could be an LFS pointer or a link
    to follow. They are read in batches, not by two git processes each (20,000 such files
    took 190 s). Counted under the audit hook: git runs a few times, whatever the count."""
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "config.json").write_text('{"model_type": "llama"}\n')
    for i in range(5_000):
        (repo / "data" / f"f{i}.txt").write_text(f"x{i}")
    for i in range(500):
        (repo / "data" / f"link{i}").symlink_to(f"f{i}.txt")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "many")
    proc, events = audited([repo], tmp_path / "audit.log", "--git-rev", "HEAD")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    gits = [e for e in events if e["event"] == "subprocess.Popen" and os.path.basename(str(e["args"][0])) == "git"]
    assert len(gits) < 40, len(gits)
    assert_contained(events, [repo], tmp_path)
