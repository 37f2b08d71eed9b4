"""How long does the chat-template analysis take on real metadata (Qwen3-8B)?

In-process figures (median of several runs, after imports):

- analysis, cold: compile + ~30 renders of the corpus, no stored result; once in-process
  (the template is the registry's pinned canonical one, so it is trusted) and once in
  the bounded worker (the same text plus a space, so it is not trusted: fork, rlimits);
- analysis, shipped: read from upstream_templates/analyses/ (the canonical template with
  upstream special tokens comes precomputed, see hfdoctor/chat/store.py);
- template rules: TOK004 + TPL001..TPL013 on a fresh ModelRepo, analysis included (cold).

Fresh-process figures (imports included, median wall time):

- check: `hfdoctor check` (Qwen3-8B's template is canonical: the shipped analysis);
- check without template rules: `--ignore TPL,TOK004`;
- floor: parse the metadata JSON and load tokenizer.json (bench_check.py's floor).

Target (issue 3): analysis < 1 s; check stays within 1.5x the floor (bench_check.py).

    python bench/bench_template.py [MODEL_DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT.parent / "shared" / "upstream" / "Qwen--Qwen3-8B"

FLOOR = """
import json, sys
from pathlib import Path
from tokenizers import Tokenizer
d = Path(sys.argv[1])
for name in ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json"):
    if (d / name).exists():
        json.loads((d / name).read_text())
if (d / "chat_template.jinja").exists():
    (d / "chat_template.jinja").read_text()
Tokenizer.from_file(str(d / "tokenizer.json"))
"""


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def process_s(cmd: list[str], runs: int, env: dict[str, str]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            sys.exit(f"{cmd} failed: {proc.stderr[-2000:]}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", default=str(DEFAULT_MODEL))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    os.environ["HF_HUB_OFFLINE"] = "1"
    from hfdoctor.bounded import memo
    from hfdoctor.chat import analysis, render, store
    from hfdoctor.repo import ModelRepo
    from hfdoctor.lint.rules import ALL_RULES
    from hfdoctor.knowledge.upstream import Upstream

    repo = ModelRepo(args.model)
    text = repo.chat_template.text
    tokens = analysis.special_tokens_for_render(repo)

    def cold_trusted():
        memo.clear()
        analysis.run_analysis(text, tokens)

    def cold_worker():
        analysis.run_analysis(text + " ", tokens)

    def shipped():
        if store.load(text, tokens, False) is None:
            sys.exit("no shipped analysis for this template and these tokens")

    template_rules = [r for r in ALL_RULES if r.code.startswith("TPL") or r.code == "TOK004"]

    def rules_cold():
        real_load = store.load
        store.load = lambda *args: None  # force the analysis
        memo.clear()
        fresh = ModelRepo(args.model, upstream=Upstream((), use_cache=False, use_hub=False))
        fresh.vocab  # the vocabulary is shared with the tokenizer rules: not counted here
        start = time.perf_counter()
        for rule in template_rules:
            list(rule.check(fresh))
        store.load = real_load
        return time.perf_counter() - start

    rules_cold()  # warm the imports
    results = {
        "analysis, cold, in-process (trusted)": median_ms(cold_trusted, args.runs),
        "analysis, cold, bounded worker": median_ms(cold_worker, args.runs),
        "analysis, shipped (precomputed)": median_ms(shipped, args.runs),
        "template rules (TOK004+TPL), cold": statistics.median(rules_cold() for _ in range(args.runs)) * 1000,
    }
    print(f"model: {args.model}")
    for name, ms in results.items():
        print(f"{name:40s} {ms:8.1f} ms")
    worst = max(results["analysis, cold, in-process (trusted)"], results["analysis, cold, bounded worker"])
    print(f"analysis / target (1 s)                  = {worst / 1000:.3f}x")

    env = {"HF_HUB_OFFLINE": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    check = [sys.executable, "-m", "hfdoctor", "check", args.model]
    full = process_s(check, args.runs, env)
    without = process_s(check + ["--ignore", "TPL,TOK004"], args.runs, env)
    floor = process_s([sys.executable, "-c", FLOOR, args.model], args.runs, env)
    print(f"{'check':40s} {full:8.3f} s")
    print(f"{'check --ignore TPL,TOK004':40s} {without:8.3f} s")
    print(f"{'floor (parse + tokenizer.json)':40s} {floor:8.3f} s")
    print(f"template rules' share of check           = {(full - without) / full:.0%}")
    print(f"check / floor                            = {full / floor:.2f}x   (target <= 1.5x)")


if __name__ == "__main__":
    main()
