"""The probe as users reach the model: through an OpenAI-compatible /v1/chat/completions.

`--serve` starts transformers' own server (`transformers serve`, loopback only) on the
checkpoint; `--endpoint URL` takes a running vLLM / SGLang / TGI / transformers server. The
same requests the in-process checks make are sent as chat requests, thinking switched with
`chat_template_kwargs` (the field whose loss on the request path is seeds/001), and the
verdicts are compared with the in-process ones: a server that drops the kwarg, another
template, or other stop tokens show up as a disagreement, which fails the probe.

Only the standard library talks HTTP here; the server is never sent anything but the
probe's questions.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from hfdoctor.probe.checks import MIN_DECISIVE_BUDGET, QUESTION, CheckResult
from hfdoctor.probe.client import Deadline, EndpointError, Unreachable, list_models, request
from hfdoctor.probe.preflight import ProbeRefused

START_TIMEOUT_S = 300
THINK_MARKERS = ("<think>", "</think>", "[THINK]", "[/THINK]")
COMPARED = ("think-on", "think-off", "stops-at-eos", "deterministic")


class BadListing(ProbeRefused):
    """/v1/models answered, but not with a list of models: with --endpoint alone, a failed check."""


class RunOver(ProbeRefused):
    """The served probe's deadline passed: the checks it stopped are inconclusive, not failed."""


@dataclass
class Reply:
    content: str
    reasoning: str  # reasoning_content (or reasoning) the server split off, else ""
    finish_reason: str | None
    tokens: int | None

    def shown(self) -> str:
        text = (f"[reasoning: {self.reasoning}] " if self.reasoning else "") + self.content
        text = text.replace("\n", "\\n")
        return repr(text if len(text) <= 80 else text[:79] + "…")


@dataclass
class Endpoint:
    url: str  # the base URL, e.g. http://127.0.0.1:8000
    model: str
    how: str  # "transformers serve" | "external"
    process: subprocess.Popen | None = field(default=None, repr=False)
    deadline: Deadline | None = None  # the whole served probe's (--endpoint-deadline)

    def chat(self, max_tokens: int, kwargs: dict[str, Any] | None) -> Reply:
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": QUESTION}],
                                "max_tokens": max_tokens, "temperature": 0, "seed": 0, "stream": False}
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        if self.deadline is not None and self.deadline.left() <= 0:
            raise RunOver(f"not run: the probe's {self.deadline.seconds:.0f} s deadline for the endpoint passed first "
                          "(--endpoint-deadline SECONDS gives it more)")
        try:
            done = request(self.url, body, self.deadline)
        except EndpointError as err:
            if self.deadline is not None and self.deadline.run_over():
                raise RunOver(str(err)) from None
            raise ProbeRefused(str(err)) from None
        return Reply(done.content, done.reasoning, done.finish_reason, done.tokens)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(path: str, device: str) -> Endpoint:
    """`transformers serve PATH` on a free loopback port; waits until /health answers."""
    port = _free_port()
    model = os.path.abspath(path)
    cmd = [sys.executable, "-c", "import sys; from transformers.cli.transformers import main; sys.exit(main())",
           "serve", model, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    if device != "auto":
        cmd += ["--device", device]
    log = open(os.devnull, "wb")
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.PIPE, env={**os.environ, "TQDM_DISABLE": "1"})
    endpoint = Endpoint(f"http://127.0.0.1:{port}", model, "transformers serve", process)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace")[-400:] if process.stderr else ""
            raise ProbeRefused(f"transformers serve exited ({process.returncode}): {err.strip()} "
                               "(it needs `pip install 'transformers[serving]'`)")
        try:
            with urllib.request.urlopen(f"{endpoint.url}/health", timeout=2):
                return endpoint
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    endpoint.close()
    raise ProbeRefused(f"transformers serve did not answer /health within {START_TIMEOUT_S} s")


def external(url: str, model: str | None, deadline: Deadline | None = None) -> Endpoint:
    """A running server; its first listed model unless one is named. /v1/models is read as
    untrusted (client.py): a broken or hostile listing is a refusal naming what is wrong."""
    url = url.rstrip("/").removesuffix("/v1")
    if model is None:
        try:
            listed = list_models(url, deadline)
        except Unreachable as err:
            raise ProbeRefused(str(err)) from None
        except EndpointError as err:
            raise BadListing(f"the endpoint {url} does not list its models as an OpenAI-compatible server does "
                             f"(GET /v1/models): {err}; name the model with --endpoint-model") from None
        if not listed:
            raise BadListing(f"the endpoint {url} lists no model (GET /v1/models): name one with --endpoint-model")
        model = listed[0]
    return Endpoint(url, str(model), "external", deadline=deadline)


