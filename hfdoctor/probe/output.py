"""How a probe result is shown: one JSON object on stdout, or readable lines with the replies.

A model's replies and a served endpoint's answers are outside text: inert in both formats
(hfdoctor.report.inert; text lines through hfdoctor.report.text.line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from hfdoctor import __version__
from hfdoctor.probe.checks import STATUSES, CheckResult
from hfdoctor.report.inert import dumps
from hfdoctor.report.text import line

VERDICT = {"passed": ("PASS", "bold green"), "failed": ("FAIL", "bold red"), "inconclusive": ("??? ", "bold yellow"),
           "not-applicable": ("N/A ", "dim")}


@dataclass
class ProbeResult:
    target: str
    device: str | None = None
    family: str | None = None
    dtype: str | None = None
    load_seconds: float | None = None
    weights_bytes: int | None = None
    max_new_tokens: int | None = None
    budget: str | None = None  # how max_new_tokens was decided ("--max-new-tokens", "default on a GPU"...)
    # How the replies were computed: the cache, CUDA graphs, deterministic kernels, the GPUs used
    runtime: dict[str, Any] | None = None
    generation: list[dict[str, Any]] = field(default_factory=list)  # each call: rows, steps, seconds
    memory: dict[str, Any] | None = None  # peak GPU and host memory (resources.py)
    checks: list[CheckResult] = field(default_factory=list)
    refused: str | None = None  # why nothing was (or could be) probed
    served: dict[str, Any] | None = None  # the endpoint probed with --serve / --endpoint
    served_checks: list[CheckResult] = field(default_factory=list)
    # What serving test suites assert of the endpoint (hfdoctor.probe.conformance).
    conformance: list[CheckResult] = field(default_factory=list)

    def exit_code(self) -> int:
        if self.refused is not None:
            return 2
        return 1 if any(c.status == "failed" for c in [*self.checks, *self.conformance]) else 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "hfdoctor": __version__,
            "target": self.target,
            "device": self.device,
            "family": self.family,
            "dtype": self.dtype,
            "load_seconds": round(self.load_seconds, 3) if self.load_seconds is not None else None,
            "weights_bytes": self.weights_bytes,
            "checks": [c.to_json() for c in self.checks],
        }
        if self.max_new_tokens is not None:
            out["max_new_tokens"] = self.max_new_tokens
            out["budget"] = self.budget
        if self.runtime is not None:
            out["runtime"] = self.runtime
            out["generation"] = [
                {"rows": c["rows"], "steps": c["steps"], "seconds": round(c["seconds"], 3),
                 "ms_per_step": round(1000 * c["seconds"] / max(c["steps"], 1), 2)} for c in self.generation]
        if self.memory is not None:
            out["memory"] = self.memory
        if self.served is not None:
            out["served"] = {**self.served, "checks": [c.to_json() for c in self.served_checks],
                             "conformance": [c.to_json() for c in self.conformance]}
        if self.refused is not None:
            out["refused"] = self.refused
        return out


def how_it_ran(result: ProbeResult) -> str:
    """One line: the budget, the decoding, the time a step took, peak memory."""
    parts = [f"up to {result.max_new_tokens} new tokens ({result.budget})"]
    runtime = result.runtime or {}
    if runtime:
        parts.append(f"{runtime['cache']} cache" + (", CUDA graphs" if runtime.get("cuda_graphs") else ""))
    steps = sum(c["steps"] for c in result.generation)
    if steps:
        seconds = sum(c["seconds"] for c in result.generation)
        parts.append(f"{steps} decode steps in {seconds:.1f} s ({1000 * seconds / steps:.1f} ms a step)")
    memory = result.memory or {}
    if memory.get("peak_gpu_bytes") is not None:
        parts.append(f"peak GPU memory {memory['peak_gpu_bytes'] / 2**30:.1f} GiB")
    if memory.get("peak_host_anon_bytes") is not None:
        parts.append(f"peak host memory {memory['peak_host_anon_bytes'] / 2**30:.2f} GiB anonymous")
    return "; ".join(parts)


def write_json(result: ProbeResult) -> None:
    print(dumps(result.to_json(), indent=2))


def write_text(result: ProbeResult, console: Console) -> None:
    if result.refused is not None:
        return  # the refusal went to stderr; there is nothing else to show
    loaded = f"loaded in {result.load_seconds:.1f} s" if result.load_seconds is not None else ""
    if result.device is not None:
        console.print(line((result.target, "bold"), f"  family: {result.family or 'unknown'}, "
                           f"device: {result.device}, dtype: {result.dtype}, {loaded}"))
        if result.max_new_tokens is not None:
            console.print(line(("  " + how_it_ran(result), "dim")))
    else:
        console.print(line((result.target, "bold"), "  (no local weights: the endpoint only)"))
    replies_shown: set[tuple[str, str]] = set()
    for check in result.checks:
        console.print(line("  ", VERDICT[check.status], " ", (f"{check.name:<16}", "bold"), " ", check.detail))
        gen = check.generation
        # Checks share replies (stops-at-eos judges the others'): show each prompt's reply once.
        if gen is not None and (gen.prompt, gen.text) not in replies_shown:
            replies_shown.add((gen.prompt, gen.text))
            reply = gen.text if len(gen.text) <= 200 else gen.text[:199] + "…"
            console.print(line("       ", (f"reply ({gen.tokens} tokens, {gen.seconds:.2f} s):", "dim"), " ", reply))
    if result.served is not None:
        console.print(line(f"  through {result.served['server']} at {result.served['endpoint']}:"))
        for check in [*result.served_checks, *result.conformance]:
            console.print(line("    ", VERDICT[check.status], " ", (f"{check.name:<19}", "bold"), " ", check.detail))
    counts = {status: sum(c.status == status for c in [*result.checks, *result.conformance]) for status in STATUSES}
    summary = f"{counts['passed']} passed, {counts['failed']} failed"
    if counts["inconclusive"]:
        summary += f", {counts['inconclusive']} inconclusive"
    if counts["not-applicable"]:
        summary += f", {counts['not-applicable']} not applicable"
    console.print(line((summary, "red" if counts["failed"] else "green")))
