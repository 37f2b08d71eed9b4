"""One analysis per chat template: every render the template rules need, done once.

`analyze(repo, text)` compiles the template and renders a fixed plan of corpus
conversations (with and without the generation prompt, and with each thinking kwarg
the template reads) in ONE bounded worker process (hfdoctor.chat.sandbox): a template
that loops forever, allocates gigabytes or pokes at Python internals ends as a
RenderError on the conversation that triggered it, within a few seconds, and
hfdoctor goes on. The result is cached on the repo, so the ~10 template rules and
TOK004 share it.

The parent process never runs the template. It reads the rendered strings and derives:
capabilities (by needle search: system role, tools, tool calls and their argument
shape, tool results, typed content, reasoning, thinking toggle), the markers the
template emits, prefix stability under continuation, and train/inference agreement.
"""

from __future__ import annotations

import hashlib
import re
import signal
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, Callable, Iterable

from hfdoctor.chat import corpus
from hfdoctor.chat.sandbox import Limits, StepGuard, StepTimeout, run_bounded, run_in_process

if TYPE_CHECKING:
    from hfdoctor.repo import ModelRepo

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
    # memory | too-large | error
    kind: str
    type: str
    message: str
    line: int | None = None  # line of the template
    variable: str | None = None  # for `undefined`: the variable that was missing

    @property
    def fatal(self) -> bool:
        """The template is hostile or runaway: rendering anything else is pointless."""
        return self.kind in ("timeout", "memory", "unsafe")

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


def _template_line(err: BaseException) -> int | None:
    """The template line of the innermost template frame of a traceback.

    jinja2 rewrites the traceback of an Exception so that its frames carry template
    lines; a BaseException (our StepTimeout) passes through untouched, and its frames
    carry lines of the generated Python code, which the template maps back.
    """
    line = None
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == "<template>":
            template = tb.tb_frame.f_globals.get("__jinja_template__")
            line = template.get_corresponding_lineno(tb.tb_lineno) if template is not None else tb.tb_lineno
        tb = tb.tb_next
    return line if line is not None else getattr(err, "template_line", None)


def dunder_accesses(source: str) -> list[tuple[str, int]]:
    """`x.__class__`, `x['__globals__']`, `x | attr('__class__')`: the first step of every
    jinja2 sandbox escape."""
    import jinja2.nodes

    from hfdoctor.chat.render import parse_template

    def dunder(node: Any) -> bool:
        return isinstance(node, jinja2.nodes.Const) and isinstance(node.value, str) and node.value.startswith("__")

    ast = parse_template(source)
    found = {(n.attr, n.lineno) for n in ast.find_all(jinja2.nodes.Getattr) if n.attr.startswith("__")}
    found |= {(n.arg.value, n.lineno) for n in ast.find_all(jinja2.nodes.Getitem) if dunder(n.arg)}
    found |= {(n.args[0].value, n.lineno) for n in ast.find_all(jinja2.nodes.Filter)
              if n.name == "attr" and n.args and dunder(n.args[0])}
    return sorted(found, key=lambda item: (item[1], item[0]))


def classify(err: BaseException) -> RenderError:
    """What kind of failure an exception from compiling or rendering is."""
    import jinja2

    from hfdoctor.chat.render import TemplateRaised

    name = type(err).__name__
    message = str(err)[:MAX_MESSAGE_CHARS]
    line = _template_line(err)
    if isinstance(err, jinja2.TemplateSyntaxError):
        return RenderError("syntax", name, (err.message or message)[:MAX_MESSAGE_CHARS], err.lineno)
    if isinstance(err, TemplateRaised):
        return RenderError("declined", name, message, line)
    if isinstance(err, StepTimeout):
        return RenderError("timeout", name, message, line)
    if isinstance(err, MemoryError):
        return RenderError("memory", name, message or "out of memory", line)
    if isinstance(err, RecursionError):
        return RenderError("error", name, "recursion too deep", line)
    if isinstance(err, jinja2.exceptions.SecurityError):
        internal = re.search(r"attribute '_|underscore-prefixed|not safely callable", message)
        return RenderError("unsafe" if internal else "forbidden", name, message, line)
    if isinstance(err, jinja2.UndefinedError):
        missing = re.match(r"'([A-Za-z_]\w*)' is undefined", message)
        return RenderError("undefined", name, message, line, missing.group(1) if missing else None)
    return RenderError("error", name, message, line)


