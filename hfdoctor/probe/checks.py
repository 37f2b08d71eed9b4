"""The behaviour checks, decided on token ids of the replies.

- think-on: with thinking on, the reply holds a reasoning block that closes and then an
  answer. Reasoning formats: `<think>` … `</think>` (or only `</think>` when the template
  opened the block in the generation prompt, as DeepSeek-R1 and QwQ templates do),
  Mistral's `[THINK]` … `[/THINK]`, and harmony's analysis channel followed by its final
  channel (gpt-oss).
- think-off: with enable_thinking=False no reasoning appears, and there is an answer.
- stops-at-eos: every reply ends on an eos id of generation_config.json within the budget.
- deterministic: the same request twice gives the same tokens, greedy and with seeded
  sampling (seed 002: same seed, same prompt, different output). Where the two part ways at a
  step whose candidates were within the dtype's rounding (numerics.py), it is inconclusive:
  GPU arithmetic, not the model.
- batch-invariance (never fails the probe): the same prompt alone and inside a left-padded
  batch. Low-precision kernels give batch-position numerics (bf16 differs within a few
  tokens on any model), so a difference is reported, with the dtype, as inconclusive.

Each check has a status: passed, failed, inconclusive (the run could not decide: the token
budget ran out first, or numerics explain a difference) or not-applicable (with why: a family
that does not think, one that always thinks has no off switch). Only `failed` makes the probe
exit 1. Which replies are generated, in which batches: plan.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hfdoctor.knowledge.registry import Family, Variant
from hfdoctor.probe.numerics import explain, first_difference
from hfdoctor.probe.session import Generation, Session

# A question every chat model can answer in a few tokens; the fixtures were trained on it.
QUESTION = "What is 2 plus 3?"
# Longer than QUESTION in every tokenizer, so that QUESTION is left-padded in the batch.
LONGER_QUESTION = "Please answer with one short sentence, and nothing else: what is 7 plus 8?"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# Below this many new tokens a reply that did not stop says nothing about the model.
MIN_DECISIVE_BUDGET = 16
SAMPLING_SEED = 1234
STATUSES = ("passed", "failed", "inconclusive", "not-applicable")


@dataclass
class CheckResult:
    name: str
    status: str  # one of STATUSES
    detail: str
    generation: Generation | None = None

    @property
    def passed(self) -> bool | None:
        """The contract's boolean: true / false, null when the check decided nothing."""
        return {"passed": True, "failed": False}.get(self.status)

    def to_json(self) -> dict[str, Any]:
        gen = self.generation
        return {
            "name": self.name,
            "passed": self.passed,
            "status": self.status,
            "detail": self.detail,
            "snippet": gen.text if gen else None,
            "tokens": gen.tokens if gen else None,
            "seconds": round(gen.seconds, 3) if gen else None,
        }


@dataclass(frozen=True)
class ReasoningFormat:
    name: str
    open: str  # the marker that opens reasoning (harmony: the analysis channel header)
    close: str  # the marker after which the answer comes
    single_tokens: bool  # open/close are single tokens (decided on ids), else on text


THINK_TAGS = ReasoningFormat("<think> tags", THINK_OPEN, THINK_CLOSE, True)
MISTRAL_THINK = ReasoningFormat("[THINK] tags", "[THINK]", "[/THINK]", True)
HARMONY_TOKEN = re.compile(r"<\|[a-z_]+\|>(?:assistant)?")
HARMONY = ReasoningFormat("harmony channels", "<|channel|>analysis<|message|>", "<|channel|>final<|message|>", False)


@dataclass
class ThinkingSupport:
    """Whether think-on and think-off apply, and if not, why."""

    open_id: int | None
    close_id: int | None
    on_reason: str | None  # None: think-on applies
    off_reason: str | None  # None: think-off applies
    format: ReasoningFormat = THINK_TAGS
    # think-on fails without generating: the family reasons in markers this vocabulary lost
    on_failure: str | None = None


