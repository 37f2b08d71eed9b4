"""What a template can do, read off its renders of the needle corpus (minja's method).

Each capability is answered by looking for a needle of the corpus in one render:
the system prompt's needle in the system conversation, the argument value in the tool
call conversation, and so on. The markers a template emits are found the same way:
every `<|...|>`, `<｜...｜>`, `[UPPER]` or tag-like string in any render comes from the
template, because no corpus text looks like one.
"""

from __future__ import annotations

import bisect
import difflib
import re
from dataclasses import dataclass
from typing import Any

from hfdoctor.chat import corpus
from hfdoctor.chat.render_plan import TemplateAnalysis, has_generation_tag

# Marker shapes. Pipes and full-width bars are only ever control tokens; [UPPER] and
# <tag> shapes are also ordinary text in some families, see `expected_tokens`.
PIPE_MARKER = re.compile(r"<\|[^<>|\s]{1,48}\|>")
FULLWIDTH_MARKER = re.compile(r"<｜[^<>｜\s]{1,48}｜>")
BRACKET_MARKER = re.compile(r"\[/?[A-Z][A-Z_]{1,30}\]")
TAG_MARKER = re.compile(r"</?[A-Za-z_][\w:.\-]{0,30}>")
# Tokens a marker is compared with for spelling (difflib: tens of microseconds a pair): those
# nearest it in sorted order, which share its longest start. All of them in a real vocabulary;
# 4,000 added tokens against 1,000 unknown markers took minutes when every pair was compared.
NEAR_WINDOW = 32


def nearest(marker: str, ordered: list[str]) -> list[str]:
    """The strings of `ordered` (sorted) nearest `marker` in that order: all of them when there are
    at most 2 * NEAR_WINDOW, else the NEAR_WINDOW on each side of where `marker` would sort."""
    if len(ordered) <= 2 * NEAR_WINDOW:
        return ordered
    at = bisect.bisect_left(ordered, marker)
    return ordered[max(0, at - NEAR_WINDOW):at + NEAR_WINDOW]


def shape_status(analysis: TemplateAnalysis, conversation: str, add_generation_prompt: bool, needle: str) -> str:
    """yes | ignored (rendered without the needle) | declined | crashes | unknown (the rules that judge
    what a template drops read it too)."""
    found = analysis.outcome(conversation, add_generation_prompt)
    if found is None:
        return "unknown"
    if found.error is not None:
        return "declined" if found.error.kind == "declined" else "crashes"
    return "yes" if needle in (found.text or "") else "ignored"


def tool_call_arguments(analysis: TemplateAnalysis) -> str:
    """Which shapes of `function.arguments` the template renders correctly."""
    forms = []
    as_object = analysis.rendered("tool_call", False)
    if as_object is not None and corpus.ARGUMENT_VALUE in as_object:
        # `{{ arguments }}` on a mapping prints a Python repr, not JSON.
        forms.append("object (printed as a Python dict)" if "'city'" in as_object else "object")
    as_string = analysis.rendered("tool_call_string_args", True)
    if as_string is not None and corpus.ARGUMENT_VALUE in as_string:
        forms.append("JSON string (double-encoded)" if '\\"city\\"' in as_string else "JSON string")
    return ", ".join(forms) if forms else "none"


def typed_content(analysis: TemplateAnalysis) -> str:
    status = shape_status(analysis, "typed_content", True, corpus.TYPED_NEEDLE)
    rendered = analysis.rendered("typed_content", True) or ""
    if status == "yes" and "{'type': 'text'" in rendered:
        return "printed as a Python list"  # `{{ message.content }}` on a list of parts
    return status


def needs_content_parts(analysis: TemplateAnalysis) -> bool:
    """The template renders OpenAI content parts (`[{"type": "text", "text": ...}]`) but
    crashes on, or drops, plain string content: vision templates that loop over
    `message.content`. vLLM and SGLang detect this ("openai" content format) and pass parts,
    so it is how the template is meant to be called, not a crash users meet."""
    typed = analysis.rendered("typed_content", True)
    if typed is None or corpus.USER_1 not in typed or corpus.TYPED_NEEDLE not in typed:
        return False
    plain = analysis.outcome("user", True)
    return plain is not None and (plain.error is not None or corpus.USER_1 not in (plain.text or ""))


def content_format(analysis: TemplateAnalysis) -> str:
    if needs_content_parts(analysis):
        return "OpenAI content parts only (string content crashes or is dropped)"
    plain = analysis.rendered("user", True)
    return "string" if plain is not None and corpus.USER_1 in plain else "unknown"


def reasoning(analysis: TemplateAnalysis) -> str:
    last = shape_status(analysis, "reasoning_reply", False, corpus.THINK_NEEDLE)
    history = shape_status(analysis, "reasoning_history", True, corpus.THINK_NEEDLE)
    if history == "yes":
        return "kept in history"
    if last == "yes":
        return "last turn only"
    if "crashes" in (last, history):
        return "crashes"
    return "ignored"


