"""`hfdoctor hook install|uninstall`: a git pre-push hook that runs `hfdoctor check`, beside
whatever pre-push hook was there (git-lfs's, pre-commit's).

Every Hugging Face model repository uses git-lfs, and `git lfs install` writes its own
`pre-push` hook: the one that uploads the LFS objects before git sends the commits. Replacing
it pushes pointers and silently breaks the model on the remote, so hfdoctor never replaces
a hook. It moves the existing hook aside (byte for byte, mode kept) to `pre-push.hfdoctor-chained`
and runs it after its own verdict, with the same arguments and the same standard input:
a push that hfdoctor blocks uploads nothing, and a push it lets through uploads as before.
When git-lfs is set up after hfdoctor (`git lfs install` then says "Hook already exists" and
writes nothing), the hook runs `git lfs pre-push` itself wherever the repository is configured
for LFS; without git-lfs on PATH, a push whose commits route files through git-lfs (a
.gitattributes at any depth) is refused, since nothing would upload their objects. `hook
uninstall` puts the chained hook back.

The hook starts hfdoctor with the Python it was installed from, by absolute path, and looks
programs up in PATH's absolute entries only: git runs hooks in the work tree, where an empty
PATH entry, or Python's own `sys.path[0] = ''`, would find the repository's `./hfdoctor` first.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

from hfdoctor.bounded.programs import ProgramMissing, global_git_config, run_git

MARKER = "# hfdoctor pre-push hook"
# Git runs a hook only by its exact name, so the hook kept aside is inert until ours runs it.
CHAINED_NAME = "pre-push.hfdoctor-chained"
BYPASS_LINE = "hfdoctor: push blocked. To push once without the check: git push --no-verify"


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


# How the hook starts hfdoctor: the Python it was installed from, by absolute path, and its
# hfdoctor package, never a `./hfdoctor` or `hfdoctor/` of the repository being pushed (git runs
# the hook in the work tree: an empty PATH entry, or Python's own sys.path[0] = '' of -c and -m,
# would find the repository's first).
LAUNCH = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
          "from hfdoctor.cli import main; main()")


def hook_script(fail_on: str | None = None, check_args: tuple[str, ...] = (), python: str | None = None) -> str:
    """The hook's text. `fail_on` and `check_args` (--select, --ignore, --config: what `hook
    install` was given) are stored in it, quoted; without them `check` reads the repository's
    configuration file as it does for a directory. `python`: the interpreter that runs hfdoctor
    (this one)."""
    python = shlex.quote(python or sys.executable)
    stored = " ".join(shlex.quote(a) for a in ((("--fail-on", fail_on) if fail_on else ()) + tuple(check_args)))
    verdict = f"--fail-on {fail_on}" if fail_on else "the configuration's fail-on (else error)"
    return f"""#!/bin/sh
{MARKER} (written by `hfdoctor hook install`; `hfdoctor hook uninstall` restores what was here)
# Checks what each pushed ref carries (git gives "<local ref> <local sha> <remote ref> <remote sha>"
# on stdin), not the working tree: uncommitted edits neither hide a broken push nor block a
# good one. Every rule judges the pushed tip (what gets served); the blob rules (plain blobs
# over 10 MiB, pickles that import code or are not proven safe, LFS objects git-lfs would
# upload) also judge every blob the push sends (what the remote pushed to, $1, does not have
# by its ref and its tracking refs), each blob once.
# The push stops when findings at or above {verdict} remain (exit 1) or hfdoctor
# cannot check (exit 2), before anything is uploaded. Bypass once with `git push --no-verify`.
#
# Then the pre-push hook that was here before (git-lfs's, pre-commit's), kept as
# {CHAINED_NAME}, runs with the same arguments and input; without one, `git lfs pre-push`
# runs wherever the repository is set up for git-lfs, so LFS objects are uploaded as before.
# Programs are looked up in the absolute PATH entries only (an empty entry is the work tree).
path=
IFS=:
set -f
for dir in $PATH; do
  case "$dir" in /*) path="${{path:+$path:}}$dir" ;; esac
done
set +f
unset IFS
PATH=$path
export PATH
python={python}
if [ ! -x "$python" ]; then
  echo "hfdoctor: the Python this hook was installed with ($python) is gone: run hfdoctor hook install again" >&2
  exit 2
fi
run() {{ "$python" -c "{LAUNCH}" "$@"; }}
top=$(git rev-parse --show-toplevel) || exit 1
hooks=$(git rev-parse --git-path hooks) || exit 1
refs=$(mktemp "${{TMPDIR:-/tmp}}/hfdoctor-pre-push.XXXXXX") || exit 1
trap 'rm -f "$refs"' EXIT
cat >"$refs"
status=0
pushed=
while read -r local_ref local_sha remote_ref remote_sha; do
  case "$local_sha" in
    *[!0]*) ;;          # a commit to push
    *) continue ;;      # a deleted ref: nothing to check
  esac
  pushed="$pushed $local_sha"
  echo "hfdoctor: checking $local_ref ($local_sha)" >&2
  run check {stored + " " if stored else ""}--git-rev "$local_sha" --git-since "$remote_sha" --git-remote="${{1:-}}" "$top" </dev/null
  code=$?
  if [ "$code" -gt "$status" ]; then status=$code; fi
done <"$refs"
if [ "$status" -ne 0 ]; then
  echo "{BYPASS_LINE}" >&2
  exit $status
fi
if [ -x "$hooks/{CHAINED_NAME}" ]; then
  "$hooks/{CHAINED_NAME}" "$@" <"$refs"
  exit $?
fi
if [ "$#" -lt 1 ]; then
  exit 0                # not run by git push (no remote named): nothing to upload
fi
if command -v git-lfs >/dev/null 2>&1; then
  if git config --get filter.lfs.process >/dev/null 2>&1 || git config --get filter.lfs.clean >/dev/null 2>&1; then
    git lfs pre-push "$@" <"$refs"
    exit $?
  fi
  exit 0
fi
# No git-lfs: a pushed commit whose .gitattributes (at any depth) routes files through git-lfs
# holds pointers whose objects nothing would upload. Each is read as text (-a): git applies the
# rules of one that holds a NUL byte, which grep -I would skip as binary. The work tree's .gitattributes is read as
# a plain file only, its first MiB (a symlink to /dev/zero or a FIFO would never end; git itself
# ignores a symlinked .gitattributes).
routed=
for sha in $pushed; do
  if git grep -q -a -F -e 'filter=lfs' "$sha" -- '.gitattributes' ':(glob)**/.gitattributes' 2>/dev/null; then
    routed="a .gitattributes of commit $sha"
  fi
done
if [ -z "$routed" ] && [ -f "$top/.gitattributes" ] && [ ! -h "$top/.gitattributes" ] &&
   head -c 1048576 "$top/.gitattributes" | grep -qs 'filter=lfs'; then
  routed=.gitattributes
fi
if [ -n "$routed" ]; then
  echo "hfdoctor: $routed routes files through git-lfs, but git-lfs is not on PATH: the remote would get pointers without their objects. Install git-lfs (and run git lfs install), then push again" >&2
  exit 2
fi
exit 0
"""


def _is_ours(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return MARKER.encode() in handle.read(4096)
    except OSError:
        return False


def _write_executable(path: Path, text: str) -> None:
    tmp = path.with_name(".pre-push.hfdoctor.tmp")
    # The hooks folder may be one the repository tracks (core.hooksPath=.githooks): whatever it
    # planted under the temporary name (a symlink to the user's files) is removed, never written through.
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o755)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(tmp, path)


def _same_bytes(a: Path, b: Path) -> bool:
    """Two regular files (no symlinks: a hooks folder the repository tracks could hold one to
    /dev/zero) with the same bytes; each is read only once their sizes agree."""
    try:
        if a.is_symlink() or b.is_symlink() or not (a.is_file() and b.is_file()):
            return False
        if a.stat().st_size != b.stat().st_size:
            return False
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def install_pre_push(repo: Path, fail_on: str | None = None, check_args: tuple[str, ...] = ()
                     ) -> tuple[Path, Path | None]:
    """Write hfdoctor's pre-push hook; a pre-push hook that was there (not hfdoctor's) is kept
    as CHAINED_NAME and run after hfdoctor's verdict. Returns (hook, chained hook or None)."""
    directory = hooks_dir(repo)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pre-push"
    chained = directory / CHAINED_NAME
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise HookError(f"{path} is not a regular file; move it away and install again")
    if path.exists() and not _is_ours(path):
        if chained.exists() and not _same_bytes(path, chained):
            raise HookError(f"{path} is not hfdoctor's and {chained.name} already holds another hook; "
                            f"merge them by hand (or remove one) and install again")
        os.replace(path, chained)  # a rename: bytes and mode exactly as they were
    _write_executable(path, hook_script(fail_on, check_args))
    return path, (chained if chained.exists() else None)


def uninstall_pre_push(repo: Path) -> tuple[Path, Path | None]:
    """Remove hfdoctor's pre-push hook and put back the one it chained, if any. Returns
    (hook path, the restored hook's former path or None)."""
    directory = hooks_dir(repo)
    path = directory / "pre-push"
    chained = directory / CHAINED_NAME
    if path.exists() and not _is_ours(path):
        raise HookError(f"{path} was not written by hfdoctor; nothing to uninstall")
    if not path.exists() and not chained.exists():
        raise HookError(f"no hfdoctor pre-push hook in {directory}")
    if chained.exists():
        os.replace(chained, path)
        return path, chained
    path.unlink()
    return path, None


def lfs_advice(repo: Path, chained: Path | None) -> str:
    """One line for `hook install` on what runs after hfdoctor's verdict."""
    if chained is not None:
        return (f"kept the pre-push hook that was there as {chained.name}: it runs after hfdoctor's check "
                f"passes (git-lfs uploads its objects then); `hfdoctor hook uninstall` puts it back")
    try:
        local = run_git(repo, "config", "--get", "filter.lfs.process", timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError, ProgramMissing):
        local = False
    if local or global_git_config("filter.lfs.process"):
        return "git-lfs: its objects are uploaded (`git lfs pre-push`) after hfdoctor's check passes"
    return ("git-lfs: a later `git lfs install` says \"Hook already exists: pre-push\" and writes no hook; "
            "nothing to do: hfdoctor's hook runs `git lfs pre-push` once git-lfs is set up")
