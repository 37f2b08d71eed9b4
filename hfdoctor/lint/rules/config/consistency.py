"""config-inconsistent: config.json values that contradict each other, or the weights."""

from __future__ import annotations

import math
from typing import Any, Iterator

from hfdoctor.knowledge import registry
from hfdoctor.lineage.adapter_base import config_is_the_bases
from hfdoctor.lint.edits.json_edits import json_set_value
from hfdoctor.findings import Applicability, Finding, Fix, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.weights.expected import CannotVerify, ConfigRejected, expected_layout
from hfdoctor.weights.headers import repo_weights

# The safetensors dtype that each config dtype name means.
CONFIG_DTYPES = {"bfloat16": "BF16", "float16": "F16", "half": "F16", "float32": "F32", "float": "F32"}
FLOAT_DTYPES = {"BF16", "F16", "F32"}
# RoPE types whose frequencies depend on the pre-extension context length: transformers
# (and vLLM, which indexes rope_scaling["original_max_position_embeddings"]) need it.
ROPE_NEEDS_ORIGINAL = ("yarn", "longrope", "llama3")
ROPE_REQUIRED = {"llama3": ("factor", "low_freq_factor", "high_freq_factor"), "yarn": ("factor",),
                 "longrope": ("short_factor", "long_factor"), "linear": ("factor",), "dynamic": ("factor",)}
HEAD_SUFFIX = "lm_head.weight"


