"""The queue between the HTTP server and the work: bounded, handled by a pool of workers, each
delivery once.

- `submit` answers at once: queued (202), a duplicate (202, nothing done), ignored (202, nothing
  to do), or the queue is full (429: the Hub, or whoever sent it, may send it again later).
- A delivery is known by its key (payload.Delivery.key) from when it is queued: the same one
  again, while it waits, runs or after it succeeded, is a duplicate. When its work failed the
  key is forgotten, so a replay from the webhook's activity tab does the work again. The keys
  kept are bounded (MAX_KEYS, the oldest go first); what a forgotten key would have prevented the
  Hub's markers still prevent (work.py reads before it writes).
- Work on one repository is serialized (a lock per repository): two deliveries about one pull
  request never both find no comment and both post one.
- A failure of one delivery (the Hub down past its retries, a revision that cannot be checked, a
  bug) is logged and recorded; the worker goes on.
- `stop`: the deliveries still queued are abandoned (logged; their keys forgotten, so they can be
  replayed), the ones running get `grace_s` seconds to finish.

`history` keeps the last runs for the status page; `stats` counts every answer.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import traceback
from collections import Counter, OrderedDict, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from hfdoctor.report.inert import visible
from hfdoctor.sources.base import SourceError
from hfdoctor.webhook.hub import HubRefused, HubUnavailable
from hfdoctor.webhook.payload import Delivery
from hfdoctor.webhook.work import CheckFailed, Work

log = logging.getLogger("hfdoctor.webhook")

MAX_KEYS = 10_000
HISTORY = 100
POLL_S = 0.2  # how often an idle worker looks whether the runner stops


@dataclass
class Run:
    """One delivery that had work to do, as the status page shows it."""

    number: int
    delivery: Delivery
    received: float = field(default_factory=time.time)
    state: str = "queued"  # queued | running | done | failed | abandoned
    verdicts: list[str] = field(default_factory=list)

    @property
    def repo(self) -> str:
        return "(a private repository)" if self.delivery.private else self.delivery.repo_id

    @property
    def what(self) -> str:
        return ", ".join(task.label for task in self.delivery.tasks)

    @property
    def verdict(self) -> str:
        if self.delivery.private and self.state == "failed":
            return "failed (the runner's log says why)"
        return "; ".join(self.verdicts)


class Runner:
    def __init__(self, work: Work, *, workers: int = 2, queue_size: int = 64):
        self.work = work
        self.workers = workers
        self.queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.queue_size = queue_size
        self.keys: OrderedDict[str, str] = OrderedDict()  # delivery key -> "pending" | "done"
        self.history: deque[Run] = deque(maxlen=HISTORY)
        self.stats: Counter = Counter()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.numbers = itertools.count(1)
        self._repo_locks: dict[str, list] = {}  # repo id -> [lock, users]
        self._threads: list[threading.Thread] = []
        self.running = 0

    # --- the server's side ------------------------------------------------------------

    def submit(self, delivery: Delivery) -> tuple[int, dict]:
        """(HTTP status, JSON answer) for a delivery, at once."""
        with self.lock:
            if self.stopping.is_set():
                self.stats["refused"] += 1
                return 503, {"error": "the runner is stopping"}
            if delivery.key in self.keys:
                self.stats["duplicate"] += 1
                return 202, {"status": "duplicate"}
            if not delivery.tasks:
                self.stats["ignored"] += 1
                self._remember(delivery.key, "done")
                return 202, {"status": "ignored", "why": delivery.ignored}
            run = Run(0, delivery)
            try:
                self.queue.put_nowait(run)
            except queue.Full:
                self.stats["queue full"] += 1
                return 429, {"error": f"the queue is full ({self.queue_size} deliveries waiting)"}
            run.number = next(self.numbers)  # under the lock: no worker reads it before the answer
            self.stats["queued"] += 1
            self._remember(delivery.key, "pending")
            self.history.append(run)
        return 202, {"status": "queued", "run": run.number}

    def _remember(self, key: str, state: str) -> None:
        self.keys[key] = state
        self.keys.move_to_end(key)
        while len(self.keys) > MAX_KEYS:
            oldest = next(iter(self.keys))
            if self.keys[oldest] == "pending":  # still in the queue: keep it, drop none
                break
            del self.keys[oldest]

    # --- the workers -------------------------------------------------------------------

    def start(self) -> None:
        for i in range(self.workers):
            thread = threading.Thread(target=self._worker, name=f"hfdoctor-webhook-worker-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _worker(self) -> None:
        while True:
            try:
                run = self.queue.get(timeout=POLL_S)
            except queue.Empty:
                if self.stopping.is_set():
                    return
                continue
            if self.stopping.is_set():
                self._finish(run, "abandoned", "abandoned: the runner stopped before it started")
                continue
            with self.lock:
                self.running += 1
            run.state = "running"
            try:
                with self._repo_lock(run.delivery.repo_id):
                    state = self._do(run)
            finally:
                with self.lock:
                    self.running -= 1
            self._finish(run, state)

    def _do(self, run: Run) -> str:
        for task in run.delivery.tasks:
            started = time.monotonic()
            try:
                run.verdicts.append(self.work.run(task))
            except (CheckFailed, HubUnavailable, HubRefused, SourceError) as err:
                run.verdicts.append(f"failed: {err}")
                log.warning("run %d %s %s failed: %s", run.number, run.delivery.repo_id, task.label, visible(str(err)))
                return "failed"
            except Exception as err:  # noqa: BLE001 - a bug of hfdoctor: one delivery fails, the runner goes on
                run.verdicts.append(f"failed: internal error ({type(err).__name__})")
                log.error("run %d %s %s: internal error: %s", run.number, run.delivery.repo_id, task.label,
                          visible("".join(traceback.format_exception_only(type(err), err)).strip()))
                return "failed"
            log.info("run %d %s %s: %s (%.1f s)", run.number, run.delivery.repo_id, task.label,
                     visible(run.verdicts[-1]), time.monotonic() - started)
        return "done"

    def _finish(self, run: Run, state: str, verdict: str | None = None) -> None:
        with self.lock:
            run.state = state
            if verdict:
                run.verdicts.append(verdict)
            self.stats[state] += 1
            if state == "done":
                self._remember(run.delivery.key, "done")
            else:  # failed or abandoned: a replay of this delivery does the work again
                self.keys.pop(run.delivery.key, None)

    @contextmanager
    def _repo_lock(self, repo_id: str) -> Iterator[None]:
        with self.lock:
            entry = self._repo_locks.setdefault(repo_id, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self.lock:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._repo_locks[repo_id]

    # --- stopping --------------------------------------------------------------------------

    def stop(self, grace_s: float) -> dict[str, int]:
        """Abandon what waits, give what runs `grace_s` seconds; what happened, counted."""
        with self.lock:
            self.stopping.set()
        self.work.hub.stopping.set()  # retry waits end now
        abandoned = 0
        while True:
            try:
                run = self.queue.get_nowait()
            except queue.Empty:
                break
            self._finish(run, "abandoned", "abandoned: the runner stopped before it started")
            abandoned += 1
        deadline = time.monotonic() + grace_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        unfinished = sum(thread.is_alive() for thread in self._threads)
        if abandoned or unfinished:
            log.warning("stopped: %d queued deliveries abandoned, %d still running after %g s (a replay from the "
                        "webhook's activity tab does them again)", abandoned, unfinished, grace_s)
        return {"abandoned": abandoned, "unfinished": unfinished}

    def health(self) -> dict:
        with self.lock:
            return {"status": "stopping" if self.stopping.is_set() else "ok", "queued": self.queue.qsize(),
                    "queue_size": self.queue_size, "running": self.running, "workers": self.workers,
                    "deliveries": dict(sorted(self.stats.items()))}
