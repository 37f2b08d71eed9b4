"""The chat examples a model card shows (`messages = [{"role": ..., "content": ...}]` in a
code block), read without running anything, and rendered with the shipped template.

The card's code is parsed with Python's `ast` (never executed), bounded in size; a list
of dicts whose keys are `role` and `content` is a conversation. A content that is not a
string literal (`prompt`, an f-string) becomes a placeholder. Rendering happens in the same
bounded child as the template analysis (hfdoctor.bounded.sandbox), with the repository's special
tokens, as apply_chat_template would.
"""

from __future__ import annotations

import ast
import re
import hashlib
from dataclasses import dataclass
from functools import partial

from hfdoctor.bounded.sandbox import StepTimeout, run_bounded, run_in_process

PYTHON_INFO = ("", "python", "py", "python3", "pycon")
MAX_CARD_CHARS = 200_000
MAX_BLOCK_CHARS = 20_000
MAX_EXAMPLES = 8
PLACEHOLDER = "(the card's text)"
ROLES = ("system", "user", "assistant", "developer")


@dataclass(frozen=True)
class CardExample:
    line: int  # of the card body's line where the list starts
    messages: tuple[tuple[str, str], ...]  # (role, content)
    literal: tuple[bool, ...]  # whether each content is the card's own literal text


def card_examples(body: str) -> list[CardExample]:
    """Conversations written as message lists in the card's Python code blocks."""
    found: list[CardExample] = []
    for start_line, code in python_blocks(body[:MAX_CARD_CHARS]):
        if len(code) > MAX_BLOCK_CHARS or '"role"' not in code and "'role'" not in code:
            continue
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # not Python (shell, JSON with comments...): no example here
        for node in ast.walk(tree):
            example = _conversation(node, start_line)
            if example is not None and example not in found:
                found.append(example)
            if len(found) >= MAX_EXAMPLES:
                return found
    return found


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(1-based line of the block's first code line, code) of each fenced block whose info
    string is python or empty. Fences pair up in order, whatever their language, as
    Markdown reads them."""
    blocks, opened, info, lines = [], None, "", text.split("\n")
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped.startswith("```"):
            continue
        if opened is None:
            opened, info = number, stripped[3:].strip().lower()
            continue
        if info in PYTHON_INFO:
            blocks.append((opened + 1, "\n".join(lines[opened:number - 1])))
        opened = None
    return blocks


def _conversation(node: ast.AST, start_line: int) -> CardExample | None:
    if not isinstance(node, ast.List) or not node.elts or not all(isinstance(e, ast.Dict) for e in node.elts):
        return None
    messages, literal = [], []
    for item in node.elts:
        keys = [k.value if isinstance(k, ast.Constant) else None for k in item.keys]
        if set(keys) != {"role", "content"}:
            return None  # tool calls, content parts, **spreads: not a plain chat example
        values = dict(zip(keys, item.values))
        role = values["role"]
        if not isinstance(role, ast.Constant) or role.value not in ROLES:
            return None
        content = values["content"]
        is_text = isinstance(content, ast.Constant) and isinstance(content.value, str)
        messages.append((role.value, content.value if is_text else PLACEHOLDER))
        literal.append(is_text)
    return CardExample(start_line + node.lineno - 1, tuple(messages), tuple(literal))


@dataclass(frozen=True)
class ExampleRender:
    text: str | None
    error: str | None  # "ExceptionType: message"


def _work(template: str, examples: list[CardExample], special_tokens: dict[str, str], emit, guard) -> None:
    from hfdoctor.chat.render import render

    for example in examples:
        messages = [{"role": role, "content": content} for role, content in example.messages]
        try:
            with guard.step():
                result = render(template, messages, add_generation_prompt=messages[-1]["role"] != "assistant",
                                special_tokens=special_tokens)
            emit(ExampleRender(result.text[:200_000], None))
        except (Exception, StepTimeout) as err:  # noqa: BLE001 - what the template raises is the finding
            emit(ExampleRender(None, f"{type(err).__name__}: {str(err)[:300]}"))


def render_examples(template: str, examples: list[CardExample], special_tokens: dict[str, str],
                    trusted: frozenset[str] = frozenset()) -> list[ExampleRender]:
    """One render per example, in order (a shorter list when the worker stopped)."""
    import hfdoctor.chat.render  # noqa: F401 - imported before the fork, as run_analysis does

    work = partial(_work, template, examples, dict(special_tokens))
    digest = hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest()
    result = run_in_process(work) if digest in trusted else run_bounded(work)
    return [m for m in result.messages if isinstance(m, ExampleRender)]


def missing_content(example: CardExample, rendered: str) -> list[tuple[str, str]]:
    """The card's own system/user texts that the render leaves out: (role, text). Templates
    may rewrite a text (SmolLM3 strips a "/think" flag from the system prompt), so a text
    counts as left out only when most of its words are nowhere in the render."""
    return [(role, content) for (role, content), literal in zip(example.messages, example.literal)
            if literal and role in ("system", "user", "developer") and content.strip()
            and content.strip() not in rendered and _mostly_absent(content, rendered)]


def _mostly_absent(text: str, rendered: str) -> bool:
    words = {w for w in re.findall(r"[^\W\d_]{3,}", text)}
    if not words:
        return False
    return sum(w in rendered for w in words) * 2 < len(words)


def summary(example: CardExample) -> str:
    roles = [role for role, _ in example.messages]
    return " + ".join(roles)

