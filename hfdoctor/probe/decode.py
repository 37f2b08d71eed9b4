"""Batched decoding for the probe: one left-padded batch per call, each row greedy or sampled with its own seed,
each row stopping at its own end, and a trace of every step for the numerics verdicts (numerics.py).

Why not transformers' generate(): it cannot sample some rows and decode others greedily in one batch, it draws
seeded samples from torch's global generator (so two identical requests in one batch get different draws), and it
cannot say, when two identical requests part ways, how close the step's candidates were. The model's own forward
does all the model's work here; what this loop adds is argmax, top-k sampling and bookkeeping.

Two ways to run a step, chosen per model (`how`):
- "static": a preallocated StaticCache and preallocated inputs, the decode step writing into the same tensors
  every time; on CUDA that step is captured once as a CUDA graph and replayed (one launch a token instead of
  hundreds), elsewhere it is called directly. Only for models whose every cache layer is a plain full-attention
  StaticLayer and whose attention reads a 4D mask (sdpa, eager), on one device.
- "dynamic": transformers' own cache and masks, growing by a token a step; everything else (sliding windows,
  linear-attention layers, flash-attention kernels, a model spread over several GPUs, remote code).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Any

import torch

TOP_K = 50  # sampling: temperature 1, top-k 50, top-p 1 (what a seeded request to a server does)
TRACE_K = 8  # candidates kept per step for the numerics verdicts
GRAPH_WARMUP_STEPS = 2  # CUDA graphs: steps run before capture (cuBLAS and allocator warm-up)


@dataclass(frozen=True)
class Row:
    """One request of a batch: the prompt's token ids, and None (greedy) or the seed of its sampling."""

    ids: tuple[int, ...]
    seed: int | None = None


@dataclass
class Trace:
    """One row's decoding, step by step (CPU tensors): the TRACE_K best candidates and their logits (float32),
    and for a sampled row the uniform draw and the span [low, high) of the cumulative distribution that the
    picked token held (NaN for a greedy row)."""

    top_ids: torch.Tensor  # [steps, TRACE_K]
    top_logits: torch.Tensor  # [steps, TRACE_K]
    draw: torch.Tensor  # [steps]
    span: torch.Tensor  # [steps, 2]


@dataclass
class Decoded:
    ids: list[int]  # generated ids up to and including the eos id that stopped the row
    stopped_on: int | None  # that eos id; None when the budget ran out
    trace: Trace


@dataclass
class Call:
    rows: list[Decoded]
    seconds: float  # the whole call: prefill and every step
    steps: int  # decode steps run (the longest row's length)
    how: str  # "static" or "dynamic" (see the module's doc), "+ CUDA graph" when one was replayed


@dataclass
class Runtime:
    """How this model is decoded, decided once, and why not faster when it is not."""

    how: str  # "static" or "dynamic"
    graphs: bool  # capture the static step as a CUDA graph
    why_not: list[str] = field(default_factory=list)  # why dynamic, why no graph


def choose_runtime(model: Any, device: str, use_graphs: bool = True) -> Runtime:
    """Static (and on CUDA a graph) where the model allows it; else dynamic, saying why."""
    why_not: list[str] = []
    attention = getattr(model.config, "_attn_implementation", None)
    if not getattr(model, "_can_compile_fullgraph", False):
        why_not.append(f"{type(model).__name__} does not declare static-cache support")
    elif attention not in ("sdpa", "eager"):
        why_not.append(f"attention implementation {attention!r} takes no 4D mask")
    elif len({str(p.device) for p in model.parameters()}) > 1:
        why_not.append("the model is spread over several devices")
    elif not getattr(getattr(model, "hf_quantizer", None), "is_compileable", True):
        why_not.append("its quantization does not support static shapes")
    else:
        try:
            from transformers import StaticCache
            from transformers.cache_utils import StaticLayer

            layers = StaticCache(config=model.config, max_cache_len=8).layers
            kinds = {type(layer).__name__ for layer in layers}
            if kinds != {StaticLayer.__name__}:
                why_not.append(f"cache layers {', '.join(sorted(kinds))} are not all full attention")
        except Exception as err:  # an architecture transformers builds no static cache for
            why_not.append(f"no static cache for this architecture ({type(err).__name__}: {err})")
    if why_not:
        return Runtime("dynamic", False, why_not)
    graphs = use_graphs and device.startswith("cuda")
    if not device.startswith("cuda"):
        why_not.append("CUDA graphs need a CUDA device")
    elif not use_graphs:
        why_not.append("CUDA graphs turned off")
    return Runtime("static", graphs, why_not)


