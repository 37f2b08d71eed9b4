"""JSON and YAML from the repository, parsed with limits: a hostile file is a ParseError, never a crash.

`json.loads` and `yaml.safe_load` accept inputs that break whoever reads them next: JSON
nested 20,000 deep raises RecursionError, an integer of 5,000 digits raises ValueError (not
JSONDecodeError), YAML nested deep recurses in PyYAML's composer, and a few YAML aliases
expand into billions of nodes for the first program that walks the result. Here:

- JSON deeper than MAX_DEPTH, with more than MAX_CONTAINERS arrays and objects or MAX_VALUES
  values, or with an integer beyond Python's digit limit, is refused: bytes and depth alone do
  not bound what a parse builds (63 MB of `{}` is 21 million dicts, 1.7 GB, and only 65 KB as a
  compressed git blob);
- YAML is composed with a depth limit, its aliases may not expand beyond MAX_YAML_NODES,
  and an integer beyond the digit limit is refused;

each with a message that completes "<file> ..." and the line where that is known.
Nothing here imports the rest of hfdoctor.
"""

from __future__ import annotations

import gc
import hashlib
import json
from contextlib import contextmanager
from typing import Any, Iterator

from hfdoctor.bounded.memo import memo

# Deeper than any real metadata file (tokenizer.json's normalizer sequences are ~6 deep).
MAX_DEPTH = 128
# The depth check reads the bytes of files up to this size; a larger file is tokenizer.json
# or vocab.json, which json.loads bounds by its own recursion limit and nothing in
# hfdoctor walks recursively.
DEPTH_CHECK_MAX_BYTES = 8 * 1024 * 1024
MAX_YAML_NODES = 1_000_000
# What a parse may build. Qwen3's tokenizer.json has 153,000 arrays and 610,000 values, a
# 262,000-token vocabulary with its merges about four times that; each value costs 40 to 80
# bytes parsed. Counted from the bytes before parsing, brackets and commas inside strings too
# (an upper bound: real files hold a few thousand of those).
MAX_CONTAINERS = 2_000_000
MAX_VALUES = 6_000_000
# Above this size a parse pauses the cyclic garbage collector (see gc_paused), and its
# result is remembered by the bytes' digest (see load_json).
GC_PAUSE_BYTES = 1024 * 1024
# Each entry is (value, its estimated size): a parse of the largest file allowed is hundreds of MB.
LARGE_PARSES = memo("large JSON parses", 2, max_bytes=256 << 20, weigh=lambda entry: entry[1])
# What one parsed value costs, about (a short string or number and its slot: see MAX_VALUES).
BYTES_PER_VALUE = 80

_KEEP = b'[]{}"'
_DELETE = bytes(b for b in range(256) if b not in _KEEP)


class ParseError(ValueError):
    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message, self.line = message, line


