"""The opcodes of one pickle, with their arguments decoded as pickle's unpickler decodes them.

pickletools.genops decodes text arguments its own way: INT and LONG in base 10, where
pickle.py (`int(data, 0)`) and _pickle.c (`strtol(s, &end, 0)`, then PyLong_FromString with
base 0) accept `0x1f`, `0o17` and, in C, `017`; GLOBAL and INST names escape-decoded, where
the unpickler takes the bytes as they are. A pickle can therefore be valid for pickle.load
and refused by genops, and a scanner built on genops stops at `I0x1` while the unpickler goes
on to the payload after it. Binary arguments are read with pickletools' own readers, which
match the unpickler's. Nothing here runs anything; the stream is a BoundedReader (or any
object with read/readline).
"""

from __future__ import annotations

import codecs
import pickletools
from typing import Any, Iterator

_BY_CODE = {op.code.encode("latin-1"): op for op in pickletools.opcodes}


class Refused(ValueError):
    """Bytes the real unpickler refuses: loading stops there (an exception), so nothing after runs."""


def _line(stream: Any) -> bytes:
    """A text argument as the unpickler reads it: readline() then [:-1] (it drops the last
    byte whether or not it is a newline; a missing newline means the pickle ends there)."""
    data = stream.readline()
    if not data.endswith(b"\n"):
        raise Refused("the pickle ends inside a text argument")
    return data[:-1]


def _c_int(text: bytes, base: int) -> int:
    """int() as _pickle.c parses INT and LONG: strtol(s, 0) first (so `0x1f` and C octal
    `017` are numbers), then PyLong_FromString(s, 0). pickletools (base 10) refuses both."""
    try:
        return int(text, base)
    except ValueError:
        stripped = text.strip()
        sign = -1 if stripped[:1] == b"-" else 1
        digits = stripped.lstrip(b"+-")
        if base == 0 and len(digits) > 1 and digits[:1] == b"0" and digits.isdigit() and b"8" not in digits \
                and b"9" not in digits:
            return sign * int(digits, 8)
        raise Refused(f"not an integer the unpickler reads: {bytes(text[:40])!r}") from None


def _text_arg(name: str, stream: Any) -> object:
    """The argument of a text opcode, decoded as pickle's unpickler (pickle.py, _pickle.c)
    decodes it, not as pickletools does: INT and LONG with base 0 (`I0x1`), PUT/GET base 10,
    GLOBAL/INST names taken as they are (no escapes), STRING quoted and escape-decoded."""
    if name == "INT":
        data = _line(stream)
        return False if data == b"00" else True if data == b"01" else _c_int(data, 0)
    if name == "LONG":
        data = _line(stream)
        return _c_int(data[:-1] if data.endswith(b"L") else data, 0)
    if name in ("PUT", "GET"):
        return _c_int(_line(stream), 10)
    if name == "FLOAT":
        try:
            return float(_line(stream))
        except ValueError:
            raise Refused("not a float the unpickler reads") from None
    if name == "STRING":
        data = _line(stream)
        if len(data) < 2 or data[:1] != data[-1:] or data[:1] not in (b"'", b'"'):
            raise Refused("the STRING opcode argument must be quoted")
        try:
            return codecs.escape_decode(data[1:-1])[0].decode("latin-1")
        except ValueError:
            raise Refused("the STRING opcode argument has a broken escape") from None
    if name == "UNICODE":
        try:
            return str(_line(stream), "raw-unicode-escape")
        except UnicodeDecodeError:
            raise Refused("the UNICODE opcode argument has a broken escape") from None
    if name in ("GLOBAL", "INST"):
        module, attr = _line(stream), _line(stream)
        return f"{module.decode('utf-8', 'surrogateescape')} {attr.decode('utf-8', 'surrogateescape')}"
    if name == "PERSID":
        return _line(stream).decode("latin-1")
    raise AssertionError(name)


_TEXT_OPS = {"INT", "LONG", "PUT", "GET", "FLOAT", "STRING", "UNICODE", "GLOBAL", "INST", "PERSID"}


def ops(stream: Any) -> Iterator[tuple[pickletools.OpcodeInfo, object]]:
    """(opcode, argument) of one pickle, up to its STOP, read as the unpickler reads them.

    pickletools.genops decodes text arguments its own way (INT in base 10, GLOBAL names
    escape-decoded), so a pickle can be valid for pickle.load and refused by genops: a
    scanner built on genops stops there and the payload after it is never seen. Binary
    arguments are read with pickletools' own readers (identical to the unpickler's)."""
    while True:
        code = stream.read(1)
        opcode = _BY_CODE.get(code)
        if opcode is None:
            raise Refused("the pickle ends before STOP" if not code else f"opcode {code!r} is not a pickle opcode")
        if opcode.arg is None:
            arg = None
        elif opcode.name in _TEXT_OPS:
            arg = _text_arg(opcode.name, stream)
        else:
            arg = opcode.arg.reader(stream)
        yield opcode, arg
        if opcode.name == "STOP":
            return


