"""`fix` reaches its fixed point in one run, as ruff's --fix does, and keeps it through a SIGKILL.

The three-fault Qwen3-8B copy of issue 42 (chat template deleted, eos set to <|endoftext|> in
config.json and generation_config.json, a wrong base_model) took three runs: each fix revealed the
next. One run now fixes it in three passes, a second run changes nothing, and `--diff` shows the
whole result. A run killed at any write leaves each file old or new, and the next run ends where
one uninterrupted run ends.
"""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, UPSTREAM, run_cli
from hfdoctor.bounded import jsontext, memo
from hfdoctor.fix import plan as fix_plan
from hfdoctor.fix.plan import plan_fixes
from hfdoctor.lint.check import check_target
from test_fix import OFFLINE_UPSTREAM, fix_in_process, make_seed_replica, snapshot

sys.path.insert(0, str(ROOT / "tests" / "rules"))
from rule_case import load_cases, materialise, write_base  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_template_lookups():
    memo.clear()
    yield
    memo.clear()


def set_json(path: Path, pointer: str, text: bytes) -> None:
    data = path.read_bytes()
    start, end = jsontext.locate(data, pointer)
    path.write_bytes(data[:start] + text + data[end:])


def three_faults(dest: Path) -> Path:
    """Qwen3-8B with no chat template, eos <|endoftext|> (151643) in config.json and
    generation_config.json, and a card naming Llama 3.1 as its base."""
    repo = make_seed_replica(dest)
    for name in ("generation_config.json", "config.json"):
        set_json(repo / name, "/eos_token_id", b"151643")
    return repo


def contents(root: Path) -> dict[str, bytes]:
    return {rel: data for rel, (data, _, _) in snapshot(root).items()}


@pytest.fixture(scope="module")
def fixed_once(tmp_path_factory) -> dict[str, bytes]:
    """The three-fault copy after one uninterrupted run: what every other way must end at."""
    repo = three_faults(tmp_path_factory.mktemp("reference") / "qwen3")
    code, out = fix_in_process(repo)
    assert code == 0, out
    return contents(repo)


def test_one_run_fixes_the_three_faults_in_three_passes(tmp_path, fixed_once):
    repo = three_faults(tmp_path / "qwen3")
    plan = plan_fixes(repo, upstream=OFFLINE_UPSTREAM)
    assert [[f.code for f in fixed] for fixed in plan.passes] == [["CARD001", "TPL001"], ["TOK004"], ["CFG004"]]
    assert [f.code for f in plan.revealed] == ["TOK004", "CFG004"] and plan.unfinished == []
    assert sorted(plan.changed) == ["README.md", "config.json", "generation_config.json", "tokenizer_config.json"]
    assert not [f for f in plan.after.findings if f.fix is not None]

    # --diff shows the whole result: applied with git apply, it is what one run writes.
    preview = run_cli("fix", str(repo), "--diff", "--upstream", str(UPSTREAM))
    assert preview.returncode == 0, preview.stderr
    assert "(3 passes)" in preview.stderr
    subprocess.run(["git", "apply", "-p1"], input=preview.stdout, text=True, check=True, cwd=repo)
    assert contents(repo) == fixed_once

    before = snapshot(repo)
    code, out = fix_in_process(repo)
    assert code == 0 and "nothing to fix" in out, out
    assert snapshot(repo) == before


def test_a_fix_that_keeps_revealing_fixes_is_named_when_the_passes_run_out(tmp_path, monkeypatch):
    monkeypatch.setattr(fix_plan, "MAX_PASSES", 1)
    repo = three_faults(tmp_path / "qwen3")
    code, out = fix_in_process(repo)
    assert code == 1
    assert "still fixable after 1 passes, not fixed" in out and "TOK004 eos-not-end-of-turn" in out


# What the writing child does: write the plan, killing itself (SIGKILL: no cleanup runs) at the
# n-th step, a step being each temporary file synced and each rename.
KILLED_WRITER = textwrap.dedent("""
    import os, pickle, signal, sys
    from pathlib import Path
    from hfdoctor.fix.write import write_changes
    root, changed, original, kill_at = pickle.loads(sys.stdin.buffer.read())
    steps = []
    def step(real):
        def counted(*args):
            steps.append(real.__name__)
            if len(steps) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args)
        return counted
    os.replace, os.fsync = step(os.replace), step(os.fsync)
    write_changes(Path(root), changed, original)
""")


def test_killed_at_each_write_the_next_run_ends_where_one_run_ends(tmp_path, fixed_once):
    """Four files: a synced temporary file each, then four renames, each followed by a synced
    directory. Killed at each step (all but the last), every file is old or new; then one more
    run ends at the uninterrupted run's bytes, stale temporaries gone."""
    template = three_faults(tmp_path / "template")
    old = contents(template)
    plan = plan_fixes(template, upstream=OFFLINE_UPSTREAM)
    states = set()
    for kill_at in range(1, 3 * len(plan.changed)):
        repo = Path(shutil.copytree(template, tmp_path / f"killed-{kill_at}"))
        payload = pickle.dumps((str(repo), plan.changed, plan.original, kill_at))
        proc = subprocess.run([sys.executable, "-c", KILLED_WRITER], input=payload, capture_output=True)
        assert proc.returncode == -9, proc.stderr.decode()[-2000:]
        now = contents(repo)
        temporaries = sorted(rel for rel in now if rel.endswith(".hfdoctor.tmp"))
        files = {rel: data for rel, data in now.items() if rel not in temporaries}
        assert set(files) == set(old)
        assert all(files[rel] in (old[rel], fixed_once[rel]) for rel in files), kill_at
        state = tuple(sorted(rel for rel in files if files[rel] != old[rel]))
        if (state, bool(temporaries)) in states:
            continue  # the same files new, as another kill point left them: the same next run
        states.add((state, bool(temporaries)))
        code, out = fix_in_process(repo)
        assert code == 0, out
        assert contents(repo) == fixed_once, (kill_at, state, temporaries)
    assert len(states) >= len(plan.changed)  # nothing new, some new, and every prefix of the renames


CASES = [case for case in load_cases(ROOT / "tests" / "rules") if any(e.get("fix") for e in case.expect)]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_fixable_rule_case_is_fixed_in_one_run(case, tmp_path):
    """Each rule case with a fix, fixed by one run of `fix` (every rule): nothing fixable is left,
    and a second run plans nothing."""
    folder = materialise(case, write_base(case.base, tmp_path / "base"), tmp_path / "case")
    code, out = fix_in_process(folder)
    assert "still fixable" not in out, out
    plan = plan_fixes(folder, upstream=OFFLINE_UPSTREAM)
    assert plan.applied == [] and plan.changed == {}, [f.code for f in plan.applied]
    left = check_target(str(folder), upstream=OFFLINE_UPSTREAM)
    assert not [f for f in left.findings if f.fix is not None and f.fix.applicability.value == "safe"]
