"""Do renders agree with each other the way serving and training assume?

- prefix stability (in tokens, like TRL's is_chat_template_prefix_preserving, but of what
  a server cached): the next request must start with the served generation prompt and
  what the model wrote after it, or servers cannot reuse the KV cache of the last turn;
- train/inference agreement: the full render of a conversation must equal its
  generation prompt + the reply + end of turn, or a model fine-tuned on full renders
  learns a prompt it is never served;
- drift: the same conversations rendered by the upstream family template.

Everything here reads a TemplateAnalysis; nothing renders.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

from hfdoctor.bounded import patterns
from hfdoctor.chat import corpus
from hfdoctor.chat.capabilities import FULLWIDTH_MARKER, PIPE_MARKER
from hfdoctor.chat.render_plan import TemplateAnalysis, render_key
from hfdoctor.bounded.tokenizing import TokenizerFailed

CONTEXT_CHARS = 30
# Renders compared in tokens at most this long (real prompts are a few KB): the tokenizers library
# splits a megabyte of one word in seconds, and prefix-instability asks for a dozen such splits.
MAX_TOKENIZED_CHARS = 32 * 1024


def _common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def _before(text: str, at: int) -> str:
    """The text a message quotes before a difference (needles left out, see corpus.readable)."""
    return corpus.readable(text[max(0, at - 4 * CONTEXT_CHARS):at])[-CONTEXT_CHARS:]


def _after(text: str, at: int, n: int = 40) -> str:
    return corpus.readable(text[at:at + 2 * n])[:n]


# Reasoning markup: think tags of any spelling (<think>, </think>, <seed:think>,
# [THINK]), harmony's analysis channel header and Gemma's thought channel (opened by
# <|channel>thought, closed by <channel|>, as Gemma 4's template writes an empty one into the
# generation prompt), with the whitespace around them, and the corpus' reasoning text.
REASONING_MARKUP = patterns.compile(
    r"(?i)\s*(?:</?[\w:]*think[\w:]*>|\[/?think\]|<\|channel\|>analysis<\|message\|>|<\|channel>thought|<channel\|>)\s*")


def without_reasoning(text: str) -> str:
    """The render with its reasoning blocks' markup and content left out."""
    for reasoning in (corpus.REASONING_1, corpus.REASONING_2):
        text = text.replace(reasoning, "")
    return REASONING_MARKUP.sub("", text)


@dataclass(frozen=True)
class Divergence:
    scenario: corpus.Continuation
    unit: str  # "token" or "character"
    index: int  # token index (exact tokenizer) or character offset of the first difference
    earlier: str  # the token (or text) the earlier render has there
    later: str  # what the continuation has there
    context: str  # the text just before
    reason: str
    # Only reasoning blocks part the two renders: without their markup and content, the
    # next request starts with what was served.
    reasoning_only: bool = False

    @property
    def kind(self) -> tuple:
        """What two templates share when they diverge "in the same way"."""
        return ("reasoning", self.reason) if self.reasoning_only else ("text", self.earlier, self.later, self.reason)


def _reason(earlier: str, later: str, at: int) -> str:
    """Why the next request parts from what was served at character `at` of the prompt."""
    gone = earlier[at:]
    if "think" in gone[:60].lower() and "think" not in later[at:at + 60].lower():
        return "the (empty) thinking block the generation prompt pre-fills is not kept in the history"
    if gone.strip() == "" or later[at:].startswith(gone.strip()):
        return "whitespace at the end of the turn changes"
    return "the earlier turn renders differently once the conversation continues"


SURROGATE = re.compile("[\ud800-\udfff]")  # one character at a time: linear in Python's engine
MARKER_SHAPES = patterns.compile(f"{PIPE_MARKER.pattern}|{FULLWIDTH_MARKER.pattern}")


