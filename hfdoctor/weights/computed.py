"""The tensor layout of a config.json, computed without transformers, for the families hfdoctor knows.

A checkpoint outside the shipped table (a fine-tune resized or pruned, a tiny test model, a new
size of a known family) needs the names and shapes its config declares. For the decoder
families below they follow from a handful of numbers (layers, hidden size, heads, head_dim,
intermediate size, experts, biases, tied embeddings), so they are computed here in pure Python:
no torch, no transformers, about a millisecond. tests/weights/test_computed.py proves every
family equal to transformers' meta-device build (hfdoctor.weights.build) on every config of
../shared/upstream, the fixtures and the corpora, and on variants of every key read here.

transformers reads config.json strictly: its config classes check each field's type, fill in
their own defaults, alias names (Mixtral's num_experts), and some values make it refuse the
config or fail to build the model. So a layout is computed only for a config read exactly as
transformers reads it: every key is a field of the family's config class with a value of a
type that class accepts (upstream_templates/config_fields.json, generated from transformers),
or one of the few keys known to shape nothing. Anything else (an unknown key, a value of
another type, a rope scaling not modelled here, an odd head size) is declined with a reason,
and the caller asks transformers in a bounded child (hfdoctor.weights.build) and caches the
answer. Declining costs time once; computing is allowed only where it is certain.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from hfdoctor.knowledge import registry
from hfdoctor.weights.outcome import ExpectedLayout

FIELDS_FILE = "config_fields.json"
ROTARY_BUFFER = r"rotary_emb\.inv_freq"  # old checkpoints saved it; transformers drops it on load
MAX_LAYERS = 1024  # as hfdoctor.weights.build refuses larger counts, so does this module
MAX_EXPERTS = 8192
MAX_TENSORS = 1_000_000  # 20x DeepSeek-V3's 47,000: a config asking for more is hostile, not a model
# Keys that are no field of the config classes and that no code building these models reads, each
# proven inert by the variant test: trainers' and servers' bookkeeping; keys older releases wrote
# (SmolLM2's is_llama_config, GPTQ-era max_sequence_length, Qwen2.5's use_mrope, Llama 2's
# pretraining_tp, Qwen's max_window_layers where the class has no such field); and auto_map, whose
# remote code transformers never runs here (hfdoctor compares with the native class, as it builds it).
INERT_EXTRAS = frozenset({"_name_or_path", "_commit_hash", "_attn_implementation_autoset", "unsloth_version",
                          "unsloth_fixed", "cache_implementation", "max_sequence_length", "is_llama_config",
                          "max_window_layers", "use_mrope", "pretraining_tp", "auto_map"})
NUMBER = (int, float)


class Declined(Exception):
    """This config is not computed here (the message says why); transformers decides."""


Tensors = dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class Family:
    """One model type's CausalLM class: its decoder layer's tensors, and what its config class does."""

    model_class: str
    layer: Callable[["Dims", int], Tensors]
    kv_none_is_heads: bool = True  # the config class turns num_key_value_heads None into num_attention_heads
    head_dim_stays_none: bool = False  # its config class leaves a null head_dim null (Mixtral's)
    scaled_rope: bool = True  # reads the rope scalings of ROPE_TYPES as the other families (Phi-3: only longrope)
    ignore_unexpected: tuple[str, ...] = (ROTARY_BUFFER,)
    # Keys that are no field of its config class but that its configs carry: inert ones (phi-4's
    # attention_bias, Gemma 2's hidden_act beside hidden_activation), or ones read only into
    # non-shaping values (Gemma 3's sliding_window_pattern and rope_local_base_freq, checked here).
    extra_keys: frozenset[str] = frozenset()


class Dims:
    """A config's values as the family's config class has them: its own value, else the class default."""

    def __init__(self, config: dict[str, Any], fields: dict[str, dict[str, Any]]):
        self.config = config
        self.fields = fields

    def get(self, name: str) -> Any:
        if name in self.config:
            return self.config[name]
        if name in self.fields:
            return self.fields[name]["default"]
        return None

    def size(self, name: str, low: int = 1) -> int:
        value = self.get(name)
        if not _is_int(value) or not low <= value <= 1 << 40:
            raise Declined(f"{name} is {value!r}, not a size")
        return value

    def flag(self, name: str) -> bool:
        value = self.get(name)
        if not isinstance(value, bool):
            raise Declined(f"{name} is {value!r}, not a boolean")
        return value

    hidden = property(lambda self: self.size("hidden_size"))
    heads = property(lambda self: self.size("num_attention_heads"))
    kv_heads = property(lambda self: self.size("num_key_value_heads"))

    @property
    def head_dim(self) -> int:
        # Every family's attention reads config.head_dim when there is one, else hidden // heads.
        return self.size("head_dim") if self.get("head_dim") is not None else self.hidden // self.heads


# --- the pieces of a decoder layer ------------------------------------------------------------


def _linear(name: str, out_features: int, in_features: int, bias: bool) -> Tensors:
    tensors = {f"{name}.weight": (out_features, in_features)}
    if bias:
        tensors[f"{name}.bias"] = (out_features,)
    return tensors


def _attention(d: Dims, qkv_bias: bool, o_bias: bool, qk_norm: str | None = None) -> Tensors:
    """q/k/v/o projections; q_norm/k_norm over one head ("head") or all heads ("heads", OLMo 2)."""
    h, q, kv = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim
    tensors = {**_linear("self_attn.q_proj", q, h, qkv_bias), **_linear("self_attn.k_proj", kv, h, qkv_bias),
               **_linear("self_attn.v_proj", kv, h, qkv_bias), **_linear("self_attn.o_proj", h, q, o_bias)}
    if qk_norm == "head":
        tensors.update({"self_attn.q_norm.weight": (d.head_dim,), "self_attn.k_norm.weight": (d.head_dim,)})
    elif qk_norm == "heads":
        tensors.update({"self_attn.q_norm.weight": (q,), "self_attn.k_norm.weight": (kv,)})
    return tensors


def _mlp(prefix: str, hidden: int, intermediate: int, bias: bool = False) -> Tensors:
    return {**_linear(f"{prefix}.gate_proj", intermediate, hidden, bias),
            **_linear(f"{prefix}.up_proj", intermediate, hidden, bias),
            **_linear(f"{prefix}.down_proj", hidden, intermediate, bias)}


def _norms(d: Dims, *names: str) -> Tensors:
    return {f"{name}.weight": (d.hidden,) for name in names}


PRE_POST = ("input_layernorm", "post_attention_layernorm")
SANDWICH = PRE_POST + ("pre_feedforward_layernorm", "post_feedforward_layernorm")


def _experts(prefix: str, count: int, hidden: int, size: int, names=("gate_proj", "up_proj", "down_proj")) -> Tensors:
    """Per-expert projections as checkpoints store them (transformers 5 fuses them in memory only)."""
    gate, up, down = names
    tensors: Tensors = {}
    for e in range(count):
        tensors.update({f"{prefix}.{e}.{gate}.weight": (size, hidden), f"{prefix}.{e}.{up}.weight": (size, hidden),
                        f"{prefix}.{e}.{down}.weight": (hidden, size)})
    return tensors


def _sparse_layer(d: Dims, i: int) -> bool:
    """Qwen MoE: a layer has experts unless mlp_only_layers names it or decoder_sparse_step skips it."""
    only = d.get("mlp_only_layers") or []
    return i not in only and (i + 1) % d.size("decoder_sparse_step") == 0


# --- the families -------------------------------------------------------------------------------


def _llama(d: Dims, i: int) -> Tensors:
    """Llama, Granite, SmolLM3: attention_bias on all four projections, mlp_bias on the MLP."""
    bias = d.flag("attention_bias")
    return {**_attention(d, bias, bias), **_mlp("mlp", d.hidden, d.size("intermediate_size"), d.flag("mlp_bias")),
            **_norms(d, *PRE_POST)}


def _plain(d: Dims, i: int) -> Tensors:
    """Mistral: no biases anywhere."""
    return {**_attention(d, False, False), **_mlp("mlp", d.hidden, d.size("intermediate_size")), **_norms(d, *PRE_POST)}


def _qwen2(d: Dims, i: int) -> Tensors:
    return {**_attention(d, True, False), **_mlp("mlp", d.hidden, d.size("intermediate_size")), **_norms(d, *PRE_POST)}


def _qwen3(d: Dims, i: int) -> Tensors:
    bias = d.flag("attention_bias")
    return {**_attention(d, bias, bias, "head"), **_mlp("mlp", d.hidden, d.size("intermediate_size")),
            **_norms(d, *PRE_POST)}


def _qwen3_moe(d: Dims, i: int) -> Tensors:
    bias = d.flag("attention_bias")
    tensors = {**_attention(d, bias, bias, "head"), **_norms(d, *PRE_POST)}
    if _sparse_layer(d, i):
        experts = d.size("num_experts")
        tensors.update(_experts("mlp.experts", experts, d.hidden, d.size("moe_intermediate_size")))
        tensors["mlp.gate.weight"] = (experts, d.hidden)
    else:
        tensors.update(_mlp("mlp", d.hidden, d.size("intermediate_size")))
    return tensors


def _qwen2_moe(d: Dims, i: int) -> Tensors:
    tensors = {**_attention(d, d.flag("qkv_bias"), False), **_norms(d, *PRE_POST)}
    if _sparse_layer(d, i):
        experts = d.size("num_experts")
        tensors.update(_experts("mlp.experts", experts, d.hidden, d.size("moe_intermediate_size")))
        tensors["mlp.gate.weight"] = (experts, d.hidden)
        tensors.update(_mlp("mlp.shared_expert", d.hidden, d.size("shared_expert_intermediate_size")))
        tensors["mlp.shared_expert_gate.weight"] = (1, d.hidden)
    else:
        tensors.update(_mlp("mlp", d.hidden, d.size("intermediate_size")))
    return tensors


def _mixtral(d: Dims, i: int) -> Tensors:
    experts = d.size("num_local_experts")
    return {**_attention(d, False, False), **_norms(d, *PRE_POST),
            **_experts("block_sparse_moe.experts", experts, d.hidden, d.size("intermediate_size"), ("w1", "w3", "w2")),
            "block_sparse_moe.gate.weight": (experts, d.hidden)}


def _gemma(d: Dims, i: int) -> Tensors:
    bias = d.flag("attention_bias")
    return {**_attention(d, bias, bias), **_mlp("mlp", d.hidden, d.size("intermediate_size")), **_norms(d, *PRE_POST)}


def _gemma2(d: Dims, i: int) -> Tensors:
    bias = d.flag("attention_bias")
    return {**_attention(d, bias, bias), **_mlp("mlp", d.hidden, d.size("intermediate_size")), **_norms(d, *SANDWICH)}


def _gemma3_text(d: Dims, i: int) -> Tensors:
    bias = d.flag("attention_bias")
    return {**_attention(d, bias, bias, "head"), **_mlp("mlp", d.hidden, d.size("intermediate_size")),
            **_norms(d, *SANDWICH)}


def _phi3(d: Dims, i: int) -> Tensors:
    """Phi-3 and Phi-4: fused qkv_proj and gate_up_proj."""
    h, hd, size = d.hidden, d.head_dim, d.size("intermediate_size")
    return {"self_attn.qkv_proj.weight": ((d.heads + 2 * d.kv_heads) * hd, h), "self_attn.o_proj.weight": (h, d.heads * hd),
            "mlp.gate_up_proj.weight": (2 * size, h), "mlp.down_proj.weight": (h, size), **_norms(d, *PRE_POST)}


def _olmo2(d: Dims, i: int) -> Tensors:
    """OLMo 2: q_norm/k_norm over all heads, norms after attention and MLP only."""
    bias = d.flag("attention_bias")
    return {**_attention(d, bias, bias, "heads"), **_mlp("mlp", d.hidden, d.size("intermediate_size")),
            **_norms(d, "post_attention_layernorm", "post_feedforward_layernorm")}


FAMILIES: dict[str, Family] = {
    "llama": Family("LlamaForCausalLM", _llama),
    "granite": Family("GraniteForCausalLM", _llama),
    "smollm3": Family("SmolLM3ForCausalLM", _llama),
    "mistral": Family("MistralForCausalLM", _plain),
    "mixtral": Family("MixtralForCausalLM", _mixtral, head_dim_stays_none=True),
    "qwen2": Family("Qwen2ForCausalLM", _qwen2),
    "qwen2_moe": Family("Qwen2MoeForCausalLM", _qwen2_moe, kv_none_is_heads=False),
    "qwen3": Family("Qwen3ForCausalLM", _qwen3),
    "qwen3_moe": Family("Qwen3MoeForCausalLM", _qwen3_moe, kv_none_is_heads=False),
    "gemma": Family("GemmaForCausalLM", _gemma, kv_none_is_heads=False),
    "gemma2": Family("Gemma2ForCausalLM", _gemma2, kv_none_is_heads=False, extra_keys=frozenset({"hidden_act"})),
    "gemma3_text": Family("Gemma3ForCausalLM", _gemma3_text, kv_none_is_heads=False, ignore_unexpected=(),
                          extra_keys=frozenset({"sliding_window_pattern", "rope_local_base_freq"})),
    "phi3": Family("Phi3ForCausalLM", _phi3, scaled_rope=False, extra_keys=frozenset({"attention_bias"})),
    "olmo2": Family("Olmo2ForCausalLM", _olmo2),
}


# --- reading the config as transformers does ------------------------------------------------------


@lru_cache(maxsize=1)
def config_fields() -> dict[str, Any]:
    """upstream_templates/config_fields.json ({} when missing: every config is then declined)."""
    try:
        return json.loads(registry.data_file(FIELDS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def computed_layout(config: dict[str, Any]) -> ExpectedLayout | None:
    """The layout of `config` when this module can compute it exactly; None when it declines."""
    try:
        return compute(config)
    except Declined:
        return None


def compute(config: dict[str, Any]) -> ExpectedLayout:
    """The layout transformers builds for `config`; raises Declined (with the reason) otherwise."""
    model_type = config.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    table = config_fields()
    spec = table.get("model_types", {}).get(model_type) if family is not None else None
    if family is None or spec is None:
        raise Declined(f"model_type {model_type!r} is not a family computed here")
    config = _canonical(config, spec["aliases"])
    _check_keys(config, family, spec["fields"], table)
    d = Dims(config, spec["fields"])
    _check_values(d, family)
    vocab, hidden, layers = d.size("vocab_size"), d.hidden, d.size("num_hidden_layers", low=0)
    tensors: Tensors = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        tensors.update({f"model.layers.{i}.{name}": shape for name, shape in family.layer(d, i).items()})
    tensors["model.norm.weight"] = (hidden,)
    tensors["lm_head.weight"] = (vocab, hidden)
    return ExpectedLayout(
        model_class=family.model_class,
        tensors=tensors,
        optional=frozenset({"lm_head.weight"}) if d.flag("tie_word_embeddings") else frozenset(),
        ignore_missing=(),
        ignore_unexpected=family.ignore_unexpected,
        base_model_prefix="model",
    )


def _canonical(config: dict[str, Any], aliases: dict[str, str]) -> dict[str, Any]:
    """The config with aliased names (num_local_experts for Qwen3-MoE's num_experts) under the field's name."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = aliases.get(key, key)
        if name in out:
            raise Declined(f"{key} and {name} name the same field")
        out[name] = value
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _has_type(value: Any, name: str) -> bool:
    """Whether `value` is of the type `name`, as huggingface_hub's @strict checks it (no bool for int,
    no int for float)."""
    if name == "None":
        return value is None
    if name == "int":
        return _is_int(value)
    if name == "float":
        return isinstance(value, float)
    if name == "bool":
        return isinstance(value, bool)
    if name == "str":
        return isinstance(value, str)
    if name == "dict":
        return isinstance(value, dict)
    if name == "list[int]":
        return isinstance(value, list) and all(_is_int(v) for v in value)
    if name == "list[str]":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return False  # "list" of anything, "other": not modelled here


def _check_keys(config: dict[str, Any], family: Family, fields: dict[str, Any], table: dict[str, Any]) -> None:
    """Every key is one transformers reads the way this module does, with a value of an accepted type."""
    base = table["base_fields"]
    for key, value in config.items():
        spec = fields.get(key) or base.get(key)
        if key in ("model_type", "architectures"):
            continue  # checked with the values
        if spec is not None:
            if not any(_has_type(value, t) for t in spec["types"]):
                raise Declined(f"{key} is {value!r}, of a type transformers refuses for it")
            if spec["validated"] and key not in VALUE_CHECKS:
                raise Declined(f"{key} has a validator not modelled here")
        elif key in table["generation_parameters"]:
            continue  # transformers drops generation parameters from a model config
        elif key in INERT_EXTRAS:
            continue
        elif key not in SPECIAL_KEYS and key not in family.extra_keys:
            raise Declined(f"{key} is not a field of {family.model_class}'s config")


def _in_unit(value: Any) -> bool:
    return isinstance(value, float) and 0.0 <= value <= 1.0


# Fields whose config class checks more than the type, and the same check here.
VALUE_CHECKS: dict[str, Callable[[Any], bool]] = {"initializer_range": _in_unit}
# Keys that are no field but that transformers reads on every config (checked in _check_values).
SPECIAL_KEYS = frozenset({"torch_dtype", "rope_theta", "rope_scaling", "head_dim", "layer_types", "name_or_path",
                          "original_max_position_embeddings"})
ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention")


def _check_values(d: Dims, family: Family) -> None:
    """What transformers refuses, or builds otherwise than this module, beyond each value's type."""
    config, table = d.config, config_fields()
    for key, check in VALUE_CHECKS.items():
        if key in config and not check(config[key]):
            raise Declined(f"{key} is {config[key]!r}, which transformers refuses")
    architectures = config.get("architectures")
    if architectures is not None:
        if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
            raise Declined("architectures is not a list of class names")
        first = architectures[0] if architectures else None
        if first != family.model_class and first in registry.architectures().get(config["model_type"], ()):
            raise Declined(f"architectures names {first}, not the causal LM")  # a classifier: another layout
    for key in ("torch_dtype", "dtype"):
        if config.get(key) is not None and config[key] not in table["torch_dtypes"]:
            raise Declined(f"{key} {config[key]!r} is not a torch dtype")
    for key in ("hidden_act", "hidden_activation"):
        if key in d.fields and d.get(key) not in table["activations"]:
            raise Declined(f"{key} {d.get(key)!r} is not an activation transformers knows")
    if config.get("is_encoder_decoder") or any(config.get(k) is not None for k in ("id2label", "label2id", "problem_type")):
        raise Declined("a config with labels or an encoder-decoder flag")
    if config.get("use_bidirectional_attention"):
        raise Declined("use_bidirectional_attention changes how the config class reads sliding_window")
    if config.get("name_or_path") is not None and not isinstance(config["name_or_path"], str):
        raise Declined("name_or_path is not a string")
    layers = d.size("num_hidden_layers", low=0)
    if layers > MAX_LAYERS:
        raise Declined(f"num_hidden_layers is {layers:,}, more than hfdoctor builds to compare")
    if d.hidden % d.heads:
        raise Declined("hidden_size is not a multiple of num_attention_heads")
    if d.get("num_key_value_heads") is None:
        if not family.kv_none_is_heads:
            raise Declined("num_key_value_heads is null")
        config["num_key_value_heads"] = d.heads  # as the config class's __post_init__ does
    d.size("num_key_value_heads")
    if "head_dim" in config and not _is_int(config["head_dim"]) and not (
            config["head_dim"] is None and "head_dim" in d.fields):  # a field's null is the class's to fill
        raise Declined("head_dim is not an integer")
    if d.head_dim > 4 and d.head_dim % 2:
        raise Declined(f"head_dim {d.head_dim} is odd: transformers refuses an odd rotary dimension")
    vocab = d.size("vocab_size")
    pad = d.get("pad_token_id")
    if pad is not None and not (_is_int(pad) and 0 <= pad < vocab):
        raise Declined(f"pad_token_id {pad!r} is outside the embedding: the model does not build")
    layer_types = config.get("layer_types")
    if layer_types is not None and not (isinstance(layer_types, list) and len(layer_types) == layers
                                        and all(t in ATTENTION_LAYER_TYPES for t in layer_types)):
        raise Declined("layer_types is not one attention type per layer")
    experts = 0
    for key in ("num_experts", "num_local_experts"):
        if key in d.fields:
            experts = d.size(key)
            if experts > MAX_EXPERTS:
                raise Declined(f"{key} is {experts:,}, more than hfdoctor builds to compare")
    if layers * (3 * experts + 16) > MAX_TENSORS:
        raise Declined(f"{layers:,} layers of {experts:,} experts: more tensors than any model has")
    for key in ("sliding_window_pattern", "original_max_position_embeddings"):
        if key in config and not (_is_int(config[key]) and config[key] >= 1):
            raise Declined(f"{key} is not a positive integer")
    _check_rope(d, family)


# rope_type -> (keys it needs, keys it may have), beyond rope_type/type/rope_theta. What transformers'
# validators accept (modeling_rope_utils); other rope types (longrope, proportional...) are declined.
ROPE_TYPES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "default": (frozenset(), frozenset()),
    "linear": (frozenset({"factor"}), frozenset()),
    "dynamic": (frozenset({"factor"}), frozenset()),
    "yarn": (frozenset({"factor"}), frozenset({"original_max_position_embeddings", "attention_factor", "beta_fast",
                                                "beta_slow", "mscale", "mscale_all_dim", "truncate"})),
    "llama3": (frozenset({"factor", "low_freq_factor", "high_freq_factor"}),
               frozenset({"original_max_position_embeddings"})),
}


