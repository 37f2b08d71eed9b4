"""The probe's HTTP client for a served endpoint: every reply is untrusted.

A server the user points `probe --endpoint` at may be broken or hostile. So every read here
has a byte limit (a body, an SSE line, a whole stream) and a total deadline (the request's,
the check's it belongs to, and the whole served probe's); a watchdog shuts the socket when the deadline passes, so a
server that drips one byte a second, or streams forever, cannot hold the probe. Redirects are
refused (a server on 127.0.0.1 must not send the probe elsewhere). Every field the checks read
is validated for its type, and a wrong shape is an EndpointError that names the field; JSON
nested too deep is an error, never a traceback.

Only the standard library (http.client) talks HTTP here.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable

# Per request, and per check (a check makes several requests); HFDOCTOR_ENDPOINT_TIMEOUT
# (seconds per request) scales both, for slow servers or for tests. The whole served probe has
# one deadline besides (--endpoint-deadline): a server that answers each request just in time
# cannot hold the probe for a check's worth of requests times the number of checks.
REQUEST_TIMEOUT_S = 120.0
RUN_DEADLINE_S = 120.0
CHECK_REQUESTS = 3  # a check's deadline is this many requests' worth
MAX_BODY_BYTES = 4 << 20  # a non-streamed reply
MAX_STREAM_BYTES = 4 << 20  # a whole SSE stream
MAX_LINE_BYTES = 1 << 20  # one SSE line
MAX_MODELS_BYTES = 1 << 20  # /v1/models
MAX_ERROR_BYTES = 4096  # what is read of an error reply, to quote it
READ_SIZE = 65536


class EndpointError(Exception):
    pass


class Unreachable(EndpointError):
    """Nothing answered at the URL (refused, no such host, no connection in time)."""


def request_timeout() -> float:
    try:
        value = float(os.environ.get("HFDOCTOR_ENDPOINT_TIMEOUT", REQUEST_TIMEOUT_S))
    except ValueError:
        return REQUEST_TIMEOUT_S
    return value if value > 0 else REQUEST_TIMEOUT_S


class Deadline:
    """A point in time (time.monotonic) after which a request or check gives up, never later than
    the `outer` one it is within; the served probe's own deadline (`whole_run`) bounds them all."""

    def __init__(self, seconds: float, outer: "Deadline | None" = None, whole_run: bool = False):
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.outer = outer
        self.whole_run = whole_run
        if outer is not None and outer.at < self.at:
            self.at = outer.at

    @classmethod
    def for_check(cls, outer: "Deadline | None" = None) -> "Deadline":
        return cls(request_timeout() * CHECK_REQUESTS, outer)

    def left(self) -> float:
        return self.at - time.monotonic()

    def run(self) -> "Deadline | None":
        """The whole run's deadline this one is within (or is), None when there is none."""
        found: Deadline | None = self
        while found is not None and not found.whole_run:
            found = found.outer
        return found

    def run_over(self) -> bool:
        """Whether the whole run's deadline has passed: what it stopped is inconclusive, never failed."""
        run = self.run()
        return run is not None and run.left() <= 0


@dataclass
class Completion:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"index", "id", "name", "arguments"}
    finish_reason: str | None = None
    tokens: int | None = None  # usage.completion_tokens, when the server says
    problems: list[str] = field(default_factory=list)  # what the stream itself got wrong (tool-call deltas)


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def expect(value: Any, kinds: type | tuple[type, ...], where: str) -> Any:
    """`value` when it is of `kinds` (bool is never a number here), else an EndpointError naming `where`."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds)
    if not ok:
        wanted = " or ".join(sorted({_type_name(k()) if k is not type(None) else "null" for k in kinds}))
        raise EndpointError(f"{where} is {_type_name(value)}, not {wanted}")
    return value


def parse_json(raw: bytes | str, what: str) -> Any:
    """JSON from a reply; str too (content that JSON escapes made hold lone surrogates is never re-encoded)."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise EndpointError(f"{what} is JSON nested too deep to read") from None
    except ValueError as err:
        raise EndpointError(f"{what} is not JSON ({err}): {raw[:80]!r}") from None


