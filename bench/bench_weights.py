"""Benchmark: `hfdoctor check` on a full-size sparse Qwen3-8B checkpoint.

Builds Qwen3-8B as the real upstream ships it (metadata from ../shared/upstream, five
safetensors shards laid out like the real model.safetensors.index.json, 16.4 GB of
tensor data as sparse holes), then runs, each in a fresh process:

  floor           python reading the same metadata files and the safetensors headers
  check-meta      hfdoctor check on the metadata only (the index, no shards)
  check-cold      hfdoctor check with the weights: the layout config.json declares comes
                  from the shipped table (upstream_templates/layouts.json), no torch
  check-resaved   the same with the config a fine-tune re-saves (other transformers
                  version, dtype, rope_theta, context length, initializer_range, an
                  explicit layer_types): the table still holds its layout, no torch
  check-unshipped the same with a config the table does not hold (a linear rope_scaling:
                  no shape, but kept in the key): transformers builds it on the meta device
  transformers    what a user does today: AutoConfig + AutoTokenizer + apply_chat_template
                  + instantiating the model on the meta device

Every run is a fresh process with HOME and XDG_CACHE_HOME pointing at a new empty
directory, so nothing a previous run left in a user cache can help it (`check` writes no
cache of its own; the bench counts the files a run leaves there anyway). The page cache
is warm: wall times are those of a second invocation, not of a just-booted machine.

Bytes come from /proc/<pid>/io of the child, read at its exit (waitid WNOWAIT):
rchar is every byte read()/pread() returned, page cache and sparse holes included, so
reading tensor data would show here even though holes cost no disk; read_bytes is what
reached the block device, ~0 once the page cache is warm. rchar also counts the Python
modules the process imports (.py/.pyc reads), which is why importing torch shows.

    python bench/bench_weights.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from weights_util import model_tensors, run_measured, upstream_weight_map, write_checkpoint  # noqa: E402

UPSTREAM = Path(os.environ.get("HFDOCTOR_TEST_UPSTREAM", ROOT.parent / "shared" / "upstream")).resolve()
QWEN3 = UPSTREAM / "Qwen--Qwen3-8B"
MB = 1024 * 1024

FLOOR = """
import json, struct, sys
from pathlib import Path
root = Path(sys.argv[1])
for p in sorted(root.iterdir()):
    if p.suffix == ".json":
        json.loads(p.read_text())
    elif p.suffix == ".safetensors":
        with open(p, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            json.loads(f.read(n))
    elif p.is_file():
        p.read_bytes()
"""

TRANSFORMERS = """
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
path = sys.argv[1]
config = AutoConfig.from_pretrained(path)
tokenizer = AutoTokenizer.from_pretrained(path)
tokenizer.apply_chat_template([{"role": "user", "content": "Hello"}], tokenize=False, add_generation_prompt=True)
with torch.device("meta"):
    AutoModelForCausalLM.from_config(config)
"""


CHECKS = ("check-cold", "check-resaved", "check-unshipped")


def _variant(full: Path, dest: Path, **changes) -> Path:
    shutil.copytree(full, dest)
    config = json.loads((dest / "config.json").read_text())
    config.pop("torch_dtype")
    (dest / "config.json").write_text(json.dumps({**config, **changes}, indent=2))
    return dest


def build(workdir: Path) -> tuple[Path, Path, Path, Path]:
    full, meta = workdir / "Qwen3-8B", workdir / "Qwen3-8B-metadata"
    shutil.copytree(QWEN3, full)
    shutil.copytree(QWEN3, meta)
    write_checkpoint(full, model_tensors(QWEN3 / "config.json"), upstream_weight_map(QWEN3))
    layers = json.loads((full / "config.json").read_text())["num_hidden_layers"]
    resaved = _variant(full, workdir / "Qwen3-8B-resaved", transformers_version="4.57.1", dtype="bfloat16",
                       rope_theta=5_000_000, max_position_embeddings=131072, initializer_range=0.01,
                       layer_types=["full_attention"] * layers)
    unshipped = _variant(full, workdir / "Qwen3-8B-unshipped", rope_scaling={"rope_type": "linear", "factor": 2.0})
    return full, meta, resaved, unshipped


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())


def measure(name: str, cmd: list[str], env: dict[str, str], home: Path, runs: int) -> dict:
    """Median wall of `runs` fresh processes, each with an empty HOME; io of the last one."""
    walls, counters, left = [], {}, []
    for _ in range(runs):
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir()
        start = time.perf_counter()
        proc, counters = run_measured(cmd, env)
        walls.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        left = files_under(home)
    return {"name": name, "wall": statistics.median(walls), "rchar": counters["rchar"],
            "read_bytes": counters["read_bytes"], "out": proc.stdout, "home_files": left}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hfdoctor-bench-") as tmp:
        workdir = Path(tmp)
        full, meta, resaved, unshipped = build(workdir)
        home = workdir / "home"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
        for variable in ("HFDOCTOR_CACHE_DIR", "HFDOCTOR_NO_CACHE", "HF_HOME", "HF_HUB_CACHE"):
            env.pop(variable, None)
        check = [sys.executable, "-m", "hfdoctor", "check", "--format", "json"]
        shards = sorted(full.glob("*.safetensors"))
        apparent = sum(p.stat().st_size for p in shards)
        on_disk = sum(p.stat().st_blocks * 512 for p in shards)
        metadata = sum(p.stat().st_size for p in full.iterdir() if p.suffix != ".safetensors")
        headers = sum(8 + int.from_bytes(p.open("rb").read(8), "little") for p in shards)
        print(f"checkpoint: {len(shards)} shards, {apparent / 1e9:.2f} GB apparent, {on_disk / MB:.2f} MB on disk; "
              f"metadata files {metadata / MB:.2f} MB, safetensors headers {headers / 1024:.0f} KB")

        results = [
            measure("floor", [sys.executable, "-c", FLOOR, str(full)], env, home, args.runs),
            measure("check-meta", [*check, str(meta)], env, home, args.runs),
            measure("check-cold", [*check, str(full)], env, home, args.runs),
            measure("check-resaved", [*check, str(resaved)], env, home, args.runs),
            measure("check-unshipped", [*check, str(unshipped)], env, home, args.runs),
            measure("transformers", [sys.executable, "-c", TRANSFORMERS, str(full)], env, home, args.runs),
        ]
        by = {r["name"]: r for r in results}
        for name in CHECKS:
            report = json.loads(by[name]["out"])
            rules = sorted({f["rule"] for f in report["findings"]})
            print(f"{name}: findings {rules or 'none'}; weights: {report.get('weights')}")
        print(f"\n{'run':<16}{'wall s':>8}{'rchar MB':>11}{'read_bytes MB':>15}  files left in HOME")
        for r in results:
            print(f"{r['name']:<16}{r['wall']:>8.2f}{r['rchar'] / MB:>11.1f}{r['read_bytes'] / MB:>15.1f}"
                  f"  {len(r['home_files'])} {r['home_files'][:2] if r['home_files'] else ''}")
        base = by["transformers"]
        print("\nratios (lower is better)")
        for name in CHECKS:
            r = by[name]
            print(f"  {name} / transformers: wall {r['wall'] / base['wall']:.2f}x, rchar {r['rchar'] / base['rchar']:.2f}x")
            print(f"  {name} / floor:        wall {r['wall'] / by['floor']['wall']:.2f}x")
        for name in CHECKS:
            beyond_meta = by[name]["rchar"] - by["check-meta"]["rchar"]
            print(f"  {name}: read beyond the metadata-only check {beyond_meta / MB:.1f} MB "
                  f"(target < 64 MB), of {apparent / MB:,.0f} MB of tensor data; wall {by[name]['wall']:.2f} s (target < 2 s)")


if __name__ == "__main__":
    main()
