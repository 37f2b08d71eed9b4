"""A Markdown summary of a check, for a CI job page (GitHub's $GITHUB_STEP_SUMMARY).

One table per target with its warnings and errors (info findings are counted, not
listed: the summary is read at a glance), each row naming the rule, where, and the
message's first sentence. Text from the repository (target, file names, messages) is put in
code spans (hfdoctor.report.inert.code_span), so a crafted name cannot inject links,
autolinks, HTML or table cells into the job page.
"""

from __future__ import annotations

from hfdoctor.findings import Report, Severity, TargetError
from hfdoctor.report.inert import code_span

MAX_ROWS = 200  # per target: GitHub caps a step summary at 1 MiB
ICON = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "info"}


def first_sentence(message: str, limit: int = 240) -> str:
    cut = message.find(". ")
    text = message if cut < 0 else message[: cut + 1]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def write_markdown(reports: list[Report | TargetError]) -> str:
    lines = ["## hfdoctor", ""]
    for report in reports:
        if isinstance(report, TargetError):
            lines += [f"### {code_span(report.target)}", "", f"Could not be checked: {code_span(report.message)}", ""]
            continue
        summary = report.summary()
        lines += [f"### {code_span(report.target)}", "",
                  f"{summary['error']} error(s), {summary['warning']} warning(s), {summary['info']} info; "
                  f"{summary['fixable']} fixable with `hfdoctor fix`", ""]
        loud = [f for f in report.findings if f.severity >= Severity.WARNING]
        if loud:
            lines += ["| severity | rule | where | finding |", "|---|---|---|---|"]
            for f in loud[:MAX_ROWS]:
                where = (f.file or "") + (f":{f.line}" if f.line else "")
                lines.append(f"| {ICON[f.severity]} | {f.code} {f.rule} | {code_span(where, in_table=True)} | "
                             f"{code_span(first_sentence(f.message), in_table=True)} |")
            if len(loud) > MAX_ROWS:
                lines.append(f"\n… and {len(loud) - MAX_ROWS} more (see the SARIF results or `hfdoctor check`).")
            lines.append("")
        for error in report.internal_errors:
            lines += [f"Internal error (please report it): {code_span(error)}", ""]
    return "\n".join(lines) + "\n"
