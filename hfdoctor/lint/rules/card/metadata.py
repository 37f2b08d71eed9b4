"""Rules about the model card (README.md and its YAML front matter)."""

from __future__ import annotations

from typing import Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.knowledge import registry
from hfdoctor.lint.edits.card_edits import card_set_base_model
from hfdoctor.findings import Applicability, Facet, FacetKind, Finding, Fix, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule


@rule("CARD001", "base-model-mismatch", Severity.ERROR, fix=FixAvailability.SOMETIMES)
def base_model_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The model card's `base_model` is of another lineage than the checkpoint.

    Why: the Hub builds the model tree, license inheritance, and "finetunes of X" lists
    from `base_model`; serving platforms and users pick the chat template, stop tokens
    and tool-call parser from it. A Qwen3 checkpoint whose card says
    meta-llama/Meta-Llama-3.1-8B gets the wrong template, the wrong license and the
    wrong parser.

    How it is decided: the card's repo id is mapped to a family by name; the checkpoint's
    family comes from config.json, the tokenizer and the weights, not from the card.
    They must share an architecture. Same family but another size (card Qwen3-14B,
    config of Qwen3-8B dimensions) is a warning. A config whose model type (or text_config's)
    is no family's that hfdoctor knows (an empty config.json beside ONNX Runtime GenAI's
    genai_config.json, a vision-language or remote-code model built on the card's LLM) says
    nothing against the card: only the tokenizer or the weights can, by naming another family.

    Example: fixtures/seed-incident, a Qwen3-8B fine-tune (config and tokenizer of
    Qwen3-8B) whose card says `base_model: meta-llama/Meta-Llama-3.1-8B`.

    Fix: sometimes; set `base_model` to the detected upstream repo id (safe when config and
    tokenizer agree on the family, unsafe otherwise). Only that line changes. When the
    weights contradict config and tokenizer (lineage confidence `conflict`), the fix is
    unsafe and names the weights as what would have to change too.
    """
    card = repo.card
    config = repo.config
    if card is None or not card.metadata or config is None:
        return
    model_type = registry.config_value(config, "model_type")
    text_config = config.get("text_config")
    types = {t for t in (model_type, text_config.get("model_type") if isinstance(text_config, dict) else None)
             if isinstance(t, str)}
    lineage = lineage_mod.detect(repo)
    fam = registry.family(lineage.family)
    # What the files other than the card say: the tokenizer's and the weights' families.
    said = {source: fams for source, keys in lineage.by_source.items()
            if source != "card" and (fams := [f for key in keys if (f := registry.family(key)) is not None])}
    for repo_id in lineage_mod.card_base_models(repo):
        named = registry.family_of_repo_id(repo_id)
        if named is None or _unknown_type_agrees(types, said, named):
            continue
        if not types & set(named.model_types):
            detected = (f"{fam.display} ({lineage.base_model or 'size unknown'})" if fam
                        else next(iter(said.values()))[0].display if said else f"model_type {model_type!r}")
            evidence = ", ".join(lineage.evidence) if fam else ", ".join(said) or "config.json"
            yield self.finding(
                repo,
                f"the model card says base_model {repo_id} ({named.display}), but the checkpoint is {detected} "
                f"by {evidence}: the Hub model tree, license and the template "
                "and parser that platforms pick from it are wrong."
                + (f" But the sources disagree ({lineage.conflict_text()}): find out which model this is before "
                   "changing the card." if lineage.disagree else
                   f" Set base_model to {lineage.base_model}." if lineage.base_model else ""),
                file="README.md", pointer="/base_model",
                fix=_base_model_fix(repo, lineage),
            )
            continue
        named_base = named.base_by_repo(repo_id)
        if named is fam and named_base is not None and fam.base_for(config) not in (None, named_base):
            actual = fam.base_for(config)
            yield self.finding(
                repo,
                f"the model card says base_model {repo_id}, but config.json has the dimensions of {actual.repo} "
                f"(hidden_size {config.get('hidden_size')}, {config.get('num_hidden_layers')} layers).",
                file="README.md", pointer="/base_model", severity=Severity.WARNING,
                fix=_base_model_fix(repo, lineage),
            )


def _unknown_type_agrees(types: set[str], said: dict[str, list[registry.Family]], named: registry.Family) -> bool:
    """config.json names no model type of a family hfdoctor knows (an empty config beside ONNX Runtime
    GenAI's genai_config.json; a vision-language or custom model built on the card's LLM: llava,
    qwen2_5_vl, remote code): the config is no evidence against the card, so only the tokenizer or
    the weights can contradict it, and they do not when they name no family, the card's, or one
    whose vocabulary the card's family shares."""
    if types & {t for fam in registry.families() for t in fam.model_types}:
        return False
    # a vocabulary several families share (Qwen2.5's and Qwen3's) names all of them
    return not said or any(fam is named or set(fam.vocab_groups) & set(named.vocab_groups)
                           for fams in said.values() for fam in fams)


def _base_model_fix(repo: ModelRepo, lineage: lineage_mod.Lineage) -> Fix | None:
    if not lineage.base_model:
        return None
    edit = card_set_base_model(repo, lineage.base_model)
    if edit is None:
        return None
    if lineage.disagree:
        # The sources disagree: the card may be the one that is right. Picking a side is
        # never safe, and the fix says what else would have to change with it.
        return Fix(f"set base_model to {lineage.base_model}; the weights must then be replaced too "
                   f"({lineage.conflict_text()})", (edit,), Applicability.UNSAFE)
    agree = "config" in lineage.evidence and "tokenizer" in lineage.evidence
    return Fix(
        f"set base_model to {lineage.base_model}", (edit,),
        Applicability.SAFE if agree else Applicability.UNSAFE,
    )


REQUIRED_CARD_FIELDS = {
    "license": "the Hub shows no license and many organisations may not use the model",
    "library_name": "the Hub cannot tell which library loads it (no 'Use this model' snippet, no download counts)",
    "pipeline_tag": "the Hub cannot list it under its task or offer the inference widget",
}


@rule("CARD002", "card-metadata", Severity.WARNING, fix=FixAvailability.NONE)
def card_metadata(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The model card is missing, its front matter is invalid, or license/library_name/pipeline_tag are absent.

    Why: the Hub rejects pushes whose README.md front matter is not valid YAML, and
    uses `license`, `library_name` and `pipeline_tag` to show the license, the loading
    snippet and the task. Inference providers filter on them.

    A folder with a config.json or an adapter_config.json and no README.md at all is a model
    (or a PEFT adapter) with no card: warning. An adapter_config.json with none of the keys an
    adapter trainer writes (a Wi-Fi tool's network-adapter settings) does not make one.

    Example: `base_model: [Qwen/Qwen3-8B` (unclosed list) or a card with no `---` block.

    Fix: none automatic; the message lists the keys to add.
    """
    if repo.card is None:
        if "README.md" in repo.problems:
            return  # file-unreadable reports why it could not be read
        if repo.config is not None or repo.describes_adapter:
            yield self.finding(
                repo,
                "no README.md model card: the Hub shows an empty page, with no license, base model or usage"
                + (" (nor which base model this adapter goes on, or how it was trained)." if repo.is_adapter else "."),
                file="README.md",
            )
        return
    card = repo.card
    if card.metadata is None:
        if "README.md" in repo.problems:
            problem = repo.problems["README.md"]
            yield self.finding(
                repo, f"README.md {problem.message}: the Hub rejects the push until it parses.",
                file="README.md", line=problem.line, severity=Severity.ERROR,
            )
        else:
            yield self.finding(
                repo, "README.md has no YAML front matter (--- block): the Hub knows no license, library or task.",
                file="README.md", line=1,
            )
        return
    for key, why in REQUIRED_CARD_FIELDS.items():
        if not card.metadata.get(key):
            inferred = key in HUB_INFERS and _hub_can_infer(repo)
            yield self.finding(repo, f"the model card has no `{key}`: " + (HUB_INFERS[key] if inferred else why) + ".",
                               file="README.md", line=1,
                               facets=(Facet(FacetKind.HUB_INFERRED),) if inferred else ())


# What the Hub fills in itself from a transformers config.json (huggingface.js
# model-libraries / pipelines: config.json means library transformers, and the
# architecture's auto class gives the task).
HUB_INFERS = {
    "library_name": "the Hub infers `transformers` from config.json, but other tools reading the card do not",
    "pipeline_tag": "the Hub infers the task from config.json's architectures, but other tools reading the card "
                    "do not",
}


def _hub_can_infer(repo: ModelRepo) -> bool:
    architectures = (repo.config or {}).get("architectures")
    return (not repo.is_adapter and isinstance(architectures, list) and len(architectures) == 1
            and isinstance(architectures[0], str))


RULES = [base_model_mismatch, card_metadata]
