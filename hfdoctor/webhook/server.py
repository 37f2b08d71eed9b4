"""The HTTP side of the runner: the standard library's threading server, every read bounded.

- `POST /webhook`: the secret first (X-Webhook-Secret, compared in constant time: 401 when it is
  wrong or missing), then the size (Content-Length, 413 past MAX_BODY, never read), then the
  payload (400 when it is not the Hub's), then the runner's answer (202, 429). Nothing waits for
  the work: the answer comes as soon as the delivery is queued.
- `GET /health`: the runner's counts as JSON (503 while it stops). `GET /`: a plain page of the
  recent runs and their verdicts; outside text is escaped, and private repositories are not named.
- A client has READ_DEADLINE_S for its whole request, headers and body together, however slowly
  it sends (a slowloris holds nothing longer); at most MAX_CONNECTIONS are served at once, and
  one more is refused at once (503) rather than queued.
- Nothing is logged of a request but its method, path and status: never a header (the secret),
  never a query string.

`Service` is the runner and the server together, started and stopped by the caller (tests);
`serve` is the command: it runs a Service until SIGTERM or SIGINT, then stops it cleanly.
"""

from __future__ import annotations

import hmac
import html
import io
import json
import logging
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from hfdoctor import __version__
from hfdoctor.report.inert import visible
from hfdoctor.webhook.hub import HubCalls, session_timeout
from hfdoctor.webhook.payload import MalformedPayload, delivery_id_of, read_delivery
from hfdoctor.webhook.runner import Runner
from hfdoctor.webhook.work import Settings, Work

log = logging.getLogger("hfdoctor.webhook")

MAX_BODY = 1024 * 1024  # a Hub payload is a few kilobytes
READ_DEADLINE_S = 10.0
WRITE_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 7860
    secret: str | None = None  # None only with --insecure-no-secret
    workers: int = 2
    queue_size: int = 64
    hub_timeout_s: float = 30.0  # one Hub request
    hub_attempts: int = 4
    hub_backoff_s: float = 1.0
    grace_s: float = 20.0  # on SIGTERM, what runs gets this long to finish
    read_deadline_s: float = READ_DEADLINE_S


