"""Configuration: what a check depends on (Options), and the file that sets it, found as ruff finds its own.

`Options` is everything one check of one target depends on: what the command line said, and
how to find the configuration file. The CLI, the survey, the hook and the webhook build one;
`hfdoctor.lint.check.check_target` reads the file for each target and merges the two
(`merged_fail_on`, `merged_upstream`, hfdoctor.lint.configured for the rules).

The file (ruff's discovery): for a directory, `.hfdoctor.toml` (top-level keys) or
`pyproject.toml` (`[tool.hfdoctor]`) in that directory, else in the nearest parent that has
one; a pyproject.toml without `[tool.hfdoctor]` is passed over. For a Hub repository, its own
`.hfdoctor.toml` at the revision checked, else the nearest one from the current directory
upwards. `--config FILE` names the file for every target; `--isolated` reads none. Command-line
options win over the file.

A file at the target's own root is the repository's own, and a repository is untrusted input:
it is read through the source (bounded, never through a link that leaves the repository), its
paths (upstream roots, the baseline) must stay inside the repository, and it cannot switch
off, lower or baseline the rules that protect whoever loads the repository (`Settings.trusted`
is False; hfdoctor.lint.configured.PROTECTED). A file above the target, or named by
--config, is the user's own.

Keys and values are checked here (an unknown key or a wrong type is a ConfigError: exit 2);
rule selectors and engine names are checked against the registry by hfdoctor.lint.configured.
Nothing here imports the rest of hfdoctor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from hfdoctor.bounded.budget import NotReadable, read_regular_file

CONFIG_NAME = ".hfdoctor.toml"
PYPROJECT = "pyproject.toml"
# A configuration is a few hundred bytes; a pyproject.toml a few KiB.
MAX_CONFIG_BYTES = 1024 * 1024
MAX_ITEMS = 1000  # entries of one list or table
MAX_TEXT = 1000  # characters of one string
SEVERITY_NAMES = ("error", "warning", "info")
# Key -> what its value is; the file's own spelling (kebab-case, as ruff's).
LISTS = ("select", "ignore", "extend-select", "extend-ignore", "engines", "upstream")
TABLES = ("per-file-ignores", "severity")
TEXTS = ("fail-on", "baseline")
KEYS = LISTS + TABLES + TEXTS


class ConfigError(Exception):
    """A configuration file that cannot be used (unreadable, not TOML, an unknown key, a wrong
    type, a path that leaves the repository): its message names the file; exit 2."""


class RepositoryConfigError(ConfigError):
    """The checked repository's own file (or the baseline it names) cannot be used. It is the
    repository's text, not the user's: a caller that reports on the repository to others (the
    webhook runner) checks it without the file rather than not at all."""


@dataclass(frozen=True)
class Settings:
    """What one configuration file says, its keys checked and its paths resolved."""

    origin: str  # how messages name the file
    trusted: bool  # False: the checked repository's own file (see the module's doc)
    select: tuple[str, ...] | None = None  # None: the file does not say
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    extend_ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (glob, selectors), in file order
    severity: tuple[tuple[str, str], ...] = ()  # (selector, error|warning|info), in file order
    engines: tuple[str, ...] | None = None  # None: found from the repository (hfdoctor.compat.targets)
    upstream: tuple[str, ...] = ()  # directories on this disk, absolute
    fail_on: str | None = None
    # The baseline: an absolute path on this disk (trusted files), or a path inside the
    # repository, read through its source (the repository's own file).
    baseline: str | None = None


@dataclass(frozen=True)
class Options:
    """Everything a check of one target depends on (picklable: it crosses process boundaries).

    select/ignore/upstream_dirs/fail_on are the command line's; the configuration file's are
    merged in for each target (the command line wins)."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    upstream_dirs: tuple[str, ...] = ()
    revision: str | None = None
    git_rev: str | None = None
    cache: bool = False
    timeout_s: float = 120.0
    env_upstream: bool = True  # also read HFDOCTOR_UPSTREAM
    git_since: str | None = None  # --git-since: blob rules see every commit after it (pre-push)
    git_remote: str | None = None  # --git-remote: the remote pushed to (pre-push)
    fail_on: str | None = None  # None: the file's, else error
    settings: Settings | None = None  # --config: this file for every target, none discovered
    isolated: bool = False  # --isolated: no configuration file at all
    baseline: str | None = None  # --baseline FILE: replaces the file's
    use_baseline: bool = True  # False: no baseline, not even the file's (--write-baseline)


