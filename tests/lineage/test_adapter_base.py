"""Adapters are read through their base model (hfdoctor.lineage.adapter_base), on real folders people
published: a PEFT checkpoint of Mistral-7B-Instruct-v0.2 trained with LLaMA-Factory, and a TinyLlama
SFT checkpoint with the Trainer's state (tests/corpus/adapters/folders/MANIFEST.tsv says where each
file comes from). Their tokenizer.json files are over 1 MiB and left out; where a test needs a
vocabulary it takes the base's real tokenizer from ../shared/upstream."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import TESTS, UPSTREAM, rules_alone
from hfdoctor.lineage.adapter_base import adapter_base
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import Upstream

FOLDERS = TESTS / "corpus" / "adapters" / "folders"
MISTRAL_CKPT = FOLDERS / "syGOAT__Mistral-v0.2-Translator-bf16__checkpoint-500"
TINYLLAMA_CKPT = FOLDERS / "Dheena731__tinyLlama-finetune"
MISTRAL_V02 = UPSTREAM / "mistralai--Mistral-7B-Instruct-v0.2"
WITH_UPSTREAM = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
NOTHING = Upstream((), use_cache=False, use_hub=False)


def findings(folder: Path, select: list[str] | None = None, upstream: Upstream = NOTHING):
    return rules_alone(folder, select, upstream)


def loud(found, rule: str | None = None):
    return [f for f in found if str(f.severity) in ("warning", "error") and (rule is None or f.rule == rule)]


def mistral_adapter(tmp_path: Path, **config_changes) -> Path:
    """The published checkpoint, with the base's real tokenizer.json (same 32,000-entry vocabulary)."""
    folder = tmp_path / "ckpt"
    shutil.copytree(MISTRAL_CKPT, folder)
    shutil.copy(MISTRAL_V02 / "tokenizer.json", folder / "tokenizer.json")
    if config_changes:
        config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
        config.update(config_changes)
        (folder / "adapter_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder


def test_the_published_folders_are_the_ones_recorded():
    import hashlib

    rows = [line.split("\t") for line in (FOLDERS / "MANIFEST.tsv").read_text(encoding="utf-8").splitlines()[2:]]
    for slug, name, _repo, _path, _commit, sha256, _license in rows:
        assert hashlib.sha256((FOLDERS / slug / name).read_bytes()).hexdigest() == sha256, (slug, name)
    stored = {(p.parent.name, p.name) for p in FOLDERS.glob("*/*")}
    assert stored == {(slug, name) for slug, name, *_ in rows}


def test_base_resolved_from_the_training_machines_folder_name(tmp_path):
    folder = mistral_adapter(tmp_path)
    base = adapter_base(ModelRepo(folder, upstream=WITH_UPSTREAM))
    assert base.named == "/root/autodl-tmp/models/Mistral-7B-Instruct-v0.2"
    assert base.repo_id == "mistralai/Mistral-7B-Instruct-v0.2" and base.pretrained is False
    assert base.eos_ids == (2,) and base.eos_source.endswith("generation_config.json")
    assert base.vocab_size == 32000
    offline = adapter_base(ModelRepo(folder, upstream=NOTHING))
    assert offline.eos_ids is None and offline.stop_tokens == ("</s>",)


@pytest.mark.parametrize("upstream", [WITH_UPSTREAM, NOTHING], ids=["base files", "registry only"])
def test_adapter_end_of_turn_is_judged_by_the_base(tmp_path, upstream):
    """Before: 'config.json stops generation on nothing' (an error proposing to edit a config.json the
    adapter does not have). The base, Mistral-7B-Instruct-v0.2, stops on </s>, the template's end of turn."""
    found = findings(mistral_adapter(tmp_path), upstream=upstream)
    assert not [f for f in found if f.rule == "eos-not-end-of-turn"], [f.message for f in found]
    assert not [f for f in found if f.file in ("config.json", "generation_config.json")], [f.message for f in found]


def test_adapter_of_a_base_that_stops_elsewhere_is_a_warning_without_a_fix(tmp_path):
    """The same checkpoint declared on a base whose generation_config.json stops on other ids (Qwen3-8B:
    the ids of <|im_end|> and <|endoftext|>): the adapter's </s> (2) is not among them."""
    folder = mistral_adapter(tmp_path, base_model_name_or_path="Qwen/Qwen3-8B")
    [finding] = [f for f in findings(folder, ["TOK004"], WITH_UPSTREAM)]
    assert str(finding.severity) == "warning" and finding.fix is None
    assert finding.file == "tokenizer_config.json" and "Qwen/Qwen3-8B stops generation on 151645" in finding.message
    assert "stop token" in finding.message


def test_adapter_whose_base_cannot_be_identified_is_info(tmp_path):
    folder = mistral_adapter(tmp_path, base_model_name_or_path="/root/models/my-own-model")
    [finding] = findings(folder, ["TOK004"], WITH_UPSTREAM)
    assert str(finding.severity) == "info" and "cannot verify" in finding.message
    assert "without the base model" in finding.message and finding.file == "tokenizer_config.json"


def test_trainer_state_is_not_weights():
    """Before: 'config.json is missing but the repository ships weights' because of rng_state.pth,
    scaler.pt, scheduler.pt and training_args.bin; the real checkpoint is a known layout."""
    repo = ModelRepo(TINYLLAMA_CKPT, upstream=NOTHING)
    assert repo.weight_files == [] and repo.is_adapter
    assert {f for f in repo.files if is_training_state(f)} == {"rng_state.pth", "scaler.pt", "scheduler.pt", "trainer_state.json",
                                              "training_args.bin"}
    found = findings(TINYLLAMA_CKPT, upstream=NOTHING)
    assert not [f for f in found if f.rule == "file-unreadable"], [f.message for f in found]
    assert not [f for f in found if f.file in ("config.json", "generation_config.json")], [f.message for f in found]


def test_a_full_checkpoint_without_config_still_fires(tmp_path):
    """The Trainer's state beside real weights: the weights still need a config.json."""
    folder = tmp_path / "ckpt"
    shutil.copytree(TINYLLAMA_CKPT, folder)
    (folder / "adapter_config.json").unlink()
    (folder / "pytorch_model.bin").write_bytes((folder / "scaler.pt").read_bytes())
    found = findings(folder, ["CFG001"])
    assert [f.message.split(":")[0] for f in found] == ["config.json is missing but the repository ships weights"]


def test_missing_template_on_an_adapter_of_a_pretrained_base(tmp_path):
    """An adapter of mistralai/Mistral-7B-v0.1 (pre-trained, no chat template upstream) whose tokenizer,
    like its base's, has none: `</s>` ends a document there, not a turn. Silent; on the chat release it fires."""
    folder = mistral_adapter(tmp_path, base_model_name_or_path="mistralai/Mistral-7B-v0.1")
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    del config["chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    assert findings(folder, ["TPL001"]) == []
    chat = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    chat["base_model_name_or_path"] = "mistralai/Mistral-7B-Instruct-v0.2"
    (folder / "adapter_config.json").write_text(json.dumps(chat), encoding="utf-8")
    assert [str(f.severity) for f in findings(folder, ["TPL001"])] == ["error"]
    chat["base_model_name_or_path"] = "someone/unknown-model"
    (folder / "adapter_config.json").write_text(json.dumps(chat), encoding="utf-8")
    [finding] = findings(folder, ["TPL001"])
    assert str(finding.severity) == "info" and "cannot verify" in finding.message


def test_tokenizer_lfs_pointer_is_lfs_pointer_not_invalid_json(tmp_path):
    folder = mistral_adapter(tmp_path)
    (folder / "tokenizer.json").write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:bdc45dc7f18a5c55e0dcb36f4f187a7c429d6aaa1693a17d20422b85081642d9\nsize 1795331\n")
    found = findings(folder, ["CFG001", "WGT005"])
    assert [(f.rule, str(f.severity), f.file) for f in found] == [("lfs-pointer", "warning", "tokenizer.json")]
    assert "1.8 MB" in found[0].message and "git lfs pull" in found[0].message


def test_placeholder_tokenizer_json(tmp_path):
    folder = mistral_adapter(tmp_path)
    (folder / "tokenizer.json").write_text("{}\n")
    found = findings(folder, upstream=WITH_UPSTREAM)
    assert [(f.rule, f.file) for f in loud(found) if f.file == "tokenizer.json"] == [("file-unreadable", "tokenizer.json")]
    assert not loud(found, "added-tokens-inconsistent"), [f.message for f in found]


def test_placeholder_index_and_index_without_shards(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(MISTRAL_V02, folder)
    found = findings(folder, ["WGT002"])
    assert [str(f.severity) for f in found] == ["info"] and "none of them is in this folder" in found[0].message
    (folder / "model.safetensors.index.json").write_text('{"metadata": {"total_size": 0}, "weight_map": {}}\n')
    found = findings(folder, ["WGT002"])
    assert [str(f.severity) for f in found] == ["error"] and "weight_map is empty" in found[0].message


@pytest.mark.parametrize("name,original,severity", [
    ("tokenizer (1).json", "tokenizer.json", "warning"),
    ("generation_config (1).json", "generation_config.json", "warning"),
    ("tokenizer_config (2).json", "tokenizer_config.json", "info"),
])
def test_browser_duplicate_names(tmp_path, name, original, severity):
    folder = mistral_adapter(tmp_path)
    source = MISTRAL_V02 / original if (MISTRAL_V02 / original).exists() else folder / original
    (folder / name).write_bytes(source.read_bytes())
    if original == "tokenizer.json":
        (folder / original).unlink()
    found = [f for f in findings(folder, ["CFG001"]) if f.file == name]
    assert [str(f.severity) for f in found] == [severity] and original in found[0].message


def test_no_browser_duplicate_on_real_folders():
    for folder in [MISTRAL_CKPT, TINYLLAMA_CKPT, MISTRAL_V02]:
        assert not [f for f in findings(folder, ["CFG001"]) if "browser-duplicate" in f.message]


def _save_args_as(tmp_path: Path, module: str, name: str, base: type) -> Path:
    """training_args.bin as the trainer writes it (torch.save of its arguments object), for a class of
    the trainer's own module (LLaMA-Factory, Unsloth: not installed here, so the class is declared under
    the module name the trainer uses)."""
    import dataclasses
    import sys
    import types

    import torch

    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    cls = dataclasses.make_dataclass(name, [], bases=(base,))
    cls.__module__, cls.__qualname__ = module, name
    setattr(sys.modules[module], name, cls)
    folder = tmp_path / name
    folder.mkdir()
    try:
        torch.save(cls(output_dir=str(tmp_path / "out"), report_to="none"), folder / "training_args.bin")
    finally:
        for i in range(len(parts), 0, -1):
            sys.modules.pop(".".join(parts[:i]), None)
    return folder


@pytest.mark.parametrize("module,name,base", [
    ("llamafactory.hparams.training_args", "TrainingArguments", "transformers:Seq2SeqTrainingArguments"),
    ("unsloth_compiled_cache.UnslothSFTTrainer", "UnslothSFTConfig", "transformers:TrainingArguments"),
    ("UnslothGRPOTrainer", "UnslothGRPOConfig", "transformers:TrainingArguments"),
])
def test_stock_trainer_argument_classes_are_known(tmp_path, module, name, base):
    import importlib

    package, cls = base.split(":")
    folder = _save_args_as(tmp_path, module, name, getattr(importlib.import_module(package), cls))
    [finding] = findings(folder, ["SEC004"])
    assert str(finding.severity) == "info" and f"{module}.{name}" in finding.message



# --- hostile input ----------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from hfdoctor.repo.file_names import browser_duplicate_of, is_training_state  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_file_name_readers_on_any_name(name):
    assert isinstance(is_training_state(name), bool)
    original = browser_duplicate_of(name)
    assert original is None or (len(original) < len(name) and " (" not in original.rsplit("/", 1)[-1][-12:])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.one_of(st.none(), st.integers(), st.text(max_size=200),
                      st.sampled_from(["../../etc", "..\\..\\x", "a/../../b", "/etc/passwd", "C:\\models\\x",
                                       "Qwen/Qwen3-8B", "mistralai/Mistral-7B-v0.1", "x" * 5000])),
       tokenizer=st.binary(max_size=300))
def test_adapter_base_on_any_base_name_and_tokenizer_bytes(tmp_path_factory, base, tokenizer):
    """Whatever adapter_config.json names, the base is resolved or unknown, never an exception, and only
    ever looked up under the --upstream folder (a name with .. or a drive names no folder there)."""
    folder = tmp_path_factory.mktemp("adapter")
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "LORA"}))
    (folder / "tokenizer.json").write_bytes(tokenizer)
    repo = ModelRepo(folder, upstream=WITH_UPSTREAM)
    found = adapter_base(repo)
    assert found is not None and (found.repo_id is None or ".." not in found.repo_id)
    value = repo.tokenizer_json
    assert value is None or isinstance(value.get("model"), dict)
