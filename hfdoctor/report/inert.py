"""Text from outside (a repository, the Hub, a served endpoint) made inert for each output format.

Whatever a file name, a model card, a token or a server's reply holds, what hfdoctor prints
stays data:
- `visible`: for terminals and plain text, one line: control characters (C0, DEL, C1),
  line and paragraph separators and bidi overrides/isolates/marks are shown as escapes
  (`\\x1b`, `\\n`, `<U+202E>`), so nothing can move the cursor, start a new line (a GitHub
  workflow command is a line starting with `::`), recolour, link (OSC 8) or reorder what
  follows; and `##[` (a legacy workflow command, read anywhere in a line) as `##\\x5b`.
  Other printable text, backslashes included, is unchanged.
- `github_data` / `github_property`: GitHub's toolkit escaping for workflow commands.
- `code_span`: Markdown code spans (no markup, autolinks or HTML inside).
- `json_safe` / `dumps`: valid I-JSON. A lone surrogate (an undecodable byte of a file name
  read with surrogateescape, or a `\\ud800` escape in a repository's JSON) becomes U+FFFD, and
  the raw bytes go beside the string in `<key>_raw` (hex).
- `is_workflow_command`: what GitHub's runner reads as a command (after leading whitespace,
  Unicode's included, as its TrimStart does).
- `stop_commands`: text that must be printed byte for byte (a patch) between GitHub's
  `::stop-commands::TOKEN` and `::TOKEN::`, which the runner reads as no command at all.
- `code_fence`: a Markdown fenced code block whose fence no line inside can close.

No regular expressions: translation tables and single passes, linear in the input.
"""

from __future__ import annotations

import json
import math
import secrets
from itertools import groupby
from typing import Any

# Bidi overrides and isolates, the directional marks, the Arabic letter mark.
BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
SEPARATORS = (0x2028, 0x2029)  # LINE and PARAGRAPH SEPARATOR: line breaks to some viewers
NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible_table() -> dict[int, str]:
    table: dict[int, str] = {cp: f"\\x{cp:02x}" for cp in (*range(0x20), *range(0x7F, 0xA0))}
    table.update({ord(ch): escape for ch, escape in NAMED.items()})
    table.update({cp: f"<U+{cp:04X}>" for cp in (*BIDI, *SEPARATORS)})
    # Lone surrogates: an undecodable byte of a name (surrogateescape) as that byte, others as code points.
    table.update({cp: f"\\x{cp - 0xDC00:02x}" for cp in range(0xDC80, 0xDD00)})
    table.update({cp: f"\\u{cp:04x}" for cp in (*range(0xD800, 0xDC80), *range(0xDD00, 0xE000))})
    return table


VISIBLE = _visible_table()
# GitHub's own escaping carries CR and LF (%0D, %0A); the rest is shown as in text.
GITHUB_VISIBLE = {cp: shown for cp, shown in VISIBLE.items() if chr(cp) not in "\r\n"}
# In JSON text these stay escaped (`\u202e`): the value is the same, the text shows nothing raw.
JSON_ESCAPES = {cp: f"\\u{cp:04x}" for cp in (0x7F, *range(0x80, 0xA0), *BIDI, *SEPARATORS)}


# GitHub's runner reads the legacy form `##[name]...` anywhere in a line (ActionCommand.TryParse
# looks for it with IndexOf), `##[add-mask]` and `##[stop-commands]` included.
LEGACY_COMMAND = "##["


def visible(text: str) -> str:
    """`text` on one line, with every character that could act on a terminal shown as an escape,
    and the `[` of a legacy workflow command (`##[`) as `\\x5b`."""
    return text.translate(VISIBLE).replace(LEGACY_COMMAND, "##\\x5b")


def is_workflow_command(line: str) -> bool:
    """Whether GitHub's runner would read this output line as a workflow command: `::` at its start
    (after leading whitespace), or `##[` anywhere."""
    return line.lstrip().startswith("::") or LEGACY_COMMAND in line


# --- GitHub workflow commands (as @actions/core's command.ts escapes them) --------------------


def github_data(text: str) -> str:
    """A command's message: `%`, CR and LF escaped; other controls and bidi shown visibly."""
    return text.translate(GITHUB_VISIBLE).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_property(text: str) -> str:
    """A command's property value: also `:` and `,`, which end a property."""
    return github_data(text).replace(":", "%3A").replace(",", "%2C")


