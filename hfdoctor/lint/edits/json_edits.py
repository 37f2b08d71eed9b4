"""JSON edits: make one pointer hold one value, touching only that value's bytes.

A JSON edit replaces the bytes of one value or inserts one member, in the file's own
style (hfdoctor.lint.edits.json_spans: indentation, key order, escaping, line ends). Every edit is
applied in memory and re-parsed before it is offered: if the result is not exactly the
old document with that one value set, no edit is offered.
"""

from __future__ import annotations

import copy
import json
from pathlib import PurePosixPath
from typing import Any

from hfdoctor.lint.edits import json_spans as jsonedit

from hfdoctor.bounded import jsontext
from hfdoctor.findings import Edit
from hfdoctor.bounded.parsing import gc_paused
from hfdoctor.repo import ModelRepo

# Files transformers writes with ensure_ascii=False. An all-ASCII file does not show
# which way it was written; for these, new non-ASCII text is written raw, elsewhere
# (config.json, generation_config.json: plain json.dumps) as \u escapes.
UTF8_JSON_FILES = {"tokenizer_config.json", "chat_template.json", "special_tokens_map.json", "added_tokens.json"}


def json_set_value(repo: ModelRepo, file: str, pointer: str, value: Any) -> Edit | None:
    """The edit that makes `pointer` in `file` hold `value` (replacing or inserting);
    None when the file is absent or broken, the value is already there, or no exact
    edit can be made."""
    return _json_edit(repo, file, pointer, value, lambda data, style: jsonedit.set_value(data, pointer, value, style))


def json_add_to_id_list(repo: ModelRepo, file: str, pointer: str, token_id: int) -> Edit | None:
    """The edit that adds `token_id` to the id list at `pointer` (eos_token_id): an int
    becomes [old, new], a list gains the id at its end. None when it is already there."""
    obj = repo.json(file)
    if obj is None:
        return None
    current = _resolve(obj, jsontext.parse_pointer(pointer))
    if isinstance(current, list):
        wanted: Any = current + [token_id]
    elif isinstance(current, int) and not isinstance(current, bool):
        wanted = [current, token_id]
    else:
        wanted = token_id
    return _json_edit(repo, file, pointer, wanted, lambda d, style: jsonedit.add_to_id_list(d, pointer, token_id, style))


def json_remove_member(repo: ModelRepo, file: str, pointer: str) -> Edit | None:
    """The edit that deletes the member at `pointer` (with its comma), or None when it is
    absent or the result is not exactly the old document without it."""
    data, obj = repo.raw(file), repo.json(file)
    if data is None or obj is None:
        return None
    span = jsonedit.member_removal_span(data, pointer)
    if span is None:
        return None
    parts = jsontext.parse_pointer(pointer)
    expected = copy.deepcopy(obj)
    node = _resolve(expected, parts[:-1])
    if not isinstance(node, dict) or parts[-1] not in node:
        return None
    del node[parts[-1]]
    patched = data[: span[0]] + data[span[1]:]
    try:
        if json.loads(patched) != expected:
            return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return Edit(file, span[0], span[1], "")


def json_set_values(repo: ModelRepo, file: str, values: dict[str, Any]) -> Edit | None:
    """One edit that makes each pointer of `values` hold its value (several keys of one
    file in one fix: edits of one file must not insert at the same point). The members
    are set one after the other in memory; the edit spans from the first changed byte to
    the last, so bytes outside that span are untouched. None when nothing changes or the
    result is not exactly the old document with those values set."""
    data, obj = repo.raw(file), repo.json(file)
    if data is None or obj is None:
        return None
    style = jsonedit.detect_style(data, ensure_ascii_default=PurePosixPath(file).name not in UTF8_JSON_FILES)
    patched, expected = data, obj
    for pointer, value in values.items():
        parts = jsontext.parse_pointer(pointer)
        if _resolve(expected, parts) == value:
            continue
        splice = jsonedit.set_value(patched, pointer, value, style)
        expected = _with_value(expected, parts, value)
        if splice is None or expected is _MISSING:
            return None
        patched = splice.apply(patched)
    if patched == data:
        return None
    try:
        if json.loads(patched) != expected:
            return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    start = _common_prefix(data, patched)
    tail = _common_suffix(data, patched, start)
    return Edit(file, start, len(data) - tail, patched[start:len(patched) - tail].decode("utf-8"))


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    # never split a UTF-8 sequence: back up to a character boundary
    while i > 0 and i < len(a) and (a[i] & 0xC0) == 0x80:
        i -= 1
    return i


def _common_suffix(a: bytes, b: bytes, floor: int) -> int:
    """How many trailing bytes a and b share, leaving the first `floor` bytes of both alone."""
    n = 0
    limit = min(len(a), len(b)) - floor
    while n < limit and a[-1 - n] == b[-1 - n]:
        n += 1
    while n > 0 and (a[len(a) - n] & 0xC0) == 0x80:
        n -= 1
    return n


_MISSING = object()


def _json_edit(repo: ModelRepo, file: str, pointer: str, wanted: Any, make) -> Edit | None:
    if not file.endswith(".json"):
        return None  # a template inside a GGUF is metadata of a binary file: never edited
    data = repo.raw(file)
    obj = repo.json(file)
    if data is None or obj is None:
        return None
    parts = jsontext.parse_pointer(pointer)
    if _resolve(obj, parts) == wanted:
        return None
    style = jsonedit.detect_style(data, ensure_ascii_default=PurePosixPath(file).name not in UTF8_JSON_FILES)
    splice = make(data, style)
    if splice is None:
        return None
    # The patched text must parse to exactly the old document with that one value set.
    try:
        with gc_paused():  # a large file: see hfdoctor.bounded.parsing
            patched = json.loads(splice.apply(data))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    expected = _with_value(obj, parts, wanted)
    if expected is _MISSING or patched != expected:
        return None
    return Edit(file, splice.start, splice.end, splice.text)


def _resolve(obj: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return _MISSING
    return obj


def _with_value(obj: Any, parts: list[str], value: Any) -> Any:
    """`obj` with `value` at `parts` (parents created); _MISSING if impossible. The containers
    on the path are copied and everything beside it is shared, unchanged: `obj` is the
    repository's parsed file, which other rules read (a deep copy of a 9 MB tokenizer.json
    cost a second a fix)."""
    result = _shallow_copy(obj)
    node = result
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node[part] = node = _shallow_copy(node.get(part, {}))
        elif isinstance(node, list) and part == "-" and last:
            node.append(value)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            if last:
                node[int(part)] = value
            else:
                node[int(part)] = node = _shallow_copy(node[int(part)])
        else:
            return _MISSING
    return result


def _shallow_copy(value: Any) -> Any:
    return copy.copy(value) if isinstance(value, (dict, list)) else value
