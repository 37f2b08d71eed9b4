"""Served conformance (hfdoctor.probe.conformance) against a misbehaving OpenAI-compatible
server on 127.0.0.1 (tests/openai_server.py): each mode fails exactly the check that names
it, and the well-behaved mode passes them all. No weights are needed: `probe --endpoint URL`.
The hostile server modes are tests/probe/test_probe_hostile.py's."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from openai_server import FakeOpenAI

from hfdoctor.probe.conformance import conformance
from hfdoctor.probe.tool_calls import ARGUMENT_TYPES_EXAMPLE, WEATHER_TOOL, validate

EXPECTED_FAILURE = {
    "dup-stream-args": "tool-call-stream",
    "string-values": "tool-call-arguments",
    "parallel-indices": "tool-call-parallel",
    "seed-drift": "seed-parity",
    "broken-strict-stream": "structured-output",
    "drop-kwargs": "kwargs-honoured",
    "ignores-tool-choice": "tool-choice-honoured",
    "required-only": "tool-choice-honoured",
}
TOOL_CALL_CHECKS = ("tool-call-arguments", "tool-call-stream", "tool-call-parallel")


@pytest.fixture
def server(request):
    fake = FakeOpenAI(request.param).start()
    yield fake
    fake.stop()


@pytest.mark.parametrize("server", ["good"], indirect=True)
def test_a_well_behaved_server_passes_every_check(server):
    results = {c.name: c for c in conformance(server.url, "fake-model", seeded=True, reasoning_parser="qwen3")}
    assert {name: c.status for name, c in results.items()} == {
        "tool-call-arguments": "passed", "tool-call-stream": "passed", "tool-call-parallel": "passed",
        "tool-choice-honoured": "passed", "seed-parity": "passed",
        "structured-output": "passed", "kwargs-honoured": "passed", "reasoning-separated": "passed"}


@pytest.mark.parametrize("server", list(EXPECTED_FAILURE), indirect=True)
def test_each_misbehaviour_fails_exactly_its_check(server):
    results = conformance(server.url, "fake-model", seeded=True)
    failed = [c.name for c in results if c.status == "failed"]
    assert failed == [EXPECTED_FAILURE[server.mode]], [(c.name, c.status, c.detail) for c in results]
    detail = next(c.detail for c in results if c.status == "failed")
    evidence = {"dup-stream-args": "do not assemble into JSON", "string-values": "not number",
                "parallel-indices": "carries two ids",
                "seed-drift": "other request(s) streamed", "broken-strict-stream": "streamed reply is not JSON",
                "drop-kwargs": "drops the kwarg", "ignores-tool-choice": "no tool call",
                "required-only": "naming set_thermostat, not streamed: no tool call"}[server.mode]
    assert evidence in detail, detail


@pytest.mark.parametrize("server", ["completes-fast"], indirect=True)
def test_a_server_that_ends_every_reply_at_once_cannot_pass_seed_parity(server):
    """No request can be shown to overlap another: inconclusive, with --seeded too, never passed."""
    for seeded in (True, False):
        parity = next(c for c in conformance(server.url, "fake-model", seeded=seeded) if c.name == "seed-parity")
        assert parity.status == "inconclusive", parity.detail
        assert "could not produce overlapping requests" in parity.detail and "finished" in parity.detail


@pytest.mark.parametrize("server", ["seed-drift"], indirect=True)
def test_seed_parity_shows_the_overlap_it_judged(server):
    """The drift is caught although the fast server finishes the seeded reply in ~50 ms: the
    other requests were streaming before it was sent and after it ended."""
    parity = next(c for c in conformance(server.url, "fake-model", seeded=True) if c.name == "seed-parity")
    assert parity.status == "failed" and "other request(s) streamed" in parity.detail, parity.detail
    counts = [r for r in server.requests if r["messages"][-1]["content"].startswith("Count from")]
    assert len(counts) == 3 and all(r["stream"] and r["max_tokens"] >= 256 for r in counts)


@pytest.mark.parametrize("server", ["no-auto-calls"], indirect=True)
def test_a_model_that_does_not_call_on_its_own_is_forced_with_a_named_tool_choice(server):
    results = {c.name: c for c in conformance(server.url, "fake-model", seeded=True)}
    assert all(results[name].status == "passed" for name in (*TOOL_CALL_CHECKS, "tool-choice-honoured")), results
    assert "forced with tool_choice naming set_thermostat" in results["tool-call-arguments"].detail
    forced = [r for r in server.requests if isinstance(r.get("tool_choice"), dict)]
    assert forced and all(r["tool_choice"]["function"]["name"] == "set_thermostat" for r in forced)


@pytest.mark.parametrize("server", ["required-only"], indirect=True)
def test_a_server_that_reads_only_required_still_gets_its_calls_judged(server):
    results = {c.name: c for c in conformance(server.url, "fake-model", seeded=True)}
    assert all(results[name].status == "passed" for name in TOOL_CALL_CHECKS), results
    assert 'forced with tool_choice "required"' in results["tool-call-arguments"].detail
    assert results["tool-choice-honoured"].status == "failed"


@pytest.mark.parametrize("server", ["ignores-tool-choice"], indirect=True)
def test_a_server_that_ignores_tool_choice_fails_it_and_leaves_the_call_checks_inconclusive(server):
    results = {c.name: c for c in conformance(server.url, "fake-model", seeded=True)}
    assert results["tool-choice-honoured"].status == "failed"
    assert "naming set_thermostat" in results["tool-choice-honoured"].detail
    for name in TOOL_CALL_CHECKS:
        assert results[name].status == "inconclusive" and "see tool-choice-honoured" in results[name].detail


@pytest.mark.parametrize("server", ["seed-drift"], indirect=True)
def test_seed_drift_is_inconclusive_unless_the_server_promises_determinism(server):
    parity = next(c for c in conformance(server.url, "fake-model") if c.name == "seed-parity")
    assert parity.status == "inconclusive" and "--seeded" in parity.detail


@pytest.mark.parametrize("server", ["string-values"], indirect=True)
def test_probe_endpoint_alone_needs_no_weights(server):
    proc = run_cli("probe", "--endpoint", server.url, "--format", "json", "--seeded")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    statuses = {c["name"]: c["status"] for c in report["served"]["conformance"]}
    assert statuses["tool-call-arguments"] == "failed" and statuses["structured-output"] == "passed"
    assert all(r["model"] == "fake-model" for r in server.requests)  # only the URL given was asked


def test_the_schema_check_knows_types():
    assert validate(ARGUMENT_TYPES_EXAMPLE, WEATHER_TOOL["function"]["parameters"]) == []
    wrong = dict(ARGUMENT_TYPES_EXAMPLE, celsius="22.5", eco="True", fan_level=3.5)
    problems = validate(wrong, WEATHER_TOOL["function"]["parameters"])
    assert len(problems) == 3 and any("/celsius" in p and "not number" in p for p in problems)
