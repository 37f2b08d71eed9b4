"""The tensor names and shapes of the model config.json declares.

For the upstream configs hfdoctor knows they are precomputed (upstream_templates/
layouts.json, written by make_layouts.py), so a check of a stock checkpoint never imports
torch or transformers; any other config is built by transformers on torch's meta device
and remembered for the rest of the process.

config.json is repository data, and transformers runs code on it: a DETR-style `backbone`
makes AutoConfig download a model, a gpt2 with 50,000 layers keeps the build busy for
minutes. So the build runs in a bounded child process (hfdoctor.bounded.sandbox: time and memory
capped, killed at its deadline) that is offline (HF_HUB_OFFLINE) and whose audit hook
refuses every network connection, program start and file write: a config that needs any
of them cannot be verified, and says so. torch and transformers are imported only there,
so the checking process never loads them and nothing is left behind on disk.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Callable

from hfdoctor.knowledge import registry
from hfdoctor.bounded.budget import Budget
from hfdoctor.bounded.memo import memo
from hfdoctor.bounded.sandbox import Limits, StepGuard, run_bounded
from hfdoctor.weights.layout import layer_index

# The build's bounds: importing torch and transformers takes ~3 s, a build ~50 ms; the
# address space torch maps is large, so the memory cap is generous.
BUILD_SECONDS = 45.0
BUILD_MEMORY = 8 << 30
# Counts no real model reaches: larger ones are not built (the build would take minutes).
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_decoder_layers", "num_encoder_layers")
MAX_LAYERS = 1024
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
MAX_EXPERTS = 8192
OFFLINE_REFUSAL = "hfdoctor builds configs offline and writes nothing"

class CannotVerify(Exception):
    """The declared model cannot be built here (unknown architecture, quantized, no torch).

    `transient`: only here and now (out of time); another repository may have the time to build it.
    """

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


class ConfigRejected(Exception):
    """transformers refuses config.json itself."""


@dataclass(frozen=True)
class ExpectedLayout:
    """The checkpoint transformers would write (and expects to load) for a config."""

    model_class: str
    tensors: dict[str, tuple[int, ...]]
    optional: frozenset[str]  # tied weights: usually absent from the checkpoint
    ignore_missing: tuple[str, ...]  # regexes transformers does not miss on load
    ignore_unexpected: tuple[str, ...]  # regexes transformers ignores on load
    base_model_prefix: str = ""

    def to_json(self) -> dict[str, Any]:
        """The compact form layouts.json stores.

        A decoder stack whose layers all hold the same names and shapes (the common case,
        MoE experts included) is one template plus a layer count: Qwen3-30B-A3B's 18,867
        tensors become ~400 entries. A stack whose layers differ (mixed layer types, dense
        first layers before MoE ones) stays in `tensors`, name by name.
        """
        stacks: dict[str, dict[int, dict[str, list[int]]]] = {}
        for name, shape in self.tensors.items():
            found = layer_index(name)
            if found is not None:
                prefix, i, rest = found
                stacks.setdefault(prefix, {}).setdefault(i, {})[rest] = list(shape)
        flat = {name: list(shape) for name, shape in self.tensors.items()}
        repeated = []
        for prefix, layers in sorted(stacks.items()):
            template = layers[min(layers)]
            if sorted(layers) != list(range(len(layers))) or any(layer != template for layer in layers.values()):
                continue  # irregular: stored in full
            repeated.append({"prefix": prefix, "count": len(layers), "tensors": template})
            for i in range(len(layers)):
                for rest in template:
                    del flat[f"{prefix}.{i}.{rest}"]
        return {
            "model_class": self.model_class,
            "tensors": flat,
            "repeated_layers": repeated,
            "optional": sorted(self.optional),
            "ignore_missing": list(self.ignore_missing),
            "ignore_unexpected": list(self.ignore_unexpected),
            "base_model_prefix": self.base_model_prefix,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ExpectedLayout":
        tensors = {name: tuple(shape) for name, shape in data["tensors"].items()}
        for stack in data["repeated_layers"]:
            for i in range(stack["count"]):
                for rest, shape in stack["tensors"].items():
                    tensors[f"{stack['prefix']}.{i}.{rest}"] = tuple(shape)
        return cls(
            model_class=data["model_class"],
            tensors=tensors,
            optional=frozenset(data["optional"]),
            ignore_missing=tuple(data["ignore_missing"]),
            ignore_unexpected=tuple(data["ignore_unexpected"]),
            base_model_prefix=data["base_model_prefix"],
        )


Outcome = ExpectedLayout | CannotVerify | ConfigRejected

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
# The outcomes this process has looked up or built, by config key, as data (a refusal is kept as
# its JSON form and raised anew). Memory only: `check` writes nothing, not even a cache in the
# user's home.
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


def outcome_to_json(outcome: Outcome) -> dict[str, Any]:
    if isinstance(outcome, ExpectedLayout):
        return {"layout": outcome.to_json()}
    return {"cannot_verify" if isinstance(outcome, CannotVerify) else "rejected": str(outcome)}


def outcome_from_json(data: dict[str, Any]) -> Outcome:
    if "cannot_verify" in data:
        return CannotVerify(data["cannot_verify"])
    if "rejected" in data:
        return ConfigRejected(data["rejected"])
    return ExpectedLayout.from_json(data["layout"])


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


def expected_layout(config: dict[str, Any], budget: Budget | None = None) -> ExpectedLayout:
    """Names and shapes of the model `config` declares; raises CannotVerify / ConfigRejected.

    Looked up in the shipped table first (no torch, no transformers: ~1 ms), then among
    the layouts this process built; otherwise built with transformers on the meta device
    (~2-3 s for the torch + transformers import, ~50 ms per build) and kept in memory.
    The table holds what the transformers version recorded in layouts.json builds;
    tests/weights/test_weights.py rebuilds it with the installed transformers to catch drift.
    """
    key = config_key(config)
    kept = OUTCOMES.get(key)
    if kept is None:
        entry = shipped_layouts().get(key)
        if entry is not None:
            result = outcome_from_json(entry)
        else:
            result = build_bounded(config, budget)
            if isinstance(result, CannotVerify) and result.transient:
                raise result  # out of time here: another repository may have the time to build it
        kept = OUTCOMES.put(key, result if isinstance(result, ExpectedLayout) else outcome_to_json(result))
    if isinstance(kept, ExpectedLayout):
        return kept
    raise outcome_from_json(kept)


def build_outcome(config: dict[str, Any]) -> Outcome:
    """What `_build` makes of a config, its refusals included (make_layouts.py: in-process)."""
    try:
        return _build(config)
    except (CannotVerify, ConfigRejected) as err:
        return err


def _refuse_side_effects(event: str, args: tuple) -> None:
    """The build child's audit hook: no connection, no program, no file written or removed."""
    if event == "open":
        mode, flags = args[1], args[2]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC))
        if writes and not isinstance(args[0], int):
            raise PermissionError(f"{OFFLINE_REFUSAL}: it tried to write {args[0]}")
    elif event in ("socket.connect", "socket.getaddrinfo", "subprocess.Popen", "os.system", "os.exec",
                   "os.posix_spawn", "os.spawn", "os.mkdir", "os.remove", "os.rename", "os.rmdir", "os.symlink",
                   "os.link", "os.truncate", "shutil.rmtree"):
        raise PermissionError(f"{OFFLINE_REFUSAL}: {event} refused")


