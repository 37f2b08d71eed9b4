"""Template presence and sources: a chat model without a template, two sources that disagree."""

from __future__ import annotations

from typing import Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.lineage.adapter_base import adapter_base
from hfdoctor.lineage.card_usage import declared_chat_format
from hfdoctor.lint.edits.json_edits import json_set_value
from hfdoctor.lint.edits.template_edits import missing_template_fix
from hfdoctor.findings import Applicability, Finding, Fix, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.knowledge.upstream import shipped_template


@rule("TPL001", "missing-chat-template", Severity.ERROR, fix=FixAvailability.SAFE)
def missing_chat_template(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A chat/instruct model ships no chat template.

    Why: OpenAI-compatible servers (vLLM, TGI, SGLang, transformers serve) render
    `messages` with the repo's chat template; without one `/v1/chat/completions` fails
    (transformers raises "Cannot use chat template functions because
    tokenizer.chat_template is not set"), and tools that fall back on a generic format
    produce prompts the model was never trained on.

    Where templates are looked for: tokenizer_config.json `chat_template` (a string or
    named list), chat_template.jinja, chat_template.json, additional_chat_templates/.

    A model counts as chat/instruct when its eos token is an end-of-turn marker, its
    generation config stops on one, its card says so (tags, base_model), or its family
    only ships chat models. A base model without a template is not reported, nor is a PEFT
    adapter of a pre-trained base (trained with a plain-text prompt such as Alpaca's
    "### Instruction:", where `</s>` is the end of a document, not of a turn); an adapter
    whose base hfdoctor cannot identify is info ("cannot verify without the base model").
    When only the card's usage says chat (apply_chat_template or a messages list in its
    examples, a conversation prompt format such as `USER: ... ASSISTANT:` as its
    prompt_template or in the card of a model named chat/instruct), the finding is a warning.
    The name of the model it was trained from says chat only by a whole word of it (Instruct,
    chat, Gemma's `-it` suffix): a fine-tune of GroNLP/gpt2-small-italian, a GPT-2 completion
    model, is not a chat model unless its own files show chat evidence.

    Example: fixtures/seed-incident, a replica of the incident hfdoctor was born from: a
    Qwen3-8B fine-tune (Qwen3's tokenizer, <|im_end|> as eos) whose tokenizer_config.json
    has no chat_template.

    Fix: safe; insert the canonical template of the detected family variant: the text
    hfdoctor ships (upstream_templates/templates/, verified against the sha256 its
    registry pins), or the one in --upstream DIR / HFDOCTOR_UPSTREAM when given. Offered
    only when the evidence names the variant with at least medium confidence (the
    tokenizer, or the exact dimensions of a release); the planner then refuses it if the
    re-check finds the inserted template's markers are not tokens of this vocabulary.
    """
    if repo.chat_templates:
        return
    if repo.tokenizer_config is None and repo.tokenizer_json is None:
        return  # no tokenizer at all: nothing could apply a template anyway
    if "tokenizer_config.json" in repo.problems or "chat_template.json" in repo.problems:
        return  # file-unreadable already says why no template could be read
    lineage = lineage_mod.detect(repo)
    reasons = lineage_mod.chat_evidence(repo, lineage.family_ref, lineage.variant_ref)
    if not reasons:
        return
    base = adapter_base(repo)
    if base is not None and base.pretrained is not False:
        if base.pretrained is None:
            yield self.finding(
                repo, "no chat template in this PEFT adapter (" + "; ".join(reasons[:2]) + "), and hfdoctor "
                + base.cannot_verify("whether its base is a chat model (an adapter trained with a plain-text "
                                     "prompt on a pre-trained base needs no template)") + ".",
                file="tokenizer_config.json" if repo.tokenizer_config is not None else None, severity=Severity.INFO,
            )
        return  # an adapter of a pre-trained base, prompted with plain text: its `</s>` ends a document
    target = "tokenizer_config.json" if repo.tokenizer_config is not None else None
    # Only the card's usage says chat (no tokenizer, config or family fact): a warning.
    card_only = reasons == [lineage_mod.card_chat_usage(repo)]
    fix, fix_note = _template_fix(repo, lineage)
    declared = declared_chat_format(repo)
    if fix is not None and declared is not None and not _renders_format(lineage, declared[0]):
        # The card declares the format the fine-tune was trained on (Vicuna's `USER: ... ASSISTANT:`,
        # `### User:`), and the family's template does not write it: inserting that template breaks it.
        fix, fix_note = None, (f"Write a template that renders the prompt format the card declares "
                               f"({declared[0][0]} … {declared[0][1]}); hfdoctor does not insert the "
                               f"{lineage.variant_ref.display} template, which is another format.")
    yield self.finding(
        repo,
        "no chat template: this is a chat model ("
        + "; ".join(reasons[:2])
        + "), but no tokenizer_config.json chat_template, chat_template.jinja or chat_template.json exists, "
        "so /chat/completions fails and apply_chat_template raises. " + fix_note,
        file=target, pointer="/chat_template" if target else None, line=None,
        fix=fix, severity=Severity.WARNING if card_only else None,
    )


def _renders_format(lineage: lineage_mod.Lineage, markers: tuple[str, str]) -> bool:
    """Whether the detected variant's canonical template writes both markers of a prompt format."""
    text = shipped_template(lineage.variant_ref) if lineage.variant_ref is not None else None
    return text is not None and all(marker.strip() in text for marker in markers)


def _template_fix(repo: ModelRepo, lineage: lineage_mod.Lineage) -> tuple[Fix | None, str]:
    fam, variant = lineage.family_ref, lineage.variant_ref
    if fam is None:
        where = f" ({lineage.architecture} architecture, family unknown)" if lineage.architecture else ""
        return None, f"Add the template of the model this checkpoint was trained from{where}."
    if variant is None:
        names = ", ".join(v.display for v in fam.variants)
        return None, f"Add the template of the {fam.display} release it was trained from ({names}: the evidence does not say which)."
    if lineage.disagree:
        return None, (f"The sources disagree on which model this is ({lineage.conflict_text()}): no automatic "
                      "fix; find out which model the weights are, then add its template.")
    if not lineage.certain:
        return None, f"Add the {variant.display} template (no automatic fix: the family is only suggested by {', '.join(lineage.evidence)})."
    return missing_template_fix(repo, variant)


@rule("TPL002", "chat-template-conflict", Severity.WARNING, fix=FixAvailability.UNSAFE)
def chat_template_conflict(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """Two template sources disagree (e.g. tokenizer_config.json vs chat_template.jinja).

    Why: transformers reads chat_template.jinja first and ignores tokenizer_config.json's
    `chat_template`, but llama.cpp's converter, older transformers, TGI and many
    training scripts read tokenizer_config.json. When both exist and differ, the model
    is served with one template and trained or converted with the other.

    Also reported: a default template in tokenizer_config.json that transformers ignores
    because additional_chat_templates/ holds files (the tokenizer then has no default
    template at all). Two copies that differ only in whitespace are info.

    Example: a fine-tune edited chat_template.jinja to add tool calling, but the stale
    copy in tokenizer_config.json still ships.

    Fix: unsafe; make tokenizer_config.json's copy equal to the one transformers uses.
    Unsafe because which version the author meant cannot be known. None for the ignored
    default: save it as chat_template.jinja.
    """
    shadowed = [s for s in repo.chat_templates if s.file == "tokenizer_config.json" and s.name == "default"]
    if shadowed and repo.chat_template is None:
        yield self.finding(
            repo,
            "tokenizer_config.json has a default chat_template, but transformers ignores it because "
            "additional_chat_templates/ holds template files: the tokenizer ends up with no default template and "
            "apply_chat_template without tools raises. Save the default as chat_template.jinja.",
            file="tokenizer_config.json", pointer=shadowed[0].pointer,
        )
    by_name: dict[str, list] = {}
    for source in repo.chat_templates:
        by_name.setdefault(source.name, []).append(source)
    for name, sources in by_name.items():
        winner = sources[0]
        for other in sources[1:]:
            if other.text == winner.text:
                continue
            whitespace_only = "".join(other.text.split()) == "".join(winner.text.split())
            fix = _conflict_fix(repo, winner, other)
            yield self.finding(
                repo,
                f"the {name!r} chat template in {other.where} differs from the one in {winner.where}"
                + (" (whitespace only)" if whitespace_only else "")
                + f": transformers uses {winner.file}, while tools that read {other.file} render a different prompt.",
                file=other.file, pointer=other.pointer,
                severity=Severity.INFO if whitespace_only else self.severity,
                fix=fix,
            )


def _conflict_fix(repo: ModelRepo, winner, other) -> Fix | None:
    if other.pointer is None:
        return None
    edit = json_set_value(repo, other.file, other.pointer, winner.text)
    if edit is None:
        return None
    return Fix(f"copy the template of {winner.file} into {other.file}", (edit,), Applicability.UNSAFE)


RULES = [missing_chat_template, chat_template_conflict]
