"""Does having torch installed slow `hfdoctor check` and a hooked `git push` down?

Fine-tuners always have torch (and transformers) installed. For a checkpoint whose config the
shipped layouts table lacks, hfdoctor used to build the model skeleton with transformers (8-15 s,
mostly importing torch). This bench runs, side by side in one run and interleaved so that load on
the machine hits every contender alike, each as a fresh process:

- check, torch installed / torch absent: `hfdoctor check CHECKPOINT` (default: fixtures/tiny-
  thinker, which is in no shipped table), once as installed, once in an interpreter where torch
  and transformers cannot be imported (a sitecustomize.py on PYTHONPATH whose sys.meta_path
  finder refuses them: what a virtual environment without the probe extra sees);
- hooked push: a git repository holding the checkpoint, `hfdoctor hook install`, a commit
  pushed to a local bare remote (`git push`, which runs the pre-push hook's check of the pushed
  commit), with torch installed and absent;
- build once, then cached: the same checkpoint with a config key no family of
  hfdoctor.weights.computed reads, which only transformers can lay out: the first check builds it
  in a bounded child (the torch import), the next ones read the user's cache.

For each run the CPU time (user + system, the process and every child it waited for) comes from
the kernel, and the wall time is printed beside it. Medians, then the ratios. Targets (issue 42):
check with torch <= 1.5x check without it; a hooked push of a small repository <= 2 s.

    python bench/bench_torch.py [CHECKPOINT] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "fixtures" / "tiny-thinker"

BLOCKER = '''
import sys


class _NoTorch:
    """A virtual environment without torch and transformers, for bench/bench_torch.py."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
'''


def run(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float, subprocess.CompletedProcess]:
    """(CPU seconds of the process and its children, wall seconds, the finished process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, proc


def git(repo: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost",
                           "-c", "commit.gpgsign=false", *args], check=True, capture_output=True, env=env)


class PushedRepo:
    """A git repository with the checkpoint and hfdoctor's pre-push hook, and a bare remote."""

    def __init__(self, base: Path, checkpoint: Path, env: dict[str, str]):
        self.repo, self.remote, self.env, self.count = base / "repo", base / "remote.git", env, 0
        subprocess.run(["git", "init", "-q", "--bare", str(self.remote)], check=True, env=env)
        shutil.copytree(checkpoint, self.repo)
        git(self.repo, "init", "-q", env=env)
        git(self.repo, "add", "-A", env=env)
        git(self.repo, "commit", "-q", "-m", "checkpoint", env=env)
        git(self.repo, "remote", "add", "origin", str(self.remote), env=env)
        git(self.repo, "push", "-q", "--no-verify", "origin", "HEAD:refs/heads/main", env=env)
        subprocess.run([sys.executable, "-m", "hfdoctor", "hook", "install"], cwd=self.repo, check=True,
                       capture_output=True, env=env)

    def push(self, env: dict[str, str]) -> tuple[float, float]:
        """A one-line change to the card, committed and pushed through the hook."""
        self.count += 1
        with open(self.repo / "README.md", "a", encoding="utf-8") as card:
            card.write(f"\nrevision {self.count}\n")
        git(self.repo, "commit", "-q", "-am", f"revision {self.count}", env=env)
        cpu, wall, proc = run(["git", "push", "-q", "origin", "HEAD:refs/heads/main"], env, cwd=self.repo)
        if proc.returncode != 0:
            raise SystemExit(f"the hooked push failed:\n{proc.stderr.decode()[-3000:]}")
        return cpu, wall


def findings(proc: subprocess.CompletedProcess) -> list[tuple[str, str]]:
    if proc.returncode not in (0, 1):
        raise SystemExit(f"check failed ({proc.returncode}): {proc.stderr.decode()[-3000:]}")
    return sorted((f["rule"], f["severity"]) for f in json.loads(proc.stdout)["findings"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hfdoctor-bench-torch-"))
    try:
        blocker = work / "no-torch"
        blocker.mkdir()
        (blocker / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
        base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work / "home"),
                    "HF_HUB_OFFLINE": "1", "HFDOCTOR_CACHE_DIR": str(work / "cache"), "GIT_TERMINAL_PROMPT": "0"}
        envs = {"torch installed": {**base_env, "PYTHONPATH": str(ROOT)},
                "torch absent": {**base_env, "PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"}}
        py, target = sys.executable, str(args.checkpoint)
        check = [py, "-m", "hfdoctor", "check", target, "--format", "json"]
        assert run([py, "-c", "import torch"], envs["torch absent"])[2].returncode != 0, "the blocker does not block"

        odd = work / "odd-config"
        shutil.copytree(args.checkpoint, odd)
        config = json.loads((odd / "config.json").read_text(encoding="utf-8"))
        (odd / "config.json").write_text(json.dumps({**config, "bench_router_mode": "dense"}, indent=2),
                                         encoding="utf-8")
        # The first build imports torch and transformers: on a loaded machine that can outlast the
        # default 30 s budget of a check (then nothing is cached, and the next check tries again).
        cold_cpu, cold_wall, cold = run([py, "-m", "hfdoctor", "check", str(odd), "--format", "json"],
                                        {**envs["torch installed"], "HFDOCTOR_BUDGET_SECONDS": "300"})
        report = json.loads(cold.stdout)
        built = report.get("weights", {}).get("verified_against")

        pushed = PushedRepo(work, args.checkpoint, envs["torch installed"])
        for env in envs.values():  # once first: byte-code caches written, files in the page cache
            run(check, env)
        cpu: dict[str, list[float]] = {}
        wall: dict[str, list[float]] = {}
        outputs: dict[str, list] = {name: [] for name in envs}

        def record(name: str, c: float, w: float) -> None:
            cpu.setdefault(name, []).append(c)
            wall.setdefault(name, []).append(w)

        for _ in range(args.runs):
            for name, env in envs.items():
                c, w, proc = run(check, env)
                record(f"check, {name}", c, w)
                outputs[name].append(findings(proc))
                record(f"hooked push, {name}", *pushed.push(env))
            c, w, _ = run([py, "-m", "hfdoctor", "check", str(odd), "--format", "json"], envs["torch installed"])
            record("check, config only transformers reads, cached", c, w)

        print(f"checkpoint: {target}  ({args.runs} runs each, interleaved; medians; CPU = user + system of the process "
              "and its children)")
        for name in cpu:
            print(f"{name:50} cpu {statistics.median(cpu[name]):6.3f} s   wall {statistics.median(wall[name]):6.3f} s")
        print(f"{'check, config only transformers reads, first run':50} cpu {cold_cpu:6.3f} s   wall {cold_wall:6.3f} s"
              f"   (built: {built})")
        ratio = statistics.median(cpu["check, torch installed"]) / statistics.median(cpu["check, torch absent"])
        wall_ratio = statistics.median(wall["check, torch installed"]) / statistics.median(wall["check, torch absent"])
        print(f"check with torch / without (cpu)  = {ratio:5.2f}x   (wall {wall_ratio:5.2f}x; target <= 1.5x)")
        push = statistics.median(wall["hooked push, torch installed"])
        print(f"hooked push with torch (wall)     = {push:5.2f} s   (target <= 2 s)")
        same = all(o == outputs["torch installed"][0] for out in outputs.values() for o in out)
        print(f"same findings with and without torch: {same} ({len(outputs['torch installed'][0])} findings)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
