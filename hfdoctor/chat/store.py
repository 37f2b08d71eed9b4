"""Precomputed analyses of the upstream canonical templates, shipped with hfdoctor.

Most checked repos carry their family's canonical template unchanged, with the
upstream special tokens. Their analysis (the jinja2 import, compile, ~30 renders: about
60 ms, most of the template rules' cost) is a pure function of the template text, the
special tokens and the corpus, so upstream_templates/make_analyses.py computes it once
and hfdoctor ships the result as upstream_templates/analyses/<key>.json. `check` reads
the one file its key names, and never writes anything, not even a cache in the user's
home (like the weights layouts, see hfdoctor/weights.py).

The key covers STORE_VERSION, the corpus and render plan (a changed corpus simply
misses: slow, not wrong), the special tokens, the tool_use flag and the template's
sha256. tests/lint/test_template_rules.py checks that every shipped file equals a fresh
analysis; run make_analyses.py after changing the renderer or the corpus.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any

from hfdoctor.chat import corpus
from hfdoctor.chat import render_plan as plan_mod
from hfdoctor.chat.render_plan import Outcome, RenderError, TemplateAnalysis
from hfdoctor.knowledge.registry import data_file
from hfdoctor.bounded.memo import memoized

# Bump when what an analysis records changes.
STORE_VERSION = 1
DIRECTORY = "analyses"


@lru_cache(maxsize=1)
def corpus_digest() -> str:
    """Changes whenever the corpus or the render plan does."""
    plan = [plan_mod.DEFAULT_RENDERS, plan_mod.MODE_RENDERS, plan_mod.KWARG_VALUES,
            str(plan_mod.FIXED_NOW), [c.inputs() for c in corpus.CORPUS]]
    return hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()


def key(text: str, special_tokens: dict[str, str], tool_use: bool) -> str:
    template = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    material = json.dumps([STORE_VERSION, corpus_digest(), sorted(special_tokens.items()), tool_use, template])
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


def _error_to_json(error: RenderError | None) -> dict[str, Any] | None:
    return None if error is None else dict(vars(error))


def _error_from_json(data: dict[str, Any] | None) -> RenderError | None:
    return None if data is None else RenderError(**data)


def to_json(analysis: TemplateAnalysis) -> dict[str, Any]:
    return {
        "tool_use": analysis.tool_use,
        "compile_error": _error_to_json(analysis.compile_error),
        "variables": sorted(analysis.variables),
        "kwargs": sorted(analysis.kwargs),
        "renders": [
            [name, gen, [list(kv) for kv in kwargs], o.text, [list(s) for s in o.spans], _error_to_json(o.error)]
            for (name, gen, kwargs), o in analysis.renders.items()
        ],
    }


def from_json(text: str, data: dict[str, Any]) -> TemplateAnalysis:
    analysis = TemplateAnalysis(text, bool(data["tool_use"]), _error_from_json(data["compile_error"]),
                                frozenset(data["variables"]), frozenset(data["kwargs"]))
    for name, gen, kwargs, rendered, spans, error in data["renders"]:
        render_key = (name, bool(gen), tuple((k, v) for k, v in kwargs))
        analysis.renders[render_key] = Outcome(rendered, tuple((a, b) for a, b in spans), _error_from_json(error))
    return analysis


@memoized("shipped analyses", 16)
def _entry(text: str, tokens: tuple[tuple[str, str], ...], tool_use: bool) -> dict[str, Any] | None:
    try:
        path = data_file(f"{DIRECTORY}/{key(text, dict(tokens), tool_use)}.json")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # FileNotFoundError: not shipped
        return None


def load_portability(text: str, special_tokens: dict[str, str]) -> list[dict[str, Any]] | None:
    """The other engines' verdicts recorded for this canonical template, or None."""
    entry = _entry(text, tuple(sorted(special_tokens.items())), False)
    return entry.get("portability") if entry else None


def load(text: str, special_tokens: dict[str, str], tool_use: bool) -> TemplateAnalysis | None:
    """The shipped analysis of exactly this template and these tokens, or None."""
    entry = _entry(text, tuple(sorted(special_tokens.items())), tool_use)
    try:
        return from_json(text, entry["analysis"]) if entry else None
    except (ValueError, KeyError, TypeError):
        return None
