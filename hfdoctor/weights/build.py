"""Building the declared model with transformers on torch's meta device: the slow path.

Where neither the shipped table nor hfdoctor.weights.computed knows a config's layout,
transformers is the only way to know it. config.json is repository data, and transformers
runs code on it: a DETR-style `backbone` makes AutoConfig download a model, a gpt2 with
50,000 layers keeps the build busy for minutes. So the build runs in a bounded child process
(hfdoctor.bounded.sandbox: time and memory capped, killed at its deadline) that is offline
(HF_HUB_OFFLINE) and whose audit hook refuses every network connection, program start and
file write: a config that needs any of them cannot be verified, and says so. torch and
transformers are imported only there, so the checking process never loads them, and
nothing is left behind on disk.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from typing import Any, Callable

from hfdoctor.bounded.budget import Budget
from hfdoctor.bounded.sandbox import Limits, StepGuard, run_bounded
from hfdoctor.knowledge import registry
from hfdoctor.weights.outcome import CannotVerify, ConfigRejected, ExpectedLayout, Outcome, outcome_from_json, \
    outcome_to_json

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
