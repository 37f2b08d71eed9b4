"""A pickle scanner that never unpickles: what would loading this file import?

Loading a pickle (torch.load with weights_only=False, pickle.load, joblib) calls whatever
callables the pickle names, so a model file can run `os.system` on load. Like the Hub's
picklescan and modelscan, we walk the opcodes with `pickletools.genops` and collect every
import (GLOBAL, INST, STACK_GLOBAL). Unlike a look-back heuristic, we run the pickle
machine's stack and memo abstractly, so STACK_GLOBAL operands are resolved exactly even
when they come from the memo (BINPUT/MEMOIZE ... BINGET) or sit behind other values.

Files: raw pickles (one or several streams back to back: legacy torch files are five
pickles followed by raw storage bytes) and zip archives (torch >= 1.6 saves a zip whose
`*/data.pkl` holds the pickle; tensors are separate members we never open).

Each import gets a verdict from hfdoctor.pickle_allowlist (safe, known, dangerous,
unlisted). The scan also keeps the calls loading would make with anything not safe, as
text (`numpy.size(numpy.size, 'eval')('__import__("os")...')`), so a finding can show the
chain a payload builds, and every BUILD that writes attributes of an imported object.
"""

from __future__ import annotations

import os
import pickletools
import stat
import zipfile
from dataclasses import dataclass, field
from typing import IO

from hfdoctor.pickle_allowlist import UNRESOLVED, classify

# Pickle bytes we are willing to read from one file, all its pickles (and zip members)
# together. A torch data.pkl is ~100 KB for an 8B model; a larger file is scanned up to
# here and reported as partly scanned. One budget per file, not per member: a zip of a
# thousand 60 MB members (a zip bomb of ~60 MB) would otherwise take minutes.
MAX_SCAN_BYTES = 64 * 1024 * 1024
# Legacy torch files hold 5 pickles; we stop after a few, and at the first bytes that are
# not a pickle (the raw tensor data that follows).
MAX_STREAMS = 8

# What a scan keeps of the calls it sees: enough to show the chain, bounded for huge pickles.
MAX_CALLS = 32
TEXT_LIMIT = 160

STRING_OPS = {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"}
PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}
GET_OPS = {"GET", "BINGET", "LONG_BINGET"}


@dataclass(frozen=True)
class Import:
    module: str
    name: str
    member: str | None  # the zip member it is in, None for a raw pickle
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
    file: str
    kind: str  # "pickle", "zip", "not-pickle"
    imports: list[Import] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why the scan may be incomplete
    bytes_left: int = MAX_SCAN_BYTES  # of the file's read budget
    calls: list[Call] = field(default_factory=list)  # the first MAX_CALLS unsafe calls, in order

    def record(self, call: Call) -> None:
        if len(self.calls) < MAX_CALLS:
            self.calls.append(call)

    def by_verdict(self, verdict: str) -> list[Import]:
        seen: dict[str, Import] = {}
        for imp in self.imports:
            if imp.verdict == verdict:
                seen.setdefault(imp.dotted, imp)
        return list(seen.values())


class _ScanLimit(Exception):
    pass


class _BoundedReader:
    """The read/readline view of a stream that pickletools needs, refusing to pass a byte budget.

    pickletools reads an opcode's whole argument (BINBYTES8 can claim 2**63 bytes), so
    the budget is what keeps a hostile or huge file from exhausting memory or time.
    """

    def __init__(self, raw: IO[bytes], budget: int):
        self.raw, self.budget, self.pending = raw, budget, b""

    def _over_budget(self) -> _ScanLimit:
        self.budget = 0  # spent: the file's later members are not scanned either
        return _ScanLimit()

    def _take(self, data: bytes) -> bytes:
        if len(data) > self.budget:
            raise self._over_budget()
        self.budget -= len(data)
        return data

    def read(self, n: int = -1) -> bytes:
        if n < 0 or n > self.budget + len(self.pending):
            raise self._over_budget()
        head, self.pending = self.pending[:n], self.pending[n:]
        return head + self._take(self.raw.read(n - len(head))) if n > len(head) else head

    def readline(self) -> bytes:
        if self.pending:
            head, self.pending = self.pending, b""
            if head.endswith(b"\n"):
                return head
            return head + self.readline()
        line = self.raw.readline(self.budget + 1)
        return self._take(line)

    def at_end(self) -> bool:
        if not self.pending:
            self.pending = self._take(self.raw.read(1))
        return not self.pending


class _Value:
    """What the abstract pickle machine knows of a stack value: a short text, and for
    strings their value (STACK_GLOBAL operands), for imports and call results the import
    they come from."""

    __slots__ = ("text", "string", "origin", "imported")

    def __init__(self, text: str, string: str | None = None, origin: tuple[str, str] | None = None,
                 imported: bool = False):
        self.text, self.string, self.origin, self.imported = _clip(text), string, origin, imported


