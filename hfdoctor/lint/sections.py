"""The report's sections besides the findings: what the check learned, whatever rules were selected.

A section is computed by the check from the repository's facts (hfdoctor.repo.facts), never by a
rule as a side effect, so `--select TOK` still reports the template's capabilities and what was
and was not verified of the weights.

- `template`: the default chat template's capabilities (tools, thinking, what it declines), or
  why they are unknown (it does not compile, a render aborted, the time budget ran out);
- `weights`: what was checked of the weights: their layout and parameter count, the model class
  they were verified against and whether they match config.json, and notes on what could not be
  checked (shards not in this checkout, unreadable shards).

Each is absent where there is nothing to say (no template; no weights and no index).
"""

from __future__ import annotations

from typing import Any, Callable

from hfdoctor.chat import capabilities
from hfdoctor.chat.analysis import analyze_source
from hfdoctor.repo import ModelRepo
from hfdoctor.weights.compare import compare
from hfdoctor.weights.headers import (BIN_INDEX_FILE, INDEX_FILE, bin_index_shards, repo_weights,
                                      safetensors_index_shards)
from hfdoctor.weights.layout import repo_layout


def template_section(repo: ModelRepo) -> dict[str, Any] | None:
    """The default template's capabilities, or why they are unknown (None: no template)."""
    source = repo.chat_template
    if source is None:
        return None
    analysis = analyze_source(repo, source)
    section: dict[str, Any] = {"source": source.where}
    if not analysis.compiled:
        section["status"] = "does not compile"
    elif analysis.fatal is not None and analysis.fatal[1].kind == "skipped":
        section["status"] = "not analysed: " + analysis.fatal[1].message
    elif analysis.fatal is not None:
        section["status"] = "render aborted: " + analysis.fatal[1].kind
    else:
        section.update(capabilities.capabilities(analysis))
        declines = capabilities.declines(analysis)
        if declines:
            section["declines"] = declines
    others = [s.name for s in repo.chat_templates if s.name != "default"]
    if others:
        section["other_templates"] = sorted(set(others))
    return section


def weights_section(repo: ModelRepo) -> dict[str, Any]:
    """What was and was not verified of the weights (empty: nothing to say)."""
    section: dict[str, Any] = {}
    note = _safetensors_index_note(repo)
    if note is not None:
        section["note"] = note
    bin_note = _bin_index_note(repo)
    if bin_note is not None:
        section["bin_note"] = bin_note
    comparison = compare(repo)
    if comparison is None:
        return section
    layout = repo_layout(repo)
    if layout is not None:
        section["layout"] = layout.describe()
        section["parameters"] = layout.parameters
    if comparison.cannot_verify is not None:
        section["matches_config"] = "not verified"
    elif comparison.rejected is not None:
        section["matches_config"] = "no: transformers cannot build the declared model"
    else:
        section["verified_against"] = comparison.expected.model_class
        section["matches_config"] = "yes" if comparison.matches else (
            "no: they do not load into it" if not comparison.loads else "no: extra tensors, dropped on load")
    return section


def _safetensors_index_note(repo: ModelRepo) -> str | None:
    """Why the shards the safetensors index names were not (all) checked."""
    indexed = safetensors_index_shards(repo)
    if indexed is None:
        return None
    if indexed.none_here:
        return (f"{INDEX_FILE} names {len(indexed.shards)} shard(s), none of which is in this checkout: "
                "weights not checked")
    headers = repo_weights(repo).headers
    readable = [s for s in indexed.shards if s in headers]
    if len(readable) < len(indexed.shards) - len(indexed.missing):
        return "some shards are unreadable or git-lfs pointers: their tensors were not checked"
    return None


def _bin_index_note(repo: ModelRepo) -> str | None:
    """Why the shards pytorch_model.bin.index.json names were not checked."""
    indexed = bin_index_shards(repo)
    if indexed is None or not indexed.none_here:
        return None
    return f"{BIN_INDEX_FILE} names {len(indexed.shards)} shard(s), none of which is in this checkout: not checked"


# The sections, in the order the report shows them: name -> what builds it (None or empty: absent).
SECTIONS: tuple[tuple[str, Callable[[ModelRepo], dict[str, Any] | None]], ...] = (
    ("template", template_section),
    ("weights", weights_section),
)
