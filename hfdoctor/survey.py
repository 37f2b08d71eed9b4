"""Many repositories at once: a catalog, an organisation's models, a CI matrix.

The unit of work is a pure function of a target and the options, `report_json(target,
options) -> dict`: it opens the target (a directory, a Hub repo at a revision, a git
commit), runs every selected rule, and returns the report as JSON data, or an
`{"target": ..., "error": ...}` object when the target cannot be checked. It writes
nothing and shares no state, so any engine that maps a function over a list can run it:
`check_many` here (processes on one machine), Ray or Spark across many (see
examples/survey_ray.py). The check of one target is hfdoctor.lint.check.check_target, the
one entry point the CLI and the tests use too; each Hub target runs under its deadline
(Options.timeout_s).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from hfdoctor.findings import Report, TargetError
from hfdoctor.lint.check import Options, check_target
from hfdoctor.report.json_report import report_to_json

__all__ = ["Options", "TargetError", "report_json", "check_many", "rule_counts"]


def report_json(target: str, options: Options | None = None) -> dict[str, Any]:
    """The pure unit of a survey: target -> its report as JSON data (or an error object)."""
    result = check_target(target, options)
    return result.to_json() if isinstance(result, TargetError) else report_to_json(result)


def _check_indexed(item: tuple[int, str, Options]) -> tuple[int, Report | TargetError]:
    index, target, options = item
    return index, check_target(target, options)


def check_many(targets: Iterable[str], options: Options | None = None, jobs: int = 1
               ) -> Iterator[tuple[int, Report | TargetError]]:
    """(index in `targets`, result), as each finishes: in order with jobs=1, else in
    parallel worker processes (each check is CPU-bound Python plus its own I/O)."""
    options = options or Options()
    items = [(i, t, options) for i, t in enumerate(targets)]
    if jobs <= 1 or len(items) <= 1:
        for item in items:
            yield _check_indexed(item)
        return
    # Imported here: a single check (the pre-push hook) does not pay for a process pool.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # fork: the workers inherit what this process imported, and nothing is started or written
    # beside them (forkserver and spawn start a server or tracker and write a socket in /tmp).
    # check_many runs before any thread of hfdoctor's exists, so forking is safe here.
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=context) as pool:
        for future in as_completed([pool.submit(_check_indexed, item) for item in items]):
            yield future.result()


@dataclass
class RuleCount:
    repos: int = 0
    severities: Counter = field(default_factory=Counter)


def rule_counts(results: Iterable[Report | TargetError]) -> dict[str, RuleCount]:
    """rule -> on how many repositories it fired (and at which severities)."""
    counts: dict[str, RuleCount] = {}
    for result in results:
        if isinstance(result, TargetError):
            continue
        for name in {f.rule for f in result.findings}:
            counts.setdefault(name, RuleCount()).repos += 1
        for f in result.findings:
            counts[f.rule].severities[str(f.severity)] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1].repos, kv[0])))
