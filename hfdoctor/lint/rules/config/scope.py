"""Rules about what a check covered: whether the target is a model repository at all, and
what the repository's time and byte budget left unchecked."""

from __future__ import annotations

from typing import Iterator

from hfdoctor.findings import Finding, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.sources.base import WEIGHT_SUFFIXES

# Files that make a folder a model repository (or an adapter, a GGUF or a tokenizer repo).
MODEL_FILES = frozenset({
    "config.json", "adapter_config.json", "params.json", "tokenizer.json", "tokenizer_config.json", "vocab.json",
    "tokenizer.model", "tekken.json", "chat_template.jinja", "chat_template.json", "generation_config.json",
    "model.safetensors.index.json", "pytorch_model.bin.index.json",
    "Modelfile",  # an Ollama model definition (FROM a model, ADAPTER a LoRA): hfdoctor.repo.modelfile
})
MODEL_SUFFIXES = WEIGHT_SUFFIXES + (".onnx", ".h5", ".keras", ".msgpack", ".tflite", ".mlmodel", ".pb", ".npz",
                                    ".joblib", ".pickle", ".dill")


def _model_file(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name in MODEL_FILES or rel.endswith(MODEL_SUFFIXES) or (
        name.startswith("chat_template") and name.endswith((".jinja", ".json")))  # a template of its own


def is_model_repo(repo: ModelRepo) -> bool:
    return any(_model_file(rel) for rel in repo.entries)


@rule("CFG006", "not-a-model-repo", Severity.ERROR, fix=FixAvailability.NONE)
def not_a_model_repo(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The target holds no model files at all: no config, tokenizer, template, weights or GGUF.

    Why: "no findings" on an empty folder, a dataset, or the wrong directory (the parent
    of the checkpoint, a typo in a CI path) reads as "this model is fine" and lets a
    broken pipeline pass. A repository with any of config.json, adapter_config.json,
    params.json, a tokenizer file, a chat template, or a weight file (safetensors,
    pickle, GGUF, ONNX, Keras...) is a model repository.

    Example: `hfdoctor check ./outputs` where the checkpoint was saved to
    ./outputs/checkpoint-500.

    Fix: none; point hfdoctor at the checkpoint directory itself.
    """
    if is_model_repo(repo):
        return
    listed = [rel for rel, entry in repo.entries.items() if entry.is_file]
    what = (f"its {len(listed)} file(s) ({', '.join(listed[:4])}{', ...' if len(listed) > 4 else ''}) include no"
            if listed else "it is empty: no")
    yield self.finding(
        repo,
        f"this is not a model repository: {what} config.json, adapter_config.json, tokenizer, chat "
        "template or weight file. Point hfdoctor at the checkpoint directory itself.",
    )


@rule("CFG007", "check-incomplete", Severity.WARNING, fix=FixAvailability.NONE)
def check_incomplete(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A time or byte budget ran out, or part of the repository could not be listed: names what was not checked.

    Why: every check of a repository has one allowance of time (30 s), of bytes read (2 GiB)
    and of memory kept (256 MiB of template renders) for everything it does: template renders,
    headers, pickle scans, git blobs; and each reader has its own bounds (a template's source,
    a GGUF vocabulary, the values of a JSON file).
    A real checkpoint needs a fraction of it; a repository that exhausts it (a hundred
    templates that each render until their limit, headers describing millions of tensors,
    a tree nested thousands of directories deep, a directory the user may not read) is
    hostile or broken, and checking the rest must not hang. What was left out is said
    instead of silently passing: a clean report with this warning is not a clean repository.

    Example: "not checked: chat templates (the 't57' template in
    additional_chat_templates/t57.jinja and any after it) (the 30 s time budget of this
    repository ran out)".

    Fix: none; look at what was skipped by hand, or raise the budget
    (HFDOCTOR_BUDGET_SECONDS, HFDOCTOR_BUDGET_BYTES) when the repository is trusted and large.
    """
    skipped, more = repo.budget.skipped, repo.budget.skipped_more
    if not skipped:
        return
    more += max(0, len(skipped) - 6)
    shown = "; ".join(skipped[:6]) + (f"; and {more:,} more" if more else "")
    yield self.finding(repo, f"not checked: {shown}. The findings above cover only the rest of the repository.")


RULES = [not_a_model_repo, check_incomplete]
