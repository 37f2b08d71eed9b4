"""The tensor names and shapes of the model config.json declares, looked up fastest first.

1. The layouts this process already looked up (a memo).
2. The shipped table: the upstream configs hfdoctor knows, precomputed (upstream_templates/
   layouts.json, written by make_layouts.py), keyed so that a fine-tune re-saved with another
   dtype, rope_theta or token ids still finds its entry.
3. Computed from the config for the architecture families hfdoctor knows
   (hfdoctor.weights.computed: llama, mistral, qwen2/3 and their MoE, gemma 1-3, phi3...).
4. The user's cache of layouts transformers built before (hfdoctor.weights.layout_cache).
5. Built by transformers on torch's meta device in a bounded, offline child process
   (hfdoctor.weights.build), then cached.

Steps 1-4 never import torch or transformers: a check of a checkpoint of a known family, or of
one checked before, costs milliseconds whether torch is installed or not. The fifth costs the
torch import (seconds), once per config and transformers version.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from hfdoctor.bounded.budget import Budget
from hfdoctor.bounded.memo import memo
from hfdoctor.knowledge import registry
from hfdoctor.weights import layout_cache
from hfdoctor.weights.build import build_bounded
from hfdoctor.weights.computed import computed_layout
from hfdoctor.weights.outcome import CannotVerify, ConfigRejected, ExpectedLayout, Outcome, outcome_from_json, \
    outcome_to_json

__all__ = ["CannotVerify", "ConfigRejected", "ExpectedLayout", "Outcome", "expected_layout", "config_key",
           "shaping_config", "shipped_layouts", "LAYOUT_VERSION", "LAYOUTS_FILE"]

# The precomputed table: upstream_templates/layouts.json, written by make_layouts.py.
# Bump LAYOUT_VERSION when _build, the JSON form or config_key changes what is recorded: a
# table of another version is ignored (every config then takes the slow path) until regenerated.
LAYOUTS_FILE = "layouts.json"
LAYOUT_VERSION = 4


def _is_number(value: Any, low: float, high: float, kinds: tuple[type, ...] = (int, float)) -> bool:
    return isinstance(value, kinds) and not isinstance(value, bool) and low <= value <= high


def _is_token_ids(value: Any) -> bool:
    return all(i is None or _is_number(i, 0, math.inf, (int,)) for i in (value if isinstance(value, list) else [value]))


def _is_default_rope(value: Any) -> bool:
    # What transformers 5 writes for a plain rope_theta: {"rope_theta": ..., "rope_type": "default"}.
    return (isinstance(value, dict) and value.get("rope_type") == "default" and set(value) <= {"rope_type", "rope_theta"}
            and _is_number(value.get("rope_theta", 1.0), 1, 1e12))


def _is_attention_layer_types(value: Any, config: dict[str, Any]) -> bool:
    # Full and sliding-window attention layers hold the same tensors; other layer types
    # (linear attention, mamba) may not, and transformers refuses a list of the wrong length.
    return (isinstance(value, list) and len(value) == config.get("num_hidden_layers")
            and all(t in ("full_attention", "sliding_attention") for t in value))


# Keys that change no tensor's name or shape, and do not make transformers refuse the config,
# as long as their value passes the test beside them. Such a key is left out of the lookup
# key, so a fine-tune re-saved by another transformers version (another dtype, rope_theta,
# context length, token ids, an explicit layer_types...) finds its shipped layout. A value
# that fails the test (a negative eps, an unknown activation) stays in the key: transformers
# judges it on the slow path. Only configs the table ships can hit it, and tests/
# test_weights.py proves every key here on each shipped model type (change or delete it,
# rebuild on the meta device, same outcome). Keys whose effect depends on the model type
# (tie_word_embeddings, head_dim, rope_scaling dicts, partial_rotary_factor) stay in the key.
NON_SHAPING_CONFIG_KEYS: dict[str, Callable[[Any, dict[str, Any]], bool]] = {
    "transformers_version": lambda v, c: True,
    "_name_or_path": lambda v, c: True,
    "use_cache": lambda v, c: True,
    "torch_dtype": lambda v, c: True,
    "dtype": lambda v, c: True,
    "initializer_range": lambda v, c: _is_number(v, 0, 1, (float,)),
    "attention_dropout": lambda v, c: _is_number(v, 0, 1, (float,)),
    "rms_norm_eps": lambda v, c: _is_number(v, 0, 1, (float,)),
    "rope_theta": lambda v, c: _is_number(v, 1, 1e12),
    "rope_parameters": lambda v, c: _is_default_rope(v),
    "rope_scaling": lambda v, c: v is None,
    "max_position_embeddings": lambda v, c: _is_number(v, 1, 2**40, (int,)),
    "bos_token_id": lambda v, c: _is_token_ids(v),
    "eos_token_id": lambda v, c: _is_token_ids(v),
    "pad_token_id": lambda v, c: _is_token_ids(v),
    "sliding_window": lambda v, c: v is None or _is_number(v, 1, 2**40, (int,)),
    "use_sliding_window": lambda v, c: isinstance(v, bool),
    "max_window_layers": lambda v, c: _is_number(v, 0, 2**40, (int,)),
    "hidden_act": lambda v, c: v in ("silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new", "relu"),
    "layer_types": _is_attention_layer_types,
}
# The outcomes this process has looked up, computed or built, by config key, as data (a refusal is
# kept as its JSON form and raised anew). Only what transformers built is also kept on disk, in
# the user's cache (hfdoctor.weights.layout_cache), never in the repository.
OUTCOMES = memo("expected layouts", 256)


def shaping_config(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a config that can change the layout: what config_key hashes."""
    shaping = {
        key: value for key, value in config.items()
        if not (key in NON_SHAPING_CONFIG_KEYS and NON_SHAPING_CONFIG_KEYS[key](value, config))
    }
    if isinstance(shaping.get("architectures"), list):
        shaping["architectures"] = shaping["architectures"][:1]  # _build reads only the first
    return shaping


