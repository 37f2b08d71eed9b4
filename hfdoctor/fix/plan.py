"""Planning a fix: check, apply fixes in memory, check again, until nothing more applies.

`plan_fixes` takes the fixes of the findings (safe ones unless --unsafe-fixes), applies
those whose edits do not overlap, and checks again on the patched text, round after
round (a fix can reveal another finding: a new template shows that eos lacks its
end-of-turn id). Nothing is written while planning: the Plan holds the new bytes of
each file and the report `check` will give once they are written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from hfdoctor.check import check_repo
from hfdoctor.edits.apply import EditConflict, apply_edits, disjoint
from hfdoctor.findings import Applicability, Edit, Finding, Fix, Report
from hfdoctor.fix.write import UnsafeWrite, writable_path
from hfdoctor.repo import ModelRepo
from hfdoctor.upstream import Upstream

# A fix that keeps revealing new fixes is a bug; stop after this many rounds.
MAX_PASSES = 8


class PatchedRepo(ModelRepo):
    """A repo seen as it will be once `changes` are written: reads see the new bytes."""

    def __init__(self, path: str | os.PathLike[str], upstream, changes: dict[str, bytes]):
        super().__init__(path, upstream=upstream)
        self.changes = dict(changes)

    def raw(self, rel: str) -> bytes | None:
        if rel in self.changes:
            return self.changes[rel]
        return super().raw(rel)

    def exists(self, rel: str) -> bool:
        return rel in self.changes or super().exists(rel)

    @cached_property
    def files(self) -> list[str]:
        return sorted(set(ModelRepo.files.func(self)) | set(self.changes))


@dataclass
class Plan:
    """What `fix` will do: the new bytes of each file, and which findings they fix."""

    root: Path
    before: Report
    after: Report  # what `check` will say once `changed` is written
    original: dict[str, bytes | None] = field(default_factory=dict)  # None: the file is new
    changed: dict[str, bytes] = field(default_factory=dict)
    applied: list[Finding] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)


def plan_fixes(target: str | os.PathLike[str], *, select=None, ignore=None, upstream=None, unsafe_fixes=False) -> Plan:
    """Check, fix in memory, re-check, until no more fixes apply. Writes nothing."""
    root = Path(target)
    upstream = upstream if upstream is not None else Upstream.from_options()

    def check(changes: dict[str, bytes]) -> tuple[PatchedRepo, Report]:
        """The patched view and its report: the fixes' offsets are into that view's bytes."""
        repo = PatchedRepo(root, upstream, changes)
        return repo, check_repo(repo, select=select, ignore=ignore, target=str(target))

    original: dict[str, bytes | None] = {}
    changed: dict[str, bytes] = {}
    applied: list[Finding] = []
    refused: list[str] = []
    internal: list[str] = []
    # A fix applied once and offered again did not make its finding go away: not twice.
    done: set[tuple] = set()
    repo, report = check(changed)
    before = report
    for _ in range(MAX_PASSES):
        internal.extend(e for e in report.internal_errors if e not in internal)
        taken: dict[str, list[Edit]] = {}
        for finding in report.findings:
            fix = finding.fix
            if fix is None or (fix.applicability is Applicability.UNSAFE and not unsafe_fixes):
                continue
            key = (finding.code, finding.file, fix.title)
            if key in done:
                continue
            reason = _refusal(root, repo, fix)
            if reason:
                refused.append(f"{finding.code} {finding.rule}: {reason}")
                done.add(key)
                continue
            if _overlaps(taken, fix):
                continue  # offered again next round, computed on the new text
            for edit in fix.edits:
                taken.setdefault(edit.file, []).append(edit)
            applied.append(finding)
            done.add(key)
        if not taken:
            break
        for rel, edits in taken.items():
            if rel not in original:
                original[rel] = repo.raw(rel) if repo.exists(rel) else None
            base = b"" if any(e.create for e in edits) else (repo.raw(rel) or b"")
            changed[rel] = apply_edits(base, edits)
        repo, report = check(changed)  # what is left, and what the new text reveals
    internal.extend(e for e in report.internal_errors if e not in internal)
    changed = {rel: data for rel, data in changed.items() if data != original.get(rel)}
    return Plan(root, before, report, {rel: original[rel] for rel in changed}, changed, applied, refused, internal)


def _refusal(root: Path, repo: ModelRepo, fix: Fix) -> str | None:
    """Why this fix must not be applied, or None."""
    for edit in fix.edits:
        try:
            writable_path(root, edit.file)
        except UnsafeWrite as err:
            return str(err)
        if edit.create and repo.exists(edit.file):
            return f"{edit.file} already exists (the fix would create it)"
        if not edit.create and repo.raw(edit.file) is None:
            return f"{edit.file} cannot be read"
    return None


def _overlaps(taken: dict[str, list[Edit]], fix: Fix) -> bool:
    """Whether `fix` collides with edits already taken this round."""
    for rel in {edit.file for edit in fix.edits}:
        try:
            disjoint(taken.get(rel, []) + [edit for edit in fix.edits if edit.file == rel])
        except EditConflict:
            return True
    return False