def reasoning_format(session: Session, template: str | None) -> ReasoningFormat:
    """The marker pair the template and the vocabulary use."""
    text = template or ""
    if "<|channel|>" in text and "analysis" in text and session.single_token_id("<|channel|>") is not None:
        return HARMONY
    if "[THINK]" in text and session.single_token_id("[THINK]") is not None:
        return MISTRAL_THINK
    return THINK_TAGS


def thinking_support(session: Session, family: Family | None, template: str | None,
                     variant: Variant | None = None) -> ThinkingSupport:
    fmt = reasoning_format(session, template)
    open_id = session.single_token_id(fmt.open) if fmt.single_tokens else None
    close_id = session.single_token_id(fmt.close) if fmt.single_tokens else None
    thinking = variant.thinking if variant is not None else None
    if thinking == "none":
        reason = f"{variant.display} does not think (hfdoctor's family registry)"
        return ThinkingSupport(open_id, close_id, reason, reason, fmt)
    if fmt is HARMONY:
        return ThinkingSupport(None, None, None, "harmony models always reason (reasoning_effort sets how much): "
                               "there is no off switch to test", fmt)
    if open_id is None or close_id is None:
        if thinking in ("hybrid", "always") and family is not None and THINK_OPEN in family.signature_tokens:
            failure = (f"{variant.display} reasons inside {THINK_OPEN}…{THINK_CLOSE}, but this vocabulary has no single "
                       f"{THINK_OPEN} / {THINK_CLOSE} token: the model cannot emit the markers it was trained on, "
                       "and reasoning parsers refuse the tokenizer")
            return ThinkingSupport(open_id, close_id, None, failure, fmt, on_failure=failure)
        reason = f"the vocabulary has no single {THINK_OPEN} / {THINK_CLOSE} token: this model does not think in tags"
        return ThinkingSupport(open_id, close_id, reason, reason, fmt)
    off_reason = None
    if thinking == "always":
        off_reason = f"{variant.display} always thinks: there is no off switch to test"
    elif thinking is None and "enable_thinking" not in (template or ""):
        off_reason = "the chat template has no enable_thinking switch (and the family is unknown)"
    return ThinkingSupport(open_id, close_id, None, off_reason, fmt)


def shown(text: str, limit: int = 60) -> str:
    """A reply fragment for a one-line detail: newlines visible, long text cut."""
    text = text.replace("\n", "\\n")
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def ran_out(session: Session, gen: Generation) -> bool:
    return gen.stopped_on is None and gen.tokens >= session.max_new_tokens


def larger_budget(budget: int) -> int:
    """What to rerun with when the budget ran out: real reasoning models close their block within about a
    thousand tokens on the probe's question; past that, four times as many."""
    return 1024 if budget < 1024 else 4 * budget


def rerun(session: Session) -> str:
    return f"rerun with --max-new-tokens {larger_budget(session.max_new_tokens)}"


def _split(session: Session, support: ThinkingSupport, gen: Generation) -> tuple[str, str, str] | None:
    """(state, reasoning, answer): state 'none' (no reasoning), 'open' (never closed), 'closed'."""
    fmt = support.format
    if not fmt.single_tokens:  # harmony: decided on the text with its special tokens
        text = session.decode(gen.ids)
        start = text.find(fmt.open)
        if start < 0:
            return "none", "", text
        close = text.find(fmt.close, start)
        if close < 0:
            return "open", text[start + len(fmt.open):], ""
        reasoning = HARMONY_TOKEN.sub("", text[start + len(fmt.open):close])
        return "closed", reasoning, HARMONY_TOKEN.sub("", text[close + len(fmt.close):])
    ids = gen.ids
    if gen.prompt.rstrip().endswith(fmt.open):
        start = -1
    elif support.open_id in ids:
        start = ids.index(support.open_id)
    else:
        return "none", "", session.decode(ids, skip_special_tokens=True)
    close = next((k for k in range(start + 1, len(ids)) if ids[k] == support.close_id), None)
    if close is None:
        return "open", session.decode(ids[start + 1:], skip_special_tokens=True), ""
    return ("closed", session.decode(ids[start + 1: close], skip_special_tokens=True),
            session.decode(ids[close + 1:], skip_special_tokens=True))


