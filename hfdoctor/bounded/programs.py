"""The programs hfdoctor runs (git, node), and how: nothing the checked repository ships or configures.

A repository under check is hostile until proven otherwise, and `hfdoctor check .` runs
with the repository as its working directory (the pre-push hook, pre-commit, CI). So:

- a program is looked up only in the absolute directories of PATH, never in a relative
  entry (`.`, `bin`), never inside the repository being checked, and never in the working
  directory;
- git runs with no system or global configuration, without a terminal prompt, and with
  every setting that makes git run a command switched off on its command line (which wins
  over the repository's own .git/config): core.fsmonitor, core.hooksPath, the transports
  a lazy fetch of a partial clone would use, and no filters or textconv are ever asked
  for (cat-file without --filters or --textconv applies neither).

Nothing here imports the rest of hfdoctor.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Settings a repository's .git/config could use to make a read-only git command run a
# program, each overridden on the command line. protocol.allow=never stops every transport,
# so the lazy fetch of a partial clone (`remote.origin.url = ext::sh -c ...`) cannot start.
GIT_HARDENING = (
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.untrackedCache=false",
    "-c", "protocol.allow=never",
    "-c", "core.sshCommand=false",
    "-c", "core.askPass=false",
    "-c", "credential.helper=",
    "-c", "core.pager=cat",
)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def find_program(name: str, forbidden: list[str | os.PathLike[str]] = ()) -> str | None:
    """The absolute path of `name` on PATH, skipping relative PATH entries and any entry
    inside a `forbidden` directory (the repository being checked) or the working directory."""
    roots = [Path(os.path.realpath(p)) for p in (*forbidden, os.getcwd())]
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        real_dir = Path(os.path.realpath(entry))
        if any(_inside(real_dir, root) for root in roots):
            continue
        candidate = real_dir / name
        if _is_program(candidate):
            real = Path(os.path.realpath(candidate))
            if not any(_inside(real, root) for root in roots):
                return str(candidate)
    return None


def _is_program(path: Path) -> bool:
    """An executable file; False where it cannot be looked at (a PATH entry inside an
    unreadable $HOME raises PermissionError from stat)."""
    try:
        return path.is_file() and os.access(path, os.X_OK)
    except OSError:
        return False


def hardened_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a program hfdoctor starts: PATH without relative entries, no
    git configuration beyond the repository's (whose dangerous settings are overridden),
    a locale that keeps messages readable, and nothing else of the caller's environment
    (no GIT_DIR, GIT_EXEC_PATH or NODE_OPTIONS that would point elsewhere)."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and os.path.isabs(p))
    env = {
        "PATH": path,
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",  # read-only commands never write the index
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_PROTOCOL_FROM_USER": "0",
    }
    if os.environ.get("HOME"):
        env["HOME"] = os.environ["HOME"]  # the user's own files (git's XDG attributes), never the repository's
    env.update(extra or {})
    return env


class ProgramMissing(Exception):
    pass


def git_command(*args: str, forbidden: list[str | os.PathLike[str]] = (), read: tuple[str, ...] = ()) -> list[str]:
    """argv for a hardened `git ARGS`; ProgramMissing when there is no trusted git. `read`
    names settings the command is asked to report as the repository has them (the hook
    installer asks where core.hooksPath points): those are left as they are."""
    git = find_program("git", forbidden)
    if git is None:
        raise ProgramMissing("git is not installed (or only inside the repository, which hfdoctor never runs)")
    pairs = [GIT_HARDENING[i:i + 2] for i in range(0, len(GIT_HARDENING), 2)]
    kept = [part for pair in pairs if pair[1].split("=", 1)[0] not in read for part in pair]
    return [git, *kept, *args]


def run_git(cwd: str | os.PathLike[str], *args: str, timeout: float = 60, stdin: bytes | None = None,
            forbidden: list[str | os.PathLike[str]] = (), read: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`git ARGS` in `cwd`, hardened, output captured (raises ProgramMissing, TimeoutExpired)."""
    return subprocess.run(git_command(*args, forbidden=[cwd, *forbidden], read=read), cwd=cwd, capture_output=True,
                          timeout=timeout, check=False, env=hardened_env(), input=stdin)


def global_git_config(key: str) -> str | None:
    """A value of the user's own (global) git configuration, read by git outside any
    repository: the repository under check has no say in it."""
    git = find_program("git")
    if git is None:
        return None
    env = hardened_env({"GIT_CEILING_DIRECTORIES": os.path.abspath(os.sep)})
    del env["GIT_CONFIG_GLOBAL"]
    try:
        done = subprocess.run([git, "config", "--global", "--get", key], cwd=os.path.abspath(os.sep),
                              capture_output=True, timeout=10, env=env, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "replace").strip() or None