class Decoder:
    def __init__(self, model: Any, device: str, eos_ids: list[int], pad_id: int, runtime: Runtime):
        self.model = model
        self.device = torch.device(device)
        self.eos = torch.tensor(sorted(set(eos_ids)) or [-1], device=self.device)
        self.pad_id = pad_id
        self.runtime = runtime
        self.keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    # --- the batch ----------------------------------------------------------------

    def run(self, rows: list[Row], budget: int) -> Call:
        started = time.perf_counter()
        width = max(len(r.ids) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        real = torch.zeros((len(rows), width), dtype=torch.bool)
        for k, row in enumerate(rows):
            ids[k, width - len(row.ids):] = torch.tensor(row.ids, dtype=torch.long)
            real[k, width - len(row.ids):] = True
        ids, real = ids.to(self.device), real.to(self.device)
        picker = Picker(rows, budget, self.device)
        with torch.inference_mode():
            start = self._static if self.runtime.how == "static" else self._dynamic
            logits, feed, how = start(ids, real, budget)
            step = 0
            while True:  # pick every row's next token; stop when all rows ended or the budget is spent
                token, done = picker.pick(step, logits, self.eos, self.pad_id)
                step += 1
                if step == budget or (done is not None and bool(done)):
                    break
                logits = feed(token, step)
        return Call(picker.results(step, self.eos), time.perf_counter() - started, step, how)

    def _logits(self, **inputs: Any) -> torch.Tensor:
        """The last position's logits of one forward pass."""
        if self.keeps_logits:
            inputs["logits_to_keep"] = 1
        return self.model(use_cache=True, **inputs).logits[:, -1, :].to(self.device)

    def _dynamic(self, ids: torch.Tensor, real: torch.Tensor, budget: int):
        """transformers' own cache and masks, growing by one token a step. Returns the prefill's logits, the
        function that feeds the next tokens, and how it decodes."""
        state = {"mask": real.long(), "cache": None}
        positions = (state["mask"].cumsum(-1) - 1).clamp(min=0)
        state["position"] = positions[:, -1:]

        def forward(**inputs: Any) -> torch.Tensor:
            if self.keeps_logits:
                inputs["logits_to_keep"] = 1
            out = self.model(attention_mask=state["mask"], past_key_values=state["cache"], use_cache=True, **inputs)
            state["cache"] = out.past_key_values
            return out.logits[:, -1, :].to(self.device)  # spread over GPUs, the last layer may sit on another

        def feed(token: torch.Tensor, step: int) -> torch.Tensor:
            state["mask"] = torch.cat([state["mask"], torch.ones_like(state["mask"][:, :1])], dim=-1)
            state["position"] = state["position"] + 1
            return forward(input_ids=token[:, None], position_ids=state["position"])

        return forward(input_ids=ids, position_ids=positions), feed, "dynamic"

    def _static(self, ids: torch.Tensor, real: torch.Tensor, budget: int):
        """A StaticCache and fixed inputs: the prefill with transformers' masks, then each step with our 4D mask
        (what each row may see: its own prompt tokens and the tokens generated so far), replayed as a CUDA graph
        where there is one."""
        from transformers import StaticCache

        batch, width = ids.shape
        cache = StaticCache(config=self.model.config, max_cache_len=width + budget)
        step_in = StepInputs(batch, width, width + budget, real, self.device, self.model.dtype,
                             self.model.config._attn_implementation)
        step_fn = self._step_function(cache, step_in)
        graph, how = None, "static"
        if self.runtime.graphs:
            graph, failure = capture(step_fn, cache, step_in)
            if graph is None:
                self.runtime.graphs = False
                self.runtime.why_not.append(f"CUDA graph capture failed ({failure}): decoded without one")
            else:
                how = "static + CUDA graph"
        # The prefill: transformers builds the causal and padding mask over the cache's whole length.
        full_mask = torch.cat([real, torch.ones((batch, budget), dtype=torch.bool, device=self.device)], -1)
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)
        logits = self._logits(input_ids=ids, attention_mask=full_mask.long(), position_ids=positions,
                              past_key_values=cache)
        step_in.position.copy_(positions[:, -1:])

        def feed(token: torch.Tensor, step: int) -> torch.Tensor:
            step_in.advance(token, width + step - 1)
            if graph is None:
                return step_fn()
            graph.replay()
            return step_in.logits

        return logits, feed, how

    def _step_function(self, cache: Any, step_in: "StepInputs"):
        """One decode step on the preallocated inputs: the function a CUDA graph captures."""
        def step() -> torch.Tensor:
            step_in.logits = self._logits(input_ids=step_in.token, attention_mask=step_in.mask,
                                          position_ids=step_in.position, past_key_values=cache)
            return step_in.logits

        return step