# --- the connection ---------------------------------------------------------------


class _Exchange:
    """One HTTP request on its own connection, under a watchdog that shuts the socket at the deadline."""

    def __init__(self, url: str, deadline: Deadline, stop: threading.Event | None = None):
        self.deadline = deadline
        self.url = url
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointError(f"{url} is not an http(s) URL")
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        timeout = max(0.1, min(deadline.left(), 30.0))
        try:
            port = parts.port
        except ValueError:
            raise EndpointError(f"{url} has an invalid port") from None
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self.conn = cls(parts.hostname, port, timeout=timeout)
        self.expired = False  # the deadline shut the socket
        self.cancelled = False  # the caller's stop event did
        self.finished = threading.Event()
        self.stop = stop

    def _watch(self) -> None:
        """Shuts the socket at the deadline, or when the caller's stop event is set."""
        while not self.finished.is_set():
            left = self.deadline.left()
            if left <= 0:
                self.expired = True
                break
            if self.stop is not None and self.stop.is_set():
                self.cancelled = True
                break
            self.finished.wait(min(left, 0.1) if self.stop is not None else left)
        self._shut()

    def _shut(self) -> None:
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def open(self, method: str, body: bytes | None, headers: dict[str, str]) -> http.client.HTTPResponse:
        if self.deadline.left() <= 0:
            raise EndpointError(self.timed_out())
        try:
            self.conn.connect()  # bounded by the connection's timeout (at most what the deadline leaves)
        except OSError as err:
            raise Unreachable(f"nothing answers at {self.url}: {type(err).__name__}: {err}") from None
        threading.Thread(target=self._watch, daemon=True).start()  # from here on, the socket exists to shut
        try:
            self.conn.request(method, self.path, body=body, headers=headers)
            response = self.conn.getresponse()
        except (OSError, http.client.HTTPException) as err:
            raise EndpointError(self.timed_out() if self.expired else
                                f"the endpoint {self.url} did not answer: {type(err).__name__}: {err}") from None
        if 300 <= response.status < 400:
            where = str(response.getheader("Location") or "")[:200]
            raise EndpointError(f"the endpoint answered {self.url} with a redirect ({response.status}) to {where!r}: "
                                "the probe does not follow redirects (give the URL the server answers on)")
        if response.status != 200:
            text = self.read_some(response, MAX_ERROR_BYTES).decode("utf-8", "replace")
            raise EndpointError(f"the endpoint answered {self.url} with HTTP {response.status}: {text[:300]!r}")
        return response

    def timed_out(self) -> str:
        run = self.deadline.run()
        if run is not None and run.left() <= 0:
            return (f"the probe's {run.seconds:.0f} s deadline for the endpoint (--endpoint-deadline) passed while "
                    f"{self.url} was answering")
        return f"the endpoint did not finish answering {self.url} within the {self.deadline.seconds:.0f} s deadline"

    def read1(self, response: http.client.HTTPResponse) -> bytes:
        if self.deadline.left() <= 0:
            raise EndpointError(self.timed_out())
        try:
            piece = response.read1(READ_SIZE)
        except (OSError, http.client.HTTPException, ValueError) as err:
            if self.cancelled:
                return b""
            if self.expired or self.deadline.left() <= 0:
                raise EndpointError(self.timed_out()) from None
            raise EndpointError(f"the reply from {self.url} broke off: {type(err).__name__}: {err}") from None
        if not piece and self.expired and not self.cancelled:  # the watchdog shut the socket: not the server's end
            raise EndpointError(self.timed_out())
        return piece

    def read_some(self, response: http.client.HTTPResponse, limit: int) -> bytes:
        """At most `limit` bytes (what an error reply is quoted from), never raising."""
        out = bytearray()
        try:
            while len(out) < limit:
                piece = self.read1(response)
                if not piece:
                    break
                out += piece
        except EndpointError:
            pass
        return bytes(out[:limit])

    def read_all(self, response: http.client.HTTPResponse, limit: int, what: str) -> bytes:
        out = bytearray()
        while True:
            piece = self.read1(response)
            if not piece:
                return bytes(out)
            out += piece
            if len(out) > limit:
                raise EndpointError(f"{what} is larger than {limit >> 20} MB: not read further")

    def close(self) -> None:
        self.finished.set()
        self._shut()
        self.conn.close()


