"""How much does `hfdoctor check` cost on real metadata, next to the floor and to transformers?

Each contender runs as a fresh process (imports count: that is what a pre-push hook costs a
user), several times, interleaved so that load on the machine hits all of them alike. For
each run the CPU time (user + system, the process and every child it waits for) and the
peak resident memory come from the kernel (os.wait4), so the figures hardly depend on
what else the machine is doing; wall time is printed too. The medians, then the ratios:

- floor: parse the same JSON files and the card's YAML, and load tokenizer.json with
  `tokenizers` (the least any checker must do);
- transformers: AutoConfig + AutoTokenizer + apply_chat_template (what a user does by
  hand today to see whether the template renders).

Targets (issue 22): CPU <= 0.15x transformers with the same findings, peak memory <= 250 MB.

    python bench/bench_check.py [MODEL_DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT.parent / "shared" / "upstream" / "Qwen--Qwen3-8B"

FLOOR = """
import json, sys, yaml
from pathlib import Path
from tokenizers import Tokenizer
d = Path(sys.argv[1])
for name in ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.json"):
    if (d / name).exists():
        json.loads((d / name).read_text())
if (d / "chat_template.jinja").exists():
    (d / "chat_template.jinja").read_text()
text = (d / "README.md").read_text() if (d / "README.md").exists() else ""
if text.startswith("---"):
    yaml.safe_load(text.split("---")[1])
Tokenizer.from_file(str(d / "tokenizer.json"))
"""

TRANSFORMERS = """
import sys
from transformers import AutoConfig, AutoTokenizer
d = sys.argv[1]
AutoConfig.from_pretrained(d)
tok = AutoTokenizer.from_pretrained(d)
tok.apply_chat_template([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}], tokenize=False)
"""


ENV = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}


def run(cmd: list[str]) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of one run of `cmd`: the CPU is the kernel's
    account of the child and everything it waited for (RUSAGE_CHILDREN, taken as the
    difference around this run)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd[:3]} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, proc.stdout.decode()


def peak_rss(cmd: list[str]) -> float:
    """Peak resident memory of one run, in MB, from a process that runs nothing else."""
    probe = ("import resource, subprocess, sys\n"
             "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True,
                         env=ENV).stdout
    return int(out.strip().splitlines()[-1]) / 1024


def findings(out: str) -> list[tuple[str, str, str | None]]:
    report = json.loads(out)
    return sorted((f["rule"], f["severity"], f["file"]) for f in report["findings"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    model, py = str(args.model), sys.executable
    contenders = {"hfdoctor check": [py, "-m", "hfdoctor", "check", model, "--format", "json"],
                  "floor (parse+tok)": [py, "-c", FLOOR, model],
                  "transformers way": [py, "-c", TRANSFORMERS, model]}
    run(contenders["hfdoctor check"])  # once first: byte-code caches written, files in the page cache
    cpu: dict[str, list[float]] = {k: [] for k in contenders}
    wall: dict[str, list[float]] = {k: [] for k in contenders}
    outputs = []
    for _ in range(args.runs):
        for name, cmd in contenders.items():
            c, w, out = run(cmd)
            cpu[name].append(c)
            wall[name].append(w)
            if name == "hfdoctor check":
                outputs.append(findings(out))
    print(f"model: {model}  ({args.runs} runs each, interleaved; medians)")
    for name, cmd in contenders.items():
        print(f"{name:18} cpu {statistics.median(cpu[name]):6.3f} s   wall {statistics.median(wall[name]):6.3f} s   "
              f"peak {peak_rss(cmd):6.0f} MB")
    ours, hf, floor = (statistics.median(cpu[k]) for k in ("hfdoctor check", "transformers way", "floor (parse+tok)"))
    print(f"check / transformers (cpu) = {ours / hf:5.2f}x   (target <= 0.15x)")
    print(f"check / floor (cpu)        = {ours / floor:5.2f}x")
    print(f"findings identical across runs: {all(o == outputs[0] for o in outputs)} ({len(outputs[0])} findings)")


if __name__ == "__main__":
    main()
