"""What a checkpoint's tensor names and shapes say about its architecture (no torch).

`WeightsLayout` (layers, hidden size, vocabulary, q_norm/k_norm, biases, experts...) is
read off the safetensors headers; `infer_weights_families` says which registry families
have such checkpoints. Pure Python: lineage.py calls it on every check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hfdoctor.knowledge import registry
from hfdoctor.weights.headers import TensorInfo, repo_weights
from hfdoctor.repo.facts import fact

if TYPE_CHECKING:
    from hfdoctor.knowledge.registry import Family
    from hfdoctor.repo import ModelRepo


# Structural features a checkpoint's tensor names show, and how the message names them.
FEATURE_TEXT = {
    "qk_norm": "q_norm/k_norm",
    "qkv_bias": "q/k/v bias",
    "fused_qkv": "fused qkv_proj",
    "sandwich_norm": "pre/post-feedforward norms",
    "experts": "mixture of experts",
    "mla": "latent attention (q_a/kv_a projections)",
    "sinks": "attention sinks",
}
# The features each model type's checkpoints have (dense llama-style layers have none).
# Model types with the same features cannot be told apart by names; dimensions decide.
MODEL_TYPE_FEATURES: dict[str, frozenset[str]] = {
    "llama": frozenset(), "mistral": frozenset(), "smollm3": frozenset(), "gemma": frozenset(),
    "granite": frozenset(), "qwen2": frozenset({"qkv_bias"}), "qwen3": frozenset({"qk_norm"}),
    "qwen3_moe": frozenset({"qk_norm", "experts"}), "qwen2_moe": frozenset({"qkv_bias", "experts"}),
    "mixtral": frozenset({"experts"}), "gemma2": frozenset({"sandwich_norm"}),
    "gemma3": frozenset({"sandwich_norm", "qk_norm"}), "gemma3_text": frozenset({"sandwich_norm", "qk_norm"}),
    "phi3": frozenset({"fused_qkv"}), "deepseek_v3": frozenset({"mla", "experts"}),
    "gpt_oss": frozenset({"qkv_bias", "experts", "sinks"}),
}
EMBEDDING_SUFFIXES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "tok_embeddings.weight")
STACK_NAMES = frozenset({"layers", "h", "blocks"})


def layer_index(name: str) -> tuple[str, int, str] | None:
    """(prefix, layer, rest) of `model.layers.12.mlp.up_proj.weight`: the last `layers|h|blocks`
    followed by a number and more name. Split, not matched: a regex for this backtracks
    quadratically on a long name, and this runs over every tensor of a checkpoint."""
    parts = name.split(".")
    for j in range(len(parts) - 3, -1, -1):
        index = parts[j + 1]
        if parts[j] in STACK_NAMES and index.isascii() and index.isdecimal():
            rest = ".".join(parts[j + 2:])
            if rest:
                return ".".join(parts[:j + 1]), int(index), rest
    return None


def expert_index(rest: str) -> int | None:
    """The number after `experts.` in a layer's tensor name (`mlp.experts.7.up_proj.weight`)."""
    parts = rest.split(".")
    for j in range(len(parts) - 2):
        if parts[j] == "experts" and parts[j + 1].isascii() and parts[j + 1].isdecimal():
            return int(parts[j + 1])
    return None


@dataclass(frozen=True)
class WeightsLayout:
    """What a checkpoint's tensor names and shapes say about its architecture."""

    layers: int | None
    hidden_size: int | None
    vocab_size: int | None  # rows of the input embedding
    num_experts: int | None
    features: frozenset[str]
    embedding: str | None  # name of the input embedding tensor
    parameters: int

    def describe(self) -> str:
        parts = []
        if self.layers is not None:
            parts.append(f"{self.layers} layers")
        if self.hidden_size is not None:
            parts.append(f"hidden size {self.hidden_size}")
        if self.vocab_size is not None:
            parts.append(f"vocab {self.vocab_size}")
        if self.num_experts:
            parts.append(f"{self.num_experts} experts")
        for feature in ("qk_norm", "qkv_bias"):
            parts.append(("" if feature in self.features else "no ") + FEATURE_TEXT[feature])
        parts.extend(FEATURE_TEXT[f] for f in sorted(self.features - {"qk_norm", "qkv_bias", "experts"}))
        return ", ".join(parts)

    def model_types(self) -> list[str]:
        """Model types whose checkpoints have exactly these structural features."""
        return [mt for mt, feats in MODEL_TYPE_FEATURES.items() if feats == self.features]


