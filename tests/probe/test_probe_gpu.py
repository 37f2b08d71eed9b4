"""`hfdoctor probe` on a CUDA GPU: the fixtures' verdicts as on the CPU, CUDA graphs giving the tokens eager
decoding gives, random bf16 weights never failing `deterministic`, the memory figures, and the refusal of a model
larger than the GPU. Skipped without CUDA (CI has no GPU); bench/gpu_session.sh runs them on a GPU machine.
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from conftest import ROOT, UPSTREAM

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from hfdoctor.probe import decode, run_probe  # noqa: E402

FIXTURES = ROOT / "fixtures"


def probe_json(path, capsys, **options) -> tuple[int, dict]:
    code = run_probe(str(path), device="cuda", output_format="json", **options)
    return code, json.loads(capsys.readouterr().out)


def statuses(report: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


@pytest.mark.parametrize("fixture, expected", [
    ("tiny-thinker", dict.fromkeys(["think-on", "think-off", "stops-at-eos", "deterministic", "batch-invariance"],
                                   "passed")),
    ("tiny-nothinker", {"think-on": "failed", "think-off": "passed", "stops-at-eos": "passed",
                        "deterministic": "passed", "batch-invariance": "passed"}),
    ("tiny-long-thinker", dict.fromkeys(["think-on", "think-off", "stops-at-eos", "deterministic",
                                         "batch-invariance"], "passed")),
])
def test_the_fixtures_get_their_cpu_verdicts_on_cuda_with_graphs(fixture, expected, capsys):
    code, report = probe_json(FIXTURES / fixture, capsys)
    assert report["device"] == "cuda:0" and statuses(report) == expected, report
    assert report["max_new_tokens"] == 1024 and report["budget"] == "default on a GPU"
    runtime = report["runtime"]
    assert runtime["cache"] == "static" and runtime["cuda_graphs"] is True, runtime["not_faster"]
    assert runtime["deterministic_algorithms"] is True and runtime["cublas_workspace_config"]
    assert report["memory"]["peak_gpu_bytes"] > 0 and report["memory"]["peak_host_anon_bytes"] > 0
    assert code == (1 if fixture == "tiny-nothinker" else 0)


def test_cuda_graphs_give_the_tokens_of_eager_decoding():
    """The replayed graph and the step called directly: the same tokens and the same candidates, row by row."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = FIXTURES / "tiny-long-thinker"
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, device_map="cuda:0").eval()
    rows = []
    for thinking in (True, False):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 plus 3?"}], tokenize=False,
                                               add_generation_prompt=True, enable_thinking=thinking)
        rows.append(decode.Row(tuple(tokenizer(prompt, add_special_tokens=False)["input_ids"])))
    rows.append(decode.Row(rows[0].ids, seed=1234))
    calls = {}
    for graphs in (True, False):
        runtime = decode.Runtime("static", graphs)
        calls[graphs] = decode.Decoder(model, "cuda:0", [308, 306], 306, runtime).run(rows, budget=1024)
    assert calls[True].how == "static + CUDA graph" and calls[False].how == "static"
    for with_graph, without in zip(calls[True].rows, calls[False].rows):
        assert with_graph.ids == without.ids
        assert torch.equal(with_graph.trace.top_ids, without.trace.top_ids)
    assert len(calls[True].rows[0].ids) > 300 and calls[True].rows[0].stopped_on == 308


def test_random_bf16_weights_never_fail_deterministic_at_512_tokens(tmp_path, capsys):
    """Qwen3-8B's shape cut to 4 layers, random bf16 weights (nearly flat distributions: the hardest case for
    seeded sampling): two identical requests must agree, or differ only where bf16 rounding explains it."""
    sys.path.insert(0, str(ROOT / "bench"))
    import random_model

    path = tmp_path / "qwen3-8b-4-layers"
    random_model.build(UPSTREAM / "Qwen--Qwen3-8B", path, {"num_hidden_layers": 4}, device="cuda")
    for budget in (96, 512):
        _, report = probe_json(path, capsys, max_new_tokens=budget)
        result = next(c for c in report["checks"] if c["name"] == "deterministic")
        assert result["status"] in ("passed", "inconclusive"), result
        assert report["dtype"] == "bfloat16" and report["runtime"]["cuda_graphs"] is True


def test_a_model_larger_than_the_gpu_is_refused_before_loading(tmp_path, capsys, monkeypatch):
    """Qwen3-8B's metadata with 400 layers: about 170 GB of (sparse) bf16 weights, more than any one GPU."""
    sys.path.insert(0, str(ROOT / "tests"))
    from weights_util import model_tensors, write_checkpoint

    repo = tmp_path / "qwen3-400-layers"
    shutil.copytree(UPSTREAM / "Qwen--Qwen3-8B", repo)
    (repo / "model.safetensors.index.json").unlink()
    config = json.loads((repo / "config.json").read_text())
    config.update(num_hidden_layers=400, layer_types=["full_attention"] * 400)
    (repo / "config.json").write_text(json.dumps(config))
    write_checkpoint(repo, model_tensors(repo / "config.json"), shards=4)

    def never_load(*args, **kwargs):
        raise AssertionError("the probe loaded weights it should have refused")

    monkeypatch.setattr("hfdoctor.probe.session.Session", never_load)
    code, report = probe_json(repo, capsys)
    assert code == 2 and report["checks"] == []
    assert "the weights need" in report["refused"] and "KV cache for 1024 new tokens" in report["refused"]
    assert torch.cuda.device_count() > 1 or "but cuda:0 has" in report["refused"]
