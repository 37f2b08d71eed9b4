"""Held-out hostile cases of round 1 (issue 31) that still crashed: each is checked as a user
runs it, and must give a finding or a clean report (exit 0 or 1), never exit 2, a traceback,
an internal error or text from a library's crash on stderr."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from hostile import _safetensors  # a safetensors file whose data is a hole

TINY = ROOT / "fixtures" / "tiny-thinker"


def _tiny(dest: Path) -> Path:
    shutil.copytree(TINY, dest, ignore=shutil.ignore_patterns("*.safetensors"))
    return dest


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _check(target: Path, *extra: str, subprocess_: bool = False) -> tuple[dict, str]:
    proc = run_cli("check", str(target), "--format", "json", *extra, subprocess_=subprocess_)
    assert proc.returncode in (0, 1), (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    report = report[0] if isinstance(report, list) else report
    assert not report.get("internal_errors"), report["internal_errors"]
    return report, proc.stderr


@pytest.mark.parametrize("where", ["eos_token", "added_tokens_decoder"])
def test_lone_surrogate_token_does_not_crash_prefix_instability(tmp_path, where):
    """An added token (the eos named in added_tokens_decoder) with a lone surrogate ("\\ud800",
    valid JSON): prefix-instability builds its RE2 alternation of added tokens from it."""
    repo = _tiny(tmp_path / "repo")

    def edit(config):
        config["eos_token"] = "\ud800"
        config["added_tokens_decoder"]["99999"] = {"content": "\ud800" if where == "eos_token" else "<x\udcff>",
                                                   "special": True}
    _edit_json(repo / "tokenizer_config.json", edit)
    report, _ = _check(repo)
    assert "prefix-instability" in {f["rule"] for f in report["findings"]}  # it still ran and judged


@pytest.mark.parametrize("group_size", [0, "64", -1, [64]])
def test_mlx_group_size_that_is_not_a_positive_integer(tmp_path, group_size):
    """MLX quantization (block and per-module override) with group_size 0, "64", -1 or a list:
    not a size to divide shapes by, so the packing is not verified, and nothing crashes."""
    repo = _tiny(tmp_path / "repo")
    prefix = "model.layers.0.mlp.up_proj"
    _edit_json(repo / "config.json", lambda c: c.update(quantization={
        "bits": 4, "group_size": group_size, prefix: {"bits": 4, "group_size": group_size}}))
    _safetensors(repo / "model.safetensors", {f"{prefix}.weight": ("U32", [64, 8]),
                                              f"{prefix}.scales": ("BF16", [64, 1]),
                                              f"{prefix}.biases": ("BF16", [64, 1])})
    report, _ = _check(repo, "--select", "WGT006")
    assert not any("group_size" in f["message"] for f in report["findings"])


def test_group_size_is_declared_only_when_positive():
    from hfdoctor.weights.quantized import declared

    for size in (0, -1, "64", 64.0, True, None):
        assert declared({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": size}}).group_size \
            is None
        assert declared({"quantization": {"bits": 4, "group_size": size, "m": {"group_size": size, "bits": "4"}}}) \
            .overrides["m"] == {"bits": None, "group_size": None}
    assert declared({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}).group_size == 128


def test_unreadable_home_is_no_node_and_no_crash(tmp_path, monkeypatch):
    """$HOME that cannot be looked into (stat raises PermissionError; as root nothing is
    unreadable, so the refusal is simulated) holding ~/.cache/hfdoctor/node_modules and a
    PATH entry (~/.local/bin): @huggingface/jinja is simply not installed there."""
    from hfdoctor.chat import engines
    from hfdoctor.lint.check import check_target
    from hfdoctor.bounded.programs import find_program
    from hfdoctor.knowledge.upstream import Upstream

    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HFDOCTOR_NODE_MODULES", raising=False)
    monkeypatch.setenv("PATH", f"{home}/.local/bin{os.pathsep}{os.environ.get('PATH', '')}")
    real_stat = os.stat

    def refusing_stat(path, *args, **kwargs):
        if str(path).startswith(str(home)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", refusing_stat)
    assert engines.node_modules() is None
    assert find_program("definitely-not-a-program-hfdoctor") is None
    repo = _tiny(tmp_path / "repo")
    report = check_target(str(repo), upstream=Upstream((), use_cache=False, use_hub=False))
    assert not report.internal_errors, report.internal_errors


def test_no_home_at_all(monkeypatch):
    from pathlib import Path as P

    from hfdoctor.chat import engines

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("HFDOCTOR_NODE_MODULES", raising=False)
    monkeypatch.setattr(P, "home", staticmethod(no_home))
    assert engines.node_modules() is None


def test_tokenizers_panic_text_never_reaches_stderr(tmp_path):
    """Rust's panic hook writes "thread ... panicked at" (and with RUST_BACKTRACE a whole
    backtrace) to fd 2 itself: a real process, with RUST_BACKTRACE=1, and both panics
    (loading an invalid Precompiled charsmap, encoding with FixedLength 0)."""
    first = _tiny(tmp_path / "load")
    _edit_json(first / "tokenizer.json",
               lambda t: t.update(normalizer={"type": "Precompiled", "precompiled_charsmap": "!!not base64"}))
    second = _tiny(tmp_path / "encode")
    _edit_json(second / "tokenizer.json", lambda t: t.update(normalizer=None, pre_tokenizer={
        "type": "Sequence", "pretokenizers": [t.get("pre_tokenizer") or {"type": "ByteLevel"},
                                              {"type": "FixedLength", "length": 0}]}))
    proc = run_cli("check", str(first), str(second), "--format", "json", env={"RUST_BACKTRACE": "1"},
                   subprocess_=True)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert "panicked" not in proc.stderr and "backtrace" not in proc.stderr and ".rs:" not in proc.stderr, \
        proc.stderr[-2000:]
    reports = json.loads(proc.stdout)
    messages = " ".join(f["message"] for r in reports for f in r["findings"] if f["rule"] == "file-unreadable")
    assert "panic" in messages  # the finding still says what happened


def test_stderr_is_restored_after_a_contained_panic(capfd):
    from hfdoctor.bounded.tokenizing import quiet_rust_stderr

    with quiet_rust_stderr():
        with quiet_rust_stderr():
            os.write(2, b"hidden\n")
        os.write(2, b"hidden too\n")
    os.write(2, b"shown\n")
    assert capfd.readouterr().err == "shown\n"


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ANY_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()),
                   max_size=12)


@settings(max_examples=200, deadline=None)
@given(added=st.lists(ANY_TEXT.filter(bool), max_size=6), text=ANY_TEXT, at=st.integers(0, 12))
def test_vocabulary_of_any_added_tokens(added, text, at):
    """prefix-instability's added-token reader: any token texts (lone surrogates included) and
    any render: a piece, a boundary and a verdict, never an exception."""
    from hfdoctor.chat.consistency import Vocabulary

    vocabulary = Vocabulary(tuple(added))
    at = min(at, len(text))
    assert isinstance(vocabulary.piece_at(text, at), str)
    assert 0 <= vocabulary.token_start(text, at) <= at
    assert isinstance(vocabulary.boundary_is_safe(text[:at], text), bool)
