"""`hfdoctor probe` on the project's tiny Qwen3 checkpoints (fixtures/make_tiny_models.py).

tiny-thinker thinks, closes its thinking and stops on <|im_end|>: every check passes.
tiny-nothinker has the same template but weights that never learned <think> (seed 000 part
b): think-on fails. Broken copies in tmp dirs cover the refusals (git-lfs pointers, weights
larger than memory, weights that do not match config.json) and the other failure paths.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hfdoctor.probe import checks, preflight, run_probe  # noqa: E402
from hfdoctor.probe.session import Generation  # noqa: E402
from hfdoctor.registry import family  # noqa: E402

THINKER = ROOT / "fixtures" / "tiny-thinker"
NOTHINKER = ROOT / "fixtures" / "tiny-nothinker"
CHECK_NAMES = ["think-on", "think-off", "stops-at-eos", "deterministic"]


@pytest.fixture
def copy_fixture(tmp_path):
    def make(src: Path = THINKER) -> Path:
        dest = tmp_path / src.name
        shutil.copytree(src, dest)
        return dest

    return make


def probe_json(path: Path, capsys, **options) -> tuple[int, dict, str]:
    """run_probe in-process (torch is imported once for the whole module), JSON parsed."""
    code = run_probe(str(path), device="cpu", output_format="json", **options)
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def verdicts(report: dict) -> dict[str, bool | None]:
    return {c["name"]: c["passed"] for c in report["checks"]}


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


# --- the fixtures, through the real command line ---------------------------------------


def test_thinker_passes_every_check():
    proc = run_cli("probe", str(THINKER), "--device", "cpu", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # stdout is one JSON object, nothing else
    assert report["target"] == str(THINKER)
    assert report["device"] == "cpu"
    assert [c["name"] for c in report["checks"]] == CHECK_NAMES
    assert verdicts(report) == dict.fromkeys(CHECK_NAMES, True)
    think_on = report["checks"][0]
    assert think_on["snippet"].startswith("<think>\n") and "</think>" in think_on["snippet"]
    assert think_on["snippet"].endswith("<|im_end|>")
    assert report["checks"][1]["snippet"] == "The answer is 5.<|im_end|>"
    assert all(isinstance(c["tokens"], int) and c["seconds"] >= 0 for c in report["checks"])


def test_nothinker_fails_think_on():
    proc = run_cli("probe", str(NOTHINKER), "--device", "cpu")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    think_on = next(line for line in lines if "think-on" in line)
    assert "FAIL" in think_on and "no <think> in the reply" in think_on
    for name in ("think-off", "stops-at-eos", "deterministic"):
        assert "PASS" in next(line for line in lines if name in line)
    assert "reply (7 tokens" in proc.stdout and "The answer is 5.<|im_end|>" in proc.stdout
    assert "3 passed, 1 failed" in proc.stdout


# --- refusals: exit 2, a clear message, nothing loaded -----------------------------------


def test_refuses_lfs_pointer_weights(copy_fixture):
    repo = copy_fixture()
    (repo / "model.safetensors").write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 495528\n"
    )
    proc = run_cli("probe", str(repo), "--device", "cpu", "--format", "json")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "git-lfs pointer" in proc.stderr and "git lfs pull" in proc.stderr
    report = json.loads(proc.stdout)
    assert report["checks"] == [] and "model.safetensors is a git-lfs pointer" in report["refused"]


def write_sparse_safetensors(path: Path, shapes: dict[str, tuple[int, ...]]) -> int:
    """A valid F32 safetensors header over a data region that is a sparse hole; returns its bytes."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = math.prod(shape) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + offset)
    return offset


