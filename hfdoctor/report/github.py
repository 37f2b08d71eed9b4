"""GitHub Actions workflow commands: each finding becomes an annotation on the file."""

from __future__ import annotations

from hfdoctor.findings import Report, Severity, TargetError

LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def write_github(reports: list[Report | TargetError]) -> str:
    lines = []
    for report in reports:
        if isinstance(report, TargetError):
            lines.append(f"::error title=hfdoctor could not check {_escape_property(report.target)}::"
                         f"{_escape_data(report.message)}")
            continue
        for f in report.findings:
            props = []
            path = f"{report.target.rstrip('/')}/{f.file}" if f.file else report.target
            props.append(f"file={_escape_property(path)}")
            if f.line:
                props.append(f"line={f.line}")
            props.append(f"title={_escape_property(f'{f.code} {f.rule}')}")
            lines.append(f"::{LEVEL[f.severity]} {','.join(props)}::{_escape_data(f.message)}")
        for err in report.internal_errors:
            lines.append(f"::error title=hfdoctor internal error::{_escape_data(err)}")
    return "\n".join(lines)
