"""What the model card promises against the shipped template: tool-support-mismatch (TPL016)
and card-example-fails (CARD003), must-fire and must-not-fire on real cards and templates
(the broken copies of Qwen3-8B: tests/rules/TPL016.yml and CARD003.yml)."""

from __future__ import annotations

import pytest

from conftest import UPSTREAM, check_json
from hfdoctor.chat.examples import PLACEHOLDER, card_examples

MISTRAL_V03 = UPSTREAM / "mistralai--Mistral-7B-Instruct-v0.3"


def found(report: dict, rule: str) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == rule]


def test_mistral_v03_card_promises_what_its_template_does_not_do():
    """Real: the card shows function calling and a system-prompt example; the shipped
    template ignores `tools` and refuses the system role."""
    report, _ = check_json(MISTRAL_V03)
    tools = found(report, "tool-support-mismatch")
    assert [f["severity"] for f in tools] == ["warning"] and "function calling" in tools[0]["message"]
    example = found(report, "card-example-fails")
    assert [f["severity"] for f in example] == ["warning"]
    assert example[0]["line"] == 125 and "system + user" in example[0]["message"]
    assert "Conversation roles must alternate" in example[0]["message"]


@pytest.mark.parametrize("name", ["Qwen--Qwen3-8B", "openai--gpt-oss-20b", "HuggingFaceTB--SmolLM3-3B",
                                  "microsoft--phi-4", "Qwen--Qwen2.5-Coder-32B-Instruct", "google--gemma-2b-it",
                                  "mistralai--Mistral-7B-Instruct-v0.2"])
def test_cards_whose_template_does_what_they_show(name):
    report, _ = check_json(UPSTREAM / name)
    assert found(report, "tool-support-mismatch") == [] and found(report, "card-example-fails") == []


def test_card_examples_are_read_not_run():
    body = (MISTRAL_V03 / "README.md").read_text()
    examples = card_examples(body)
    assert any(e.messages[0][0] == "system" and "pirate" in e.messages[0][1] for e in examples)
    hostile = "```python\nimport os; os.system('touch /tmp/pwned')\nmessages = [{'role': 'user', 'content': prompt}]\n```"
    parsed = card_examples(hostile)
    assert [e.messages for e in parsed] == [(("user", PLACEHOLDER),)] and parsed[0].literal == (False,)
    assert card_examples("```python\n" + "[" * 5000 + "\n```") == []  # deeply nested: no example, no crash