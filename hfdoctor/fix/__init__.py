"""`hfdoctor fix`: the minimal, exact, atomic patch.

The fixes themselves are data: rules attach Fix objects built by hfdoctor.lint.edits to
their findings. This package turns them into files on disk:

- plan.py: check, apply fixes in memory, check again, pass after pass until nothing
  fixable is left (the fixed point: a second run changes nothing); refuse what must not be
  written. Writes nothing.
- write.py: atomic writes (temporary file, fsync, rename), mode kept, never through a
  symlink that leaves the repository, never a weight file.

Output (summary, JSON, diff) is hfdoctor.report's job, one module per format for both
`check` and `fix`. This package may import check (and through it the rules), edits,
repo and report; nothing imports it but the CLI.

Exit code of `fix` (CONTRACT.md): 0 when nothing at or above --fail-on is left after
fixing, 1 when something is, 2 when hfdoctor failed (a rule crashed, a write failed).
A fixer that changed files does *not* exit 1 by itself: pre-commit already fails a hook
that modified files, and the contract says fix's 1 means "what is left". With --diff
nothing is written, and the exit code is what the diff would leave: 0 when it fixes
every finding at or above --fail-on, 1 when some would be left (named in one line).
"""

from __future__ import annotations

import sys

from rich.console import Console

from hfdoctor.findings import FixResult, Severity
from hfdoctor.fix.plan import plan_fixes
from hfdoctor.fix.write import UnsafeWrite, write_changes
from hfdoctor.report.diff import for_output, unfinished_line, unified_diff, write_diff_summary
from hfdoctor.report.json_report import write_fix_json
from hfdoctor.report.text import Display, say, write_fix_text


def run_fix(
    target: str,
    *,
    diff: bool,
    unsafe_fixes: bool,
    select: list[str] | None,
    ignore: list[str] | None,
    upstream,
    fail_on: Severity,
    output_format: str,
    console: Console,
    display: Display = Display(),
    settings=None,
    engines: dict[str, str] | None = None,
) -> int:
    """`hfdoctor fix TARGET`: plan, then print the diff or write, then report what is left.

    `settings` and `engines`: the target's configuration file (hfdoctor.lint.configured)."""
    plan = plan_fixes(target, select=select, ignore=ignore, upstream=upstream, unsafe_fixes=unsafe_fixes,
                      settings=settings, engines=engines)
    errors = list(plan.internal_errors)
    written = False
    # plan.after was checked on exactly the bytes that write_changes puts on disk.
    after = plan.after
    if diff:
        left = after  # what would be left once the diff is applied
    else:
        if plan.changed:
            try:
                write_changes(plan.root, plan.changed, plan.original)
                written = True
            except (OSError, UnsafeWrite) as err:
                errors.append(f"nothing written: {err}")
                after = plan.before
        left = after
    after.target = str(target)
    diff_text = unified_diff(plan.original, plan.changed) if diff else None
    result = FixResult(after, plan.applied, plan.refused, sorted(plan.changed), written, diff_text, errors,
                       plan.passes, plan.revealed, plan.unfinished)
    if output_format == "json":
        print(write_fix_json(result))
    elif diff_text is not None:  # the diff on stdout (pipe it to `git apply`), the summary on stderr
        console.file.write(for_output(diff_text))  # stop-commands around it under GitHub Actions
        console.file.flush()
        write_diff_summary(result, Console(file=sys.stderr, highlight=False, soft_wrap=True), fail_on)
    else:
        write_fix_text(result, console, display)
        unfinished = unfinished_line(result)
        if unfinished:
            say(console, unfinished)
    if errors:
        return 2
    worst = left.worst()
    return 1 if worst is not None and worst >= fail_on else 0
