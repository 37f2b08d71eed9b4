"""An Ollama Modelfile, read as text (never run): the model it builds FROM and the ADAPTERs it applies.

Fine-tune folders often ship one beside the adapter or the GGUF (`ollama create name -f Modelfile`).
Its syntax (github.com/ollama/ollama docs/modelfile.md): one instruction per line, the keyword first
and case-insensitive (FROM, ADAPTER, TEMPLATE, SYSTEM, PARAMETER, MESSAGE, LICENSE), `#` comments,
and values that may span lines inside triple quotes. Only FROM and ADAPTER are read here.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from hfdoctor.repo.facts import fact

NAMES = ("Modelfile", "modelfile", "Modelfile.txt")
MAX_LINES = 2000  # a Modelfile is a few lines; a huge one is not read further
MAX_CHARS = 256 * 1024  # ...nor past this, whatever its lines (64 MB of newlines is not split into strings)


@dataclass(frozen=True)
class Modelfile:
    file: str
    base: str | None  # what FROM names: an Ollama model (llama3.1:8b), a GGUF file or a folder
    base_line: int | None
    adapters: tuple[tuple[str, int], ...]  # (ADAPTER's path, its line)

    def adapter_folder(self, path: str) -> str | None:
        """The repository-relative folder an ADAPTER path names (`./final_model` -> `final_model`,
        `.` -> ``), or None when it leaves the repository or names a file (a GGUF adapter)."""
        value = path.strip().strip("\"'").replace("\\", "/")
        if not value or value.startswith(("/", "~")) or ":" in value:
            return None
        folder = posixpath.normpath(posixpath.join(posixpath.dirname(self.file), value))
        if folder == ".":
            return ""
        if folder.startswith("..") or folder.rsplit("/", 1)[-1].lower().endswith((".gguf", ".bin", ".safetensors")):
            return None
        return folder


def parse(file: str, text: str) -> Modelfile:
    base, base_line, adapters = None, None, []
    quoted = False
    for number, line in enumerate(text[:MAX_CHARS].splitlines()[:MAX_LINES], start=1):
        if quoted:
            quoted = line.count('"""') % 2 == 0
            continue
        if line.count('"""') % 2 == 1:
            quoted = True
        keyword, _, rest = line.strip().partition(" ")
        value = rest.strip().strip("\"'")
        if keyword.upper() == "FROM" and value and base is None:
            base, base_line = value, number
        elif keyword.upper() == "ADAPTER" and value:
            adapters.append((value, number))
    return Modelfile(file, base, base_line, tuple(adapters))


@fact
def modelfile(repo) -> Modelfile | None:
    """The repository's Modelfile at its root, or None."""
    for name in NAMES:
        if repo.exists(name):
            text = repo.text(name)
            return parse(name, text) if text is not None else None
    return None
