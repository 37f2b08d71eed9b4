"""Served conformance: what serving test suites assert of an OpenAI-compatible endpoint.

The checks (each passed / failed / inconclusive / not-applicable, with the evidence quoted):
- tool-call-arguments, tool-call-stream, tool-call-parallel, tool-choice-honoured: see
  tool_calls.py;
- seed-parity: the same seeded request alone, while other requests stream, streamed, and
  after a prefix-cache hit gives the same completion (a failure only when the user says the
  server promises seeded determinism, `--seeded`; otherwise inconclusive, saying why). The
  overlap is shown, not assumed: the other requests stream with a long budget, the seeded one
  is sent only once each has sent its first chunk, and at least one must still be streaming
  after the seeded reply ended; otherwise the check is inconclusive, never passed;
- structured-output: `response_format` json_schema with `strict`, streamed and not, is valid
  JSON that validates;
- kwargs-honoured: `chat_template_kwargs` enable_thinking=false turns the reasoning off (a
  proxy that drops the field is seeds/001);
- reasoning-separated: with a reasoning parser (the card's serve command names one), the
  reasoning arrives in `reasoning_content`, not as <think> text in `content`.

Requests go only to the URL the user gave, bounded in number (about 30), in time (each
request, each check, and the whole run: client.py) and concurrency (OTHERS + 1). Nothing here
needs the weights.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from hfdoctor.probe.checks import CheckResult
from hfdoctor.probe.client import Completion, Deadline, EndpointError, parse_json, request
from hfdoctor.probe.tool_calls import (ARGUMENT_TYPES_EXAMPLE, WEATHER_TOOL, base, tool_checks,  # noqa: F401
                                       tool_choice_honoured, validate)

# With the seeded request, four at once: what a server with four slots (llama-server -np 4) runs together.
OTHERS = 3
OTHER_MAX_TOKENS = 256  # on a server that runs requests together, still streaming when the seeded reply (48) ends
OTHER_PROMPT = "Count from {start} to {end}, one number per line, with nothing else."
FIRST_CHUNK_WAIT_S = 30.0  # how long the other requests may take to start streaming, all of them
AFTER_END_WAIT_S = 10.0  # how long a still-open request may take to send its next chunk
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
          "required": ["city", "population"], "additionalProperties": False}
SCHEMA_PROMPT = "Give the largest city of Japan and its population as JSON."
SEED_PROMPT = "Write one sentence about the sea."


class Overlap:
    """The seeded request sent while OTHERS streaming requests are open, and the evidence."""

    def __init__(self, url: str, model: str, deadline: Deadline):
        self.url, self.model, self.deadline = url, model, deadline
        self.first = [threading.Event() for _ in range(OTHERS)]
        self.later = [threading.Event() for _ in range(OTHERS)]  # a chunk came after the seeded reply ended
        self.done = [threading.Event() for _ in range(OTHERS)]
        self.errors: list[str | None] = [None] * OTHERS
        self.replies: list[Completion | None] = [None] * OTHERS
        self.seeded_end: float | None = None
        self.open_count = 0
        self.stop = threading.Event()

    def _other(self, i: int) -> None:
        def on_chunk(reply: Completion) -> None:
            self.first[i].set()
            if self.seeded_end is not None and time.monotonic() > self.seeded_end:
                self.later[i].set()

        body = base(self.model, OTHER_PROMPT.format(start=i * 1000 + 1, end=i * 1000 + 999),
                    max_tokens=OTHER_MAX_TOKENS, stream=True)
        try:
            self.replies[i] = request(self.url, body, self.deadline, on_chunk=on_chunk, stop=self.stop)
        except EndpointError as err:
            self.errors[i] = str(err)
        finally:
            self.first[i].set()
            self.done[i].set()

    def run(self, body: dict[str, Any]) -> tuple[str, str | None]:
        """The seeded reply's content, and why the overlap was not shown (None: it was)."""
        threads = [threading.Thread(target=self._other, args=(i,), daemon=True) for i in range(OTHERS)]
        for t in threads:
            t.start()
        try:
            wait_until = min(time.monotonic() + FIRST_CHUNK_WAIT_S, self.deadline.at)
            for event in self.first:
                event.wait(max(0.0, wait_until - time.monotonic()))
            ended = [i for i in range(OTHERS) if self.done[i].is_set()]
            if any(self.errors):
                return "", f"another request failed: {next(e for e in self.errors if e)}"
            started = sum(e.is_set() for e in self.first)
            if started < OTHERS:
                return "", (f"only {started} of {OTHERS} other streamed requests had sent a first chunk after "
                            f"{FIRST_CHUNK_WAIT_S:.0f} s: the server queues requests rather than running them together")
            if len(ended) == OTHERS:
                return "", (f"all {OTHERS} other requests (max_tokens {OTHER_MAX_TOKENS}) had finished before the "
                            "seeded one could be sent: the server ends replies early (or ignores max_tokens)")
            seeded = request(self.url, body, self.deadline).content
            self.seeded_end = time.monotonic()
            wait_until = min(time.monotonic() + AFTER_END_WAIT_S, self.deadline.at)
            for i in range(OTHERS):
                while not (self.later[i].is_set() or self.done[i].is_set()) and time.monotonic() < wait_until:
                    self.later[i].wait(0.05)
            still_open = sum(e.is_set() for e in self.later)
            if not still_open:
                return seeded, (f"none of the {OTHERS} other requests was still streaming when the seeded reply "
                                "ended (they finished first)")
            self.open_count = still_open
            return seeded, None
        finally:
            self.stop.set()
            for t in threads:
                t.join(max(0.1, min(self.deadline.left(), 30.0)))