def _clip(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"


def _joined(values: list[_Value], open_: str, close: str) -> str:
    shown = ", ".join(v.text for v in values[:6]) + (", …" if len(values) > 6 else "")
    return f"{open_}{shown}{',' if open_ == '(' and len(values) == 1 else ''}{close}"


def _append(container: _Value, piece: str) -> None:
    """Grow a list/dict/set's text in place (the object is shared through the memo)."""
    body = container.text[1:-1]
    container.text = _clip(container.text[0] + (f"{body}, {piece}" if body else piece) + container.text[-1])


class _Machine:
    """Runs one pickle's opcodes on symbolic values, as pickle's unpickler would on real ones.

    MARK starts a new stack as the real unpickler does, so every opcode's effect on the
    stack is exact; calls (REDUCE, NEWOBJ, OBJ, INST) and BUILD on an imported object are
    recorded with their arguments when what they call is not `safe`.
    """

    def __init__(self, member: str | None, scan: "PickleScan"):
        self.member, self.scan = member, scan
        self.stack: list[_Value] = []
        self.metastack: list[list[_Value]] = []
        self.memo: dict[int, _Value] = {}
        self.imports: list[tuple[str, str]] = []

    def pop(self) -> _Value:
        return self.stack.pop() if self.stack else _Value("?")

    def pop_mark(self) -> list[_Value]:
        items, self.stack = self.stack, (self.metastack.pop() if self.metastack else [])
        return items

    def push(self, value: _Value) -> None:
        self.stack.append(value)

    def imported(self, module: str, name: str) -> _Value:
        self.imports.append((module, name))
        return _Value(f"{module}.{name}", origin=(module, name), imported=True)

    def call(self, fn: _Value, args: str) -> _Value:
        text = f"{fn.text}{args}"
        if fn.origin is not None and classify(*fn.origin) != "safe":
            self.scan.record(Call(text, ".".join(fn.origin), self.member))
        return _Value(text, origin=fn.origin)

    def step(self, name: str, arg: object) -> None:
        if name in STRING_OPS:
            self.push(_Value(repr(arg), string=arg if isinstance(arg, str) else None))
        elif name in ("GLOBAL", "INST"):
            module, _, attr = str(arg).partition(" ")
            value = self.imported(module, attr)
            self.push(self.call(value, _joined(self.pop_mark(), "(", ")")) if name == "INST" else value)
        elif name == "STACK_GLOBAL":
            attr, module = self.pop(), self.pop()
            self.push(self.imported(module.string if module.string is not None else UNRESOLVED,
                                    attr.string if attr.string is not None else UNRESOLVED))
        elif name == "REDUCE":
            args, fn = self.pop(), self.pop()
            self.push(self.call(fn, args.text if args.text.startswith("(") else f"(*{args.text})"))
        elif name == "NEWOBJ":
            args, cls = self.pop(), self.pop()
            self.push(self.call(cls, args.text))
        elif name == "NEWOBJ_EX":
            kwargs, args, cls = self.pop(), self.pop(), self.pop()
            self.push(self.call(cls, f"{args.text[:-1]}, **{kwargs.text})"))
        elif name == "OBJ":
            items = self.pop_mark() or [_Value("?")]
            self.push(self.call(items[0], _joined(items[1:], "(", ")")))
        elif name == "BUILD":
            state = self.pop()
            target = self.stack[-1] if self.stack else _Value("?")
            if target.imported:  # setattr on a library's own object: a gadget, never data
                self.scan.record(Call(f"set attributes of {target.text} to {state.text}", target.text, self.member))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            items = [self.pop() for _ in range(int(name[-1]))][::-1]
            self.push(_Value(_joined(items, "(", ")")))
        elif name in ("TUPLE", "LIST", "FROZENSET"):
            self.push(_Value(_joined(self.pop_mark(), *{"TUPLE": "()", "LIST": "[]", "FROZENSET": "{}"}[name])))
        elif name in ("EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET"):
            self.push(_Value({"EMPTY_TUPLE": "()", "EMPTY_LIST": "[]", "EMPTY_DICT": "{}", "EMPTY_SET": "{}"}[name]))
        elif name == "DICT":
            items = self.pop_mark()
            self.push(_Value(_joined([_Value(f"{k.text}: {v.text}") for k, v in zip(items[::2], items[1::2])],
                                     "{", "}")))
        elif name == "APPEND":
            value = self.pop()
            if self.stack:
                _append(self.stack[-1], value.text)
        elif name in ("APPENDS", "ADDITEMS"):
            items = self.pop_mark()
            if self.stack:
                _append(self.stack[-1], _joined(items, "(", ")")[1:-1])
        elif name == "SETITEM":
            value, key = self.pop(), self.pop()
            if self.stack:
                _append(self.stack[-1], f"{key.text}: {value.text}")
        elif name == "SETITEMS":
            items = self.pop_mark()
            if self.stack:
                for key, value in zip(items[::2], items[1::2]):
                    _append(self.stack[-1], f"{key.text}: {value.text}")
        elif name in ("PERSID", "BINPERSID"):
            if name == "BINPERSID":
                self.pop()
            self.push(_Value("<persistent>"))
        elif name in ("NONE", "NEWTRUE", "NEWFALSE"):
            self.push(_Value({"NONE": "None", "NEWTRUE": "True", "NEWFALSE": "False"}[name]))
        elif name in PUT_OPS:
            self.memo[arg] = self.stack[-1] if self.stack else _Value("?")
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = self.stack[-1] if self.stack else _Value("?")
        elif name in GET_OPS:
            self.push(self.memo.get(arg, _Value("?")))
        elif name in ("EXT1", "EXT2", "EXT4"):
            # copyreg's extension registry maps codes to imports; it is empty unless a
            # program registers some, so a pickle that uses it is hiding something.
            self.push(self.imported("copyreg._extension_registry", str(arg)))
        elif name == "MARK":
            self.metastack.append(self.stack)
            self.stack = []
        elif name == "DUP":
            self.push(self.stack[-1] if self.stack else _Value("?"))
        elif name == "POP":
            if self.stack:
                self.stack.pop()
            else:
                self.pop_mark()
        else:
            opcode = _OPCODES[name]
            before = opcode.stack_before
            if pickletools.markobject in before:
                self.pop_mark()
                for _ in range(before.index(pickletools.markobject)):
                    self.pop()
            else:
                for _ in before:
                    self.pop()
            self.stack.extend(_Value(repr(arg) if arg is not None else "?") for _ in opcode.stack_after)


_OPCODES = {op.name: op for op in pickletools.opcodes}


def _imports_of_stream(stream: IO[bytes], member: str | None, scan: "PickleScan") -> tuple[list[tuple[str, str]], bool, str | None]:
    """Walk one pickle: (imports, reached STOP, problem), recording its unsafe calls in `scan`."""
    machine = _Machine(member, scan)
    try:
        for opcode, arg, _pos in pickletools.genops(stream):
            if opcode.name == "STOP":
                return machine.imports, True, None
            machine.step(opcode.name, arg)
    except _ScanLimit:
        return machine.imports, False, f"its pickles are larger than {MAX_SCAN_BYTES // (1024 * 1024)} MB; only the start was scanned"
    except Exception as err:  # genops raises ValueError and friends on bytes that are not a pickle
        return machine.imports, False, f"{type(err).__name__}: {err}"
    return machine.imports, False, "the pickle ends without STOP (truncated)"


def _scan_streams(raw: IO[bytes], member: str | None, scan: PickleScan) -> bool:
    """Scan consecutive pickles of one stream; False when it is not a pickle at all."""
    reader = _BoundedReader(raw, scan.bytes_left)
    try:
        where = f"{member}: " if member else ""
        try:
            first = reader.read(1)
        except _ScanLimit:
            return False
        reader.pending = first
        for n in range(MAX_STREAMS):
            imports, complete, problem = _imports_of_stream(reader, member, scan)
            scan.imports.extend(Import(m, a, member, classify(m, a)) for m, a in imports)
            if complete:
                try:
                    if reader.at_end():
                        return True
                except _ScanLimit:
                    return True
                continue
            if n == 0:
                # protocol 2+ pickles start with PROTO (0x80); anything else that fails at
                # once is some other format, not something pickle.load would run.
                if not imports and first != b"\x80":
                    return False
                scan.problems.append(f"{where}{problem}")
            elif imports:
                # A broken later pickle that imports before breaking: loaders run what comes
                # before the break, so what we found counts and the scan is incomplete.
                scan.problems.append(f"{where}{problem}")
            # After complete pickles, bytes that are not a pickle are data (legacy torch storages).
            return True
        return True
    finally:
        scan.bytes_left = reader.budget


def scan_pickle_file(path: str | os.PathLike[str], rel: str) -> PickleScan:
    """Scan the pickle-based file at `path` (a regular file) without unpickling anything."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        return PickleScan(rel, "not-pickle", problems=["is not a regular file"])
    with open(path, "rb") as f:
        return scan_pickle(f, rel)


def scan_pickle(f: IO[bytes], rel: str) -> PickleScan:
    """Scan an open, seekable pickle-based file (raw pickles or a torch zip archive)."""
    if zipfile.is_zipfile(f):
        f.seek(0)
        scan = PickleScan(rel, "zip")
        try:
            archive = zipfile.ZipFile(f)
            members = [i for i in archive.infolist() if i.filename.endswith(".pkl")]
            for info in members:
                if scan.bytes_left <= 0:
                    scan.problems.append(f"{info.filename} and the next members: not scanned, the pickles "
                                         f"before them already hold {MAX_SCAN_BYTES // (1024 * 1024)} MB")
                    break
                with archive.open(info) as member:
                    if not _scan_streams(member, info.filename, scan):
                        scan.problems.append(f"{info.filename}: is not a pickle")
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as err:
            scan.problems.append(f"the zip archive is damaged: {err}")
        if not members and not scan.problems:
            scan.kind = "not-pickle"  # a zip without pickles: nothing here runs on load
        return scan
    f.seek(0)
    scan = PickleScan(rel, "pickle")
    if not _scan_streams(f, None, scan):
        scan.kind = "not-pickle"
    return scan