class StepInputs:
    """The decode step's inputs, allocated once: the token fed, its position, and the 4D mask of what each row
    may attend to (prompt tokens that are not padding, and the cache positions written so far)."""

    def __init__(self, batch: int, width: int, length: int, real: torch.Tensor, device: torch.device,
                 dtype: torch.dtype, attention: str):
        self.token = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.position = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.allowed = torch.zeros((batch, 1, 1, length), dtype=torch.bool, device=device)
        self.allowed[:, 0, 0, :width] = real
        # sdpa reads a boolean mask; eager attention adds the mask to the scores
        self.additive = attention == "eager"
        self.mask = (torch.zeros((batch, 1, 1, length), dtype=dtype, device=device) if self.additive
                     else self.allowed)
        self._floor = torch.finfo(dtype).min
        self._sync_mask()
        self.logits: torch.Tensor | None = None

    def _sync_mask(self) -> None:
        if self.additive:
            self.mask.copy_(torch.where(self.allowed, 0.0, self._floor).to(self.mask.dtype))

    def advance(self, token: torch.Tensor, cache_index: int) -> None:
        """Feed `token` at `cache_index` (in place: a captured graph reads these very tensors)."""
        self.token.copy_(token[:, None])
        self.position.add_(1)
        self.allowed[:, :, :, cache_index] = True
        if self.additive:
            self.mask[:, :, :, cache_index] = 0.0


