"""Served conformance: what serving test suites assert of an OpenAI-compatible endpoint.

The checks (each passed / failed / inconclusive / not-applicable, with the evidence quoted):
- tool-call-arguments: a non-streamed tool call's arguments are JSON that validates against
  the function's schema, types included (numbers, integers, booleans, arrays, objects, not
  their string spellings);
- tool-call-stream: the streamed deltas (index, id, name, argument fragments) assemble into
  exactly the non-streamed call;
- tool-call-parallel: two calls asked for in one turn keep their own indices and ids when
  streamed, and assemble into the non-streamed calls (not-applicable when the model makes one);
- seed-parity: the same seeded request alone, while other requests run, streamed, and after
  a prefix-cache hit gives the same completion (a failure only when the user says the server
  promises seeded determinism, `--seeded`; otherwise inconclusive, saying why);
- structured-output: `response_format` json_schema with `strict`, streamed and not, is valid
  JSON that validates;
- kwargs-honoured: `chat_template_kwargs` enable_thinking=false turns the reasoning off (a
  proxy that drops the field is seeds/001);
- reasoning-separated: with a reasoning parser (the card's serve command names one), the
  reasoning arrives in `reasoning_content`, not as <think> text in `content`.

Requests go only to the URL the user gave, bounded in number (about 20), time (each request)
and concurrency (CONCURRENT). Nothing here needs the weights.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from hfdoctor.probe.checks import CheckResult

REQUEST_TIMEOUT_S = 120
CONCURRENT = 4
OVERLAP_DELAY_S = 0.3
MAX_STREAM_BYTES = 4 << 20

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "set_thermostat",
        "description": "Set the thermostat of a room.",
        "parameters": {
            "type": "object",
            "properties": {
                "room": {"type": "string"},
                "celsius": {"type": "number"},
                "fan_level": {"type": "integer"},
                "eco": {"type": "boolean"},
                "days": {"type": "array", "items": {"type": "string"}},
                "schedule": {"type": "object", "properties": {"start": {"type": "string"}}},
            },
            "required": ["room", "celsius", "fan_level", "eco", "days", "schedule"],
        },
    },
}
# A call that fits the schema (what a correct server returns for TOOL_PROMPT).
ARGUMENT_TYPES_EXAMPLE = {"room": "living room", "celsius": 22.5, "fan_level": 3, "eco": True,
                          "days": ["Monday", "Tuesday"], "schedule": {"start": "07:00"}}
TOOL_PROMPT = ("Set the living room thermostat to 22.5 degrees, fan level 3, eco mode on, on Monday and Tuesday, "
               "starting at 07:00. Use the tool.")
PARALLEL_PROMPT = ("Set the living room thermostat to 21 degrees and the bedroom thermostat to 18 degrees, fan level "
                   "1, eco mode off, every day from 06:00. Call the tool once for each room.")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
          "required": ["city", "population"], "additionalProperties": False}
SCHEMA_PROMPT = "Give the largest city of Japan and its population as JSON."
SEED_PROMPT = "Write one sentence about the sea."


class EndpointError(Exception):
    pass


@dataclass
class Completion:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"index", "id", "name", "arguments"}
    finish_reason: str | None = None
    tokens: int | None = None  # usage.completion_tokens, when the server says
    problems: list[str] = field(default_factory=list)  # what the stream itself got wrong


def request(url: str, body: dict[str, Any], timeout: float = REQUEST_TIMEOUT_S) -> Completion:
    """One /v1/chat/completions request, streamed or not, as one Completion (the probe's
    served checks and the conformance checks both ask through here)."""
    req = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            if body.get("stream"):
                return _assemble(response)
            data = json.loads(response.read(MAX_STREAM_BYTES))
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise EndpointError(f"the endpoint {url} did not answer a chat request: {err}") from None
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise EndpointError(f"the endpoint's reply is not a chat completion: {str(data)[:200]}") from None
    calls = [{"index": i, "id": c.get("id"), "name": (c.get("function") or {}).get("name"),
              "arguments": (c.get("function") or {}).get("arguments")}
             for i, c in enumerate(message.get("tool_calls") or [])]
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Completion(message.get("content") or "", message.get("reasoning_content") or message.get("reasoning") or "",
                      calls, choice.get("finish_reason"), usage.get("completion_tokens"))


def _assemble(response) -> Completion:
    """The SSE stream's deltas, put together as a client library does."""
    out = Completion()
    calls: dict[int, dict[str, Any]] = {}
    read = 0
    for raw in response:
        read += len(raw)
        if read > MAX_STREAM_BYTES:
            out.problems.append("the stream exceeded 4 MB")
            break
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            break
        try:
            chunk = json.loads(payload)
            choice = chunk["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            out.problems.append(f"a chunk that is not JSON: {payload[:80]!r}")
            continue
        delta = choice.get("delta") or {}
        out.content += delta.get("content") or ""
        out.reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
        for part in delta.get("tool_calls") or []:
            index = part.get("index")
            if not isinstance(index, int):
                out.problems.append(f"a tool-call delta without an index: {str(part)[:80]}")
                continue
            call = calls.setdefault(index, {"index": index, "id": None, "name": None, "arguments": ""})
            if part.get("id"):
                if call["id"] not in (None, part["id"]):
                    out.problems.append(f"index {index} carries two ids ({call['id']}, {part['id']})")
                call["id"] = part["id"]
            function = part.get("function") or {}
            if function.get("name"):
                call["name"] = function["name"] if call["name"] is None else call["name"]
            call["arguments"] += function.get("arguments") or ""
        if choice.get("finish_reason"):
            out.finish_reason = choice["finish_reason"]
    out.tool_calls = [calls[i] for i in sorted(calls)]
    return out


def validate(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """The JSON Schema subset tool parameters use: type, properties, required, items,
    additionalProperties false. Each problem names where it is."""
    kinds = {"string": str, "number": (int, float), "integer": int, "boolean": bool, "array": list, "object": dict,
             "null": type(None)}
    expected = schema.get("type")
    if isinstance(expected, str) and expected in kinds:
        ok = isinstance(value, kinds[expected]) and not (expected in ("number", "integer") and isinstance(value, bool))
        if not ok:
            return [f"{where or 'the value'} is {json.dumps(value)[:40]} ({type(value).__name__}), not {expected}"]
    problems: list[str] = []
    if isinstance(value, dict):
        for key in schema.get("required") or []:
            if key not in value:
                problems.append(f"{where}/{key} is missing")
        properties = schema.get("properties") or {}
        for key, item in value.items():
            if key in properties:
                problems += validate(item, properties[key], f"{where}/{key}")
            elif schema.get("additionalProperties") is False:
                problems.append(f"{where}/{key} is not in the schema")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += validate(item, schema["items"], f"{where}/{i}")
    return problems


def _base(model: str, prompt: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0, "seed": 7,
            "max_tokens": 128, **extra}


def tool_checks(url: str, model: str) -> list[CheckResult]:
    body = _base(model, TOOL_PROMPT, tools=[WEATHER_TOOL], tool_choice="auto")
    plain = request(url, body)
    if not plain.tool_calls:
        why = (f"the model answered in text ({plain.content[:60]!r}) instead of calling the tool: a model or template "
               "that cannot call tools, or a server without a tool-call parser")
        return [CheckResult("tool-call-arguments", "not-applicable", why),
                CheckResult("tool-call-stream", "not-applicable", why),
                CheckResult("tool-call-parallel", "not-applicable", why)]
    results = []
    call = plain.tool_calls[0]
    try:
        arguments = json.loads(call["arguments"]) if isinstance(call["arguments"], str) else None
    except ValueError:
        arguments = None
    if arguments is None:
        results.append(CheckResult("tool-call-arguments", "failed",
                                   f"the arguments are not a JSON string: {str(call['arguments'])[:120]!r}"))
    else:
        problems = validate(arguments, WEATHER_TOOL["function"]["parameters"])
        results.append(CheckResult("tool-call-arguments", "failed" if problems else "passed",
                                   "; ".join(problems[:4]) if problems else
                                   f"{call['name']}({call['arguments'][:100]}) validates against the schema"))
    streamed = request(url, {**body, "stream": True})
    detail = _stream_difference(plain, streamed)
    results.append(CheckResult("tool-call-stream", "failed" if detail else "passed",
                               detail or f"{len(streamed.tool_calls)} streamed call(s) assemble into the non-streamed "
                                         "ones (index, id, name, arguments)"))
    results.append(parallel_calls(url, model))
    return results


def parallel_calls(url: str, model: str) -> CheckResult:
    """Two calls in one turn: streamed, each keeps its own index (and id), and the assembled
    calls are the non-streamed ones, in order."""
    body = _base(model, PARALLEL_PROMPT, tools=[WEATHER_TOOL], tool_choice="auto", parallel_tool_calls=True)
    plain = request(url, body)
    if len(plain.tool_calls) < 2:
        return CheckResult("tool-call-parallel", "not-applicable", f"the model made {len(plain.tool_calls)} call(s) "
                           "where two were asked for: no parallel calls to check")
    streamed = request(url, {**body, "stream": True})
    detail = _stream_difference(plain, streamed)
    if detail is None and len({c["id"] for c in streamed.tool_calls}) < len(streamed.tool_calls):
        detail = "two streamed calls share one id"
    return CheckResult("tool-call-parallel", "failed" if detail else "passed",
                       detail or f"{len(plain.tool_calls)} parallel calls keep their indices and ids apart, streamed "
                                 "and not")


def _stream_difference(plain: Completion, streamed: Completion) -> str | None:
    if streamed.problems:
        return streamed.problems[0]
    if len(streamed.tool_calls) != len(plain.tool_calls):
        return f"{len(streamed.tool_calls)} streamed calls, {len(plain.tool_calls)} non-streamed"
    for a, b in zip(plain.tool_calls, streamed.tool_calls):
        if a["name"] != b["name"]:
            return f"the streamed call {b['index']} is {b['name']!r}, not {a['name']!r}"
        try:
            same = json.loads(b["arguments"]) == json.loads(a["arguments"])
        except (ValueError, TypeError):
            return f"the streamed arguments of call {b['index']} do not assemble into JSON: {b['arguments'][:120]!r}"
        if not same:
            return f"the streamed arguments differ: {b['arguments'][:80]!r} against {a['arguments'][:80]!r}"
    return None


def seed_parity(url: str, model: str, seeded: bool) -> CheckResult:
    body = _base(model, SEED_PROMPT, temperature=0.8, max_tokens=48)
    alone = request(url, body).content
    noise: list[str] = []

    def other(i: int) -> None:
        try:
            noise.append(request(url, _base(model, f"Count from {i} to {i + 20}.", max_tokens=64)).content)
        except EndpointError:
            pass

    threads = [threading.Thread(target=other, args=(i,)) for i in range(CONCURRENT)]
    for t in threads:
        t.start()
    time.sleep(OVERLAP_DELAY_S)  # the others are being generated when this one arrives
    busy = request(url, body).content
    for t in threads:
        t.join(REQUEST_TIMEOUT_S)
    streamed = request(url, {**body, "stream": True}).content
    cached = request(url, body).content  # the same prefix again: a prefix-cache hit where there is a cache
    runs = {"while other requests ran": busy, "streamed": streamed, "after a prefix-cache hit": cached}
    differ = {label: text for label, text in runs.items() if text != alone}
    if not differ:
        return CheckResult("seed-parity", "passed", "the same seeded request gave the same completion alone, under "
                           "concurrency, streamed and after a cache hit")
    label, text = next(iter(differ.items()))
    at = next((i for i, (x, y) in enumerate(zip(alone, text)) if x != y), min(len(alone), len(text)))
    detail = (f"{label}: the completion differs from the request alone at character {at} "
              f"({alone[at:at + 20]!r} against {text[at:at + 20]!r})")
    if seeded:
        return CheckResult("seed-parity", "failed", detail)
    return CheckResult("seed-parity", "inconclusive", detail + "; the server does not promise seeded determinism "
                       "(pass --seeded when it does, and this fails)")


def structured_output(url: str, model: str) -> CheckResult:
    format_ = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}
    body = _base(model, SCHEMA_PROMPT, response_format=format_)
    for label, reply in (("non-streamed", request(url, body)), ("streamed", request(url, {**body, "stream": True}))):
        try:
            value = json.loads(reply.content)
        except ValueError:
            return CheckResult("structured-output", "failed",
                               f"the {label} reply is not JSON: {reply.content[:100]!r}")
        problems = validate(value, SCHEMA)
        if problems:
            return CheckResult("structured-output", "failed", f"the {label} reply does not validate: {problems[0]}")
    return CheckResult("structured-output", "passed", "strict json_schema output is valid and validates, streamed "
                       "and not")


def reasoning_separated(url: str, model: str, parser: str | None) -> CheckResult:
    if parser is None:
        return CheckResult("reasoning-separated", "not-applicable", "the card names no reasoning parser")
    reply = request(url, _base(model, SEED_PROMPT, max_tokens=256))
    if "<think>" in reply.content or "</think>" in reply.content:
        return CheckResult("reasoning-separated", "failed", f"with --reasoning-parser {parser}, reasoning came back "
                           f"inside content: {reply.content[:100]!r}")
    if not reply.reasoning:
        return CheckResult("reasoning-separated", "inconclusive", "no reasoning_content in the reply (the model may "
                           "not have reasoned)")
    return CheckResult("reasoning-separated", "passed", "reasoning arrives in reasoning_content, apart from content")


def kwargs_honoured(url: str, model: str) -> CheckResult:
    """chat_template_kwargs reach the template: enable_thinking=false must stop the reasoning."""
    on = request(url, _base(model, SEED_PROMPT, chat_template_kwargs={"enable_thinking": True}))
    off = request(url, _base(model, SEED_PROMPT, chat_template_kwargs={"enable_thinking": False}))

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
UNSUPPORTED = {"transformers serve": {"structured-output": "transformers serve does not implement response_format "
                                                           "json_schema (it is ignored, not enforced)"}}


def conformance(url: str, model: str, *, seeded: bool = False, reasoning_parser: str | None = None,
                server: str = "external") -> list[CheckResult]:
    """Every served-conformance check against the endpoint (errors become failed checks)."""
    results: list[CheckResult] = []
    unsupported = UNSUPPORTED.get(server, {})

    def structured() -> list[CheckResult]:
        if "structured-output" in unsupported:
            return [CheckResult("structured-output", "not-applicable", unsupported["structured-output"])]
        return [structured_output(url, model)]

    for name, run in (("tool-call-arguments", lambda: tool_checks(url, model)),
                      ("seed-parity", lambda: [seed_parity(url, model, seeded)]),
                      ("structured-output", structured),
                      ("kwargs-honoured", lambda: [kwargs_honoured(url, model)]),
                      ("reasoning-separated", lambda: [reasoning_separated(url, model, reasoning_parser)])):
        try:
            results += run()
        except EndpointError as err:
            results.append(CheckResult(name, "failed", str(err)))
    return results
