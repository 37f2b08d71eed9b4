"""The documentation: the MkDocs site builds with --strict (broken links and anchors fail it), its rules reference
has a page for every rule at the helpUri SARIF gives, and the README and the user pages hold no notes for the
project's developers (those live in docs/contributing.md)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from hfdoctor.lint.rules import ALL_RULES
from hfdoctor.report.sarif import DOCS_URL, rule_help_uri

# What only the project's developers need: test files, CI, the machine the tests run on.
INTERNAL = ("tests/", ".ci/", "2-core", "this project's", "this session", "this round")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("MkDocs Material is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_the_site_builds_strictly_with_a_page_for_every_rule(site):
    for rule in ALL_RULES:
        page = site / rule_help_uri(rule).removeprefix(DOCS_URL) / "index.html"
        assert page.is_file(), rule.code
        text = page.read_text(encoding="utf-8")
        assert rule.code in text and "Why" in text and "Fix" in text, rule.code
    index = (site / "rules" / "index.html").read_text(encoding="utf-8")
    assert all(f'href="{r.name}/"' in index for r in ALL_RULES)


def test_a_marker_in_a_rule_doc_is_shown_not_swallowed_as_html(site):
    page = (site / "rules" / "template-unknown-token" / "index.html").read_text(encoding="utf-8")
    assert "&lt;think&gt;" in page and "<think>" not in page


def test_the_readme_is_short_and_for_users():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 200
    development = readme.index("## Development")
    assert [note for note in INTERNAL if note in readme[:development]] == []


def test_the_user_pages_hold_no_developer_notes():
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name == "contributing.md":
            continue
        text = page.read_text(encoding="utf-8")
        assert [note for note in INTERNAL if note in text] == [], page.name
