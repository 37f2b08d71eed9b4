"""SARIF that validates: the official OASIS 2.1.0 schema (tests/schemas, with provenance),
URI formats checked, on folder and file names with spaces, '#', '%', commas and non-ASCII."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, run_cli

SCHEMA = json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
SEED = ROOT / "fixtures" / "seed-incident"
AWKWARD = "seed incident#1 100% ü,ok"


def validator() -> jsonschema.Draft4Validator:
    checker = jsonschema.FormatChecker()  # every format (the schema is draft-04 but uses uri-reference)
    assert {"uri", "uri-reference"} <= set(checker.checkers), "rfc3986-validator must be installed"
    return jsonschema.Draft4Validator(SCHEMA, format_checker=checker)


def errors(document: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(document)]


@pytest.fixture(scope="module")
def awkward_sarif(tmp_path_factory) -> tuple[dict, Path]:
    """The seed incident in a folder whose name needs every kind of escaping, with an
    awkwardly named extra file, checked from the folder above it (as the Action does)."""
    root = tmp_path_factory.mktemp("sarif")
    folder = root / AWKWARD
    shutil.copytree(SEED, folder)
    (folder / "notes #2 ü.bin").write_bytes(b"\x80\x03cos\nsystem\nq\x00.")  # a pickle: a finding on it
    proc = run_cli("check", AWKWARD, "--format", "sarif", cwd=root)
    assert proc.returncode == 1, proc.stderr
    return json.loads(proc.stdout), root


def test_the_validator_rejects_what_code_scanning_rejects():
    """The old output (a raw space and '#' in a uri) fails this validator: it checks formats."""
    bad = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [
        {"message": {"text": "m"}, "locations": [{"physicalLocation": {"artifactLocation": {
            "uri": "seed incident#1/README.md#x"}}}]}]}]}
    assert errors(bad)


def test_sarif_validates_against_the_official_schema(awkward_sarif):
    sarif, _ = awkward_sarif
    assert errors(sarif) == []


def test_uris_are_percent_encoded_and_relative_to_the_source_root(awkward_sarif):
    sarif, root = awkward_sarif
    run = sarif["runs"][0]
    base = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert base.startswith("file:///") and base.endswith("/")
    locations = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"]]
    uris = {loc["uri"] for loc in locations}
    assert "seed%20incident%231%20100%25%20%C3%BC%2Cok/README.md" in uris
    assert any(uri.endswith("/notes%20%232%20%C3%BC.bin") for uri in uris)
    assert all(loc.get("uriBaseId") == "%SRCROOT%" for loc in locations)
    from urllib.parse import unquote
    readme = next(u for u in uris if u.endswith("README.md"))
    assert (root / unquote(readme)).is_file()


def test_driver_rules_and_regions(awkward_sarif):
    sarif, _ = awkward_sarif
    run = sarif["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["informationUri"].startswith("https://")
    rules = {r["id"]: r for r in driver["rules"]}
    assert rules["TPL001"]["name"] == "MissingChatTemplate"
    assert rules["TPL001"]["properties"]["name"] == "missing-chat-template"
    # Each rule's page in the documentation site (tests/test_docs.py builds it and finds every page).
    assert all(r["helpUri"] == f"https://hfdoctor.github.io/hfdoctor/rules/{r['properties']['name']}/"
               for r in rules.values())
    for result in run["results"]:
        location = result["locations"][0]["physicalLocation"]
        if location["artifactLocation"]["uri"].rsplit("/", 1)[-1]:
            assert location["region"]["startLine"] >= 1


def test_a_target_outside_the_working_directory_is_an_absolute_file_uri(tmp_path):
    folder = tmp_path / "a b"
    shutil.copytree(SEED, folder)
    proc = run_cli("check", str(folder), "--format", "sarif", cwd=ROOT)
    sarif = json.loads(proc.stdout)
    assert errors(sarif) == []
    uri = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri.startswith("file:///") and "a%20b/" in uri
    assert os.sep == "/"  # (file URIs here are POSIX paths)
