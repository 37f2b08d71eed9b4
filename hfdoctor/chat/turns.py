"""Find the token that ends an assistant turn, by rendering one.

The template analysis renders a conversation whose last message is an assistant reply
carrying a needle string; we read what the template writes right after the needle.
The first token there is what the model was trained to emit when it is done talking;
serving stacks stop generation only if that id is an eos id in generation_config.json.

Only a control token (an added or special token of the tokenizer) can end a turn: a
template that writes plain text after the reply (`\n`, `<`, `[`) gives no token to stop
on, and that is said as such, never turned into a stop id. Harmony templates (gpt-oss:
`<|channel|>` in their renders) are different: `<|end|>` closes every message, the
reasoning channel included, and generation ends on `<|return|>` (the answer) or
`<|call|>` (a tool call).
"""

from __future__ import annotations

from dataclasses import dataclass

from hfdoctor.chat import corpus
from hfdoctor.chat.analysis import analyze, special_tokens_for_render
from hfdoctor.repo import ModelRepo

__all__ = ["EndOfTurn", "end_of_turn", "turn_stop", "control_token_at", "text_after_reply", "HARMONY_STOPS"]

# What harmony generation stops on; <|end|> must not be one (it ends the analysis channel too).
HARMONY_STOPS = ("<|return|>", "<|call|>")
HARMONY_MARKER = "<|channel|>"


@dataclass(frozen=True)
class EndOfTurn:
    token: str | None  # the control token that ends a turn; None: the template writes plain text there
    token_id: int | None
    context: str  # the rendered text right after the reply, for messages
    # The tokens generation must stop on, when not just `token` (harmony).
    stops: tuple[str, ...] = ()


def control_token_at(repo: ModelRepo, text: str) -> tuple[str, int | None] | None:
    """The longest added/special token `text` starts with (after leading whitespace: Gemma
    writes a newline after <end_of_turn>), or None when it starts with ordinary text."""
    specials = set(repo.added_token_strings)
    specials |= {s for s in special_tokens_for_render(repo).values() if isinstance(s, str)}
    stripped = text.lstrip()
    best = max((s for s in specials if s and stripped.startswith(s)), key=len, default=None)
    return (best, (repo.vocab or {}).get(best)) if best is not None else None


def text_after_reply(rendered: str | None, reply: str = corpus.ASSISTANT_1) -> str | None:
    """What the template writes after the last assistant reply, or None."""
    if rendered is None:
        return None
    at = rendered.rfind(reply)
    return rendered[at + len(reply):] if at >= 0 else None


def end_of_turn(repo: ModelRepo, template_text: str) -> EndOfTurn | None:
    """The end-of-turn token of `template_text`, or None when it cannot be told (the
    reply does not render, or nothing at all follows it)."""
    rendered = analyze(repo, template_text).rendered("reply", False)
    after = text_after_reply(rendered)
    if after is None:
        return None
    vocab = repo.vocab or {}
    if HARMONY_MARKER in (rendered or "") and all(stop in vocab for stop in HARMONY_STOPS):
        return EndOfTurn(HARMONY_STOPS[0], vocab[HARMONY_STOPS[0]], after[:40], HARMONY_STOPS)
    found = control_token_at(repo, after)
    if found is not None:
        return EndOfTurn(found[0], found[1], after[:40])
    if not after.strip():
        return None
    return EndOfTurn(None, None, after[:40])


def turn_stop(repo: ModelRepo) -> tuple[str, int] | None:
    """The control token generation must stop on after an assistant reply, and its id:
    the template's end-of-turn token (harmony: <|return|>), when it is an added token of
    this tokenizer. None when there is no template, no vocabulary or no such token."""
    template = repo.chat_template
    if template is None or not repo.vocab:
        return None
    found = end_of_turn(repo, template.text)
    if found is None or found.token is None or found.token_id is None:
        return None
    if found.token not in repo.added_token_strings:
        return None
    return found.token, found.token_id
