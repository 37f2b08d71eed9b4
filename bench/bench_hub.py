"""Checking a catalog of Hub repositories: wall time at --jobs 1 and 2, and bytes per repo.

Serves 50 repositories built from ../shared/upstream (their real metadata; no weights, which
`check` would read as headers only) on a Hub on 127.0.0.1 (tests/hub_server.py), then runs
`hfdoctor check --from LIST --format jsonl` against it, as a user would, at --jobs 1 and 2.

    python bench/bench_hub.py [--repos 50] [--upstream ../shared/upstream]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hub_server import FakeHub, HubRepo, folder_files  # noqa: E402


def catalog(upstream: Path, n: int) -> dict[str, HubRepo]:
    folders = [f for f in sorted(upstream.iterdir()) if f.is_dir() and f.name != "gguf-vocab"]
    repos = {}
    for i in range(n):
        folder = folders[i % len(folders)]
        files = folder_files(folder, skip=("history",))
        repos[f"bench{i // len(folders)}/{folder.name.replace('--', '-')}"] = HubRepo(files)
    return repos


def run(hub: FakeHub, targets: Path, jobs: int) -> tuple[float, list[dict]]:
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint}
    env.pop("HF_HUB_OFFLINE", None)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", "check", "--from", str(targets), "--jobs", str(jobs),
                           "--format", "jsonl"], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    return wall, [json.loads(line) for line in proc.stdout.splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=int, default=50)
    parser.add_argument("--upstream", type=Path, default=ROOT.parent / "shared" / "upstream")
    args = parser.parse_args()
    repos = catalog(args.upstream, args.repos)
    hub = FakeHub(repos).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            targets = Path(tmp) / "targets.txt"
            targets.write_text("\n".join(repos) + "\n")
            rows = []
            for jobs in (1, 2):
                hub.sent.clear()
                wall, reports = run(hub, targets, jobs)
                errors = sum("error" in r for r in reports)
                sent = sum(hub.sent.values())
                rows.append((jobs, wall, len(reports), errors, sent))
    finally:
        hub.stop()
    print(f"{args.repos} repositories on a Hub on 127.0.0.1 (metadata of ../shared/upstream folders)")
    print(f"{'jobs':>4} {'wall s':>7} {'repos/s':>8} {'reports':>8} {'errors':>6} {'MB sent':>8} {'KB/repo':>8}")
    for jobs, wall, n, errors, sent in rows:
        print(f"{jobs:>4} {wall:>7.1f} {n / wall:>8.2f} {n:>8} {errors:>6} {sent / 1e6:>8.1f} {sent / 1e3 / n:>8.0f}")
    print(f"speed-up at --jobs 2: {rows[0][1] / rows[1][1]:.2f}x")


if __name__ == "__main__":
    main()