@dataclass(frozen=True)
class Vocabulary:
    """What prefix checks need to know of a tokenizer without building one.

    Added tokens are matched before any model runs, so they cut the text into segments
    that tokenize independently: two renders agree token by token up to a boundary that
    is an added token in both. `load` builds the real tokenizer, for the rare boundary
    this cannot settle (building Qwen's takes longer than the rest of `check`).
    """

    added: tuple[str, ...] = ()
    lstrip: frozenset[str] = frozenset()  # added tokens that swallow whitespace on their left
    load: Callable[[], Any] | None = None
    # the tokenizer's normalizer and pre-tokenizer alone (hfdoctor.bounded.tokenizing.Splitter)
    splitter: Callable[[], Any] | None = None

    @cached_property
    def pattern(self) -> patterns.Pattern:
        """The added tokens, longest first, as one RE2 alternation (the vocabulary is repository
        data: thousands of tokens, over renders of any length, in linear time)."""
        if self.added:
            # RE2 takes UTF-8: a token with a lone surrogate (JSON allows "\\ud800") is escaped
            # as SafePattern reads such text, with each surrogate as U+FFFD.
            tokens = sorted({SURROGATE.sub("\ufffd", t) for t in self.added}, key=len, reverse=True)
            compiled = patterns.compile_large("|".join(patterns.escape(t) for t in tokens))
            if compiled is not None:
                return compiled
        return MARKER_SHAPES  # no tokenizer (or too many tokens for one automaton): marker shapes

    def piece_at(self, text: str, at: int) -> str:
        """The added token starting at `at`, else the word there (up to a space or a token)."""
        found = self.pattern.match(text, at)
        if found:
            return found.group(0)
        word = re.compile(r"\s*\S+").match(text, at)
        end = word.end() if word else len(text)
        nxt = self.pattern.search(text, at)
        return text[at:min(end, nxt.start() if nxt else end)] or "(end)"

    def token_start(self, text: str, at: int) -> int:
        """`at`, moved back to the start of an added token it falls inside."""
        for found in self.pattern.finditer(text, max(0, at - 64), at + 64):
            if found.start() < at < found.end():
                return found.start()
        return at

    def end_of_turn(self, text: str, at: int) -> int:
        """Where what the model writes ends: after the added token that follows `at` directly
        (the end-of-turn token it emits and stops on). When plain text follows the reply,
        the model writes that text itself before it stops, and without a vocabulary which
        tokens are added is unknown: then the whole text."""
        found = self.pattern.match(text, at) if self.added else None
        return found.end() if found is not None else len(text)

    def boundary_is_safe(self, earlier: str, later: str) -> bool:
        """Whether `later`'s tokens start with `earlier`'s, when `later` starts with `earlier`."""
        n = len(earlier)
        if n == len(later):
            return True
        if any(earlier.endswith(t) for t in self.added):
            return True
        after = self.pattern.match(later, n)
        if after is not None:
            return not (after.group(0) in self.lstrip and earlier[-1:].isspace())
        return self._ends_a_piece(earlier, later)

    def _ends_a_piece(self, earlier: str, later: str) -> bool:
        """Whether the boundary ends a pre-token in both texts, with the same pieces before it
        (then the tokens before it agree: each piece is tokenized on its own). Only the text
        between the added tokens around the boundary is split, as the tokenizer does."""
        splitter = self.splitter() if self.splitter is not None else None
        if splitter is None:
            return False
        n = len(earlier)
        start = max((m.end() for m in self.pattern.finditer(later, max(0, n - 4096), n) if m.end() <= n), default=0)
        following = self.pattern.search(later, n)
        end = following.start() if following is not None else len(later)
        mine, theirs = splitter.pieces(earlier[start:]), splitter.pieces(later[start:end])
        if mine is None or theirs is None:
            return False
        cut = n - start
        return any(e == cut for _, e in theirs) and [p for p in theirs if p[1] <= cut] == mine