def _rope(config: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(the key, the dict) of the RoPE scaling config.json declares: rope_scaling (v4) or rope_parameters (v5)."""
    for key in ("rope_scaling", "rope_parameters"):
        value = config.get(key)
        if isinstance(value, dict) and value:
            return key, value
    return None


@rule("CFG005", "config-inconsistent", Severity.WARNING, fix=FixAvailability.SOMETIMES)
def config_inconsistent(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """config.json values contradict each other, the generation setup, or the weights.

    Why: every engine builds the model from config.json; a value that contradicts the
    weights or another value of the file is read differently by each engine, or silently
    runs a model other than the one trained. What is flagged:
    - tie_word_embeddings false but the weights have no lm_head.weight: transformers
      initialises the output layer at random (error: the model outputs noise). Unsafe fix:
      tie_word_embeddings true, so the embedding (the only head there is) serves as output.
    - tie_word_embeddings true but the weights ship an lm_head.weight: engines disagree.
      transformers 4.x (checked on 4.46) and vLLM (#6758) tie the output layer to the
      embedding and never read the shipped head; transformers 5 (checked on 5.23) loads it
      untied. Unsafe fix: tie_word_embeddings false, so every engine uses the shipped head.
    - `dtype`/`torch_dtype` names another precision than most of the weights (axolotl
      #904): loaders that follow the config (dtype="auto", vLLM) run bf16-trained weights
      in float16, whose range overflows, or double the memory with float32. Safe fix: the
      weights' own dtype.
    - RoPE scaling (yarn, longrope, llama3) without `original_max_position_embeddings`,
      or without its other required keys: vLLM cannot build the rotary embedding, and
      transformers 5 assumes the original length is max_position_embeddings, which
      silently changes every position's frequencies (error; no fix, only the trainer
      knows the original length).
    - `use_cache: false` left over from training (LLaMA-Factory #1161): without a
      generation_config.json, generate() then re-runs the whole sequence for every new
      token (checked on transformers 5.23). Safe fix: use_cache true (outputs are identical).
      Info when the config.json sits beside a PEFT adapter that names its base (Unsloth saves
      the base's config there): loaders build that base from its own files, not this one.

    Example: SmolLM3-3B's config.json says `use_cache: false` (info there: it ships a
    generation_config.json). A copy of
    Qwen3-8B with yarn rope_scaling but no original_max_position_embeddings (Qwen3's
    README extends its context this way) is flagged: transformers 5 takes
    max_position_embeddings (40960) as the original length.

    Fix: sometimes; safe where the weights or the outputs decide (the weights' dtype,
    use_cache true), unsafe where it picks which head the model uses (tie_word_embeddings).
    None for RoPE scaling: only the trainer knows the original length.
    """
    config = repo.config
    if config is None:
        return
    yield from _rope_problems(repo, self, config)
    if config.get("use_cache") is False:
        yield _use_cache_off(repo, self)
    view = repo_weights(repo)
    tensors = view.main_tensors()
    if not tensors or config.get("quantization_config") or config.get("quantization"):
        return  # quantization-inconsistent judges quantized weights
    yield from _dtype_problem(repo, self, config, tensors)
    if view.complete:
        yield from _tied_head_problem(repo, self, config, tensors)


def _use_cache_off(repo: ModelRepo, self: Rule) -> Finding:
    """use_cache: false in config.json: a training leftover that slows generate(), unless no loader reads this
    config.json (the base's, saved beside a PEFT adapter)."""
    if config_is_the_bases(repo):
        # Unsloth writes the base's config.json (use_cache false from training) into the LoRA folder; every
        # loader of that folder builds the base named in adapter_config.json from the base's own files.
        return self.finding(
            repo, "config.json says use_cache: false, but it sits beside a PEFT adapter whose base is "
            f"{repo.adapter_config['base_model_name_or_path']!r}: transformers, PEFT and vLLM build that base from "
            "its own config.json and generation_config.json, so this value never reaches generate().",
            file="config.json", pointer="/use_cache", severity=Severity.INFO)
    edit = json_set_value(repo, "config.json", "/use_cache", True)
    no_gen = repo.generation_config is None and "generation_config.json" not in repo.problems
    return self.finding(
        repo,
        "config.json says use_cache: false (left from training with gradient checkpointing?)"
        + (": with no generation_config.json, transformers' generate() runs without a KV cache and recomputes "
           "the whole sequence for every token" if no_gen else
           ": forward passes that do not pass use_cache return no KV cache")
        + ". Set it to true; outputs do not change.",
        file="config.json", pointer="/use_cache", severity=Severity.WARNING if no_gen else Severity.INFO,
        fix=Fix("set use_cache: true in config.json", (edit,)) if edit else None,
    )


def _rope_problems(repo: ModelRepo, self: Rule, config: dict[str, Any]) -> Iterator[Finding]:
    found = _rope(config)
    if found is None:
        return
    key, rope = found
    rope_type = rope.get("rope_type", rope.get("type"))
    if not isinstance(rope_type, str):
        return
    missing = [k for k in ROPE_REQUIRED.get(rope_type, ()) if k not in rope]
    if rope_type in ROPE_NEEDS_ORIGINAL and "original_max_position_embeddings" not in rope \
            and "original_max_position_embeddings" not in config:
        missing.append("original_max_position_embeddings")
    if not missing:
        return
    max_pos = config.get("max_position_embeddings")
    yield self.finding(
        repo,
        f"{key} is {rope_type!r} but lacks {', '.join(missing)}: "
        + ("vLLM cannot build the rotary embedding (KeyError) and transformers 5 takes the original context as "
           f"max_position_embeddings ({max_pos}), which silently changes every position's RoPE frequencies. "
           if "original_max_position_embeddings" in missing else "transformers refuses the config (KeyError). ")
        + "Add the values of the model the scaling was trained for.",
        file="config.json", pointer=f"/{key}", severity=Severity.ERROR,
    )


def _dtype_problem(repo: ModelRepo, self: Rule, config: dict[str, Any], tensors) -> Iterator[Finding]:
    key = "dtype" if "dtype" in config else "torch_dtype" if "torch_dtype" in config else None
    declared = CONFIG_DTYPES.get(str(config.get(key))) if key else None
    if declared is None:
        return
    counts: dict[str, int] = {}
    for info in tensors.values():
        if info.dtype in FLOAT_DTYPES:
            counts[info.dtype] = counts.get(info.dtype, 0) + math.prod(info.shape)
    total = sum(counts.values())
    if not total:
        return
    actual, share = max(counts.items(), key=lambda kv: kv[1])
    if actual == declared or share < 0.9 * total:
        return  # mixed checkpoints (fp32 norms beside bf16 matrices) keep their declared dtype
    names = {v: k for k, v in CONFIG_DTYPES.items() if k in ("bfloat16", "float16", "float32")}
    effect = {
        ("BF16", "F16"): "loaders that follow it (dtype=\"auto\", vLLM) run bfloat16-trained weights in float16, whose "
                         "smaller range overflows into inf/NaN on large activations",
        ("BF16", "F32"): "loaders that follow it load the weights in float32: twice the memory for the same values",
        ("F16", "F32"): "loaders that follow it load the weights in float32: twice the memory for the same values",
        ("F32", "BF16"): "loaders that follow it cast the float32 weights down to bfloat16",
        ("F32", "F16"): "loaders that follow it cast the float32 weights down to float16",
        ("F16", "BF16"): "loaders that follow it run float16 weights in bfloat16, with less precision",
    }.get((actual, declared), "loaders that follow it cast the weights")
    edit = json_set_value(repo, "config.json", f"/{key}", names[actual])
    yield self.finding(
        repo,
        f"config.json's {key} is {config.get(key)!r} but {share * 100 // total}% of the weights are {names[actual]}: "
        f"{effect}. Declare the weights' own dtype.",
        file="config.json", pointer=f"/{key}",
        fix=Fix(f"set {key} to {names[actual]} in config.json", (edit,)) if edit else None,
    )


def _tied_head_problem(repo: ModelRepo, self: Rule, config: dict[str, Any], tensors) -> Iterator[Finding]:
    try:
        expected = expected_layout(config, repo.budget, repo.root)
    except (CannotVerify, ConfigRejected):
        return
    head = next((n for n in expected.tensors if n.endswith(HEAD_SUFFIX)), None)
    if head is None:
        return
    prefix = expected.base_model_prefix + "."
    shipped = head in tensors or (head.startswith(prefix) and head[len(prefix):] in tensors)
    tied = head in expected.optional
    tie_key = "/tie_word_embeddings" if "tie_word_embeddings" in config else None
    if tie_key is None and isinstance(config.get("text_config"), dict) and "tie_word_embeddings" in config["text_config"]:
        tie_key = "/text_config/tie_word_embeddings"
    stated = registry.config_value(config, "tie_word_embeddings")
    said = f"tie_word_embeddings is {str(stated).lower()}" if stated is not None else \
        f"tie_word_embeddings is unset ({expected.model_class} defaults to {str(tied).lower()})"
    if tied and shipped:
        edit = json_set_value(repo, "config.json", tie_key or "/tie_word_embeddings", False)
        yield self.finding(
            repo,
            f"config.json's {said}, yet the weights ship {head}: transformers 4.x and vLLM tie the output layer to "
            "the input embedding and never read it, while transformers 5 loads it untied, so engines produce "
            "different logits. Set tie_word_embeddings to false if the head was trained, or drop it from the weights.",
            file="config.json", pointer=tie_key,
            fix=Fix("set tie_word_embeddings: false in config.json", (edit,), Applicability.UNSAFE) if edit else None,
        )
    elif not tied and not shipped:
        edit = json_set_value(repo, "config.json", tie_key or "/tie_word_embeddings", True)
        yield self.finding(
            repo,
            f"config.json's {said}, but the weights have no {head}: transformers initialises the output layer at "
            "random and the model produces noise (vLLM refuses to load). Set tie_word_embeddings to true if the "
            "model was trained with tied embeddings, or ship its lm_head.",
            file="config.json", pointer=tie_key, severity=Severity.ERROR,
            fix=Fix("set tie_word_embeddings: true in config.json", (edit,), Applicability.UNSAFE) if edit else None,
        )


RULES = [config_inconsistent]
