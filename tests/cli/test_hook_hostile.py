"""An attacker's pass over the pre-push hook (issue 40): each test is a push that got past it.

- a push to a second remote (a fork) skipped the commits another remote already had;
- a payload stored in git-lfs, added and removed again, was uploaded by git-lfs (its pointer was
  skipped as "not in the push");
- a pickle of an earlier commit that hfdoctor could not prove safe was silent;
- in a push of 10,001 commits the oldest, holding the payload, was never judged;
- with an empty entry in PATH (the work tree), the hook ran the repository's own `./hfdoctor`, and
  Python's `-m hfdoctor` imported the repository's `hfdoctor/` package;
- without git-lfs on PATH, an LFS rule in a nested .gitattributes let the push send pointers
  without their objects.

Pushes go through real git (and git-lfs where a test needs it) to bare remotes; the checks that
the hook runs are also run alone under the audit hook (tests/audit_run.py).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, TESTS, UPSTREAM
from hfdoctor.cli import hook

AUDIT_RUN = TESTS / "audit_run.py"
CLEAN = UPSTREAM / "Qwen--Qwen2.5-7B-Instruct"  # checks clean: only what a test adds blocks a push
HAS_LFS = shutil.which("git-lfs") is not None


class Payload:
    """Unpickling this runs os.system (never unpickled here)."""

    def __reduce__(self):
        return (os.system, ("echo pwned",))


PAYLOAD = pickle.dumps(Payload(), protocol=2)
# A FRAME that runs 38 bytes past its STOP: a loader reading frames whole starts the next pickle elsewhere.
UNPROVEN = b"\x80\x04\x95" + struct.pack("<Q", 40) + b"N." + b"x" * 38


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    environ = {**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
               "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@t",
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    environ.pop("GIT_CONFIG_GLOBAL", None)
    git(tmp_path, environ, "config", "--global", "init.defaultBranch", "main")
    return environ


def git(cwd: Path, env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=check, capture_output=True, text=True, timeout=300)


def model_repo(tmp_path: Path, env: dict[str, str], *remotes: str) -> Path:
    repo = tmp_path / "model"
    shutil.copytree(CLEAN, repo)
    git(repo, env, "init", "-q")
    for name in remotes:
        git(tmp_path, env, "init", "-q", "--bare", str(tmp_path / f"{name}.git"))
        git(repo, env, "remote", "add", name, str(tmp_path / f"{name}.git"))
    commit_all(repo, env, "upstream files")
    return repo


def commit_all(repo: Path, env: dict[str, str], message: str) -> str:
    git(repo, env, "add", "-A")
    git(repo, env, "commit", "-qm", message)
    return git(repo, env, "rev-parse", "HEAD").stdout.strip()


def add_then_remove(repo: Path, env: dict[str, str], name: str, data: bytes) -> str:
    (repo / name).write_bytes(data)
    added = commit_all(repo, env, f"add {name}")
    (repo / name).unlink()
    commit_all(repo, env, f"remove {name}")
    return added


def install(repo: Path, env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "hfdoctor", "hook", "install", "--repo", str(repo)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def audited_check(repo: Path, env: dict[str, str], log: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, str(AUDIT_RUN), str(log), "--", "check", *args, "--format", "json",
                           str(repo)], cwd=repo, env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    for event in events:  # a check writes nothing and goes nowhere
        assert event["event"] not in ("socket.connect", "os.remove", "os.rename", "os.symlink"), event
        if event["event"] == "open-write":
            assert event["args"][0] == os.devnull, event
        if event["event"] == "peak-rss":
            assert event["bytes"] < 1 << 30, event
    return proc, json.loads(proc.stdout)


def history_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == "unsafe-pickle-in-history"]


def test_a_push_to_a_second_remote_judges_what_that_remote_does_not_have(tmp_path, env):
    """origin already has a payload commit (pushed before the hook, or origin is someone else's
    repository): a push to the empty fork sends it, so the fork's push must be judged on it."""
    repo = model_repo(tmp_path, env, "origin", "fork")
    added = add_then_remove(repo, env, "optimizer.pt", PAYLOAD)
    git(repo, env, "push", "-q", "--no-verify", "origin", "main")
    install(repo, env)
    pushed = git(repo, env, "push", "fork", "main", check=False)
    assert pushed.returncode != 0, pushed.stdout + pushed.stderr
    assert "unsafe-pickle-in-history" in pushed.stdout and added[:12] in pushed.stdout
    assert git(tmp_path / "fork.git", env, "for-each-ref").stdout == ""
    # The same push to origin, which has every commit, carries nothing new: it passes.
    assert git(repo, env, "push", "origin", "main", check=False).returncode == 0


