"""The human writer: one line per finding, ruff-style, with rich colours on a terminal.

Short by default (CONTRACT "Text output is short"): warnings and errors, the compat line and a
summary line that counts the info findings and names `--show-info`, which shows them and the
other sections (template capabilities, weights); `--quiet` prints the summary line alone.
A finding's line is cut at about LINE_CHARS characters (plus the target's name, as long as the
user wrote it), at a clause where one is near
(`--verbose`: whole; `hfdoctor explain CODE` says why the rule matters), and each sentence is
printed once: the compat lines name the finding that says it instead of repeating it.
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
    """What the text output shows: info findings and sections (--show-info), or the summary alone
    (--quiet); whole messages (--verbose) or lines of about LINE_CHARS."""

    show_info: bool = False
    quiet: bool = False
    verbose: bool = False


LINE_CHARS = 160
MIN_MESSAGE_CHARS = 60  # a deep path still leaves this much of the message
# Where a cut message may end, best first: the end of a clause, then of a phrase.
CLAUSE_ENDS = (". ", ": ", "; ", " (", ", ", " - ")


def shorten(text: str, width: int) -> str:
    """`text` in at most about `width` characters: cut at a clause boundary in its last 40%,
    else at a word, and marked with ` …`; never mid-word."""
    if len(text) <= width:
        return text
    head = text[:max(1, width - 2)]
    ends = [head.rfind(end) for end in CLAUSE_ENDS]
    cut = max((at for at in ends if at >= width * 3 // 5), default=-1)
    if cut < 0:
        cut = head.rfind(" ")
    return (head[:cut] if cut > 0 else head).rstrip(" ,;:(") + " …"


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
        shown = [f for f in report.findings if f.severity is not Severity.INFO or display.show_info]
        for section, body in report.sections.items():
            if section == "compat" and isinstance(body, list):
                write_compat(console, body, shown, display)
            elif display.show_info:
                write_section(console, section, body, display)
        cut = False
        for f in shown:
            fix: list[Part] = [("  [fix: " + str(f.fix.applicability) + "]", "green")] if f.fix else []
            # The target is the user's own words (an absolute path in the hook): the message's
            # room is what the rest of the line leaves, as if the target were short.
            head = f"{_location('.', f.file, f.line)}: {f.severity} {f.code} {f.rule} "
            message = f.message
            if not display.verbose:
                room = max(MIN_MESSAGE_CHARS, LINE_CHARS - len(head) - (len(fix[0][0]) if fix else 0))
                message = shorten(message, room)
                cut = cut or message != f.message
            say(console, _location(report.target, f.file, f.line), ": ", (str(f.severity), STYLE[f.severity]), " ",
                (f.code, "bold"), " ", (f.rule, "dim"), " ", message, *fix)
        for err in report.internal_errors:
            say(console, ("internal error", "bold red"), " ", err, " (please report this)")
        console.print(summary_line(report, display, named=False, cut=cut))


def summary_line(report: Report, display: Display, named: bool, cut: bool = False) -> Text:
    """`1 error(s), 0 warning(s), and 4 info: --show-info; 1 fixable with `hfdoctor fix``, then
    what a baseline left out and where the whole messages are when some were cut."""
    head: list[Part] = [(report.target, "bold"), ": "] if named else []
    accepted = (report.sections.get("baseline") or {}).get("accepted", 0)
    tail = f"; {accepted} more accepted by the baseline" if accepted else ""
    tail += "; whole messages: --verbose" if cut else ""
    if not report.findings:
        return line(*head, ("no findings", "green"), tail)
    s = report.summary()
    counts = f"{s['error']} error(s), {s['warning']} warning(s), "
    counts += f"{s['info']} info" if display.show_info or not s["info"] else f"and {s['info']} info: --show-info"
    fixable = f"; {s['fixable']} fixable with `hfdoctor fix`"
    if s["unsafe_fixable"]:
        fixable += f" ({s['unsafe_fixable']} more with --unsafe-fixes)"
    return line(*head, counts + fixable + tail)


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


def write_section(console: Console, name: str, body: Any, display: Display = Display(verbose=True)) -> None:
    """Extra sections (e.g. template capabilities) as `name: key=value, ...` (cut at about LINE_CHARS
    but with --verbose)."""
    if name == "compat" and isinstance(body, list):
        write_compat(console, body)
    elif isinstance(body, dict):
        parts = []
        for key, value in body.items():
            if isinstance(value, (dict, list)) and len(str(value)) > 80:
                continue
            parts.append(f"{key}={value}")
        text = f"  {name}: {', '.join(parts)}"
        say(console, text if display.verbose else shorten(text, LINE_CHARS))


COMPAT_STYLE = {"loads": "green", "caveat": "yellow", "fails": "red", "unknown": "dim"}
NOT_VERIFIED = "not verified: "
MANY_ENGINES = 4  # a longer list of engines on a reason line is counted, not named


def write_compat(console: Console, entries: list[dict[str, str]], shown: list = (),
                 display: Display = Display()) -> None:
    """`compat: fails: tgi; loads: vllm, ...; unknown: ...` (engines grouped by status, worst first),
    then a line per reason: engines that share it share the line. A reason that a finding shown
    below says is named by its code, not said twice; `unknown` says what could not be verified."""
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
    grouped: dict[str, dict[str, list[str]]] = {}  # reason -> status -> engines, in the order met
    for e in entries:
        if e["status"] == "loads":
            continue
        if e["status"] == "unknown":
            why = e["why"].rpartition(NOT_VERIFIED)[2] if NOT_VERIFIED in e["why"] else e["why"]
            why = why if display.verbose else first_clause(why)  # "no config.json", not "...: nothing vLLM loads"
        else:
            why = _named_by_findings(e["why"], shown)
        grouped.setdefault(why, {}).setdefault(e["status"], []).append(e["engine"])
    for why, statuses_of in grouped.items():
        who = "; ".join(f"{_engines(engines)} {status}" for status, engines in statuses_of.items())
        shown_why = why if display.verbose else shorten(why, max(MIN_MESSAGE_CHARS, LINE_CHARS - len(who) - 6))
        say(console, f"    {who}: {shown_why}")


def first_clause(text: str) -> str:
    """The text up to its first `: ` outside parentheses (all of it when there is none)."""
    depth = 0
    for at, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and text.startswith(": ", at):
            return text[:at]
    return text


def _engines(engines: list[str]) -> str:
    return f"{len(engines)} engines" if len(engines) > MANY_ENGINES else ", ".join(engines)


def _named_by_findings(why: str, shown: list) -> str:
    """The reason with each sentence that a shown finding says replaced by `CODE below`."""
    for f in shown:
        message = f.message
        core = message[:message.rindex(" [")] if message.endswith("]") and " [" in message else message
        for sentence in (message, core):
            if len(sentence) >= 20 and sentence in why:
                why = why.replace(sentence, f"{f.code} below")
                break
    parts = why.split("; ")
    if len(parts) > 1 and all(p.endswith(" below") and " " not in p[:-6] for p in parts):
        why = ", ".join(dict.fromkeys(p[:-6] for p in parts)) + " below"  # "CMP001, TPL015 below"
    return why


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
        for line in [] if display.quiet else fix_lines(result, verb):
            say(console, *line)
    else:
        say(console, (after.target, "bold"), ": nothing to fix")
    for err in result.errors:
        say(console, ("error:", "bold red"), " ", err)
    if display.quiet:  # what was fixed, then what is left: a line each
        write_text([after], console, display)
        return
    for reason in result.refused:
        say(console, "  ", ("not fixed", "yellow"), " ", reason)
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
