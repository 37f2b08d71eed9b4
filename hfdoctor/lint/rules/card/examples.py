"""CARD003 card-example-fails: the model card's own usage example (a messages list),
rendered with the shipped chat template."""

from __future__ import annotations

from typing import Iterator

from hfdoctor.chat.analysis import special_tokens_for_render, trusted_templates
from hfdoctor.chat.examples import card_examples, missing_content, render_examples, summary
from hfdoctor.findings import Finding, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.lint.rules.template.common import default_template


@rule("CARD003", "card-example-fails", Severity.WARNING, fix=FixAvailability.NONE)
def card_example_fails(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A usage example in the model card (a messages list) fails or renders wrongly with the shipped template.

    Why: users copy the card's example first. When the shipped template raises on it (a
    system message the template refuses, roles it does not alternate) or silently leaves
    part of it out (a system prompt that is never rendered), the first thing a user tries
    fails, or the model never sees the instructions the card shows how to give.

    How it is found: Python code blocks of README.md are parsed (never run); a list of
    `{"role": ..., "content": ...}` dicts is a conversation (a content that is not a
    string literal becomes a placeholder). It is rendered with the default template and the
    tokenizer's special tokens, as apply_chat_template would, in the bounded renderer.

    Example: Mistral-7B-Instruct-v0.3's card shows a pirate system prompt, and a template
    that raises "Conversation roles must alternate user/assistant/user/assistant/...".

    Fix: none automatic; change the example or ship a template that handles it.
    """
    card = repo.card
    found = default_template(repo)
    if card is None or found is None:
        return
    source, _ = found
    examples = card_examples(card.body)
    if not examples:
        return
    offset = card.text[: len(card.text) - len(card.body)].count("\n") if card.text.endswith(card.body) else 0
    renders = render_examples(source.text, examples, special_tokens_for_render(repo), trusted_templates())
    for example, rendered in zip(examples, renders):
        where = f"README.md line {example.line + offset}"
        if rendered.error is not None:
            yield self.finding(
                repo,
                f"the model card's example ({where}: {summary(example)}) fails with the shipped chat template "
                f"({source.where}): {rendered.error}. Users who copy it get this error first.",
                file="README.md", line=example.line + offset,
            )
            continue
        left_out = missing_content(example, rendered.text or "")
        if left_out:
            role, text = left_out[0]
            yield self.finding(
                repo,
                f"the model card's example ({where}: {summary(example)}) renders without its {role} message "
                f"({text[:60]!r}): the shipped chat template ({source.where}) leaves it out, so the model never sees it.",
                file="README.md", line=example.line + offset,
            )


RULES = [card_example_fails]
