"""Every rule case of tests/rules/*.yml: build the case's folder, check it with only that
rule selected, and compare the findings with the case's (tests/rules/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hfdoctor.knowledge.upstream import Upstream
from hfdoctor.lint.check import check_target
from hfdoctor.lint.rules import find_rule
from rule_case import UPSTREAM, RuleCase, load_cases, materialise, mismatches, write_base

CASES = load_cases(Path(__file__).resolve().parent)
# Upstream files come from ../shared/upstream only: never the Hub, never this machine's cache.
OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)


@pytest.fixture(scope="session")
def shared_bases(tmp_path_factory):
    """base -> one private copy of it per session (per xdist worker), which the cases link to."""
    copies: dict[str, Path] = {}

    def get(base: dict[str, str]) -> Path:
        key = repr(sorted(base.items()))
        if key not in copies:
            copies[key] = write_base(base, tmp_path_factory.mktemp("base"))
        return copies[key]

    return get


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_case(case: RuleCase, shared_bases, tmp_path):
    folder = materialise(case, shared_bases(case.base), tmp_path)
    report = check_target(str(folder), select=[case.code], upstream=OFFLINE)
    assert not report.internal_errors, report.internal_errors
    problems = mismatches([f.to_json() for f in report.findings], case)
    assert not problems, "\n".join(problems)


def test_every_case_file_names_a_rule_and_has_a_firing_case():
    codes = {c.code for c in CASES}
    for code in codes:
        assert find_rule(code) is not None and find_rule(code).code == code, code
        assert any(c.expect for c in CASES if c.code == code), f"{code}: no case where the rule fires"
