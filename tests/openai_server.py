"""An OpenAI-compatible chat server on 127.0.0.1 that misbehaves on purpose, for the probe's
served-conformance tests. A fake model answers deterministically, one token every TOKEN_S
(streamed as it goes, honouring max_tokens); each mode breaks one thing a serving test suite
checks (the MLX server incident of issue 25, the tool_choice and overlap gaps of issue 34):

- good: everything right;
- dup-stream-args: streamed tool-call arguments repeat the whole JSON object at the end;
- string-values: tool-call argument values arrive as strings ("22.5", "3", "True");
- parallel-indices: two parallel calls are streamed under one index;
- seed-drift: the same seeded request gives another completion while another request is open;
- completes-fast: as seed-drift, but every reply ends after a few tokens whatever max_tokens
  says, one request at a time (one slot, answered fast), so no two requests can overlap;
- broken-strict-stream: strict json_schema output, when streamed, is cut into invalid JSON;
- drop-kwargs: chat_template_kwargs are ignored (the model always reasons);
- no-auto-calls: the model answers in text with tool_choice auto; the server honours a named
  or "required" tool_choice (a small model on a conformant server);
- ignores-tool-choice: the model answers in text, whatever tool_choice says;
- required-only: as no-auto-calls, but a named tool_choice is taken for "auto" (llama-server
  reads only the string forms).

And one mode for each class of hostile server (issue 31):

- drip: chat replies come one byte a second (the body; a stream's status line and headers too);
- endless-sse: streams never end (a chunk every 50 ms);
- long-sse-line: a stream is one line that never ends;
- huge-models: /v1/models is an endless body;
- models-not-object: /v1/models is a JSON array;
- deep-json: chat replies (streamed or not) are JSON nested 100,000 deep;
- wrong-types: choices, tool_calls and content of the wrong JSON types;
- redirect: every request is redirected to `redirect_to` (another server).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("good", "dup-stream-args", "string-values", "parallel-indices", "seed-drift", "completes-fast",
         "broken-strict-stream", "drop-kwargs", "no-auto-calls", "ignores-tool-choice", "required-only")
HOSTILE_MODES = ("drip", "endless-sse", "long-sse-line", "huge-models", "models-not-object", "deep-json",
                 "wrong-types", "redirect")
ARGUMENTS = {"room": "living room", "celsius": 22.5, "fan_level": 3, "eco": True, "days": ["Monday", "Tuesday"],
             "schedule": {"start": "07:00"}}
CITY = {"city": "Tokyo", "population": 13960000}
TOKEN_S = 0.004  # a fast server: 250 tokens a second
FAST_REPLY_TOKENS = 4  # completes-fast: every reply ends here
HOSTILE_CAP_S = 60  # a hostile reply stops on its own after this long (the client should leave far earlier)
DEEP = 100_000


class FakeOpenAI:
    def __init__(self, mode: str = "good", redirect_to: str | None = None):
        assert mode in MODES + HOSTILE_MODES
        self.mode = mode
        self.redirect_to = redirect_to
        self.active = 0
        self.lock = threading.Lock()
        self.serial = threading.Lock()
        self.requests: list[dict] = []
        self.paths: list[str] = []
        handler = type("Handler", (_Handler,), {"server_state": self})
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http.daemon_threads = True

    @property
    def port(self) -> int:
        return self.http.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the client left (a cancelled stream, a deadline): nothing to answer

    def _json(self, code: int, body) -> None:
        self._raw(code, json.dumps(body).encode())

    def _raw(self, code: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _redirected(self) -> bool:
        state = self.server_state
        if state.mode != "redirect":
            return False
        if self.command == "POST":
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(307)
        self.send_header("Location", f"{state.redirect_to}{self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    def do_GET(self) -> None:
        state = self.server_state
        state.paths.append(self.path)
        if self._redirected():
            return
        if self.path.rstrip("/") != "/v1/models":
            return self._json(404, {"error": "not found"})
        if state.mode == "huge-models":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(10 << 30))  # 10 GB promised
            self.end_headers()
            self._endless(b'{"data": [' + b'{"id": "fake-model"}, ' * 3000)
            return
        if state.mode == "models-not-object":
            return self._json(200, ["fake-model"])
        self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    def do_POST(self) -> None:
        if self.server_state.mode == "completes-fast":  # one request at a time: no two can overlap
            with self.server_state.serial:
                return self._post()
        self._post()

    def _post(self) -> None:
        state = self.server_state
        state.paths.append(self.path)
        if self._redirected():
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        with state.lock:
            state.active += 1
            busy = state.active > 1  # another request is being generated right now
            state.requests.append(body)
        self.generating = True
        try:
            if state.mode in HOSTILE_MODES and self._hostile(body):
                return
            message, finish = self._answer(body, busy)
            if body.get("stream"):
                return self._stream(body, message, finish)
            time.sleep(TOKEN_S * self._tokens(message))
            self._done()
            self._json(200, {"id": "x", "object": "chat.completion", "model": body.get("model"),
                             "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                          "finish_reason": finish}],
                             "usage": {"completion_tokens": self._tokens(message)}})
        finally:
            self._done()

    def _done(self) -> None:
        """Generation is over (before the last bytes go out: a client that has them may ask again at once)."""
        if self.generating:
            self.generating = False
            with self.server_state.lock:
                self.server_state.active -= 1

    @staticmethod
    def _tokens(message: dict) -> int:
        return max(1, len(str(message.get("content") or "").split()))

    # --- the fake model -----------------------------------------------------------

    def _calls_tool(self, body: dict) -> bool:
        mode = self.server_state.mode
        choice = body.get("tool_choice", "auto")
        if mode == "ignores-tool-choice":
            return False
        if mode == "no-auto-calls":
            return choice == "required" or isinstance(choice, dict)
        if mode == "required-only":
            return choice == "required"
        return choice != "none"

    def _answer(self, body: dict, busy: bool) -> tuple[dict, str]:
        mode = self.server_state.mode
        prompt = body["messages"][-1]["content"]
        if body.get("tools") and self._calls_tool(body):
            arguments = ARGUMENTS
            if mode == "string-values":
                arguments = {k: v if isinstance(v, (str, list, dict)) else str(v) for k, v in ARGUMENTS.items()}
            rooms = [arguments]
            if "bedroom" in prompt:  # two calls asked for in one turn
                rooms = [dict(arguments, room="living room", celsius=21.0), dict(arguments, room="bedroom", celsius=18.0)]
            calls = [{"id": f"call_{i + 1}", "type": "function",
                      "function": {"name": "set_thermostat", "arguments": json.dumps(room)}} for i, room in enumerate(rooms)]
            return {"content": None, "tool_calls": calls}, "tool_calls"
        if body.get("tools"):
            return {"content": "I would set the thermostat to 22.5 degrees."}, "stop"
        if (body.get("response_format") or {}).get("type") == "json_schema":
            return {"content": json.dumps(CITY)}, "stop"
        if prompt.startswith("Count from"):  # counts on until max_tokens, one number a token
            start = int(prompt.split()[2])
            budget = int(body.get("max_tokens") or 16)
            if mode == "completes-fast":
                return {"content": " ".join(str(start + i) for i in range(FAST_REPLY_TOKENS))}, "stop"
            return {"content": " ".join(str(start + i) for i in range(budget))}, "length"
        kwargs = body.get("chat_template_kwargs") or {}
        thinking = True if mode == "drop-kwargs" else kwargs.get("enable_thinking", True)
        drift = mode in ("seed-drift", "completes-fast") and busy
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
            words = content.split(" ")
            chunks += [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
        self._start_stream()
        events = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in chunks]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        for i, event in enumerate(events):
            if i == len(events) - 1:
                self._done()
            self._chunk(f"data: {json.dumps(event)}\n\n".encode())
            time.sleep(TOKEN_S)
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    # --- hostile replies ----------------------------------------------------------

    def _endless(self, piece: bytes, chunked: bool = False, pause: float = 0.0) -> None:
        """`piece` again and again until the client leaves (or HOSTILE_CAP_S)."""
        until = time.monotonic() + HOSTILE_CAP_S
        while time.monotonic() < until:
            if chunked:
                self._chunk(piece)
            else:
                self.wfile.write(piece)
            if pause:
                time.sleep(pause)

    def _hostile(self, body: dict) -> bool:
        """Answers as the hostile mode does; False where the mode leaves this request alone."""
        mode = self.server_state.mode
        stream = bool(body.get("stream"))
        if mode == "drip" and stream:  # even the status line and headers come a byte a second
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n":
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(1.0)
            return True
        if mode == "drip":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.flush()
            self._endless(b" ", pause=1.0)
            return True
        if mode == "endless-sse" and stream:
            self._start_stream()
            event = {"choices": [{"index": 0, "delta": {"content": "more "}, "finish_reason": None}]}
            self._endless(f"data: {json.dumps(event)}\n\n".encode(), chunked=True, pause=0.05)
            return True
        if mode == "long-sse-line" and stream:
            self._start_stream()
            self._chunk(b'data: {"choices": [{"index": 0, "delta": {"content": "')
            self._endless(b"a" * 65536, chunked=True)
            return True
        if mode == "deep-json":
            deep = b"[" * DEEP + b"]" * DEEP
            if stream:
                self._start_stream()
                self._chunk(b"data: " + deep + b"\n\n")
                self._chunk(b"")
            else:
                self._raw(200, deep)
            return True
        if mode == "wrong-types":
            if stream:
                self._start_stream()
                delta = {"tool_calls": {"index": 0}} if body.get("tools") else {"content": ["not", "text"]}
                self._chunk(f"data: {json.dumps({'choices': [{'index': 0, 'delta': delta}]})}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
            elif body.get("tools"):
                self._json(200, {"choices": [{"index": 0, "message": {"role": "assistant",
                                                                      "tool_calls": "set_thermostat"}}]})
            else:
                self._json(200, {"choices": "stop"})
            return True
        return False
