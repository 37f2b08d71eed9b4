"""What a scan of one model file found: imports with their verdicts, calls, nested and embedded
pickles, format findings, and why the scan may be incomplete. Data only (no reading here)."""

from __future__ import annotations

from dataclasses import dataclass, field

# Pickle bytes read of one file, all its pickles (and archive members) together. A torch
# data.pkl is ~100 KB for an 8B model.
MAX_SCAN_BYTES = 64 * 1024 * 1024
# Opcodes run in one file: a real torch pickle of a 70B model runs a few hundred thousand;
# 64 MB of one-byte opcodes would take a minute of Python.
MAX_OPCODES = 2_000_000
MAX_CALLS = 32


@dataclass(frozen=True)
class Import:
    module: str
    name: str
    member: str | None  # where in the file: an archive member or a nested path; None for the file itself
    verdict: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class Call:
    """A call (or attribute write) that loading the pickle makes with something not `safe`."""

    text: str  # e.g. "numpy.size(numpy.size, 'eval')('__import__(\"os\").system(\"id\")')"
    origin: str  # the import it starts from
    member: str | None


@dataclass
class PickleScan:
    """What the pickles of one file import and call (archive members and nested pickles included)."""

    file: str
    kind: str  # pickle | zip | tar | numpy | not-pickle | ...
    imports: list[Import] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why the scan may be incomplete
    bytes_left: int = MAX_SCAN_BYTES  # of the file's read budget
    opcodes_left: int = MAX_OPCODES
    calls: list[Call] = field(default_factory=list)  # the first MAX_CALLS unsafe calls, in order
    # bytes a nested loader unpickles on load: (where, data)
    nested: list[tuple[str, bytes]] = field(default_factory=list)
    # pickles stored as data (raw, base64 or hex): (where, data); loading does not run them
    embedded: list[tuple[str, bytes]] = field(default_factory=list)
    # what the file's format itself runs or reaches (Keras Lambda layers, ONNX paths, PyFunc
    # ops, archive members that extract outside): (severity, message)
    unsafe: list[tuple[str, str]] = field(default_factory=list)
    deadline: float | None = None  # monotonic time after which the walk stops

    def record(self, call: Call) -> None:
        if len(self.calls) < MAX_CALLS:
            self.calls.append(call)

    def by_verdict(self, verdict: str) -> list[Import]:
        seen: dict[str, Import] = {}
        for imp in self.imports:
            if imp.verdict == verdict:
                seen.setdefault(imp.dotted, imp)
        return list(seen.values())