def _has_reasoning(reply: Reply) -> bool:
    return bool(reply.reasoning.strip()) or any(m in reply.content for m in THINK_MARKERS)


def _answer(reply: Reply) -> str:
    text = reply.content
    for marker in ("</think>", "[/THINK]"):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.strip()


def served_checks(endpoint: Endpoint, in_process: dict[str, CheckResult], max_new_tokens: int,
                  switch: bool) -> list[CheckResult]:
    """The checks through the endpoint, for those that applied in-process; those the served probe's
    deadline stopped are inconclusive."""
    results: list[CheckResult] = []
    try:
        _served_checks(endpoint, in_process, max_new_tokens, switch, results)
    except RunOver as err:
        wanted = [name for name in ("think-on", "think-off") if name in in_process
                  and in_process[name].status != "not-applicable"] + ["stops-at-eos", "deterministic"]
        done = {result.name for result in results}
        results += [CheckResult(name, "inconclusive", str(err)) for name in wanted if name not in done]
    return results


def _served_checks(endpoint: Endpoint, in_process: dict[str, CheckResult], max_new_tokens: int, switch: bool,
                   results: list[CheckResult]) -> None:
    replies: list[tuple[str, Reply]] = []
    thinking_on = in_process.get("think-on")
    if thinking_on is not None and thinking_on.status != "not-applicable":
        reply = endpoint.chat(max_new_tokens, {"enable_thinking": True} if switch else None)
        replies.append(("think-on", reply))
        if _has_reasoning(reply) and _answer(reply):
            results.append(CheckResult("think-on", "passed", f"reasoning, then an answer: {reply.shown()}"))
        elif reply.finish_reason == "length":
            results.append(CheckResult("think-on", "inconclusive", f"cut by the budget: {reply.shown()}"))
        else:
            results.append(CheckResult("think-on", "failed", f"no reasoning, or no answer after it: {reply.shown()}"))
    thinking_off = in_process.get("think-off")
    if thinking_off is not None and thinking_off.status != "not-applicable":
        reply = endpoint.chat(max_new_tokens, {"enable_thinking": False})
        replies.append(("think-off", reply))
        if _has_reasoning(reply):
            results.append(CheckResult("think-off", "failed", "reasoning came back with chat_template_kwargs "
                                       f"enable_thinking=false (does the server pass the kwarg on?): {reply.shown()}"))
        elif not reply.content.strip():
            results.append(CheckResult("think-off", "failed", f"an empty reply: {reply.shown()}"))
        else:
            results.append(CheckResult("think-off", "passed", f"an answer without reasoning: {reply.shown()}"))
    if not replies:
        replies.append(("first", endpoint.chat(max_new_tokens, None)))
    cut = [label for label, reply in replies if reply.finish_reason != "stop"]
    if not cut:
        results.append(CheckResult("stops-at-eos", "passed", "every reply finished with finish_reason 'stop'"))
    elif max_new_tokens < MIN_DECISIVE_BUDGET:
        results.append(CheckResult("stops-at-eos", "inconclusive", f"the {max_new_tokens}-token budget is too small"))
    else:
        results.append(CheckResult("stops-at-eos", "failed", f"the {', '.join(cut)} reply ended with finish_reason "
                                   f"{dict(replies)[cut[0]].finish_reason!r}, not 'stop'"))
    label, first = replies[0]
    again = endpoint.chat(max_new_tokens, {"enable_thinking": True} if label == "think-on" and switch else
                          {"enable_thinking": False} if label == "think-off" else None)
    same = (again.content, again.reasoning) == (first.content, first.reasoning)
    results.append(CheckResult("deterministic", "passed" if same else "failed",
                               "the same request twice (temperature 0, seed 0) gave the same reply" if same else
                               f"the same request twice gave {first.shown()} then {again.shown()}"))


def agreement(in_process: dict[str, CheckResult], served: list[CheckResult], endpoint: Endpoint) -> CheckResult:
    """Fails when a check passed in-process and failed through the endpoint, or the reverse."""
    differ = [(c.name, in_process[c.name].status, c.status) for c in served
              if c.name in in_process and {in_process[c.name].status, c.status} == {"passed", "failed"}]
    where = f"{endpoint.how} at {endpoint.url}"
    if differ:
        listed = "; ".join(f"{name}: {a} in-process, {b} through the endpoint" for name, a, b in differ)
        return CheckResult("served-agrees", "failed", f"{where} behaves differently from the checkpoint: {listed}")
    return CheckResult("served-agrees", "passed", f"{where} gives the same verdicts as the in-process probe "
                       f"({', '.join(c.name for c in served)})")
