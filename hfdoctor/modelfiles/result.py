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
# Decompressed or copied bytes of one file held in memory for the containers inside it
# (a .pt.gz, a zip in a zip, a 7z folder), all of them together: nesting cannot multiply it.
MAX_IN_MEMORY = 256 * 1024 * 1024


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
    # Where a bound (bytes, opcodes, time, depth, size, ratio) or unreadable container content
    # stopped the scan of what holds or may hold a pickle: the file is not proven safe.
    unproven: list[str] = field(default_factory=list)
    in_memory_left: int = MAX_IN_MEMORY
    nesting: int = 0  # how many nested loads (_load_from_bytes) deep the walk now is
    bytes_left: int = MAX_SCAN_BYTES  # of the file's read budget
    opcodes_left: int = MAX_OPCODES
    calls: list[Call] = field(default_factory=list)  # the first MAX_CALLS unsafe calls, in order
    # bytes a nested loader unpickles on load: (where, data, how many loads deep)
    nested: list[tuple[str, bytes, int]] = field(default_factory=list)
    # pickles stored as data (raw, base64 or hex): (where, data); loading does not run them
    embedded: list[tuple[str, bytes]] = field(default_factory=list)
    # what the file's format itself runs or reaches (Keras Lambda layers, ONNX paths, PyFunc
    # ops, archive members that extract outside): (severity, message)
    unsafe: list[tuple[str, str]] = field(default_factory=list)
    # files the format makes the loader open, relative to the file's own folder (ONNX
    # external data): the rules check that each stays inside the repository
    reaches: list[str] = field(default_factory=list)
    deadline: float | None = None  # monotonic time after which the walk stops
    # persistent ids loaded (torch's storages: every tensor of a torch.save file is one): a
    # complete scan with none, and no import, holds no tensor at all (an empty state dict)
    persistent_ids: int = 0
    # the file itself is a zip archive cut short (no end record): torch.load cannot read it at all
    truncated_zip: bool = False

    @property
    def holds_no_tensor(self) -> bool:
        """A torch.save file (zip or legacy pickle) read to its end that loads no storage and imports
        nothing but a dict type: an empty state dict (PEFT's 443-byte adapter_model.bin). Every
        tensor needs a persistent id (a storage) or a rebuild function it imports."""
        return (self.kind in ("zip", "pickle") and not self.problems and not self.unproven and not self.nested
                and not self.embedded and self.persistent_ids == 0 and self.calls == []
                and all(i.dotted in ("collections.OrderedDict", "builtins.dict") for i in self.imports))

    def record(self, call: Call) -> None:
        if len(self.calls) < MAX_CALLS:
            self.calls.append(call)

    def hold(self, nbytes: int) -> bool:
        """Charge `nbytes` held in memory against the file's allowance; False when over."""
        if nbytes > self.in_memory_left:
            self.in_memory_left = 0
            return False
        self.in_memory_left -= nbytes
        return True

    def by_verdict(self, verdict: str) -> list[Import]:
        seen: dict[str, Import] = {}
        for imp in self.imports:
            if imp.verdict == verdict:
                seen.setdefault(imp.dotted, imp)
        return list(seen.values())
