"""Every rule is described the same way (issue 33, "Rules like ruff's"): its code prefix names
the package or module that holds it, and its documentation has the same sections."""

from __future__ import annotations

import pytest

from hfdoctor.lint.rules import ALL_RULES

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


def ids(rule) -> str:
    return rule.code


@pytest.mark.parametrize("rule", ALL_RULES, ids=ids)
def test_the_code_prefix_names_the_module_that_holds_the_rule(rule):
    home = f"hfdoctor.lint.rules.{HOME[rule.area]}"
    module = rule.check_fn.__module__
    assert module == home or module.startswith(home + "."), f"{rule.code} lives in {module}, not under {home}"


def test_every_prefix_has_a_home_and_every_home_a_rule():
    assert {r.area for r in ALL_RULES} == set(HOME)


def test_each_package_lists_its_rules_in_code_order():
    """`hfdoctor rules` prints the areas one after the other, each in code order."""
    areas = [r.area for r in ALL_RULES]
    assert [a for i, a in enumerate(areas) if i == 0 or areas[i - 1] != a] == list(dict.fromkeys(areas)), \
        "an area's rules are split"
    for area in HOME:
        codes = [r.code for r in ALL_RULES if r.area == area]
        assert codes == sorted(codes), area