def merged_fail_on(options: Options, settings: Settings | None) -> str:
    return options.fail_on or (settings.fail_on if settings is not None else None) or "error"


def merged_upstream(options: Options, settings: Settings | None) -> tuple[str, ...]:
    """The command line's upstream roots first (consulted first), then the file's."""
    return tuple(options.upstream_dirs) + (settings.upstream if settings is not None else ())


# --- reading -------------------------------------------------------------------------------


def settings_from_bytes(data: bytes, origin: str, *, pyproject: bool, trusted: bool, base: Path | None,
                        inside: Path | None = None) -> Settings | None:
    """Parse a configuration file's bytes; None for a pyproject.toml without [tool.hfdoctor].

    `base`: the directory relative paths start from (None: the file is not on this disk, a Hub
    repository's, which can name no directory here). `inside`: where those paths must stay
    (the repository, for its own file)."""
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{origin}: {len(data):,} bytes, more than the {MAX_CONFIG_BYTES:,} hfdoctor reads")
    tomllib = _toml()
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{origin}: not UTF-8 text") from None
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as err:
        raise ConfigError(f"{origin}: not valid TOML: {str(err)[:200]}") from None
    if pyproject:
        tool = document.get("tool")
        if not isinstance(tool, dict) or "hfdoctor" not in tool:
            return None
        table, where = tool["hfdoctor"], "[tool.hfdoctor]"
        if not isinstance(table, dict):
            raise ConfigError(f"{origin}: {where} must be a table")
    else:
        table, where = document, ""
    return _settings(table, origin, where, trusted=trusted, base=base, inside=inside)


