"""How fast is `hfdoctor check` on real metadata, next to the floor and to transformers?

Each contender runs as a fresh process (imports count: that is what a pre-push hook
costs a user), several times; the median wall time is reported, then the ratios:

- floor: parse the same JSON files and the card's YAML, and load tokenizer.json with
  `tokenizers` (the least any checker must do);
- transformers: AutoConfig + AutoTokenizer + apply_chat_template (what a user does by
  hand today to see whether the template renders).

Targets (issue 2): check within 1.5x the floor, and under 0.4x transformers.

    python bench/bench_check.py [MODEL_DIR] [--runs N]
"""

from __future__ import annotations

import argparse
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


def timed(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{cmd[:3]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    model = str(args.model)
    py = sys.executable
    check = timed([py, "-m", "hfdoctor", "check", model, "--format", "json"], args.runs)
    floor = timed([py, "-c", FLOOR, model], args.runs)
    hf = timed([py, "-c", TRANSFORMERS, model], max(2, args.runs // 2))
    print(f"model: {model}")
    print(f"hfdoctor check     {check:7.3f} s")
    print(f"floor (parse+tok)  {floor:7.3f} s")
    print(f"transformers way   {hf:7.3f} s")
    print(f"check / floor        = {check / floor:5.2f}x   (target <= 1.5x)")
    print(f"check / transformers = {check / hf:5.2f}x   (target <  0.4x)")


if __name__ == "__main__":
    main()