def test_a_pickle_not_proven_safe_in_history_is_an_error(tmp_path, env):
    repo = model_repo(tmp_path, env, "origin")
    git(repo, env, "push", "-q", "--no-verify", "origin", "main")
    since = git(repo, env, "rev-parse", "HEAD").stdout.strip()
    added = add_then_remove(repo, env, "frame.pkl", UNPROVEN)
    # A pickle whose bytes the loader refuses too (cut in the middle of BINBYTES8): a warning, as at the tip.
    add_then_remove(repo, env, "cut.pkl", b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b"abc")
    proc, report = audited_check(repo, env, tmp_path / "audit.log", "--git-rev", "HEAD", "--git-since", since)
    by_file = {f["file"]: f for f in history_findings(report)}
    assert by_file["frame.pkl"]["severity"] == "error" and proc.returncode == 1
    assert "not proven safe" in by_file["frame.pkl"]["message"] and added[:12] in by_file["frame.pkl"]["message"]
    assert by_file["cut.pkl"]["severity"] == "warning" and "could not be fully scanned" in by_file["cut.pkl"]["message"]


TRAINER = TESTS / "corpus" / "adapters" / "folders" / "Dheena731__tinyLlama-finetune"


def test_published_training_pickles_in_history_are_not_flagged(tmp_path, env):
    """What the Trainer writes, as published (training_args.bin, rng_state.pth, scaler.pt,
    scheduler.pt), added in one commit and removed in the next: nothing in them runs code, and
    each is read to its end, so history is as quiet as the tip (SEC004 is info, not history's)."""
    repo = model_repo(tmp_path, env, "origin")
    git(repo, env, "push", "-q", "--no-verify", "origin", "main")
    since = git(repo, env, "rev-parse", "HEAD").stdout.strip()
    names = ("training_args.bin", "rng_state.pth", "scaler.pt", "scheduler.pt")
    for name in names:
        shutil.copy(TRAINER / name, repo / name)
    commit_all(repo, env, "trainer state")
    for name in names:
        (repo / name).unlink()
    commit_all(repo, env, "without it")
    proc, report = audited_check(repo, env, tmp_path / "audit.log", "--git-rev", "HEAD", "--git-since", since,
                                 "--git-remote", "origin")
    assert history_findings(report) == [] and proc.returncode == 0, report["findings"]


def fast_import(repo: Path, env: dict[str, str], commits: int) -> None:
    """`commits` commits on main, made at once: the first adds optimizer.pt (the payload) beside
    config.json, the second removes it, the others change notes.txt."""
    config = json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}).encode()
    parts = [b"blob\nmark :1\ndata %d\n%s\n" % (len(PAYLOAD), PAYLOAD),
             b"blob\nmark :2\ndata %d\n%s\n" % (len(config), config)]
    for i in range(commits):
        parts.append(b"commit refs/heads/main\ncommitter t <t@t> %d +0000\ndata 4\nc%03d\n" % (1_700_000_000 + i, i % 1000))
        if i == 0:
            parts.append(b"M 100644 :1 optimizer.pt\nM 100644 :2 config.json\n")
        elif i == 1:
            parts.append(b"D optimizer.pt\n")
        else:
            note = b"%d\n" % i
            parts.append(b"M 100644 inline notes.txt\ndata %d\n%s\n" % (len(note), note))
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, env=env, input=b"".join(parts), check=True,
                   capture_output=True, timeout=300)


def test_the_oldest_of_10001_pushed_commits_is_judged(tmp_path, env):
    repo = tmp_path / "many"
    repo.mkdir()
    git(repo, env, "init", "-q")
    fast_import(repo, env, 10_001)
    proc, report = audited_check(repo, env, tmp_path / "audit.log", "--git-rev", "main", "--git-since", "0" * 40,
                                 "--select", "unsafe-pickle-in-history")
    first = git(repo, env, "rev-list", "--max-parents=0", "main").stdout.strip()
    [finding] = history_findings(report)
    assert finding["file"] == "optimizer.pt" and first[:12] in finding["message"] and proc.returncode == 1


@pytest.mark.skipif(not HAS_LFS, reason="git-lfs is not installed (apt-get install git-lfs)")
def test_a_payload_stored_in_lfs_in_history_blocks_the_push_and_is_not_uploaded(tmp_path, env):
    git(tmp_path, env, "lfs", "install", "--skip-repo")
    repo = model_repo(tmp_path, env, "origin")
    git(repo, env, "lfs", "install", "--local")
    git(repo, env, "push", "-q", "--no-verify", "origin", "main")
    (repo / ".gitattributes").write_text("*.pkl filter=lfs diff=lfs merge=lfs -text\n")
    commit_all(repo, env, "route pickles through git-lfs")
    added = add_then_remove(repo, env, "model.pkl", PAYLOAD)
    assert "model.pkl" in git(repo, env, "lfs", "ls-files", "--all").stdout  # the payload is an LFS object
    install(repo, env)
    pushed = git(repo, env, "push", "origin", "main", check=False)
    assert pushed.returncode != 0, pushed.stdout + pushed.stderr
    assert "unsafe-pickle-in-history" in pushed.stdout and added[:12] in pushed.stdout
    remote_objects = tmp_path / "origin.git" / "lfs" / "objects"
    assert not remote_objects.exists() or not [p for p in remote_objects.rglob("*") if p.is_file()]


