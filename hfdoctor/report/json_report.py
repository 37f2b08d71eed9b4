"""The JSON writer: exactly the shape CONTRACT.md documents."""

from __future__ import annotations

import json
from typing import Any

from hfdoctor import __version__
from hfdoctor.findings import Report


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
