"""What a chat template does on purpose, read from its source: branches on message content, and the text it emits.

A backdoored template renders every standard conversation exactly like the real one and
changes its output only when a message contains a trigger (a rare word, a code phrase):
rendering cannot find it, reading the source can. This module parses the template
(jinja2's parser only: nothing is rendered or executed) and reports:

- content triggers: `if` conditions that compare a message's content (`message.content`,
  `message['content']`, or a variable set from them) with a string literal through `in`,
  `==`, `!=`, `startswith`, `endswith`, `find`, `count` or `index`, with the text the branch
  emits;
- emitted literals: every string the template writes (template data and string constants
  in `{{ }}`), with its line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from hfdoctor.knowledge.registry import data_file

# What upstream_templates/make_triggers.py wrote for the shipped canonical templates: the
# same reading, done once when the data is generated (check parses no canonical template).
TRIGGERS_FILE = "triggers.json"

CONTENT_KEYS = {"content", "reasoning_content", "thinking"}
STRING_METHODS = {"startswith", "endswith", "find", "count", "index", "rfind", "rindex", "__contains__"}


@dataclass(frozen=True)
class Trigger:
    line: int
    literal: str
    emitted: tuple[str, ...]  # the literal text the branch writes
    # The branch does nothing but write constant text (no variable, no assignment, no
    # nested logic): then `emitted` (whitespace included in `layout`) is all it can add.
    only_literals: bool = False
    layout: tuple[str, ...] = ()  # every constant it writes, whitespace included


@dataclass
class TemplateText:
    triggers: list[Trigger] = field(default_factory=list)
    emitted: list[tuple[int, str]] = field(default_factory=list)  # (line, text)


def _refers_to_content(node: Any, content_vars: set[str]) -> bool:
    """Whether an expression is (derived from) a message's content."""
    from jinja2 import nodes

    for sub in [node, *node.find_all(nodes.Node)]:
        if isinstance(sub, nodes.Getattr) and sub.attr in CONTENT_KEYS:
            return True
        if isinstance(sub, nodes.Getitem) and isinstance(sub.arg, nodes.Const) and sub.arg.value in CONTENT_KEYS:
            return True
        if isinstance(sub, nodes.Name) and sub.name in content_vars:
            return True
    return False


def _literals_tested(test: Any, content_vars: set[str]) -> list[str]:
    """String literals the condition compares message content with."""
    from jinja2 import nodes

    found = []
    for cmp in [test, *test.find_all(nodes.Compare)]:
        if not isinstance(cmp, nodes.Compare):
            continue
        sides = [cmp.expr, *(op.expr for op in cmp.ops)]
        ops = {op.op for op in cmp.ops}
        if not ops & {"in", "notin", "eq", "ne"}:
            continue
        consts = [s.value for s in sides if isinstance(s, nodes.Const) and isinstance(s.value, str)]
        if consts and any(_refers_to_content(s, content_vars) for s in sides if not isinstance(s, nodes.Const)):
            found.extend(consts)
    for call in test.find_all(nodes.Call):
        if isinstance(call.node, nodes.Getattr) and call.node.attr in STRING_METHODS \
                and _refers_to_content(call.node.node, content_vars):
            found.extend(a.value for a in call.args if isinstance(a, nodes.Const) and isinstance(a.value, str))
    return found


def _emitted(body: list[Any]) -> list[tuple[int, str]]:
    from jinja2 import nodes

    out = []
    for node in body:
        for output in [node, *node.find_all(nodes.Output)]:
            if not isinstance(output, nodes.Output):
                continue
            for child in output.nodes:
                if isinstance(child, nodes.TemplateData) and child.data.strip():
                    out.append((child.lineno, child.data))
                for const in [child, *child.find_all(nodes.Const)]:
                    if isinstance(const, nodes.Const) and isinstance(const.value, str) and const.value.strip():
                        out.append((const.lineno, const.value))
    return out


def to_json(read: TemplateText) -> dict[str, Any]:
    return {"triggers": [[t.line, t.literal, list(t.emitted)] for t in read.triggers],
            "emitted": [[line, text] for line, text in read.emitted]}


def from_json(data: dict[str, Any]) -> TemplateText:
    return TemplateText([Trigger(line, literal, tuple(emitted)) for line, literal, emitted in data["triggers"]],
                        [(line, text) for line, text in data["emitted"]])


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@lru_cache(maxsize=1)
def stored() -> dict[str, dict[str, Any]]:
    """template sha256 -> the shipped reading of a canonical template ({} when missing: slow, not wrong)."""
    try:
        return json.loads(data_file(TRIGGERS_FILE).read_text(encoding="utf-8"))["templates"]
    except (OSError, ValueError, KeyError):
        return {}


def read_template(text: str) -> TemplateText | None:
    """Triggers and emitted text of a template hfdoctor ships (an upstream one); None when it does not
    parse. Read from triggers.json when stored there, else parsed here, in this process: a
    repository's template is read in its bounded analysis worker instead
    (hfdoctor.chat.analysis.template_reading)."""
    known = stored().get(sha256(text))
    if known is not None:
        return from_json(known)
    return parse_template_text(text)


def parse_template_text(text: str) -> TemplateText | None:
    """read_template's work itself: jinja2's parser over the source (make_triggers.py uses it)."""
    from jinja2 import nodes

    from hfdoctor.chat.render import make_environment

    try:
        tree = make_environment().parse(text)  # transformers' environment: {% generation %} parses
    except Exception:  # TemplateSyntaxError and friends: chat-template-syntax-error reports it
        return None
    content_vars: set[str] = set()
    for assign in tree.find_all(nodes.Assign):
        if isinstance(assign.target, nodes.Name) and _refers_to_content(assign.node, content_vars):
            content_vars.add(assign.target.name)
    result = TemplateText(emitted=_emitted(tree.body))
    for branch in tree.find_all(nodes.If):
        for literal in _literals_tested(branch.test, content_vars):
            emitted = tuple(dict.fromkeys(t for _, t in _emitted(branch.body)))
            only, layout = _only_literals(branch)
            result.triggers.append(Trigger(branch.test.lineno, literal, emitted, only, layout))
    return result


def _only_literals(branch: Any) -> tuple[bool, tuple[str, ...]]:
    """(whether the branch and its else/elif only write constants, those constants)."""
    from jinja2 import nodes

    texts: list[str] = []
    bodies = [branch.body, branch.else_, *[elif_.body for elif_ in branch.elif_]]
    for body in bodies:
        for node in body:
            if not isinstance(node, nodes.Output):
                return False, ()
            for child in node.nodes:
                if isinstance(child, nodes.TemplateData):
                    texts.append(child.data)
                elif isinstance(child, nodes.Const) and isinstance(child.value, str):
                    texts.append(child.value)
                else:
                    return False, ()
    return bool(texts), tuple(texts)
