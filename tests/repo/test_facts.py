"""One check, one context: a repository's facts, the content memos, the sections, the entry point.

- what a check derives from a repository lives in `repo.facts` (hfdoctor/repo/facts.py), computed
  once; nothing else is set on a ModelRepo from outside, and no module keeps a table per repository;
- content memos are bounded, cleared by one call, and never hold an exception;
- the report's sections come from the check, so `--select` does not drop them.
"""

from __future__ import annotations

import ast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import ROOT
from hfdoctor import lineage
from hfdoctor.bounded import memo
from hfdoctor.findings import Report
from hfdoctor.lint.check import check_target
from hfdoctor.repo import ModelRepo
from hfdoctor.repo.facts import fact

PACKAGE = ROOT / "hfdoctor"
UPSTREAM_QWEN3 = ROOT.parent / "shared" / "upstream" / "Qwen--Qwen3-8B"

calls: list[str] = []


@fact
def _counted(repo: ModelRepo) -> str:
    calls.append(repo.source.label)
    return f"fact of {repo.source.label}"


def test_a_fact_is_computed_once_per_repository(tmp_path):
    calls.clear()
    first, second = ModelRepo(tmp_path), ModelRepo(tmp_path)
    assert _counted(first) is _counted(first) and len(calls) == 1
    _counted(second)  # another repository object: its own facts
    assert len(calls) == 2
    assert any(name.endswith("_counted") for name in first.facts.known())


def test_a_fact_that_raises_is_not_kept(tmp_path):
    attempts: list[int] = []

    def flaky(repo: ModelRepo) -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("transient")
        return len(attempts)

    repo = ModelRepo(tmp_path)
    with pytest.raises(OSError):
        repo.facts.get(flaky)
    assert repo.facts.peek(flaky) is None
    assert repo.facts.get(flaky) == 2 and repo.facts.get(flaky) == 2


def test_a_fact_that_asks_for_itself_is_a_bug_said_at_once(tmp_path):
    def loop(repo: ModelRepo) -> int:
        return repo.facts.get(loop)

    repo = ModelRepo(tmp_path)
    with pytest.raises(RuntimeError, match="asked for itself"):
        repo.facts.get(loop)


def test_lineage_is_a_fact_of_the_repository():
    repo = ModelRepo(UPSTREAM_QWEN3)
    assert lineage.detect(repo) is lineage.detect(repo)
    assert "hfdoctor.lineage.detect" in repo.facts.known()