def _build_in_child(config: dict[str, Any], emit: Callable[[Any], None], guard: StepGuard) -> None:
    # Offline before transformers and huggingface_hub are imported; torch's cache directory
    # named so that importing torch probes no temporary directory (it exists already).
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                       "TORCHINDUCTOR_CACHE_DIR": os.path.abspath(os.sep), "TRITON_CACHE_DIR": os.path.abspath(os.sep)})
    sys.addaudithook(_refuse_side_effects)
    with guard.step():
        emit(outcome_to_json(build_outcome(config)))


def build_bounded(config: dict[str, Any], budget: Budget | None = None) -> Outcome:
    """build_outcome in a bounded, offline, read-only child process (see the module's doc)."""
    refused = _refused_early(config)
    if refused is not None:
        return refused
    seconds = min(BUILD_SECONDS, budget.remaining()) if budget is not None else BUILD_SECONDS
    if seconds < 5:
        return CannotVerify("not built: the time budget of this check ran out", transient=True)
    result = run_bounded(partial(_build_in_child, config), Limits(total_s=seconds, step_s=seconds,
                                                                   memory_bytes=BUILD_MEMORY, message_bytes=64 << 20))
    if result.messages and isinstance(result.messages[0], dict):
        outcome = outcome_from_json(result.messages[0])
        if isinstance(outcome, (CannotVerify, ConfigRejected)) and any(
                marker in str(outcome) for marker in (OFFLINE_REFUSAL, "OfflineModeIsEnabled", "LocalEntryNotFound",
                                                      "offline mode")):
            return CannotVerify("building this config needs a download or a file written (e.g. a `backbone` "
                                "fetched from the Hub), which `check` never does")
        return outcome
    why = "it took longer than {:g} s".format(seconds) if result.failure == "timeout" else (result.failure or "it failed")
    return CannotVerify(f"transformers could not build this config on the meta device here: {why}",
                        transient=result.failure == "timeout")


