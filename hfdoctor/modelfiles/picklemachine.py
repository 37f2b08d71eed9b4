"""The pickle machine, run on symbolic values: what would loading this pickle import and call?

Loading a pickle (torch.load with weights_only=False, pickle.load, joblib) calls whatever
callables the pickle names, so a model file can run `os.system` on load. Like the Hub's
picklescan and modelscan, the opcodes are walked, never executed; their arguments are
decoded as the unpickler decodes them (hfdoctor.modelfiles.opcodes), not as pickletools.genops
does. Unlike a look-back heuristic, the machine's stack and memo are run abstractly,
so STACK_GLOBAL operands are resolved exactly even when they come from the memo or sit
behind other values, and every call is known with its arguments:

- each import gets a verdict from the allowlist (safe, known, nested, dangerous, unlisted), a getattr by its calls;
- a call of anything not safe is kept as text (`numpy.size(numpy.size, 'eval')(...)`), so a
  finding shows the chain a payload builds, and so is a BUILD that writes attributes of an
  imported object;
- the argument of a nested loader (torch.storage._load_from_bytes) is kept as bytes: the
  scanner reads it as a file of its own, since loading the outer pickle loads it;
- bytes and strings that are pickles themselves (raw, base64 or hex) are kept as embedded
  data: loading the outer pickle does not run them, but whatever unpickles that field does.

The walk is bounded: the bytes it reads (a budget shared by every pickle of one file), the
opcodes it runs, and the repository's deadline. Nothing here opens files.
"""

from __future__ import annotations

import base64
import binascii
import pickletools
import time
from dataclasses import dataclass
from typing import IO

from hfdoctor.modelfiles.allowlist import GETATTRS, UNRESOLVED, classify, enum_member
from hfdoctor.modelfiles.containers import ContainerError
from hfdoctor.modelfiles.opcodes import Refused, imported_name, ops
from hfdoctor.modelfiles.reader import BoundedReader, ScanLimit
from hfdoctor.modelfiles.result import MAX_OPCODES, MAX_SCAN_BYTES, Call, Import, PickleScan

# Legacy torch files hold 5 pickles; a few more are scanned, stopping at the first bytes
# that are not a pickle (the raw tensor data that follows).
MAX_STREAMS = 8
# What a scan keeps of nested loads and of embedded pickles.
MAX_NESTED = 16
MAX_NESTED_BYTES = 16 * 1024 * 1024
TEXT_LIMIT = 160

INT_OPS = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"}
STRING_OPS = {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"}
BYTES_OPS = {"BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"}
PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}
GET_OPS = {"GET", "BINGET", "LONG_BINGET"}
JOBLIB_WRAPPER = ("joblib.numpy_pickle", "NumpyArrayWrapper")
NUMPY_DTYPE = (("numpy", "dtype"), ("numpy.core.multiarray", "dtype"), ("numpy._core.multiarray", "dtype"))
PICKLE_STARTS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


class _Value:
    """What the abstract pickle machine knows of a stack value: a short text; for strings
    their value (STACK_GLOBAL operands), for bytes their value (nested loads); for imports
    and call results the import they come from."""

    __slots__ = ("text", "string", "data", "origin", "imported", "py")

    def __init__(self, text: str, string: str | None = None, origin: tuple[str, str] | None = None,
                 imported: bool = False, data: bytes | None = None, py: object = None):
        self.text, self.string, self.origin, self.imported = _clip(text), string, origin, imported
        self.data = data
        # The plain value, where the machine can know it (ints, strings, tuples of them, a
        # dict being filled, a numpy dtype): enough to size a joblib array.
        self.py = py


