"""GitHub Actions workflow commands: each finding becomes an annotation on the file.

Warnings and errors only, unless --show-info (CONTRACT "Text output is short"). Messages and
properties are escaped as GitHub's toolkit escapes them (hfdoctor.report.inert), so a file
name or a message cannot end the annotation or start another command.
"""

from __future__ import annotations

from hfdoctor.findings import Report, Severity, TargetError
from hfdoctor.report.inert import github_data, github_property

LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def write_github(reports: list[Report | TargetError], show_info: bool = False) -> str:
    lines = []
    for report in reports:
        if isinstance(report, TargetError):
            lines.append(f"::error title={github_property(f'hfdoctor could not check {report.target}')}::"
                         f"{github_data(report.message)}")
            continue
        for f in report.findings:
            if f.severity is Severity.INFO and not show_info:
                continue
            props = []
            path = f"{report.target.rstrip('/')}/{f.file}" if f.file else report.target
            props.append(f"file={github_property(path)}")
            if f.line:
                props.append(f"line={f.line}")
            props.append(f"title={github_property(f'{f.code} {f.rule}')}")
            lines.append(f"::{LEVEL[f.severity]} {','.join(props)}::{github_data(f.message)}")
        for err in report.internal_errors:
            lines.append(f"::error title=hfdoctor internal error::{github_data(err)}")
    return "\n".join(lines)