def capture(step_fn, cache: Any, step_in: StepInputs) -> tuple[Any, str | None]:
    """Capture one decode step as a CUDA graph before the prefill; (None, why) when it cannot be."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            warm_up(step_fn, cache)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step_fn()
        reset(cache)
        torch.cuda.synchronize()
        return graph, None
    except Exception as err:  # a step that reads values on the host, an op capture does not allow
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        reset(cache)
        return None, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def warm_up(step_fn, cache: Any) -> None:
    """Run the step a few times (cuBLAS picks its kernels, the cache allocates its tensors), then empty the
    cache again: the warm-up steps wrote into it and advanced its lengths, and the prefill must start on an
    empty cache exactly as without a graph."""
    for _ in range(GRAPH_WARMUP_STEPS):
        step_fn()
    reset(cache)


def reset(cache: Any) -> None:
    """An empty static cache again, its tensors kept where they are (a captured graph points at them)."""
    for layer in cache.layers:
        if getattr(layer, "is_initialized", False):
            layer.keys.zero_()
            layer.values.zero_()
            layer.cumulative_length.zero_()


class Picker:
    """Chooses each row's next token from the step's logits and keeps the trace: the argmax for a greedy row;
    for a sampled row, the token whose span of the cumulative top-k distribution holds the row's next uniform
    draw (drawn up front from a generator seeded with the row's seed, so identical requests get identical
    draws wherever they sit in the batch)."""

    def __init__(self, rows: list[Row], budget: int, device: torch.device):
        batch = len(rows)
        self.sampled = torch.tensor([r.seed is not None for r in rows], device=device)
        draws = torch.full((batch, budget), float("nan"))
        for k, row in enumerate(rows):
            if row.seed is not None:
                draws[k] = torch.rand(budget, generator=torch.Generator().manual_seed(row.seed), dtype=torch.float64)
        self.draws = draws.to(device=device, dtype=torch.float64)
        self.tokens = torch.zeros((batch, budget), dtype=torch.long, device=device)
        self.top_ids = torch.zeros((batch, budget, TRACE_K), dtype=torch.long, device=device)
        self.top_logits = torch.zeros((batch, budget, TRACE_K), dtype=torch.float32, device=device)
        self.span = torch.full((batch, budget, 2), float("nan"), dtype=torch.float64, device=device)
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)
        # Summing the top-k probabilities with a triangular matrix, not cumsum: CUDA's cumsum has no
        # deterministic implementation.
        self.upper = torch.triu(torch.ones((TOP_K, TOP_K), dtype=torch.float64, device=device))
        # On CUDA, asking whether every row has ended waits for the GPU: ask every few steps only.
        self.check_every = 8 if device.type == "cuda" else 1

    def pick(self, step: int, logits: torch.Tensor, eos: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, Any]:
        """The next token of every row (pad for rows that have ended), and, every few steps, whether all have."""
        scores = logits.float()
        k = min(TOP_K, scores.shape[-1])
        top_logits, top_ids = scores.topk(k, dim=-1)  # sorted, best first
        probs = torch.softmax(top_logits.double(), dim=-1)
        cdf = probs @ self.upper[:k, :k]
        draw = self.draws[:, step: step + 1]
        index = (cdf < draw).sum(-1, keepdim=True).clamp(max=k - 1)
        high = cdf.gather(-1, index)
        low = high - probs.gather(-1, index)
        sampled = top_ids.gather(-1, index)[:, 0]
        token = torch.where(self.sampled, sampled, top_ids[:, 0])
        token = torch.where(self.finished, torch.full_like(token, pad_id), token)
        self.tokens[:, step] = token
        kept = min(TRACE_K, k)
        self.top_ids[:, step, :kept] = top_ids[:, :kept]
        self.top_logits[:, step, :kept] = top_logits[:, :kept]
        self.span[:, step] = torch.where(self.sampled[:, None], torch.cat([low, high], -1),
                                         torch.full_like(self.span[:, step], float("nan")))
        self.finished |= torch.isin(token, eos)
        done = self.finished.all() if (step + 1) % self.check_every == 0 else None
        return token, done

    def results(self, steps: int, eos: torch.Tensor) -> list[Decoded]:
        tokens = self.tokens[:, :steps].cpu()
        top_ids, top_logits = self.top_ids[:, :steps].cpu(), self.top_logits[:, :steps].cpu()
        draws, span = self.draws[:, :steps].cpu(), self.span[:, :steps].cpu()
        stops = set(eos.cpu().tolist())
        out = []
        for k in range(tokens.shape[0]):
            ids = [int(i) for i in tokens[k].tolist()]
            end = next((n for n, i in enumerate(ids) if i in stops), None)
            if end is not None:
                ids = ids[: end + 1]
            out.append(Decoded(ids, ids[-1] if end is not None else None,
                               Trace(top_ids[k, : len(ids)], top_logits[k, : len(ids)], draws[k, : len(ids)],
                                     span[k, : len(ids)])))
        return out
