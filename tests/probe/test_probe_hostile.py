"""`probe --endpoint` against a hostile server on 127.0.0.1 (tests/openai_server.py, one mode
for each class of issue 31): the probe ends, within its deadlines and a memory cap, with a
failed check that names what was wrong (exit 1), valid JSON and no traceback, and it connects
nowhere but the server it was given.

The command line runs in a child process under the audit hook of the hostile repository tests
(tests/audit_run.py), with the address space capped (RLIMIT_AS) so that a reply read without
its byte limit kills it, and with HFDOCTOR_ENDPOINT_TIMEOUT small so that a server that
drips stops the check in seconds. The subprocess timeout is a hang detector, not a speed test.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from openai_server import FakeOpenAI
from conftest import TESTS
from hfdoctor.probe import client

AUDIT_RUN = TESTS / "audit_run.py"
REQUEST_S = 2  # HFDOCTOR_ENDPOINT_TIMEOUT: each request's deadline (a check's is three times it)
HANG_S = 240
MEMORY_CAP = 1 << 30  # 1 GB of address space for the probe's process

# mode -> (the check that must fail, words its detail must hold, extra arguments)
EXPECTED = {
    "drip": ("tool-call-arguments", "within the 2 s deadline", ["--endpoint-model", "fake-model"]),
    "endless-sse": ("tool-call-stream", "within the 2 s deadline", []),
    "long-sse-line": ("tool-call-stream", "a line longer than 1 MB", []),
    "huge-models": ("models-listed", "larger than 1 MB", []),
    "models-not-object": ("models-listed", "/v1/models is an array, not an object", []),
    "deep-json": ("tool-call-arguments", "nested too deep", []),
    "wrong-types": ("tool-call-arguments", "choices[0].message.tool_calls is a string, not an array", []),
    "redirect": ("models-listed", "does not follow redirects", []),
}


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def audited_probe(url: str, args: list[str], log: Path) -> tuple[subprocess.CompletedProcess, list[dict]]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HFDOCTOR_ENDPOINT_TIMEOUT": str(REQUEST_S),
           "MALLOC_ARENA_MAX": "2"}  # glibc reserves 64 MB of address space per thread's arena otherwise
    cmd = [sys.executable, str(AUDIT_RUN), str(log), "--", "probe", "--endpoint", url, *args, "--format", "json"]
    proc = subprocess.run(cmd, cwd=log.parent, capture_output=True, text=True, env=env, timeout=HANG_S,
                          preexec_fn=_cap_memory)
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, events


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_a_hostile_server_gives_a_failed_check_naming_what_is_wrong(tmp_path, mode):
    elsewhere = FakeOpenAI("good").start()  # where the redirect points: it must never be asked
    server = FakeOpenAI(mode, redirect_to=elsewhere.url).start()
    try:
        check, words, args = EXPECTED[mode]
        proc, events = audited_probe(server.url, args, tmp_path / "audit.log")
    finally:
        server.stop()
        elsewhere.stop()
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "Error:" not in proc.stderr.split("\n")[-1], proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    by_name = {c["name"]: c for c in report["served"]["conformance"]}
    assert by_name[check]["status"] == "failed" and words in by_name[check]["detail"], by_name
    assert not elsewhere.paths, elsewhere.paths
    if mode == "drip":  # headers dripped too: the streamed requests end by the deadline as well
        assert "streamed: the endpoint did not finish answering" in by_name["tool-choice-honoured"]["detail"]
    for event in events:
        if event["event"] in ("socket.connect", "http.client.connect"):
            assert str(server.port) in json.dumps(event["args"]), event
        assert event["event"] not in ("subprocess.Popen", "os.exec", "os.posix_spawn"), event
        if event["event"] == "open-write":
            assert event["args"][0] == os.devnull, event


def test_a_tarpit_is_held_by_the_one_deadline_of_the_whole_probe(tmp_path):
    """A server that drips within each request's deadline (30 s here, 120 s by default; a check's is
    three times it) kept the probe for a check's worth of requests times the number of checks: far
    past 180 s. The whole served probe has one deadline (--endpoint-deadline): the checks it stops
    are inconclusive, not failed, and say which deadline passed."""
    server = FakeOpenAI("drip").start()
    log = tmp_path / "audit.log"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HFDOCTOR_ENDPOINT_TIMEOUT": "30", "MALLOC_ARENA_MAX": "2"}
    cmd = [sys.executable, str(AUDIT_RUN), str(log), "--", "probe", "--endpoint", server.url, "--endpoint-model",
           "fake-model", "--endpoint-deadline", "4", "--format", "json"]
    try:
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=90,
                              preexec_fn=_cap_memory)  # without the deadline: minutes (a hang detector only)
    finally:
        server.stop()
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-3000:])
    report = json.loads(proc.stdout)
    checks = report["served"]["conformance"]
    assert report["served"]["deadline_s"] == 4 and {c["status"] for c in checks} == {"inconclusive"}, checks
    assert all("deadline for the endpoint" in c["detail"] for c in checks), checks


def test_served_checks_the_run_deadline_stopped_are_inconclusive():
    """probe TARGET --endpoint: the checks compared with the in-process ones are cut the same way, and
    an inconclusive one disagrees with nothing."""
    from hfdoctor.probe import served
    from hfdoctor.probe.checks import CheckResult

    passed = client.Deadline(0.0, whole_run=True)
    endpoint = served.Endpoint("http://127.0.0.1:9", "m", "external", deadline=passed)  # never asked
    in_process = {name: CheckResult(name, "passed", "in-process") for name in ("think-on", "think-off")}
    results = served.served_checks(endpoint, in_process, 96, True)
    assert [(r.name, r.status) for r in results] == [("think-on", "inconclusive"), ("think-off", "inconclusive"),
                                                     ("stops-at-eos", "inconclusive"), ("deterministic", "inconclusive")]
    assert "deadline for the endpoint" in results[0].detail
    assert served.agreement(in_process, results, endpoint).status == "passed"


def test_every_hostile_mode_is_tested():
    from openai_server import HOSTILE_MODES

    assert set(EXPECTED) == set(HOSTILE_MODES)


# --- the readers, on any input --------------------------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["choices", "message", "delta", "content", "tool_calls", "function", "name",
                                         "arguments", "id", "index", "finish_reason", "usage", "reasoning_content",
                                         "data"]), inner, max_size=5), max_leaves=30)


class _Pieces:
    """An exchange whose reply is `pieces`, then (when endless) the last piece forever."""

    def __init__(self, pieces: list[bytes], endless: bool = False):
        self.pieces, self.endless = list(pieces), endless

    def read1(self, response) -> bytes:
        if len(self.pieces) == 1 and self.endless:
            return self.pieces[0]
        return self.pieces.pop(0) if self.pieces else b""


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_a_chat_reply_of_any_shape_is_a_completion_or_an_error_naming_the_field(value):
    try:
        done = client.completion(value)
    except client.EndpointError as err:
        assert " is " in str(err) or "empty" in str(err)
        return
    assert isinstance(done.content, str) and all(isinstance(c["name"], str) for c in done.tool_calls)


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON.map(lambda v: b"data: " + json.dumps(v).encode() + b"\n\n") | st.binary(max_size=64),
                max_size=8))
def test_a_stream_of_any_bytes_is_a_completion_or_an_error(pieces):
    try:
        done = client._assemble(_Pieces(pieces), None, None, None)
    except client.EndpointError:
        return
    assert isinstance(done.content, str) and isinstance(done.reasoning, str)
    assert all(isinstance(c["arguments"], str) for c in done.tool_calls)


def test_a_stream_is_cut_at_its_byte_limit():
    event = b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n' * 1000
    with pytest.raises(client.EndpointError, match="larger than 4 MB"):
        client._assemble(_Pieces([event], endless=True), None, None, None)


def test_deep_json_is_an_error_not_a_recursion():
    with pytest.raises(client.EndpointError, match="nested too deep"):
        client.parse_json(b"[" * 200_000 + b"]" * 200_000, "the reply")
