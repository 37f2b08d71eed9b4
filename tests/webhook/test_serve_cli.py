"""`hfdoctor webhook serve` as a user runs it: a real process, sent deliveries, stopped with SIGTERM.
The token and the secret appear in nothing it prints or answers; it stops cleanly; it refuses to
start without a secret or a token."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading

import pytest

from webhook_harness import (BROKEN_TEMPLATE, QWEN3_TEMPLATE, SECRET, TOKEN, post, pr_payload, request, seed_files,
                             start_hub, wait_until)

LISTENING = re.compile(r"webhook runner on (http://127\.0\.0\.1:\d+)")


@pytest.fixture
def hub():
    server = start_hub({"acme/model": seed_files(QWEN3_TEMPLATE)})
    yield server
    server.stop()


def environment(hub, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HFDOCTOR_"))}
    return {**env, "HF_ENDPOINT": hub.endpoint, **extra}


def test_the_runner_never_shows_its_token_or_secret_and_stops_on_sigterm(hub, tmp_path):
    env = environment(hub, HF_TOKEN=TOKEN, HFDOCTOR_WEBHOOK_SECRET=SECRET, HF_HOME=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "hfdoctor", "webhook", "serve", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    stderr: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            stderr.append(line)
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while (found := LISTENING.search(lines.get(timeout=120))) is None:
            pass
        url = found.group(1)
        num = hub.open_pr("acme/model", seed_files(BROKEN_TEMPLATE))
        answers = [post(url, pr_payload("acme/model", num)),
                   post(url, pr_payload("acme/model", num), secret="not-it"),
                   post(url, b"{}"),
                   post(url, pr_payload("acme/missing", 1))]  # no such repository: a logged failure
        assert [status for status, _ in answers] == [202, 401, 400, 202]
        assert wait_until(lambda: len(hub.comments("acme/model", num)) == 1)
        assert wait_until(lambda: any("acme/missing" in line and "failed" in line for line in stderr))
        pages = [request(url, "GET", path)[1] for path in ("/", "/health")]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        stdout = proc.stdout.read()  # stderr is the reader's alone
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(30)
    printed = stdout + "".join(stderr) + "".join(str(a) for a in answers) + "".join(pages) + "".join(
        hub.comments("acme/model", num))
    assert proc.returncode == 0, printed
    assert "stopped" in stderr[-1]
    assert "Traceback" not in printed
    assert TOKEN not in printed and SECRET not in printed
    assert any("acme/missing pull request #1 failed: read pull request #1 of acme/missing: HTTP 404" in line
               for line in stderr), stderr


def test_it_will_not_start_without_a_secret_or_a_token(hub, tmp_path, monkeypatch, capsys):
    from hfdoctor.cli import run

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("HFDOCTOR_WEBHOOK_SECRET", raising=False)
    assert run(["webhook", "serve", "--port", "0"]) == 2
    assert "HFDOCTOR_WEBHOOK_SECRET" in capsys.readouterr().err
    assert run(["webhook", "serve", "--select", "NOPE", "--secret", SECRET]) == 2
    assert "no rule matches" in capsys.readouterr().err
    # No token anywhere (a process of its own: no stored login either).
    no_token = subprocess.run([sys.executable, "-m", "hfdoctor", "webhook", "serve", "--port", "0"],
                              env=environment(hub, HF_HOME=str(tmp_path), HFDOCTOR_WEBHOOK_SECRET=SECRET),
                              capture_output=True, text=True, timeout=120)
    assert no_token.returncode == 2 and "HF_TOKEN" in no_token.stderr
    assert SECRET not in no_token.stderr + no_token.stdout
