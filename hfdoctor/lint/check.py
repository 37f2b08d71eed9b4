"""Run the selected rules over one target and collect a Report."""

from __future__ import annotations

import traceback
from pathlib import Path

from hfdoctor import lineage

from hfdoctor.lint import policy
from hfdoctor.compat.assess import assess, section
from hfdoctor.compat.knowledge import ENGINES
from hfdoctor.findings import Finding, Report
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules import selected_rules
from hfdoctor.lint.rules.base import Rule
from hfdoctor.lint.rules.config.scope import is_model_repo
from hfdoctor.knowledge.upstream import Upstream


# Run after every other rule and after the compat section, so that they report the
# problems (unreadable files, budgets spent) anything before them ran into.
RUN_LAST = ("file-unreadable", "check-incomplete")


def run_rules(repo: ModelRepo, rules: list[Rule]) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    internal: list[str] = []
    for r in rules:
        try:
            findings.extend(r.check(repo))
        except Exception as err:  # a bug in hfdoctor, never the repo's fault
            where = traceback.extract_tb(err.__traceback__)[-1]
            internal.append(f"{r.code} {r.name} crashed: {type(err).__name__}: {err} ({Path(where.filename).name}:{where.lineno})")
    return findings, internal


def sort_key(f: Finding) -> tuple:
    return (-int(f.severity), f.file or "", f.line or 0, f.code)


def check_target(
    target: str,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    upstream: Upstream | None = None,
) -> Report:
    return check_repo(ModelRepo(target, upstream=upstream), select=select, ignore=ignore, target=target)


def check_repo(
    repo: ModelRepo,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    target: str | None = None,
) -> Report:
    """check_target for a repo object already built (the fixer checks a patched view)."""
    target = target if target is not None else str(repo.root)
    rules = selected_rules(select, ignore)
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
    report.sections.update(repo.report_sections)
    try:
        report.sections["compat"] = section(repo, assess(repo)) if is_model_repo(repo) else [
            {"engine": engine, "status": "fails", "why": "not a model repository: there is nothing to load",
             "what": label} for engine, label in ENGINES.items()]
    except Exception as err:  # a bug in hfdoctor, never the repo's fault
        report.internal_errors.append(f"compat crashed: {type(err).__name__}: {err}")
    last, internal_last = run_rules(repo, [r for r in rules if r.name in RUN_LAST])
    report.findings = sorted(policy.apply(repo, report.findings + last), key=sort_key)
    report.internal_errors.extend(internal_last)
    return report
