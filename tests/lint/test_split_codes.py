"""Split codes keep their old codes and names as aliases (CONTRACT.md, 0.4): TOK001 and SEC001 were
one rule each, and `--select`, `--ignore`, `explain` and SARIF still know them."""

from __future__ import annotations

import json

from conftest import UPSTREAM, check_json, run_cli
from hfdoctor.lint.rules import ALL_RULES, find_rule, selected_rules, split_codes, standing_for

TOK001_SPLIT = ["TOK001", "TOK007", "TOK008", "TOK009", "TOK010", "TOK011", "TOK012"]
SEC001_SPLIT = ["SEC001", "SEC004", "SEC005", "SEC006", "SEC007", "SEC008", "SEC009"]
DEEPSEEK_DISTILL = UPSTREAM / "deepseek-ai--DeepSeek-R1-Distill-Qwen-32B"


def codes(rules) -> list[str]:
    return [r.code for r in rules]


def test_old_codes_stand_for_every_rule_split_from_them():
    assert codes(standing_for("TOK001")) == TOK001_SPLIT
    assert codes(standing_for("special-token-missing")) == TOK001_SPLIT
    assert codes(standing_for("sec001")) == SEC001_SPLIT
    assert codes(standing_for("unsafe-pickle")) == SEC001_SPLIT
    assert standing_for("TOK002") == [] and standing_for("TOK007") == []
    assert {old: codes(rules) for old, rules in split_codes().items()} == {"TOK001": TOK001_SPLIT,
                                                                          "SEC001": SEC001_SPLIT}
    # The core kind keeps the old code and name; the others name their kind.
    assert find_rule("TOK001").name == "special-token-missing" and find_rule("SEC001").name == "unsafe-pickle"
    assert all(find_rule(c).aliases == ("TOK001",) for c in TOK001_SPLIT[1:])
    assert all(find_rule(c).aliases == ("SEC001",) for c in SEC001_SPLIT[1:])
    assert len({r.name for r in ALL_RULES}) == len(ALL_RULES)


def test_select_and_ignore_take_the_old_code_and_name():
    for old in ("TOK001", "tok001", "special-token-missing"):
        assert codes(selected_rules([old])) == TOK001_SPLIT, old
        assert not set(TOK001_SPLIT) & set(codes(selected_rules(None, [old]))), old
    for old in ("SEC001", "unsafe-pickle"):
        assert codes(selected_rules([old])) == SEC001_SPLIT, old
        assert not set(SEC001_SPLIT) & set(codes(selected_rules(None, [old]))), old
    # A new code is one kind; selecting the old code and ignoring one new code keeps the others.
    assert codes(selected_rules(["TOK010"])) == ["TOK010"]
    assert codes(selected_rules(["TOK001"], ["TOK010"])) == [c for c in TOK001_SPLIT if c != "TOK010"]
    # Prefixes work as before: TOK takes every tokenizer rule, TOK00 still takes all of TOK001's kinds.
    assert set(TOK001_SPLIT) <= set(codes(selected_rules(["TOK"]))) and "TOK002" in codes(selected_rules(["TOK"]))
    assert set(TOK001_SPLIT) <= set(codes(selected_rules(["TOK00"])))
    assert not {c for c in codes(selected_rules(None, ["SEC"])) if c.startswith("SEC")}
    # Unrelated rules are untouched by the aliases.
    assert codes(selected_rules(["TOK002"])) == ["TOK002"]
    assert "TOK002" in codes(selected_rules(None, ["TOK001"]))


def test_ignore_of_the_old_code_drops_the_split_finding_through_the_cli():
    """DeepSeek-R1-Distill-Qwen-32B keeps Qwen2.5's bos in config.json: TOK010 (TOK001 before 0.4)."""
    report, _ = check_json(DEEPSEEK_DISTILL, "--select", "TOK001")
    assert [(f["code"], f["rule"], f["severity"]) for f in report["findings"]] == [
        ("TOK010", "special-token-ids-mismatch", "info")]
    assert "bos_token_id is 151643" in report["findings"][0]["message"]
    for ignore in ("TOK001", "special-token-missing", "TOK010"):
        report, _ = check_json(DEEPSEEK_DISTILL, "--ignore", ignore)
        assert not [f for f in report["findings"] if f["code"].startswith("TOK0") and f["code"] in TOK001_SPLIT]


def test_explain_an_old_code_lists_the_rules_it_stands_for():
    proc = run_cli("explain", "TOK001")
    assert proc.returncode == 0 and proc.stdout.startswith("TOK001 special-token-missing")
    assert "now stands for these" in proc.stdout
    for code in TOK001_SPLIT:
        assert f"  {code} {find_rule(code).name}: " in proc.stdout, code
    by_name = run_cli("explain", "unsafe-pickle")
    assert all(f"  {code} {find_rule(code).name}: " in by_name.stdout for code in SEC001_SPLIT)
    split = run_cli("explain", "SEC005")
    assert split.stdout.startswith("SEC005 embedded-pickle") and "Alias: SEC001, unsafe-pickle" in split.stdout
    assert "now stands for" not in run_cli("explain", "TOK002").stdout


def test_rules_json_gives_each_rule_its_aliases():
    rules = {r["code"]: r for r in json.loads(run_cli("rules", "--format", "json").stdout)}
    assert rules["TOK010"]["aliases"] == ["TOK001"] and rules["SEC005"]["aliases"] == ["SEC001"]
    assert rules["TOK001"]["aliases"] == [] and rules["TPL001"]["aliases"] == []


def test_rules_markdown_says_what_each_old_code_stands_for():
    out = run_cli("rules", "--markdown").stdout
    for old, split in (("TOK001", TOK001_SPLIT), ("SEC001", SEC001_SPLIT)):
        [line] = [line for line in out.splitlines() if line.startswith(f"- {old} ")]
        assert all(f"[{code}](#{code.lower()})" in line for code in split), line
        assert all(f'<a id="{code.lower()}"></a>{code} |' in out for code in split)


def test_sarif_lists_the_split_rules_with_the_old_id_deprecated(tmp_path):
    proc = run_cli("check", str(DEEPSEEK_DISTILL), "--format", "sarif", "--select", "TOK001")
    sarif = json.loads(proc.stdout)
    rules = {r["id"]: r for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert set(TOK001_SPLIT + SEC001_SPLIT) <= set(rules)
    assert rules["TOK010"]["deprecatedIds"] == ["TOK001"]
    assert rules["TOK010"]["deprecatedNames"] == ["SpecialTokenMissing"]
    assert rules["SEC009"]["deprecatedIds"] == ["SEC001"]
    assert "deprecatedIds" not in rules["TOK001"] and "deprecatedIds" not in rules["TOK002"]
    [result] = sarif["runs"][0]["results"]
    assert result["ruleId"] == "TOK010" and rules[result["ruleId"]]["name"] == "SpecialTokenIdsMismatch"