class _DeadlineReader(io.RawIOBase):
    """A socket read with one deadline for the whole request (socket timeouts bound one read only)."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took longer than the runner allows")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    server: "WebhookServer"
    server_version = "hfdoctor-webhook"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own file object: its reads have no overall deadline
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, time.monotonic() + self.server.read_deadline_s))

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # the base class logs the request line (a query string may hold a secret): see log_request

    def log_request(self, code="-", size="-") -> None:
        path = urlsplit(self.path).path if isinstance(self.path, str) else "?"
        log.debug("%s %s %s", visible(str(self.command)), visible(path[:200]), code)

    def _answer(self, code: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.connection.settimeout(WRITE_TIMEOUT_S)
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, data: dict, headers: dict[str, str] | None = None) -> None:
        self._answer(code, json.dumps(data).encode() + b"\n", "application/json", headers)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/health":
            health = self.server.runner.health()
            return self._json(200 if health["status"] == "ok" else 503, health)
        if path == "/":
            return self._answer(200, status_page(self.server.runner).encode(), "text/html; charset=utf-8",
                                {"Content-Security-Policy": "default-src 'none'"})
        self._json(404, {"error": "not found: POST /webhook, GET /health, GET /"})

    do_HEAD = do_GET

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/webhook":
            return self._json(404, {"error": "not found: POST /webhook"})
        if not self.server.secret_matches(self.headers.get("X-Webhook-Secret")):
            return self._json(401, {"error": "the X-Webhook-Secret header does not match the runner's secret"})
        length = self.headers.get("Content-Length", "")
        if not (length.isascii() and length.isdigit()):
            return self._json(400, {"error": "a Content-Length is required"})
        if int(length) > MAX_BODY:
            return self._json(413, {"error": f"the payload is over {MAX_BODY} bytes"})
        body = self.rfile.read(int(length))
        if len(body) != int(length):
            return self._json(400, {"error": "the payload ended before its Content-Length"})
        try:
            delivery = read_delivery(body, delivery_id_of(self.headers.get("Webhook-Id")))
        except MalformedPayload as err:
            return self._json(400, {"error": f"not a Hub webhook payload: {err}"})
        code, answer = self.server.runner.submit(delivery)
        self._json(code, answer, {"Retry-After": "30"} if code == 429 else None)

    def do_PUT(self) -> None:
        self._json(405, {"error": "POST /webhook, GET /health, GET /"}, {"Allow": "GET, HEAD, POST"})

    do_DELETE = do_PATCH = do_PUT


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], runner: Runner, secret: str | None, read_deadline_s: float):
        super().__init__(address, _Handler)
        self.runner = runner
        self._secret = secret.encode("utf-8") if secret is not None else None
        self.read_deadline_s = read_deadline_s
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def secret_matches(self, given: str | None) -> bool:
        if self._secret is None:  # --insecure-no-secret
            return True
        if given is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self._secret)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            try:  # every slot is taken: refuse at once rather than hold another thread
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address) -> None:
        """A bug in a handler: one line in the log (socketserver would print a traceback to stderr)."""
        kind, err, _ = sys.exc_info()
        log.error("a request failed inside the runner: %s", visible(f"{getattr(kind, '__name__', kind)}: {err}"))


def status_page(runner: Runner) -> str:
    health = runner.health()
    rows = []
    for run in reversed(list(runner.history)):
        when = datetime.fromtimestamp(run.received, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        cells = [str(run.number), when, run.repo, run.what, run.state, run.verdict]
        rows.append("<tr>" + "".join(f"<td>{html.escape(visible(c))}</td>" for c in cells) + "</tr>")
    counts = ", ".join(f"{n} {what}" for what, n in health["deliveries"].items()) or "no delivery yet"
    return "\n".join([
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8"><title>hfdoctor webhook runner</title></head>',
        "<body>", "<h1>hfdoctor webhook runner</h1>",
        f"<p>hfdoctor {html.escape(__version__)}: {health['queued']} of {health['queue_size']} queued, "
        f"{health['running']} running on {health['workers']} workers. Deliveries: {html.escape(counts)}.</p>",
        "<table><thead><tr><th>run</th><th>received (UTC)</th><th>repository</th><th>what</th><th>state</th>"
        "<th>verdict</th></tr></thead><tbody>", *rows, "</tbody></table>", "</body></html>", ""])


class Service:
    """The runner and its HTTP server, started and stopped by the caller."""

    def __init__(self, config: ServeConfig, settings: Settings, token: str, endpoint: str):
        self.config = config
        self.hub = HubCalls(token, endpoint, attempts=config.hub_attempts, backoff_s=config.hub_backoff_s)
        self.runner = Runner(Work(settings, self.hub), workers=config.workers, queue_size=config.queue_size)
        self.server = WebhookServer((config.host, config.port), self.runner, config.secret, config.read_deadline_s)
        self._timeout = session_timeout(config.hub_timeout_s)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "Service":
        self._timeout.__enter__()
        self.runner.start()
        self._thread = threading.Thread(target=self.server.serve_forever, name="hfdoctor-webhook-http", daemon=True)
        self._thread.start()
        return self

    def stop(self, grace_s: float | None = None) -> dict[str, int]:
        """No new delivery is taken; what runs gets `grace_s` (the config's by default) to finish."""
        self.server.shutdown()
        self.server.server_close()
        try:
            return self.runner.stop(self.config.grace_s if grace_s is None else grace_s)
        finally:
            self._timeout.__exit__(None, None, None)


def serve(config: ServeConfig, settings: Settings, token: str, endpoint: str) -> int:
    """Run until SIGTERM or SIGINT; then stop taking deliveries and let the running ones finish."""
    service = Service(config, settings, token, endpoint).start()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info("hfdoctor %s webhook runner on %s: POST /webhook, GET /health, GET / (%d workers, queue of %d)",
             __version__, service.url, config.workers, config.queue_size)
    while not stop.wait(1.0):
        pass
    log.info("stopping: no new deliveries; %g s for the running ones", config.grace_s)
    service.stop()
    log.info("stopped")
    return 0