def _check_rope(d: Dims, family: Family) -> None:
    """A rope set-up the config class reads without refusing it, in one of the forms modelled here."""
    config = d.config
    for key in ("rope_theta", "rope_local_base_freq"):
        if key in config and not (isinstance(config[key], NUMBER) and not isinstance(config[key], bool)
                                  and 0 < config[key] < 1e12):
            raise Declined(f"{key} is {config[key]!r}")
    scaling, parameters = config.get("rope_scaling"), config.get("rope_parameters")
    if family.model_class == "Gemma3ForCausalLM" and parameters is not None:
        raise Declined("Gemma 3's rope_parameters (one per layer type) are read by its own config class")
    rope = scaling or parameters
    if rope is None or rope == {}:
        return
    if not isinstance(rope, dict):
        raise Declined("the rope scaling is not an object")
    kinds = {rope[k] for k in ("rope_type", "type") if k in rope}
    kind = kinds.pop() if len(kinds) == 1 else "default" if not kinds else None
    if kind not in ROPE_TYPES:
        raise Declined(f"rope type {kind!r} is not modelled here")
    if kind != "default" and not family.scaled_rope:
        raise Declined(f"{family.model_class}'s config class reads rope scaling its own way")
    if kind != "default" and family.head_dim_stays_none and d.get("head_dim") is None:
        raise Declined("a scaled rope with head_dim null: transformers' rope code reads config.head_dim")  # Mixtral
    needs, may = ROPE_TYPES[kind]
    keys = set(rope) - {"rope_type", "type", "rope_theta"}
    if not needs <= keys or not keys <= needs | may:
        raise Declined(f"the {kind} rope parameters are not the set transformers reads")
    for key, value in rope.items():
        if key in ("rope_type", "type"):
            ok = isinstance(value, str)
        elif key == "truncate":
            ok = isinstance(value, bool)
        elif key == "original_max_position_embeddings":
            ok = _is_int(value) and value > 0
        else:
            ok = isinstance(value, NUMBER) and not isinstance(value, bool) and 0 < value < 1e12 and math.isfinite(value)
        if not ok:
            raise Declined(f"rope parameter {key} is {value!r}")
    if "factor" in rope and rope["factor"] < 1:
        raise Declined("rope factor below 1")
    if kind == "llama3" and not rope["high_freq_factor"] > rope["low_freq_factor"]:
        raise Declined("llama3 rope: high_freq_factor not above low_freq_factor")