def prefix_divergence(analysis: TemplateAnalysis, scenario: corpus.Continuation,
                      vocabulary: Vocabulary | None = None, mode: dict[str, Any] | None = None) -> Divergence | None:
    """None when the next request starts with what the server cached: the served prompt,
    then what the model wrote (its reasoning, if it reasoned, then its reply or tool call).
    Compared in tokens where a boundary is not an added token."""
    vocabulary = vocabulary or Vocabulary()
    mode = mode or {}
    earlier = analysis.rendered(scenario.prompt, True, **mode)
    later = analysis.rendered(scenario.after, True, **mode)
    if earlier is None or later is None:
        return None
    if not later.startswith(earlier):
        at = _common_prefix(earlier, later)
        at = min(vocabulary.token_start(earlier, at), vocabulary.token_start(later, at))
        reasoning_only = without_reasoning(later).startswith(without_reasoning(earlier))
        return Divergence(scenario, "character", at, _piece(vocabulary, earlier, at), _piece(vocabulary, later, at),
                          _before(earlier, at), _reason(earlier, later, at), reasoning_only)
    written = later[len(earlier):]
    output_at = written.find(scenario.output)
    if output_at < 0:
        return None  # the turn is not rendered back at all: nothing to judge
    reasons_in_tags = corpus.THINK_NEEDLE in (analysis.rendered("reasoning_reply", False) or "")
    if scenario.reasoning and reasons_in_tags and corpus.THINK_NEEDLE not in written[:output_at]:
        at = len(earlier)
        return Divergence(scenario, "character", at, "(the model's reasoning)", _piece(vocabulary, later, at),
                          _before(earlier, at), "the reasoning of earlier turns is dropped once a new turn starts",
                          True)
    # Where the model's turn ends: the finished conversation (its end-of-turn included, as
    # the model emits it), when that is how the next request goes on; else right after what
    # the model wrote (templates that always append a turn opener, or drop reasoning).
    finished = analysis.rendered(scenario.finished, False, **mode)
    output_end = len(earlier) + output_at + len(scenario.output)
    if finished is not None and finished.startswith(earlier) and later.startswith(finished):
        # The model writes its end-of-turn token and stops: text the template appends after
        # it (a newline, a separator) is never generated, so no server caches it.
        earlier = finished[:vocabulary.end_of_turn(finished, output_end)]
    else:
        earlier = later[:output_end]
    if len(later) > MAX_TOKENIZED_CHARS:
        return None  # no verdict in tokens: splitting a megabyte of one word took seconds a call
    if vocabulary.boundary_is_safe(earlier, later):
        return None
    tokenizer = vocabulary.load() if vocabulary.load is not None else None
    if tokenizer is None:
        return None
    try:
        a = tokenizer.encode(earlier, add_special_tokens=False)
        b = tokenizer.encode(later, add_special_tokens=False)
    except TokenizerFailed:
        return None  # the tokenizer cannot encode these renders: no verdict in tokens
    if b.ids[: len(a.ids)] == a.ids:
        return None
    i = next((k for k, (x, y) in enumerate(zip(a.ids, b.ids)) if x != y), min(len(a.ids), len(b.ids)))
    at = a.offsets[i][0] if i < len(a.offsets) else len(earlier)
    return Divergence(scenario, "token", i, _token_text(tokenizer, a.ids, i), _token_text(tokenizer, b.ids, i),
                      _before(earlier, at),
                      "the text is a prefix, but the tokens at the boundary merge differently once the next turn "
                      "is appended")


def _piece(vocabulary: Vocabulary, text: str, at: int) -> str:
    piece = vocabulary.piece_at(text, at)
    return corpus.readable(piece) or "(the conversation's text)"


def _token_text(tokenizer: Any, ids: list[int], i: int) -> str:
    if i >= len(ids):
        return "(end)"
    try:
        return tokenizer.decode([ids[i]], skip_special_tokens=False)
    except Exception:  # tokenizers raises plain exceptions on odd vocabularies
        return str(ids[i])


# An empty reasoning block: <think></think>, <think>\n\n</think>, ... (RE2 has no
# backreference: the tag names are compared after the match).
EMPTY_THINKING = patterns.compile(r"(?i)<(\w*think\w*)>\s*</(\w*think\w*)>")


def has_empty_thinking(text: str) -> bool:
    return any(m.group(1).lower() == m.group(2).lower() for m in EMPTY_THINKING.finditer(text))


