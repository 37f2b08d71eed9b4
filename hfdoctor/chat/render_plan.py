"""The render plan of a template analysis, and what each render gives.

The data that the bounded worker (analysis.py), the parent, the shipped store
(store.py), the renderer (render.py) and the rules share. It imports no jinja2: a
stored analysis is read and judged without it. Lowest module of hfdoctor.chat (besides
corpus): it imports nothing else of the package.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Iterable

from hfdoctor.chat import corpus

# The named special tokens transformers passes (PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# Kwargs clients pass to switch reasoning, and the values tried for each.
KWARG_VALUES: dict[str, tuple[Any, ...]] = {
    "enable_thinking": (True, False),
    "thinking": (True, False),
    "reasoning_effort": ("low", "high"),
}
THINKING_KWARGS = ("enable_thinking", "thinking")
# strftime_now is pinned, so two renders of the same input are equal whenever they run.
FIXED_NOW = datetime(2025, 1, 15, 12, 0, 0)
MAX_RENDER_CHARS = 1 << 20  # a chat prompt of a megabyte is already a bug
# The renders of one analysis together, as held in memory: real templates render ~100 prompts of a
# few KB. A small template can write a megabyte of 4-byte characters into each render; thirty such
# templates in one tokenizer_config.json held gigabytes.
MAX_ANALYSIS_BYTES = 16 << 20
MAX_MESSAGE_CHARS = 500  # of an exception message: the template chooses what it raises

# Renders without kwargs: (conversation, add_generation_prompt).
DEFAULT_RENDERS: tuple[tuple[str, bool], ...] = (
    ("user", True), ("user", False), ("system_user", True), ("reply", False), ("multi_turn", True),
    ("multi_turn_reply", False), ("system_multi_turn", True), ("reasoning_reply", False),
    ("reasoning_history", True), ("tools_available", True), ("tool_call", False), ("tool_result", True),
    ("tool_result_reply", False), ("tool_call_string_args", True), ("tool_call_null_content", True),
    ("parallel_tool_calls", False), ("typed_content", True), ("typed_system", True),
)
# Renders repeated for each value of each kwarg in KWARG_VALUES the template reads:
# the prompts and full renders of the completions (train/inference per mode).
MODE_RENDERS: tuple[tuple[str, bool], ...] = tuple(
    pair for c in corpus.COMPLETIONS for pair in ((c.prompt, True), (c.full, False))
)

RenderKey = tuple[str, bool, tuple[tuple[str, Any], ...]]


def render_key(conversation: str, add_generation_prompt: bool, **kwargs: Any) -> RenderKey:
    return (conversation, add_generation_prompt, tuple(sorted(kwargs.items())))


def kwarg_modes(kwargs_read: Iterable[str]) -> list[dict[str, Any]]:
    """The kwarg settings rendered besides none: each value of each kwarg the template reads."""
    return [{name: v} for name, values in KWARG_VALUES.items() if name in kwargs_read for v in values]


def plan(kwargs_read: Iterable[str]) -> list[RenderKey]:
    keys = [render_key(c, g) for c, g in DEFAULT_RENDERS]
    for mode in kwarg_modes(kwargs_read):
        keys += [render_key(c, g, **mode) for c, g in MODE_RENDERS]
    return keys


@dataclass(frozen=True)
class RenderError:
    # syntax | declined (raise_exception) | undefined | unsafe (reaches for Python
    # internals) | forbidden (mutates a list/dict: the sandbox is immutable) | timeout |
    # memory | too-large | error | skipped (not analysed: the check's time budget ran out)
    kind: str
    type: str
    message: str
    line: int | None = None  # line of the template
    variable: str | None = None  # for `undefined`: the variable that was missing

    @property
    def fatal(self) -> bool:
        """The template is hostile or runaway: rendering anything else is pointless."""
        return self.kind in ("timeout", "memory", "unsafe", "skipped")

    def describe(self) -> str:
        where = f" (template line {self.line})" if self.line else ""
        if self.kind == "declined":
            return f"raise_exception({self.message!r}){where}"
        if self.kind == "timeout":
            return f"it never returned: {self.message}{where}"
        if self.kind == "memory":
            return f"it ran out of memory (over the 1 GiB hfdoctor allows a render){where}"
        if self.kind == "unsafe":
            return f"it reaches for Python internals, the first step of a sandbox escape: {self.message}{where}"
        return f"{self.type}: {self.message}{where}"


@dataclass(frozen=True)
class Outcome:
    text: str | None = None
    spans: tuple[tuple[int, int], ...] = ()  # {% generation %} character spans
    error: RenderError | None = None


@dataclass
class TemplateAnalysis:
    text: str
    tool_use: bool = False
    compile_error: RenderError | None = None
    variables: frozenset[str] = frozenset()
    kwargs: frozenset[str] = frozenset()  # caller kwargs the template reads
    renders: dict[RenderKey, Outcome] = field(default_factory=dict)
    # A render that ended the run (timeout, memory, sandbox escape, worker killed).
    fatal: tuple[RenderKey | None, RenderError] | None = None
    # What the template does on purpose, read from its source in the worker (a
    # hfdoctor.chat.triggers.TemplateText; None when not read: it does not parse, or was not analysed)
    reading: Any = None

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()

    @property
    def compiled(self) -> bool:
        return self.compile_error is None

    def outcome(self, conversation: str, add_generation_prompt: bool, **kwargs: Any) -> Outcome | None:
        return self.renders.get(render_key(conversation, add_generation_prompt, **kwargs))

    def rendered(self, conversation: str, add_generation_prompt: bool, **kwargs: Any) -> str | None:
        """The rendered text, or None when that render failed or was not made."""
        found = self.outcome(conversation, add_generation_prompt, **kwargs)
        return found.text if found is not None else None

    def texts(self) -> list[str]:
        return [o.text for o in self.renders.values() if o.text is not None]

    def held_bytes(self) -> int:
        """The memory its rendered texts take (what bounds a memo of analyses)."""
        return sum(sys.getsizeof(o.text) for o in self.renders.values() if o.text is not None)

    @property
    def modes(self) -> list[dict[str, Any]]:
        """The kwarg settings rendered: {} (none passed), then each kwarg value."""
        return [{}, *kwarg_modes(self.kwargs)]

    @property
    def thinking_kwargs(self) -> list[str]:
        return [k for k in THINKING_KWARGS if k in self.kwargs]


def has_generation_tag(source: str) -> bool:
    """transformers' own test for `{% generation %}` support (no jinja2 needed)."""
    return re.search(r"\{\%-?\s*generation\s*-?\%\}", source) is not None