def _modules() -> list[tuple[str, ast.AST]]:
    return [(str(p.relative_to(ROOT)), ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(PACKAGE.rglob("*.py"))]


def test_nothing_is_set_on_a_repository_from_outside():
    """`repo.x = ...` belongs to ModelRepo itself; a module that needs to keep something about a
    repository declares a fact (no `# type: ignore[attr-defined]` on ModelRepo)."""
    offenders = []
    for rel, tree in _modules():
        if rel.startswith("hfdoctor/repo/"):
            continue
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "repo":
                    offenders.append(f"{rel}:{node.lineno} repo.{target.attr}")
    assert offenders == []


def test_no_module_keeps_a_table_per_repository():
    """No WeakKeyDictionary (or any dict) keyed by repositories at module level."""
    offenders = [rel for rel, tree in _modules() for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and node.attr in ("WeakKeyDictionary", "WeakValueDictionary")]
    assert offenders == []


def test_content_memos_are_bounded_and_cleared_by_one_call():
    table = memo.memo("test: squares", 3)
    for n in range(10):
        assert table.lookup(n, lambda n=n: n * n) == n * n
    assert len(table) == 3 and 9 in table and 0 not in table  # the least recently used went first
    assert memo.sizes()["test: squares"] == 3
    memo.clear()
    assert len(table) == 0 and all(size == 0 for size in memo.sizes().values())


def test_a_memo_never_holds_an_exception():
    table = memo.memo("test: failures", 4)
    with pytest.raises(TypeError, match="exception"):
        table.put("key", ValueError("kept?"))
    tries: list[int] = []

    def failing() -> int:
        tries.append(1)
        raise ValueError("not kept")

    for _ in range(2):
        with pytest.raises(ValueError):
            table.lookup("other", failing)
    assert len(tries) == 2 and "other" not in table


@given(st.lists(st.tuples(st.integers(0, 20), st.integers()), max_size=60), st.integers(1, 8))
def test_a_memo_keeps_the_most_recently_used(operations, bound):
    table: memo.Memo[int, int] = memo.Memo("property", bound)
    recent: list[int] = []
    for key, value in operations:
        table.put(key, value)
        recent = [k for k in recent if k != key] + [key]
    assert len(table) == min(bound, len(recent))
    assert all(key in table for key in recent[-bound:])




def test_a_memo_bounded_in_bytes_lets_the_oldest_go_past_them():
    """Template analyses can hold megabytes each: a catalog brought one per repository, and 64 entries
    held gigabytes. A memo given max_bytes weighs each value once, when it is put."""
    table: memo.Memo[str, str] = memo.Memo("test: weighed", 64, max_bytes=10, weigh=len)
    for key in ("a", "b", "c"):
        table.put(key, key * 4)  # 4 bytes each
    assert "a" not in table and "b" in table and "c" in table and table.held_bytes == 8
    table.put("b", "b" * 6)  # weighed again: 6 + 4
    assert table.held_bytes == 10 and "c" in table
    table.put("huge", "x" * 11)  # heavier than the whole memo: never held, nothing else lost
    assert "huge" not in table and len(table) == 2 and table.held_bytes == 10
    table.clear()
    assert table.held_bytes == 0 and len(table) == 0
    with pytest.raises(ValueError):
        memo.Memo("test: half-bounded", 4, max_bytes=10)


def test_a_memo_is_safe_across_threads():
    """`fix --pr --jobs N` checks repositories in threads that share the memos (the compiled
    templates were lru_caches, which are thread-safe): another thread evicting the entry a
    lookup has just found must not make that lookup raise KeyError."""
    import threading
    from collections import OrderedDict

    table: memo.Memo[str, str] = memo.Memo("test: threads", 1)

    class Interleaved(OrderedDict):
        """Between a lookup's read and its move to the end, another thread puts a new key."""

        other: threading.Thread | None = None

        def move_to_end(self, key, last=True):
            if Interleaved.other is None:
                Interleaved.other = threading.Thread(target=table.put, args=("other", "value"))
                Interleaved.other.start()
                Interleaved.other.join()
            super().move_to_end(key, last)

    table.put("key", "value")
    table._entries = Interleaved(table._entries)
    assert table.lookup("key", lambda: "computed") in ("value", "computed")
    assert len(table) == 1


def test_every_section_is_reported_whatever_is_selected():
    """The template and weights sections are computed by the check, not by the rules that
    happen to run: `--select TOK` reports the same sections as a full check."""
    full = check_target(str(UPSTREAM_QWEN3))
    only_tokenizer = check_target(str(UPSTREAM_QWEN3), select=["TOK"])
    assert isinstance(full, Report) and isinstance(only_tokenizer, Report)
    assert {"template", "weights"} <= set(full.sections)  # weights: the index names shards not here
    assert only_tokenizer.sections == full.sections
    assert all(f.code.startswith("TOK") for f in only_tokenizer.findings)


def test_one_entry_point_for_cli_survey_and_tests():
    """The survey and the CLI reach a report through check_target, as the tests do."""
    from hfdoctor import survey

    assert survey.check_target is check_target
    assert not hasattr(survey, "check_one")


def test_a_checked_repository_is_freed_without_waiting_for_the_garbage_collector():
    """A catalog checks thousands of repositories in one process: facts hold no cycle back to
    their repository, so each is freed when its check ends."""
    import gc
    import weakref

    gc.disable()
    try:
        repo = ModelRepo(UPSTREAM_QWEN3)
        lineage.detect(repo)
        gone = weakref.ref(repo)
        del repo
        assert gone() is None
    finally:
        gc.enable()


def test_a_section_that_crashes_takes_no_other_section_with_it(monkeypatch):
    """Each section is built on its own: a bug in one is an internal error (exit 2) naming it,
    and the others are still reported."""
    from hfdoctor.lint import check, sections

    def broken(repo):
        raise ValueError("a bug")

    monkeypatch.setattr(check, "SECTIONS", (("template", broken), ("weights", sections.weights_section)))
    report = check_target(str(UPSTREAM_QWEN3), select=["CFG"])
    assert "weights" in report.sections and "template" not in report.sections
    assert [e for e in report.internal_errors if e.startswith("the template section crashed: ValueError: a bug")]
