"""What a change did to a repository's findings: the ones it introduced, fixed, and left alone.

Findings of two revisions are matched by the fingerprint `check --baseline` keeps (hfdoctor.lint.baseline):
the rule's code, the file, the JSON pointer and the message with its numbers made alike (`template line 12`
and `README.md line 40` move when a line is added above them). Severity is not part of it (a policy change of
severity is the same problem), nor is the fix. Matching counts multiplicity: two equal findings at the base and
three at the head is one introduced.

What is left unmatched is then matched by place alone (code, file, pointer): a message also says
what the evidence was (`by config, tokenizer` becomes `by config, tokenizer, template` when a
template is added), and the same problem at the same place, worded anew, is neither introduced
nor fixed. Precision first: a comment must never say a change introduced what was there before.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from hfdoctor.findings import Finding, Severity
from hfdoctor.lint.baseline import fingerprint


@dataclass
class Changes:
    introduced: list[Finding] = field(default_factory=list)  # at the head, not at the base
    fixed: list[Finding] = field(default_factory=list)  # at the base, gone at the head
    unchanged: list[Finding] = field(default_factory=list)  # at both (as the head has them)

    def introduced_at_least(self, severity: Severity) -> list[Finding]:
        return [f for f in self.introduced if f.severity >= severity]

    def digest(self, severity: Severity) -> str:
        """One id for the set of findings at or above `severity` that the change introduced: a
        discussion about a push says it, so the same findings never get a second one."""
        prints = sorted(fingerprint(f) for f in self.introduced_at_least(severity))
        return hashlib.sha256("\n".join(prints).encode()).hexdigest()[:16]


def place(finding: Finding) -> str:
    return "\x1f".join((finding.code, finding.file or "", finding.pointer or ""))


def _match(base: list[Finding], head: list[Finding], key) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """(head findings matched, head findings left, base findings left), matching by `key` with multiplicity."""
    left = Counter(key(f) for f in base)
    matched, head_left = [], []
    for finding in head:
        k = key(finding)
        if left[k] > 0:
            left[k] -= 1
            matched.append(finding)
        else:
            head_left.append(finding)
    base_left = []
    for finding in base:
        k = key(finding)
        if left[k] > 0:  # what no head finding took
            left[k] -= 1
            base_left.append(finding)
    return matched, head_left, base_left


def compare(base: list[Finding], head: list[Finding]) -> Changes:
    """Match the findings of the base revision with those of the head (see the module)."""
    same, head_left, base_left = _match(base, head, fingerprint)
    reworded, introduced, fixed = _match(base_left, head_left, place)
    return Changes(introduced=introduced, fixed=fixed, unchanged=same + reworded)
