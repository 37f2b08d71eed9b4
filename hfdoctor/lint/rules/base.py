"""What a rule is, and the helpers rules share.

A rule is a plain function `check(repo, rule) -> Iterable[Finding]` wrapped by the
`@rule(...)` decorator, which gives it a stable code, a contract name, a default
severity, whether it offers a fix, and the old codes it answers to. Its docstring is the
documentation `hfdoctor explain` prints, so write it for users, in the same sections for
every rule: a one-line summary (what it flags), then `Why:`, `Example:` and `Fix:`
paragraphs (and `Severity:` where a finding can be louder or quieter than the default).
An example names real models or files. The `Fix:` paragraph starts with the rule's fix
availability (`Fix: none; ...`, `Fix: safe; ...`, `Fix: unsafe; ...`, `Fix: sometimes; ...`).
tests/lint/test_rule_metadata.py checks all of it.
"""

from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass
from typing import Callable, Iterable

from hfdoctor.findings import Facet, Finding, Fix, Severity
from hfdoctor.repo import ModelRepo

CheckFn = Callable[["ModelRepo", "Rule"], Iterable[Finding]]


class FixAvailability(str, enum.Enum):
    """Which fixes a rule's findings carry, as ruff documents it per rule. A finding whose repair
    the evidence does not single out (no edit is certain) has no fix, whatever its rule."""

    NONE = "none"  # never: the finding is for a person to judge
    SAFE = "safe"  # safe fixes only: `hfdoctor fix` applies them by default
    UNSAFE = "unsafe"  # unsafe fixes only: only `--unsafe-fixes` applies them
    SOMETIMES = "sometimes"  # safe for some findings, unsafe for others (the evidence decides)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    check_fn: CheckFn
    fix: FixAvailability
    # Codes this rule used to be (part of): `--select`/`--ignore`/`explain` still take them.
    aliases: tuple[str, ...] = ()

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.check_fn) or ""

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else ""

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
        facets: Iterable[Facet] = (),
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


def rule(code: str, name: str, severity: Severity, *, fix: FixAvailability,
         aliases: tuple[str, ...] = ()) -> Callable[[CheckFn], Rule]:
    def wrap(fn: CheckFn) -> Rule:
        return Rule(code=code, name=name, severity=severity, check_fn=fn, fix=fix, aliases=aliases)

    return wrap
