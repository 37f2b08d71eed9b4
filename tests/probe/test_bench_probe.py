"""The probe's GPU bench runs on a CPU too, on a shrunken shape: the same script a GPU session runs
(bench/gpu_session.sh) is exercised here, with Qwen3-8B's real vocabulary and template and one layer of
hidden size 64, at a budget of 4 tokens."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_the_gpu_bench_runs_shrunken_on_a_cpu(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_probe_gpu

    code = bench_probe_gpu.main(["--models", "qwen3-8b", "--layers", "1", "--hidden", "64", "--max-new-tokens", "4",
                                 "--device", "cpu", "--work", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "device: CPU" in out and "copy bandwidth:" in out
    assert "qwen3-8b {'num_hidden_layers': 1, 'hidden_size': 64}" in out and "floor" in out
    assert "4 new tokens (--max-new-tokens)" in out
    assert "call: 5 rows, 4 steps" in out and "call: 1 rows, 4 steps" in out and "batch 1:" in out
    assert "peak host anonymous" in out and "verdicts: think-on" in out
    assert "deterministic passed" in out
    assert not (tmp_path / "qwen3-8b").exists()  # without --keep the disk holds one model at a time
