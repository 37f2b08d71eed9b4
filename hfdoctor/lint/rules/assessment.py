"""Findings of the problems hfdoctor.compat.assess finds, for the rules that report them:
CMP001-003 (compat.py), TPL015 template-portability and WGT007 weights-metadata. assess
runs once per repository; each rule keeps the problems named after it."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

from hfdoctor.compat.assess import Problem, assess, engine_status
from hfdoctor.findings import Facet, FacetKind, Finding, Fix
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import Rule


def assessed_findings(repo: ModelRepo, self: Rule,
                      fix_for: Callable[[ModelRepo, Problem], Fix | None] | None = None) -> Iterator[Finding]:
    """The findings of `self`'s problems, each with the fix fix_for builds for it (if any)."""
    for problem in assess(repo):
        if problem.rule != self.name:
            continue
        if problem.severity is None:
            continue  # the compat section's only: not a fault this rule reports (Problem.severity)
        affected = ", ".join(f"{engine} {engine_status(repo, problem, engine)}" for engine in problem.engines)
        finding = self.finding(repo, f"{problem.why} [{affected}]", file=problem.file, pointer=problem.pointer,
                               line=problem.data.get("line"), severity=problem.severity,
                               fix=fix_for(repo, problem) if fix_for else None,
                               facets=tuple(Facet(FacetKind.ENGINE, engine) for engine in problem.audience))
        yield replace(finding, severity_reason=problem.severity_reason) if problem.severity_reason else finding
