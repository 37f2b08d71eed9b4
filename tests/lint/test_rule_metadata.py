"""Every rule is described the same way (issue 33, "Rules like ruff's"): its code prefix names
the package or module that holds it, its fix availability is declared and true of what it does,
and its documentation has the same sections."""

from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT, UPSTREAM, run_cli
from hfdoctor.lint.rules import ALL_RULES, find_rule
from hfdoctor.lint.rules.base import FixAvailability

# What each availability allows a finding's fix to be (None: no fix).
ALLOWED = {
    FixAvailability.NONE: {None},
    FixAvailability.SAFE: {None, "safe"},
    FixAvailability.UNSAFE: {None, "unsafe"},
    FixAvailability.SOMETIMES: {None, "safe", "unsafe"},
}

# Code prefix -> the module, or package, of hfdoctor.lint.rules that holds every rule of it.
HOME = {
    "ADP": "adapter",
    "CARD": "card",
    "CFG": "config",
    "CMP": "compat",
    "PUB": "publishing",
    "SEC": "security",
    "TOK": "tokenizer",
    "TPL": "template",
    "WGT": "weights",
}


def area_of(r) -> str:
    """The code prefix: CFG, TOK, TPL..."""
    return r.code.rstrip("0123456789")


def ids(rule) -> str:
    return rule.code


@pytest.mark.parametrize("rule", ALL_RULES, ids=ids)
def test_the_code_prefix_names_the_module_that_holds_the_rule(rule):
    home = f"hfdoctor.lint.rules.{HOME[area_of(rule)]}"
    module = rule.check_fn.__module__
    assert module == home or module.startswith(home + "."), f"{rule.code} lives in {module}, not under {home}"


def test_every_prefix_has_a_home_and_every_home_a_rule():
    assert {area_of(r) for r in ALL_RULES} == set(HOME)


def test_each_package_lists_its_rules_in_code_order():
    """`hfdoctor rules` prints the areas one after the other, each in code order."""
    areas = [area_of(r) for r in ALL_RULES]
    assert [a for i, a in enumerate(areas) if i == 0 or areas[i - 1] != a] == list(dict.fromkeys(areas)), \
        "an area's rules are split"
    for area in HOME:
        codes = [r.code for r in ALL_RULES if area_of(r) == area]
        assert codes == sorted(codes), area


def disagreements(fixes) -> list[str]:
    """(where, code, applicability or None) triples whose fix the code's rule does not declare."""
    return sorted({f"{code} ({find_rule(code).fix}) gave {kind or 'no'} fix on {where}" for where, code, kind in fixes
                   if kind not in ALLOWED[find_rule(code).fix]})


def test_fix_availability_is_declared_on_every_rule():
    assert all(isinstance(r.fix, FixAvailability) for r in ALL_RULES)
    # Not a column of one value: the metadata says something.
    assert {r.fix for r in ALL_RULES} == set(FixAvailability)
    # The comparison below can fail: a fix where none is declared, an unsafe one on a SAFE rule.
    assert disagreements([("x", "TPL007", "safe"), ("x", "TPL001", "unsafe"), ("x", "TPL013", "safe")]) == [
        "TPL001 (safe) gave unsafe fix on x", "TPL007 (none) gave safe fix on x", "TPL013 (unsafe) gave safe fix on x"]


def test_fixes_on_upstream_and_fixture_folders_are_what_their_rules_declare(upstream_reports):
    """Every upstream folder (those without a config.json too: template-only folders, a GGUF
    vocabulary) and the fixtures/ folders."""
    from hfdoctor.knowledge.upstream import Upstream
    from hfdoctor.lint.check import check_target

    reports = dict(upstream_reports)
    upstream = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
    for folder in sorted(UPSTREAM.iterdir()):
        if folder.is_dir() and folder.name not in reports:
            reports[folder.name] = check_target(str(folder), upstream=upstream)
    for folder in sorted((ROOT / "fixtures").iterdir()):
        if folder.is_dir():
            reports[f"fixtures/{folder.name}"] = check_target(str(folder), upstream=upstream)
    assert len(reports) >= 56 + 3
    fixes = [(where, f.code, str(f.fix.applicability) if f.fix else None)
             for where, report in reports.items() for f in report.findings]
    assert disagreements(fixes) == []
    # The test sees fixes of both kinds (it would pass vacuously on a corpus without any).
    assert {kind for *_, kind in fixes} >= {"safe", "unsafe"}


