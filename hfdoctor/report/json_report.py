"""The JSON writer: exactly the shape CONTRACT.md documents, for `check` and `fix`.

The text is I-JSON (hfdoctor.report.inert.dumps): a string with lone surrogates (an
undecodable file name) gets U+FFFD in their place, and its raw bytes beside it as hex in
`<key>_raw` (`"file": "model\ufffd.bin", "file_raw": "6d6f64656cff2e62696e"`).
"""

from __future__ import annotations

from typing import Any

from hfdoctor import __version__
from hfdoctor.findings import Finding, FixResult, Report, TargetError
from hfdoctor.report.inert import dumps, json_safe


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
    return json_safe(out)  # also what survey.report_json hands to other processes and stores


def result_to_json(result: Report | TargetError) -> dict[str, Any]:
    return json_safe(result.to_json()) if isinstance(result, TargetError) else report_to_json(result)


def write_json(results: list[Report | TargetError]) -> str:
    """One object for one target (the contract's shape); a list of them for several."""
    payload: Any = result_to_json(results[0]) if len(results) == 1 else [result_to_json(r) for r in results]
    return dumps(payload, indent=2)


def write_jsonl_line(result: Report | TargetError) -> str:
    """`--format jsonl`: one compact report object per line, written as each target finishes."""
    return dumps(result_to_json(result), separators=(",", ":"))


def _fix_entry(finding: Finding) -> dict[str, Any]:
    assert finding.fix is not None
    return {"code": finding.code, "rule": finding.rule, "file": finding.file, **finding.fix.to_json()}


def write_fix_json(result: FixResult) -> str:
    """check's report of what is left, plus a `fixes` object saying what was done."""
    out = report_to_json(result.after)
    out["fixes"] = {
        "applied" if result.written else "planned": [{**_fix_entry(f), "pass": result.pass_of(f)}
                                                     for f in result.applied],
        "refused": result.refused,
        "files": result.files,
        "written": result.written,
        "passes": len(result.passes),
        "revealed": [_fix_entry(f) for f in result.revealed],  # fixed, but only an earlier pass's fixes revealed them
        "unfinished": [_fix_entry(f) for f in result.unfinished],  # still fixable when the passes ran out
    }
    if result.diff is not None:
        out["diff"] = result.diff
    if result.errors:
        out["internal_errors"] = result.errors
    return dumps(out, indent=2)
