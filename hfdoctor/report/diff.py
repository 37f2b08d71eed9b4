"""The unified diff of a fix (`hfdoctor fix --diff`): applies with `git apply` or `patch -p1`.

A chat template lives in a JSON string, where a change is one line of escaped text that
nobody can review. For each changed string that holds lines of text (a template), the
diff also shows that text's own unified diff, every line of it commented with `# `,
before the file's patch: git apply and patch skip such lines, so the output still applies.

A patch prints repository lines verbatim, and under GitHub Actions the runner reads a context
line such as ` ::error::x` as a workflow command: there (GITHUB_ACTIONS=true) `for_output`
wraps the patch in `::stop-commands::TOKEN` ... `::TOKEN::`, lines that git apply skips.
Anywhere else the patch is printed byte for byte.
"""

from __future__ import annotations

import difflib
import os
import re
from typing import Any, Iterator, Mapping

from rich.console import Console

from hfdoctor.findings import FixResult, Severity
from hfdoctor.bounded.parsing import ParseError, load_json
from hfdoctor.report.inert import stop_commands, visible

# Strings shown as text: at least this many lines (a template, not a token).
TEXT_MIN_LINES = 2
MAX_TEXT_DIFF_LINES = 400  # a readable diff, not a second copy of a 10,000-line template
SURROGATE = re.compile("[\ud800-\udfff]")  # one character at a time: linear in Python's engine


def unified_diff(original: dict[str, bytes | None], changed: dict[str, bytes]) -> str:
    """a/ b/ prefixed diff of every changed file; a None original is a new file."""
    out: list[str] = []
    for rel in sorted(changed):
        old = original.get(rel)
        before = _lines(old.decode("utf-8", errors="replace")) if old is not None else []
        after = _lines(changed[rel].decode("utf-8", errors="replace"))
        if rel.endswith(".json"):
            out.extend(text_diffs(rel, old, changed[rel]))
        for line in difflib.unified_diff(before, after, "/dev/null" if old is None else f"a/{rel}", f"b/{rel}"):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def for_output(diff: str, environ: Mapping[str, str] = os.environ) -> str:
    """The patch as `fix --diff` prints it: unchanged, or under GitHub Actions between
    stop-commands lines, so that no line of it acts as a workflow command."""
    if diff and environ.get("GITHUB_ACTIONS") == "true":
        return stop_commands(diff)
    return diff


def _lines(text: str) -> list[str]:
    """Lines split on \\n only (str.splitlines also splits on \\r, U+2028...)."""
    return re.findall(r"[^\n]*\n|[^\n]+", text)


def text_diffs(rel: str, old: bytes | None, new: bytes) -> list[str]:
    """The commented diff of each multi-line string that differs between two versions of a JSON file."""
    try:
        before = load_json(old.decode("utf-8")) if old is not None else None
        after = load_json(new.decode("utf-8"))
    except (ParseError, ValueError, RecursionError):
        return []
    out: list[str] = []
    for pointer, a, b in _changed_strings(before, after, ""):
        if max(a.count("\n"), b.count("\n")) + 1 < TEXT_MIN_LINES:
            continue
        body = list(difflib.unified_diff(_lines(a), _lines(b), "before", "after", n=2))[2:]  # hunks only
        if not body:
            continue
        shown = body[:MAX_TEXT_DIFF_LINES]
        # a key is the repository's: shown on this one comment line, never a line break out of it
        out.append(f"# {visible(rel)} {visible(pointer) or '/'} as text (for review; the JSON edit below is what "
                   "applies):\n")
        out.extend("# " + (line if line.endswith("\n") else line + "\n") for line in shown)
        if len(body) > len(shown):
            out.append(f"# ... {len(body) - len(shown)} more lines of this text diff\n")
    # JSON's "\ud800" escapes give lone surrogates, which no output stream can encode
    return [SURROGATE.sub("\ufffd", line) for line in out]


def _changed_strings(a: Any, b: Any, pointer: str, depth: int = 0) -> Iterator[tuple[str, str, str]]:
    """(JSON pointer, old text, new text) of every string that differs; "" stands for an absent one."""
    if depth > 64:
        return
    if isinstance(a, dict) or isinstance(b, dict):
        a_map = a if isinstance(a, dict) else {}
        b_map = b if isinstance(b, dict) else {}
        for key in list(dict.fromkeys([*a_map, *b_map])):
            if a_map.get(key) != b_map.get(key):
                escaped = str(key).replace("~", "~0").replace("/", "~1")
                yield from _changed_strings(a_map.get(key), b_map.get(key), f"{pointer}/{escaped}", depth + 1)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                yield from _changed_strings(x, y, f"{pointer}/{i}", depth + 1)
    elif isinstance(b, list) and not isinstance(a, list):
        for i, y in enumerate(b):
            yield from _changed_strings(None, y, f"{pointer}/{i}", depth + 1)
    elif isinstance(a, str) or isinstance(b, str):
        yield pointer, a if isinstance(a, str) else "", b if isinstance(b, str) else ""


def left_line(result: FixResult, fail_on: Severity) -> str:
    """One line: what would be left at or above --fail-on once the diff is applied (fix --diff)."""
    left = [f for f in result.after.findings if f.severity >= fail_on]
    counts = result.after.summary()
    tally = f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info"
    if not left:
        return f"nothing at or above {fail_on} would be left ({tally} after this diff)"
    named = ", ".join(f"{f.code} {f.rule} ({f.file or 'repository'})" for f in left[:5])
    more = f" and {len(left) - 5} more" if len(left) > 5 else ""
    return f"would be left at or above {fail_on}: {named}{more} ({tally} after this diff)"


def unfinished_line(result: FixResult) -> str | None:
    """The findings still fixable when the passes ran out, in one line (a fix kept revealing fixes)."""
    if not result.unfinished:
        return None
    named = ", ".join(f"{f.code} {f.rule} ({f.file or 'repository'}, {f.severity})" for f in result.unfinished[:5])
    more = f" and {len(result.unfinished) - 5} more" if len(result.unfinished) > 5 else ""
    return (f"still fixable after {len(result.passes)} passes, not fixed (fixes keep revealing fixes: please report "
            f"it): {named}{more}")


def write_diff_summary(result: FixResult, console: Console, fail_on: Severity) -> None:
    """After `fix --diff`'s patch: what it fixes, what was refused, and one line on what is left.
    Every line goes through report.text's `say`, so repository text in it is shown inert."""
    from hfdoctor.report.text import fix_lines, passes_text, say

    target = result.after.target
    if result.applied:
        say(console, (target, "bold"), f": would fix {len(result.applied)} finding(s) in {', '.join(result.files)}"
            f"{passes_text(result)}; nothing written (--diff)")
        for line in fix_lines(result, "would fix"):
            say(console, *line)
    else:
        say(console, (target, "bold"), ": nothing to fix")
    for reason in result.refused:
        say(console, "  ", ("not fixed", "yellow"), f" {reason}")
    for err in result.errors:
        say(console, ("error:", "bold red"), f" {err}")
    unfinished = unfinished_line(result)
    if unfinished:
        say(console, unfinished)
    say(console, left_line(result, fail_on))
