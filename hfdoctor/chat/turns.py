"""Find the token that ends an assistant turn, by rendering one.

We render a conversation whose last message is an assistant reply carrying a needle
string, then read what the template writes right after the needle. The first token
there is what the model was trained to emit when it is done talking; serving stacks
stop generation only if that id is an eos id in generation_config.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jinja2

from hfdoctor.chat.render import render
from hfdoctor.repo import ModelRepo

NEEDLE = "HFDOCTOR_REPLY_7f3a"
TURN_PROBE = [
    {"role": "user", "content": "Say hi."},
    {"role": "assistant", "content": NEEDLE},
]


@dataclass(frozen=True)
class EndOfTurn:
    token: str
    token_id: int | None
    context: str  # the rendered text right after the reply, for messages


def special_tokens_for_render(repo: ModelRepo) -> dict[str, Any]:
    """The named special tokens transformers passes to templates."""
    tokens: dict[str, Any] = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = repo.special_token(key)
        if value is not None:
            tokens[key] = value
    return tokens


def first_token(repo: ModelRepo, text: str) -> tuple[str, int | None] | None:
    """The first token of `text`: the longest added/special token it starts with, else
    the tokenizer's first piece. Leading whitespace is skipped when a special token
    follows it, since that is the marker that ends the turn (Gemma writes a newline after)."""
    vocab = repo.vocab or {}
    specials = {t for t in (*repo.tokenizer_json_added.values(), *repo.added_tokens_decoder.values())}
    specials |= {s for s in special_tokens_for_render(repo).values() if isinstance(s, str)}
    stripped = text.lstrip()
    best = max((s for s in specials if s and stripped.startswith(s)), key=len, default=None)
    if best is not None:
        return best, vocab.get(best)
    if not text:
        return None
    tokenizer = repo.tokenizer
    if tokenizer is not None:
        encoding = tokenizer.encode(text, add_special_tokens=False)
        if encoding.ids:
            return encoding.tokens[0], encoding.ids[0]
    return None


def end_of_turn(repo: ModelRepo, template_text: str) -> EndOfTurn | None:
    """The end-of-turn token of `template_text`, or None when it cannot be told."""
    try:
        rendered = render(template_text, TURN_PROBE, special_tokens=special_tokens_for_render(repo)).text
    except (jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError):
        return None
    at = rendered.rfind(NEEDLE)
    if at < 0:
        return None
    after = rendered[at + len(NEEDLE) :]
    found = first_token(repo, after)
    if found is None:
        return None
    return EndOfTurn(found[0], found[1], after[:40])