def get_json(url: str, deadline: Deadline, limit: int, what: str) -> Any:
    exchange = _Exchange(url, deadline)
    try:
        response = exchange.open("GET", None, {"Accept": "application/json"})
        return parse_json(exchange.read_all(response, limit, what), what)
    finally:
        exchange.close()


# --- chat completions -------------------------------------------------------------


def request(url: str, body: dict[str, Any], deadline: Deadline | None = None,
            on_chunk: Callable[[Completion], None] | None = None,
            stop: threading.Event | None = None) -> Completion:
    """One /v1/chat/completions request, streamed or not, as one Completion (the probe's served
    checks and the conformance checks both ask through here). The request ends by its own
    deadline or the check's, whichever is first. A stream calls `on_chunk` after each chunk and
    stops reading when `stop` is set."""
    own = Deadline(request_timeout(), outer=deadline)
    if deadline is not None and own.at >= deadline.at:
        own = deadline  # the check's (or the run's) ends first: its name in messages
    target = f"{url}/v1/chat/completions"
    exchange = _Exchange(target, own, stop)
    try:
        response = exchange.open("POST", json.dumps(body).encode(), {"Content-Type": "application/json"})
        if body.get("stream"):
            return _assemble(exchange, response, on_chunk, stop)
        data = parse_json(exchange.read_all(response, MAX_BODY_BYTES, "the reply"), "the reply")
        return completion(data)
    finally:
        exchange.close()


def completion(data: Any) -> Completion:
    """A non-streamed chat completion, each field the checks read checked for its type."""
    expect(data, dict, "the reply")
    choices = expect(data.get("choices"), list, "choices")
    if not choices:
        raise EndpointError("choices is an empty array")
    choice = expect(choices[0], dict, "choices[0]")
    message = expect(choice.get("message"), dict, "choices[0].message")
    content = expect(message.get("content"), (str, type(None)), "choices[0].message.content") or ""
    reasoning = _reasoning(message, "choices[0].message")
    raw_calls = expect(message.get("tool_calls"), (list, type(None)), "choices[0].message.tool_calls") or []
    calls = []
    for i, call in enumerate(raw_calls):
        where = f"choices[0].message.tool_calls[{i}]"
        expect(call, dict, where)
        function = expect(call.get("function"), dict, f"{where}.function")
        calls.append({"index": i, "id": expect(call.get("id"), (str, type(None)), f"{where}.id"),
                      "name": expect(function.get("name"), str, f"{where}.function.name"),
                      # arguments of another type are tool-call-arguments' finding, not an error here
                      "arguments": function.get("arguments")})
    finish = expect(choice.get("finish_reason"), (str, type(None)), "choices[0].finish_reason")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    tokens = usage.get("completion_tokens")
    return Completion(content, reasoning, calls, finish, tokens if isinstance(tokens, int) else None)


def _reasoning(holder: dict[str, Any], where: str) -> str:
    for key in ("reasoning_content", "reasoning"):
        value = expect(holder.get(key), (str, type(None)), f"{where}.{key}")
        if value:
            return value
    return ""