# --- the hook script itself ------------------------------------------------------------------------


def tools_without(tmp_path: Path, *missing: str) -> str:
    """A folder of the programs the hook calls, as PATH, without `missing` (and never hfdoctor)."""
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    for name in ("git", "sh", "mktemp", "cat", "rm", "grep", "head"):
        found = shutil.which(name)
        if found and name not in missing:
            (tools / name).symlink_to(found)
    return str(tools)


@pytest.mark.parametrize("planted", ["script", "package"])
def test_an_empty_path_entry_never_runs_the_repositorys_own_hfdoctor(tmp_path, env, planted):
    repo = model_repo(tmp_path, env)
    marker = tmp_path / "ran"
    if planted == "script":
        (repo / "hfdoctor").write_text(f"#!/bin/sh\necho ran >{marker}\nexit 0\n")  # a builtin: PATH has no touch
        (repo / "hfdoctor").chmod(0o755)
    else:
        (repo / "hfdoctor").mkdir()
        (repo / "hfdoctor" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
        (repo / "hfdoctor" / "__main__.py").write_text("")
    commit_all(repo, env, "a hostile file")
    install(repo, env)
    sha = git(repo, env, "rev-parse", "HEAD").stdout.strip()
    hook_env = {**env, "PATH": tools_without(tmp_path) + "::"}  # an empty entry: the work tree, where git runs hooks
    done = subprocess.run([str(repo / ".git" / "hooks" / "pre-push")], cwd=repo, env=hook_env, capture_output=True,
                          text=True, input=f"refs/heads/main {sha} refs/heads/main {'0' * 40}\n", timeout=240)
    assert not marker.exists(), "the repository's own hfdoctor ran"
    assert "hfdoctor: checking refs/heads/main" in done.stderr and done.returncode in (0, 1), done.stderr[-2000:]


def test_the_hook_runs_the_python_it_was_installed_from(tmp_path):
    script = hook.hook_script("error", python="/opt/some python/bin/python3")
    assert "python='/opt/some python/bin/python3'" in script and "command -v hfdoctor" not in script


def test_no_git_lfs_and_an_lfs_rule_in_a_nested_gitattributes_refuses_the_push(tmp_path, env):
    repo = model_repo(tmp_path, env, "origin")
    install(repo, env)
    hook_env = {**env, "PATH": tools_without(tmp_path, "git-lfs")}

    def pre_push(sha: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(repo / ".git" / "hooks" / "pre-push"), "origin", str(tmp_path / "origin.git")],
                              cwd=repo, env=hook_env, capture_output=True, text=True, timeout=240,
                              input=f"refs/heads/main {sha} refs/heads/main {'0' * 40}\n")

    clean = pre_push(git(repo, env, "rev-parse", "HEAD").stdout.strip())
    assert clean.returncode == 0, clean.stderr[-2000:]  # nothing routed through git-lfs: nothing to refuse
    (repo / "data").mkdir()
    (repo / "data" / ".gitattributes").write_text("*.parquet filter=lfs diff=lfs merge=lfs -text\n")
    oid = "a" * 64
    (repo / "data" / "train.parquet").write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\n"
                                                "size 123456789\n")  # a pointer, as a clone with git-lfs holds it
    done = pre_push(commit_all(repo, env, "data through git-lfs"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "git-lfs is not on PATH" in done.stderr and "pointers without their objects" in done.stderr


def test_no_git_lfs_and_an_lfs_rule_in_a_gitattributes_holding_a_nul_refuses_the_push(tmp_path, env):
    """git reads a .gitattributes that holds a NUL byte line by line as ever (its LFS rule applies),
    but `git grep -I` takes such a file for binary and skips it: the push of pointers without their
    objects passed."""
    repo = model_repo(tmp_path, env, "origin")
    install(repo, env)
    hook_env = {**env, "PATH": tools_without(tmp_path, "git-lfs")}
    (repo / "data").mkdir()
    (repo / "data" / ".gitattributes").write_bytes(b"\0\n*.parquet filter=lfs diff=lfs merge=lfs -text\n")
    assert "filter: lfs" in git(repo, env, "check-attr", "filter", "--", "data/train.parquet").stdout
    (repo / "data" / "train.parquet").write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{'a' * 64}\n"
                                                "size 123456789\n")
    sha = commit_all(repo, env, "data through git-lfs")
    done = subprocess.run([str(repo / ".git" / "hooks" / "pre-push"), "origin", str(tmp_path / "origin.git")],
                          cwd=repo, env=hook_env, capture_output=True, text=True, timeout=240,
                          input=f"refs/heads/main {sha} refs/heads/main {'0' * 40}\n")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "git-lfs is not on PATH" in done.stderr
