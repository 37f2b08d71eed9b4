"""The one way from a target to its report: open the target, run the selected rules, add the sections.

`check_target(target, options)` is what the CLI, the survey (many targets), the fixer's first
look and the tests call. It opens the target (a directory, a file, a Hub repository at a
revision, a git commit), builds one ModelRepo (whose Facts the rules share), runs the selected
rules, computes the report's sections (hfdoctor.lint.sections) and the compat table, and lets
the severity policy (hfdoctor.lint.policy) settle each finding's severity. A target that cannot
be opened, or that runs past its deadline, is a TargetError (exit 2), never a crash.

`check_repo` is the same from a ModelRepo already built: the fixer's patched views and the
probe's preflight check one.
"""

from __future__ import annotations

import os
import signal
import threading
import traceback
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from hfdoctor import lineage
from hfdoctor.compat.assess import assess, section
from hfdoctor.bounded.budget import Budget
from hfdoctor.compat.knowledge import ENGINES
from hfdoctor.config import ConfigError, Options, RepositoryConfigError, Settings, merged_fail_on, merged_upstream
from hfdoctor.findings import Finding, Report, TargetError
from hfdoctor.knowledge.upstream import Upstream
from hfdoctor.lint import baseline, configured, policy
from hfdoctor.lint.rules import selected_rules
from hfdoctor.lint.rules.base import Rule
from hfdoctor.lint.rules.config.scope import is_model_repo
from hfdoctor.lint.sections import SECTIONS
from hfdoctor.repo import ModelRepo
from hfdoctor.sources.base import Source, SourceError
from hfdoctor.sources.targets import TargetOptions, open_source

# Run after every other rule and after the sections, so that they report the problems
# (unreadable files, budgets spent) anything before them ran into.
RUN_LAST = ("file-unreadable", "check-incomplete")

# Options is hfdoctor.config's (the CLI, the hook and the webhook read it there); callers that
# import it from here keep working.
__all__ = ["Options", "check_target", "check_repo"]


class _Deadline(BaseException):
    """The target's deadline passed (a BaseException: no `except Exception` swallows it)."""


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Interrupt the block after `seconds` (main thread only; elsewhere the timeouts of each
    request are the bound)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _Deadline()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_target(
    target: str,
    options: Options | None = None,
    *,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    upstream: Upstream | None = None,
) -> Report | TargetError:
    """Check one target; a TargetError when it cannot be opened, its configuration file cannot
    be used, or it runs past its deadline.

    `select`/`ignore` replace the options' own; `upstream` (an Upstream built by the caller)
    replaces the one the options and the configuration describe."""
    options = options or Options()
    if select is not None:
        options = replace(options, select=tuple(select))
    if ignore is not None:
        options = replace(options, ignore=tuple(ignore))
    targets = TargetOptions(revision=options.revision, git_rev=options.git_rev, git_since=options.git_since,
                            git_remote=options.git_remote, cache=options.cache, timeout_s=options.timeout_s)
    remote = options.git_rev is None and not os.path.isdir(target)
    source = None
    try:
        # The Hub's own timeouts come first; this one catches anything they let through.
        with deadline(options.timeout_s + 15 if remote else None):
            source = open_source(target, targets)
            source.budget = Budget.from_env()  # the configuration's reads are the repository's too
            settings = configured.find_settings(source, target, options)
            rules = configured.rule_settings(options, settings)
            if upstream is None:
                dirs = list(merged_upstream(options, settings))
                upstream = Upstream.from_options(dirs) if options.env_upstream else Upstream(tuple(map(Path, dirs)))
            repo = ModelRepo(source, upstream=upstream, engines=configured.declared_engines(settings))
            report = check_repo(repo, target=target, settings=rules)
            _configured_sections(report, source, target, options, settings)
            return report
    except SourceError as err:
        return TargetError(target, str(err))
    except ConfigError as err:
        return TargetError(target, f"configuration: {err} (--isolated checks without it)",
                           kind="repository-configuration" if isinstance(err, RepositoryConfigError) else "")
    except _Deadline:
        return TargetError(target, f"the check did not finish within the {options.timeout_s:g} s deadline")
    finally:
        if source is not None:
            source.close()


