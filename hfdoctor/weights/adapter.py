"""A PEFT adapter read from adapter_config.json and its weight headers: which modules, which ranks, which base.

PEFT saves LoRA weights as `base_model.model.<module>.lora_A.weight` [r, in] and
`...lora_B.weight` [out, r] (embeddings: `lora_embedding_A` [r, rows] and
`lora_embedding_B` [dim, r]); whole modules trained beside them (modules_to_save,
resized embeddings) are saved as ordinary tensors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from hfdoctor.bounded import patterns

from hfdoctor.knowledge import registry
from hfdoctor.weights.headers import TensorInfo

# Tensor names and adapter_config.json are repository data: every pattern here runs in RE2.
# A LoRA tensor's name, `<module>.<kind>[.<adapter name>][.weight]` after PEFT's prefix. Read by
# `_lora_parts` with string operations (the same answer: a test compares them), since an adapter
# may name tens of thousands of tensors and each RE2 match with its groups costs a Python call
# chain; the pattern is the definition, and reads what those leave aside (a line break).
LORA_TENSOR = patterns.compile(
    r"^(?:base_model\.model\.)?(?P<module>.+?)\.(?P<kind>lora_A|lora_B|lora_embedding_A|lora_embedding_B)"
    r"(?:\.[A-Za-z0-9_]+)?(?:\.weight)?$")
LORA_KINDS = frozenset({"lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B"})
PEFT_PREFIX = "base_model.model."
LAYER_CONTAINERS = frozenset({"layers", "h", "blocks"})  # model.layers.<i>., transformer.h.<i>.
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
# Families released after the Hub required an organisation in every new repository id: a bare
# "gemma3-270m" or "Llama-3.2-1B-Instruct" is the folder a trainer downloaded the model into.
MODERN_FAMILY_NAME = patterns.compile(
    r"(?i)(llama|gemma|qwen|qwq|mistral|mixtral|ministral|smollm|deepseek|granite|olmo|internlm|chatglm|starcoder"
    r"|phi-?[1-4]|falcon|hunyuan|nemotron|gpt-oss|command-r|lfm2|mimo|exaone|baichuan|yi-\d)")
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
    def matrices(self) -> bool:
        """Its saved A and B are matrices, as every LoRA layer's are (a scalar or a 3-D tensor
        fits none: PEFT's load fails with a size mismatch)."""
        return all(shape is None or len(shape) == 2 for shape in (self.a, self.b))

    @property
    def layer(self) -> int | None:
        """The index after the first `layers.`, `h.` or `blocks.` of the name (up to 9 digits)."""
        parts = self.name.split(".")
        for container, index in zip(parts, parts[1:]):
            if container in LAYER_CONTAINERS and 0 < len(index) <= 9 and index.isascii() and index.isdigit():
                return int(index)
        return None


@dataclass
class AdapterWeights:
    modules: dict[str, LoraModule] = field(default_factory=dict)
    full: dict[str, tuple[int, ...]] = field(default_factory=dict)  # whole tensors (modules_to_save, embeddings)


def adapter_weights(tensors: dict[str, TensorInfo]) -> AdapterWeights:
    found = AdapterWeights()
    for name, info in tensors.items():
        parts = _lora_parts(name)
        if parts is None:
            if "lora_magnitude_vector" not in name:  # DoRA's magnitude: part of the LoRA layer
                found.full[name.removeprefix(PEFT_PREFIX)] = tuple(info.shape)
            continue
        name, kind = parts
        module = found.modules.setdefault(name, LoraModule(name))
        module.embedding = module.embedding or kind.startswith("lora_embedding")
        if kind.endswith("A"):
            module.a = tuple(info.shape)
        else:
            module.b = tuple(info.shape)
    return found


# rank_pattern keys tried per adapter: each is a regex RE2 compiles (milliseconds for a big one);
# a module no key among the first ones matches may match a later one, so its rank is unknown.
MAX_RANK_PATTERN_KEYS = 256
# target_modules entries indexed, and the dot-separated parts of one: real lists name a few leaves
# or a few thousand full module paths; an entry past either bound is not judged.
MAX_TARGETS = 100_000
MAX_TARGET_PARTS = 64


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


class RankPatterns:
    """rank_pattern as PEFT applies it: the rank of the first key whose `(.*\\.)?(key)$` matches the
    module's name from its start, else r (LoraModel._create_and_replace via get_pattern_key).

    Each key is compiled once, by RE2 with its small program limit, and only the first
    MAX_RANK_PATTERN_KEYS keys are tried (and none after `deadline`): `rank` is None (unknown)
    for a module that no key tried matches while others were left untried."""

    def __init__(self, config: dict[str, Any], deadline: float | None = None):
        pattern = config.get("rank_pattern")
        self.items = list(pattern.items()) if isinstance(pattern, dict) else []
        self.deadline = deadline
        self._compiled: list[tuple[Any, Any]] = []  # (compiled or None, rank), in key order
        self.unknown = 0  # modules whose rank was asked and is unknown (keys left untried)
        r = config.get("r")
        self.default = r if isinstance(r, int) and not isinstance(r, bool) else None

    def _keys(self) -> Iterator[tuple[Any, Any]]:
        yield from self._compiled
        while len(self._compiled) < min(len(self.items), MAX_RANK_PATTERN_KEYS):
            if _past(self.deadline):
                return
            key, value = self.items[len(self._compiled)]
            # PEFT's own concatenation; a key RE2 refuses (or that is not text) matches nothing.
            compiled = patterns.compile_untrusted(rf"(.*\.)?({key})$", cache=False) if isinstance(key, str) else None
            self._compiled.append((compiled, value))
            yield compiled, value

    @property
    def tried(self) -> int:
        return len(self._compiled)

    @property
    def complete(self) -> bool:
        """Every key was tried (the ranks found are PEFT's)."""
        return len(self._compiled) == len(self.items)

    def rank(self, module: str) -> int | None:
        """The rank PEFT gives `module`, or None when unknown."""
        for compiled, value in self._keys():
            if compiled is not None and compiled.match(module):
                return value if isinstance(value, int) and not isinstance(value, bool) else None
            if _past(self.deadline):  # a match can cost milliseconds on a long name (RE2's NFA)
                break
        else:
            if self.complete:
                return self.default
        self.unknown += 1
        return None


