"""Model card edits: set `base_model` in the README front matter, nothing else.

A card edit changes the `base_model` lines of the front matter and no other line; it
is re-parsed before it is offered, and every other key must come back equal.
"""

from __future__ import annotations

import re

from hfdoctor.findings import Edit
from hfdoctor.repo import FRONT_MATTER, ModelRepo

_BASE_MODEL_LINE = re.compile(r"^base_model[ \t]*:")
_BLOCK_ITEM = re.compile(r"^(?P<indent>[ \t]*)-(?:[ \t]|$)")


def card_set_base_model(repo: ModelRepo, repo_id: str) -> Edit | None:
    """The edit that sets the card's `base_model` to `repo_id`, keeping its shape (a
    scalar stays a scalar, a flow list `[...]` or block list `- ...` becomes a list of
    one) and every other line byte for byte. Adds the key (or a front matter block)
    when absent. None when the card is absent, already says so, or is too unusual to
    edit line-wise (block scalars, anchors, multi-line items)."""
    text = repo.text("README.md")
    if text is None:
        return None
    newline = "\r\n" if "\r\n" in text else "\n"
    match = FRONT_MATTER.match(text)
    if match is None:
        splice = (0, 0, f"---{newline}base_model: {repo_id}{newline}---{newline}")
    else:
        splice = _base_model_splice(text, match.start(2), match.end(2), repo_id, newline)
    if splice is None:
        return None
    start, end, new = splice
    patched = text[:start] + new + text[end:]
    if patched == text or not _card_says(text, patched, repo_id):
        return None
    return Edit("README.md", len(text[:start].encode("utf-8")), len(text[:end].encode("utf-8")), new)


def _base_model_splice(text: str, block_start: int, block_end: int, repo_id: str, newline: str):
    """(start, end, new text) in `text` for the front matter block [block_start, block_end)."""
    lines: list[tuple[int, str]] = []  # (offset, line with its end of line)
    offset = block_start
    for line in text[block_start:block_end].splitlines(keepends=True):
        lines.append((offset, line))
        offset += len(line)
    key = next((i for i, (_, line) in enumerate(lines) if _BASE_MODEL_LINE.match(line)), None)
    if key is None:
        prefix = newline if block_end > block_start else ""
        return block_end, block_end, f"{prefix}base_model: {repo_id}"
    line_start, line = lines[key]
    body = line.rstrip("\r\n")
    colon = body.index(":") + 1
    value, _comment = _split_comment(body[colon:])
    scalar = value.strip()
    at = line_start + colon + (len(value) - len(value.lstrip()))  # where the value starts
    if scalar:
        if scalar[0] in "{|>&*!" or (scalar[0] == "[" and not scalar.endswith("]")):
            return None  # flow mapping, block scalar, anchor, tag, multi-line flow list
        if scalar[0] == "[":
            return at, at + len(scalar), f"[{repo_id}]"
        if scalar[0] in "\"'":
            return at, at + len(scalar), f"{scalar[0]}{repo_id}{scalar[0]}"
        return at, at + len(scalar), repo_id
    # `base_model:` alone: a block list on the next lines, or null.
    items: list[tuple[int, str]] = []
    for item_start, item in lines[key + 1 :]:
        stripped = item.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if _BLOCK_ITEM.match(item):
            items.append((item_start, item))
        elif item[0] in " \t":
            return None  # a nested mapping or a multi-line item: not a line-wise edit
        else:
            break  # the next key
    if not items:
        end = line_start + len(body)
        return end, end, f" {repo_id}"
    first_start, first = items[0]
    last_start, last = items[-1]
    indent = _BLOCK_ITEM.match(first).group("indent")
    eol = last[len(last.rstrip("\r\n")) :]
    return first_start, last_start + len(last), f"{indent}- {repo_id}{eol}"


def _split_comment(value: str) -> tuple[str, str]:
    """YAML comments start at ' #' outside quotes."""
    quote = None
    for i, ch in enumerate(value):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or value[i - 1] in " \t"):
            return value[:i], value[i:]
    return value, ""


def _card_says(old_text: str, new_text: str, repo_id: str) -> bool:
    """The patched card parses, says base_model repo_id, and every other key is as before."""
    import yaml

    def metadata(text: str) -> dict | None:
        match = FRONT_MATTER.match(text)
        if match is None:
            return {}
        try:
            loaded = yaml.safe_load(match.group(2))
        except yaml.YAMLError:
            return None
        return loaded if isinstance(loaded, dict) else ({} if loaded is None else None)

    old, new = metadata(old_text), metadata(new_text)
    if old is None or new is None or new.get("base_model") not in (repo_id, [repo_id]):
        return False
    return {k: v for k, v in old.items() if k != "base_model"} == {k: v for k, v in new.items() if k != "base_model"}