# --- the worker: runs in the bounded child process ----------------------------------


def _render_one(source: str, key: RenderKey, special_tokens: dict[str, str], tool_use: bool,
                guard: StepGuard) -> Outcome:
    from hfdoctor.chat.render import pinned_clock, render

    name, add_generation_prompt, kwargs = key
    inputs = corpus.conversation(name).inputs()
    tools = inputs["tools"]
    if tools is None and tool_use:
        tools = [dict(t) for t in corpus.TOOLS]  # transformers picks a tool_use template only with tools
    try:
        with pinned_clock(FIXED_NOW), guard.step():
            result = render(source, inputs["messages"], tools=tools, documents=inputs["documents"],
                            add_generation_prompt=add_generation_prompt, special_tokens=special_tokens,
                            **dict(kwargs))
    except (Exception, StepTimeout) as err:  # every failure of a render is a finding, not a crash
        return Outcome(error=classify(err))
    if len(result.text) > MAX_RENDER_CHARS:
        return Outcome(error=RenderError("too-large", "OutputTooLarge",
                                         f"the rendered prompt is {len(result.text):,} characters"))
    return Outcome(result.text, tuple(result.generation_spans))


def _work(source: str, special_tokens: dict[str, str], tool_use: bool,
          emit: Callable[[Any], None], guard: StepGuard) -> None:
    from hfdoctor.chat.render import compile_template, template_kwargs, template_variables

    try:
        with guard.step():
            compile_template(source)
            variables = template_variables(source)
            dunders = dunder_accesses(source)
    except (Exception, StepTimeout) as err:
        emit(("compile", classify(err)))
        return
    if dunders:
        # Refuse to render at all: the sandbox would most likely hold, but there is
        # no reason for a chat template to touch Python internals.
        name, line = dunders[0]
        emit(("render", None, Outcome(error=RenderError(
            "unsafe", "SandboxEscape", f"the template accesses {name!r}", line))))
        return
    kwargs_read = template_kwargs(source, special_tokens)
    emit(("variables", sorted(variables), sorted(kwargs_read)))
    for key in plan(kwargs_read):
        emit(("start", key))
        outcome = _render_one(source, key, special_tokens, tool_use, guard)
        emit(("render", key, outcome))
        if outcome.error is not None and outcome.error.fatal:
            return


# --- the analysis, as the parent sees it ----------------------------------------------


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

    @property
    def modes(self) -> list[dict[str, Any]]:
        """The kwarg settings rendered: {} (none passed), then each kwarg value."""
        return [{}, *kwarg_modes(self.kwargs)]

    @property
    def thinking_kwargs(self) -> list[str]:
        return [k for k in THINKING_KWARGS if k in self.kwargs]


def trusted_templates() -> frozenset[str]:
    """sha256 of the registry's canonical templates: verified upstream text, rendered by
    the test suite over this very corpus, so they may run in-process (no fork)."""
    from hfdoctor import registry

    return frozenset(f.template.sha256 for f in registry.families() if f.template is not None)


