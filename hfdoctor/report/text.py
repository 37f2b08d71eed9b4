"""The human writer: one line per finding, ruff-style, with rich colours on a terminal.

Short by default (CONTRACT "Text output is short"): warnings and errors, the compat line and a
summary line that counts the info findings and names `--show-info`, which shows them and the
other sections (template capabilities, weights); `--quiet` prints the summary line alone.
A terminal wraps lines to its width; a pipe gets one plain line per finding (cli.stdout_console).

Outside text is inert: every string is shown through `inert.visible` (controls, bidi and line
breaks as escapes) inside rich Text objects, which rich never reads as markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from rich.console import Console
from rich.text import Text

from hfdoctor.findings import Applicability, FixResult, Report, Severity, TargetError
from hfdoctor.report.inert import is_workflow_command, visible

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
Part = Union[str, tuple[str, str]]  # text, or (text, rich style)


@dataclass(frozen=True)
class Display:
    """What the text output shows: info findings and sections (--show-info), or the summary alone (--quiet)."""

    show_info: bool = False
    quiet: bool = False


def line(*parts: Part) -> Text:
    """One output line from plain parts and (text, style) parts, every character shown visibly.

    A line never starts with what GitHub's runner reads as a workflow command: a path that would
    (a target named `::error::x`) gets `./` in front, the same path."""
    text = Text()
    for part in parts:
        content, style = (part, "") if isinstance(part, str) else part
        shown = visible(content)
        joined = text.plain[-2:] + shown[:2]
        if "##[" in joined:  # `##` ending one part, `[` starting the next: still a legacy command
            at = joined.index("##[") + 2 - len(text.plain[-2:])
            shown = shown[:at] + "\\x5b" + shown[at + 1:]
        text.append(shown, style)
    if is_workflow_command(text.plain):
        text = Text("./") + text
    return text


def say(console: Console, *parts: Part) -> None:
    console.print(line(*parts))


def _location(target: str, file: str | None, line_no: int | None) -> str:
    if file is None:
        return target
    return f"{target.rstrip('/')}/{file}" + (f":{line_no}" if line_no else "")


def write_text(reports: list[Report | TargetError], console: Console, display: Display = Display()) -> None:
    for report in reports:
        if isinstance(report, TargetError):
            say(console, (report.target, "bold"), ": ", ("error:", "bold red"), " ", report.message)
            continue
        if display.quiet:
            console.print(summary_line(report, display, named=True))
            continue
        console.print(line((report.target, "bold"), "  lineage: ") + lineage_text(report.lineage or {}))
        for section, body in report.sections.items():
            if section == "compat" or display.show_info:
                write_section(console, section, body)
        for f in report.findings:
            if f.severity is Severity.INFO and not display.show_info:
                continue
            fix: list[Part] = [("  [fix: " + str(f.fix.applicability) + "]", "green")] if f.fix else []
            say(console, _location(report.target, f.file, f.line), ": ", (str(f.severity), STYLE[f.severity]), " ",
                (f.code, "bold"), " ", (f.rule, "dim"), " ", f.message, *fix)
        for err in report.internal_errors:
            say(console, ("internal error", "bold red"), " ", err, " (please report this)")
        console.print(summary_line(report, display, named=False))


def summary_line(report: Report, display: Display, named: bool) -> Text:
    """`1 error(s), 0 warning(s), and 4 info: --show-info; 1 fixable with `hfdoctor fix``."""
    head: list[Part] = [(report.target, "bold"), ": "] if named else []
    if not report.findings:
        return line(*head, ("no findings", "green"))
    s = report.summary()
    counts = f"{s['error']} error(s), {s['warning']} warning(s), "
    counts += f"{s['info']} info" if display.show_info or not s["info"] else f"and {s['info']} info: --show-info"
    fixable = f"; {s['fixable']} fixable with `hfdoctor fix`"
    if s["unsafe_fixable"]:
        fixable += f" ({s['unsafe_fixable']} more with --unsafe-fixes)"
    return line(*head, counts + fixable)


def lineage_text(lin: dict[str, Any]) -> Text:
    """'qwen3 (hybrid), base model Qwen/Qwen3-8B, confidence high (evidence: config, tokenizer)'."""
    if not lin.get("family"):
        arch = f"{lin['architecture']} architecture, " if lin.get("architecture") else ""
        return line((f"{arch}family unknown", "bold"), " (no tokenizer or other evidence names a known family)")
    family = lin["family"] + (f" ({lin['variant']})" if lin.get("variant") else "")
    evidence = ", ".join(lin.get("evidence") or []) or "none"
    disagree = "".join(f"; {name} says {' / '.join(lin.get('by_source', {}).get(name, []))}"
                       for name in lin.get("disagree") or [])
    return line((family, "bold"), f", base model {lin.get('base_model') or 'unknown'}, "
                f"confidence {lin.get('confidence', 'unknown')} (evidence: {evidence}{disagree})")


def write_section(console: Console, name: str, body: Any) -> None:
    """Extra sections (e.g. template capabilities) as `name: key=value, ...`."""
    if name == "compat" and isinstance(body, list):
        write_compat(console, body)
    elif isinstance(body, dict):
        parts = []
        for key, value in body.items():
            if isinstance(value, (dict, list)) and len(str(value)) > 80:
                continue
            parts.append(f"{key}={value}")
        say(console, f"  {name}: {', '.join(parts)}")


COMPAT_STYLE = {"loads": "green", "caveat": "yellow", "fails": "red", "unknown": "dim"}
WHY_CHARS = 240


def write_compat(console: Console, entries: list[dict[str, str]]) -> None:
    """`compat: fails: tgi; loads: vllm, ...; unknown: ...` (engines grouped by status, worst first),
    then why for each engine that fails or has a caveat."""
    by_status: dict[str, list[str]] = {}
    for e in entries:
        by_status.setdefault(e["status"], []).append(e["engine"])
    statuses: list[Part] = ["  compat: "]
    if len(by_status) == 1 and len(entries) > 1:
        (status, engines), = by_status.items()
        statuses += [f"every engine ({len(engines)}) ", (status, COMPAT_STYLE.get(status, ""))]
    else:
        worst_first = ("fails", "caveat", "loads", "unknown")
        order = [st for st in worst_first if st in by_status] + [st for st in by_status if st not in worst_first]
        for i, status in enumerate(order):
            statuses += [("; " if i else ""), (status, COMPAT_STYLE.get(status, "")), ": " + ", ".join(by_status[status])]
    say(console, *statuses)
    grouped: dict[tuple[str, str], list[str]] = {}  # engines that share a status and a reason share a line
    for e in entries:
        if e["status"] not in ("loads", "unknown"):  # unknown: "not verified" is in --format json
            grouped.setdefault((e["status"], e["why"]), []).append(e["engine"])
    for (status, why), engines in grouped.items():
        why = why if len(why) <= WHY_CHARS else why[:WHY_CHARS].rsplit(" ", 1)[0] + " …"  # never mid-word
        say(console, f"    {', '.join(engines)} {status}: {why}")


def fix_lines(result: FixResult, verb: str) -> list[tuple]:
    """One line per fix, pass by pass: `say` arguments. With several passes a pass starts with a
    line of its own, and a fix of what an earlier pass revealed says so."""
    lines = []
    for number, fixed in enumerate(result.passes, 1):
        if len(result.passes) > 1:
            lines.append((f"  pass {number}:",))
        for finding in fixed:
            title = finding.fix.title if finding.fix is not None else ""
            revealed = " (revealed by pass {})".format(number - 1) if any(f is finding for f in result.revealed) else ""
            lines.append(("  ", (verb, "green"), f" {finding.code} ", (finding.rule, "dim"),
                          f" {finding.file or ''}: {title}{revealed}"))
    return lines


def passes_text(result: FixResult) -> str:
    """' (2 passes)' when fixes revealed, or waited for, more fixes; '' for one pass."""
    return f" ({len(result.passes)} passes)" if len(result.passes) > 1 else ""


def write_fix_text(result: FixResult, console: Console, display: Display = Display()) -> None:
    """What fix did (or, with --diff, would do), then what is left, as `check` shows it."""
    after = result.after
    preview = result.diff is not None
    verb = "would fix" if preview or not result.written else "fixed"
    if result.applied and result.files:
        say(console, (after.target, "bold"), f": {verb} {len(result.applied)} finding(s) in {', '.join(result.files)}"
            + passes_text(result) + ("; nothing written (--diff)" if preview else ""))
        for line in fix_lines(result, verb):
            say(console, *line)
    else:
        say(console, (after.target, "bold"), ": nothing to fix")
    for reason in result.refused:
        say(console, "  ", ("not fixed", "yellow"), " ", reason)
    for err in result.errors:
        say(console, ("error:", "bold red"), " ", err)
    unsafe = [f for f in after.findings if f.fix is not None and f.fix.applicability is Applicability.UNSAFE]
    if unsafe:
        say(console, f"  {len(unsafe)} more fix(es) available with --unsafe-fixes")
    if preview:
        say(console, "left after applying this diff:")
    else:
        say(console, "left after fixing:" if result.written or not result.files else "left (nothing was written):")
    write_text([after], console, display)


def write_rule_summary(counts: dict[str, Any], total: int, failed: int, console: Console,
                       display: Display = Display()) -> None:
    """After several targets: per rule, on how many repositories it fired (--quiet: the totals alone)."""
    console.print()
    say(console, (f"{total} target(s)", "bold"), f": {total - failed} checked, {failed} could not be checked")
    if display.quiet:
        return
    if not counts:
        say(console, ("no rule fired", "green"))
        return
    say(console, f"{'rule':<30} {'repos':>6}  findings (error/warning/info)")
    for name, count in counts.items():
        sev = count.severities
        say(console, f"{name:<30} {count.repos:>6}  {sev['error']}/{sev['warning']}/{sev['info']}")
