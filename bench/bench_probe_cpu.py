"""Benchmark: what the probe's generation costs on a CPU, against one plain generate() of the same budget.

A random-weight model of Qwen3-8B's shape with one layer and hidden size 64 (bench/random_model.py; the real
tokenizer, vocabulary and chat template of ../shared/upstream/Qwen--Qwen3-8B), side by side in one process:

  generate   one plain transformers generate() of the think-on prompt, greedy, 96 new tokens
  probe      the whole probe at --max-new-tokens 96: the time inside its generation calls (Session.generate),
             and its wall time; random weights never stop, so every reply runs the whole budget

The ratio probe / generate is what the probe's checks cost in units of one reply (target: at most 5x).
Each figure is the median of --runs runs, the two alternating, on --threads torch threads (1 by default:
on a shared machine more threads mostly wait for each other).

    python bench/bench_probe_cpu.py [--runs 3] [--threads 1] [--max-new-tokens 96] [--dtype bfloat16]

It measures whichever hfdoctor is imported (PYTHONPATH), so that an older checkout can be measured with the
same script; the first line says which.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import random_model  # noqa: E402

UPSTREAM = Path(os.environ.get("HFDOCTOR_TEST_UPSTREAM", ROOT.parent / "shared" / "upstream")).resolve()
QWEN3 = UPSTREAM / "Qwen--Qwen3-8B"


def plain_generate(path: Path, budget: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype="auto").eval()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 plus 3?"}], tokenize=False,
                                           add_generation_prompt=True, enable_thinking=True)
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=budget, do_sample=False, eos_token_id=[151645, 151643],
                             pad_token_id=151643)
    seconds = time.perf_counter() - started
    assert out.shape[1] - ids.shape[1] <= budget
    return seconds


def probe(path: Path, budget: int, threads: int, dtype: str | None) -> tuple[float, float, dict]:
    """(seconds inside Session.generate, wall seconds, the JSON report)."""
    from hfdoctor.probe import run_probe, session

    spent = [0.0]
    original = session.Session.generate

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    session.Session.generate = timed
    out = io.StringIO()
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            run_probe(str(path), device="cpu", max_new_tokens=budget, output_format="json", threads=threads,
                      **({"dtype": dtype} if dtype else {}))
    finally:
        session.Session.generate = original
    return spent[0], time.perf_counter() - started, json.loads(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--dtype", help="the probe's --dtype (default: its own default)")
    args = parser.parse_args(argv)

    import torch

    import hfdoctor
    from hfdoctor.probe.session import quiet_transformers

    quiet_transformers()
    torch.set_num_threads(args.threads)
    print(f"hfdoctor from {Path(hfdoctor.__file__).parent}; torch {torch.__version__}; {args.threads} thread(s)",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-probe-cpu-") as work:
        path = Path(work) / "qwen3-8b-1-layer-64"
        built = random_model.build(QWEN3, path, {"num_hidden_layers": 1, "hidden_size": 64}, device="cpu")
        print(f"Qwen3-8B shape, 1 layer, hidden 64: {built['params'] / 1e6:.1f}M parameters "
              f"({built['bytes_bf16'] / 2 ** 20:.0f} MiB bf16)", flush=True)
        generate_s, probe_s, wall_s = [], [], []
        report: dict = {}
        for run in range(args.runs):
            generate_s.append(plain_generate(path, args.max_new_tokens))
            spent, wall, report = probe(path, args.max_new_tokens, args.threads, args.dtype)
            probe_s.append(spent)
            wall_s.append(wall)
            torch.set_num_threads(args.threads)  # the probe sets its own
            print(f"  run {run + 1}: generate {generate_s[-1]:.2f} s, probe generation {spent:.2f} s "
                  f"(wall {wall:.1f} s)", flush=True)
    generate, spent, wall = (statistics.median(v) for v in (generate_s, probe_s, wall_s))
    calls = report.get("generation") or []
    shape = ", ".join(f"{c['rows']} rows x {c['steps']} steps" for c in calls) or "six calls (no 'generation' field)"
    print(f"generate() of {args.max_new_tokens} tokens: {generate:.2f} s (median of {args.runs})")
    print(f"probe generation: {spent:.2f} s = {spent / generate:.1f}x one generate() ({shape}); "
          f"probe wall {wall:.1f} s = {wall / generate:.1f}x")
    weights = (report.get("runtime") or {}).get("weights_dtype", "bfloat16")
    print(f"the probe computed in {report.get('dtype')} (weights {weights}); generate() in the weights' dtype")
    print("verdicts: " + ", ".join(f"{c['name']} {c['status']}" for c in report.get("checks", [])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
