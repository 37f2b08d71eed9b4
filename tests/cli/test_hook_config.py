"""The pre-push hook reads the same configuration as `check`: what `hook install` was given
(--select, --ignore, --config) is stored in the hook, and the repository's own .hfdoctor.toml is
read from the commit pushed. Real `git push`es to a bare remote, on Qwen2.5-7B-Instruct's
published metadata with its generation_config.json cut short (CFG001 file-unreadable, an error).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import UPSTREAM
from hook_git import git, hfdoctor, isolated_git_env

CLEAN = UPSTREAM / "Qwen--Qwen2.5-7B-Instruct"


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A HOME of its own (no user git configuration), and this checkout's hfdoctor."""
    return isolated_git_env(tmp_path, HF_HUB_OFFLINE="1")


def commit(repo: Path, env: dict[str, str], message: str) -> None:
    git(repo, env, "add", "-A")
    git(repo, env, "commit", "-qm", message)


def push(repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "push", "-q", "origin", "main"], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=300)


def remote_head(remote: Path, env: dict[str, str]) -> str | None:
    done = subprocess.run(["git", "rev-parse", "--verify", "-q", "main"], cwd=remote, env=env, capture_output=True,
                          text=True)
    return done.stdout.strip() or None


@pytest.fixture
def broken(tmp_path, env) -> tuple[Path, Path]:
    """A model repository whose one commit has a truncated generation_config.json, and its empty bare remote."""
    remote = tmp_path / "remote.git"
    git(tmp_path, env, "init", "-q", "--bare", str(remote))
    repo = tmp_path / "model"
    shutil.copytree(CLEAN, repo)
    (repo / "generation_config.json").write_text('{"eos_token_id": [151645,\n')
    git(repo, env, "init", "-q")
    git(repo, env, "remote", "add", "origin", str(remote))
    commit(repo, env, "a broken generation_config.json")
    return repo, remote


def test_the_hook_keeps_the_rules_it_was_installed_with(broken, env):
    repo, remote = broken
    assert hfdoctor(env, "hook", "install", "--repo", str(repo), "--select", "TPL,CARD").returncode == 0
    assert "--select TPL,CARD" in (repo / ".git" / "hooks" / "pre-push").read_text()
    pushed = push(repo, env)
    assert pushed.returncode == 0, pushed.stderr  # CFG001 is not selected: the push goes through
    assert remote_head(remote, env) == git(repo, env, "rev-parse", "HEAD").stdout.strip()

    assert hfdoctor(env, "hook", "install", "--repo", str(repo)).returncode == 0  # every rule again
    (repo / "README.md").write_text("# model\n")
    commit(repo, env, "a card")
    blocked = push(repo, env)
    assert blocked.returncode != 0 and "file-unreadable" in blocked.stdout + blocked.stderr
    assert remote_head(remote, env) != git(repo, env, "rev-parse", "HEAD").stdout.strip()  # nothing sent

    bad = hfdoctor(env, "hook", "install", "--repo", str(repo), "--ignore", "NOPE9")
    assert bad.returncode == 2 and "no rule matches 'NOPE9'" in bad.stderr


def test_the_hook_reads_the_configuration_of_the_commit_pushed(broken, env, tmp_path):
    repo, remote = broken
    assert hfdoctor(env, "hook", "install", "--repo", str(repo)).returncode == 0
    assert push(repo, env).returncode != 0

    (repo / ".hfdoctor.toml").write_text('[per-file-ignores]\n"generation_config.json" = ["file-unreadable"]\n')
    commit(repo, env, "accept the truncated file")
    pushed = push(repo, env)
    assert pushed.returncode == 0, pushed.stderr
    assert remote_head(remote, env) == git(repo, env, "rev-parse", "HEAD").stdout.strip()

    # --config stored in the hook, as an absolute path: its file, not the repository's, decides.
    strict = tmp_path / "strict.toml"
    strict.write_text('fail-on = "error"\n')
    assert hfdoctor(env, "hook", "install", "--repo", str(repo), "--config", str(strict)).returncode == 0
    assert str(strict) in (repo / ".git" / "hooks" / "pre-push").read_text()
    (repo / "README.md").write_text("# model\n")
    commit(repo, env, "a card")
    assert push(repo, env).returncode != 0
