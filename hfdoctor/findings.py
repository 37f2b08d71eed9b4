"""The objects every rule produces and every writer consumes.

A Finding is immutable and self-contained: the text writer, the JSON writer and the
fixer all read the same object. Edits are byte spans of one file, so a fix never
re-serialises a file it only needs to touch in one place.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from hfdoctor import __version__


class Severity(enum.IntEnum):
    INFO = 1
    WARNING = 2
    ERROR = 3

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> "Severity":
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r} (use error, warning or info)") from None


class Applicability(str, enum.Enum):
    SAFE = "safe"
    UNSAFE = "unsafe"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Edit:
    """Replace bytes [start, end) of `file` (relative to the target) with `new_text`.

    start == end inserts. A whole new file is Edit(file, 0, 0, text) with `create=True`.
    """

    file: str
    start: int
    end: int
    new_text: str
    create: bool = False


@dataclass(frozen=True)
class Fix:
    title: str
    edits: tuple[Edit, ...]
    applicability: Applicability = Applicability.SAFE

    def to_json(self) -> dict[str, Any]:
        return {"applicability": str(self.applicability), "title": self.title}


class FacetKind(enum.Enum):
    """The kinds of fact about a finding that hfdoctor.lint.policy reads (its table says what each does)."""

    ENGINE = "engine"  # detail: a compat engine key: only that engine is affected
    UPSTREAM_DESIGN = "upstream-design"  # detail: who: the family's upstream does the same
    CANONICAL = "canonical"  # detail: the upstream repo: the template is the exact upstream template
    REASONING_ONLY = "reasoning-only"  # only reasoning/thinking blocks are involved
    HUB_INFERRED = "hub-inferred"  # a card key the Hub fills in from config.json
    CAPABILITY = "capability"  # detail: what: a shape the template does not support
    CHAT_ONLY = "chat-only"  # matters only when the checkpoint is used as a chat model
    GENERATION = "generation"  # matters only when the model generates text (how generation stops)
    AVOIDABLE = "avoidable"  # detail: how: the usual way of loading does not meet it
    # How a template renders a conversation (a prefix that breaks, a header it always appends): a
    # release may do so by design, which only its upstream template can tell.
    TEMPLATE_BEHAVIOUR = "template-behaviour"


@dataclass(frozen=True)
class Facet:
    """What a rule knows about its finding that decides how loud it should be: a kind, and its
    detail (the text the policy's severity_reason quotes; "" when the kind says it all).

    hfdoctor.lint.policy maps facets to a severity (only ever lower than the rule's) and a
    `severity_reason`. A finding states each kind at most once, except ENGINE (once per engine).
    """

    kind: FacetKind
    detail: str = ""


@dataclass(frozen=True)
class Finding:
    code: str
    rule: str
    severity: Severity
    file: str | None
    line: int | None
    pointer: str | None
    message: str
    fix: Fix | None = None
    # Facts about the finding that decide how loud it is (hfdoctor.lint.policy reads them):
    # see Facet. A rule states them; it never lowers its own severity for them.
    facets: tuple[Facet, ...] = ()
    # Why the finding has this severity, when the policy changed it or kept it for a reason.
    severity_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "rule": self.rule,
            "severity": str(self.severity),
            "severity_reason": self.severity_reason,
            "file": self.file,
            "line": self.line,
            "pointer": self.pointer,
            "message": self.message,
            "fix": self.fix.to_json() if self.fix else None,
        }


@dataclass
class Report:
    """Everything `check` learned about one target."""

    target: str
    findings: list[Finding]
    lineage: dict[str, Any] | None = None
    # Extra sections (e.g. "template" capabilities) that writers show when present.
    sections: dict[str, Any] = field(default_factory=dict)
    # Rules that crashed: a failure of hfdoctor itself (exit code 2), never of the repo.
    internal_errors: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        """Counts by severity; `fixable`: findings `hfdoctor fix` applies by default (safe fixes),
        `unsafe_fixable`: those only --unsafe-fixes applies."""
        counts = {"error": 0, "warning": 0, "info": 0, "fixable": 0, "unsafe_fixable": 0}
        for finding in self.findings:
            counts[str(finding.severity)] += 1
            if finding.fix is not None:
                counts["fixable" if finding.fix.applicability is Applicability.SAFE else "unsafe_fixable"] += 1
        return counts

    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)


@dataclass
class FixResult:
    """What `fix` did (or would do) to one target, for the writers in hfdoctor.report."""

    after: Report  # what `check` says once the changes are on disk
    applied: list[Finding]  # the findings whose fixes were applied (or planned, with --diff)
    refused: list[str]  # "CODE rule: why" for fixes that were not applied
    files: list[str]  # the files changed (or to change)
    written: bool
    diff: str | None = None  # the unified diff, when it was asked for
    errors: list[str] = field(default_factory=list)
    passes: list[list[Finding]] = field(default_factory=list)  # `applied`, pass by pass
    revealed: list[Finding] = field(default_factory=list)  # applied, but check had not shown them: an earlier pass revealed them
    unfinished: list[Finding] = field(default_factory=list)  # still fixable when the passes ran out (a bug of some fix)

    def pass_of(self, finding: Finding) -> int:
        """The pass (from 1) that fixed `finding`."""
        return next(i for i, fixed in enumerate(self.passes, 1) if any(f is finding for f in fixed))


@dataclass(frozen=True)
class TargetError:
    """A target that could not be checked at all (exit 2): no such repo, no access, time out."""

    target: str
    message: str
    # "repository-configuration": the repository's own configuration file (untrusted) could not be used
    kind: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"hfdoctor": __version__, "target": self.target, "error": self.message}
