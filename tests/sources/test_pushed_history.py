"""The pre-push hook judges every blob a push carries, not only the tip: an 11 MiB plain
blob or a pickle payload added in one pushed commit and removed in the next is still in the
push (the Hub refuses the first; the second stays downloadable by revision)."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

SEED = ROOT / "fixtures" / "seed-incident"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


class Payload:
    """Unpickling this runs os.system: the classic payload (never unpickled here)."""

    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.fixture
def pushed_repo(tmp_path) -> tuple[Path, Path]:
    """A model repository with a bare remote that has its first commit."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    repo = tmp_path / "model"
    shutil.copytree(SEED, repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first")
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "-q", "origin", "main")
    subprocess.run([sys.executable, "-m", "hfdoctor", "hook", "install", "--repo", str(repo), "--fail-on", "error"],
                   check=True, capture_output=True)
    return repo, remote


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def push(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "push", "origin", "main"], cwd=repo, capture_output=True, text=True, timeout=300)


def add_then_remove(repo: Path, name: str, data: bytes) -> str:
    """A commit that adds `name`, then one that removes it: the tip no longer holds it."""
    (repo / name).write_bytes(data)
    added = commit(repo, f"add {name}")
    (repo / name).unlink()
    commit(repo, f"remove {name}")
    return added


def test_an_intermediate_large_plain_blob_blocks_the_push(pushed_repo):
    repo, _ = pushed_repo
    added = add_then_remove(repo, "dump.bin", os.urandom(11 * 1024 * 1024))
    proc = push(repo)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "lfs-attributes" in proc.stdout and added[:12] in proc.stdout and "dump.bin" in proc.stdout


def test_an_intermediate_pickle_payload_blocks_the_push(pushed_repo):
    repo, _ = pushed_repo
    added = add_then_remove(repo, "optimizer.pt", pickle.dumps(Payload(), protocol=2))
    proc = push(repo)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "unsafe-pickle-in-history" in proc.stdout and added[:12] in proc.stdout and "system" in proc.stdout


def test_clean_history_pushes_and_pushed_commits_are_not_judged_again(pushed_repo):
    repo, remote = pushed_repo
    (repo / "notes.md").write_text("a note\n")
    commit(repo, "a note")
    proc = push(repo)
    # The seed's own findings are at the tip (missing template etc.): error. Select only the
    # blob rules to see that history adds nothing here.
    from hfdoctor.lint.check import Options, check_target

    tip = git(repo, "rev-parse", "HEAD").strip()
    report = check_target(str(repo), Options(git_rev=tip, git_since=git(remote, "rev-parse", "main").strip(),
                                          select=("lfs-attributes", "unsafe-pickle")))
    assert report.findings == []
    assert "missing-chat-template" in proc.stdout  # the tip is still judged by every rule


def test_a_new_branch_is_judged_from_what_no_remote_has(pushed_repo):
    repo, _ = pushed_repo
    git(repo, "checkout", "-q", "-b", "feature")
    added = add_then_remove(repo, "dump.bin", os.urandom(11 * 1024 * 1024))
    from hfdoctor.lint.check import Options, check_target

    report = check_target(str(repo), Options(git_rev="HEAD", git_since="0" * 40, select=("lfs-attributes",)))
    assert [f.file for f in report.findings] == ["dump.bin"] and added[:12] in report.findings[0].message
    # The commit the remote already has ("first") is not re-read: only the two new ones.
    from hfdoctor.sources.git import GitSource

    source = GitSource(repo, "HEAD", since="0" * 40)
    assert {b.commit for b in source.pushed} == {added}


def test_git_since_takes_only_a_commit_id(pushed_repo):
    """--git-since reaches git's command line: an option there is refused, never run."""
    from hfdoctor.lint.check import Options, check_target

    repo, _ = pushed_repo
    report = check_target(str(repo), Options(git_rev="HEAD", git_since="--output=/tmp/hfdoctor-pwned"))
    assert not hasattr(report, "findings") and "not a commit id" in report.message, report
    assert not Path("/tmp/hfdoctor-pwned").exists()


def test_every_pushed_commit_is_read_by_one_git_process(tmp_path):
    """60 commits, each adding one file: each blob is attributed to the commit that added it,
    and git runs twice in all (the changes of every commit, then the sizes), not once a commit."""
    from hfdoctor.sources import history
    from hfdoctor.sources.git import _git

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    added = {}
    for i in range(60):
        (repo / f"f{i}.txt").write_text(f"content {i}\n")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{i}")
        added[f"f{i}.txt"] = git(repo, "rev-parse", "HEAD").strip()
    calls = []

    def counted(*args, stdin=None):
        calls.append(args[0])
        return _git(repo, *args, stdin=stdin)

    commits = git(repo, "rev-list", "--reverse", "HEAD").split()
    blobs = history.added_blobs(counted, commits, "", set())
    assert {b.path: b.commit for b in blobs} == added
    assert all(b.size == len(f"content {b.path[1:-4]}\n") for b in blobs)
    assert calls == ["diff-tree", "cat-file"]


def test_a_push_of_more_objects_than_are_judged_is_not_proven_safe(pushed_repo, monkeypatch):
    """A push past MAX_PUSHED_OBJECTS (a million: scaled down here) was judged that far and the rest
    only said as check-incomplete, a warning: the hook let it through, and a pickle among the
    objects after the limit was never read. What was not judged is not proven safe (SEC009, an error)."""
    from hfdoctor.lint.check import Options, check_target
    from hfdoctor.sources import history

    repo, remote = pushed_repo
    for i in range(6):
        (repo / f"notes{i}.md").write_text(f"a note {i}\n")
    commit(repo, "notes")
    monkeypatch.setattr(history, "MAX_PUSHED_OBJECTS", 3)
    since = git(remote, "rev-parse", "main").strip()
    report = check_target(str(repo), Options(git_rev="HEAD", git_since=since, select=("SEC009",)))
    [finding] = report.findings
    assert str(finding.severity) == "error" and "not proven safe" in finding.message and " 3 objects" in finding.message
    monkeypatch.setattr(history, "MAX_PUSHED_OBJECTS", 1_000)
    assert check_target(str(repo), Options(git_rev="HEAD", git_since=since, select=("SEC009",))).findings == []
