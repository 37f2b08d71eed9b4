"""`hfdoctor hook install`: a git pre-push hook that runs `hfdoctor check`."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

from hfdoctor.programs import ProgramMissing, run_git

MARKER = "# hfdoctor pre-push hook"


class HookError(Exception):
    pass


def hooks_dir(repo: Path) -> Path:
    """The repository's hooks directory, honouring core.hooksPath."""
    try:
        done = run_git(repo, "rev-parse", "--git-path", "hooks", timeout=30, read=("core.hooksPath",))
    except (OSError, subprocess.SubprocessError, ProgramMissing):
        raise HookError(f"{repo} is not a git repository (or git is not installed)") from None
    if done.returncode != 0:
        raise HookError(f"{repo} is not a git repository (or git is not installed)")
    out = done.stdout.decode("utf-8", "surrogateescape").strip()
    path = Path(out)
    return path if path.is_absolute() else (repo / path)


def hook_script(fail_on: str) -> str:
    python = shlex.quote(sys.executable)
    return f"""#!/bin/sh
{MARKER} (written by `hfdoctor hook install`; remove this file to uninstall)
# Checks what each pushed ref carries (git gives "<local ref> <local sha> <remote ref> <remote sha>"
# on stdin), not the working tree: uncommitted edits neither hide a broken push nor block a
# good one. Every rule judges the pushed tip (what gets served); the blob rules (plain blobs
# over 10 MiB, pickles that import code) also judge every blob the pushed commits add
# (remote sha..local sha; for a new branch, every commit no remote has), each blob once.
# The push stops when findings at or above --fail-on {fail_on} remain (exit 1) or hfdoctor
# cannot check (exit 2). Bypass once with `git push --no-verify`.
top=$(git rev-parse --show-toplevel) || exit 1
if command -v hfdoctor >/dev/null 2>&1; then
  run() {{ hfdoctor "$@"; }}
else
  run() {{ {python} -m hfdoctor "$@"; }}
fi
status=0
while read -r local_ref local_sha remote_ref remote_sha; do
  case "$local_sha" in
    *[!0]*) ;;          # a commit to push
    *) continue ;;      # a deleted ref: nothing to check
  esac
  echo "hfdoctor: checking $local_ref ($local_sha)" >&2
  run check --fail-on {fail_on} --git-rev "$local_sha" --git-since "$remote_sha" "$top"
  code=$?
  if [ "$code" -gt "$status" ]; then status=$code; fi
done
exit $status
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
