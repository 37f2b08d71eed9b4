"""SARIF 2.1.0, for GitHub code scanning and other static-analysis dashboards.

What validators and code scanning expect (checked in tests/report/test_sarif.py against the
official OASIS schema with URI formats):
- a local file's `uri` is relative to the directory hfdoctor ran in (`uriBaseId`
  %SRCROOT%, which `originalUriBaseIds` maps to that directory), percent-encoded per
  RFC 3986 (spaces, '#', '%', non-ASCII, undecodable bytes); a path outside it is an
  absolute file:// URI; a Hub file is its https://huggingface.co/.../blob/<commit>/ URL;
- the driver has an `informationUri`, each rule a `helpUri` (its page of the documentation
  site's rules reference, which docs/hooks/rules_reference.py generates) and a PascalCase `name` (the contract name is kept in `properties`); a rule
  split from an old code lists it in `deprecatedIds` (and its name in `deprecatedNames`);
- a file-level result has a region: its first line;
- the text is I-JSON: a lone surrogate in a message becomes U+FFFD, the raw bytes go in the
  result's `properties.message_raw` (hex), as `<key>_raw` does in the JSON output.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hfdoctor import __version__
from hfdoctor.findings import Finding, Report, Severity, TargetError
from hfdoctor.report.inert import dumps, has_surrogate, raw_bytes
from hfdoctor.lint.rules import ALL_RULES, find_rule
from hfdoctor.lint.rules.base import Rule

LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# The project's home (pyproject's [project.urls]) and its documentation site (mkdocs.yml's site_url).
HOMEPAGE = "https://github.com/hfdoctor/hfdoctor"
DOCS_URL = "https://hfdoctor.github.io/hfdoctor/"
SRCROOT = "%SRCROOT%"


def rule_help_uri(rule: Rule) -> str:
    """The rule's page in the documentation site (one page per rule name, as ruff's are)."""
    return f"{DOCS_URL}rules/{rule.name}/"


def pascal_case(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("-"))


def deprecated(r: Rule) -> dict[str, list[str]]:
    """SARIF's deprecatedIds/deprecatedNames (2.1.0, 3.49.4 and 3.49.8): the old code a rule was
    split from, so dashboards carry results of the old id over to each rule split from it."""
    old = [code for code in r.aliases if code != r.code]
    if not old:
        return {}
    names = [pascal_case(was.name) for was in (find_rule(code) for code in old) if was is not None and was is not r]
    return {"deprecatedIds": old, **({"deprecatedNames": names} if names else {})}


def encode_path(path: str) -> str:
    """A relative path as an RFC 3986 URI reference: every byte outside the unreserved set
    and '/' percent-encoded (names that are not valid UTF-8 keep their bytes)."""
    return quote(raw_bytes(path.replace(os.sep, "/")), safe="/")


def artifact_location(report: Report, file: str | None, cwd: Path) -> dict[str, str]:
    source = report.sections.get("source") or {}
    if source.get("kind") == "hub":
        commit = (report.sections.get("revision") or {}).get("commit") or "main"
        base = f"https://huggingface.co/{encode_path(report.target)}"
        return {"uri": f"{base}/blob/{commit}/{encode_path(file)}" if file else base}
    path = Path(report.target, file) if file else Path(report.target)
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(cwd)
    except ValueError:  # outside the directory hfdoctor ran in: an absolute file URI
        return {"uri": "file://" + encode_path(str(absolute))}
    return {"uri": encode_path(str(relative)) if str(relative) != "." else "", "uriBaseId": SRCROOT}


def _result(report: Report, finding: Finding, index: dict[str, int], cwd: Path) -> dict[str, Any]:
    location: dict[str, Any] = {"artifactLocation": artifact_location(report, finding.file, cwd)}
    if finding.file:
        # A finding about a whole file points at its first line (code scanning needs a region).
        location["region"] = {"startLine": finding.line or 1}
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": LEVEL[finding.severity],
        "message": {"text": finding.message},
        "locations": [{"physicalLocation": location}],
    }
    if finding.code in index:
        result["ruleIndex"] = index[finding.code]
    properties: dict[str, Any] = {}
    if finding.fix is not None:
        properties["fix"] = finding.fix.to_json()
    if finding.severity_reason:
        properties["severity_reason"] = finding.severity_reason
    if has_surrogate(finding.message):  # SARIF's message object has no room for it: the property bag has
        properties["message_raw"] = raw_bytes(finding.message).hex()
    if properties:
        result["properties"] = properties
    return result


def write_sarif(reports: list[Report | TargetError], cwd: Path | None = None) -> str:
    cwd = Path(os.path.abspath(cwd or os.getcwd()))
    rules = [
        {
            "id": r.code,
            "name": pascal_case(r.name),
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": r.doc},
            "help": {"text": r.doc},
            "helpUri": rule_help_uri(r),
            "defaultConfiguration": {"level": LEVEL[r.severity]},
            "properties": {"name": r.name},
            **deprecated(r),
        }
        for r in ALL_RULES
    ]
    index = {r.code: i for i, r in enumerate(ALL_RULES)}
    failures = [r for r in reports if isinstance(r, TargetError)]
    results = [_result(report, f, index, cwd) for report in reports if not isinstance(report, TargetError)
               for f in report.findings]
    sarif = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "hfdoctor", "version": __version__, "informationUri": HOMEPAGE,
                                "rules": rules}},
            "originalUriBaseIds": {SRCROOT: {"uri": "file://" + encode_path(str(cwd)).rstrip("/") + "/"}},
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
    # raw=False: the schema allows no `<key>_raw` beside its strings (message_raw is above).
    return dumps(sarif, raw=False, indent=2, ensure_ascii=True)
