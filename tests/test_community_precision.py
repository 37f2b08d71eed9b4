"""Precision on folders people published (tests/corpus/adapters/folders, MANIFEST.tsv gives each
file's repository, path and commit; weights are their git-lfs pointers as published): the smaller
false classes of issue 30, each with a must-fire case beside its must-not-fire one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import UPSTREAM, rules_alone
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import Upstream

FOLDERS = Path(__file__).resolve().parent / "corpus" / "adapters" / "folders"
OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)


def findings(folder: Path, select: list[str]):
    return rules_alone(folder, select, OFFLINE)


def test_no_generation_config_is_fine_when_config_eos_has_the_end_of_turn():
    """A Llama 3.1 merge without generation_config.json whose config.json stops on [128001, 128008, 128009]:
    <|eot_id|> (128009) is there, servers stop right."""
    folder = FOLDERS / "YouriLalain__1PARAMMYL-8B-ModelStock"
    assert json.loads((folder / "config.json").read_text())["eos_token_id"] == [128001, 128008, 128009]
    assert findings(folder, ["CFG004"]) == []


def test_no_generation_config_fires_when_config_eos_misses_the_end_of_turn():
    """A Phi-3 merge whose config.json stops on <|endoftext|> (32000) while turns end with <|end|> (32007)."""
    [finding] = findings(FOLDERS / "YouriLalain__3PRYMMAL-PHI3-3B-SLERP", ["CFG004"])
    assert str(finding.severity) == "warning" and "'<|end|>' (32007)" in finding.message


def test_special_tokens_map_overrides_a_legacy_tokenizer_config(tmp_path):
    """Wizard-Vicuna's tokenizer_config.json (no added_tokens_decoder) says pad_token null, its
    special_tokens_map.json '<unk>': transformers merges the map over the config, so pad is '<unk>'."""
    folder = FOLDERS / "CesarChaMal__Wizard-Vicuna-30B-Uncensored-GPTQ"
    repo = ModelRepo(folder, upstream=OFFLINE)
    assert repo.special_tokens_map_overrides and repo.special_token("pad_token") == "<unk>"
    from transformers import AutoTokenizer

    # transformers agrees (its tokenizer.model is an LFS pointer: a Llama-2 vocabulary of the same
    # 32,000 SentencePiece entries stands in, Mistral-7B-Instruct-v0.2's tokenizer.json)
    loadable = tmp_path / "tok"
    loadable.mkdir()
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(folder / name, loadable / name)
    shutil.copy(UPSTREAM / "mistralai--Mistral-7B-Instruct-v0.2" / "tokenizer.json", loadable / "tokenizer.json")
    assert AutoTokenizer.from_pretrained(loadable).pad_token == "<unk>"
    [finding] = findings(folder, ["TOK007"])
    assert str(finding.severity) == "info" and "transformers uses the second" in finding.message


def test_special_tokens_map_does_not_override_a_modern_tokenizer_config(tmp_path):
    """Mistral-7B-Instruct-v0.2's tokenizer_config.json has added_tokens_decoder: transformers reads its
    tokens and ignores special_tokens_map.json, so a map that disagrees on the eos is a warning (on a pad
    tokenizer_config.json leaves unset, info)."""
    folder = tmp_path / "m"
    shutil.copytree(UPSTREAM / "mistralai--Mistral-7B-Instruct-v0.2", folder)
    special = json.loads((folder / "special_tokens_map.json").read_text())
    special["pad_token"] = "<unk>"
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    assert ModelRepo(folder).special_token("pad_token") is None
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(folder).pad_token is None  # transformers agrees
    [finding] = findings(folder, ["TOK007"])
    # A pad left unset decides nothing about where text starts or stops: info.
    assert str(finding.severity) == "info" and "transformers uses the first" in finding.message
    special["eos_token"] = "<unk>"
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    assert AutoTokenizer.from_pretrained(folder).eos_token == "</s>"
    eos = [f for f in findings(folder, ["TOK007"]) if f.pointer == "/eos_token"]
    assert [str(f.severity) for f in eos] == ["warning"] and "transformers uses the first" in eos[0].message


def _transformers5_config(tmp_path: Path, model_type: str) -> Path:
    """config.json as transformers 5 saves it (rope_theta only inside rope_parameters)."""
    from transformers import AutoConfig

    folder = tmp_path / model_type
    AutoConfig.for_model(model_type).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert "rope_theta" not in config and config["rope_parameters"]["rope_theta"] == 10000.0
    return folder


def test_no_rope_theta_warning_on_a_model_type_no_4x_release_knows(tmp_path):
    """qwen3_5_text first appears in transformers 5: 4.x refuses the config, it misreads nothing."""
    found = findings(_transformers5_config(tmp_path, "qwen3_5_text"), ["CMP001"])
    assert not [f for f in found if "rope_theta" in f.message], [f.message for f in found]
    assert [str(f.severity) for f in found if "no 4.x release" in f.message] == ["info"]


def test_rope_theta_still_fires_on_a_model_type_4x_knows(tmp_path):
    folder = _transformers5_config(tmp_path, "qwen3_5_text")
    config = json.loads((folder / "config.json").read_text())
    config["model_type"], config["rope_parameters"]["rope_theta"] = "qwen3", 1000000.0
    (folder / "config.json").write_text(json.dumps(config))
    found = [f for f in findings(folder, ["CMP001"]) if "rope_theta" in f.message]
    assert [str(f.severity) for f in found] == ["warning"]  # an error where a 4.x consumer is declared


def test_no_rope_theta_warning_where_the_4x_default_is_the_value(tmp_path):
    """LFM2's 4.x config class defaults rope_theta to 1e6 (issue 39): its v5 config misreads nothing."""
    from hfdoctor.compat import knowledge as kb

    folder = tmp_path / "lfm2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "transformers_version": "5.23.0",
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}}))
    assert kb.rope_theta_default_4x("lfm2") == 1000000.0 and kb.rope_theta_default_4x("llama") == 10000.0
    assert not [f for f in findings(folder, ["CMP001"]) if "rope_theta" in f.message]
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"]["rope_theta"] = 10000.0  # now 4.x reads 1e6 where 5.x reads 1e4
    (folder / "config.json").write_text(json.dumps(config))
    [found] = [f for f in findings(folder, ["CMP001"]) if "rope_theta" in f.message]
    assert "lfm2's default 1e+06" in found.message