def _lora_parts(name: str) -> tuple[str, str] | None:
    """(module, kind) of a LoRA tensor's name, as LORA_TENSOR reads it; None for another tensor."""
    if "\n" in name:
        m = LORA_TENSOR.match(name)
        return (m.group("module"), m.group("kind")) if m else None
    for rest in ((name[len(PEFT_PREFIX):], name) if name.startswith(PEFT_PREFIX) else (name,)):
        parts = rest.rsplit(".", 3)
        n = len(parts)
        # The kind is among the last three parts: after it come an adapter name and `weight`, at most.
        for at in range(max(1, n - 3), n):
            after = parts[at + 1:]
            if parts[at] not in LORA_KINDS or (len(after) == 2 and after[1] != "weight"):
                continue
            if after and not (after[0].isascii() and after[0].replace("_", "a").isalnum()):
                continue
            module = ".".join(parts[:at])
            if module:
                return module, parts[at]
    return None


def rank_for(config: dict[str, Any], module: str) -> int | None:
    """The rank PEFT gives `module`: rank_pattern's first matching key, else r (one module;
    RankPatterns compiles the keys once for many)."""
    return RankPatterns(config).rank(module)


class ModuleTargets:
    """PEFT's matching of target_modules against module names (check_target_module_exists).

    A string is a regex the whole name must match. A list names modules: a name is targeted
    when it is an entry or ends with "." + an entry, that is when the entry's dot-separated
    parts are the name's last parts. The entries are indexed by those parts, so that a name
    costs a dictionary lookup per distinct entry length, whatever the number of entries
    (testing every name against every entry took minutes for 20,000 of each)."""

    def __init__(self, target: Any, deadline: float | None = None):
        self.regex = patterns.compile_untrusted(target, cache=False) if isinstance(target, str) else None
        self.deadline = deadline  # for the regex: each match is linear in the name, the names are many
        self.unknown = 0  # names the regex was not matched against (the deadline passed)
        self.is_list = isinstance(target, list)
        self.unjudged: list[str] = []  # entries past the bounds: neither matched nor unmatched
        self._by_parts: dict[tuple[str, ...], str] = {}
        for entry in (target if self.is_list else []):
            if not isinstance(entry, str):
                continue
            parts = tuple(entry.split(".", MAX_TARGET_PARTS))
            if len(parts) > MAX_TARGET_PARTS or len(self._by_parts) >= MAX_TARGETS:
                self.unjudged.append(entry)
            else:
                self._by_parts.setdefault(parts, entry)
        self._lengths = sorted({len(parts) for parts in self._by_parts})

    @property
    def entries(self) -> list[str]:
        """The list entries that are judged, each once."""
        return list(self._by_parts.values())

    def matches(self, name: str) -> list[str]:
        """The list entries that target `name`."""
        if not self._lengths:
            return []
        parts = name.rsplit(".", self._lengths[-1])
        found = []
        for n in self._lengths:
            if n > len(parts):
                break
            entry = self._by_parts.get(tuple(parts[-n:]))  # n < len(parts), or the name split whole
            if entry is not None:
                found.append(entry)
        return found

    def targets(self, name: str) -> bool | None:
        """Whether PEFT creates a LoRA layer for `name`; None when that is unknown (a regex RE2
        refuses, entries past the bounds, the deadline passed)."""
        if self.is_list:
            return True if self.matches(name) else (None if self.unjudged else False)
        if self.regex is None:
            return None
        if _past(self.deadline):
            self.unknown += 1
            return None
        return self.regex.fullmatch(name) is not None


def targeted(target: Any, module: str) -> bool:
    """PEFT's own matching of one module (ModuleTargets indexes the entries once for many)."""
    return ModuleTargets(target).targets(module) is True


def local_path(value: str) -> bool:
    """base_model_name_or_path that names a folder of the training machine, not a Hub repo."""
    if value.startswith(("/", "./", "../", "~", "\\")) or "\\" in value or WINDOWS_DRIVE.match(value):
        return True
    parts = value.split("/")
    if len(parts) > 2 or not REPO_ID.match(value):
        return True
    if len(parts) == 1:
        return (parts[0].lower() in LOCAL_ROOTS or LOCAL_FOLDER_NAME.fullmatch(parts[0]) is not None
                or MODERN_FAMILY_NAME.search(parts[0]) is not None)
    return parts[0].lower() in LOCAL_ROOTS or CHECKPOINT_DIR.fullmatch(parts[1]) is not None


def cached_hub_id(value: str) -> str | None:
    """'org/name' when a training machine's path is a Hugging Face cache download of that Hub repo
    (huggingface_hub keeps org/name in models--org--name/snapshots/<commit>; a repo id never holds
    '--', so the folder name splits one way only); else None."""
    for segment in value.replace("\\", "/").split("/"):
        parts = segment.split("--")
        if parts[0] == "models" and len(parts) in (2, 3) and all(parts[1:]):
            repo_id = "/".join(parts[1:])  # models--gpt2: an organisation-less legacy id
            return repo_id if REPO_ID.match(repo_id) else None
    return None


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
