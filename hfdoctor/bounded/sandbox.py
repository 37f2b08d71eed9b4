"""Run untrusted work (rendering a repo's chat template) with a bound on time and memory.

A chat template is code from the checked repository. jinja2's sandbox stops it from
reaching Python internals, but not from looping forever or building a string of many
gigabytes. So the work runs in a forked child process:

- the child's address space is capped (RLIMIT_AS: what it already maps plus
  `memory_bytes`), so a huge allocation fails with MemoryError instead of swapping;
- each step of the work gets a wall-clock alarm (SIGALRM raises StepTimeout inside the
  template's Python code), and the CPU time of the whole child is capped (RLIMIT_CPU);
- the parent kills the child when the overall deadline passes, whatever it is doing;
- results stream back over a pipe, one pickled message per step, so the steps that
  finished before a hang are kept. Each message is size-capped.

The child only renders text; it never tokenizes or touches the repo, and leaves with
os._exit so no parent cleanup (atexit, buffered stdout) runs twice.

Where fork is unavailable (Windows), the work runs in-process without these bounds.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

HEADER = struct.Struct("!I")


class StepTimeout(BaseException):
    """A step of the work ran past its time limit.

    A BaseException, so that no `except Exception` inside a template filter or inside
    jinja2 can swallow it.
    """


@dataclass
class Limits:
    total_s: float = 6.0  # the whole run, enforced by the parent (SIGKILL)
    step_s: float = 2.0  # one step (one render), enforced inside the child (SIGALRM)
    memory_bytes: int = 1 << 30  # address space the child may add to what it inherits
    message_bytes: int = 8 << 20  # the largest message the child may send


@dataclass
class RunResult:
    messages: list[Any] = field(default_factory=list)
    finished: bool = False  # the work returned normally
    # Why it did not finish: "timeout" (killed at the deadline), "killed by signal N",
    # "exit status N", or the repr of an exception raised by the work itself.
    failure: str | None = None
    signal: int | None = None  # the signal that killed the child, if one did


Emit = Callable[[Any], None]
Work = Callable[[Emit, "StepGuard"], None]


class StepGuard:
    """Given to the work: `with guard.step():` bounds one step in time."""

    def __init__(self, step_s: float | None):
        self.step_s = step_s

    @contextmanager
    def step(self) -> Iterator[None]:
        if not self.step_s:
            yield
            return

        def on_alarm(signum: int, frame: Any) -> None:
            raise StepTimeout(f"did not finish within {self.step_s:g} s")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, self.step_s)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(signal, "setitimer")


def run_bounded(work: Work, limits: Limits | None = None) -> RunResult:
    """Run `work(emit, guard)` in a bounded child process; collect what it emits."""
    limits = limits or Limits()
    if not can_fork():
        return run_in_process(work)
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:  # the child
        os.close(read_fd)
        _child(work, write_fd, limits)  # never returns
    os.close(write_fd)
    try:
        return _collect(pid, read_fd, limits)
    except BaseException:
        # Interrupted while collecting (Ctrl-C, a bad message): leave no child running
        # and no zombie behind.
        _kill(pid)
        _reap(pid)
        raise
    finally:
        os.close(read_fd)


def run_in_process(work: Work) -> RunResult:
    """The same protocol without a process or bounds: for trusted work only."""
    result = RunResult()
    try:
        work(result.messages.append, StepGuard(None))
        result.finished = True
    except Exception as err:  # the work's own failure, reported like the child's
        result.failure = f"{type(err).__name__}: {err}"
    return result


def _address_space_in_use() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _child(work: Work, write_fd: int, limits: Limits) -> None:
    status = 1
    try:
        import resource

        in_use = _address_space_in_use()
        if in_use is not None:
            cap = in_use + limits.memory_bytes
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        cpu = int(limits.total_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))

        def emit(message: Any) -> None:
            data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
            if len(data) > limits.message_bytes:
                data = pickle.dumps(("too-large", len(data)), protocol=pickle.HIGHEST_PROTOCOL)
            _write_all(write_fd, HEADER.pack(len(data)) + data)

        try:
            work(emit, StepGuard(limits.step_s))
        except BaseException as err:  # noqa: BLE001 - reported, then the child exits
            emit(("crashed", f"{type(err).__name__}: {err}"))
            raise
        _write_all(write_fd, HEADER.pack(0))  # a zero-length message: finished
        status = 0
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return
        status = 1
    finally:
        os._exit(status)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _collect(pid: int, read_fd: int, limits: Limits) -> RunResult:
    result = RunResult()
    buffer = bytearray()
    deadline = time.monotonic() + limits.total_s
    eof = False
    while not eof:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            result.failure = "timeout"
            break
        ready, _, _ = select.select([read_fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            eof = True
        buffer += chunk
        while len(buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(buffer)
            if size == 0:
                result.finished = True
                del buffer[: HEADER.size]
                continue
            if len(buffer) < HEADER.size + size:
                break
            # The stream is written by our own child code; message structure is ours,
            # only string contents come from the template.
            result.messages.append(pickle.loads(bytes(buffer[HEADER.size : HEADER.size + size])))
            del buffer[: HEADER.size + size]
    if result.failure == "timeout":
        _kill(pid)
    _, status = os.waitpid(pid, 0)
    if not result.finished and result.failure is None:
        if os.WIFSIGNALED(status):
            result.signal = os.WTERMSIG(status)
            result.failure = f"killed by signal {result.signal}"
        else:
            result.failure = f"exit status {os.WEXITSTATUS(status)}"
    return result


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # already reaped
        pass