def test_fixes_on_the_community_corpus_are_what_their_rules_declare(community_checked):
    fixes = json.loads((community_checked / "fixes.json").read_text())
    assert disagreements(fixes) == []
    assert {kind for *_, kind in fixes} >= {"safe", "unsafe", None}


def test_explain_prints_the_fix_availability_in_its_header():
    header = run_cli("explain", "TPL007").stdout.splitlines()[0]
    assert header == "TPL007 double-bos (default severity: warning; fix: none)"
    assert run_cli("explain", "pad-token-is-eos").stdout.splitlines()[0] == \
        "TOK005 pad-token-is-eos (default severity: warning; fix: sometimes)"


def test_rules_lists_print_the_fix_availability():
    table = run_cli("rules", "--markdown").stdout.splitlines()
    assert table[0] == "| code | name | default severity | fix | what it flags |"
    rows = {line.split(" | ")[1]: line.split(" | ")[3] for line in table[2:] if line.startswith("| <a id=")}
    assert rows["`missing-chat-template`"] == "safe" and rows["`template-drift`"] == "unsafe"
    assert len(rows) == len(ALL_RULES)
    listed = {r["code"]: r["fix"] for r in json.loads(run_cli("rules", "--format", "json").stdout)}
    assert listed == {r.code: str(r.fix) for r in ALL_RULES}
    header, *lines = run_cli("rules").stdout.splitlines()
    assert header.split()[:4] == ["code", "name", "severity", "fix"]
    text = {line.split()[0]: line.split()[3] for line in lines}
    assert text == listed


# Sections of a rule's documentation (after its one-line summary), as `hfdoctor explain` prints them:
# each once, in this order; Severity (when a finding can be louder or quieter than the default) may
# come anywhere after Why. Other paragraphs (details, "How it is found:" ...) sit between them.
SECTIONS = ("Why", "Example", "Fix")
SECTION_LABEL = re.compile(r"^(Why|Example|Fix|Severity)\b[^:\n]{0,40}:")
def sections(doc: str) -> list[tuple[str, str]]:
    """(label, paragraph) for every labelled paragraph of a rule's doc, in order."""
    found = []
    for paragraph in doc.split("\n\n")[1:]:
        match = SECTION_LABEL.match(paragraph.strip())
        if match:
            found.append((match.group(1), paragraph.strip()))
    return found


@pytest.mark.parametrize("rule", ALL_RULES, ids=ids)
def test_every_rule_doc_has_the_same_sections(rule):
    doc = rule.doc
    summary, _, rest = doc.partition("\n")
    assert summary and summary.endswith("."), f"{rule.code}: the first line is a one-sentence summary"
    assert rest.startswith("\n"), f"{rule.code}: a blank line follows the summary"
    labels = [label for label, _ in sections(doc)]
    assert [label for label in labels if label in SECTIONS] == list(SECTIONS), \
        f"{rule.code}: wants Why:, Example:, Fix: once each, in this order; has {labels}"
    assert labels.count("Severity") <= 1 and labels.index("Severity" if "Severity" in labels else "Why") >= \
        labels.index("Why"), f"{rule.code}: Severity: once at most, after Why:"


@pytest.mark.parametrize("rule", ALL_RULES, ids=ids)
def test_the_fix_paragraph_agrees_with_the_fix_metadata(rule):
    """`Fix: none ...`, `Fix: safe ...`, `Fix: unsafe ...` or `Fix: sometimes ...`: the word explain's header prints."""
    fix = [paragraph for label, paragraph in sections(rule.doc) if label == "Fix"]
    assert fix, f"{rule.code}: no Fix: paragraph"
    said = re.match(r"Fix: (none|safe|unsafe|sometimes)\b", fix[0])
    assert said is not None and said.group(1) == str(rule.fix), \
        f"{rule.code} declares fix={rule.fix}, its doc says {fix[0][:80]!r}"
