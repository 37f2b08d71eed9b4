"""Planning a fix: check, apply fixes in memory, check again, until nothing fixable is left.

`plan_fixes` works in passes, as ruff's --fix does. A pass takes the fixes of the findings
of one check (safe ones unless --unsafe-fixes) one by one: each is applied to the patched
text on trial and the repo checked again; a fix after which a file it writes has a new
finding at or above the one it fixes is refused (`_made_worse`). A fix of a file another fix
of the pass already changed waits for the next pass, computed on the new text. Then the
patched view is checked again, and the next pass fixes what is fixable now: what the pass
before left, and what its fixes revealed (a template inserted shows that generation_config.json
lacks the end-of-turn id; an eos added there now disagrees with config.json). It stops when a
pass fixes nothing, at the fixed point: a second run finds nothing to fix. MAX_PASSES bounds
it; a fix that keeps revealing new fixes is a bug, and what is still fixable then is named.

Nothing is written while planning: the Plan holds the new bytes of each file, what each pass
fixed, and the report `check` will give once they are written.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from hfdoctor.lint.check import check_repo
from hfdoctor.lint.edits.apply import apply_edits
from hfdoctor.findings import Applicability, Finding, Fix, Report
from hfdoctor.fix.write import UnsafeWrite, writable_path
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import Upstream

# A fix that keeps revealing new fixes is a bug; stop after this many passes.
MAX_PASSES = 8


class PatchedRepo(ModelRepo):
    """A repo seen as it will be once `changes` are written: reads see the new bytes."""

    def __init__(self, path: str | os.PathLike[str], upstream, changes: dict[str, bytes],
                 engines: dict[str, str] | None = None):
        super().__init__(path, upstream=upstream, engines=engines)
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
    applied: list[Finding] = field(default_factory=list)  # every pass's, in order
    refused: list[str] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    passes: list[list[Finding]] = field(default_factory=list)  # what each pass fixed
    # fixed findings `before` did not show as fixable: revealed by the fixes of an earlier pass
    revealed: list[Finding] = field(default_factory=list)
    # fixable findings of `after` no pass tried: MAX_PASSES ran out (a bug of some fix)
    unfinished: list[Finding] = field(default_factory=list)


def plan_fixes(target: str | os.PathLike[str], *, select=None, ignore=None, upstream=None, unsafe_fixes=False,
               settings=None, engines: dict[str, str] | None = None) -> Plan:
    """Check, fix in memory, re-check, pass after pass until nothing fixable is left. Writes nothing.

    `settings` and `engines`: a configuration file's (hfdoctor.lint.configured), replacing select/ignore."""
    root = Path(target)
    upstream = upstream if upstream is not None else Upstream.from_options()

    def check(changes: dict[str, bytes]) -> tuple[PatchedRepo, Report]:
        """The patched view and its report: the fixes' offsets are into that view's bytes."""
        repo = PatchedRepo(root, upstream, changes, engines)
        return repo, check_repo(repo, select=select, ignore=ignore, target=str(target), settings=settings)

    original: dict[str, bytes | None] = {}
    changed: dict[str, bytes] = {}
    refused: list[str] = []
    internal: list[str] = []
    passes: list[list[Finding]] = []
    # A fix applied once (or refused) and offered again: not twice.
    done: set[tuple] = set()
    repo, report = check(changed)
    before = report
    for _ in range(MAX_PASSES):
        internal.extend(e for e in report.internal_errors if e not in internal)
        current = report  # what check says of `changed` as it stands
        touched: set[str] = set()  # files changed this pass: fixes computed before are stale there
        fixed: list[Finding] = []
        for finding in report.findings:
            fix = finding.fix
            if fix is None or not _offered(finding, unsafe_fixes) or _fix_key(finding) in done:
                continue
            files = {edit.file for edit in fix.edits}
            if files & touched:
                continue  # offered again next pass, computed on the new text
            reason = _refusal(root, repo, fix)
            trial: dict[str, bytes] = {}
            if reason is None:
                trial = dict(changed)
                for rel in files:
                    edits = [e for e in fix.edits if e.file == rel]
                    base = b"" if any(e.create for e in edits) else (repo.raw(rel) or b"")
                    trial[rel] = apply_edits(base, edits)
                trial_repo, trial_report = check(trial)
                reason = _made_worse(current, trial_report, finding, files)
            done.add(_fix_key(finding))
            if reason:
                refused.append(f"{finding.code} {finding.rule}: {reason}")
                continue
            for rel in files:
                if rel not in original:
                    original[rel] = repo.raw(rel) if repo.exists(rel) else None
            changed, current = trial, trial_report
            fixed.append(finding)
            touched |= files
        if not fixed:
            break
        passes.append(fixed)
        repo, report = check(changed)  # what is left, and what the new text reveals
    internal.extend(e for e in report.internal_errors if e not in internal)
    changed = {rel: data for rel, data in changed.items() if data != original.get(rel)}
    applied = [finding for fixed in passes for finding in fixed]
    shown = Counter(_key(f) for f in before.findings if _offered(f, unsafe_fixes))
    revealed = []
    for finding in applied:
        if shown[_key(finding)] > 0:
            shown[_key(finding)] -= 1
        else:
            revealed.append(finding)
    unfinished = [f for f in report.findings if _offered(f, unsafe_fixes) and _fix_key(f) not in done]
    return Plan(root, before, report, {rel: original[rel] for rel in changed}, changed, applied, refused, internal,
                passes, revealed, unfinished)


def _fix_key(finding: Finding) -> tuple:
    """One fix: applied (or refused) once a run, however often it is offered."""
    assert finding.fix is not None
    return (finding.code, finding.file, finding.fix.title)


def _key(finding: Finding) -> tuple:
    return (finding.code, finding.file)


def _offered(finding: Finding, unsafe_fixes: bool) -> bool:
    """Whether `fix` (with or without --unsafe-fixes) applies this finding's fix, as check counts it."""
    return finding.fix is not None and (unsafe_fixes or finding.fix.applicability is not Applicability.UNSAFE)


def _made_worse(before: Report, after: Report, fixed: Finding, files: set[str]) -> str | None:
    """Why applying a fix makes what it writes worse, or None.

    A fix is refused when, once applied, the re-check finds in a file the fix writes a
    finding it did not find before at or above the severity of the finding it fixes: a
    template whose markers are not tokens of this vocabulary, an eos id the tokenizer
    lacks. So no fix can trade a problem for a worse one, whichever rule offered it, even
    when the evidence behind it was wrong. Findings it reveals elsewhere (a new template
    shows that generation_config.json lacks its end-of-turn id) are not its doing.
    """
    def key(f: Finding) -> tuple:
        return (f.code, f.file)

    seen = Counter(key(f) for f in before.findings)
    for finding in after.findings:
        if seen[key(finding)] > 0:
            seen[key(finding)] -= 1
            continue
        if finding.file in files and finding.severity >= fixed.severity:
            return (f"refused: after it, {finding.file} would have {finding.severity} {finding.code} {finding.rule} "
                    f"({finding.message[:160]}{'…' if len(finding.message) > 160 else ''})")
    return None


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
