"""The model's own modeling code is read as text, only inside the repository and only up to a
bound (hfdoctor.repo.remote_code): an auto_map is untrusted, and so is the code it names."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hfdoctor.repo import ModelRepo
from hfdoctor.repo.remote_code import MAX_CODE_BYTES, experts_in_dense_type

MOE_CODE = "class SparseMoe:\n    def __init__(self, config):\n        self.experts = [0] * 8\n"


def folder(tmp_path: Path, ref: str, code: str | None = MOE_CODE, name: str = "modeling_qwen2.py") -> Path:
    root = tmp_path / "repo"
    root.mkdir(parents=True)
    config = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
              "auto_map": {"AutoModelForCausalLM": ref}}
    (root / "config.json").write_text(json.dumps(config))
    if code is not None:
        (root / name).write_text(code)
    return root


def test_code_in_the_repository_is_read(tmp_path):
    found = experts_in_dense_type(ModelRepo(folder(tmp_path, "modeling_qwen2.Qwen2ForCausalLM")))
    assert found is not None and (found.file, found.line) == ("modeling_qwen2.py", 3)


def test_a_reference_that_climbs_out_of_the_repository_reads_nothing(tmp_path):
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "x.py").write_text(MOE_CODE)
    for number, ref in enumerate(("..etc.x.Model", "/etc/x.Model", "....etc.x.Model")):
        root = folder(tmp_path / f"case{number}", ref, code=None)
        assert experts_in_dense_type(ModelRepo(root)) is None


def test_a_symlink_to_code_outside_is_not_followed(tmp_path):
    secret = tmp_path / "outside.py"
    secret.write_text(MOE_CODE)
    root = folder(tmp_path, "modeling_qwen2.Qwen2ForCausalLM", code=None)
    os.symlink(secret, root / "modeling_qwen2.py")
    assert experts_in_dense_type(ModelRepo(root)) is None


def test_code_past_the_bound_is_not_read(tmp_path):
    big = "#" * MAX_CODE_BYTES + "\n" + MOE_CODE
    assert experts_in_dense_type(ModelRepo(folder(tmp_path, "modeling_qwen2.Qwen2ForCausalLM", code=big))) is None


def test_another_repositorys_code_is_not_fetched(tmp_path):
    root = folder(tmp_path, "someone/else--modeling_qwen2.Qwen2ForCausalLM")
    assert experts_in_dense_type(ModelRepo(root)) is None