def seed_parity(url: str, model: str, seeded: bool, deadline: Deadline) -> CheckResult:
    body = base(model, SEED_PROMPT, temperature=0.8, max_tokens=48)
    alone = request(url, body, deadline).content
    overlap = Overlap(url, model, deadline)
    busy, no_overlap = overlap.run(body)
    streamed = request(url, {**body, "stream": True}, deadline).content
    cached = request(url, body, deadline).content  # the same prefix again: a prefix-cache hit where there is a cache
    runs = {"streamed": streamed, "after a prefix-cache hit": cached}
    if no_overlap is None:  # a run whose overlap was not shown is not compared: its conditions are unknown
        runs = {f"while {overlap.open_count} other request(s) streamed": busy, **runs}
    differ = {label: text for label, text in runs.items() if text != alone}
    if not differ:
        if no_overlap is not None:
            return CheckResult("seed-parity", "inconclusive", f"could not produce overlapping requests: {no_overlap}; "
                               "the same seeded request gave the same completion alone, streamed and after a cache "
                               "hit, but whether concurrency changes it is unknown")
        return CheckResult("seed-parity", "passed", f"the same seeded request gave the same completion alone, while "
                           f"{overlap.open_count} of {OTHERS} other requests were streaming (each sent its first chunk "
                           "before it was sent, and went on after it ended), streamed and after a cache hit")
    label, text = next(iter(differ.items()))
    at = next((i for i, (x, y) in enumerate(zip(alone, text)) if x != y), min(len(alone), len(text)))
    detail = (f"{label}: the completion differs from the request alone at character {at} "
              f"({alone[at:at + 20]!r} against {text[at:at + 20]!r})")
    if seeded:
        return CheckResult("seed-parity", "failed", detail)
    return CheckResult("seed-parity", "inconclusive", detail + "; the server does not promise seeded determinism "
                       "(pass --seeded when it does, and this fails)")


def structured_output(url: str, model: str, deadline: Deadline) -> CheckResult:
    format_ = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}
    body = base(model, SCHEMA_PROMPT, response_format=format_)
    for label, stream in (("non-streamed", False), ("streamed", True)):
        reply = request(url, {**body, "stream": stream}, deadline)
        try:
            value = parse_json(reply.content, f"the {label} reply")
        except EndpointError as err:
            return CheckResult("structured-output", "failed", str(err))
        problems = validate(value, SCHEMA)
        if problems:
            return CheckResult("structured-output", "failed", f"the {label} reply does not validate: {problems[0]}")
    return CheckResult("structured-output", "passed", "strict json_schema output is valid and validates, streamed "
                       "and not")


