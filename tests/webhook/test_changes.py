"""Findings of two revisions matched as the runner matches them, on real checks of real files: a
line added above a problem moves it, but does not make it new; a reworded finding at the same
place is the same problem; what appears is introduced, what goes is fixed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfdoctor.findings import Finding, Severity
from hfdoctor.lint.check import Options, check_target
from hfdoctor.lint.baseline import fingerprint
from hfdoctor.webhook.changes import compare
from webhook_harness import BROKEN_TEMPLATE, QWEN3_TEMPLATE, seed_files


def checked(tmp_path: Path, name: str, template: str | None) -> list[Finding]:
    folder = tmp_path / name
    folder.mkdir()
    for rel, data in seed_files(template).items():
        (folder / rel).write_bytes(data)
    return check_target(str(folder), Options()).findings


@pytest.fixture(scope="module")
def revisions(tmp_path_factory) -> dict[str, list[Finding]]:
    root = tmp_path_factory.mktemp("revisions")
    shifted = "{#- a note the maintainer added #}\n" * 3 + BROKEN_TEMPLATE
    return {"none": checked(root, "none", None), "good": checked(root, "good", QWEN3_TEMPLATE),
            "broken": checked(root, "broken", BROKEN_TEMPLATE), "shifted": checked(root, "shifted", shifted)}


def codes(findings: list[Finding]) -> list[str]:
    return sorted(f.code for f in findings if f.severity > Severity.INFO)


def test_a_problem_that_moved_down_three_lines_is_not_new(revisions):
    [before] = [f for f in revisions["broken"] if f.rule == "chat-template-syntax-error"]
    [after] = [f for f in revisions["shifted"] if f.rule == "chat-template-syntax-error"]
    assert before.message != after.message and "template line" in before.message  # the line moved...
    assert fingerprint(before) == fingerprint(after)  # ...the problem did not
    changes = compare(revisions["broken"], revisions["shifted"])
    assert changes.introduced == [] and changes.fixed == []


def test_a_broken_template_is_introduced_and_a_template_added_fixes_its_absence(revisions):
    broke = compare(revisions["good"], revisions["broken"])
    assert codes(broke.introduced) == ["TPL003"] and codes(broke.fixed) == []
    added = compare(revisions["none"], revisions["good"])
    assert codes(added.fixed) == ["TPL001"] and codes(added.introduced) == []
    # The card's base_model error is worded with the evidence, which a template adds to: same place, same problem.
    card_before = next(f for f in revisions["none"] if f.code == "CARD001")
    card_after = next(f for f in revisions["good"] if f.code == "CARD001")
    assert card_before.message != card_after.message
    assert card_after in added.unchanged


def test_matching_counts_each_finding_once():
    def finding(message: str) -> Finding:
        return Finding("TOK002", "added-tokens-inconsistent", Severity.ERROR, "tokenizer_config.json", None,
                       "/added_tokens_decoder", message)

    base = [finding("token 5 differs"), finding("token 5 differs")]
    head = [finding("token 5 differs")] * 3 + [finding("token 9 differs")]
    changes = compare(base, head)
    assert len(changes.unchanged) == 2 and len(changes.introduced) == 2 and changes.fixed == []
    assert changes.digest(Severity.ERROR) == compare(base, list(reversed(head))).digest(Severity.ERROR)


def test_the_digest_names_the_findings_not_their_order_or_lines(revisions):
    a = compare(revisions["good"], revisions["broken"]).digest(Severity.ERROR)
    b = compare(revisions["good"], revisions["shifted"]).digest(Severity.ERROR)
    assert a == b and a != compare(revisions["good"], revisions["none"]).digest(Severity.ERROR)  # TPL001 instead
    assert json.dumps(a)  # a short text: it goes in a marker