def _clip(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"


def _joined(values: list[_Value], open_: str, close: str) -> str:
    shown = ", ".join(v.text for v in values[:6]) + (", …" if len(values) > 6 else "")
    return f"{open_}{shown}{',' if open_ == '(' and len(values) == 1 else ''}{close}"


def _append(container: _Value, piece: str) -> None:
    """Grow a list/dict/set's text in place (the object is shared through the memo)."""
    body = container.text[1:-1]
    container.text = _clip(container.text[0] + (f"{body}, {piece}" if body else piece) + container.text[-1])


def looks_like_pickle(data: bytes) -> bool:
    """A protocol 2+ pickle: PROTO 2..5 and a STOP at the end."""
    return data.startswith(PICKLE_STARTS) and data.rstrip(b"\x00").endswith(b".") and len(data) > 4


def decoded_pickle(text: str) -> bytes | None:
    """The pickle a string holds base64- or hex-encoded, if it holds one."""
    if len(text) < 8 or len(text) > MAX_NESTED_BYTES:
        return None
    candidates = []
    # base64 of b"\x80\x02".."\x80\x05": "gA" then I-L (2), M-P (3), Q-T (4), U-X (5)
    if text[:2] == "gA" and text[2:3] in "IJKLMNOPQRSTUVWX":
        try:
            candidates.append(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError):
            pass
    if text[:4].lower() in ("8002", "8003", "8004", "8005"):
        try:
            candidates.append(bytes.fromhex(text))
        except ValueError:
            pass
    return next((c for c in candidates if looks_like_pickle(c)), None)


class _Machine:
    """Runs one pickle's opcodes on symbolic values, as pickle's unpickler would on real ones.

    MARK starts a new stack as the real unpickler does, so every opcode's effect on the
    stack is exact; calls (REDUCE, NEWOBJ, OBJ, INST) and BUILD on an imported object are
    recorded with their arguments when what they call is not `safe`.
    """

    def __init__(self, member: str | None, scan: PickleScan, stream: "BoundedReader | None" = None):
        self.member, self.scan, self.stream = member, scan, stream
        self.stack: list[_Value] = []
        self.metastack: list[list[_Value]] = []
        self.memo: dict[int, _Value] = {}
        self.imports: list[tuple[str, str]] = []
        # getattr imports: [value, enum member lookups, other calls] (see member_lookup).
        self.getattrs: dict[int, list] = {}

    def pop(self) -> _Value:
        return self.stack.pop() if self.stack else _Value("?")

    def pop_mark(self) -> list[_Value]:
        items, self.stack = self.stack, (self.metastack.pop() if self.metastack else [])
        return items

    def push(self, value: _Value) -> None:
        self.stack.append(value)

    def imported(self, module: str, name: str) -> _Value:
        value = _Value(f"{module}.{name}", origin=(module, name), imported=True)
        if (module, name) in GETATTRS:
            self.getattrs[id(value)] = [value, 0, 0]  # judged by its calls (member_lookup)
        else:
            self.imports.append((module, name))
        return value

    def all_imports(self) -> list[tuple[str, str]]:  # with each getattr that did more than read enum members
        return self.imports + [value.origin for value, reads, others in self.getattrs.values() if others or not reads]

    def member_lookup(self, fn: _Value, args: list[_Value] | None) -> _Value | None:
        """The enum member `getattr(SomeEnum, 'NAME')` reads (allowlist.enum_member), else None."""
        if id(fn) not in self.getattrs:
            return None
        entry, (cls, attr) = self.getattrs[id(fn)], (args[0], args[1]) if args and len(args) == 2 else (None, None)
        if cls is not None and cls.imported and enum_member(cls.origin, attr.string):
            entry[1] += 1
            return _Value(f"{cls.text}.{attr.string}", origin=cls.origin)
        entry[2] += 1
        return None

    def where(self) -> str:
        return self.member or self.scan.file

    def call(self, fn: _Value, args: str, arg_values: list[_Value] | None = None) -> _Value:
        if (member := self.member_lookup(fn, arg_values)) is not None:
            return member
        text = f"{fn.text}{args}"
        verdict = classify(*fn.origin) if fn.origin is not None else None
        if fn.origin in NUMPY_DTYPE and arg_values and isinstance(arg_values[0].py, str):
            return _Value(text, origin=fn.origin, py=("dtype", arg_values[0].py))
        if verdict == "nested":
            blob = next((v.data for v in arg_values or [] if v.data is not None), None)
            if blob is not None and len(self.scan.nested) < MAX_NESTED:
                self.scan.nested.append((f"{self.where()} → {fn.text}(…)", blob, self.scan.nesting + 1))
            elif blob is not None:
                self.scan.unproven.append(f"{self.where()}: more than {MAX_NESTED} nested loads; the rest were not "
                                          "scanned")
            elif blob is None:  # the argument is not bytes we can read: what it loads is unknown
                self.scan.record(Call(text, ".".join(fn.origin), self.member))
        elif verdict is not None and verdict != "safe":
            self.scan.record(Call(text, ".".join(fn.origin), self.member))
        return _Value(text, origin=fn.origin)

    def embedded(self, data: bytes | None) -> None:
        if data is not None and len(self.scan.embedded) < MAX_NESTED and looks_like_pickle(data):
            self.scan.embedded.append((self.where(), data))

    def step(self, name: str, arg: object) -> None:
        if name in INT_OPS:
            self.push(_Value(repr(arg), py=arg))
        elif name in STRING_OPS:
            value = _Value(repr(arg), string=arg if isinstance(arg, str) else None, py=arg)
            if isinstance(arg, str) and len(arg) >= 8:
                self.embedded(decoded_pickle(arg))
            self.push(value)
        elif name in BYTES_OPS:
            data = bytes(arg) if isinstance(arg, (bytes, bytearray)) and len(arg) <= MAX_NESTED_BYTES else None
            self.embedded(data)
            self.push(_Value(repr(arg[:40]) + ("…" if len(arg) > 40 else ""), data=data))
        elif name in ("GLOBAL", "INST"):
            module, _, attr = str(arg).partition(" ")
            value = self.imported(module, attr)
            if name == "INST":
                items = self.pop_mark()
                value = self.call(value, _joined(items, "(", ")"), items)
            self.push(value)
        elif name == "STACK_GLOBAL":
            attr, module = self.pop(), self.pop()
            self.push(self.imported(*imported_name(module.string if module.string is not None else UNRESOLVED,
                                                   attr.string if attr.string is not None else UNRESOLVED)))
        elif name == "REDUCE":
            args, fn = self.pop(), self.pop()
            self.push(self.call(fn, args.text if args.text.startswith("(") else f"(*{args.text})",
                                getattr(args, "_items", None) or [args]))
        elif name == "NEWOBJ":
            args, cls = self.pop(), self.pop()
            self.push(self.call(cls, args.text))
        elif name == "NEWOBJ_EX":
            kwargs, args, cls = self.pop(), self.pop(), self.pop()
            self.push(self.call(cls, f"{args.text[:-1]}, **{kwargs.text})"))
        elif name == "OBJ":
            items = self.pop_mark() or [_Value("?")]
            self.push(self.call(items[0], _joined(items[1:], "(", ")"), items[1:]))
        elif name == "BUILD":
            state = self.pop()
            target = self.stack[-1] if self.stack else _Value("?")
            if target.imported:  # setattr on a library's own object: a gadget, never data
                self.scan.record(Call(f"set attributes of {target.text} to {state.text}", target.text, self.member))
            elif target.origin == JOBLIB_WRAPPER and self.stream is not None:
                self.joblib_array(state.py if isinstance(state.py, dict) else {})
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            items = [self.pop() for _ in range(int(name[-1]))][::-1]
            self.push(_tuple(items))
        elif name in ("TUPLE", "LIST", "FROZENSET"):
            items = self.pop_mark()
            self.push(_tuple(items) if name == "TUPLE" else
                      _Value(_joined(items, *{"LIST": "[]", "FROZENSET": "{}"}[name])))
        elif name in ("EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET"):
            self.push(_Value({"EMPTY_TUPLE": "()", "EMPTY_LIST": "[]", "EMPTY_DICT": "{}", "EMPTY_SET": "{}"}[name],
                             py={"EMPTY_TUPLE": (), "EMPTY_DICT": {}}.get(name)))
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
                self.set_item(self.stack[-1], key, value)
        elif name == "SETITEMS":
            items = self.pop_mark()
            if self.stack:
                for key, value in zip(items[::2], items[1::2]):
                    self.set_item(self.stack[-1], key, value)
        elif name in ("PERSID", "BINPERSID"):
            self.scan.persistent_ids += 1
            if name == "BINPERSID":
                self.pop()
            self.push(_Value("<persistent>"))
        elif name in ("NONE", "NEWTRUE", "NEWFALSE"):
            self.push(_Value({"NONE": "None", "NEWTRUE": "True", "NEWFALSE": "False"}[name],
                             py={"NEWTRUE": True, "NEWFALSE": False}.get(name)))
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


    @staticmethod
    def set_item(container: _Value, key: _Value, value: _Value) -> None:
        _append(container, f"{key.text}: {value.text}")
        if isinstance(container.py, dict) and isinstance(key.py, str) and len(container.py) < 64:
            container.py[key.py] = value

    def joblib_array(self, state: dict) -> None:
        """After a joblib NumpyArrayWrapper is rebuilt, joblib reads the array from the file
        itself: raw bytes (after an alignment pad), or for an object array a protocol 2
        pickle that it unpickles. Skip the one; walk the other as part of this file."""
        dtype, shape = state.get("dtype"), state.get("shape")
        code = dtype.py[1] if dtype is not None and isinstance(dtype.py, tuple) and len(dtype.py) == 2 else None
        dims = shape.py if shape is not None else None
        if not isinstance(code, str) or not isinstance(dims, tuple) or not all(isinstance(d, int) for d in dims):
            raise ScanLimit("a joblib array's size cannot be read from its wrapper; what follows was not scanned")
        if code.lstrip("<>|=").startswith("O"):
            walk = _walk(self.stream, self.member, self.scan)
            self.imports.extend(walk.imports)
            if not walk.complete:
                raise ScanLimit(walk.problem or "a joblib object array's pickle is broken")
            return
        itemsize = numpy_itemsize(code)
        if itemsize is None:
            raise ScanLimit(f"a joblib array of dtype {code!r} cannot be sized; what follows was not scanned")
        alignment = state.get("numpy_array_alignment_bytes")
        if alignment is not None and isinstance(alignment.py, int):
            pad = self.stream.read(1)
            self.stream.skip(pad[0] if pad else 0)
        count = 1
        for d in dims:
            count *= d
        self.stream.skip(count * itemsize)


_DTYPE_SIZES = {"?": 1, "b": 1, "B": 1, "h": 2, "H": 2, "e": 2, "i": 4, "I": 4, "f": 4, "l": 8, "L": 8, "q": 8,
                "Q": 8, "d": 8, "F": 8, "g": 16, "D": 16, "G": 32}


def numpy_itemsize(code: str) -> int | None:
    """Bytes per element of a numpy dtype string ('f4', '<i8', 'U10', 'M8[ns]', 'd')."""
    code = code.lstrip("<>|=").split("[", 1)[0]
    if not code:
        return None
    kind, digits = code[0], code[1:]
    if not digits:
        return _DTYPE_SIZES.get(kind)
    if not (digits.isascii() and digits.isdecimal()) or kind not in "biufcmMVSUa":
        return None
    return int(digits) * (4 if kind == "U" else 1)


class _TupleValue(_Value):
    """A tuple, keeping its items: a nested loader's bytes argument is found in it."""

    __slots__ = ("_items",)


def _tuple(items: list[_Value]) -> _Value:
    known = all(isinstance(v.py, (int, str, bool)) and v.py is not None for v in items)
    value = _TupleValue(_joined(items, "(", ")"), py=tuple(v.py for v in items) if known else None)
    value._items = items
    return value


_OPCODES = {op.name: op for op in pickletools.opcodes}
@dataclass
class _Walk:
    imports: list[tuple[str, str]]
    complete: bool  # reached STOP
    problem: str | None = None
    # Stopped by something other than bytes the unpickler refuses: a bound, a container that
    # cannot be read on, a read that failed, or malformed data this scanner did not expect.
    # What follows may run anything: the file is not proven safe.
    limited: bool = False
    opcodes: int = 0
    # Bytes a FRAME declares past the STOP: a loader that reads frames whole (pickle.load of
    # a stream without peek, as torch's legacy loader's later loads can be) starts the next
    # pickle there, where hfdoctor's reading does not. Writers never end a frame after STOP.
    frame_overrun: int = 0


class _StepFailed(Exception):
    """The symbolic machine failed on an opcode the unpickler accepts (a gap in this scanner)."""


def _walk(stream: "BoundedReader", member: str | None, scan: PickleScan) -> _Walk:
    """Walk one pickle, recording its unsafe calls in `scan`.

    Only bytes the unpickler itself refuses (Refused, and pickletools' readers' ValueError on
    a truncated argument, as the unpickler's own) end a walk as a damaged pickle: loading
    stops there too. Any other exception is a limit: the file is not proven safe."""
    machine = _Machine(member, scan, stream)
    count, frame_end = 0, 0
    try:
        for count, (opcode, arg) in enumerate(ops(stream)):
            if opcode.name == "STOP":
                scan.opcodes_left -= count
                return _Walk(machine.all_imports(), True, frame_overrun=max(0, frame_end - stream.position()))
            if opcode.name == "FRAME" and isinstance(arg, int):
                frame_end = stream.position() + arg
            if count >= scan.opcodes_left:
                raise ScanLimit(f"it runs more than {MAX_OPCODES:,} pickle opcodes; only the start was scanned")
            if count & 0xFFFF == 0 and scan.deadline is not None and time.monotonic() > scan.deadline:
                raise ScanLimit("the time budget of this check ran out while scanning it")
            try:
                machine.step(opcode.name, arg)
            except (ScanLimit, Refused, ContainerError):  # a joblib array read on from the stream
                raise
            except Exception as err:  # noqa: BLE001 - the machine's own gap, not the unpickler's refusal
                raise _StepFailed(f"the scanner stopped at opcode {opcode.name} ({type(err).__name__})") from None
    except ScanLimit as limit:
        scan.opcodes_left = max(0, scan.opcodes_left - count)
        return _Walk(machine.all_imports(), False, str(limit), limited=True, opcodes=count)
    except (ContainerError, _StepFailed) as err:  # a member that cannot be read on (a bomb), a scanner gap
        scan.opcodes_left = max(0, scan.opcodes_left - count)
        return _Walk(machine.all_imports(), False, str(err), limited=True, opcodes=count)
    except ValueError as err:  # Refused, and pickletools' readers on a truncated argument: loading stops here
        scan.opcodes_left = max(0, scan.opcodes_left - count)
        return _Walk(machine.all_imports(), False, f"{type(err).__name__}: {err}")
    except Exception as err:  # noqa: BLE001 - a read that failed (OSError, an unreadable source): unknown
        scan.opcodes_left = max(0, scan.opcodes_left - count)
        return _Walk(machine.all_imports(), False, f"reading it failed ({type(err).__name__}: {str(err)[:200]})",
                     limited=True, opcodes=count)
    return _Walk(machine.all_imports(), False, "the pickle ends without STOP (truncated)")


def scan_streams(raw: IO[bytes], member: str | None, scan: PickleScan, size: int | None = None) -> bool:
    """Scan the consecutive pickles of one stream (of `size` bytes, where known) into `scan`;
    False when it is not a pickle at all: the unpickler refuses its first bytes."""
    reader = BoundedReader(raw, scan.bytes_left, size)
    try:
        where = f"{member}: " if member else ""
        if reader.budget <= 0:
            scan.unproven.append(f"{where}not scanned: the pickles before it already hold "
                                 f"{MAX_SCAN_BYTES // (1024 * 1024)} MB")
            return False
        first = reader.read(1)
        reader.pending = first
        for n in range(MAX_STREAMS):
            walk = _walk(reader, member, scan)
            scan.imports.extend(Import(m, a, member, classify(m, a)) for m, a in walk.imports)
            if walk.complete:
                try:
                    if reader.at_end():
                        return True
                except ScanLimit:
                    return True
                if walk.frame_overrun:
                    scan.unproven.append(f"{where}a pickle FRAME runs {walk.frame_overrun:,} bytes past its STOP: a "
                                         "loader that reads frames whole starts the next pickle at another byte than "
                                         "the one scanned")
                continue
            if n == 0:
                # protocol 2+ pickles start with PROTO (0x80); anything else that the
                # unpickler refuses before it imports is some other format, not something
                # pickle.load would run. A bound or a failed read is not a refusal: what
                # follows may still be a pickle.
                if not walk.imports and first != b"\x80" and not walk.limited:
                    return False
                (scan.unproven if walk.limited else scan.problems).append(f"{where}{walk.problem}")
            elif walk.limited:  # a bound stopped the walk: what follows may run anything
                scan.unproven.append(f"{where}{walk.problem}")
            elif walk.imports:
                # A broken later pickle that imports before breaking: loaders run what comes
                # before the break, so what we found counts and the scan is incomplete.
                scan.problems.append(f"{where}{walk.problem}")
            # After complete pickles, bytes that are not a pickle are data (legacy torch storages).
            return True
        return True
    finally:
        scan.bytes_left = reader.budget
