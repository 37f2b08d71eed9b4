"""Time and memory of `hfdoctor check` on small hostile inputs, each beside a benign input of the same size.

    python bench/bench_hostile.py                  # every input of tests/blowup.py
    python bench/bench_hostile.py NAME [NAME...]   # some of them
    python bench/bench_hostile.py --hostile-repos  # also the repositories of tests/hostile.py, timed alone

Each input is built in a temporary directory and checked by the command line in a fresh process
under tests/audit_run.py, which records the checking process's peak resident memory (VmHWM).
Printed side by side: seconds and peak MB on the hostile input and on its benign twin (the same
size and shape, without what provokes the blow-up), and their ratios. The promise is 45 s and
1 GB for any input: a ratio near 1 means the hostile input costs what its size costs. A run past
--wall seconds is stopped and shown as such.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import blowup  # noqa: E402
import hostile  # noqa: E402


def _run(case: hostile.Case, work: Path, wall: float, env: dict[str, str] | None = None) -> blowup.Measured:
    return blowup.measure(case, work / "audit.log", wall, env)


def _cells(run: blowup.Measured, wall: float) -> tuple[str, str]:
    if run.returncode is None:
        return f">{wall:.0f} s", "-"
    peak = f"{run.peak_bytes / 2**20:.0f} MB" if run.peak_bytes else "?"
    return f"{run.seconds:.1f} s" + ("" if run.returncode in (0, 1) else f" (exit {run.returncode})"), peak


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def bench_pairs(names: list[str], wall: float) -> None:
    header = f"{'input':28} {'hostile':>10} {'peak':>8}   {'benign':>10} {'peak':>8}   {'time':>7} {'memory':>7}"
    print(header)
    print("-" * len(header))
    for name in names:
        runs = []
        for benign in (False, True):
            with tempfile.TemporaryDirectory(prefix="hfdoctor-bench-") as tmp:
                case = blowup.build(name, Path(tmp) / "case", benign=benign)
                runs.append(_run(case, Path(tmp), wall))
        (hostile_s, hostile_peak), (benign_s, benign_peak) = (_cells(r, wall) for r in runs)
        done = [r for r in runs if r.returncode is not None]
        seconds = _ratio(runs[0].seconds, runs[1].seconds) if len(done) == 2 else "-"
        memory = _ratio(runs[0].peak_bytes, runs[1].peak_bytes) if len(done) == 2 else "-"
        print(f"{name:28} {hostile_s:>10} {hostile_peak:>8}   {benign_s:>10} {benign_peak:>8}   "
              f"{seconds:>7} {memory:>7}", flush=True)


def bench_hostile_repos(wall: float) -> None:
    """The repositories of issue 20 (tests/hostile.py), each timed alone with the default budget."""
    print(f"\n{'repository (tests/hostile.py)':34} {'time':>10} {'peak':>8}")
    for name in sorted(hostile.BUILDERS):
        with tempfile.TemporaryDirectory(prefix="hfdoctor-bench-") as tmp:
            case = hostile.build(name, Path(tmp) / "case")
            seconds, peak = _cells(_run(case, Path(tmp), wall), wall)
            if (Path(tmp) / "case").exists():
                hostile.remove_tree(Path(tmp) / "case")  # deeper than rmtree recurses (nested_directories)
        print(f"{name:34} {seconds:>10} {peak:>8}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"inputs to run (default: all of {', '.join(sorted(blowup.BUILDERS))})")
    parser.add_argument("--wall", type=float, default=300.0, help="stop a run after this many seconds")
    parser.add_argument("--hostile-repos", action="store_true", help="also time the repositories of tests/hostile.py")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(blowup.BUILDERS))
    if unknown:
        parser.error(f"no input called {', '.join(unknown)}")
    bench_pairs(args.names or sorted(blowup.BUILDERS), args.wall)
    if args.hostile_repos:
        bench_hostile_repos(args.wall)


if __name__ == "__main__":
    main()
