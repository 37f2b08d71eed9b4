"""Small value types and readers of what repository files hold (a template's place, a token's
text, an id list), shared by ModelRepo and the rules; nothing here reads a file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FileProblem:
    file: str
    message: str
    line: int | None = None
    kind: str = "unreadable"  # unreadable | outside (a symlink leaving the repository)


@dataclass(frozen=True)
class TemplateSource:
    """One chat template as it is stored in the repo."""

    name: str  # "default", "tool_use", or the name under additional_chat_templates/
    file: str  # relative path of the file that holds it
    pointer: str | None  # JSON pointer inside `file` for JSON files, None for .jinja
    text: str

    @property
    def where(self) -> str:
        if self.pointer and not self.pointer.startswith("/"):  # a GGUF metadata key
            return f"{self.file} ({self.pointer})"
        return f"{self.file}{self.pointer or ''}"


def token_content(value: Any) -> str | None:
    """A special token as written in tokenizer_config.json: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def int_values(mapping: dict[str, Any]) -> dict[str, int]:
    """The entries whose value is an int; the common all-int case without a Python loop."""
    if set(map(type, mapping.values())) <= {int}:
        return mapping
    return {k: v for k, v in mapping.items() if isinstance(v, int) and not isinstance(v, bool)}


def as_id_list(value: Any) -> list[int]:
    """eos_token_id and friends are an int, a list of ints, or null."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []
