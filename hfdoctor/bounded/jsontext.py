"""Find where a JSON value lives in the bytes of a file.

`json.loads` gives values but forgets positions. Findings want a line number, and the
fixer wants the exact byte span of a value (or of a whole object member) so it can
replace only those bytes. This module is a small scanner over the raw bytes that
walks a JSON Pointer (RFC 6901) down to the value. It assumes the text already
parsed with `json.loads`; on anything else it returns None rather than guessing.
"""

from __future__ import annotations

import json
import re
from array import array
from dataclasses import dataclass
from typing import Iterator

_WHITESPACE = b" \t\r\n"


@dataclass(frozen=True)
class Member:
    """One `"key": value` of an object, as byte offsets into the file."""

    key: str
    key_start: int  # offset of the opening quote of the key
    value_start: int
    value_end: int  # one past the last byte of the value


def parse_pointer(pointer: str) -> list[str]:
    if pointer in ("", "/"):
        return [] if pointer == "" else [""]
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {pointer!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def make_pointer(*parts: str | int) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def skip_whitespace(data: bytes, i: int) -> int:
    n = len(data)
    while i < n and data[i] in _WHITESPACE:
        i += 1
    return i


# A whole JSON string (the unrolled form of "(?:[^"\\]|\\.)*": no backtracking), and the
# tokens that matter when skipping a container: strings, brackets, or a lone quote
# (a string that never ends).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_CONTAINER_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]|"', re.DOTALL)
# The next bracket after `i`, skipping whole strings and runs of other bytes in C rather
# than token by token (a run as one step: 2.6x faster over a 9 MB tokenizer.json than a byte
# a step); group 1 is the bracket, or a lone quote (a string that never ends), or "" at the
# end. Linear: the two branches start on different bytes, and group 1 matches wherever the
# repetition stops, so nothing is ever backtracked.
_NEXT_BRACKET = re.compile(rb'(?:"[^"\\]*(?:\\.[^"\\]*)*"|[^"\[\]{}]+)*([\[\]{}]|"|$)', re.DOTALL)


def _string_end(data: bytes, i: int) -> int:
    """`data[i]` is an opening quote; return the offset one past the closing quote."""
    match = _STRING.match(data, i)
    if match is None:
        raise ValueError("unterminated string")
    return match.end()


def value_end(data: bytes, i: int) -> int:
    """`data[i]` starts a value; return the offset one past its end."""
    c = data[i]
    if c == 0x22:
        return _string_end(data, i)
    if c in b"{[":
        depth = 0
        while True:
            match = _NEXT_BRACKET.match(data, i)
            token = match.group(1)
            if token == b"":
                raise ValueError("unterminated container")
            if token == b'"':
                raise ValueError("unterminated string")
            i = match.end()
            depth += 1 if token in b"{[" else -1
            if depth == 0:
                return i
    # number, true, false, null
    n = len(data)
    while i < n and data[i] not in b",}] \t\r\n":
        i += 1
    return i


def iter_members(data: bytes, start: int) -> Iterator[Member]:
    """`data[start]` is '{'; its members in file order."""
    i = skip_whitespace(data, start + 1)
    if data[i] == 0x7D:
        return
    while True:
        key_start = i
        key_end = _string_end(data, i)
        key = json.loads(data[key_start:key_end])
        i = skip_whitespace(data, key_end)
        assert data[i] == 0x3A, "expected ':'"
        v_start = skip_whitespace(data, i + 1)
        v_end = value_end(data, v_start)
        yield Member(key, key_start, v_start, v_end)
        i = skip_whitespace(data, v_end)
        if data[i] == 0x2C:
            i = skip_whitespace(data, i + 1)
            continue
        return


def object_members(data: bytes, start: int) -> list[Member]:
    """`data[start]` is '{'; list its members in file order."""
    return list(iter_members(data, start))


def iter_items(data: bytes, start: int) -> Iterator[tuple[int, int]]:
    """`data[start]` is '['; the (start, end) span of each item."""
    i = skip_whitespace(data, start + 1)
    if data[i] == 0x5D:
        return
    while True:
        end = value_end(data, i)
        yield i, end
        i = skip_whitespace(data, end)
        if data[i] == 0x2C:
            i = skip_whitespace(data, i + 1)
            continue
        return


def array_items(data: bytes, start: int) -> list[tuple[int, int]]:
    """`data[start]` is '['; list the (start, end) span of each item."""
    return list(iter_items(data, start))


def locate(data: bytes, pointer: str) -> tuple[int, int] | None:
    """Byte span of the value at `pointer`, or None if it is absent or the text is odd."""
    try:
        i = skip_whitespace(data, 0)
        for part in parse_pointer(pointer):
            if data[i] == 0x7B:
                # The last duplicate key wins, as with json.loads.
                found = [m for m in object_members(data, i) if m.key == part]
                if not found:
                    return None
                i = found[-1].value_start
            elif data[i] == 0x5B:
                items = array_items(data, i)
                if not part.isdigit() or int(part) >= len(items):
                    return None
                i = items[int(part)][0]
            else:
                return None
        return i, value_end(data, i)
    except (ValueError, IndexError, AssertionError, json.JSONDecodeError):
        return None


def locate_member(data: bytes, pointer: str) -> Member | None:
    """The object member that `pointer` names (its key and value spans), or None."""
    parts = parse_pointer(pointer)
    if not parts:
        return None
    parent = locate(data, make_pointer(*parts[:-1]))
    if parent is None or data[parent[0]] != 0x7B:
        return None
    try:
        found = [m for m in object_members(data, parent[0]) if m.key == parts[-1]]
    except (ValueError, IndexError, AssertionError, json.JSONDecodeError):
        return None
    return found[-1] if found else None


def line_of(data: bytes, offset: int) -> int:
    """1-based line number of a byte offset."""
    return data.count(b"\n", 0, offset) + 1


# JsonIndex keeps the members of an object this large or smaller; a larger one is walked again
# for each lookup, at most MAX_LARGE_WALKS times per file (then the line is unknown).
MAX_INDEXED_MEMBERS = 100_000
MAX_LARGE_WALKS = 16
LINE_BLOCK = 1 << 16  # bytes per entry of the line table


class JsonIndex:
    """Line lookups in one file, each container listed once.

    `line_of_pointer` above walks from the top of the file and lists every member of each
    object on the way: fine for one finding, quadratic for thousands of findings in one
    object (2,000 added tokens that disagree). This keeps every object's members (each
    key's offsets) and array's item offsets by their start offset, and how many line breaks
    come before each 64 KiB block, so each further lookup costs the pointer's depth and a
    count within one block. What it keeps is bounded whatever the file holds: item offsets
    in an array of machine integers, members only of objects of up to MAX_INDEXED_MEMBERS
    (a larger one is walked per lookup, a few times), and one count per block, not one
    offset per line break (a 64 MB file of blank lines held two gigabytes of them).
    """

    def __init__(self, data: bytes):
        self.data = data
        self._members: dict[int, dict[str, tuple[int, int]] | None] = {}  # None: too large to keep
        self._items: dict[int, array] = {}
        self._block_lines: list[int] | None = None
        self._large_walks = 0

    def _member(self, start: int, key: str) -> tuple[int, int] | None:
        """(key start, value start) of the member `key` of the object at `start`."""
        if start not in self._members:
            by_key: dict[str, tuple[int, int]] | None = {}
            for member in iter_members(self.data, start):
                if len(by_key) >= MAX_INDEXED_MEMBERS:
                    by_key = None
                    break
                by_key[member.key] = (member.key_start, member.value_start)  # the last duplicate key wins
            self._members[start] = by_key
        by_key = self._members[start]
        if by_key is not None:
            return by_key.get(key)
        if self._large_walks >= MAX_LARGE_WALKS:
            raise ValueError("too many lookups in objects too large to index")
        self._large_walks += 1
        found = None
        for member in iter_members(self.data, start):
            if member.key == key:
                found = (member.key_start, member.value_start)
        return found

    def _item(self, start: int, part: str) -> int | None:
        """The start offset of item `part` of the array at `start`."""
        if start not in self._items:
            self._items[start] = array("q", (begin for begin, _ in iter_items(self.data, start)))
        items = self._items[start]
        if not (part.isascii() and part.isdecimal()) or int(part) >= len(items):
            return None
        return items[int(part)]

    def line(self, offset: int) -> int:
        if self._block_lines is None:
            counts, total = [0], 0
            for block in range(0, len(self.data), LINE_BLOCK):
                total += self.data.count(b"\n", block, block + LINE_BLOCK)
                counts.append(total)
            self._block_lines = counts
        block = offset // LINE_BLOCK
        return self._block_lines[block] + self.data.count(b"\n", block * LINE_BLOCK, offset) + 1

    def line_of_pointer(self, pointer: str) -> int | None:
        """Line where the member or item at `pointer` starts (the key's line for members)."""
        data = self.data
        try:
            i = skip_whitespace(data, 0)
            at = i
            for part in parse_pointer(pointer):
                if data[i] == 0x7B:
                    member = self._member(i, part)
                    if member is None:
                        return None
                    at, i = member
                elif data[i] == 0x5B:
                    item = self._item(i, part)
                    if item is None:
                        return None
                    at = i = item
                else:
                    return None
            return self.line(at)
        except (ValueError, IndexError, AssertionError, json.JSONDecodeError):
            return None


def line_of_pointer(data: bytes, pointer: str) -> int | None:
    """Line where the member or item at `pointer` starts (the key's line for members)."""
    return JsonIndex(data).line_of_pointer(pointer)
