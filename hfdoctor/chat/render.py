"""Render chat templates exactly as transformers' `apply_chat_template(tokenize=False)`.

transformers compiles templates in an ImmutableSandboxedEnvironment with
trim_blocks/lstrip_blocks, the loopcontrols extension and its `{% generation %}` tag,
adds the `tojson` filter (ensure_ascii=False) and the `raise_exception` and
`strftime_now` globals, and passes messages, tools, documents,
add_generation_prompt, the named special tokens and the caller's kwargs. This module
does the same without importing transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateRaised(jinja2.exceptions.TemplateError):
    """The template called raise_exception(): it declines this input on purpose."""


class GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for loss masks.

    Rendering output is unchanged; the spans are recorded on the environment's
    `generation_spans` list when a caller asks for them (see render(..., spans=True)).
    """

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation", []), [], [], body).set_lineno(lineno)

    def _generation(self, caller: Any) -> str:
        text = caller()
        spans = getattr(self.environment, "generation_texts", None)
        if spans is not None:
            spans.append(text)
        return text


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def make_environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    """Compile once per distinct template text. Raises jinja2.TemplateSyntaxError."""
    return make_environment().from_string(source)


@dataclass
class RenderResult:
    text: str
    generation_texts: list[str] = field(default_factory=list)


def prepare_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Message preprocessing transformers applies before rendering: None-valued keys are dropped."""
    return [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m for m in messages]


def render(
    source: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    documents: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    special_tokens: dict[str, str | None] | None = None,
    **kwargs: Any,
) -> RenderResult:
    """Render like apply_chat_template(tokenize=False). Raises jinja2 errors as they come."""
    template = compile_template(source)
    generation_texts: list[str] = []
    template.environment.generation_texts = generation_texts  # type: ignore[attr-defined]
    try:
        text = template.render(
            messages=prepare_messages(messages),
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **(special_tokens or {}),
            **kwargs,
        )
    finally:
        template.environment.generation_texts = None  # type: ignore[attr-defined]
    return RenderResult(text, generation_texts)
