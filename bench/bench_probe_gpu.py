"""Benchmark: `hfdoctor probe` on random-weight models of real shapes, on a GPU (or, shrunken, on a CPU).

For each model it builds a random-weight checkpoint of the real shape from ../shared/upstream metadata
(bench/random_model.py: Qwen3-8B; the mixture of experts Qwen3-30B-A3B with Qwen3-8B's tokenizer and template),
then runs the whole probe in this process at the default settings and prints, as they come:

  load            seconds to load the weights onto the device (the probe's load_seconds)
  probe           the whole probe's wall time, load included
  calls           each generation call: rows, decode steps, seconds, ms a step
  batch 1         ms a token of the call that decodes one request alone, against the floor
  floor           ms a token at the memory-bandwidth floor: the bytes one token must read (every weight once,
                  less the embedding table and the experts not routed to) over the device's copy bandwidth,
                  measured here with a large device-to-device copy (read + write)
  memory          peak GPU memory (torch.cuda.max_memory_allocated), peak host memory (anonymous, file-backed,
                  VmHWM) from the probe's JSON
  verdicts        every check's status: random weights never think or stop; deterministic must never fail

Targets on one H100/H200 for the Qwen3-8B shape at the defaults: the whole probe within 20 s wall, load
included; batch-1 decode within 4x of the floor.

    python bench/bench_probe_gpu.py                                   # both models, on the GPU
    python bench/bench_probe_gpu.py --models qwen3-8b --no-graphs --max-new-tokens 256   # without CUDA graphs
    python bench/bench_probe_gpu.py --layers 1 --hidden 64 --max-new-tokens 8           # shrunken, on a CPU

Random weights measure load, memory and speed, not behaviour. Figures are one run's, printed with the device.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import random_model  # noqa: E402

UPSTREAM = Path(os.environ.get("HFDOCTOR_TEST_UPSTREAM", ROOT.parent / "shared" / "upstream")).resolve()
MODELS = {
    "qwen3-8b": ("Qwen--Qwen3-8B", None),
    "qwen3-30b-a3b": ("Qwen--Qwen3-30B-A3B", "Qwen--Qwen3-8B"),
}
GB = 1e9


def say(*parts: object) -> None:
    print(*parts, flush=True)


def copy_bandwidth(device: str, nbytes: int = 2 * 2 ** 30) -> float:
    """Bytes a second a large copy moves on `device` (each byte read once and written once)."""
    import torch

    n = nbytes // 2
    src = torch.empty(n, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up
    best = float("inf")
    for _ in range(3):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        started = time.perf_counter()
        dst.copy_(src)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
    del src, dst
    return 2 * n * 2 / best


def run_probe_json(path: Path, device: str, max_new_tokens: int | None, graphs: bool) -> tuple[int, dict, float]:
    import contextlib
    import io

    from hfdoctor.probe import run_probe

    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = run_probe(str(path), device=device, max_new_tokens=max_new_tokens, output_format="json",
                         cuda_graphs=graphs)
    return code, json.loads(out.getvalue()), time.perf_counter() - started


def report(label: str, report_: dict, wall: float, floor_ms: float | None) -> None:
    calls = report_.get("generation", [])
    say(f"  {label}: probe {wall:.1f} s wall, load {report_.get('load_seconds')} s, exit "
        f"{'refused' if 'refused' in report_ else 'ok'}; {report_.get('max_new_tokens')} new tokens "
        f"({report_.get('budget')})")
    if "refused" in report_:
        say(f"    refused: {report_['refused']}")
        return
    runtime = report_["runtime"]
    say(f"    decoding: {runtime['cache']} cache, CUDA graphs {runtime['cuda_graphs']}"
        + (f" (not faster: {'; '.join(runtime['not_faster'])})" if runtime["not_faster"] else "")
        + f"; deterministic algorithms {runtime['deterministic_algorithms']}, without a deterministic kernel: "
        f"{', '.join(runtime['nondeterministic_ops']) or 'none'}")
    for call in calls:
        say(f"    call: {call['rows']} rows, {call['steps']} steps, {call['seconds']:.2f} s, "
            f"{call['ms_per_step']:.2f} ms a step")
    alone = next((c for c in calls if c["rows"] == 1), None)
    if alone and floor_ms:
        say(f"    batch 1: {alone['ms_per_step']:.2f} ms a token = {alone['ms_per_step'] / floor_ms:.1f}x the floor "
            f"({floor_ms:.2f} ms)")
    memory = report_["memory"]
    gpu = memory.get("peak_gpu_bytes")
    say(f"    memory: peak GPU {gpu / GB:.2f} GB" if gpu is not None else "    memory: no GPU",
        f"; peak host anonymous {memory['peak_host_anon_bytes'] / GB:.2f} GB, file-backed "
        f"{memory['peak_host_file_bytes'] / GB:.2f} GB, VmHWM {memory['peak_host_rss_bytes'] / GB:.2f} GB")
    say("    verdicts: " + ", ".join(f"{c['name']} {c['status']}" for c in report_["checks"]))
    deterministic = next(c for c in report_["checks"] if c["name"] == "deterministic")
    if deterministic["status"] != "passed":
        say(f"    deterministic: {deterministic['detail']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--layers", type=int, help="override num_hidden_layers (a shrunken model)")
    parser.add_argument("--hidden", type=int, help="override hidden_size (a shrunken model)")
    parser.add_argument("--max-new-tokens", type=int, help="the probe's budget (default: the probe's default)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--no-graphs", action="store_true", help="decode without CUDA graphs")
    parser.add_argument("--work", type=Path, help="where to build the models (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the models built under --work, and use a model "
                        "already there instead of building it again")
    args = parser.parse_args(argv)

    import torch

    from hfdoctor.probe.session import quiet_transformers

    quiet_transformers()
    device = "cuda:0" if args.device != "cpu" and torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name(0) if device != "cpu" else "CPU"
    say(f"device: {name}; torch {torch.__version__}; {time.strftime('%Y-%m-%d')}")
    bandwidth = copy_bandwidth(device, 2 * 2 ** 30 if device != "cpu" else 256 * 2 ** 20)
    say(f"copy bandwidth: {bandwidth / GB:.0f} GB/s (read + write of a large buffer)")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-probe-"))
    overrides = {k: v for k, v in (("num_hidden_layers", args.layers), ("hidden_size", args.hidden)) if v}
    try:
        for key in args.models:
            src, tokenizer_from = MODELS[key]
            dest = work / key
            if args.keep and (dest / "built.json").is_file():
                built = json.loads((dest / "built.json").read_text())
            else:
                built = random_model.build(UPSTREAM / src, dest, overrides,
                                           device="cuda" if device != "cpu" else "cpu",
                                           tokenizer_from=UPSTREAM / tokenizer_from if tokenizer_from else None)
                (dest / "built.json").write_text(json.dumps(built))
            config = json.loads((dest / "config.json").read_text())
            per_token = random_model.bytes_read_per_token(config, built["bytes_bf16"])
            floor_ms = 1000 * per_token / bandwidth
            say(f"{key}{' ' + str(overrides) if overrides else ''}: {built['params'] / 1e9:.2f}B parameters, "
                f"{built['bytes_bf16'] / GB:.1f} GB bf16, built in {built['build_s']} s on {built['device']}; "
                f"{per_token / GB:.2f} GB read a token: floor {floor_ms:.2f} ms a token")
            label = "without CUDA graphs" if args.no_graphs else "default"
            _, result, wall = run_probe_json(dest, args.device, args.max_new_tokens, not args.no_graphs)
            report(label, result, wall, floor_ms)
            if not args.keep:
                shutil.rmtree(dest, ignore_errors=True)  # the disk holds one model at a time
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