def nesting_exceeds(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON text nests arrays/objects deeper than `limit`, at C speed.

    Escapes and strings are dropped, leaving only brackets; each pass then deletes every
    innermost `[]`/`{}` pair, so the number of passes is the depth. (A pass marks the pairs
    before it deletes them: deleting `[]` first would turn `{[]}` into an innermost `{}` that
    the same pass deleted too, counting two levels as one.) Unbalanced text stops early
    (json.loads reports it).
    """
    text = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _DELETE)
    brackets = b"".join(text.split(b'"')[::2])
    for _ in range(limit):
        if not brackets:
            return False
        shorter = brackets.replace(b"[]", b".").replace(b"{}", b".").replace(b".", b"")
        if len(shorter) == len(brackets):
            return False
        brackets = shorter
    return bool(brackets)


def load_json(text: str, raw: bytes | None = None) -> Any:
    """json.loads with limits; ParseError(message, line) for anything a reader cannot take.

    The last two large files parsed (tokenizer.json, vocab.json), if they are not too large
    together, are remembered by their bytes' sha256: the same bytes again (the fixer re-checking a patched view whose
    tokenizer.json it did not touch, a catalog where repositories share a tokenizer) give
    the same value without a second parse. The value is shared, as it is among the rules of
    one check: readers never change what they are given.
    """
    data = raw if raw is not None else text.encode("utf-8", "surrogatepass")
    if len(data) <= GC_PAUSE_BYTES:
        return _parse(text, data)
    key = (len(data), hashlib.sha256(data).digest())
    value, _ = LARGE_PARSES.lookup(key, lambda: (_parse(text, data), _estimated_bytes(data)))
    return value


def _estimated_bytes(data: bytes) -> int:
    """About what the parse of `data` holds: its values (counted as too_many_values counts them)
    and its text."""
    values = data.count(b"{") + data.count(b"[") + data.count(b",") + 1
    return values * BYTES_PER_VALUE + len(data)


def too_many_values(data: bytes) -> str | None:
    """Why JSON text would build more than a parse may (None when it would not): at C speed,
    counting every bracket and comma, those inside strings too."""
    containers = data.count(b"{") + data.count(b"[")
    if containers > MAX_CONTAINERS:
        return f"more than {MAX_CONTAINERS:,} arrays and objects"
    if containers + data.count(b",") > MAX_VALUES:
        return f"more than {MAX_VALUES:,} values"
    return None


def _parse(text: str, data: bytes) -> Any:
    if len(data) <= DEPTH_CHECK_MAX_BYTES and nesting_exceeds(data):
        raise ParseError(f"is not usable JSON: nested deeper than {MAX_DEPTH} levels", None)
    too_many = too_many_values(data)
    if too_many is not None:
        raise ParseError(f"is not read: it holds {too_many}, more than any real metadata file (hfdoctor's limit)",
                         None)
    try:
        if len(data) <= GC_PAUSE_BYTES:
            return json.loads(text)
        with gc_paused():
            return json.loads(text)
    except json.JSONDecodeError as err:
        # An unterminated string or an error at the very end: the file was cut off.
        truncated = err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated")
        what = "is truncated" if truncated else "is not valid JSON"
        raise ParseError(f"{what}: {err.msg} at line {err.lineno} column {err.colno}", err.lineno) from None
    except RecursionError:
        raise ParseError(f"is not usable JSON: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as err:  # an integer of more than 4,300 digits
        raise ParseError(f"is not usable JSON: it holds {_int_message(err)}") from None


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off for one large parse (also the fixer's re-parse of a patched file).

    tokenizer.json's vocabulary and merges are some 300,000 dicts and lists: while
    json.loads builds them, the collector runs every few hundred allocations and walks the
    growing heap each time, which costs about a third of the parse. Parsed JSON holds no
    reference cycle, so pausing it for the parse leaves nothing uncollected.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _int_message(err: Exception) -> str:
    if "integer string conversion" in str(err) or "digits" in str(err):
        return "an integer of more than 4,300 digits, which Python (and every loader) refuses"
    return str(err)[:200]


# --- YAML ---------------------------------------------------------------------------------


def _loader_class():
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """SafeLoader that refuses deep nesting while composing (before Python's recursion
        limit is near) and counts the nodes aliases would expand to."""

        depth = 0

        def compose_node(self, parent, index):
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise ParseError(f"nests deeper than {MAX_DEPTH} levels", mark.line + 1)
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return BoundedLoader


def _expanded_size(root) -> int:
    """How many nodes the document has once every alias is expanded (a DAG walk, memoized)."""
    import yaml

    sizes: dict[int, int] = {}
    stack = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            sizes[id(node)] = 1
            continue
        if ready:
            sizes[id(node)] = min(MAX_YAML_NODES + 1, 1 + sum(sizes[id(c)] for c in children))
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes.get(id(root), 0)


def load_yaml(text: str, first_line: int = 1) -> Any:
    """yaml.safe_load with limits; ParseError(message, line) where the YAML is refused."""
    import yaml

    loader = None
    try:
        loader = _loader_class()(text)  # the reader refuses control characters here already
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_YAML_NODES:
            raise ParseError(f"has aliases that expand to more than {MAX_YAML_NODES:,} values (an alias bomb)")
        return loader.construct_document(node)
    except ParseError as err:
        raise ParseError(err.message, first_line + err.line - 1 if err.line else None) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = first_line + mark.line if mark is not None else first_line
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ParseError(f"is not valid YAML: {problem} (line {line})", line) from None
    except RecursionError:
        raise ParseError(f"nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as err:  # yaml's int constructor on 5,000 digits
        raise ParseError(f"holds {_int_message(err)}") from None
    finally:
        if loader is not None:
            loader.dispose()

