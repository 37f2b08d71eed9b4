"""A configuration file applied to one check: which file, which rules, which findings it drops or re-grades.

hfdoctor.config reads the file and checks its keys; this module knows the rules and engines,
so it checks the names the file gives (`validate`), finds the file of a target (`find_settings`:
the repository's own through its source, else the nearest above), and applies it: the rules
to run (`RuleSettings`: the file's select/ignore, then the command line's), per-file-ignores,
and severity overrides (after the evidence-based policy: the user's word is last).

A repository's own file is untrusted (hfdoctor.config): it cannot switch off, ignore per file,
lower or baseline the PROTECTED rules, which guard whoever loads the repository: a downloaded
repository that ignores its own unsafe pickle still shows it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path

from hfdoctor.bounded import patterns
from hfdoctor.compat.knowledge import ENGINES
from hfdoctor.config import (CONFIG_NAME, MAX_CONFIG_BYTES, PYPROJECT, ConfigError, Options, RepositoryConfigError,
                             Settings, find_above, settings_from_bytes)
from hfdoctor.findings import Finding, Severity
from hfdoctor.lint.rules import ALL_RULES, matches
from hfdoctor.lint.rules.base import Rule
from hfdoctor.sources.base import Source, Unreadable
from hfdoctor.sources.gitfiles import wildmatch_regex

# What runs code or reaches outside the repository when it is loaded (SEC), a symlink that
# leaves the repository, and a template that hides a trigger: a repository's own file cannot
# vouch for itself on these.
# check-incomplete (CFG007) with them: a repository that makes a budget run out (40 templates, a huge
# header) would otherwise hide, with its own file, that its template-backdoor or pickle scan never ran.
PROTECTED = frozenset({r.code for r in ALL_RULES if r.code.startswith("SEC")} | {"CFG003", "CFG007", "TPL014"})


def is_protected(code: str) -> bool:
    return code in PROTECTED


# --- finding the file ----------------------------------------------------------------------


def find_settings(source: Source, target: str, options: Options) -> Settings | None:
    """The configuration of one target: --isolated none, --config that file, else the
    repository's own (at its root, read through the source), else the nearest above it (a
    directory) or above the current directory (a Hub repository)."""
    if options.isolated:
        return None
    if options.settings is not None:
        return options.settings
    directory = Path(os.path.abspath(target)) if os.path.isdir(target) else None  # ".": its parent is ".."
    single_file = directory is None and os.path.isfile(target)  # one .gguf: its folder is not the repository
    if not single_file:
        own = own_settings(source, directory)
        if own is not None:
            return own
    if single_file:
        return find_above(Path(os.path.abspath(target)).parent)
    if directory is not None:
        return find_above(directory.parent)
    return find_above(Path.cwd())


def own_settings(source: Source, directory: Path | None) -> Settings | None:
    """The repository's own .hfdoctor.toml or pyproject.toml [tool.hfdoctor], read as untrusted
    (RepositoryConfigError when it cannot be used)."""
    try:
        return _own_settings(source, directory)
    except RepositoryConfigError:
        raise
    except ConfigError as err:
        raise RepositoryConfigError(str(err)) from None


def _own_settings(source: Source, directory: Path | None) -> Settings | None:
    entries = source.entries()
    for name in (CONFIG_NAME, PYPROJECT):
        entry = entries.get(name)
        if entry is None:
            continue
        if not entry.is_file:
            raise ConfigError(f"{name} of the repository {entry.detail}")
        try:
            data = source.read(name, limit=MAX_CONFIG_BYTES)
        except Unreadable as err:
            raise ConfigError(f"{name} of the repository {err}") from None
        settings = settings_from_bytes(data, name, pyproject=name == PYPROJECT, trusted=False, base=directory,
                                       inside=directory)
        if settings is not None:
            return settings
    return None


# --- checking names ------------------------------------------------------------------------


def validate(settings: Settings) -> None:
    """Every rule selector names a rule, every engine is one hfdoctor knows: ConfigError otherwise
    (RepositoryConfigError for the repository's own file)."""
    try:
        _validate(settings)
    except ConfigError as err:
        if settings.trusted:
            raise
        raise RepositoryConfigError(str(err)) from None


def _validate(settings: Settings) -> None:
    named: list[tuple[str, str]] = [(key, s) for key, values in (
        ("select", settings.select or ()), ("ignore", settings.ignore), ("extend-select", settings.extend_select),
        ("extend-ignore", settings.extend_ignore)) for s in values]
    named += [(f"per-file-ignores.{glob}", s) for glob, selectors in settings.per_file_ignores for s in selectors]
    named += [("severity", s) for s, _ in settings.severity]
    for key, selector in named:
        if selector.upper() != "ALL" and not _codes_of_selector(selector.strip().lower()):
            raise ConfigError(f"{settings.origin}: {key}: no rule matches {selector!r} (see `hfdoctor rules`)")
    for engine in settings.engines or ():
        if engine not in ENGINES:
            raise ConfigError(f"{settings.origin}: engines: unknown engine {engine!r} (one of {', '.join(ENGINES)})")
    for glob, _ in settings.per_file_ignores:
        if file_pattern(glob) is None:
            raise ConfigError(f"{settings.origin}: per-file-ignores: {glob!r} is not a pattern hfdoctor can match")


def declared_engines(settings: Settings | None) -> dict[str, str] | None:
    """engine -> why it is targeted, when the file says which engines the repository targets."""
    if settings is None or settings.engines is None:
        return None
    return {engine: f"the configuration ({settings.origin}) names it" for engine in settings.engines}


# --- applying it ---------------------------------------------------------------------------


def file_pattern(glob: str):
    """A per-file-ignores glob as an RE2 pattern over the target-relative path: gitignore's
    reading (a glob without `/` matches the file name at any depth, `dir/` everything below)."""
    glob = glob + "**" if glob.endswith("/") else glob
    anchored = "/" in glob.rstrip("/")
    body = wildmatch_regex(glob.lstrip("/"))
    return patterns.compile_untrusted(body if anchored else f"(?:.*/)?{body}")


@dataclass(frozen=True)
class RuleSettings:
    """What one check runs and how it grades, once the file and the command line are merged.

    The file's selectors are resolved to rule codes once (a file of a thousand entries, each of a
    hundred selectors, times thousands of findings was minutes): a finding costs a look-up of its
    code, and the globs are matched once per file and code."""

    rules: tuple[Rule, ...]
    per_file_ignores: tuple[tuple[object, frozenset[str]], ...] = ()  # (compiled glob, the codes it ignores)
    severity: tuple[tuple[str, Severity], ...] = ()  # rule code -> the level the file sets (its last match)
    origin: str = ""
    trusted: bool = True


def _codes_of(selectors) -> frozenset[str]:
    """The codes of the rules any of `selectors` matches, each distinct selector resolved once."""
    codes: set[str] = set()
    for selector in {s.strip().lower() for s in selectors}:
        codes |= _codes_of_selector(selector)
    return frozenset(codes)


@functools.lru_cache(maxsize=4096)
def _codes_of_selector(selector: str) -> frozenset[str]:
    return frozenset(r.code for r in ALL_RULES if matches(r, selector))


def rule_settings(options: Options, settings: Settings | None) -> RuleSettings:
    """The rules to run: the file's selection (select, or every rule; extend-select added;
    ignore and extend-ignore removed), then the command line's: its --select replaces the file's
    selection, its --ignore removes from what is left."""
    if settings is not None:
        validate(settings)
    chosen = list(ALL_RULES)
    if settings is not None:
        select = _codes_of((settings.select or ()) + settings.extend_select) if settings.select is not None else None
        ignore = _codes_of(settings.ignore + settings.extend_ignore)
        chosen = [r for r in ALL_RULES if ((select is None or r.code in select) and r.code not in ignore)
                  or (not settings.trusted and is_protected(r.code))]
    if options.select:
        chosen = [r for r in ALL_RULES if any(matches(r, s) for s in options.select)]
    chosen = [r for r in chosen if not any(matches(r, s) for s in options.ignore)]
    if settings is None:
        return RuleSettings(tuple(chosen))
    levels: dict[str, Severity] = {}
    for selector, level in settings.severity:  # file order: a later entry wins
        for code in _codes_of((selector,)):
            levels[code] = Severity.parse(level)
    return RuleSettings(
        tuple(chosen),
        per_file_ignores=tuple((file_pattern(glob), _codes_of(selectors))
                               for glob, selectors in settings.per_file_ignores),
        severity=tuple(sorted(levels.items())),
        origin=settings.origin, trusted=settings.trusted)


def apply_settings(findings: list[Finding], settings: RuleSettings) -> list[Finding]:
    """Drop what per-file-ignores names and set the severities the file sets (the last entry
    that matches a finding's rule wins). The PROTECTED rules keep their findings, and never get
    quieter, when the file is the repository's own."""
    known = {r.code for r in ALL_RULES}
    levels = dict(settings.severity)
    ignored: dict[tuple[str, str], bool] = {}  # (code, file) -> whether a glob that names the code matches
    out: list[Finding] = []
    for finding in findings:
        code = finding.code
        guarded = not settings.trusted and is_protected(code)
        if code in known and finding.file is not None and not guarded:
            key = (code, finding.file)
            if key not in ignored:
                ignored[key] = any(code in codes and pattern is not None and pattern.fullmatch(finding.file) is not None
                                   for pattern, codes in settings.per_file_ignores)
            if ignored[key]:
                continue
        level = levels.get(code)
        if level is not None and level != finding.severity and not (guarded and level < finding.severity):
            finding = replace(finding, severity=level, severity_reason=f"set to {level} by {settings.origin}")
        out.append(finding)
    return out
