"""Never blame the model for the hardware's arithmetic.

Two runs of the same request in the same process can part ways on a GPU: kernels that add in a different
order from run to run give logits that differ in their last bits, and where two candidates are that close,
the pick flips. That says nothing about the model. So:

- the probe asks torch for deterministic kernels (`deterministic_kernels`): cuBLAS with a fixed workspace
  (CUBLAS_WORKSPACE_CONFIG, read when cuBLAS starts), `torch.use_deterministic_algorithms(True,
  warn_only=True)`; the ops torch has no deterministic kernel for are named in the report;
- where two identical requests still diverge, `explain` looks at the step where they parted: if the two picks
  were within the dtype's rounding of each other (greedy: their logits; sampled: the seeded draw and the edge
  between the two tokens in the cumulative distribution), the verdict is inconclusive with that reason; only a
  divergence that rounding cannot explain fails.
"""

from __future__ import annotations

import math
import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

# A step's candidates are "within rounding" when their logits differ by at most this many units of the dtype's
# last place at the step's scale (the larger of 1 and the largest logit): the rounding of the last matmul plus a
# few more from the layers below it. A logit difference d changes the two tokens' probability ratio by e^d, so
# at a scale of 1 this says their probabilities are equal to within that many units of the dtype's rounding.
ROUNDING_ULPS = 4
EPSILON = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23, "float64": 2.0 ** -52}
CUBLAS_WORKSPACE = ":4096:8"
NO_DETERMINISTIC_KERNEL = "does not have a deterministic implementation"


@dataclass
class Determinism:
    """What the probe could make deterministic, for the report."""

    algorithms: bool = False  # torch.use_deterministic_algorithms(True) was in force
    cublas_workspace: str | None = None  # CUBLAS_WORKSPACE_CONFIG as cuBLAS read it (None: not set in time)
    without_kernel: list[str] = field(default_factory=list)  # ops that ran without a deterministic kernel
    note: str | None = None  # why not, where something could not be done

    def to_json(self) -> dict[str, Any]:
        return {"deterministic_algorithms": self.algorithms, "cublas_workspace_config": self.cublas_workspace,
                "nondeterministic_ops": self.without_kernel, "note": self.note}


def set_cublas_workspace() -> str | None:
    """CUBLAS_WORKSPACE_CONFIG for deterministic cuBLAS. cuBLAS reads it when it starts (the first matrix product
    on a GPU), so it is set before CUDA starts; a value the user set is kept. None: CUDA had already started
    without it (the probe run inside a longer process)."""
    import torch

    if "CUBLAS_WORKSPACE_CONFIG" in os.environ:
        return os.environ["CUBLAS_WORKSPACE_CONFIG"]
    if torch.cuda.is_initialized():
        return None
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    return CUBLAS_WORKSPACE


@contextmanager
def deterministic_kernels(determinism: Determinism) -> Iterator[None]:
    """Deterministic algorithms for what runs inside; the ops without a deterministic kernel are recorded in
    `determinism`. torch's settings are put back afterwards (the probe may run inside a longer process)."""
    import torch

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    import torch.utils.deterministic as det

    fill_before = det.fill_uninitialized_memory
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        # Filling every new tensor with NaN makes reading uninitialized memory visible; the probe reads none,
        # and on a CPU the fill would cost a pass over every weight loaded.
        det.fill_uninitialized_memory = False
        determinism.algorithms = True
    except Exception as err:  # an old torch without warn_only
        determinism.note = f"torch.use_deterministic_algorithms is not available: {type(err).__name__}: {err}"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        if determinism.algorithms:
            torch.use_deterministic_algorithms(before[0], warn_only=before[1])
            det.fill_uninitialized_memory = fill_before
        for w in caught:
            text = str(w.message)
            if NO_DETERMINISTIC_KERNEL in text:
                op = text.split(NO_DETERMINISTIC_KERNEL)[0].strip()
                if op and op not in determinism.without_kernel:
                    determinism.without_kernel.append(op)
            elif "CUBLAS_WORKSPACE_CONFIG" in text:  # cuBLAS started without it: its products may vary
                determinism.cublas_workspace = None
                determinism.note = "cuBLAS ran without CUBLAS_WORKSPACE_CONFIG: its products may differ run to run"
            else:  # not ours to swallow
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


# --- explaining a divergence ----------------------------------------------------------------


@dataclass
class Divergence:
    index: int  # the first token that differs (0-based)
    explained: bool  # the dtype's rounding explains it (or nothing recorded can tell: never blamed)
    detail: str


