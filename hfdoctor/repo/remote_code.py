"""A model's own modeling code, read as text (never imported, never run): does the code that
config.json's auto_map names build another architecture than transformers' native class of
the same model_type?

Under trust_remote_code=True transformers loads the repository's code; everything else (vLLM,
TGI, SGLang, llama.cpp's converter, mlx-lm, transformers without trust_remote_code) builds the
native class that `model_type` names. A checkpoint whose config says model_type "qwen2" while
its modeling_qwen2.py turns each MLP into a mixture of experts (`self.experts = nn.ModuleList(...)`)
is two different models depending on who loads it, and the expert weights fit only one of them.

Only model types whose native transformers class is dense are judged (a mixture-of-experts
type such as qwen2_moe or mixtral has experts natively), and only code in this repository.
"""

from __future__ import annotations

from dataclasses import dataclass

from hfdoctor.bounded import patterns
from hfdoctor.repo.facts import fact

# Native transformers model types that are dense decoders (their MoE siblings are other types:
# mixtral, qwen2_moe, qwen3_moe, phimoe, granitemoe, llama4, olmoe...).
DENSE_NATIVE_TYPES = frozenset({
    "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi", "phi3", "gpt2", "gpt_neox",
    "gptj", "gpt_bigcode", "falcon", "stablelm", "starcoder2", "olmo", "olmo2", "cohere", "granite", "glm", "glm4",
    "smollm3", "bloom", "opt", "mpt", "persimmon", "nemotron", "helium",
})
AUTO_CLASSES = ("AutoModelForCausalLM", "AutoModel")
MAX_CODE_BYTES = 2 * 1024 * 1024  # transformers' largest modeling files are ~200 KB
# An attribute holding the experts: `self.experts = nn.ModuleList([...])` (Mixtral's layout, copied
# by most hand-made MoE code), at the start of a statement.
EXPERTS = patterns.compile(r"(?m)^[ \t]+self\.experts[ \t]*(:[^=\n]*)?=")


@dataclass(frozen=True)
class ExpertsInDenseType:
    model_type: str
    auto_class: str  # AutoModelForCausalLM
    ref: str  # modeling_qwen2.Qwen2ForCausalLM
    file: str  # modeling_qwen2.py
    line: int  # the line that creates the experts


@fact
def experts_in_dense_type(repo) -> ExpertsInDenseType | None:
    """The repository's own code for a dense native model_type builds experts: what and where; else None
    (also when the code is not in this checkout, or is another repository's)."""
    config = repo.config or {}
    model_type, auto_map = config.get("model_type"), config.get("auto_map")
    if model_type not in DENSE_NATIVE_TYPES or not isinstance(auto_map, dict):
        return None
    for auto_class in AUTO_CLASSES:
        ref = auto_map.get(auto_class)
        if not isinstance(ref, str) or "--" in ref or "." not in ref:
            continue  # another repository's code (org/repo--module.Class) is not read
        rel = ref.rsplit(".", 1)[0].replace(".", "/") + ".py"
        entry = repo.entries.get(rel)
        if entry is None or not entry.is_file or (entry.size or 0) > MAX_CODE_BYTES:
            continue
        text = repo.text(rel)
        found = EXPERTS.search(text) if text is not None else None
        if found is not None:
            return ExpertsInDenseType(model_type, auto_class, ref, rel, text.count("\n", 0, found.start()) + 1)
    return None
