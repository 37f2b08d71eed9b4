"""The served tool-call checks: arguments, streaming, parallel calls, and tool_choice.

- tool-call-arguments: a non-streamed tool call's arguments are JSON that validates against
  the function's schema, types included (numbers, integers, booleans, arrays, objects, not
  their string spellings);
- tool-call-stream: the streamed deltas (index, id, name, argument fragments) assemble into
  exactly the non-streamed call;
- tool-call-parallel: two calls asked for in one turn keep their own indices and ids when
  streamed, and assemble into the non-streamed calls (not-applicable when the model makes one);
- tool-choice-honoured: a named tool_choice and "required" give a call to that function,
  streamed and not, and "none" gives none (OpenAI's semantics; agents and extraction
  pipelines force calls this way).

A small model often answers in text where it could call the tool. The checks then force the
call with a named tool_choice, as a conformant server constrains the output to it, so that the
argument, stream and parallel checks still have a call to judge; a server that ignores the
constraint fails tool-choice-honoured, and the others are inconclusive, saying so.
"""

from __future__ import annotations

import json
from typing import Any

from hfdoctor.probe.checks import CheckResult
from hfdoctor.probe.client import Completion, Deadline, EndpointError, request

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
TOOL_NAME = WEATHER_TOOL["function"]["name"]
NAMED_CHOICE = {"type": "function", "function": {"name": TOOL_NAME}}
# A call that fits the schema (what a correct server returns for TOOL_PROMPT).
ARGUMENT_TYPES_EXAMPLE = {"room": "living room", "celsius": 22.5, "fan_level": 3, "eco": True,
                          "days": ["Monday", "Tuesday"], "schedule": {"start": "07:00"}}
TOOL_PROMPT = ("Set the living room thermostat to 22.5 degrees, fan level 3, eco mode on, on Monday and Tuesday, "
               "starting at 07:00. Use the tool.")
PARALLEL_PROMPT = ("Set the living room thermostat to 21 degrees and the bedroom thermostat to 18 degrees, fan level "
                   "1, eco mode off, every day from 06:00. Call the tool once for each room.")


def base(model: str, prompt: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0, "seed": 7,
            "max_tokens": 128, **extra}


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


def _loads(text: Any) -> Any:
    """JSON arguments, or None (not a string, not JSON, or nested too deep)."""
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def tool_checks(url: str, model: str, deadline: Deadline, force: bool = True) -> list[CheckResult]:
    """The argument, stream and parallel checks; `force`: retry with a named tool_choice when
    the model answers in text (False for a server known not to implement tool_choice)."""
    body = base(model, TOOL_PROMPT, tools=[WEATHER_TOOL], tool_choice="auto")
    plain = request(url, body, deadline)
    forced = ""
    if not plain.tool_calls and not force:
        why = (f"the model answered in text ({plain.content[:60]!r}) instead of calling the tool, and the server "
               "cannot be made to (it does not implement tool_choice)")
        return [CheckResult(name, "not-applicable", why)
                for name in ("tool-call-arguments", "tool-call-stream", "tool-call-parallel")]
    if not plain.tool_calls:
        said = plain.content[:60]
        # Named first (what the clients send); "required" is the same with one tool, and
        # some servers implement only the string forms.
        for choice, how in ((NAMED_CHOICE, f"naming {TOOL_NAME}"), ("required", '"required"')):
            body = {**body, "tool_choice": choice}
            plain = request(url, body, deadline)
            if plain.tool_calls:
                forced = f" (forced with tool_choice {how}: the model answered in text with tool_choice auto)"
                break
        else:
            why = (f"no tool call to judge: the model answered in text ({said!r}) with tool_choice auto, and again "
                   f"({plain.content[:60]!r}) with a tool_choice naming {TOOL_NAME} and with \"required\", which a "
                   "conformant server must honour (see tool-choice-honoured)")
            return [CheckResult(name, "inconclusive", why)
                    for name in ("tool-call-arguments", "tool-call-stream", "tool-call-parallel")]
    results = []
    call = plain.tool_calls[0]
    arguments = _loads(call["arguments"])
    if arguments is None:
        results.append(CheckResult("tool-call-arguments", "failed",
                                   f"the arguments are not a JSON string: {str(call['arguments'])[:120]!r}{forced}"))
    else:
        problems = validate(arguments, WEATHER_TOOL["function"]["parameters"])
        shown = "; ".join(problems[:4]) if problems else \
            f"{call['name']}({call['arguments'][:100]}) validates against the schema"
        results.append(CheckResult("tool-call-arguments", "failed" if problems else "passed", shown + forced))
    streamed = request(url, {**body, "stream": True}, deadline)
    detail = _stream_difference(plain, streamed)
    results.append(CheckResult("tool-call-stream", "failed" if detail else "passed",
                               (detail or f"{len(streamed.tool_calls)} streamed call(s) assemble into the non-streamed "
                                          "ones (index, id, name, arguments)") + forced))
    try:
        results.append(parallel_calls(url, model, Deadline.for_check(deadline.run()), body["tool_choice"], forced))
    except EndpointError as err:
        results.append(CheckResult("tool-call-parallel", "inconclusive" if deadline.run_over() else "failed",
                                   str(err)))
    return results


