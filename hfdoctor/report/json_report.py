"""The JSON writer: exactly the shape CONTRACT.md documents, for `check` and `fix`."""

from __future__ import annotations

import json
from typing import Any

from hfdoctor import __version__
from hfdoctor.findings import Finding, FixResult, Report


def report_to_json(report: Report) -> dict[str, Any]:
    out: dict[str, Any] = {
        "hfdoctor": __version__,
        "target": report.target,
        "lineage": report.lineage,
        "findings": [f.to_json() for f in report.findings],
        "summary": report.summary(),
    }
    out.update(report.sections)
    if report.internal_errors:
        out["internal_errors"] = report.internal_errors
    return out


def write_json(reports: list[Report]) -> str:
    """One object for one target (the contract's shape); a list of them for several."""
    payload: Any = report_to_json(reports[0]) if len(reports) == 1 else [report_to_json(r) for r in reports]
    return json.dumps(payload, indent=2, ensure_ascii=False)


def _fix_entry(finding: Finding) -> dict[str, Any]:
    assert finding.fix is not None
    return {"code": finding.code, "rule": finding.rule, "file": finding.file, **finding.fix.to_json()}


def write_fix_json(result: FixResult) -> str:
    """check's report of what is left, plus a `fixes` object saying what was done."""
    out = report_to_json(result.after)
    out["fixes"] = {
        "applied" if result.written else "planned": [_fix_entry(f) for f in result.applied],
        "refused": result.refused,
        "files": result.files,
        "written": result.written,
    }
    if result.diff is not None:
        out["diff"] = result.diff
    if result.errors:
        out["internal_errors"] = result.errors
    return json.dumps(out, indent=2, ensure_ascii=False)