def _lines(exchange: _Exchange, response: http.client.HTTPResponse, stop: threading.Event | None):
    """The stream's lines, each at most MAX_LINE_BYTES, all together at most MAX_STREAM_BYTES."""
    buffer = bytearray()
    read = 0
    while stop is None or not stop.is_set():
        piece = exchange.read1(response)
        if not piece:
            if buffer:
                yield bytes(buffer)
            return
        read += len(piece)
        if read > MAX_STREAM_BYTES:
            raise EndpointError(f"the stream is larger than {MAX_STREAM_BYTES >> 20} MB: not read further")
        buffer += piece
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            yield bytes(buffer[:end])
            del buffer[:end + 1]
        if len(buffer) > MAX_LINE_BYTES:
            raise EndpointError(f"the stream has a line longer than {MAX_LINE_BYTES >> 20} MB: not read further")


def _assemble(exchange: _Exchange, response: http.client.HTTPResponse,
              on_chunk: Callable[[Completion], None] | None, stop: threading.Event | None) -> Completion:
    """The SSE stream's deltas, put together as a client library does."""
    out = Completion()
    calls: dict[int, dict[str, Any]] = {}
    number = 0
    for raw in _lines(exchange, response, stop):
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            break
        number += 1
        chunk = parse_json(payload, f"stream chunk {number}")
        where = f"stream chunk {number}: choices"
        expect(chunk, dict, f"stream chunk {number}")
        choices = expect(chunk.get("choices"), list, where)
        if not choices:
            continue  # a usage-only chunk (stream_options include_usage)
        choice = expect(choices[0], dict, f"{where}[0]")
        delta = expect(choice.get("delta") or {}, dict, f"{where}[0].delta")
        out.content += expect(delta.get("content"), (str, type(None)), f"{where}[0].delta.content") or ""
        out.reasoning += _reasoning(delta, f"{where}[0].delta")
        parts = expect(delta.get("tool_calls"), (list, type(None)), f"{where}[0].delta.tool_calls") or []
        for i, part in enumerate(parts):
            _add_call_delta(out, calls, expect(part, dict, f"{where}[0].delta.tool_calls[{i}]"),
                            f"{where}[0].delta.tool_calls[{i}]")
        finish = expect(choice.get("finish_reason"), (str, type(None)), f"{where}[0].finish_reason")
        if finish:
            out.finish_reason = finish
        if on_chunk is not None:
            on_chunk(out)
    out.tool_calls = [calls[i] for i in sorted(calls)]
    return out


def _add_call_delta(out: Completion, calls: dict[int, dict[str, Any]], part: dict[str, Any], where: str) -> None:
    index = part.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        out.problems.append(f"a tool-call delta without an index: {str(part)[:80]}")
        return
    call = calls.setdefault(index, {"index": index, "id": None, "name": None, "arguments": ""})
    call_id = expect(part.get("id"), (str, type(None)), f"{where}.id")
    if call_id:
        if call["id"] not in (None, call_id):
            out.problems.append(f"index {index} carries two ids ({call['id']}, {call_id})")
        call["id"] = call_id
    function = expect(part.get("function") or {}, dict, f"{where}.function")
    name = expect(function.get("name"), (str, type(None)), f"{where}.function.name")
    if name and call["name"] is None:
        call["name"] = name
    call["arguments"] += expect(function.get("arguments"), (str, type(None)), f"{where}.function.arguments") or ""


def list_models(url: str, deadline: Deadline | None = None) -> list[str]:
    """The model ids /v1/models lists, its shape checked."""
    data = get_json(f"{url}/v1/models", Deadline(min(request_timeout(), 30.0), deadline), MAX_MODELS_BYTES,
                    "/v1/models")
    expect(data, dict, "/v1/models")
    listed = expect(data.get("data"), list, "/v1/models data")
    ids = []
    for i, item in enumerate(listed[:100]):
        expect(item, dict, f"/v1/models data[{i}]")
        ids.append(expect(item.get("id"), str, f"/v1/models data[{i}].id"))
    return ids
