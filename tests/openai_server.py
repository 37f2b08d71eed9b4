"""An OpenAI-compatible chat server on 127.0.0.1 that misbehaves on purpose, for the probe's
served-conformance tests. A fake model answers deterministically; each mode breaks one
thing a serving test suite checks (the MLX server incident of issue 25):

- good: everything right;
- dup-stream-args: streamed tool-call arguments repeat the whole JSON object at the end;
- string-values: tool-call argument values arrive as strings ("22.5", "3", "True");
- parallel-indices: two parallel calls are streamed under one index;
- seed-drift: the same seeded request gives another completion while other requests run;
- broken-strict-stream: strict json_schema output, when streamed, is cut into invalid JSON;
- drop-kwargs: chat_template_kwargs are ignored (the model always reasons).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("good", "dup-stream-args", "string-values", "parallel-indices", "seed-drift", "broken-strict-stream",
         "drop-kwargs")
ARGUMENTS = {"room": "living room", "celsius": 22.5, "fan_level": 3, "eco": True, "days": ["Monday", "Tuesday"],
             "schedule": {"start": "07:00"}}
CITY = {"city": "Tokyo", "population": 13960000}


class FakeOpenAI:
    def __init__(self, mode: str = "good"):
        assert mode in MODES
        self.mode = mode
        self.active = 0
        self.last_other = -1e9  # when a request of another prompt last arrived
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        handler = type("Handler", (_Handler,), {"server_state": self})
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def start(self) -> "FakeOpenAI":
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def _sentence(prompt: str, seed, drift: bool) -> str:
    digest = hashlib.sha256(f"{prompt}|{seed}|{'drift' if drift else ''}".encode()).hexdigest()
    words = ["waves", "salt", "blue", "tide", "deep", "light", "wind", "shore"]
    return "The sea is " + " ".join(words[int(c, 16) % len(words)] for c in digest[:6]) + "."


class _Handler(BaseHTTPRequestHandler):
    server_state: FakeOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            return self._json(200, {"data": [{"id": "fake-model"}]})
        self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        state = self.server_state
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        prompt = body["messages"][-1]["content"]
        with state.lock:
            state.active += 1
            if prompt.startswith("Count from"):
                state.last_other = time.monotonic()
            # Overlapping another request (or right after one: the fake model's batch is still warm).
            busy = state.active > 1 or time.monotonic() - state.last_other < 5
            state.requests.append(body)
        try:
            if prompt.startswith("Count from"):
                time.sleep(0.6)  # the other requests of the concurrency check stay in flight
            message, finish = self._answer(body, busy)
        finally:
            with state.lock:
                state.active -= 1
        if body.get("stream"):
            return self._stream(body, message, finish)
        self._json(200, {"id": "x", "object": "chat.completion", "model": body.get("model"),
                         "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                      "finish_reason": finish}],
                         "usage": {"completion_tokens": 12}})

    def _answer(self, body: dict, busy: bool) -> tuple[dict, str]:
        mode = self.server_state.mode
        prompt = body["messages"][-1]["content"]
        if body.get("tools"):
            arguments = ARGUMENTS
            if mode == "string-values":
                arguments = {k: v if isinstance(v, (str, list, dict)) else str(v) for k, v in ARGUMENTS.items()}
            rooms = [arguments]
            if "bedroom" in prompt:  # two calls asked for in one turn
                rooms = [dict(arguments, room="living room", celsius=21.0), dict(arguments, room="bedroom", celsius=18.0)]
            calls = [{"id": f"call_{i + 1}", "type": "function",
                      "function": {"name": "set_thermostat", "arguments": json.dumps(room)}} for i, room in enumerate(rooms)]
            return {"content": None, "tool_calls": calls}, "tool_calls"
        if body.get("response_format", {}).get("type") == "json_schema":
            return {"content": json.dumps(CITY)}, "stop"
        kwargs = body.get("chat_template_kwargs") or {}
        thinking = True if mode == "drop-kwargs" else kwargs.get("enable_thinking", True)
        drift = mode == "seed-drift" and busy
        message = {"content": _sentence(prompt, body.get("seed"), drift)}
        if thinking:
            message["reasoning_content"] = "The user wants one sentence."
        return message, "stop"

    def _stream(self, body: dict, message: dict, finish: str) -> None:
        mode = self.server_state.mode
        chunks: list[dict] = []
        if message.get("tool_calls"):
            single = len(message["tool_calls"]) == 1
            for index, call in enumerate(message["tool_calls"]):
                arguments = call["function"]["arguments"]
                pieces = [arguments[i:i + 7] for i in range(0, len(arguments), 7)]
                if mode == "dup-stream-args" and single:
                    pieces.append(arguments)  # the whole object again, as in the incident
                sent = 0 if mode == "parallel-indices" else index
                chunks.append({"tool_calls": [{"index": sent, "id": call["id"], "type": "function",
                                               "function": {"name": call["function"]["name"], "arguments": ""}}]})
                chunks += [{"tool_calls": [{"index": sent, "function": {"arguments": p}}]} for p in pieces]
        else:
            content = message.get("content") or ""
            if mode == "broken-strict-stream" and body.get("response_format"):
                content = content[: len(content) // 2]
            if message.get("reasoning_content"):
                chunks.append({"reasoning_content": message["reasoning_content"]})
            chunks += [{"content": content[i:i + 5]} for i in range(0, len(content), 5)]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in chunks]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        for event in events:
            self._chunk(f"data: {json.dumps(event)}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
