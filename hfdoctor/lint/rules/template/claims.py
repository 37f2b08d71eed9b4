"""What the model card promises about chatting with the model, against the shipped template:
TPL016 tool-support-mismatch (tools, and past tool calls in the history). The card's own
messages example is CARD003's (hfdoctor.lint.rules.card.examples)."""

from __future__ import annotations

from typing import Iterator

from hfdoctor.bounded import patterns
from hfdoctor.chat import corpus
from hfdoctor.chat.capabilities import shape_status
from hfdoctor.findings import Finding, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.lint.rules.template.common import default_template, location
from hfdoctor.chat.analysis import analyze
from hfdoctor.knowledge.upstream import shipped_revisions
from hfdoctor.lint.rules.template.design import candidate_variants, design_facets, upstream_templates

TOOL_CLAIM = patterns.compile(r"(?i)\b(function[- ]calling|tool[- ](?:use|calling|calls?)|tool-call-parser|"
                              r"enable-auto-tool-choice|agentic tool)\b")
TOOL_TAGS = {"function-calling", "function_calling", "tool-use", "tool_use", "tools", "tool-calling"}
MAX_CARD_CHARS = 200_000


def tool_claim(repo: ModelRepo) -> str | None:
    """Where the card says the model calls tools (a quoted phrase or a tag), or None."""
    card = repo.card
    if card is None:
        return None
    tags = card.metadata.get("tags") if isinstance(card.metadata, dict) else None
    for tag in tags if isinstance(tags, list) else []:
        if isinstance(tag, str) and tag.lower() in TOOL_TAGS:
            return f"the card's tag {tag!r}"
    found = TOOL_CLAIM.search(card.body[:MAX_CARD_CHARS])
    return f"the card says {found.group(0)!r}" if found else None


@rule("TPL016", "tool-support-mismatch", Severity.WARNING, fix=FixAvailability.NONE)
def tool_support_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The card claims tool/function calling but the template ignores `tools`, or the template drops past tool calls.

    Why: clients pass tool definitions as `tools` (apply_chat_template(tools=...), the
    OpenAI API's `tools` through vLLM, SGLang and TGI). A template that never renders them
    serves a model that cannot know which tools exist, whatever its card promises. And a
    template that renders an assistant's tool call when it is the last message, but not
    once its result follows, loses the call from the history: the model sees a tool result
    for a call it never made, and multi-turn tool use breaks.

    How it is found: the template is rendered with a tool definition (is its name in the
    prompt?), with a tool call as the last message, and with the call followed by its
    result (is the call's argument still there?). The card's claim is a phrase ("function
    calling", "tool use", `--tool-call-parser`) or a tag (`function-calling`, `tool-use`).

    Severity: warning; info when the template is upstream's own or a template of the family
    ignores tools too (its design), and info when no upstream template of the family is known
    here: some families take tools written into the prompt by the caller or an agent framework
    (LFM2's first template, InternLM2 through lagent), and nothing then says the template
    departs from that design. A template that drops past tool calls contradicts itself: warning.

    Example: Mistral-7B-Instruct-v0.3's card shows function calling, but a template without
    `[AVAILABLE_TOOLS]` renders the same prompt with or without tools.

    Fix: none automatic; ship the template revision that renders tools (upstream's, when
    template-drift names one).
    """
    found = default_template(repo)
    if found is None:
        return
    source, analysis = found
    tools = shape_status(analysis, "tools_available", True, corpus.TOOL_NAME)
    if tools not in ("yes", "ignored"):
        return  # a crash is chat-template-render-error's
    renders_tools = tools == "yes"
    claim = tool_claim(repo)
    if claim is not None and not renders_tools:
        upstream = upstream_templates(repo)
        renders = _upstream_rendering_tools(repo)
        # An upstream template that renders tools says this one is behind it (Mistral v0.3's launch
        # template, before its tool-calling revision), even when this one is an earlier upstream text.
        facets = [] if renders is not None else design_facets(repo, analysis, _ignores_tools)
        # Some families take tools written into the prompt by the caller or an agent framework (LFM2's
        # first template, InternLM2 through lagent): without an upstream template of the family to
        # compare, nothing says this one departs from its design.
        unverified = not facets and not upstream
        yield self.finding(
            repo,
            f"{claim} (tool calling), but the chat template ignores `tools`: the prompt is the same with or without "
            "tool definitions, so apply_chat_template(tools=...) and servers' `tools` never reach the model."
            + (f" {renders[0].upper()}{renders[1:]} renders them." if renders is not None else "")
            + (" (No upstream template of this family is known here to tell whether writing tools into the prompt "
               "by hand is its design.)" if unverified else ""),
            **location(repo, source, None), facets=facets, severity=Severity.INFO if unverified else None,
        )
        return
    last = analysis.rendered("tool_call", False)
    followed = analysis.outcome("tool_result", True)
    if not renders_tools or last is None or corpus.ARGUMENT_VALUE not in last or followed is None \
            or followed.error is not None:
        return
    if corpus.ARGUMENT_VALUE not in (followed.text or ""):
        yield self.finding(
            repo,
            "the chat template renders an assistant's tool call when it is the last message, but drops it once its "
            "result follows: the model sees a tool result for a call missing from the history, and multi-turn tool "
            "use breaks (render `message.tool_calls` for every assistant turn, not only the last).",
            **location(repo, source, None),
        )


def _upstream_rendering_tools(repo: ModelRepo) -> str | None:
    """'the upstream X template' (or an upstream revision's name) that renders tools, among the
    family's canonical templates and the other revisions hfdoctor ships; else None."""
    for upstream in upstream_templates(repo):
        if not _ignores_tools(upstream.analysis):
            return f"the upstream {upstream.repo_id} template"
    for variant in candidate_variants(repo):
        for sha, text in shipped_revisions(variant):
            if not _ignores_tools(analyze(repo, text)):
                return variant.template_name(sha) or f"an upstream {variant.display} template"
    return None


def _ignores_tools(analysis) -> bool:
    return shape_status(analysis, "tools_available", True, corpus.TOOL_NAME) == "ignored"


RULES = [tool_support_mismatch]
