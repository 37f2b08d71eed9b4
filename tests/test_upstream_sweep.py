"""Every rule over every real upstream folder with a config.json.

Real upstream checkpoints must get no `error` finding unless this file says why the
error is true, and lineage must name the right family (and base model) for each.
"""

from __future__ import annotations

import pytest

from conftest import model_folders

EXPECTED_FAMILY = {
    "HuggingFaceTB--SmolLM3-3B": "smollm3",
    "Qwen--Qwen2.5-14B": "qwen2.5",
    "Qwen--Qwen2.5-32B": "qwen2.5",
    "Qwen--Qwen2.5-3B": "qwen2.5",
    "Qwen--Qwen2.5-7B": "qwen2.5",
    "Qwen--Qwen2.5-Coder-32B-Instruct": "qwen2.5",
    "Qwen--Qwen3-14B": "qwen3",
    "Qwen--Qwen3-30B-A3B": "qwen3",
    "Qwen--Qwen3-32B": "qwen3",
    "Qwen--Qwen3-4B": "qwen3",
    "Qwen--Qwen3-4B-Base": "qwen3",
    "Qwen--Qwen3-8B": "qwen3",
    "deepseek-ai--DeepSeek-R1": "deepseek-r1",
    "deepseek-ai--DeepSeek-R1-Distill-Qwen-32B": "deepseek-r1",
    "google--gemma-2b-it": "gemma",
    "lmstudio-community--Qwen3-1.7B-MLX-bf16": "qwen3",
    "lmstudio-community--Qwen3-14B-MLX-4bit": "qwen3",
    "meta-llama--Llama-3.1-8B": "llama3",
    "meta-llama--Llama-3.1-8B-Instruct": "llama3",
    "meta-llama--Llama-3.2-3B": "llama3",
    "microsoft--phi-4": "phi4",
    "mistralai--Mistral-7B-Instruct-v0.2": "mistral",
    "mistralai--Mistral-7B-Instruct-v0.3": "mistral",
    "openai--gpt-oss-20b": "gpt-oss",
}

# The exact upstream repo picked by dimensions (and chat-ness), where the folder says enough.
EXPECTED_BASE = {
    "Qwen--Qwen2.5-14B": "Qwen/Qwen2.5-14B",
    "Qwen--Qwen2.5-7B": "Qwen/Qwen2.5-7B",
    "Qwen--Qwen3-14B": "Qwen/Qwen3-14B",  # config-only, eos <|im_end|>: the chat release
    "Qwen--Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen--Qwen3-4B-Base": "Qwen/Qwen3-4B-Base",  # eos <|endoftext|>: the base release
    "Qwen--Qwen3-8B": "Qwen/Qwen3-8B-Base",  # its card's base_model, consistent with its size
    "lmstudio-community--Qwen3-14B-MLX-4bit": "Qwen/Qwen3-14B",
    "meta-llama--Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
    "meta-llama--Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama--Llama-3.2-3B": "meta-llama/Llama-3.2-3B",
    "deepseek-ai--DeepSeek-R1-Distill-Qwen-32B": "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
    "openai--gpt-oss-20b": "openai/gpt-oss-20b",
}

# Errors that real upstream repos really have, with the reason they are true.
TRUE_ERRORS = {
    # gemma-2b-it at HF commit 718cb18 (2024-02-29): the template ends turns with <end_of_turn>
    # (107) but generation_config.json stops only on <eos> (1); transformers' generate() runs
    # past the reply. Google later added 107 to eos_token_id in the Gemma 2/3 releases.
    "google--gemma-2b-it": {"eos-not-end-of-turn"},
}

FOLDERS = model_folders("config.json")


def test_every_expected_folder_exists():
    assert set(EXPECTED_FAMILY) == set(FOLDERS), "update EXPECTED_FAMILY when upstream data changes"


@pytest.fixture(scope="module")
def reports(upstream_reports):
    return upstream_reports


@pytest.mark.parametrize("name", FOLDERS)
def test_no_unexplained_errors(reports, name):
    report = reports[name]
    assert not report.internal_errors, report.internal_errors
    errors = {f.rule for f in report.findings if str(f.severity) == "error"}
    assert errors == TRUE_ERRORS.get(name, set()), [f.message for f in report.findings if str(f.severity) == "error"]


@pytest.mark.parametrize("name", FOLDERS)
def test_lineage_family(reports, name):
    assert reports[name].lineage["family"] == EXPECTED_FAMILY[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_BASE))
def test_lineage_base_model(reports, name):
    assert reports[name].lineage["base_model"] == EXPECTED_BASE[name]


def test_lineage_evidence_is_independent(reports):
    # Qwen3-8B has config, tokenizer and card: all three agree.
    assert set(reports["Qwen--Qwen3-8B"].lineage["evidence"]) >= {"config", "tokenizer", "card"}
    # A config-only folder has only the config to go on.
    assert reports["Qwen--Qwen3-32B"].lineage["evidence"] == ["config"]
