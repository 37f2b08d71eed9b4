"""README.md as loaders and the Hub read it: the YAML front matter, its keys' lines, the body.

Split out of hfdoctor.repo, which reads the file and records the problems this reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from hfdoctor.bounded import patterns
from hfdoctor.bounded.parsing import ParseError, load_yaml

# Same shape as huggingface_hub's REGEX_YAML_BLOCK, so we agree with the Hub on what
# counts as front matter; run by RE2 (Python's engine takes minutes on a card of blank lines).
FRONT_MATTER = patterns.compile(r"^(\s*---[\r\n]+)([\S\s]*?)([\r\n]+---(\r\n|\n|$))")
FRONT_MATTER_KEY = patterns.compile(r"^([A-Za-z0-9_\-]+)[ \t]*:")
# The most front matter hfdoctor parses: real cards hold a few KB (model-index results
# included); PyYAML is pure Python, a megabyte of YAML takes it seconds.
MAX_FRONT_MATTER_BYTES = 512 * 1024


@dataclass(frozen=True)
class Card:
    text: str
    # None: there is no front matter block. {}: an empty block.
    metadata: dict[str, Any] | None
    # 1-based line of each top-level front-matter key.
    key_lines: dict[str, int]
    body: str


def parse_card(text: str, problem: Callable[[str, int | None], None]) -> Card:
    """The card of README.md's text; a front matter that cannot be read is reported through
    `problem(message, line)` and leaves the card without metadata."""
    match = FRONT_MATTER.match(text)
    if match is None:
        return Card(text, None, {}, text)
    block = match.group(2)
    first_line = match.group(1).count("\n") + 1  # line of the first YAML line
    if len(block) > MAX_FRONT_MATTER_BYTES:
        problem(f"front matter is {len(block):,} characters, more than the {MAX_FRONT_MATTER_BYTES:,} hfdoctor parses",
                first_line)
        return Card(text, None, {}, text[match.end() :])
    try:
        metadata = load_yaml(block, first_line)
    except ParseError as err:
        problem(f"front matter {err.message}", err.line or first_line)
        return Card(text, None, {}, text[match.end() :])
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        problem("front matter must be a YAML mapping", first_line)
        return Card(text, None, {}, text[match.end() :])
    key_lines: dict[str, int] = {}
    for offset, line in enumerate(block.splitlines()):
        key = FRONT_MATTER_KEY.match(line)
        if key and key.group(1) not in key_lines:
            key_lines[key.group(1)] = first_line + offset
    return Card(text, metadata, key_lines, text[match.end() :])