@dataclass(frozen=True)
class Toggle:
    kwarg: str
    effective: bool  # True and False render differently
    default: str | None  # "on" / "off": which setting the absent kwarg matches


def thinking_toggles(analysis: TemplateAnalysis) -> list[Toggle]:
    """The thinking kwargs the template reads, and whether each changes the prompt."""
    found = []
    base = analysis.rendered("user", True)
    for kwarg in analysis.thinking_kwargs:
        on = analysis.rendered("user", True, **{kwarg: True})
        off = analysis.rendered("user", True, **{kwarg: False})
        effective = on is not None and off is not None and on != off
        default = "on" if base is not None and base == on else "off" if base is not None and base == off else None
        found.append(Toggle(kwarg, effective, default if effective else None))
    return found


def thinking_toggle_summary(analysis: TemplateAnalysis) -> str:
    toggles = thinking_toggles(analysis)
    if not toggles:
        return "none"
    parts = []
    for t in toggles:
        if not t.effective:
            parts.append(f"{t.kwarg} (no effect)")
        else:
            parts.append(f"{t.kwarg} ({t.default} by default)" if t.default else t.kwarg)
    return ", ".join(parts)


def declines(analysis: TemplateAnalysis) -> dict[str, str]:
    """Conversation shape -> the message the template declines it with."""
    found: dict[str, str] = {}
    for (name, _, kwargs), outcome in analysis.renders.items():
        if not kwargs and outcome.error is not None and outcome.error.kind == "declined":
            found.setdefault(corpus.conversation(name).what, outcome.error.message)
    return found


def capabilities(analysis: TemplateAnalysis) -> dict[str, Any]:
    """The `template` section of the report: short values, one line each in text output."""
    parallel = analysis.rendered("parallel_tool_calls", False)
    if parallel is None:
        parallel_status = shape_status(analysis, "parallel_tool_calls", False, "")
    else:
        parallel_status = "yes" if corpus.ARGUMENT_VALUE in parallel and "Europe/Paris" in parallel else "ignored"
    return {
        "system_role": shape_status(analysis, "system_user", True, corpus.SYSTEM_NEEDLE),
        "tools": shape_status(analysis, "tools_available", True, corpus.TOOL_NAME),
        "tool_calls": shape_status(analysis, "tool_call", False, corpus.ARGUMENT_VALUE),
        "tool_call_arguments": tool_call_arguments(analysis),
        "tool_responses": shape_status(analysis, "tool_result", True, corpus.RESULT_NEEDLE),
        "parallel_tool_calls": parallel_status,
        "content_format": content_format(analysis),
        "typed_content": typed_content(analysis),
        "reasoning": reasoning(analysis),
        "thinking_toggle": thinking_toggle_summary(analysis),
        "kwargs": sorted(analysis.kwargs),
        "assistant_mask": "yes" if has_generation_tag(analysis.text) else "no",
    }


# --- markers ---------------------------------------------------------------------------


def emitted_markers(analysis: TemplateAnalysis, limit: int | None = None) -> list[str]:
    """Every marker-shaped string in any render, in order of first appearance (each render's
    pipes, then its full-width markers, brackets and tags); with `limit`, at most limit + 1 of
    them (whether there are more than `limit` is all a caller needs to know)."""
    seen: dict[str, None] = {}
    for text in analysis.texts():
        for pattern in (PIPE_MARKER, FULLWIDTH_MARKER, BRACKET_MARKER, TAG_MARKER):
            for match in pattern.finditer(text):
                seen.setdefault(match.group(0), None)
                if limit is not None and len(seen) > limit:
                    return list(seen)
    return list(seen)


def _partner(tag: str) -> str:
    return tag.replace("</", "<", 1) if tag.startswith("</") else tag.replace("<", "</", 1)


def expected_tokens(markers: list[str], vocab: dict[str, int], added_tokens: list[str] = ()) -> list[str]:
    """The markers that must be single tokens of `vocab` but are not.

    Pipe and full-width markers always must. `[UPPER]` markers must when the vocabulary
    has such tokens at all (Mistral v3 has [INST]; v1 writes it as text on purpose).
    A tag must when its open/close partner is a token, or when it is a near miss of a
    tag-shaped added token (`<thinking>` for `<think>`); other tags are plain text in
    their family (Qwen's `<tools>`, Qwen2.5's `<tool_response>`).
    """
    tags = sorted(t for t in added_tokens if TAG_MARKER.fullmatch(t))
    has_brackets: bool | None = None  # scanning the vocabulary costs; only when needed
    missing = []
    for marker in markers:
        if marker in vocab:
            continue
        if PIPE_MARKER.fullmatch(marker) or FULLWIDTH_MARKER.fullmatch(marker):
            missing.append(marker)
        elif BRACKET_MARKER.fullmatch(marker):
            if has_brackets is None:
                has_brackets = any(BRACKET_MARKER.fullmatch(t) for t in vocab if t.startswith("["))
            if has_brackets:
                missing.append(marker)
        elif _partner(marker) in vocab or difflib.get_close_matches(marker, nearest(marker, tags), n=1, cutoff=0.8):
            missing.append(marker)
    return missing