def test_unsloth_stub_config_beside_an_adapter_or_a_gguf(tmp_path):
    """Unsloth saves config.json = {"model_type": "llama"} beside a LoRA adapter and beside a GGUF: no
    loader builds a model class from it there. Beside a full model's 4-shard index (Max-Lee's folder also
    publishes the merged model), transformers builds that model from the stub: reported. The same stub as a
    full model's config is reported too."""
    for slug in ("Max-Lee-explore__MythTrans-llama31-8B", "shijiale0609__medical-model"):
        assert json.loads((FOLDERS / slug / "config.json").read_text()) == {"model_type": "llama"}
    assert findings(FOLDERS / "shijiale0609__medical-model", ["CFG002"]) == []
    [beside_index] = findings(FOLDERS / "Max-Lee-explore__MythTrans-llama31-8B", ["CFG002"])
    assert str(beside_index.severity) == "warning" and "no `architectures`" in beside_index.message
    folder = tmp_path / "adapter-only"
    shutil.copytree(FOLDERS / "Max-Lee-explore__MythTrans-llama31-8B", folder)
    (folder / "model.safetensors.index.json").unlink()
    assert findings(folder, ["CFG002"]) == []
    folder = tmp_path / "full"
    shutil.copytree(FOLDERS / "Max-Lee-explore__MythTrans-llama31-8B", folder)
    (folder / "adapter_config.json").unlink()
    [finding] = findings(folder, ["CFG002"])
    assert str(finding.severity) == "warning" and "no `architectures`" in finding.message
