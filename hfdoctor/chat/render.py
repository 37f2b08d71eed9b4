"""Render chat templates exactly as transformers' `apply_chat_template(tokenize=False)`.

Mirrors transformers 5.x (`utils/chat_template_utils.py` and
`PreTrainedTokenizerBase.apply_chat_template`) without importing it:

- the environment: ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks) with the
  loopcontrols extension and the `{% generation %}` tag; the `tojson` filter
  (ensure_ascii=False, indent/separators/sort_keys); the globals `raise_exception`,
  `strftime_now`, a `dict` that only builds dicts, and a `namespace` that refuses
  underscore-prefixed attributes;
- the inputs: None-valued message keys dropped; everything rebuilt out of plain JSON
  types; `reasoning_content` / `thinking` / `reasoning` aliased to one another;
  `messages`, `tools`, `documents`, `add_generation_prompt`, then the named special
  tokens overridden by the caller's kwargs;
- tool-call `arguments` given as a JSON string are passed through as a string
  (apply_chat_template does not parse them; only `transformers serve` does), so a
  template that expects a mapping sees a string, exactly as in transformers.

`{% generation %}` spans are recorded the way transformers records them for
`return_assistant_tokens_mask`: (start, end) character offsets in the output.

Rendering here is in-process and unbounded: callers that render untrusted templates go
through hfdoctor.bounded.sandbox (see analysis.py).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterator

import jinja2
import jinja2.exceptions
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.utils
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Defined without jinja2, so that a stored analysis never needs to import it.
from hfdoctor.chat.render_plan import SPECIAL_TOKEN_NAMES
from hfdoctor.bounded.memo import memoized

# Names a message's reasoning is passed under; the first is the one templates read.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
# Variables apply_chat_template always passes (besides the special tokens).
PASSED_VARIABLES = ("messages", "tools", "documents", "add_generation_prompt")

# strftime_now reads this clock; tests pin it so renders are reproducible.
_clock: Callable[[], datetime] = datetime.now


@contextmanager
def pinned_clock(moment: datetime) -> Iterator[None]:
    """Make strftime_now() return `moment` (for reproducible renders)."""
    global _clock
    saved = _clock
    _clock = lambda: moment  # noqa: E731
    try:
        yield
    finally:
        _clock = saved


class TemplateRaised(jinja2.exceptions.TemplateError):
    """The template called raise_exception(): it declines this input on purpose."""


class GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for loss masks.

    The output is unchanged. While a tracker is active, each block's (start, end)
    character offsets are recorded, computed like transformers' AssistantTracker: from
    the length of what the template has yielded so far.
    """

    tags = {"generation"}

    def __init__(self, environment: jinja2.Environment):
        super().__init__(environment)
        environment.extend(activate_tracker=self.activate_tracker)
        self._rendered_blocks: list[str] | None = None
        self._generation_indices: list[tuple[int, int]] | None = None

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context: jinja2.nodes.EvalContext, caller: jinja2.runtime.Macro) -> str:
        text = caller()
        if self._rendered_blocks is not None and self._generation_indices is not None:
            start = len("".join(self._rendered_blocks))
            self._generation_indices.append((start, start + len(text)))
        return text

    @contextmanager
    def activate_tracker(self, rendered_blocks: list[str], generation_indices: list[tuple[int, int]]) -> Iterator[None]:
        self._rendered_blocks, self._generation_indices = rendered_blocks, generation_indices
        try:
            yield
        finally:
            self._rendered_blocks, self._generation_indices = None, None


