"""Chat template edits: insert a missing template, or replace one, with the upstream text.

The text always comes from hfdoctor.knowledge.upstream.canonical_template, which verifies it
against the sha256 pinned in the registry; a template that cannot be verified is never
written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hfdoctor.lint.edits.json_edits import json_set_value
from hfdoctor.findings import Applicability, Edit, Fix
from hfdoctor.knowledge.registry import Variant
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import canonical_template

if TYPE_CHECKING:
    from hfdoctor.repo import TemplateSource


def missing_template_fix(repo: ModelRepo, variant: Variant) -> tuple[Fix | None, str]:
    """The upstream canonical template of `variant`, inserted where this repo keeps
    templates, plus a short note for the finding's message."""
    if repo.gguf_tokenizer is not None:
        return None, "Re-convert the GGUF with the upstream template (llama.cpp reads tokenizer.chat_template)."
    lookup = canonical_template(repo.upstream, variant)
    pinned = variant.template
    if lookup.text is None or pinned is None:
        return None, f"Add the {variant.display} template (no automatic fix: {lookup.source})."
    title = f"insert the upstream {pinned.repo} template"
    if pinned.file == "chat_template.jinja" or _keeps_jinja_templates(repo) or not repo.exists("tokenizer_config.json"):
        if repo.exists("chat_template.jinja"):
            return None, f"Add the {pinned.repo} template to chat_template.jinja."
        edit: Edit | None = Edit("chat_template.jinja", 0, 0, lookup.text, create=True)
        title += " as chat_template.jinja"
    else:
        current = (repo.tokenizer_config or {}).get("chat_template")
        if current is not None and not isinstance(current, str):
            return None, f"Add the {pinned.repo} template as the default entry of tokenizer_config.json's chat_template."
        edit = json_set_value(repo, "tokenizer_config.json", "/chat_template", lookup.text)
    if edit is None:
        return None, f"Add the {pinned.repo} template."
    return Fix(title, (edit,), Applicability.SAFE), f"Fix: {title}."


def _keeps_jinja_templates(repo: ModelRepo) -> bool:
    """The repo stores templates as .jinja files (additional_chat_templates/, or a
    template file of another name), so a new default belongs in chat_template.jinja.
    (So does one whose upstream ships chat_template.jinja: see missing_template_fix.)"""
    return any(f.startswith("additional_chat_templates/") or ("/" not in f and f.endswith(".jinja")) for f in repo.files)


def replace_template_fix(repo: ModelRepo, source: "TemplateSource", text: str, title: str) -> Fix | None:
    """Unsafe fix: the whole template replaced by `text` (local edits are lost)."""
    if source.file.endswith(".gguf"):
        return None  # GGUF metadata is rewritten by re-converting, not edited in place
    if source.pointer is not None:
        edit = json_set_value(repo, source.file, source.pointer, text)
    else:
        raw = repo.raw(source.file)
        edit = Edit(source.file, 0, len(raw), text) if raw is not None else None
    return Fix(title, (edit,), Applicability.UNSAFE) if edit is not None else None


def upstream_replacement(repo: ModelRepo, source: "TemplateSource", variant: Variant,
                         title: str) -> tuple[Fix | None, str]:
    """The unsafe fix that restores the variant's upstream template, and a note saying so."""
    if variant.template is None:
        return None, f"Restore the upstream {variant.display} template."
    lookup = canonical_template(repo.upstream, variant)
    if lookup.text is None:
        return None, f"Restore the {variant.template.repo} template (not available here: {lookup.source})."
    return replace_template_fix(repo, source, lookup.text, title), f"Restore the {variant.template.repo} template."