def first_difference(a: list[int], b: list[int]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def rounding(dtype: str, scale: float) -> float:
    """How far apart two logits at `scale` may be and still count as equal under `dtype`'s rounding."""
    return ROUNDING_ULPS * EPSILON.get(dtype, EPSILON["bfloat16"]) * max(1.0, scale)


def logit_of(trace: Any, step: int, token: int) -> float | None:
    """The logit `token` had at `step` in a run, if it was among the candidates kept."""
    ids = trace.top_ids[step].tolist()
    return float(trace.top_logits[step][ids.index(token)]) if token in ids else None


def explain(dtype: str, first: Any, again: Any, name: Any) -> Divergence:
    """Why two runs of the same request (`first`, `again`: Generation objects with traces) part ways at their
    first differing token. `name(token_id)` shows a token."""
    k = first_difference(first.ids, again.ids)
    if k >= min(len(first.ids), len(again.ids)):  # one ended where the other went on: no step to compare
        return Divergence(k, True, f"one run ended after {k} tokens and the other went on from the same tokens: "
                          "cannot tell numerics from the model")
    a, b = first.ids[k], again.ids[k]
    ta, tb = first.trace, again.trace
    if ta is None or tb is None or k >= len(ta.top_ids) or k >= len(tb.top_ids):
        return Divergence(k, True, "no record of that step's candidates: cannot tell numerics from the model")
    # The scale of the step: the largest logit and the two picks, in either run (not the far tail, whose large
    # negative logits say nothing about how finely the leaders were computed).
    known = [float(t.top_logits[k][0]) for t in (ta, tb)] + [
        v for t in (ta, tb) for token in (a, b) if (v := logit_of(t, k, token)) is not None]
    tolerance = rounding(dtype, max(abs(v) for v in known))
    jitter = logit_jitter(ta, tb, k)
    both = f"{name(a)} (id {a}) and {name(b)} (id {b})"
    seen = (f"the two runs' logits at that step differ by up to {jitter:.3g}" if jitter is not None else
            "the two runs kept no candidate in common")
    if first.seed is None:
        # How far each run's pick led the other run's pick; where the other's pick was not among the candidates
        # kept, at least as far as the last one kept.
        margins = [margin(ta, k, a, b), margin(tb, k, b, a)]
        bounds = [m if m is not None else float(t.top_logits[k][0] - t.top_logits[k][-1])
                  for m, t in zip(margins, (ta, tb))]
        exact = all(m is not None for m in margins)
        if max(bounds) > tolerance:
            apart = f"{max(bounds):.3g}" if exact else f"at least {max(bounds):.3g}"
            return Divergence(k, False, f"at token {k + 1} the runs picked {both}, {apart} apart in logits, "
                              f"beyond {dtype} rounding ({tolerance:.3g}); {seen}")
        if not exact:
            return Divergence(k, True, f"at token {k + 1} the runs picked {both}, and more than "
                              f"{len(ta.top_ids[k])} candidates were within {dtype} rounding of each other: "
                              "cannot tell numerics from the model")
        return Divergence(k, True, f"at token {k + 1} the top candidates {both} were within {dtype} rounding "
                          f"(logits {bounds[0]:.3g} and {bounds[1]:.3g} apart in the two runs; rounding at this "
                          f"scale: {tolerance:.3g}); {seen}: GPU arithmetic, not the model")
    draw_a, draw_b = float(ta.draw[k]), float(tb.draw[k])
    if draw_a != draw_b:
        return Divergence(k, False, f"at token {k + 1} the two runs drew different random numbers with the same "
                          f"seed ({draw_a:.6f} vs {draw_b:.6f})")
    # The flip happened because the draw sat near an edge of the picked token's span of the cumulative
    # distribution: logits that move by at most `tolerance` move each probability by a factor within
    # e^(±2·tolerance), and so every edge by less than e^(2·tolerance) - 1.
    edge = max(edge_distance(ta, k), edge_distance(tb, k))
    room = math.expm1(2 * tolerance)
    if edge <= room:
        return Divergence(k, True, f"at token {k + 1} the seeded draw {draw_a:.6f} lay {edge:.2g} from the edge "
                          f"between {both} in the cumulative distribution, within {dtype} rounding "
                          f"({room:.2g}); {seen}: GPU arithmetic, not the model")
    return Divergence(k, False, f"at token {k + 1} the seeded draw {draw_a:.6f} lay {edge:.2g} from any edge "
                      f"between {both}, beyond {dtype} rounding ({room:.2g}); {seen}")


def margin(trace: Any, step: int, picked: int, other: int) -> float | None:
    """How far `picked` led `other` in logits at `step` in this run; None when `other` was not kept."""
    mine, theirs = logit_of(trace, step, picked), logit_of(trace, step, other)
    return None if mine is None or theirs is None else mine - theirs


def edge_distance(trace: Any, step: int) -> float:
    low, high = (float(v) for v in trace.span[step])
    draw = float(trace.draw[step])
    return min(draw - low, high - draw)


def logit_jitter(ta: Any, tb: Any, step: int) -> float | None:
    """The largest difference between the two runs' logits for the candidates both kept at `step`."""
    a = dict(zip(ta.top_ids[step].tolist(), ta.top_logits[step].tolist()))
    b = dict(zip(tb.top_ids[step].tolist(), tb.top_logits[step].tolist()))
    shared = set(a) & set(b)
    return max(abs(a[t] - b[t]) for t in shared) if shared else None