def _raise_exception(message: Any) -> None:
    raise TemplateRaised(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes HTML characters; transformers replaces it with plain json.dumps.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return _clock().strftime(fmt)


class TemplateDict:
    """`dict` inside templates: builds dicts, but exposes nothing else of the type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(jinja2.utils.Namespace):
    """`namespace` inside templates: refuses underscore-prefixed attributes (CPython internals)."""

    def __init__(*args: Any, **kwargs: Any):  # same signature trick as jinja2's Namespace
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute."
            )


def make_environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


# Every name a template can read without it being passed: jinja's defaults plus ours.
GLOBAL_NAMES = frozenset(make_environment().globals)


@memoized("compiled templates", 64)
def compile_template(source: str) -> jinja2.Template:
    """Compile once per distinct template text. Raises jinja2.TemplateSyntaxError."""
    return make_environment().from_string(source)


@memoized("template syntax trees", 16)
def parse_template(source: str) -> jinja2.nodes.Template:
    """The template's syntax tree, parsed once for every static question asked of it.

    Only read, never compiled: jinja2's optimizer may rewrite a tree it compiles.
    """
    return compile_template(source).environment.parse(source)


@memoized("template variables", 64)
def template_variables(source: str) -> frozenset[str]:
    """Every variable the template reads that it does not set itself (vLLM's method)."""
    return frozenset(jinja2.meta.find_undeclared_variables(parse_template(source)))


@memoized("template names assigned and probed", 64)
def _assigned_and_probed(source: str) -> tuple[frozenset[str], frozenset[str]]:
    """Names the template defines itself (assignments, loop targets, macros and their
    parameters), and the names it probes (`is defined`, `| default`) that are not locals
    of the loop or macro the probe is in.

    A probe of a macro's own parameter or loop variable (Qwen3.5's `content`), or of a
    value the same loop or macro set on an earlier line (EXAONE's `reasoning_content`),
    tests a local; a probe before any such assignment is the "default unless passed"
    idiom (gpt-oss's `reasoning_effort`, inside a macro) and tests a caller kwarg.
    """
    nodes = jinja2.nodes
    ast = parse_template(source)
    assigned = {n.name for n in ast.find_all(nodes.Name) if n.ctx in ("store", "param")}
    assigned |= {m.name for m in ast.find_all(nodes.Macro)}
    probed: set[str] = set()
    Scope = list[tuple[set[str], list[tuple[str, int]]]]  # (parameters, stores with their line)

    def visit(node: jinja2.nodes.Node, scopes: Scope) -> None:
        if isinstance(node, (nodes.For, nodes.Macro, nodes.CallBlock)):
            params = {n.name for n in node.find_all(nodes.Name) if n.ctx == "param"}
            if isinstance(node, nodes.For):
                params |= {n.name for n in node.target.find_all(nodes.Name)} | (
                    {node.target.name} if isinstance(node.target, nodes.Name) else set())
            stores = [(n.name, n.lineno) for n in node.find_all(nodes.Name) if n.ctx == "store"]
            scopes = [*scopes, (params, stores)]
        probe = None
        if isinstance(node, nodes.Test) and node.name in ("defined", "undefined", "none"):
            probe = node.node
        elif isinstance(node, nodes.Filter) and node.name in ("default", "d"):
            probe = node.node
        if isinstance(probe, nodes.Name) and not any(
                probe.name in params or any(name == probe.name and line < probe.lineno for name, line in stores)
                for params, stores in scopes):
            probed.add(probe.name)
        for child in node.iter_child_nodes():
            visit(child, scopes)

    visit(ast, [])
    return frozenset(assigned), frozenset(probed)


def template_kwargs(source: str, special_token_names: Any = SPECIAL_TOKEN_NAMES) -> frozenset[str]:
    """The caller kwargs a template reads: its variables minus what is always passed.

    A name the template defines itself (`{% set content = ... %}` read in another scope,
    a macro, a loop variable) is a local, not a kwarg, unless the template also probes it
    at its top level with `is defined` or `| default` (Llama 3.1's `date_string`).
    """
    standard = set(PASSED_VARIABLES) | set(SPECIAL_TOKEN_NAMES) | set(special_token_names) | GLOBAL_NAMES
    assigned, probed = _assigned_and_probed(source)
    return frozenset(template_variables(source) - standard - (assigned - probed))


def plain_data(value: Any) -> Any:
    """Rebuild a value out of plain JSON types, like transformers' `_plain_template_data`.

    Only what is reachable from JSON-like input is handled; anything else becomes the
    same inert placeholder transformers uses (`<TypeName>`).
    """
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict):
        return {plain_data(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_data(v) for v in value)
    return f"<{type(value).__name__}>"


def alias_reasoning(messages: list[Any]) -> list[Any]:
    """Fill `reasoning_content` from older names for it, and `thinking` for gpt-oss templates."""
    aliased = []
    for message in messages:
        if isinstance(message, dict):
            reasoning = next((message[key] for key in REASONING_FIELDS if message.get(key) is not None), None)
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        aliased.append(message)
    return aliased


def prepare_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The message preprocessing apply_chat_template does before rendering.

    None-valued keys are dropped (APIs send `content: null`, `tool_calls: null`), the
    messages are rebuilt out of plain data, and reasoning fields are aliased.
    """
    dropped = [{k: v for k, v in m.items() if v is not None} for m in messages]
    chat = plain_data(dropped)
    for message in chat:
        if not isinstance(message, dict):
            raise TypeError(f"Chat messages should be dicts, dataclasses or pydantic models, but got {message!r}.")
    return alias_reasoning(chat)


@dataclass
class RenderResult:
    text: str
    # (start, end) character offsets of each {% generation %} block, in output order.
    generation_spans: list[tuple[int, int]] = field(default_factory=list)


def render(
    source: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    documents: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    special_tokens: dict[str, str] | None = None,
    **kwargs: Any,
) -> RenderResult:
    """Render like apply_chat_template(tokenize=False). Raises what the template raises.

    `special_tokens` is the tokenizer's `special_tokens_map` (bos_token, eos_token, ...);
    `kwargs` are the caller's template kwargs (enable_thinking=..., ...), which win over
    special tokens of the same name, as in transformers.
    """
    if not messages:
        raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    template = compile_template(source)
    if documents is not None:
        for document in documents:
            if not isinstance(document, dict):
                raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
    template_kwargs = plain_data({**(special_tokens or {}), **kwargs})
    blocks: list[str] = []
    spans: list[tuple[int, int]] = []
    generator = template.generate(
        messages=prepare_messages(messages),
        tools=plain_data(tools),
        documents=plain_data(documents),
        add_generation_prompt=add_generation_prompt,
        **template_kwargs,
    )
    with template.environment.activate_tracker(blocks, spans):  # type: ignore[attr-defined]
        try:
            for block in generator:
                blocks.append(block)
        except BaseException as err:  # noqa: BLE001 - annotated and re-raised
            _note_template_line(err, generator)
            raise
    return RenderResult("".join(blocks), spans)


def _note_template_line(err: BaseException, generator: Any) -> None:
    """Record where a suspended template was when `err` hit between two yields.

    An interrupt (a timeout) often lands while the template's generator is suspended,
    so no template frame is on the traceback; the generator's own frame still says
    where it was. The line goes on the exception as `template_line`.
    """
    inner = generator
    while getattr(inner, "gi_yieldfrom", None) is not None:
        inner = inner.gi_yieldfrom
    frame = getattr(inner, "gi_frame", None)
    template = frame.f_globals.get("__jinja_template__") if frame is not None else None
    if template is not None:
        try:
            err.template_line = template.get_corresponding_lineno(frame.f_lineno)  # type: ignore[attr-defined]
        except (AttributeError, TypeError):
            pass
