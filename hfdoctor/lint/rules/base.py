"""What a rule is, and the helpers rules share.

A rule is a plain function `check(repo, rule) -> Iterable[Finding]` wrapped by the
`@rule(...)` decorator, which gives it a stable code, a contract name and a default
severity. Its docstring is the documentation `hfdoctor explain` prints, so write it
for users: what it flags, why it matters, an example, and how safe the fix is.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Iterable

from hfdoctor.findings import Finding, Fix, Severity
from hfdoctor.repo import ModelRepo

CheckFn = Callable[["ModelRepo", "Rule"], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    check_fn: CheckFn

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.check_fn) or ""

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else ""

    @property
    def area(self) -> str:
        return self.code.rstrip("0123456789")

    def check(self, repo: ModelRepo) -> Iterable[Finding]:
        return self.check_fn(repo, self)

    def finding(
        self,
        repo: ModelRepo,
        message: str,
        *,
        file: str | None = None,
        pointer: str | None = None,
        line: int | None = None,
        severity: Severity | None = None,
        fix: Fix | None = None,
        facets: Iterable[str] = (),
    ) -> Finding:
        """Build a finding of this rule; the line is found from the pointer when not given."""
        if line is None and file is not None and pointer is not None:
            line = repo.line_of(file, pointer)
        return Finding(
            code=self.code,
            rule=self.name,
            severity=severity if severity is not None else self.severity,
            file=file,
            line=line,
            pointer=pointer,
            message=message,
            fix=fix,
            facets=tuple(facets),
        )


def rule(code: str, name: str, severity: Severity) -> Callable[[CheckFn], Rule]:
    def wrap(fn: CheckFn) -> Rule:
        return Rule(code=code, name=name, severity=severity, check_fn=fn)

    return wrap