def _configured_sections(report: Report, source: Source, target: str, options: Options,
                         settings: Settings | None) -> None:
    """Leave out what the baseline accepts, and say in the report which file and baseline applied."""
    fail_on = merged_fail_on(options, settings)
    if settings is not None:
        report.sections["config"] = {"file": settings.origin, "fail_on": fail_on, "trusted": settings.trusted}
    if not options.use_baseline:
        return
    if options.baseline is not None:
        accepted, key, trusted, where = (baseline.read_local(options.baseline),
                                         baseline.target_key(target, options.baseline), True, options.baseline)
    elif settings is not None and settings.baseline is not None:
        if settings.trusted:
            accepted, key, where = (baseline.read_local(settings.baseline),
                                    baseline.target_key(target, settings.baseline), settings.baseline)
        else:
            accepted, key, where = (baseline.read_inside(source, settings.baseline),
                                    baseline.inside_key(settings.baseline), settings.baseline)
        trusted = settings.trusted
    else:
        return
    left_out = baseline.apply(report, accepted, key, trusted)
    report.sections["baseline"] = {"file": where, "accepted": left_out}


def run_rules(repo: ModelRepo, rules: list[Rule]) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    internal: list[str] = []
    for r in rules:
        try:
            findings.extend(r.check(repo))
        except Exception as err:  # a bug in hfdoctor, never the repo's fault
            internal.append(f"{r.code} {r.name} crashed: {_where(err)}")
    return findings, internal


def _where(err: Exception) -> str:
    frame = traceback.extract_tb(err.__traceback__)[-1]
    return f"{type(err).__name__}: {err} ({Path(frame.filename).name}:{frame.lineno})"


def sort_key(f: Finding) -> tuple:
    return (-int(f.severity), f.file or "", f.line or 0, f.code)


def check_repo(
    repo: ModelRepo,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    target: str | None = None,
    settings: configured.RuleSettings | None = None,
) -> Report:
    """check_target for a repo object already built (the fixer checks a patched view).

    `settings` (a configuration file merged with the command line) replaces select/ignore."""
    target = target if target is not None else str(repo.root)
    rules = list(settings.rules) if settings is not None else selected_rules(select, ignore)
    findings, internal = run_rules(repo, [r for r in rules if r.name not in RUN_LAST])
    try:
        lin = lineage.detect(repo).to_json()
    except Exception as err:
        internal.append(f"lineage crashed: {type(err).__name__}: {err}")
        lin = {"family": None, "base_model": None, "evidence": []}
    report = Report(target=target, findings=findings, lineage=lin, internal_errors=internal)
    source = repo.source
    if source.revision is not None:
        report.sections["revision"] = dict(source.revision)
    if source.kind != "directory":
        report.sections["source"] = {"kind": source.kind, "downloaded_bytes": source.bytes_read()}
    for name, build in SECTIONS:
        try:
            value = build(repo)
        except Exception as err:  # a bug in hfdoctor, never the repo's fault
            report.internal_errors.append(f"the {name} section crashed: {_where(err)}")
            continue
        if value:
            report.sections[name] = value
    try:
        report.sections["compat"] = section(repo, assess(repo)) if is_model_repo(repo) else [
            {"engine": engine, "status": "fails", "why": "not a model repository: there is nothing to load",
             "what": label} for engine, label in ENGINES.items()]
    except Exception as err:  # a bug in hfdoctor, never the repo's fault
        report.internal_errors.append(f"compat crashed: {type(err).__name__}: {err}")
    last, internal_last = run_rules(repo, [r for r in rules if r.name in RUN_LAST])
    judged = policy.apply(repo, report.findings + last)
    if settings is not None:  # the user's word comes after the evidence's
        judged = configured.apply_settings(judged, settings)
    report.findings = sorted(judged, key=sort_key)
    report.internal_errors.extend(internal_last)
    return report
