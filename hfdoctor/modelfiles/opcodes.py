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
import sys
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


_C_SPACE = b" \t\n\v\f\r"  # C isspace() in the "C" locale
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _c_string(line: bytes) -> bytes:
    """What C string functions see of a line the unpickler copied (newline kept, a NUL after
    it): the bytes up to the first NUL. strtol, PyLong_FromString and PyOS_string_to_double
    all stop there, so `I1\x00<anything>\n` is the int 1 to _pickle.c."""
    cut = line.find(b"\0")
    return line if cut < 0 else line[:cut]


def _strtol(text: bytes) -> tuple[int, int]:
    """C strtol(s, &end, 0) on `text`: (value, index of end). No digits: (0, 0), end = s."""
    at, n = 0, len(text)
    while at < n and text[at] in _C_SPACE:
        at += 1
    sign = 1
    if at < n and text[at] in b"+-":
        sign = -1 if text[at] == 0x2D else 1
        at += 1
    digits = b"0123456789"
    if text[at:at + 1] == b"0":
        if text[at + 1:at + 2] in (b"x", b"X") and at + 2 < n and text[at + 2] in b"0123456789abcdefABCDEF":
            digits, at = b"0123456789abcdefABCDEF", at + 2
        else:
            digits = b"01234567"
    start = at
    while at < n and text[at] in digits:
        at += 1
    if at == start:
        return 0, 0
    base = 16 if len(digits) == 22 else 8 if len(digits) == 8 else 10
    return sign * int(text[start:at], base), at


def _py_long(text: bytes, base: int) -> int:
    """PyLong_FromString(s, NULL, base) on a C string: Python's int() of the same bytes (the
    same C function: whitespace, underscores, 0x/0o/0b, its digit limit)."""
    try:
        return int(text, base)
    except ValueError:
        raise Refused(f"not an integer the unpickler reads: {bytes(text[:40])!r}") from None


def _c_int(data: bytes) -> int | bool:
    """INT as _pickle.c's load_int reads it (pickle.py's int(data, 0) accepts less):
    strtol(s, &end, 0), taken when it ends at the newline or a NUL without overflow (C octal
    `017` is 15); otherwise PyLong_FromString(s, NULL, 0). `00`/`01` (and any 0 or 1 on a
    line of 3 bytes) are the booleans."""
    line = data + b"\n"
    text = _c_string(line)
    value, end = _strtol(text)
    if _LONG_MIN <= value <= _LONG_MAX and (end == len(text) or text[end] == 0x0A):
        return bool(value) if len(line) == 3 and value in (0, 1) else value
    return _py_long(text, 0)


def _c_long(data: bytes) -> int:
    """LONG as load_long reads it: a trailing `L` dropped, then PyLong_FromString(s, NULL, 0)
    up to the first NUL (no C octal here: `017L` is refused)."""
    line = data + b"\n"
    if len(line) >= 2 and line[-2:-1] == b"L":
        line = line[:-2] + b"\0\n"
    return _py_long(_c_string(line), 0)


_INF_NAN = (b"infinity", b"inf", b"nan")


def _c_float_end(text: bytes) -> int:
    """Where PyOS_string_to_double(s, &end) stops on `text` (no leading whitespace, no
    underscores; digits, a point, an exponent, or inf/infinity/nan): 0 when nothing converts."""
    at, n = 0, len(text)
    if at < n and text[at] in b"+-":
        at += 1
    lower = text[at:at + 8].lower()
    for word in _INF_NAN:
        if lower.startswith(word):
            return at + len(word)
    digits = at
    while at < n and 0x30 <= text[at] <= 0x39:
        at += 1
    whole = at - digits
    if at < n and text[at] == 0x2E:
        at += 1
        frac = at
        while at < n and 0x30 <= text[at] <= 0x39:
            at += 1
        if not whole and at == frac:
            return 0
    elif not whole:
        return 0
    if at < n and text[at] in b"eE":
        exp = at + 1
        if exp < n and text[exp] in b"+-":
            exp += 1
        if exp < n and 0x30 <= text[exp] <= 0x39:
            while exp < n and 0x30 <= text[exp] <= 0x39:
                exp += 1
            at = exp
    return at


def _float_arg(data: bytes) -> float:
    """FLOAT as either unpickler reads it: _pickle.c's load_float (PyOS_string_to_double up
    to the newline or a NUL, refusing overflow) or pickle.py's float(line), which takes
    whitespace, underscores and `1e999` (joblib and dill use pickle.py's unpickler)."""
    try:
        return float(data)
    except ValueError:
        pass
    text = _c_string(data + b"\n")
    end = _c_float_end(text)
    if end and (end == len(text) or text[end] == 0x0A):
        value = float(text[:end])
        if value not in (float("inf"), float("-inf")) or text[:end].lstrip(b"+-")[:1].lower() == b"i":
            return value
    raise Refused("not a float the unpickler reads")


def _utf8(data: bytes, what: str) -> str:
    """Names decoded as both unpicklers decode them: strict UTF-8. A name that is not UTF-8
    stops loading before anything is imported."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(f"the {what} name is not UTF-8, which the unpickler refuses") from None


def imported_name(module: str, name: str) -> tuple[str, str]:
    """The (module, attribute) an import of these names reaches. A NUL in the module name:
    Python's import of a frozen module compares C strings, so `os\\x00junk` is os (any
    standard-library name is taken so), and any other module is not found: loading stops.
    A NUL in the attribute name is never found either (AttributeError)."""
    if "\0" in name:
        raise Refused("an attribute name holding a NUL, which no module has")
    if "\0" in module:
        head = module.split("\0", 1)[0]
        if head.split(".", 1)[0] not in sys.stdlib_module_names:
            raise Refused("a module name holding a NUL, which no import finds")
        module = head
    return module, name


def _text_arg(name: str, stream: Any) -> object:
    """The argument of a text opcode, decoded as pickle's unpicklers (_pickle.c, and
    pickle.py where it accepts more) decode it, not as pickletools does: INT and LONG with
    base 0 (`I0x1`) up to a NUL, PUT/GET base 10, GLOBAL/INST names strict UTF-8 taken as
    they are (no escapes), STRING quoted and escape-decoded."""
    if name in ("INT", "LONG", "PUT", "GET", "FLOAT"):
        data = _line(stream)
        if not data:  # both unpicklers need a byte before the newline
            raise Refused(f"an empty {name} argument")
        if name != "PUT" and name != "GET":
            return _c_int(data) if name == "INT" else _c_long(data) if name == "LONG" else _float_arg(data)
        index = _py_long(_c_string(data + b"\n"), 10)
        if index < 0:
            raise Refused(f"a negative memo index ({index})")
        return index
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
        module = _utf8(_line(stream), "module")
        module, attribute = imported_name(module, _utf8(_line(stream), "class"))
        return f"{module} {attribute}"
    if name == "PERSID":
        try:
            return _line(stream).decode("ascii")
        except UnicodeDecodeError:
            raise Refused("a persistent id that is not ASCII") from None
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