def stop_commands(text: str) -> str:
    """`text` unchanged, between `::stop-commands::TOKEN` and `::TOKEN::`: GitHub's documented way
    to print text the runner must not parse. The token is random and appears nowhere in `text`
    (the runner resumes on a command named like it, in any case)."""
    folded = text.lower()
    token = secrets.token_hex(16)
    while token in folded:  # practically never; but no text may end the pause early
        token = secrets.token_hex(16)
    body = text if not text or text.endswith("\n") else text + "\n"
    return f"::stop-commands::{token}\n{body}::{token}::\n"


# --- Markdown ---------------------------------------------------------------------------------


def longest_run(text: str, mark: str = "`") -> int:
    return max((len(list(run)) for ch, run in groupby(text) if ch == mark), default=0)


def code_span(text: str, *, in_table: bool = False) -> str:
    """`text` as one Markdown code span: shown literally, no links, emphasis or HTML.

    The fence is one backtick longer than the longest run of backticks inside; a space pads
    content that starts or ends with a backtick or a space (CommonMark strips one from each
    side, unless the content is all spaces). In a table cell `|` is escaped as `\\|`, which GFM
    removes before the span is read."""
    shown = visible(text)
    if not shown:
        return ""
    fence = "`" * (longest_run(shown) + 1)
    if (shown[0] in "` " or shown[-1] in "` ") and shown.strip(" "):  # all spaces: kept as they are
        shown = f" {shown} "
    if in_table:
        shown = shown.replace("|", "\\|")
    return f"{fence}{shown}{fence}"


def code_fence(text: str, info: str = "") -> str:
    """`text` as a fenced code block, shown literally line by line (each through `visible`): the
    fence is longer than any run of backticks inside, so no line of `text` closes it."""
    lines = [visible(part) for part in text.split("\n")]
    fence = "`" * max(3, longest_run("".join(lines)) + 1)
    return "\n".join([fence + info, *lines, fence])


# --- JSON ---------------------------------------------------------------------------------------


def has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def replace_surrogates(text: str) -> str:
    return "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text) if has_surrogate(text) else text


def raw_bytes(text: str) -> bytes:
    """The bytes a string with lone surrogates stands for: U+DC80..U+DCFF are the undecodable bytes of
    a name (surrogateescape); any other lone surrogate is kept as its own 3-byte sequence."""
    out = bytearray()
    for ch in text:
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:
            out.append(cp - 0xDC00)
        else:
            out += ch.encode("utf-8", "surrogatepass")
    return bytes(out)


def json_safe(value: Any, *, raw: bool = True) -> Any:
    """A copy of JSON data with no lone surrogate: each becomes U+FFFD; with `raw`, a string value
    of key K that had any also gets K_raw, the hex of its raw bytes (`raw_bytes`). NaN and the
    infinities, which JSON has no number for, become the strings "NaN", "Infinity", "-Infinity"."""
    if isinstance(value, str):
        return replace_surrogates(value)
    if isinstance(value, float) and not math.isfinite(value):
        # Python's json reads NaN and Infinity from a repository's files and would write them
        # back; no JSON parser but Python's takes them. The value is kept as the text it was.
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (list, tuple)):
        return [json_safe(item, raw=raw) for item in value]
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            safe_key = replace_surrogates(key) if isinstance(key, str) else key
            out[safe_key] = json_safe(item, raw=raw)
            if raw and isinstance(item, str) and has_surrogate(item) and isinstance(safe_key, str):
                out[f"{safe_key}_raw"] = raw_bytes(item).hex()
        return out
    return value


def dumps(value: Any, *, raw: bool = True, **options: Any) -> str:
    """JSON text that strict parsers accept (I-JSON), with DEL, C1 controls, bidi characters and
    line separators escaped as `\\uXXXX` (the same value, nothing invisible in the text)."""
    options = {"ensure_ascii": False, **options}
    # `##[` is only ever inside a string (`#` is nowhere else in JSON text): `\\u005b` is the same `[`.
    text = json.dumps(json_safe(value, raw=raw), **options).translate(JSON_ESCAPES)
    return text.replace(LEGACY_COMMAND, "##\\u005b")
