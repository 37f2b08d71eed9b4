"""`hfdoctor hook install`: a git pre-push hook that runs `hfdoctor check`."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

MARKER = "# hfdoctor pre-push hook"


class HookError(Exception):
    pass


def hooks_dir(repo: Path) -> Path:
    """The repository's hooks directory, honouring core.hooksPath."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--git-path", "hooks"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise HookError(f"{repo} is not a git repository (or git is not installed)") from None
    path = Path(out)
    return path if path.is_absolute() else (repo / path)


def hook_script(fail_on: str) -> str:
    python = shlex.quote(sys.executable)
    return f"""#!/bin/sh
{MARKER} (written by `hfdoctor hook install`; remove this file to uninstall)
# Checks the checkout before every push; the push stops when findings at or above
# --fail-on {fail_on} remain. Bypass once with `git push --no-verify`.
top=$(git rev-parse --show-toplevel) || exit 1
if command -v hfdoctor >/dev/null 2>&1; then
  exec hfdoctor check --fail-on {fail_on} "$top"
fi
exec {python} -m hfdoctor check --fail-on {fail_on} "$top"
"""


def install_pre_push(repo: Path, force: bool = False, fail_on: str = "error") -> Path:
    directory = hooks_dir(repo)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pre-push"
    if path.exists() and not force:
        existing = path.read_text(errors="replace")
        if MARKER not in existing:
            raise HookError(f"{path} exists and was not written by hfdoctor; use --force to replace it")
    tmp = path.with_name(".pre-push.hfdoctor.tmp")
    tmp.write_text(hook_script(fail_on))
    tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(tmp, path)
    return path