def reasoning_separated(url: str, model: str, parser: str | None, deadline: Deadline) -> CheckResult:
    if parser is None:
        return CheckResult("reasoning-separated", "not-applicable", "the card names no reasoning parser")
    reply = request(url, base(model, SEED_PROMPT, max_tokens=256), deadline)
    if "<think>" in reply.content or "</think>" in reply.content:
        return CheckResult("reasoning-separated", "failed", f"with --reasoning-parser {parser}, reasoning came back "
                           f"inside content: {reply.content[:100]!r}")
    if not reply.reasoning:
        return CheckResult("reasoning-separated", "inconclusive", "no reasoning_content in the reply (the model may "
                           "not have reasoned)")
    return CheckResult("reasoning-separated", "passed", "reasoning arrives in reasoning_content, apart from content")


def kwargs_honoured(url: str, model: str, deadline: Deadline) -> CheckResult:
    """chat_template_kwargs reach the template: enable_thinking=false must stop the reasoning."""
    on = request(url, base(model, SEED_PROMPT, chat_template_kwargs={"enable_thinking": True}), deadline)
    off = request(url, base(model, SEED_PROMPT, chat_template_kwargs={"enable_thinking": False}), deadline)

    def reasons(reply: Completion) -> bool:
        return bool(reply.reasoning.strip()) or "<think>" in reply.content or "</think>" in reply.content

    if not reasons(on):
        return CheckResult("kwargs-honoured", "not-applicable", "no reasoning with enable_thinking=true: the model "
                           "or template has no thinking switch to test")
    if reasons(off):
        return CheckResult("kwargs-honoured", "failed", "reasoning came back with chat_template_kwargs "
                           f"enable_thinking=false: the server drops the kwarg ({(off.reasoning or off.content)[:60]!r})")
    return CheckResult("kwargs-honoured", "passed", "enable_thinking=false turns the reasoning off")


# Servers known not to implement a feature: the check is not-applicable there, saying so.
UNSUPPORTED = {"transformers serve": {
    "structured-output": "transformers serve does not implement response_format json_schema (it is ignored, not "
                         "enforced)",
    "tool-choice-honoured": "transformers serve does not implement tool_choice (its own list of unsupported "
                            "fields names it), so no call can be forced either"}}
TOOL_CHECKS = ("tool-call-arguments", "tool-call-stream", "tool-call-parallel")


def conformance(url: str, model: str, *, seeded: bool = False, reasoning_parser: str | None = None,
                server: str = "external", deadline: Deadline | None = None) -> list[CheckResult]:
    """Every served-conformance check against the endpoint, each under its own deadline within the
    run's (`deadline`): an endpoint error fails the checks it stopped, naming what went wrong; a
    check the run's deadline stopped, or left no time for, is inconclusive."""
    results: list[CheckResult] = []
    unsupported = UNSUPPORTED.get(server, {})

    def structured(deadline: Deadline) -> list[CheckResult]:
        if "structured-output" in unsupported:
            return [CheckResult("structured-output", "not-applicable", unsupported["structured-output"])]
        return [structured_output(url, model, deadline)]

    def choice(deadline: Deadline) -> list[CheckResult]:
        if "tool-choice-honoured" in unsupported:
            return [CheckResult("tool-choice-honoured", "not-applicable", unsupported["tool-choice-honoured"])]
        return [tool_choice_honoured(url, model, deadline)]

    force = "tool-choice-honoured" not in unsupported
    checks: tuple[tuple[tuple[str, ...], Callable[[Deadline], list[CheckResult]]], ...] = (
        (TOOL_CHECKS, lambda d: tool_checks(url, model, d, force)),
        (("tool-choice-honoured",), choice),
        (("seed-parity",), lambda d: [seed_parity(url, model, seeded, d)]),
        (("structured-output",), structured),
        (("kwargs-honoured",), lambda d: [kwargs_honoured(url, model, d)]),
        (("reasoning-separated",), lambda d: [reasoning_separated(url, model, reasoning_parser, d)]),
    )
    for names, run in checks:
        if deadline is not None and deadline.left() <= 0:
            results += [CheckResult(name, "inconclusive", cut_short(deadline)) for name in names]
            continue
        check = Deadline.for_check(deadline)
        try:
            results += run(check)
        except EndpointError as err:
            results += [CheckResult(name, "inconclusive" if check.run_over() else "failed", str(err)) for name in names]
    return results


def cut_short(run: Deadline) -> str:
    return (f"not run: the probe's {run.seconds:.0f} s deadline for the endpoint passed first (--endpoint-deadline "
            "SECONDS gives it more)")
