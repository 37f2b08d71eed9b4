"""SARIF 2.1.0, for GitHub code scanning and other static-analysis dashboards."""

from __future__ import annotations

import json
from typing import Any

from hfdoctor import __version__
from hfdoctor.findings import Report, Severity, TargetError
from hfdoctor.rules import ALL_RULES

LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def write_sarif(reports: list[Report | TargetError]) -> str:
    rules = [
        {
            "id": r.code,
            "name": r.name,
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": r.doc},
            "help": {"text": r.doc},
            "defaultConfiguration": {"level": LEVEL[r.severity]},
        }
        for r in ALL_RULES
    ]
    index = {r.code: i for i, r in enumerate(ALL_RULES)}
    results: list[dict[str, Any]] = []
    failures = [r for r in reports if isinstance(r, TargetError)]
    for report in reports:
        if isinstance(report, TargetError):
            continue
        for f in report.findings:
            path = f"{report.target.rstrip('/')}/{f.file}" if f.file else report.target
            location: dict[str, Any] = {"artifactLocation": {"uri": path}}
            if f.line:
                location["region"] = {"startLine": f.line}
            result: dict[str, Any] = {
                "ruleId": f.code,
                "level": LEVEL[f.severity],
                "message": {"text": f.message},
                "locations": [{"physicalLocation": location}],
            }
            if f.code in index:
                result["ruleIndex"] = index[f.code]
            if f.fix is not None:
                result["properties"] = {"fix": f.fix.to_json()}
            results.append(result)
    sarif = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "hfdoctor", "version": __version__, "rules": rules}},
            "results": results,
            # Targets that could not be checked at all: tool notifications, not results.
            "invocations": [{
                "executionSuccessful": not failures,
                "toolExecutionNotifications": [
                    {"level": "error", "message": {"text": f"{f.target}: {f.message}"}} for f in failures
                ],
            }],
        }],
    }
    return json.dumps(sarif, indent=2, ensure_ascii=False)
