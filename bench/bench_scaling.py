"""How does `hfdoctor check` grow with its input? CPU time as each dimension doubles.

Each row builds a synthetic repository of growing size in one dimension (everything else
fixed and small), runs `python -m hfdoctor check DIR --format json` as a fresh process, and
reads its CPU time (user + system, children included) from the kernel (os.wait4). The
"per unit" column is (cpu - cpu at the smallest size) / (units added): flat means linear,
growing means worse than linear.

- vocabulary: tokenizer.json with 32k .. 262k entries (Gemma 3's size);
- files: a repository of 125 .. 1,000 small files;
- findings: 50 .. 400 pickle files that each import os.system (one finding each);
- templates: 10 .. 80 named templates in additional_chat_templates/.

    python bench/bench_scaling.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "vocab_size": 1000}


class Payload:
    def __reduce__(self):
        return (os.system, ("true",))


def base(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))


def vocabulary(folder: Path, n: int) -> int:
    base(folder)
    vocab = {f"tok{i}": i for i in range(n)}
    tokenizer = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
                 "post_processor": None, "decoder": None,
                 "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "tok0"}}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "tok1", "bos_token": "tok2"}))
    return n


def files(folder: Path, n: int) -> int:
    base(folder)
    for i in range(n):
        (folder / f"part{i // 100}" / f"notes{i}.txt").parent.mkdir(exist_ok=True)
        (folder / f"part{i // 100}" / f"notes{i}.txt").write_text(f"note {i}\n")
    return n


def findings(folder: Path, n: int) -> int:
    base(folder)
    data = pickle.dumps(Payload(), protocol=2)
    for i in range(n):
        (folder / f"state{i}.pkl").write_bytes(data + bytes([i % 256]))  # distinct content: scanned each
    return n


def templates(folder: Path, n: int) -> int:
    base(folder)
    (folder / "additional_chat_templates").mkdir()
    for i in range(n):
        (folder / "additional_chat_templates" / f"t{i}.jinja").write_text(
            "{% for m in messages %}<|" + str(i) + "|>{{ m.role }}: {{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
    return n


DIMENSIONS = {
    "vocabulary": (vocabulary, [32_768, 65_536, 131_072, 262_144]),
    "files": (files, [125, 250, 500, 1000]),
    "findings": (findings, [50, 100, 200, 400]),
    "templates": (templates, [10, 20, 40, 80]),
}


def cpu_of(folder: Path) -> float:
    proc = subprocess.Popen([sys.executable, "-m", "hfdoctor", "check", str(folder), "--format", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"{'dimension':<11} {'size':>8} {'cpu s':>7} {'per unit (ms)':>14}")
    with tempfile.TemporaryDirectory() as scratch:
        for name, (build, sizes) in DIMENSIONS.items():
            first = None
            for size in sizes:
                folder = Path(scratch) / f"{name}-{size}"
                build(folder, size)
                cpu = statistics.median(cpu_of(folder) for _ in range(args.runs))
                if first is None:
                    first = (size, cpu)
                    per = "-"
                else:
                    per = f"{1000 * (cpu - first[1]) / (size - first[0]):.3f}"
                print(f"{name:<11} {size:>8} {cpu:>7.2f} {per:>14}", flush=True)


if __name__ == "__main__":
    main()