def config_key(config: dict[str, Any]) -> str:
    """The lookup key of a config: sha256 of its shaping part as canonical JSON."""
    canonical = json.dumps(shaping_config(config), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


@lru_cache(maxsize=1)
def shipped_layouts() -> dict[str, dict[str, Any]]:
    """config_key -> outcome JSON, for every upstream config the package ships a layout of.

    Empty when the file is missing (a broken install: slow, not wrong) or was written for
    another LAYOUT_VERSION.
    """
    try:
        table = json.loads(registry.data_file(LAYOUTS_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    if table.get("layout_version") != LAYOUT_VERSION:
        return {}
    return table["layouts"]


def expected_layout(config: dict[str, Any], budget: Budget | None = None,
                    repo_root: Path | None = None) -> ExpectedLayout:
    """Names and shapes of the model `config` declares; raises CannotVerify / ConfigRejected.

    In the order of the module's doc. `repo_root`: the repository being checked, where the
    cache is never kept. The shipped table holds what the transformers version recorded in
    layouts.json builds; tests/weights/test_weights.py rebuilds it with the installed transformers
    to catch drift, and tests/weights/test_computed.py proves the computed families the same way.
    """
    key = config_key(config)
    kept = OUTCOMES.get(key)
    if kept is None:
        kept = OUTCOMES.put(key, _as_kept(_look_up(config, budget, repo_root)))
    if isinstance(kept, ExpectedLayout):
        return kept
    raise outcome_from_json(kept)


def _look_up(config: dict[str, Any], budget: Budget | None, repo_root: Path | None) -> Outcome:
    entry = shipped_layouts().get(config_key(config))
    if entry is not None:
        return outcome_from_json(entry)
    computed = computed_layout(config)
    if computed is not None:
        return computed
    slot = layout_cache.slot(config, LAYOUT_VERSION, repo_root)
    cached = slot.read() if slot is not None else None
    if cached is not None:
        return cached
    result = build_bounded(config, budget)
    if isinstance(result, CannotVerify) and result.transient:
        raise result  # out of time here: another repository may have the time to build it
    if slot is not None:
        slot.write(result)
    return result


def _as_kept(outcome: Outcome) -> ExpectedLayout | dict[str, Any]:
    """What the memo keeps: a layout as is, a refusal as its JSON form (raised anew on each lookup)."""
    return outcome if isinstance(outcome, ExpectedLayout) else outcome_to_json(outcome)
