"""The pre-push hook lives beside git-lfs: real git and git-lfs clients push a model repository
to a bare remote through the installed hook, in both install orders, and a fresh clone has the
LFS objects (not pointers); a push that hfdoctor blocks sends nothing, neither commits nor LFS
objects. `hook uninstall` puts git-lfs's hook back byte for byte."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import UPSTREAM
from hook_git import git, hfdoctor, isolated_git_env

pytestmark = pytest.mark.skipif(shutil.which("git-lfs") is None, reason="git-lfs is not installed (apt-get install git-lfs)")

# A small upstream folder that checks clean (exit 0), so that only what a test breaks blocks the push.
CLEAN = UPSTREAM / "Qwen--Qwen2.5-7B-Instruct"
PAYLOAD = os.urandom(64 * 1024)  # the LFS-tracked data a fresh clone must get back


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A HOME of its own (git-lfs's global filters go there, never into the user's config)."""
    environ = isolated_git_env(tmp_path)
    git(tmp_path, environ, "lfs", "install", "--skip-repo")
    return environ


def model_repo(tmp_path: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """A model repository (clean upstream metadata plus one LFS-tracked file) and its bare remote."""
    remote = tmp_path / "remote.git"
    git(tmp_path, env, "init", "-q", "--bare", str(remote))
    repo = tmp_path / "model"
    shutil.copytree(CLEAN, repo)
    git(repo, env, "init", "-q")
    (repo / ".gitattributes").write_text("*.parquet filter=lfs diff=lfs merge=lfs -text\n")
    (repo / "train.parquet").write_bytes(PAYLOAD)
    git(repo, env, "remote", "add", "origin", str(remote))
    return repo, remote


def commit_all(repo: Path, env: dict[str, str], message: str) -> None:
    git(repo, env, "add", "-A")
    git(repo, env, "commit", "-qm", message)


def push(repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "push", "origin", "main"], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=300)


def lfs_objects(remote: Path) -> list[Path]:
    return [p for p in (remote / "lfs" / "objects").rglob("*") if p.is_file()] if (remote / "lfs").exists() else []


def assert_clone_has_the_objects(tmp_path: Path, remote: Path, env: dict[str, str]) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, env, "clone", "-q", str(remote), str(clone))
    assert (clone / "train.parquet").read_bytes() == PAYLOAD, "the clone holds a pointer, not the LFS object"
    listed = git(clone, env, "lfs", "ls-files").stdout
    assert "* train.parquet" in listed, listed


def test_lfs_first_then_hfdoctor_chains_and_uploads(tmp_path, env):
    repo, remote = model_repo(tmp_path, env)
    git(repo, env, "lfs", "install")  # writes .git/hooks/pre-push
    lfs_hook = (repo / ".git" / "hooks" / "pre-push").read_bytes()
    installed = hfdoctor(env, "hook", "install", "--repo", str(repo))
    assert installed.returncode == 0, installed.stderr
    assert "kept the pre-push hook" in installed.stdout
    assert (repo / ".git" / "hooks" / "pre-push.hfdoctor-chained").read_bytes() == lfs_hook
    commit_all(repo, env, "model")
    pushed = push(repo, env)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert_clone_has_the_objects(tmp_path, remote, env)


def test_hfdoctor_first_then_lfs_still_uploads(tmp_path, env):
    repo, remote = model_repo(tmp_path, env)
    installed = hfdoctor(env, "hook", "install", "--repo", str(repo))
    assert installed.returncode == 0, installed.stderr
    lfs = subprocess.run(["git", "lfs", "install"], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert "hfdoctor" in (repo / ".git" / "hooks" / "pre-push").read_text()  # git-lfs did not replace ours
    assert "pre-push" in lfs.stdout + lfs.stderr  # it says the hook exists
    commit_all(repo, env, "model")
    pushed = push(repo, env)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert_clone_has_the_objects(tmp_path, remote, env)


@pytest.mark.parametrize("order", ["lfs-first", "hfdoctor-first"])
def test_a_blocked_push_sends_nothing(tmp_path, env, order):
    repo, remote = model_repo(tmp_path, env)
    steps = [["lfs", "install"], None] if order == "lfs-first" else [None, ["lfs", "install"]]
    for step in steps:
        if step is None:
            assert hfdoctor(env, "hook", "install", "--repo", str(repo)).returncode == 0
        else:
            subprocess.run(["git", *step], cwd=repo, env=env, capture_output=True, timeout=60)
    (repo / "config.json").write_text("{not json")  # file-unreadable: an error
    commit_all(repo, env, "broken")
    pushed = push(repo, env)
    assert pushed.returncode != 0
    assert "file-unreadable" in pushed.stdout + pushed.stderr
    assert "To push once without the check: git push --no-verify" in pushed.stderr
    assert lfs_objects(remote) == [], "a blocked push uploaded LFS objects"
    assert git(remote, env, "for-each-ref").stdout == "", "a blocked push sent commits"


def test_uninstall_restores_the_lfs_hook(tmp_path, env):
    repo, _ = model_repo(tmp_path, env)
    git(repo, env, "lfs", "install")
    hook = repo / ".git" / "hooks" / "pre-push"
    before, mode = hook.read_bytes(), hook.stat().st_mode
    assert hfdoctor(env, "hook", "install", "--repo", str(repo)).returncode == 0
    assert hfdoctor(env, "hook", "install", "--repo", str(repo)).returncode == 0  # again: still chained once
    assert (repo / ".git" / "hooks" / "pre-push.hfdoctor-chained").read_bytes() == before
    done = hfdoctor(env, "hook", "uninstall", "--repo", str(repo))
    assert done.returncode == 0 and "restored" in done.stdout, done.stderr
    assert hook.read_bytes() == before and hook.stat().st_mode == mode
    assert not (repo / ".git" / "hooks" / "pre-push.hfdoctor-chained").exists()
    again = hfdoctor(env, "hook", "uninstall", "--repo", str(repo))
    assert again.returncode == 2 and "not written by hfdoctor" in again.stderr


def test_uninstall_without_a_previous_hook_removes_ours(tmp_path, env):
    repo, _ = model_repo(tmp_path, env)
    assert hfdoctor(env, "hook", "install", "--repo", str(repo)).returncode == 0
    done = hfdoctor(env, "hook", "uninstall", "--repo", str(repo))
    assert done.returncode == 0 and "removed" in done.stdout
    assert not (repo / ".git" / "hooks" / "pre-push").exists()
