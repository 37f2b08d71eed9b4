"""What the chat template rules share: which templates to analyse, their analyses, and
how a finding points into a template (file, JSON pointer, template line).

Every rendering rule reads one TemplateAnalysis per template (hfdoctor.chat.analysis):
the template is compiled and rendered over the conversation corpus once, in a bounded
worker process, and the rules compare those renders (the check reports the default
template's capabilities as its `template` section: hfdoctor.lint.sections).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hfdoctor.chat import corpus
from hfdoctor.chat.analysis import analyze_source
from hfdoctor.chat.render_plan import has_generation_tag
from hfdoctor.repo import ModelRepo

if TYPE_CHECKING:
    from hfdoctor.chat.render_plan import TemplateAnalysis
    from hfdoctor.repo import TemplateSource


def template_sources(repo: ModelRepo) -> list["TemplateSource"]:
    """Each distinct template text once, the default first."""
    seen: set[str] = set()
    found = []
    default = repo.chat_template
    for source in ([default] if default else []) + list(repo.chat_templates):
        if source.text not in seen:
            seen.add(source.text)
            found.append(source)
    return found


def analysis_of(repo: ModelRepo, source: "TemplateSource") -> "TemplateAnalysis":
    return analyze_source(repo, source)


def default_template(repo: ModelRepo) -> tuple["TemplateSource", "TemplateAnalysis"] | None:
    """The default template and its analysis, when it compiles and renders at all."""
    source = repo.chat_template
    if source is None:
        return None
    analysis = analysis_of(repo, source)
    if not analysis.compiled or analysis.fatal is not None:
        return None  # TPL003 / TPL004 say why
    return source, analysis


def location(repo: ModelRepo, source: "TemplateSource", template_line: int | None) -> dict[str, Any]:
    """file/pointer/line of a template line: the file line for .jinja, the JSON value's line otherwise."""
    line = template_line if source.pointer is None else None
    return {"file": source.file, "pointer": source.pointer, "line": line}


def line_of_text(source: "TemplateSource", needle: str) -> int | None:
    at = source.text.find(needle)
    return source.text.count("\n", 0, at) + 1 if at >= 0 else None


def quoted_line(source: "TemplateSource", line: int | None) -> str:
    if not line:
        return ""
    lines = source.text.splitlines()
    if not 0 < line <= len(lines):
        return ""
    text = lines[line - 1].strip()
    return f": `{text[:100]}{'…' if len(text) > 100 else ''}`"


def shapes_text(names: list[str]) -> str:
    whats = list(dict.fromkeys(corpus.conversation(n).what for n in names))
    return "; ".join(whats[:4]) + (f" (and {len(whats) - 4} more)" if len(whats) > 4 else "")


def mode_text(mode: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in mode.items()) or "no kwargs"


def is_token_name(variable: str | None) -> bool:
    """bos_token, eos_token, image_token...: passed from the tokenizer config, not by callers."""
    return bool(variable) and variable.endswith("_token")


# Why a template with `{% generation %}` is the one its checkpoint learnt: said where a rule stands down.
TRAINING_TEMPLATE = ("it marks assistant turns with {% generation %} for a trainer's loss mask (TRL's "
                     "assistant_only_loss), so it is the template this checkpoint was trained with")


def training_template(analysis: "TemplateAnalysis") -> bool:
    """The template carries `{% generation %}` tags, which exist only to mask the loss in training
    (transformers' return_assistant_tokens_mask, TRL's assistant_only_loss): a trainer saved the
    template it trained with, so the weights learnt this format, whatever upstream's is."""
    return has_generation_tag(analysis.text)
