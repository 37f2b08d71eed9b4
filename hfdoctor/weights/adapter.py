"""A PEFT adapter read from adapter_config.json and its weight headers: which modules, which ranks, which base.

PEFT saves LoRA weights as `base_model.model.<module>.lora_A.weight` [r, in] and
`...lora_B.weight` [out, r] (embeddings: `lora_embedding_A` [r, rows] and
`lora_embedding_B` [dim, r]); whole modules trained beside them (modules_to_save,
resized embeddings) are saved as ordinary tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hfdoctor.bounded import patterns

from hfdoctor.knowledge import registry
from hfdoctor.weights.headers import TensorInfo

# Tensor names and adapter_config.json are repository data: every pattern here runs in RE2.
LORA_TENSOR = patterns.compile(
    r"^(?:base_model\.model\.)?(?P<module>.+?)\.(?P<kind>lora_A|lora_B|lora_embedding_A|lora_embedding_B)"
    r"(?:\.[A-Za-z0-9_]+)?(?:\.weight)?$")
LAYER = patterns.compile(r"\.(?:layers|h|blocks)\.(\d+)\.")
# Modules whose input is the residual stream (hidden_size wide), and those that write to it.
READS_HIDDEN = ("q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "gate_up_proj")
WRITES_HIDDEN = ("o_proj", "down_proj")
# Repo-name endings of quantized copies published for QLoRA training (unsloth's bnb-4bit
# mirrors, GPTQ/AWQ exports): not the weights a server loads.
QUANTIZED_COPY = patterns.compile(r"(?i)[-_.](unsloth-)?(bnb-?4bit|bnb-?8bit|4bit|8bit|gptq(-int[48])?|awq|int4|int8|nf4)$")
# First path segments that name a training machine's folders, not a Hub organisation.
LOCAL_ROOTS = {"outputs", "output", "models", "model", "checkpoints", "checkpoint", "results", "content",
               "workspace", "data", "tmp", "home", "mnt", "root", "kaggle", "runs", "saved_models", "ckpt"}
WINDOWS_DRIVE = patterns.compile(r"^[A-Za-z]:[\\/]")
CHECKPOINT_DIR = patterns.compile(r"checkpoint-\d+")
# A bare name (no organisation) that is a training machine's folder, not one of the Hub's
# organisation-less legacy ids (gpt2, t5-small): "model", "merged_model", "outputs/".
LOCAL_FOLDER_NAME = patterns.compile(
    r"(?i)^(checkpoint-\d+|(base|final|merged|lora|sft|dpo|trained|fine_?tuned|pretrained|hf|saved|best|output)"
    r"[_-]?(model|models|adapter|output|outputs|checkpoint|dir)?|.+[_-](model|adapter|output|outputs|checkpoint|ckpt))$")
REPO_ID = patterns.compile(r"^[A-Za-z0-9][\w.\-]{0,95}(/[A-Za-z0-9][\w.\-]{0,95})?$")


@dataclass
class LoraModule:
    name: str  # the module path in the base model (model.layers.0.self_attn.q_proj)
    a: tuple[int, ...] | None = None
    b: tuple[int, ...] | None = None
    embedding: bool = False

    @property
    def leaf(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def rank(self) -> int | None:
        return self.a[0] if self.a else None

    @property
    def layer(self) -> int | None:
        m = LAYER.search("." + self.name + ".")
        return int(m.group(1)) if m else None


@dataclass
class AdapterWeights:
    modules: dict[str, LoraModule] = field(default_factory=dict)
    full: dict[str, tuple[int, ...]] = field(default_factory=dict)  # whole tensors (modules_to_save, embeddings)


def adapter_weights(tensors: dict[str, TensorInfo]) -> AdapterWeights:
    found = AdapterWeights()
    for name, info in tensors.items():
        m = LORA_TENSOR.match(name)
        if m is None:
            if "lora_magnitude_vector" not in name:  # DoRA's magnitude: part of the LoRA layer
                found.full[name.removeprefix("base_model.model.")] = tuple(info.shape)
            continue
        module = found.modules.setdefault(m.group("module"), LoraModule(m.group("module")))
        kind = m.group("kind")
        module.embedding = module.embedding or kind.startswith("lora_embedding")
        if kind.endswith("A"):
            module.a = tuple(info.shape)
        else:
            module.b = tuple(info.shape)
    return found


def rank_for(config: dict[str, Any], module: str) -> int | None:
    """The rank PEFT gives `module`: rank_pattern's first matching key, else r."""
    pattern = config.get("rank_pattern")
    if isinstance(pattern, dict):
        for key, value in pattern.items():
            # PEFT's own concatenation; a key RE2 refuses (or that is not text) matches nothing.
            compiled = patterns.compile_untrusted(rf"(.*\.)?{key}") if isinstance(key, str) else None
            if compiled is not None and compiled.fullmatch(module):
                return value if isinstance(value, int) else None
    r = config.get("r")
    return r if isinstance(r, int) and not isinstance(r, bool) else None


def targeted(target: Any, module: str) -> bool:
    """PEFT's own matching: a string is a regex the whole module name must match; a list
    names module leaves (or full names, or name suffixes after a dot)."""
    if isinstance(target, str):
        compiled = patterns.compile_untrusted(target)  # None: RE2 refuses it (backreferences...)
        return compiled is not None and compiled.fullmatch(module) is not None
    if isinstance(target, list):
        return any(isinstance(t, str) and (module == t or module.endswith("." + t)) for t in target)
    return False


def local_path(value: str) -> bool:
    """base_model_name_or_path that names a folder of the training machine, not a Hub repo."""
    if value.startswith(("/", "./", "../", "~", "\\")) or "\\" in value or WINDOWS_DRIVE.match(value):
        return True
    parts = value.split("/")
    if len(parts) > 2 or not REPO_ID.match(value):
        return True
    if len(parts) == 1:
        return parts[0].lower() in LOCAL_ROOTS or LOCAL_FOLDER_NAME.fullmatch(parts[0]) is not None
    return parts[0].lower() in LOCAL_ROOTS or CHECKPOINT_DIR.fullmatch(parts[1]) is not None


def quantized_copy(value: str) -> bool:
    return QUANTIZED_COPY.search(value.rsplit("/", 1)[-1]) is not None


def registry_base(value: str) -> tuple[registry.Family, registry.BaseModel] | None:
    """The registry release a base id is (or is a renamed/quantized copy of, by its name)."""
    found = _registry_match(value)
    return (found[0], found[1]) if found else None


def registry_release(value: str) -> str | None:
    """The upstream repo a base id is a renamed or quantized copy of: the pre-trained release
    for a copy of it (unsloth/gemma-2-2b-bnb-4bit: google/gemma-2-2b), the chat release for a
    copy of that (unsloth/gemma-2-2b-it-bnb-4bit: google/gemma-2-2b-it)."""
    found = _registry_match(value)
    return found[2] if found else None


def _registry_match(value: str) -> tuple[registry.Family, registry.BaseModel, str] | None:
    name = QUANTIZED_COPY.sub("", value.rsplit("/", 1)[-1]).lower()
    for fam in registry.families():
        exact = fam.base_by_repo(value)
        if exact is not None:
            same = [r for r in (exact.repo, exact.base_repo) if r and r.lower() == value.lower()]
            return fam, exact, same[0] if same else exact.repo
    for fam in registry.families():
        for base in fam.bases:
            for repo in (base.repo, base.base_repo):
                if repo and repo.rsplit("/", 1)[-1].lower() == name:
                    return fam, base, repo
    return None
