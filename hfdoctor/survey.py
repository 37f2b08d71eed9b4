"""Many repositories at once: a catalog, an organisation's models, a CI matrix.

The unit of work is a pure function of a target and the options, `report_json(target,
options) -> dict`: it opens the target (a directory, a Hub repo at a revision, a git
commit), runs every selected rule, and returns the report as JSON data, or an
`{"target": ..., "error": ...}` object when the target cannot be checked. It writes
nothing and shares no state, so any engine that maps a function over a list can run it:
`check_many` here (processes on one machine), Ray or Spark across many (see
examples/survey_ray.py). `check_one` is the same with the Report object the text, GitHub
and SARIF writers take.

Each Hub target runs under a deadline (Options.timeout_s): huggingface_hub's requests
have timeouts, and in a main thread a timer also cuts off whatever else could stall.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from hfdoctor.lint.check import check_repo
from hfdoctor.findings import Report, TargetError
from hfdoctor.repo import ModelRepo
from hfdoctor.report.json_report import report_to_json
from hfdoctor.sources.base import SourceError
from hfdoctor.sources.targets import TargetOptions, open_source
from hfdoctor.knowledge.upstream import Upstream

__all__ = ["Options", "TargetError", "check_one", "report_json", "check_many", "rule_counts"]


@dataclass(frozen=True)
class Options:
    """Everything a check of one target depends on (picklable: it crosses process boundaries)."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    upstream_dirs: tuple[str, ...] = ()
    revision: str | None = None
    git_rev: str | None = None
    cache: bool = False
    timeout_s: float = 120.0
    env_upstream: bool = True  # also read HFDOCTOR_UPSTREAM
    git_since: str | None = None  # --git-since: blob rules see every commit after it (pre-push)


class _Deadline(BaseException):
    """The target's deadline passed (a BaseException: no `except Exception` swallows it)."""


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Interrupt the block after `seconds` (main thread only; elsewhere the timeouts of each
    request are the bound)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _Deadline()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _upstream(options: Options) -> Upstream:
    dirs = list(options.upstream_dirs)
    up = Upstream.from_options(dirs) if options.env_upstream else Upstream(tuple(Path(d) for d in dirs))
    return up


def check_one(target: str, options: Options | None = None) -> Report | TargetError:
    """Check one target; a TargetError when it cannot be opened or times out."""
    options = options or Options()
    targets = TargetOptions(revision=options.revision, git_rev=options.git_rev, git_since=options.git_since,
                            cache=options.cache,
                            timeout_s=options.timeout_s)
    remote = options.git_rev is None and not os.path.isdir(target)
    source = None
    try:
        # The Hub's own timeouts come first; this one catches anything they let through.
        with deadline(options.timeout_s + 15 if remote else None):
            source = open_source(target, targets)
            repo = ModelRepo(source, upstream=_upstream(options))
            return check_repo(repo, select=list(options.select) or None, ignore=list(options.ignore) or None,
                              target=target)
    except SourceError as err:
        return TargetError(target, str(err))
    except _Deadline:
        return TargetError(target, f"the check did not finish within the {options.timeout_s:g} s deadline")
    finally:
        if source is not None:
            source.close()


def report_json(target: str, options: Options | None = None) -> dict[str, Any]:
    """The pure unit of a survey: target -> its report as JSON data (or an error object)."""
    result = check_one(target, options)
    return result.to_json() if isinstance(result, TargetError) else report_to_json(result)


def _check_indexed(item: tuple[int, str, Options]) -> tuple[int, Report | TargetError]:
    index, target, options = item
    return index, check_one(target, options)


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
