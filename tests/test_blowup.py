"""Small inputs that cost a reader minutes or gigabytes (issue 40, §5; tests/blowup.py builds them).

Each repository is checked by the real command line in a child process under the audit harness
(tests/audit_run.py), which records the checking process's peak resident memory. The promise is
45 s and 1 GB for any input: both are asserted as they are, and a run past 60 s is stopped. Each
case takes a few seconds now (the time bound is far above it: no timing flakes); before its fix
each took minutes or more than a gigabyte. bench/bench_hostile.py prints each one's time and
memory beside a benign input of the same size.
"""

from __future__ import annotations

import os

import pytest

import blowup

PROMISED_SECONDS = 45
PROMISED_BYTES = 1 << 30
# What the report must say of each (a rule that fired), beyond exit 0/1 and no internal error.
EXPECT = {
    "adapter_scalar_shape": "adapter-inconsistent",
    "huge_template": "check-incomplete",
    "gguf_named_templates": "check-incomplete",
    "many_wide_templates": "check-incomplete",
    "json_empty_objects": "file-unreadable",
    "gguf_split_vocabulary": "check-incomplete",
    "template_unknown_markers": "template-unknown-token",
}
SIZES = {"many_wide_templates": {"n": 10}}  # hostile enough: ten templates held 1.5 GB


@pytest.mark.parametrize("name", sorted(blowup.BUILDERS))
def test_a_small_input_is_checked_within_the_promise(tmp_path, name):
    case = blowup.build(name, tmp_path / "case", **SIZES.get(name, {}))
    run = blowup.measure(case, tmp_path / "audit.log", wall_s=PROMISED_SECONDS + 15)
    assert run.returncode is not None, f"{name}: still running after {run.seconds:.0f} s"
    assert run.seconds < PROMISED_SECONDS, f"{name}: {run.seconds:.0f} s"
    assert run.returncode in (0, 1), (run.returncode, run.stderr[-3000:])
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.peak_bytes is not None and run.peak_bytes < PROMISED_BYTES, f"{name}: peak {run.peak_bytes:,} bytes"
    reports = run.reports
    assert not any(r.get("internal_errors") for r in reports), [r.get("internal_errors") for r in reports]
    if name in EXPECT:
        assert EXPECT[name] in {f["rule"] for r in reports for f in r["findings"]}, name
    writes = [e for e in run.events if e["event"] == "open-write" and e["args"][0] != os.devnull]
    assert not writes, writes[:3]
