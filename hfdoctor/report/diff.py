"""The unified diff of a fix (`hfdoctor fix --diff`): applies with `git apply` or `patch -p1`."""

from __future__ import annotations

import difflib
import re


def unified_diff(original: dict[str, bytes | None], changed: dict[str, bytes]) -> str:
    """a/ b/ prefixed diff of every changed file; a None original is a new file."""
    out: list[str] = []
    for rel in sorted(changed):
        old = original.get(rel)
        before = _lines(old.decode("utf-8", errors="replace")) if old is not None else []
        after = _lines(changed[rel].decode("utf-8", errors="replace"))
        for line in difflib.unified_diff(before, after, "/dev/null" if old is None else f"a/{rel}", f"b/{rel}"):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _lines(text: str) -> list[str]:
    """Lines split on \\n only (str.splitlines also splits on \\r, U+2028...)."""
    return re.findall(r"[^\n]*\n|[^\n]+", text)
