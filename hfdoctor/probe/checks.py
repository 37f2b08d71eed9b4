"""The four behaviour checks, decided on token ids of greedy replies.

- think-on: with enable_thinking=True the reply holds a reasoning block that closes
  (`<think>` … `</think>`, or only `</think>` when the template already opened the block in
  the generation prompt, as DeepSeek-R1 and QwQ templates do) and then an answer.
- think-off: with enable_thinking=False no reasoning appears (no `<think>`/`</think>`).
- stops-at-eos: every reply ends on an eos id of generation_config.json within the budget.
- deterministic: greedy decoding twice gives the same tokens, and the same prompt alone and
  inside a left-padded batch gives the same tokens (seed 002: same seed, different output).

A check that does not apply says passed=None and why: a family without thinking (the
registry), a vocabulary without a `<think>` token, a family that always thinks (no off switch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from hfdoctor.lineage import TURN_END_MARKERS
from hfdoctor.probe.session import Generation, Session
from hfdoctor.registry import Family, Variant

# A question every chat model can answer in a few tokens; the fixtures were trained on it.
QUESTION = "What is 2 plus 3?"
# Longer than QUESTION in every tokenizer, so that QUESTION is left-padded in the batch.
LONGER_QUESTION = "Please answer with one short sentence, and nothing else: what is 7 plus 8?"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass
class CheckResult:
    name: str
    passed: bool | None  # None: does not apply to this model
    detail: str
    generation: Generation | None = None

    def to_json(self) -> dict[str, Any]:
        gen = self.generation
        return {
            "name": self.name,
            "passed": self.passed,
            "detail": self.detail,
            "snippet": gen.text if gen else None,
            "tokens": gen.tokens if gen else None,
            "seconds": round(gen.seconds, 3) if gen else None,
        }


@dataclass
class ThinkingSupport:
    """Whether think-on and think-off apply, and if not, why."""

    open_id: int | None
    close_id: int | None
    on_reason: str | None  # None: think-on applies
    off_reason: str | None  # None: think-off applies


def thinking_support(session: Session, family: Family | None, template: str | None,
                     variant: Variant | None = None) -> ThinkingSupport:
    open_id, close_id = session.single_token_id(THINK_OPEN), session.single_token_id(THINK_CLOSE)
    thinking = variant.thinking if variant is not None else None
    if thinking == "none":
        reason = f"{variant.display} does not think (hfdoctor's family registry)"
        return ThinkingSupport(open_id, close_id, reason, reason)
    if open_id is None or close_id is None:
        reason = f"the vocabulary has no single {THINK_OPEN} / {THINK_CLOSE} token: this model does not think in tags"
        return ThinkingSupport(open_id, close_id, reason, reason)
    off_reason = None
    if thinking == "always":
        off_reason = f"{variant.display} always thinks: there is no off switch to test"
    elif thinking is None and "enable_thinking" not in (template or ""):
        off_reason = "the chat template has no enable_thinking switch (and the family is unknown)"
    return ThinkingSupport(open_id, close_id, None, off_reason)


def shown(text: str, limit: int = 60) -> str:
    """A reply fragment for a one-line detail: newlines visible, long text cut."""
    text = text.replace("\n", "\\n")
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def think_on(session: Session, support: ThinkingSupport, gen: Generation) -> CheckResult:
    ids = gen.ids
    opened_by_template = gen.prompt.rstrip().endswith(THINK_OPEN)
    if opened_by_template:
        start = -1
    elif support.open_id in ids:
        start = ids.index(support.open_id)
    else:
        return CheckResult("think-on", False, f"no {THINK_OPEN} in the reply with enable_thinking=True: the model "
                           f"answered directly ({shown(session.decode(ids))}); its weights never learned to think", gen)
    close = next((k for k in range(start + 1, len(ids)) if ids[k] == support.close_id), None)
    if close is None:
        why = ("it stopped without closing it" if gen.stopped_on is not None
               else f"still open after {gen.tokens} tokens (raise --max-new-tokens)")
        return CheckResult("think-on", False, f"the reasoning block never closed: {why}", gen)
    reasoning = session.decode(ids[start + 1: close], skip_special_tokens=True).strip()
    answer = session.decode(ids[close + 1:], skip_special_tokens=True).strip()
    if not reasoning:
        return CheckResult("think-on", False, f"the reasoning block is empty: {shown(session.decode(ids))}", gen)
    if not answer:
        return CheckResult("think-on", False, f"nothing follows {THINK_CLOSE}: the reply is all reasoning", gen)
    where = " (the template opened the block)" if opened_by_template else ""
    return CheckResult("think-on", True, f"reasoned for {close - start - 1} tokens{where}, then answered "
                       f"{shown(answer, 40)}", gen)


def think_off(session: Session, support: ThinkingSupport, gen: Generation, same_prompt: bool) -> CheckResult:
    ignored = " The template renders the same prompt with enable_thinking=False: it ignores the switch." if same_prompt else ""
    if support.open_id in gen.ids or support.close_id in gen.ids:
        return CheckResult("think-off", False, f"reasoning appeared with enable_thinking=False: "
                           f"{shown(session.decode(gen.ids))}.{ignored}", gen)
    prefilled = " after the template's empty think block" if gen.prompt.rstrip().endswith(THINK_CLOSE) else ""
    answer = session.decode(gen.ids, skip_special_tokens=True).strip()
    return CheckResult("think-off", True, f"answered without reasoning{prefilled}: {shown(answer, 40)}", gen)


def stops_at_eos(session: Session, replies: list[tuple[str, Generation]], end_of_turn: set[str]) -> CheckResult:
    if not session.eos_ids:
        return CheckResult("stops-at-eos", False, "generation_config.json and config.json name no eos id: "
                           f"generation only stops at the {session.max_new_tokens}-token budget", replies[0][1])
    eos_names = ", ".join(f"{session.token_name(i)} ({i})" for i in session.eos_ids)
    for label, gen in replies:
        if gen.stopped_on is not None:
            continue
        # Did the model end its turn on a token that nobody told generate() to stop on?
        unlisted = next(((k, i) for k, i in enumerate(gen.ids) if session.token_name(i) in end_of_turn), None)
        hint = (f"; it wrote the end-of-turn token {session.token_name(unlisted[1])} (id {unlisted[1]}) at token "
                f"{unlisted[0] + 1}, which is not an eos id" if unlisted else "")
        return CheckResult("stops-at-eos", False, f"the {label} reply ran through the {session.max_new_tokens}-token "
                           f"budget without an eos id (eos ids: {eos_names}){hint}", gen)
    ended = ", ".join(f"{label} after {gen.tokens}" for label, gen in replies)
    names = sorted({session.token_name(gen.stopped_on) for _, gen in replies if gen.stopped_on is not None})
    return CheckResult("stops-at-eos", True, f"every reply ended on {', '.join(names)} ({ended} tokens)", replies[0][1])


def first_difference(a: list[int], b: list[int]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def deterministic(session: Session, first: Generation, again: Generation, batched: Generation,
                  padding: int) -> CheckResult:
    for other, how in ((again, "a second greedy run"), (batched, f"the same prompt left-padded by {padding} tokens "
                                                                  "in a batch of 2")):
        if other.ids != first.ids:
            k = first_difference(first.ids, other.ids)
            return CheckResult("deterministic", False, f"{how} differs from the first run at token {k + 1}: "
                               f"{shown(session.decode(first.ids[k:]), 30)} vs {shown(session.decode(other.ids[k:]), 30)}",
                               other)
    return CheckResult("deterministic", True, f"the same {first.tokens} tokens twice, and inside a left-padded batch "
                       f"of 2 (padded by {padding} tokens)", batched)


def run_checks(session: Session, family: Family | None, template: str | None,
               step: Callable[[str], None] = lambda _: None, variant: Variant | None = None) -> list[CheckResult]:
    messages = [{"role": "user", "content": QUESTION}]
    support = thinking_support(session, family, template, variant)
    end_of_turn = TURN_END_MARKERS | set(family.end_of_turn if family else ())
    results: list[CheckResult] = []
    replies: list[tuple[str, Generation]] = []

    if support.on_reason is None:
        step("think-on: generating with enable_thinking=True")
        prompt = session.render(messages, enable_thinking=True)
        first = session.generate([prompt])[0]
        results.append(think_on(session, support, first))
        replies.append(("think-on", first))
        if support.off_reason is None:
            step("think-off: generating with enable_thinking=False")
            off_prompt = session.render(messages, enable_thinking=False)
            off = session.generate([off_prompt])[0]
            results.append(think_off(session, support, off, same_prompt=off_prompt == prompt))
            replies.append(("think-off", off))
        else:
            results.append(CheckResult("think-off", None, support.off_reason))
    else:
        step("generating a reply")
        prompt = session.render(messages)
        first = session.generate([prompt])[0]
        replies.append(("first", first))
        results.append(CheckResult("think-on", None, support.on_reason))
        results.append(CheckResult("think-off", None, support.off_reason or support.on_reason))

    results.append(stops_at_eos(session, replies, end_of_turn))

    step("deterministic: a second greedy run")
    again = session.generate([prompt])[0]
    step("deterministic: the same prompt inside a left-padded batch")
    longer = session.render([{"role": "user", "content": LONGER_QUESTION}], **(
        {"enable_thinking": True} if support.on_reason is None else {}))
    batched, beside = session.generate([prompt, longer])
    padding = max(0, beside.prompt_tokens - first.prompt_tokens)
    results.append(deterministic(session, first, again, batched, padding))
    return results
