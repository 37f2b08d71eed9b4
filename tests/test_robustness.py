"""A broken input file is a finding, never a traceback: every top-level value of every
metadata file replaced by values of the wrong type, and no rule may crash."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from hfdoctor.lint.check import check_target
from hfdoctor.knowledge.upstream import Upstream

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "tiny-thinker"
OFFLINE = Upstream((), use_cache=False, use_hub=False)
WRONG_VALUES = [None, 7, -1, True, "text", [], ["a", 1, None], {}, {"content": 3}, 1e400]
FILES = ["config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json"]


def cases():
    wrong = itertools.cycle(WRONG_VALUES)
    for name in FILES:
        data = json.loads((FIXTURE / name).read_text())
        for key in data:
            # Three wrong values per key, cycling so that every type meets every key somewhere.
            for _ in range(3):
                yield name, key, next(wrong)


@pytest.mark.parametrize("name,key,value", list(cases()), ids=lambda v: repr(v)[:20])
def test_wrong_types_never_crash(tmp_path, name, key, value):
    folder = tmp_path / "m"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    data = json.loads((folder / name).read_text())
    data[key] = value
    (folder / name).write_text(json.dumps(data))
    report = check_target(str(folder), upstream=OFFLINE)
    assert not report.internal_errors, report.internal_errors


@pytest.mark.parametrize("name", FILES + ["README.md", "special_tokens_map.json"])
@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00garbage", b"null", b"[]", b'"x"', b"{" * 5000])
def test_garbage_files_never_crash(tmp_path, name, content):
    folder = tmp_path / "m"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    (folder / name).write_bytes(content)
    report = check_target(str(folder), upstream=OFFLINE)
    assert not report.internal_errors, report.internal_errors


@pytest.mark.parametrize("front_matter", [
    "base_model: 7", "base_model: {a: b}", "base_model: [1, null, {x: y}]", "tags: conversational",
    "tags: [1, [2]]", "widget: 3", "widget: [messages]", "license: [a, b]", "pipeline_tag: {a: 1}",
    "- just\n- a list", "42", "base_model: Qwen/Qwen3-8B\nbase_model: meta-llama/Llama-3.1-8B",
])
def test_odd_card_front_matter_never_crashes(tmp_path, front_matter):
    folder = tmp_path / "m"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    (folder / "README.md").write_text(f"---\n{front_matter}\n---\n\n# card\n")
    report = check_target(str(folder), upstream=OFFLINE)
    assert not report.internal_errors, report.internal_errors


@pytest.mark.parametrize("entry", [None, 5, "x", {"content": None}, {"content": ["a"]}, {}])
def test_odd_added_tokens_decoder_entries_never_crash(tmp_path, entry):
    folder = tmp_path / "m"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    data = json.loads((folder / "tokenizer_config.json").read_text())
    data["added_tokens_decoder"]["999999"] = entry
    data["added_tokens_decoder"]["not-a-number"] = entry
    (folder / "tokenizer_config.json").write_text(json.dumps(data))
    report = check_target(str(folder), upstream=OFFLINE)
    assert not report.internal_errors, report.internal_errors
