"""Fail-closed model-file scans (issue 40): each hostile file is loaded by the real loader
(pickle, torch.load, numpy.load, py7zr) in a child process, whose harmless payload
(os.mkdir of a marker in tmp_path) shows that loading runs it; and hfdoctor, on the same
bytes, must say so: SEC001 (unsafe-pickle) or SEC006 (pickle-not-proven-safe), an error,
exit 1. Each reader of hfdoctor is judged against the loader it stands for, on the same
bytes: what the loader runs, hfdoctor sees.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from hfdoctor.cli import run
from hfdoctor.modelfiles.opcodes import ops
from conftest import TESTS

sys.path.insert(0, str(TESTS / "corpus"))
import make_model_files as corpus  # noqa: E402

FAIL_CLOSED = {"unsafe-pickle", "pickle-not-proven-safe"}


def payload(marker: Path) -> bytes:
    """os.mkdir(marker), protocol 2 with text opcodes: GLOBAL, MARK, BINUNICODE, TUPLE, REDUCE."""
    raw = str(marker).encode()
    return b"\x80\x02cos\nmkdir\n(X" + struct.pack("<I", len(raw)) + raw + b"tR."


LOADERS = {
    "pickle": "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))",
    "torch": "import sys, torch; torch.load(sys.argv[1], weights_only=False)",
    "numpy": "import sys, numpy; z = numpy.load(sys.argv[1], allow_pickle=True); z['b']",
    "numpy-npy": "import sys, numpy; numpy.load(sys.argv[1], allow_pickle=True)",
    "joblib": "import sys, joblib; joblib.load(sys.argv[1])",
    "py7zr": ("import os, pickle, sys, tempfile, py7zr; d = tempfile.mkdtemp(); "
              "py7zr.SevenZipFile(sys.argv[1]).extract(d, targets=['data.pkl']); "
              "pickle.load(open(os.path.join(d, 'data.pkl'), 'rb'))"),
}

CASES = {  # name: (builder of tests/corpus/make_model_files.py, file name, loader)
    "nul-after-int": (corpus.nul_after_int, "model.pkl", "pickle"),
    "torch-zip-nul-int": (lambda p: corpus.torch_zip(corpus.nul_after_int(p)), "pytorch_model.bin", "torch"),
    "tar-pax-unicode-size": (corpus.tar_pax_unicode_size, "model.pth", "torch"),
    "npz-zip64-offset": (corpus.npz_zip64_offset, "arrays.npz", "numpy"),
    "7z-refused-filter-chain": (corpus.seven_zip_refused_chain, "model.7z", "py7zr"),
    # `os\x00junk`: the import of a frozen module compares C strings, so this is os
    "nul-in-module-name": (lambda p: p.replace(b"cos\n", b"cos\x00junk\n"), "model.pkl", "pickle"),
    "npy-object-by-name": (corpus.npy_object_by_name, "array.npy", "numpy-npy"),
    "npy-python2-header": (corpus.npy_python2_header, "array.npy", "numpy-npy"),
    "npy-huge-header": (corpus.npy_huge_header, "array.npy", "numpy-npy"),
    "npy-object-field-by-string": (corpus.npy_object_field_by_string, "array.npy", "numpy-npy"),
    "npy-object-subarray-by-string": (corpus.npy_object_subarray_by_string, "array.npy", "numpy-npy"),
    "npy-python2-spaced-long": (corpus.npy_python2_spaced_long, "array.npy", "numpy-npy"),
    "npz-large-member-without-npy-name": (corpus.npz_large_member_without_npy_name, "arrays.npz", "numpy"),
    "joblib-zfile": (corpus.joblib_zfile, "model.joblib", "joblib"),
}


def check(repo: Path, capsys) -> tuple[int, list[dict]]:
    """(exit code, findings) of `hfdoctor check REPO --select SEC --format json`."""
    capsys.readouterr()
    code = run(["check", str(repo), "--select", "SEC", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    report = report[0] if isinstance(report, list) else report
    return code, report["findings"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_the_loader_runs_hfdoctor_reports(tmp_path, capsys, name):
    build, file_name, loader = CASES[name]
    if loader in ("torch", "py7zr", "joblib"):
        pytest.importorskip(loader)
    repo, marker = tmp_path / "repo", tmp_path / "marker"
    repo.mkdir()
    (repo / file_name).write_bytes(build(payload(marker)))
    child = subprocess.run([sys.executable, "-c", LOADERS[loader], str(repo / file_name)], capture_output=True,
                           text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert marker.is_dir(), f"{loader} did not run the payload: {child.stderr[-2000:]}"
    code, findings = check(repo, capsys)
    assert code == 1, findings
    assert any(f["rule"] in FAIL_CLOSED and f["severity"] == "error" for f in findings), findings


def test_any_scanner_failure_is_not_proven_safe(tmp_path, capsys, monkeypatch):
    """The mechanism, not an example: whatever exception stops a reader, a file a loader may
    unpickle is an error (SEC006), never a warning that lets the push or CI step pass."""
    import hfdoctor.modelfiles.containers as containers

    def broken(handle):
        raise KeyError("a reader's own gap")

    (tmp_path / "model.pt").write_bytes(corpus.torch_zip(pickle.dumps({"w": 1}, protocol=2)))
    monkeypatch.setattr(containers, "zip_entries", broken)
    code, findings = check(tmp_path, capsys)
    assert code == 1
    assert [(f["rule"], f["severity"]) for f in findings] == [("pickle-not-proven-safe", "error")], findings
    assert "KeyError" in findings[0]["message"]


# --- the opcode reader against both unpicklers, on the same bytes ----------------------------------------

TEXT_BYTES = b"0123456789+-xXoObB_ .eEinfatyINFATYL'\"\\\x00\t\x0b\x0c\r\x1c\xc3\xa9"


def _loads(data: bytes) -> bool:
    """Whether either unpickler (_pickle.c, and pickle.py, which joblib and dill use) reads
    `data` to its STOP. What it calls is builtins.len, harmless."""
    for loads in (pickle.loads, pickle._loads):
        try:
            loads(data)
            return True
        except Exception:  # noqa: BLE001 - any refusal
            pass
    return False


def _ours(data: bytes) -> bool:
    try:
        for _ in ops(io.BytesIO(data)):
            pass
        return True
    except ValueError:
        return False


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(b"ILFpSV"), st.binary(max_size=7).map(lambda b: bytes(TEXT_BYTES[x % len(TEXT_BYTES)] for x in b)))
def test_text_arguments_are_read_as_the_unpicklers_read_them(opcode, line):
    """INT, LONG, FLOAT, PUT, STRING and UNICODE lines (NULs, C octal, hex, underscores,
    whitespace, inf, quotes, escapes): hfdoctor reads on exactly where one of the
    unpicklers reads on. A STRING of non-ASCII bytes is the one difference, on purpose:
    pickle.load refuses it (its default encoding is ASCII), numpy.load and torch.load
    (latin-1, UTF-8) read on, and so does hfdoctor."""
    data = (b"N" if opcode == ord("p") else b"") + bytes([opcode]) + line + b"\n0cbuiltins\nlen\n(S'ab'\ntR."
    if opcode == ord("S") and not line.isascii():
        assert _ours(data) >= _loads(data), data
    else:
        assert _ours(data) == _loads(data), data


def test_names_the_unpickler_cannot_decode_stop_loading(tmp_path, capsys):
    """picklescan's not_a_pickle.bin, `cmod\\n\\xf8\\n`: both unpicklers refuse the non-UTF-8
    name before importing anything, so it is not flagged (it was a false alarm)."""
    data = b"cmod\n\xf8\n"
    assert not _loads(data)
    (tmp_path / "not_a_pickle.bin").write_bytes(data)
    code, findings = check(tmp_path, capsys)
    assert code == 0 and all(f["severity"] == "info" for f in findings), findings


def test_a_lambda_layer_after_many_config_nodes_is_reported(tmp_path, capsys):
    """A Keras Lambda layer placed after 250,000 config nodes (the walk stopped at 200,000,
    silently): it is reported; past the walk's bound, the file is not proven safe."""
    filler = [{"class_name": "Dense", "config": {}}] * 250_000
    (tmp_path / "model.keras").write_bytes(corpus.keras_zip(corpus.keras_config([corpus.LAMBDA_LAYER] + filler)))
    code, findings = check(tmp_path, capsys)
    assert code == 1
    assert any(f["rule"] == "unsafe-model-file" and "Lambda" in f["message"] for f in findings), findings


def test_a_config_past_the_walk_bound_is_not_proven_safe(tmp_path, capsys, monkeypatch):
    import hfdoctor.modelfiles.formats as formats

    monkeypatch.setattr(formats, "MAX_KERAS_NODES", 1000)
    filler = [{"class_name": "Dense", "config": {}}] * 1000
    (tmp_path / "model.keras").write_bytes(corpus.keras_zip(corpus.keras_config([corpus.LAMBDA_LAYER] + filler)))
    code, findings = check(tmp_path, capsys)
    assert code == 1
    assert any(f["rule"] == "pickle-not-proven-safe" and "Keras config" in f["message"] for f in findings), findings


def test_a_file_the_time_budget_left_unread_is_not_proven_safe(tmp_path, capsys, monkeypatch):
    """Files the check's time budget left unscanned were a check-incomplete warning (exit 0)."""
    from hfdoctor.bounded.budget import Budget

    (tmp_path / "model.pkl").write_bytes(corpus.call("posix", "system", corpus.COMMAND))
    monkeypatch.setattr(Budget, "expired", lambda self: True)
    code, findings = check(tmp_path, capsys)
    assert code == 1
    assert any(f["rule"] == "pickle-not-proven-safe" and "time budget" in f["message"] for f in findings), findings
