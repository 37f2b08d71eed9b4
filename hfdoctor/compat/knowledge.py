"""What the engines that consume model repos accept, as data with its sources.

The tables are generated from the engines' own code (upstream_templates/
make_consumers.py: transformers' model types per release, mlx-lm's model types,
llama.cpp's converter's pre-tokenizer hashes) or curated with the source of each entry
(upstream_templates/serving_parsers.json). The facts below are the ones hfdoctor
checked against the installed libraries (tests/compat/test_compat.py re-checks them where the
library runs here).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from hfdoctor.knowledge.registry import data_file

# The engines a compat section speaks for, in report order: key -> what it is.
ENGINES = {
    "transformers-5": "transformers 5.x",
    "transformers-4": "transformers 4.x (and stacks that bundle it)",
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tgi": "Text Generation Inference",
    "llama.cpp": "llama.cpp (convert_hf_to_gguf and runtime), ollama, LM Studio's GGUF runtime",
    "mlx-lm": "mlx-lm (and LM Studio's MLX runtime)",
    "transformers.js": "transformers.js and LM Studio's template engine (@huggingface/jinja)",
    "open-llm-leaderboard": "the Open LLM Leaderboard's submission validator",
}
# Engines whose released versions bundle transformers 4.x: what 4.x misreads, they may too.
BUNDLES_TRANSFORMERS_4 = ("vllm", "sglang", "tgi", "open-llm-leaderboard")

# Verified with transformers 4.46.3, 4.57.6 and 5.23 (tests/compat/test_compat.py):
# 4.x reads rope_theta only at the top level of config.json and falls back to the
# config class default (rope_theta_default_4x); v5 writes it inside rope_parameters.
# transformers 5 saves this class name for tokenizers loaded without a model-specific
# class; no 4.x release defines it, so AutoTokenizer raises there.
V5_ONLY_TOKENIZER_CLASSES = ("TokenizersBackend",)
# chat_template.jinja is read by transformers since 4.48 (4.46 reads only
# tokenizer_config.json's chat_template); TGI reads only tokenizer_config.json (TGI #3247).
JINJA_FILE_SINCE = "4.48"
# safetensors __metadata__: transformers <= 4.46 refuses a file without it, and every 4.x
# refuses a `format` outside these (5.x loads both).
SAFETENSORS_FORMATS_4X = ("pt", "tf", "flax", "mlx")
METADATA_OPTIONAL_SINCE = "4.48"


@lru_cache(maxsize=1)
def consumers() -> dict[str, Any]:
    return json.loads(data_file("consumers.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def serving_parsers() -> dict[str, Any]:
    return json.loads(data_file("serving_parsers.json").read_text(encoding="utf-8"))


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def transformers_since(model_type: str) -> str | None:
    """The first sampled transformers release whose AutoConfig knows `model_type`."""
    return consumers()["transformers"]["model_type_since"].get(model_type)


def latest_4x() -> str:
    return consumers()["transformers"]["latest_4x"]


def newest_transformers() -> str:
    return consumers()["transformers"]["sampled_versions"][-1]


def rope_theta_default_4x(model_type: str) -> float | None:
    """The rope_theta a 4.x config class of `model_type` falls back to (10000 for Llama, 1e6 for
    LFM2 and Mixtral...), from the newest 4.x release; None when the class takes no rope_theta."""
    return consumers()["transformers"]["rope_theta_default_4x"]["defaults"].get(model_type)


def mlx_lm_knows(model_type: str) -> tuple[bool, str] | None:
    """(known, mlx-lm version), or None when the table has no mlx-lm data."""
    table = consumers().get("mlx_lm")
    if not table:
        return None
    return model_type in table["model_types"], table["version"]


def pre_tokenizer_name(chk_hash: str) -> str | None:
    return consumers()["llama_cpp_converter"]["hashes"].get(chk_hash)


@lru_cache(maxsize=1)
def _fingerprints() -> dict[str, dict[str, str]]:
    try:
        return json.loads(data_file("tokenizer_fingerprints.json").read_text(encoding="utf-8"))["tokenizers"]
    except (OSError, ValueError, KeyError):
        return {}


def tokenizer_fingerprint(sha256: str) -> str | None:
    """The converter's chkhsh of a known tokenizer.json (make_fingerprints.py), by its sha256."""
    entry = _fingerprints().get(sha256)
    return entry["chkhsh"] if entry else None


def converter_source() -> str:
    return consumers()["llama_cpp_converter"]["source"]


@lru_cache(maxsize=1)
def chktxt() -> str:
    """The text llama.cpp's converter encodes to recognise a pre-tokenizer."""
    return json.loads(data_file("sources/llama_cpp_chktxt.json").read_text(encoding="utf-8"))["chktxt"]


def parser(kind: str, name: str) -> dict[str, Any] | None:
    """A reasoning or tool_call parser by the name a serve command gives it."""
    return serving_parsers()[kind].get(name.replace("-", "_"))
