"""What a hostile client or repository can make the runner do: hold a connection (cut off at the
request's deadline, others still served), or make it write (a comment of bounded size whose
outside text is inert Markdown)."""

from __future__ import annotations

import json
import socket

import pytest

from hfdoctor.report import inert
from inert_checks import assert_markdown_inert
from hfdoctor.webhook.server import ServeConfig, Service
from hfdoctor.webhook.work import Settings
from webhook_harness import (QWEN3_TEMPLATE, SECRET, TOKEN, post, pr_payload, request, seed_files, settled,
                             start_hub, wait_until)

# Where a repository controls the text of a finding: its card's base_model, a token string, a template's file name.
HOSTILE = ("\n::error::x \x1b[31mred\u202eevil <img src=x onerror=alert(1)> <details> </sub> <!-- "
           "[a](http://x.example) <https://x.example> @someone ``tick`` www.example.com")


def hostile_files() -> dict[str, bytes]:
    files = seed_files(QWEN3_TEMPLATE)
    card = files["README.md"].decode().replace("base_model: meta-llama/Meta-Llama-3.1-8B",
                                               "base_model: " + json.dumps("meta-llama/Meta-Llama-3.1-8B" + HOSTILE))
    files["README.md"] = card.encode()
    config = json.loads(files["tokenizer_config.json"])
    config["eos_token"] = "<|im_end|>" + HOSTILE
    decoder = config.setdefault("added_tokens_decoder", {})
    for i in range(2000):  # 2,000 findings: the comment stays short
        decoder[str(200_000 + i)] = {"content": f"<extra_{i}>", "special": True, "lstrip": False, "rstrip": False,
                                     "normalized": False, "single_word": False}
    files["tokenizer_config.json"] = json.dumps(config).encode()
    return files


@pytest.fixture
def service(monkeypatch, tmp_path):
    hub = start_hub({"acme/model": seed_files(QWEN3_TEMPLATE)})
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    config = ServeConfig(port=0, secret=SECRET, read_deadline_s=1.0, hub_attempts=2, hub_backoff_s=0.05)
    running = Service(config, Settings(check_timeout_s=60), TOKEN, hub.endpoint).start()
    running.hub_server = hub
    yield running
    running.stop()
    hub.stop()


def read_until_closed(sock: socket.socket) -> bytes:
    """What the server sends before it closes the connection (a hang fails the test: socket.timeout)."""
    sock.settimeout(120)  # generous: the server's deadline is 1 s
    data = b""
    try:
        while chunk := sock.recv(1024):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def test_a_client_that_sends_slowly_is_cut_off_and_others_are_served(service):
    host, port = service.server.server_address[:2]
    stalled_headers = socket.create_connection((host, port))
    stalled_headers.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Webhook-Secret: ")  # and nothing more
    stalled_body = socket.create_connection((host, port))
    stalled_body.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Webhook-Secret: " + SECRET.encode()
                         + b"\r\nContent-Length: 1000\r\n\r\n{\"event\"")
    assert request(service.url, "GET", "/health")[0] == 200  # served meanwhile
    for sock in (stalled_headers, stalled_body):
        with sock:
            assert read_until_closed(sock) == b""  # cut off, unanswered
    assert list(service.runner.history) == []


def own_html_removed(line: str) -> str:
    """hfdoctor's own tags around a line (the collapsed line, the footnote) taken off: they hold no outside text."""
    if line.startswith("<!-- hfdoctor-webhook:") or line == "</details>":
        return ""
    if line.startswith("<details><summary>") and line.endswith("</summary>"):
        return line[len("<details><summary>"):-len("</summary>")]
    if line.startswith("<sub>") and line.endswith("</sub>"):
        return line[len("<sub>"):-len("</sub>")]
    return line


def assert_comment_inert(markdown: str) -> list[str]:
    """Outside text only in code spans (no HTML, link, image, mention) once hfdoctor's own tags are off."""
    return assert_markdown_inert("\n".join(map(own_html_removed, markdown.split("\n"))), also=("@",))


def test_a_hostile_repository_gets_a_short_inert_comment(service):
    hub = service.hub_server
    num = hub.open_pr("acme/model", hostile_files())
    assert post(service.url, pr_payload("acme/model", num))[0] == 202
    [run] = settled(service, 1)
    assert run.state == "done", run.verdicts
    [comment] = hub.comments("acme/model", num)
    assert len(comment) < 20_000 and "more (`hfdoctor check` lists them all)" in comment
    assert not set(comment) & set(map(chr, [*range(0x0A), *range(0x0B, 0x20), 0x7F, *inert.BIDI]))
    assert not any(inert.is_workflow_command(line) for line in comment.split("\n"))
    codes = assert_comment_inert(comment)
    # The hostile text reached the comment, shown as data.
    assert any("<img src=x onerror=alert(1)> <details> </sub> <!-- [a](http://x.example)" in c and "\\n::error::x" in c
               for c in codes)
    status, page = request(service.url, "GET", "/")
    assert status == 200 and "<img" not in page


def test_the_status_page_and_health_wait_for_nobody(service):
    """Idle connections hold no one up: /health and the status page answer meanwhile."""
    host, port = service.server.server_address[:2]
    idle = [socket.create_connection((host, port)) for _ in range(8)]
    try:
        assert request(service.url, "GET", "/health")[0] == 200
        assert wait_until(lambda: request(service.url, "GET", "/")[0] == 200, 60)
    finally:
        for sock in idle:
            sock.close()
