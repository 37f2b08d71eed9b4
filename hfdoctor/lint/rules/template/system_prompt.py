"""TPL017 system-prompt-dropped: the caller's system message must reach the prompt, or be
refused loudly (a template that raises on it declines it, which chat-template-render-error
reports)."""

from __future__ import annotations

from typing import Iterator

from hfdoctor.chat import corpus
from hfdoctor.chat.capabilities import shape_status
from hfdoctor.chat.render_plan import TemplateAnalysis
from hfdoctor.findings import Facet, FacetKind, Finding, Severity
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.lint.rules.template.common import default_template, line_of_text, location
from hfdoctor.lint.rules.template.design import behaviour_facets
from hfdoctor.repo import ModelRepo


@rule("TPL017", "system-prompt-dropped", Severity.WARNING, fix=FixAvailability.NONE)
def system_prompt_dropped(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The chat template silently leaves the caller's system message out of the prompt.

    Why: clients send their instructions as a system message (the OpenAI API's `system`
    role, which vLLM, TGI, SGLang and llama.cpp's server pass to the template as
    `messages[0]`). A template that neither renders it nor refuses it serves a model that
    never sees persona, language, format or safety instructions, and nothing anywhere
    reports an error. Declining system messages on purpose is different: Gemma's and
    Mistral v0.2's templates raise "System role not supported", so the client learns it
    at once (chat-template-render-error says so, at info).

    How it is found: the template is rendered with a system message and a user message
    (add_generation_prompt=True); the user's text is in the prompt, the system text is
    not. When the family's own upstream template drops it too, that is the family's
    design and the finding is info.

    Example: a Llama 2 template that folds `system_message` into the content of "the first
    message" (`loop.index0 == 0`): when a system message is sent, the first message is
    that system message, which the loop then skips as neither user nor assistant, so the
    caller's instructions and the default system prompt are both lost.

    Fix: none automatic; render a leading system message (in the family's system turn, or
    prepended to the first user turn when the format has none), or decline it with
    `raise_exception` so that clients get an error instead of silence.
    """
    found = default_template(repo)
    if found is None:
        return
    source, analysis = found
    if not _drops_system_message(analysis):
        return
    same = analysis.rendered("system_user", True) == analysis.rendered("user", True)
    facets = behaviour_facets(repo, analysis, _drops_system_message)
    yield self.finding(
        repo,
        "the chat template drops the caller's system message without an error: rendered with a system message and "
        "a user message, the prompt holds the user's text but not the system text"
        + (" (it is the same prompt as without the system message)" if same else "")
        + ", so every instruction a client sends as `system` is silently lost. Render a leading system message "
        "(in a system turn, or prepended to the first user turn), or refuse it with raise_exception.",
        **location(repo, source, line_of_text(source, "system")), facets=[Facet(FacetKind.CHAT_ONLY), *facets],
    )


def _drops_system_message(analysis: TemplateAnalysis) -> bool:
    """The render of a system and a user message holds the user's text but not the system's
    (a template that raises on it declines system messages, which is not silent)."""
    return (shape_status(analysis, "system_user", True, corpus.SYSTEM_NEEDLE) == "ignored"
            and corpus.USER_NEEDLE in (analysis.rendered("system_user", True) or ""))


RULES = [system_prompt_dropped]
