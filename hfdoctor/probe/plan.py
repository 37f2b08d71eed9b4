"""Which replies the probe generates, in which batches, and which check judges which reply.

Two calls, whatever the model:
1. one left-padded batch of the question with thinking on (or plain, for a model that does not think), the
   same request again, the same request sampled with a seed, that again, the question with thinking off where
   the switch exists, and a longer question when nothing else pads the first row. think-on, think-off and
   stops-at-eos judge the first and the thinking-off rows; deterministic compares each request with its
   repeat: the same prompt, padding and batch, so the comparison is the same computation twice;
2. the first request alone: batch-invariance compares it with its row of the batch.

Each row stops at its own end; a call lasts as long as its longest row.
"""

from __future__ import annotations

from typing import Callable

from hfdoctor.knowledge.registry import Family, Variant
from hfdoctor.lineage import TURN_END_MARKERS
from hfdoctor.probe.checks import (LONGER_QUESTION, QUESTION, SAMPLING_SEED, CheckResult, batch_invariance,
                                   deterministic, stops_at_eos, think_off, think_on, thinking_support)
from hfdoctor.probe.session import Generation, Session

# Seed-OSS-style templates tell the model how many tokens to think for.
SHORT_THINKING_BUDGET = 512


def short_reasoning(template: str) -> dict[str, object]:
    """The template's own ways to ask for short reasoning, where it has them: gpt-oss's reasoning_effort,
    Seed-OSS's thinking_budget. A template that reads neither renders exactly as without them."""
    kwargs: dict[str, object] = {}
    if "reasoning_effort" in template:
        kwargs["reasoning_effort"] = "low"
    if "thinking_budget" in template:
        kwargs["thinking_budget"] = SHORT_THINKING_BUDGET
    return kwargs


def run_checks(session: Session, family: Family | None, template: str | None,
               step: Callable[[str], None] = lambda _: None, variant: Variant | None = None) -> list[CheckResult]:
    template = template or ""
    messages = [{"role": "user", "content": QUESTION}]
    support = thinking_support(session, family, template, variant)
    end_of_turn = TURN_END_MARKERS | set(family.end_of_turn if family else ())
    thinks = support.on_failure is None and support.on_reason is None
    switch = {"enable_thinking": True} if "enable_thinking" in template else {}
    short = short_reasoning(template) if thinks else {}
    on_kwargs = {**switch, **short} if thinks else {}
    prompt = session.render(messages, **on_kwargs)
    off_prompt = session.render(messages, enable_thinking=False) if thinks and support.off_reason is None else None

    prompts: list[str] = [prompt, prompt, prompt, prompt]
    seeds: list[int | None] = [None, None, SAMPLING_SEED, SAMPLING_SEED]
    if off_prompt is not None:
        prompts.append(off_prompt)
        seeds.append(None)
    lengths = [session.prompt_tokens(p) for p in prompts]
    if max(lengths) <= lengths[0]:  # batch-invariance needs the first row left-padded
        prompts.append(session.render([{"role": "user", "content": LONGER_QUESTION}], **on_kwargs))
        seeds.append(None)
        lengths.append(session.prompt_tokens(prompts[-1]))
    asked = f" (asked for {', '.join(f'{k}={v}' for k, v in short.items())})" if short else ""
    label = "think-on, think-off, deterministic" if thinks else "replies and deterministic"
    step(f"{label}: one batch of {len(prompts)} requests{asked}, up to {session.max_new_tokens} new tokens each")
    replies = session.generate(prompts, seeds)
    first, again, sampled, sampled_again = replies[:4]

    results: list[CheckResult] = []
    judged: list[tuple[str, Generation]] = []
    if support.on_failure is not None:
        results.append(CheckResult("think-on", "failed", support.on_failure))
        results.append(CheckResult("think-off", "not-applicable", "think-on failed: the vocabulary has no markers"))
        judged.append(("first", first))
    elif thinks:
        results.append(think_on(session, support, first, asked))
        judged.append(("think-on", first))
        if off_prompt is not None:
            off = replies[4]
            results.append(think_off(session, support, off, same_prompt=off_prompt == prompt))
            judged.append(("think-off", off))
        else:
            results.append(CheckResult("think-off", "not-applicable", support.off_reason or ""))
    else:
        results.append(CheckResult("think-on", "not-applicable", support.on_reason or ""))
        results.append(CheckResult("think-off", "not-applicable", support.off_reason or support.on_reason or ""))
        judged.append(("first", first))
    results.append(stops_at_eos(session, judged, end_of_turn))
    results.append(deterministic(session, [("greedy", first, again),
                                           (f"sampling with seed {SAMPLING_SEED}", sampled, sampled_again)]))

    step("batch-invariance: the first request alone")
    alone = session.generate([prompt])[0]
    results.append(batch_invariance(session, alone, first, max(lengths) - lengths[0], rows=len(prompts)))
    return results