def think_on(session: Session, support: ThinkingSupport, gen: Generation, asked: str = "") -> CheckResult:
    """asked: how the prompt asked for short reasoning, shown in the verdict (" (asked for ...)")."""
    fmt = support.format
    state, reasoning, answer = _split(session, support, gen)
    if state == "none":
        if ran_out(session, gen) and session.max_new_tokens < MIN_DECISIVE_BUDGET:
            return CheckResult("think-on", "inconclusive", f"the {session.max_new_tokens}-token budget is too small to "
                               f"see reasoning begin: {rerun(session)}", gen)
        return CheckResult("think-on", "failed", f"no {fmt.open} in the reply with thinking on: the model answered "
                           f"directly ({shown(session.decode(gen.ids))}); its weights never learned to think", gen)
    if state == "open":
        if ran_out(session, gen):
            return CheckResult("think-on", "inconclusive", f"the reasoning block is still open after the "
                               f"{gen.tokens}-token budget: {rerun(session)} to see it close", gen)
        return CheckResult("think-on", "failed", "the reasoning block never closed: the model stopped inside it", gen)
    if not reasoning.strip():
        return CheckResult("think-on", "failed", f"the reasoning block is empty: {shown(session.decode(gen.ids))}", gen)
    if not answer.strip():
        if ran_out(session, gen):
            return CheckResult("think-on", "inconclusive", f"the budget ran out right after {fmt.close}: "
                               f"{rerun(session)} to see the answer", gen)
        return CheckResult("think-on", "failed", f"nothing follows {fmt.close}: the reply is all reasoning", gen)
    where = " (the template opened the block)" if gen.prompt.rstrip().endswith(fmt.open) else ""
    return CheckResult("think-on", "passed", f"reasoned in {fmt.name}{where}{asked}, then answered "
                       f"{shown(answer.strip(), 40)}", gen)


def think_off(session: Session, support: ThinkingSupport, gen: Generation, same_prompt: bool) -> CheckResult:
    ignored = " The template renders the same prompt with enable_thinking=False: it ignores the switch." if same_prompt else ""
    state, _, answer = _split(session, support, gen)
    if state != "none" and not gen.prompt.rstrip().endswith(support.format.close):
        return CheckResult("think-off", "failed", f"reasoning appeared with enable_thinking=False: "
                           f"{shown(session.decode(gen.ids))}.{ignored}", gen)
    if support.close_id in gen.ids or support.open_id in gen.ids:
        return CheckResult("think-off", "failed", f"reasoning markers appeared with enable_thinking=False: "
                           f"{shown(session.decode(gen.ids))}.{ignored}", gen)
    prefilled = " after the template's empty think block" if gen.prompt.rstrip().endswith(THINK_CLOSE) else ""
    answer = session.decode(gen.ids, skip_special_tokens=True).strip()
    if not answer:
        if ran_out(session, gen):
            return CheckResult("think-off", "inconclusive", f"no answer within the {gen.tokens}-token budget: "
                               f"{rerun(session)}", gen)
        return CheckResult("think-off", "failed", f"the reply with thinking off is empty or only whitespace: "
                           f"{shown(session.decode(gen.ids))}", gen)
    return CheckResult("think-off", "passed", f"answered without reasoning{prefilled}: {shown(answer, 40)}", gen)