def parallel_calls(url: str, model: str, deadline: Deadline, choice: Any = "auto", forced: str = "") -> CheckResult:
    """Two calls in one turn: streamed, each keeps its own index (and id), and the assembled
    calls are the non-streamed ones, in order. `choice`: the tool_choice that made the model call."""
    body = base(model, PARALLEL_PROMPT, tools=[WEATHER_TOOL], tool_choice=choice, parallel_tool_calls=True)
    plain = request(url, body, deadline)
    if len(plain.tool_calls) < 2:
        return CheckResult("tool-call-parallel", "not-applicable", f"the model made {len(plain.tool_calls)} call(s) "
                           f"where two were asked for: no parallel calls to check{forced}")
    streamed = request(url, {**body, "stream": True}, deadline)
    detail = _stream_difference(plain, streamed)
    if detail is None and len({c["id"] for c in streamed.tool_calls}) < len(streamed.tool_calls):
        detail = "two streamed calls share one id"
    return CheckResult("tool-call-parallel", "failed" if detail else "passed",
                       (detail or f"{len(plain.tool_calls)} parallel calls keep their indices and ids apart, streamed "
                                   "and not") + forced)


def _stream_difference(plain: Completion, streamed: Completion) -> str | None:
    if streamed.problems:
        return streamed.problems[0]
    if len(streamed.tool_calls) != len(plain.tool_calls):
        return f"{len(streamed.tool_calls)} streamed calls, {len(plain.tool_calls)} non-streamed"
    for a, b in zip(plain.tool_calls, streamed.tool_calls):
        if a["name"] != b["name"]:
            return f"the streamed call {b['index']} is {b['name']!r}, not {a['name']!r}"
        first, second = _loads(a["arguments"]), _loads(b["arguments"])
        if second is None:
            return f"the streamed arguments of call {b['index']} do not assemble into JSON: {b['arguments'][:120]!r}"
        if first != second:
            return f"the streamed arguments differ: {b['arguments'][:80]!r} against {str(a['arguments'])[:80]!r}"
    return None


def tool_choice_honoured(url: str, model: str, deadline: Deadline) -> CheckResult:
    """named and "required" must give a call to the function, "none" no call; streamed and not."""
    failures: list[str] = []
    for label, choice in ((f"naming {TOOL_NAME}", NAMED_CHOICE), ('"required"', "required"), ('"none"', "none")):
        for stream in (False, True):
            how = f"tool_choice {label}, {'streamed' if stream else 'not streamed'}"
            body = base(model, TOOL_PROMPT, tools=[WEATHER_TOOL], tool_choice=choice, stream=stream)
            try:
                reply = request(url, body, deadline)
            except EndpointError as err:
                if deadline.run_over():
                    return CheckResult("tool-choice-honoured", "inconclusive", f"{how}: {err}")
                failures.append(f"{how}: {err}")
                continue
            names = [c["name"] for c in reply.tool_calls]
            if choice == "none" and names:
                failures.append(f"{how}: the reply called {names[0]!r} anyway")
            elif choice != "none" and not names:
                failures.append(f"{how}: no tool call, the model answered in text ({reply.content[:60]!r})")
            elif choice != "none" and any(name != TOOL_NAME for name in names):
                failures.append(f"{how}: a call to {next(n for n in names if n != TOOL_NAME)!r}, not {TOOL_NAME!r}")
    if failures:
        more = f" (and {len(failures) - 2} more)" if len(failures) > 2 else ""
        return CheckResult("tool-choice-honoured", "failed", "; ".join(failures[:2]) + more +
                           ": clients that force a call (agents, extraction) break on this server")
    return CheckResult("tool-choice-honoured", "passed", f"a named and a \"required\" tool_choice gave a call to "
                       f"{TOOL_NAME}, and \"none\" gave none, streamed and not")
