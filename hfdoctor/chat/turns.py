"""Find the token that ends an assistant turn, by rendering one.

The template analysis renders a conversation whose last message is an assistant reply
carrying a needle string; we read what the template writes right after the needle.
The first token there is what the model was trained to emit when it is done talking;
serving stacks stop generation only if that id is an eos id in generation_config.json.
"""

from __future__ import annotations

from dataclasses import dataclass

from hfdoctor.chat import corpus
from hfdoctor.chat.analysis import analyze, special_tokens_for_render
from hfdoctor.repo import ModelRepo

__all__ = ["EndOfTurn", "end_of_turn", "first_token", "text_after_reply"]


@dataclass(frozen=True)
class EndOfTurn:
    token: str
    token_id: int | None
    context: str  # the rendered text right after the reply, for messages


def first_token(repo: ModelRepo, text: str) -> tuple[str, int | None] | None:
    """The first token of `text`: the longest added/special token it starts with, else
    the tokenizer's first piece. Leading whitespace is skipped when a special token
    follows it, since that is the marker that ends the turn (Gemma writes a newline after)."""
    vocab = repo.vocab or {}
    specials = set(repo.added_token_strings)
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


def text_after_reply(rendered: str | None, reply: str = corpus.ASSISTANT_1) -> str | None:
    """What the template writes after the last assistant reply, or None."""
    if rendered is None:
        return None
    at = rendered.rfind(reply)
    return rendered[at + len(reply):] if at >= 0 else None


def end_of_turn(repo: ModelRepo, template_text: str) -> EndOfTurn | None:
    """The end-of-turn token of `template_text`, or None when it cannot be told."""
    after = text_after_reply(analyze(repo, template_text).rendered("reply", False))
    if after is None:
        return None
    found = first_token(repo, after)
    if found is None:
        return None
    return EndOfTurn(found[0], found[1], after[:40])