def stops_at_eos(session: Session, replies: list[tuple[str, Generation]], end_of_turn: set[str]) -> CheckResult:
    if not session.eos_ids:
        return CheckResult("stops-at-eos", "failed", "generation_config.json and config.json name no eos id: "
                           f"generation only stops at the {session.max_new_tokens}-token budget", replies[0][1])
    eos_names = ", ".join(f"{session.token_name(i)} ({i})" for i in session.eos_ids)
    for label, gen in replies:
        if gen.stopped_on is not None:
            continue
        # Did the model end its turn on a token that nobody told generate() to stop on?
        unlisted = next(((k, i) for k, i in enumerate(gen.ids) if session.token_name(i) in end_of_turn), None)
        if unlisted:
            return CheckResult("stops-at-eos", "failed", f"the {label} reply ran through the {session.max_new_tokens}-"
                               f"token budget without an eos id (eos ids: {eos_names}); it wrote the end-of-turn token "
                               f"{session.token_name(unlisted[1])} (id {unlisted[1]}) at token {unlisted[0] + 1}, "
                               "which is not an eos id", gen)
        if session.max_new_tokens < MIN_DECISIVE_BUDGET or label == "think-on":
            return CheckResult("stops-at-eos", "inconclusive", f"the {label} reply was cut by the "
                               f"{session.max_new_tokens}-token budget before it could end: {rerun(session)}", gen)
        return CheckResult("stops-at-eos", "failed", f"the {label} reply ran through the {session.max_new_tokens}-token "
                           f"budget without an eos id (eos ids: {eos_names})", gen)
    ended = ", ".join(f"{label} after {gen.tokens}" for label, gen in replies)
    names = sorted({session.token_name(gen.stopped_on) for _, gen in replies if gen.stopped_on is not None})
    return CheckResult("stops-at-eos", "passed", f"every reply ended on {', '.join(names)} ({ended} tokens)", replies[0][1])


def _differs(session: Session, a: Generation, b: Generation) -> str:
    k = first_difference(a.ids, b.ids)
    return f"at token {k + 1}: {shown(session.decode(a.ids[k:]), 30)} vs {shown(session.decode(b.ids[k:]), 30)}"


def deterministic(session: Session, runs: list[tuple[str, Generation, Generation]]) -> CheckResult:
    """runs: (how, first, again) pairs of the same request made twice, in the same shape (rows of one batch,
    same prompt, same padding). A difference fails only where the dtype's rounding cannot explain it."""
    explained = None
    for how, first, again in runs:
        if first.ids == again.ids:
            continue
        why = explain(session.dtype, first, again, session.token_name)
        if not why.explained:
            return CheckResult("deterministic", "failed", f"the same request twice ({how}) gave different output "
                               f"{_differs(session, first, again)}: {why.detail}", again)
        explained = explained or (how, first, again, why)
    if explained is not None:
        how, first, again, why = explained
        return CheckResult("deterministic", "inconclusive", f"the same request twice ({how}) gave different output "
                           f"{_differs(session, first, again)}; {why.detail}", again)
    described = " and ".join(f"{how} ({first.tokens} tokens)" for how, first, _ in runs)
    return CheckResult("deterministic", "passed", f"the same request twice gave the same tokens: {described}",
                       runs[0][1])


def batch_invariance(session: Session, alone: Generation, batched: Generation, padding: int,
                     rows: int = 2) -> CheckResult:
    if alone.ids == batched.ids:
        return CheckResult("batch-invariance", "passed", f"the same {alone.tokens} tokens alone and left-padded by "
                           f"{padding} tokens in a batch of {rows} ({session.dtype})", batched)
    expected = ("expected batch-position numerics in reduced precision, not a model defect"
                if session.dtype in ("bfloat16", "float16") else
                "in float32 this is rare: padding or position ids may be handled wrongly")
    return CheckResult("batch-invariance", "inconclusive", f"left-padded by {padding} tokens in a batch of {rows}, the "
                       f"reply differs {_differs(session, alone, batched)} ({session.dtype}: {expected})", batched)