def run_analysis(text: str, special_tokens: dict[str, str], tool_use: bool = False,
                 limits: Limits | None = None) -> TemplateAnalysis:
    """Analyse one template text: in a bounded worker, or in-process when it is trusted."""
    # Import jinja2 here, not in the child: once per process instead of once per fork,
    # and no import lock can be held by another thread at the moment of the fork.
    import hfdoctor.chat.render  # noqa: F401

    work = partial(_work, text, dict(special_tokens), tool_use)
    if hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest() in trusted_templates():
        result = run_in_process(work)
    else:
        result = run_bounded(work, limits)
    analysis = TemplateAnalysis(text, tool_use)
    current: RenderKey | None = None
    compiled = False
    for message in result.messages:
        tag = message[0]
        if tag == "compile":
            analysis.compile_error = message[1]
        elif tag == "variables":
            compiled = True
            analysis.variables, analysis.kwargs = frozenset(message[1]), frozenset(message[2])
        elif tag == "start":
            current = message[1]
        elif tag == "render":
            key, outcome = message[1], message[2]
            if key is not None:
                analysis.renders[key] = outcome
            current = None
            if outcome.error is not None and outcome.error.fatal:
                analysis.fatal = (key, outcome.error)
        elif tag == "too-large" and analysis.fatal is None:  # the first one: the child goes on
            analysis.fatal = (current, RenderError("too-large", "OutputTooLarge",
                                                   f"a render produced {message[1]:,} bytes"))
        elif tag == "crashed":
            analysis.fatal = (current, RenderError("error", "WorkerError", message[1]))
    if not result.finished and analysis.fatal is None:
        limits = limits or Limits()
        if result.failure == "timeout":
            error = RenderError("timeout", "Timeout", f"did not finish within {limits.total_s:g} s")
        elif result.signal is not None:
            # SIGXCPU: the CPU-time cap; SIGKILL from someone else: the kernel's OOM killer.
            kind = {int(signal.SIGXCPU): "timeout", int(signal.SIGKILL): "memory"}.get(result.signal, "error")
            error = RenderError(kind, "WorkerKilled", f"the render worker was {result.failure}")
        else:
            error = RenderError("error", "WorkerError", result.failure or "the render worker failed")
        if compiled:
            analysis.fatal = (current, error)
        elif analysis.compile_error is None:
            analysis.compile_error = error  # it never got past compiling
    return analysis


_CACHE: "weakref.WeakKeyDictionary[ModelRepo, dict[tuple[str, bool], TemplateAnalysis]]" = weakref.WeakKeyDictionary()


def analyze(repo: "ModelRepo", text: str, *, tool_use: bool = False) -> TemplateAnalysis:
    """The analysis of `text` rendered with this repo's special tokens.

    Cached on the repo, so every rule shares it; an upstream canonical template with
    upstream tokens comes precomputed with hfdoctor (store.py).
    """
    from hfdoctor.chat import store

    per_repo = _CACHE.setdefault(repo, {})
    key = (text, tool_use)
    if key not in per_repo:
        special_tokens = special_tokens_for_render(repo)
        analysis = store.load(text, special_tokens, tool_use)
        per_repo[key] = analysis if analysis is not None else run_analysis(text, special_tokens, tool_use)
    return per_repo[key]


def has_generation_tag(source: str) -> bool:
    """transformers' own test for `{% generation %}` support (no jinja2 needed)."""
    return re.search(r"\{\%-?\s*generation\s*-?\%\}", source) is not None


def analyze_source(repo: "ModelRepo", source: Any) -> TemplateAnalysis:
    """The analysis of a TemplateSource (a `tool_use` template is rendered with tools)."""
    return analyze(repo, source.text, tool_use=source.name == "tool_use")


def special_tokens_for_render(repo: "ModelRepo") -> dict[str, str]:
    """The named special tokens transformers passes to templates (`special_tokens_map`).

    bos/eos/unk/sep/pad/cls/mask from tokenizer_config.json, plus its other `*_token`
    strings and `extra_special_tokens` names (model-specific tokens such as
    image_token). special_tokens_map.json is read as transformers 5 reads it: only when
    tokenizer_config.json has no added_tokens_decoder, and then it wins.
    """
    from hfdoctor.repo import token_content

    config = repo.tokenizer_config or {}
    tokens: dict[str, str] = {}
    for key, value in config.items():
        if key in SPECIAL_TOKEN_NAMES:
            content = token_content(value)
            if content is not None:
                tokens[key] = content
        elif key.endswith("_token") and isinstance(value, str):
            tokens[key] = value
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):
        for key, value in extra.items():
            content = token_content(value)
            if content is not None:
                tokens[str(key)] = content
    if "added_tokens_decoder" not in config:
        for key, value in (repo.special_tokens_map or {}).items():
            content = token_content(value)
            if content is not None and (key in SPECIAL_TOKEN_NAMES or key.endswith("_token")):
                tokens[key] = content
    return tokens