def weights_layout(tensors: dict[str, TensorInfo]) -> WeightsLayout | None:
    if not tensors:
        return None
    # The decoder stack is the layer prefix with the most distinct layer indices.
    by_prefix: dict[str, set[int]] = {}
    layer_rest: dict[str, set[str]] = {}
    for name in tensors:
        found = layer_index(name)
        if found is not None:
            prefix, i, rest = found
            by_prefix.setdefault(prefix, set()).add(i)
            layer_rest.setdefault(prefix, set()).add(rest)
    prefix = max(by_prefix, key=lambda p: len(by_prefix[p]), default=None)
    layers = max(by_prefix[prefix]) + 1 if prefix is not None else None
    rests = layer_rest.get(prefix, set()) if prefix is not None else set()
    features = set()
    if any("q_norm" in r or "k_norm" in r for r in rests):
        features.add("qk_norm")
    if any(r.endswith(("q_proj.bias", "k_proj.bias")) for r in rests):
        features.add("qkv_bias")
    if any("qkv_proj" in r for r in rests):
        features.add("fused_qkv")
    if any("pre_feedforward_layernorm" in r for r in rests):
        features.add("sandwich_norm")
    if any(".experts." in f".{r}" or "block_sparse_moe" in r for r in rests):
        features.add("experts")
    if any("kv_a_proj" in r for r in rests):
        features.add("mla")
    if any(r.endswith("sinks") for r in rests):
        features.add("sinks")
    experts = {i for r in rests if (i := expert_index(r)) is not None}
    embedding = next((n for n in sorted(tensors, key=len) if n.endswith(EMBEDDING_SUFFIXES)), None)
    shape = tensors[embedding].shape if embedding else ()
    return WeightsLayout(
        layers=layers,
        hidden_size=shape[1] if len(shape) == 2 else None,
        vocab_size=shape[0] if len(shape) == 2 else None,
        num_experts=max(experts) + 1 if experts else None,
        features=frozenset(features),
        embedding=embedding,
        parameters=sum(math.prod(t.shape) for t in tensors.values()),
    )


@fact
def repo_layout(repo: "ModelRepo") -> WeightsLayout | None:
    """What the main tensors look like; once per repo, a fact (lineage and two rules ask, and a
    128-expert MoE's 18,867 names take ~30 ms)."""
    return weights_layout(repo_weights(repo).main_tensors())


def matching_bases(layout: WeightsLayout) -> list[tuple["Family", registry.BaseModel]]:
    """Registry base models whose recorded dimensions and layout the weights have."""
    model_types = set(layout.model_types())
    found = []
    inferred = {"hidden_size": layout.hidden_size, "num_hidden_layers": layout.layers,
                "vocab_size": layout.vocab_size, "num_experts": layout.num_experts}
    for fam in registry.families():
        if not model_types & set(fam.model_types):
            continue
        for base in fam.bases:
            if "model_type" in base.dims and base.dims["model_type"] not in model_types:
                continue
            if all(inferred.get(k) in (None, v) for k, v in base.dims.items() if k != "model_type"):
                found.append((fam, base))
    # The family a model type is primarily released as first (Llama 3 before R1's Llama distill).
    return sorted(found, key=lambda fb: not (model_types & set(fb[0].primary_for)))


def infer_weights_families(repo: "ModelRepo") -> list["Family"] | None:
    """Families whose checkpoints look like this repo's safetensors headers.

    None when there are no readable weights; [] when they match no known family.
    Headers only, no torch: lineage calls this on every check.
    """
    layout = repo_layout(repo)
    if layout is None or layout.layers is None:
        return None
    by_size = [fam for fam, _ in matching_bases(layout)]
    if by_size:
        return list(dict.fromkeys(by_size))
    model_types = set(layout.model_types())
    return [fam for fam in registry.families() if model_types & set(fam.model_types)]


def looks_like(layout: WeightsLayout) -> str:
    """'32 layers, ..., no q_norm/k_norm: the layout of llama/mistral/...; sized like Llama 3 (...)'."""
    text = layout.describe()
    types = layout.model_types()
    if types:
        text += f": the layout of {'/'.join(types)} checkpoints"
    bases = matching_bases(layout)
    if bases:
        text += "; sized like " + ", ".join(f"{fam.display} ({base.repo})" for fam, base in bases[:3])
    return text