def _toml():
    """tomllib (Python 3.11+) or tomli, imported when a file is found: a check without one pays nothing."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib


def _settings(table: dict[str, Any], origin: str, where: str, *, trusted: bool, base: Path | None,
              inside: Path | None) -> Settings:
    def key_error(key: str, problem: str) -> ConfigError:
        prefix = f"{where}." if where else ""
        return ConfigError(f"{origin}: {prefix}{key}: {problem}")

    for key in table:
        if key not in KEYS:
            import difflib  # only for this message

            close = difflib.get_close_matches(str(key).replace("_", "-"), KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(KEYS)})"
            raise key_error(_shown(key), f"unknown key{hint}")

    def texts(key: str) -> tuple[str, ...] | None:
        value = table.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise key_error(key, "must be a list of strings")
        if len(value) > MAX_ITEMS or any(len(v) > MAX_TEXT for v in value):
            raise key_error(key, f"more than {MAX_ITEMS} entries or {MAX_TEXT} characters")
        return tuple(v.strip() for v in value if v.strip())

    def text(key: str) -> str | None:
        value = table.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
            raise key_error(key, "must be a string")
        return value.strip()

    def mapping(key: str) -> dict[str, Any]:
        value = table.get(key, {})
        if not isinstance(value, dict):
            raise key_error(key, "must be a table")
        if len(value) > MAX_ITEMS:
            raise key_error(key, f"more than {MAX_ITEMS} entries")
        return value

    per_file: list[tuple[str, tuple[str, ...]]] = []
    for glob, selectors in mapping("per-file-ignores").items():
        if not isinstance(selectors, list) or not all(isinstance(s, str) for s in selectors) or \
                len(selectors) > MAX_ITEMS or len(glob) > MAX_TEXT or not glob.strip():
            raise key_error(f"per-file-ignores.{_shown(glob)}", "must be a list of rule codes, names or prefixes")
        per_file.append((glob.strip(), tuple(s.strip() for s in selectors if s.strip())))
    severity: list[tuple[str, str]] = []
    for selector, level in mapping("severity").items():
        if not isinstance(level, str) or level.strip().lower() not in SEVERITY_NAMES:
            raise key_error(f"severity.{_shown(selector)}", f"must be one of {', '.join(SEVERITY_NAMES)}")
        severity.append((selector.strip(), level.strip().lower()))
    fail_on = text("fail-on")
    if fail_on is not None and fail_on.lower() not in SEVERITY_NAMES:
        raise key_error("fail-on", f"must be one of {', '.join(SEVERITY_NAMES)}")
    upstream = tuple(_local_path(p, "upstream", base, inside, key_error) for p in texts("upstream") or ())
    baseline = text("baseline")
    if baseline is not None:
        baseline = _local_path(baseline, "baseline", base, None, key_error) if trusted \
            else _repository_path(baseline, key_error)
    return Settings(
        origin=origin, trusted=trusted, select=texts("select"), ignore=texts("ignore") or (),
        extend_select=texts("extend-select") or (), extend_ignore=texts("extend-ignore") or (),
        per_file_ignores=tuple(per_file), severity=tuple(severity), engines=texts("engines"),
        upstream=upstream, fail_on=fail_on.lower() if fail_on else None, baseline=baseline)


def _shown(key: Any) -> str:
    text = str(key)
    return repr(text[:60]) if not text.replace("-", "").replace("_", "").isalnum() else text


def _local_path(value: str, key: str, base: Path | None, inside: Path | None, key_error) -> str:
    """A path of the file, relative to its folder, as an absolute path; one from the
    repository's own file must stay inside the repository."""
    if base is None:
        raise key_error(key, "a Hub repository's configuration cannot name a directory on this machine")
    path = Path(os.path.expanduser(value)) if inside is None else Path(value)
    path = path if path.is_absolute() else base / path
    real = Path(os.path.realpath(path))
    if inside is not None:
        root = Path(os.path.realpath(inside))
        if real != root and not real.is_relative_to(root):
            raise key_error(key, f"{value!r} leaves the repository (a repository's own configuration may "
                                 "name only paths inside it)")
    return str(real)


def _repository_path(value: str, key_error) -> str:
    """A path inside a repository that is not on this disk (read through its source)."""
    parts = PurePosixPath(value).parts
    if value.startswith("/") or not parts or ".." in parts or "\\" in value:
        raise key_error("baseline", f"{value!r} is not a path inside the repository")
    return str(PurePosixPath(*parts))


def read_file(path: Path, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """A configuration file on this disk, bounded: a regular file (after links: the user's own
    files) of at most `limit` bytes, opened without blocking (never a FIFO's wait)."""
    try:
        return read_regular_file(path, limit)
    except NotReadable as err:
        raise ConfigError(f"{path}: {err}") from None


def load_file(path: str | os.PathLike[str]) -> Settings:
    """`--config FILE`: a .hfdoctor.toml-style file, or a pyproject.toml (its [tool.hfdoctor])."""
    path = Path(path)
    pyproject = path.name == PYPROJECT
    settings = settings_from_bytes(read_file(path), str(path), pyproject=pyproject, trusted=True,
                                   base=Path(os.path.abspath(path)).parent)
    if settings is None:
        raise ConfigError(f"{path}: has no [tool.hfdoctor] table")
    return settings


def find_above(start: Path) -> Settings | None:
    """The nearest configuration file in `start` or a folder above it (ruff's discovery); files
    there are the user's own."""
    here = Path(os.path.abspath(start))
    for folder in (here, *here.parents):
        for name in (CONFIG_NAME, PYPROJECT):
            candidate = folder / name
            if not candidate.is_file():
                continue
            settings = settings_from_bytes(read_file(candidate), str(candidate), pyproject=name == PYPROJECT,
                                           trusted=True, base=folder)
            if settings is not None:
                return settings
    return None