@dataclass(frozen=True)
class Mismatch:
    scenario: corpus.Completion
    mode: dict[str, Any]
    prompt_has: str  # what the generation prompt has where the two part
    full_has: str  # what the full render has there
    context: str
    inserted: bool  # the full render inserts text between the prompt and the reply
    empty_thinking: bool  # what is inserted is an empty reasoning block
    # Only reasoning blocks part the two: without them, the full render is the prompt + reply.
    reasoning_only: bool = False

    @property
    def kind(self) -> tuple:
        """What two templates share when they disagree "in the same way"."""
        if self.reasoning_only:
            return ("reasoning", self.empty_thinking)
        return ("text", self.prompt_has, self.full_has, self.inserted)


def completion_mismatch(analysis: TemplateAnalysis, scenario: corpus.Completion,
                        mode: dict[str, Any]) -> Mismatch | None:
    """None when full render == generation prompt + reply (+ end of turn).

    Text the full render puts before EVERY assistant reply, history included (gpt-oss's
    `<|channel|>final<|message|>`), is the header the model writes itself: not a
    mismatch. An empty thinking block is always one: trained on it, a model learns to
    skip reasoning.
    """
    prompt = analysis.rendered(scenario.prompt, True, **mode)
    full = analysis.rendered(scenario.full, False, **mode)
    if prompt is None or full is None or scenario.reply not in full:
        return None  # a render failed, or string content is not rendered at all (parts-only templates)
    if full.startswith(prompt):
        at = full.find(scenario.reply, len(prompt))
        if at < 0:
            return Mismatch(scenario, mode, "(the reply)", _after(full, len(prompt)),
                            _before(prompt, len(prompt)), False, False)
        between = full[len(prompt):at]
        if between.strip() == "":  # " " before the reply: SentencePiece's own word boundary
            return None
        # The block may open in the generation prompt and close in the full render.
        empty_thinking = has_empty_thinking(prompt[-CONTEXT_CHARS:] + between)
        history = analysis.rendered("multi_turn_reply", False, **mode) or ""
        if not empty_thinking and between + corpus.ASSISTANT_1 in history:
            return None
        return Mismatch(scenario, mode, "(the reply)", corpus.readable(between), _before(prompt, len(prompt)), True,
                        empty_thinking, empty_thinking or _reasoning_only(prompt, full, scenario.reply))
    at = _common_prefix(prompt, full)
    return Mismatch(scenario, mode, _after(prompt, at), _after(full, at), _before(prompt, at),
                    False, False, _reasoning_only(prompt, full, scenario.reply))


def _reasoning_only(prompt: str, full: str, reply: str) -> bool:
    """Without reasoning markup, the full render is the prompt, then (whitespace and) the reply."""
    prompt, full = without_reasoning(prompt), without_reasoning(full)
    return full.startswith(prompt) and full[len(prompt):].lstrip().startswith(reply)


# Conversations compared against the upstream template: what every server sends.
DRIFT_RENDERS = (
    ("user", True), ("system_user", True), ("multi_turn_reply", False), ("multi_turn", True),
    ("reasoning_history", True), ("tools_available", True), ("tool_result", True),
)


@dataclass(frozen=True)
class Drift:
    what: str  # the conversation shape
    ours: str | None  # our render's text from the first difference (None: it failed)
    theirs: str | None
    context: str
    whitespace_only: bool


def drift(ours: TemplateAnalysis, upstream: TemplateAnalysis, skip: frozenset[str] = frozenset()) -> list[Drift]:
    """How `ours` renders the standard conversations differently from `upstream`, the
    conversations named in `skip` aside."""
    found = []
    for name, add_generation_prompt in DRIFT_RENDERS:
        if name in skip:
            continue
        key = render_key(name, add_generation_prompt)
        a, b = ours.renders.get(key), upstream.renders.get(key)
        if a is None or b is None:
            continue
        what = corpus.conversation(name).what + (" (generation prompt)" if add_generation_prompt else "")
        if a.text is None or b.text is None:
            if (a.text is None) != (b.text is None):  # one renders, the other fails
                found.append(Drift(what, a.text if a.text is None else "", b.text if b.text is None else "", "", False))
            continue
        if a.text == b.text:
            continue
        at = _common_prefix(a.text, b.text)
        found.append(Drift(what, _after(a.text, at), _after(b.text, at), _before(a.text, at),
                           "".join(a.text.split()) == "".join(b.text.split())))
    return found