def _refused_early(config: dict[str, Any]) -> CannotVerify | None:
    """Configs not worth a build: quantized weights, and counts no real model has."""
    if config.get("quantization_config") or config.get("quantization"):
        method = (config.get("quantization_config") or config.get("quantization") or {})
        method = method.get("quant_method", "mlx") if isinstance(method, dict) else "unknown"
        return CannotVerify(f"the weights are quantized ({method}): their tensors are not the model's parameters")
    for keys, limit in ((LAYER_KEYS, MAX_LAYERS), (EXPERT_KEYS, MAX_EXPERTS)):
        for key in keys:
            value = registry.config_value(config, key)
            if isinstance(value, int) and not isinstance(value, bool) and value > limit:
                return CannotVerify(f"{key} is {value:,}, more than hfdoctor builds to compare ({limit:,})")
    return None


def _build(config: dict[str, Any]) -> ExpectedLayout:
    """Instantiate the declared model on the meta device (no memory, no download, no remote code)."""
    model_type = config.get("model_type")
    refused = _refused_early(config)
    if refused is not None:
        raise refused
    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError as err:
        raise CannotVerify(f"torch/transformers are not installed ({err.name}): pip install 'hfdoctor[probe]'") from None
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise CannotVerify(f"transformers {transformers.__version__} does not know model_type {model_type!r}")
    with _quiet_transformers():
        try:
            cfg = AutoConfig.for_model(**config)
        except Exception as err:  # transformers raises ValueError, TypeError, KeyError... on bad configs
            raise ConfigRejected(f"{type(err).__name__}: {err}") from None
        # The class transformers' AutoModelForCausalLM builds, unless `architectures` names
        # another class of the same model type (a vision-language wrapper, a classifier).
        arch = (config.get("architectures") or [None])[0]
        cls = None
        if isinstance(arch, str) and arch in registry.architectures().get(model_type, ()):
            cls = getattr(transformers, arch, None)
        try:
            with torch.device("meta"):
                if cls is not None:
                    model = cls(cfg)
                else:
                    try:
                        model = AutoModelForCausalLM.from_config(cfg)
                    except ValueError:  # not a causal LM model type: the bare model
                        model = AutoModel.from_config(cfg)
        except Exception as err:  # the model's __init__ rejects the dimensions
            raise ConfigRejected(f"building the model fails: {type(err).__name__}: {err}") from None
        state = model.state_dict()
        try:
            # What save_pretrained writes: transformers 5 fuses some tensors (MoE experts) on
            # load and splits them back on save; checkpoints hold the saved form.
            from transformers.core_model_loading import revert_weight_conversion

            state = revert_weight_conversion(model, dict(state))
        except Exception:
            pass
    # all_tied_weights_keys (transformers 5) holds the ties this config really makes;
    # the class attribute _tied_weights_keys lists possible ties, tied or not.
    tied = getattr(model, "all_tied_weights_keys", None)
    if tied is None:
        tied = (getattr(model, "_tied_weights_keys", None) or ()) if getattr(cfg, "tie_word_embeddings", False) else ()
    ignore_unexpected = list(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ())
    if any(name.endswith("rotary_emb.inv_freq") for name, _ in model.named_buffers()):
        # Old checkpoints saved the RoPE buffer; transformers drops it on load (as here).
        ignore_unexpected.append(r"rotary_emb\.inv_freq")
    return ExpectedLayout(
        model_class=type(model).__name__,
        tensors={name: tuple(t.shape) for name, t in state.items()},
        optional=frozenset(tied),
        ignore_missing=tuple(sorted(getattr(model, "_keys_to_ignore_on_load_missing", None) or ())),
        ignore_unexpected=tuple(sorted(ignore_unexpected)),
        base_model_prefix=getattr(model, "base_model_prefix", "") or "",
    )


class _quiet_transformers:
    """Silence transformers' logging and warnings while it builds a model for us."""

    def __enter__(self):
        import warnings

        from transformers.utils import logging

        self._level = logging.get_verbosity()
        logging.set_verbosity_error()
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc):
        from transformers.utils import logging

        self._warnings.__exit__(*exc)
        logging.set_verbosity(self._level)
        return False