def test_refuses_weights_larger_than_memory(copy_fixture, capsys, monkeypatch):
    """A config whose (sparse) weights declare ~120 MiB, on a device with 64 MiB free."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    repo = copy_fixture()
    dims = {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 128}
    edit_json(repo / "config.json", lambda c: c.update(dims))
    config = Qwen3Config.from_pretrained(repo)
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in Qwen3ForCausalLM(config).state_dict().items()
                  if name != "lm_head.weight"}  # tied to the embeddings, as save_pretrained writes it
    declared = write_sparse_safetensors(repo / "model.safetensors", shapes)
    monkeypatch.setattr(preflight, "available_bytes", lambda device: 64 * 1024 * 1024)

    def never_load(*args, **kwargs):
        raise AssertionError("the probe loaded weights it should have refused")

    monkeypatch.setattr("hfdoctor.probe.session.Session", never_load)
    code, report, err = probe_json(repo, capsys)
    assert code == 2
    assert report["weights_bytes"] == declared
    assert declared > 100 * 1024 * 1024
    assert f"the weights need {preflight.human_bytes(declared)}" in report["refused"]
    assert "cpu has 64.0 MiB free" in report["refused"]
    assert "probe refused" in err


def test_refuses_weights_that_do_not_match_the_config(copy_fixture, capsys):
    from hfdoctor.rules import find_rule

    if find_rule("weights-config-mismatch") is None:
        pytest.skip("the weights-config-mismatch rule is not in this build")
    repo = copy_fixture()
    edit_json(repo / "config.json", lambda c: c.update(num_hidden_layers=3, layer_types=["full_attention"] * 3))
    code, report, _ = probe_json(repo, capsys)
    assert code == 2
    assert "weights-config-mismatch" in report["refused"]


def test_refuses_a_checkout_without_chat_template_before_loading(copy_fixture, capsys, monkeypatch):
    repo = copy_fixture()
    edit_json(repo / "tokenizer_config.json", lambda t: t.pop("chat_template"))

    def never_load(*args, **kwargs):
        raise AssertionError("the probe loaded weights it should have refused")

    monkeypatch.setattr("hfdoctor.probe.session.Session", never_load)
    code, report, err = probe_json(repo, capsys)
    assert code == 2 and report["checks"] == []
    assert "no chat template" in report["refused"] and "missing-chat-template" in report["refused"]
    assert "probe refused" in err


def test_a_model_that_fails_to_generate_is_reported_not_a_traceback(capsys, monkeypatch):
    from transformers import GenerationMixin

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(GenerationMixin, "generate", out_of_memory)
    code, report, err = probe_json(THINKER, capsys)
    assert code == 2 and report["checks"] == []
    assert report["refused"] == "generation failed: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert "Traceback" not in err


def test_refuses_cuda_when_there_is_none(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code = run_probe(str(THINKER), device="cuda", output_format="json")
    report = json.loads(capsys.readouterr().out)
    assert code == 2 and "no CUDA device" in report["refused"]


# --- other verdicts on real generations ---------------------------------------------


def test_eos_that_is_not_end_of_turn_fails_stops_at_eos(copy_fixture, capsys):
    """generation_config.json stops on <|endoftext|> only: the model ends its turn and runs on."""
    repo = copy_fixture()
    edit_json(repo / "generation_config.json", lambda g: g.update(eos_token_id=[306]))
    code, report, _ = probe_json(repo, capsys, max_new_tokens=32)
    assert code == 1
    stops = next(c for c in report["checks"] if c["name"] == "stops-at-eos")
    assert stops["passed"] is False
    assert "32-token budget without an eos id" in stops["detail"]
    assert "end-of-turn token <|im_end|> (id 308)" in stops["detail"]


def test_vocabulary_without_think_tokens_makes_thinking_not_applicable(copy_fixture, capsys):
    repo = copy_fixture()
    rename = {"<think>": "<reason>", "</think>": "</reason>"}
    edit_json(repo / "tokenizer.json", lambda t: [a.update(content=rename.get(a["content"], a["content"]))
                                                   for a in t["added_tokens"]])
    edit_json(repo / "tokenizer_config.json", lambda t: [a.update(content=rename.get(a["content"], a["content"]))
                                                          for a in t["added_tokens_decoder"].values()])
    code, report, _ = probe_json(repo, capsys)
    assert code == 0
    assert verdicts(report) == {"think-on": None, "think-off": None, "stops-at-eos": True, "deterministic": True}
    assert "no single <think>" in report["checks"][0]["detail"]


# --- the decisions, on hand-made replies ---------------------------------------------


class FakeSession:
    """Just enough of Session for the decision functions: a fixed vocabulary."""

    VOCAB = ["<think>", "</think>", "<|im_end|>", "Let", " me", " add", "5", "\n"]
    max_new_tokens = 8
    eos_ids = [2]

    def single_token_id(self, token):
        return self.VOCAB.index(token) if token in self.VOCAB else None

    def token_name(self, token_id):
        return self.VOCAB[token_id]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.VOCAB[i] for i in ids if not (skip_special_tokens and i == 2))


def reply(ids, prompt="<|im_start|>assistant\n", stopped=True):
    return Generation(prompt, 5, ids, FakeSession().decode(ids), 0.01, ids[-1] if stopped else None)


def support():
    qwen3 = family("qwen3")
    return checks.thinking_support(FakeSession(), qwen3, None, qwen3.variant("hybrid"))


def test_think_on_accepts_a_block_the_template_opened():
    gen = reply([3, 4, 5, 1, 7, 6, 2], prompt="<|im_start|>assistant\n<think>\n")
    result = checks.think_on(FakeSession(), support(), gen)
    assert result.passed is True and "the template opened the block" in result.detail


def test_think_on_fails_when_thinking_never_closes():
    result = checks.think_on(FakeSession(), support(), reply([0, 3, 4, 5, 4, 5, 4, 5], stopped=False))
    assert result.passed is False and "raise --max-new-tokens" in result.detail


def test_think_on_fails_on_an_empty_block():
    result = checks.think_on(FakeSession(), support(), reply([0, 7, 1, 6, 2]))
    assert result.passed is False and "empty" in result.detail


def test_think_off_fails_when_reasoning_appears():
    result = checks.think_off(FakeSession(), support(), reply([0, 3, 1, 6, 2]), same_prompt=True)
    assert result.passed is False and "ignores the switch" in result.detail


def test_deterministic_reports_where_a_batched_run_differs():
    first, again, batched = reply([3, 4, 6, 2]), reply([3, 4, 6, 2]), reply([3, 5, 6, 2])
    result = checks.deterministic(FakeSession(), first, again, batched, padding=9)
    assert result.passed is False
    assert "left-padded by 9 tokens" in result.detail and "at token 2" in result.detail


@pytest.mark.parametrize("key, variant, on, off", [
    ("llama3", "", "does not think", "does not think"),
    ("deepseek-r1", "", None, "always thinks"),
    ("qwen3", "hybrid", None, None),
    ("qwen3", "instruct-2507", "does not think", "does not think"),
    ("qwen3", "thinking-2507", None, "always thinks"),
])
def test_which_thinking_checks_apply(key, variant, on, off):
    result = checks.thinking_support(FakeSession(), family(key), None, family(key).variant(variant))
    for reason, expected in ((result.on_reason, on), (result.off_reason, off)):
        assert (reason is None) if expected is None else (expected in reason)


def test_memory_refusal_names_the_cpu_staging_of_a_gpu_load(monkeypatch):
    """Without accelerate, a CUDA load passes through CPU memory, which must hold the weights too."""
    monkeypatch.setattr(preflight, "available_bytes", lambda device: 1024)
    with pytest.raises(preflight.ProbeRefused, match="install accelerate"):
        preflight.check_memory(preflight.Weights(["model.safetensors"], 4096), "cpu", staging_for="cuda:0")
    assert preflight.check_memory(preflight.Weights(["model.safetensors"], 512), "cpu") == 1024
