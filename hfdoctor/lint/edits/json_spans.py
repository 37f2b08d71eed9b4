"""Edit JSON text in place: replace, insert or remove one value, in the file's own formatting.

A fix must keep every byte it does not need to change: indentation, key order, escaping,
line ends. So no file is re-serialised; each edit is a splice of the original bytes at
the span hfdoctor.bounded.jsontext locates, with the new value encoded in the style the file
already uses (detect_style).
"""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hfdoctor.bounded.jsontext import (
    _CONTAINER_TOKEN, _string_end, array_items, locate, locate_member, make_pointer, object_members, parse_pointer, skip_whitespace,
    value_end,
)

# --- editing ----------------------------------------------------------------------------
#
# The fixer never re-serialises a file. It finds the byte span of one value (or the
# point where a new member goes) and writes only that, in the style the file already
# uses: its indentation unit, its separators, how it escapes strings. So the diff of a
# fix is exactly the change, and a file saved by transformers (indent=2, sort_keys,
# ensure_ascii=False) gets a new key where transformers itself would have put it.

# Every escape sequence of the file, left to right: each backslash starts one (in valid JSON
# a backslash occurs only in strings), so two backslashes and u0041 are an escaped backslash
# and a plain "u0041". Group 1 is what follows the backslash: one byte, or u and four hex
# digits. The literal first byte lets the search skip ahead in C (tokenizer.json is megabytes).
_ESCAPE_SEQUENCE = re.compile(rb"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_HTML_ESCAPES = frozenset({b"u003c", b"u003C", b"u003e", b"u003E", b"u0026"})
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


@dataclass(frozen=True)
class Style:
    """How a JSON file is written, so that new text looks like the old."""

    indent: str | None = "  "  # one level ("  ", "    ", "\t"); None for a one-line file
    key_separator: str = ": "  # between a key and its value
    item_separator: str = ", "  # between items written on one line
    ensure_ascii: bool = True  # non-ASCII written as \uXXXX (json.dumps' default)
    escape_slash: bool = False  # "/" written as "\/"
    escape_html: bool = False  # "<", ">", "&" written as \u003c... (Go, .NET, Jackson)
    upper_hex: bool = False  # \u00E9 rather than json.dumps' \u00e9
    inline_scalar_lists: bool = False  # [1, 2] on one line even in an indented file
    newline: str = "\n"  # "\r\n" in a file saved on Windows


def detect_style(data: bytes, ensure_ascii_default: bool = True) -> Style:
    """Read the style off the file. Where the file does not say (an all-ASCII file says
    nothing about ensure_ascii), `ensure_ascii_default` decides."""
    indent: str | None = None
    key_separator, item_separator = ": ", ", "
    try:
        start = skip_whitespace(data, 0)
        members = object_members(data, start) if data[start : start + 1] == b"{" else []
        if members:
            lead = data[start + 1 : members[0].key_start].decode()
            if "\n" in lead:
                indent = lead.rsplit("\n", 1)[1] or None
            key_separator = data[_string_end(data, members[0].key_start) : members[0].value_start].decode()
            if len(members) > 1 and indent is None:
                item_separator = data[members[0].value_end : members[1].key_start].decode()
    except (ValueError, IndexError, AssertionError, UnicodeDecodeError, json.JSONDecodeError):
        pass
    inline_lists, list_separator = _scalar_list_layout(data)
    if indent is not None and list_separator:
        item_separator = list_separator
    escapes = set(_ESCAPE_SEQUENCE.findall(data))  # the distinct ones
    unicode_escapes = [e for e in escapes if len(e) == 5]
    if not data.isascii():
        ensure_ascii = False
    elif any(int(e[1:], 16) > 0x7F for e in unicode_escapes):
        ensure_ascii = True
    else:
        ensure_ascii = ensure_ascii_default
    hex_digits = b"".join(e[1:] for e in unicode_escapes)
    first_newline = data.find(b"\n")
    crlf = first_newline > 0 and data[first_newline - 1] == 0x0D
    return Style(
        indent=indent,
        key_separator=key_separator,
        item_separator=item_separator if "\n" not in item_separator else ", ",
        ensure_ascii=ensure_ascii,
        escape_slash=b"/" in escapes,
        escape_html=bool(escapes & _HTML_ESCAPES),
        upper_hex=re.search(rb"[A-F]", hex_digits) is not None and re.search(rb"[a-f]", hex_digits) is None,
        inline_scalar_lists=indent is None or inline_lists,
        newline="\r\n" if crlf else "\n",
    )


def _scalar_list_layout(data: bytes) -> tuple[bool, str | None]:
    """How the file writes a list of numbers or strings: (on one line?, separator).

    Read off the first such non-empty list; (False, None) when the file has none."""
    stack: list[int] = []
    for match in _CONTAINER_TOKEN.finditer(data):
        token = match.group()
        if token == b"[":
            stack.append(match.start())
            continue
        if token != b"]" or not stack:
            continue  # a string or a brace
        start = stack.pop()
        first = skip_whitespace(data, start + 1)
        if first >= match.start() or data[first] in b"[{":
            continue  # empty, or a list of containers
        if b"\n" in data[start : match.end()]:
            return False, None
        items = array_items(data, start)
        return True, data[items[0][1] : items[1][0]].decode() if len(items) > 1 else None
    return False, None


def encode_string(text: str, style: Style) -> str:
    """A JSON string literal for `text`, escaped the way the file escapes."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif code < 0x20 or (style.escape_html and ch in "<>&"):
            out.append(_unicode_escape(code, style))
        elif ch == "/" and style.escape_slash:
            out.append("\\/")
        elif code > 0x7E and style.ensure_ascii:
            if code > 0xFFFF:  # astral: a surrogate pair, as json.dumps writes it
                code -= 0x10000
                out.append(_unicode_escape(0xD800 | (code >> 10), style) + _unicode_escape(0xDC00 | (code & 0x3FF), style))
            else:
                out.append(_unicode_escape(code, style))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _unicode_escape(code: int, style: Style) -> str:
    return f"\\u{code:04X}" if style.upper_hex else f"\\u{code:04x}"


def encode_value(value: Any, style: Style, line_indent: str = "") -> str:
    """`value` as JSON text in the file's style; `line_indent` is the indentation of the
    line the value starts on (nested lines are indented one level more)."""
    if isinstance(value, str):
        return encode_string(value, style)
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        scalars = all(not isinstance(v, (dict, list, tuple)) for v in value)
        if style.indent is None or (scalars and style.inline_scalar_lists):
            return "[" + style.item_separator.join(encode_value(v, style, line_indent) for v in value) + "]"
        inner, newline = line_indent + style.indent, style.newline
        body = ("," + newline).join(inner + encode_value(v, style, inner) for v in value)
        return "[" + newline + body + newline + line_indent + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        if style.indent is None:
            return "{" + style.item_separator.join(
                encode_string(str(k), style) + style.key_separator + encode_value(v, style) for k, v in value.items()
            ) + "}"
        inner, newline = line_indent + style.indent, style.newline
        body = ("," + newline).join(
            inner + encode_string(str(k), style) + style.key_separator + encode_value(v, style, inner)
            for k, v in value.items()
        )
        return "{" + newline + body + newline + line_indent + "}"
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def line_indent_at(data: bytes, offset: int) -> str:
    """The leading whitespace of the line that holds `offset`."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    end = line_start
    while end < offset and data[end] in b" \t":
        end += 1
    return data[line_start:end].decode()


@dataclass(frozen=True)
class Splice:
    """Replace bytes [start, end) with `text` (start == end inserts)."""

    start: int
    end: int
    text: str

    def apply(self, data: bytes) -> bytes:
        return data[: self.start] + self.text.encode("utf-8") + data[self.end :]


def set_value(data: bytes, pointer: str, value: Any, style: Style) -> Splice | None:
    """The splice that makes `pointer` hold `value`: its old value's span replaced, or a
    new member inserted (parents created as needed). None when the path runs through
    something that is not an object, or the text is odd."""
    parts = parse_pointer(pointer)
    if not parts:
        return None  # replacing the whole document is re-serialising it
    span = locate(data, pointer)
    if span is not None:
        return Splice(span[0], span[1], encode_value(value, style, line_indent_at(data, span[0])))
    parent_pointer, key = make_pointer(*parts[:-1]), parts[-1]
    parent = locate(data, parent_pointer)
    if parent is None:
        return set_value(data, parent_pointer, {key: value}, style) if len(parts) > 1 else None
    try:
        if data[parent[0]] == 0x7B:
            return insert_member(data, parent[0], key, value, style)
        if data[parent[0]] == 0x5B and key == "-":  # RFC 6902's "append to the array"
            return append_item(data, parent[0], value, style)
    except (ValueError, IndexError, AssertionError, json.JSONDecodeError):
        return None
    return None


def insertion_index(keys: list[str], key: str, top_level_sorted: bool) -> int:
    """Where a new key goes: its sorted place in a sorted object (json.dumps(sort_keys=True),
    which is how transformers saves tokenizer_config.json and generation_config.json),
    else at the end (where a dict that gained a key would write it)."""
    is_sorted = keys == sorted(keys) if len(keys) > 1 else top_level_sorted
    return bisect.bisect(keys, key) if is_sorted else len(keys)


def _top_level_sorted(data: bytes) -> bool:
    start = skip_whitespace(data, 0)
    if data[start : start + 1] != b"{":
        return False
    keys = [m.key for m in object_members(data, start)]
    return keys == sorted(keys)


def insert_member(data: bytes, obj_start: int, key: str, value: Any, style: Style) -> Splice:
    """A new `"key": value` member in the object at `obj_start`, laid out like its siblings."""
    members = object_members(data, obj_start)
    keys = [m.key for m in members]
    k = insertion_index(keys, key, _top_level_sorted(data))
    if not members:
        close = value_end(data, obj_start) - 1
        if style.indent is None:
            text = encode_string(key, style) + style.key_separator + encode_value(value, style)
            return Splice(obj_start + 1, close, text)
        outer = line_indent_at(data, obj_start)
        inner = outer + style.indent
        text = style.newline + inner + encode_string(key, style) + style.key_separator + encode_value(value, style, inner)
        return Splice(obj_start + 1, close, text + style.newline + outer)
    # The bytes between two siblings (comma, newline, indentation) are what goes between
    # the new member and its neighbour; the most common gap, so that one odd line in a
    # hand-edited file is not copied.
    if len(members) > 1:
        gap = _most_common(data[a.value_end : b.key_start].decode() for a, b in zip(members, members[1:]))
    else:
        lead = data[obj_start + 1 : members[0].key_start].decode()
        gap = "," + lead if "\n" in lead else style.item_separator
        if not gap.startswith(","):
            gap = "," + gap
    neighbour = members[min(k, len(members) - 1)]
    key_sep = data[_string_end(data, neighbour.key_start) : neighbour.value_start].decode()
    indent = gap.rsplit("\n", 1)[1] if "\n" in gap else line_indent_at(data, neighbour.key_start)
    member = encode_string(key, style) + key_sep + encode_value(value, style, indent)
    if k < len(members):
        return Splice(members[k].key_start, members[k].key_start, member + gap)
    end = members[-1].value_end
    return Splice(end, end, gap + member)


def _most_common(gaps) -> str:
    return Counter(gaps).most_common(1)[0][0]


def append_item(data: bytes, array_start: int, value: Any, style: Style) -> Splice:
    """`value` appended to the array at `array_start`, laid out like its items."""
    items = array_items(data, array_start)
    if not items:
        end = value_end(data, array_start)
        return Splice(array_start, end, encode_value([value], style, line_indent_at(data, array_start)))
    if len(items) > 1:
        gap = _most_common(data[a[1] : b[0]].decode() for a, b in zip(items, items[1:]))
    else:
        lead = data[array_start + 1 : items[0][0]].decode()
        gap = "," + lead if "\n" in lead else "," + style.item_separator.lstrip(",")
    indent = gap.rsplit("\n", 1)[1] if "\n" in gap else line_indent_at(data, items[-1][0])
    return Splice(items[-1][1], items[-1][1], gap + encode_value(value, style, indent))


def add_to_id_list(data: bytes, pointer: str, token_id: int, style: Style) -> Splice | None:
    """Make the id list at `pointer` (an int, a list of ints, null or absent) include
    `token_id`, keeping the ids already there and their order. None when it already does."""
    span = locate(data, pointer)
    if span is None:
        return set_value(data, pointer, token_id, style)
    try:
        current = json.loads(data[span[0] : span[1]])
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if current is None:
        return Splice(span[0], span[1], str(token_id))
    if isinstance(current, bool) or not isinstance(current, (int, list)):
        return None
    if current == token_id or (isinstance(current, list) and token_id in current):
        return None
    if isinstance(current, int):
        # The number becomes a list of two, written the way the file writes lists.
        as_list = encode_value([current, token_id], style, line_indent_at(data, span[0]))
        return Splice(span[0], span[1], as_list)
    try:
        return append_item(data, span[0], token_id, style)
    except (ValueError, IndexError, AssertionError, json.JSONDecodeError):
        return None


def member_removal_span(data: bytes, pointer: str) -> tuple[int, int] | None:
    """The bytes to cut to delete the member at `pointer` with its separating comma and
    the whitespace before the next member (or, for the last member, the comma and
    whitespace after the previous one): the exact inverse of insert_member."""
    parts = parse_pointer(pointer)
    member = locate_member(data, pointer)
    if member is None:
        return None
    parent = locate(data, make_pointer(*parts[:-1]))
    assert parent is not None
    members = object_members(data, parent[0])
    index = next(i for i, m in enumerate(members) if m.key_start == member.key_start)
    if index + 1 < len(members):
        return member.key_start, members[index + 1].key_start
    if index > 0:
        return members[index - 1].value_end, member.value_end
    return parent[0] + 1, parent[1] - 1  # the only member: the object becomes {}
