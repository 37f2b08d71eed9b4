"""Template analyses kept between runs, in the user cache directory.

`hfdoctor check` runs as a pre-push hook, on the same template again and again. Its
analysis (compile + ~30 renders + the jinja2 import) is a pure function of the template
text, the special tokens, the corpus and hfdoctor's version, so it is stored as JSON
under that key and read back next time without importing jinja2 at all.

Only complete analyses are stored: a run stopped by a timeout, the memory cap or a
sandbox-escape attempt is analysed afresh each time (a slow machine must not pin a
timeout). JSON, never pickle: a planted cache file can only hold strings.

Location: $HFDOCTOR_CACHE_DIR/templates, else $XDG_CACHE_HOME/hfdoctor/templates, else
~/.cache/hfdoctor/templates; HFDOCTOR_NO_CACHE=1 turns it off (the same settings as the
weights layout cache). Nothing is ever written into the checked repository.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from hfdoctor import __version__
from hfdoctor.chat import analysis as analysis_mod
from hfdoctor.chat import corpus
from hfdoctor.chat.analysis import Outcome, RenderError, TemplateAnalysis

# Bump when what an analysis records changes.
STORE_VERSION = 1


def cache_dir() -> Path | None:
    if os.environ.get("HFDOCTOR_NO_CACHE"):
        return None
    base = os.environ.get("HFDOCTOR_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "hfdoctor")
    return Path(base) / "templates"


@lru_cache(maxsize=1)
def _corpus_digest() -> str:
    """Changes whenever the corpus or the render plan does."""
    plan = [analysis_mod.DEFAULT_RENDERS, analysis_mod.MODE_RENDERS, analysis_mod.KWARG_VALUES,
            str(analysis_mod.FIXED_NOW), [c.inputs() for c in corpus.CORPUS]]
    return hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()


def _path(text: str, special_tokens: dict[str, str], tool_use: bool) -> Path | None:
    directory = cache_dir()
    if directory is None:
        return None
    key = json.dumps([STORE_VERSION, __version__, _corpus_digest(), sorted(special_tokens.items()), tool_use, text])
    return directory / f"{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()}.json"


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
        key = (name, bool(gen), tuple((k, v) for k, v in kwargs))
        analysis.renders[key] = Outcome(rendered, tuple((a, b) for a, b in spans), _error_from_json(error))
    return analysis


def load(text: str, special_tokens: dict[str, str], tool_use: bool) -> TemplateAnalysis | None:
    path = _path(text, special_tokens, tool_use)
    if path is None or not path.is_file():
        return None
    try:
        return from_json(text, json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged entry is analysed again


def save(analysis: TemplateAnalysis, special_tokens: dict[str, str]) -> None:
    if analysis.fatal is not None:
        return
    path = _path(analysis.text, special_tokens, analysis.tool_use)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(to_json(analysis), ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass  # a read-only home only costs speed
