"""What the hook tests share: a git with a HOME of its own (no user or system configuration, an
identity, `main` as the first branch) running this checkout's hfdoctor, and the two commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def isolated_git_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    environ = {**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", **extra,
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    environ.pop("GIT_CONFIG_GLOBAL", None)
    for key, value in (("user.email", "t@example.com"), ("user.name", "t"), ("init.defaultBranch", "main")):
        git(tmp_path, environ, "config", "--global", key, value)
    return environ


def git(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True, timeout=300)


def hfdoctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hfdoctor", *args], env=env, capture_output=True, text=True,
                          timeout=300)
