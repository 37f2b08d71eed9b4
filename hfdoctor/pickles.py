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

Each import is `dangerous` (runs code, spawns processes, touches files or the network),
`safe` (torch's tensor rebuild functions, storages, dtypes, OrderedDict, numpy arrays:
what torch.load(weights_only=True) accepts) or `unknown` (anything else: harmless
classes of other libraries, but loading them needs weights_only=False).
"""

from __future__ import annotations

import os
import pickletools
import re
import stat
import zipfile
from dataclasses import dataclass, field
from typing import IO

# Pickle bytes we are willing to read from one file, all its pickles (and zip members)
# together. A torch data.pkl is ~100 KB for an 8B model; a larger file is scanned up to
# here and reported as partly scanned. One budget per file, not per member: a zip of a
# thousand 60 MB members (a zip bomb of ~60 MB) would otherwise take minutes.
MAX_SCAN_BYTES = 64 * 1024 * 1024
# Legacy torch files hold 5 pickles; we stop after a few, and at the first bytes that are
# not a pickle (the raw tensor data that follows).
MAX_STREAMS = 8

# Dotted prefixes of imports that run code, spawn processes, read or write files, open
# network connections, or load further pickles. From picklescan's and modelscan's
# blocklists, plus Python's documented code-running entry points.
DANGEROUS = (
    # processes, shells, the OS
    "os", "posix", "nt", "subprocess", "pty", "commands", "popen2", "platform.popen",
    "multiprocessing", "_posixsubprocess", "signal", "sys", "_thread", "threading",
    # running Python source or bytecode
    "builtins.eval", "builtins.exec", "builtins.execfile", "builtins.compile", "builtins.__import__",
    "builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.globals", "builtins.locals",
    "builtins.vars", "builtins.open", "builtins.input", "builtins.breakpoint", "builtins.apply",
    "builtins.reload", "builtins.help", "builtins.memoryview",
    "__builtin__.eval", "__builtin__.exec", "__builtin__.execfile", "__builtin__.compile",
    "__builtin__.__import__", "__builtin__.getattr", "__builtin__.setattr", "__builtin__.delattr",
    "__builtin__.globals", "__builtin__.locals", "__builtin__.vars", "__builtin__.open",
    "__builtin__.file", "__builtin__.input", "__builtin__.breakpoint", "__builtin__.apply",
    "__builtin__.reload",
    "runpy", "code", "codeop", "importlib", "imp", "pkgutil", "zipimport", "types.CodeType",
    "types.FunctionType", "types.MethodType", "marshal", "ctypes", "_ctypes", "cffi",
    "pdb", "bdb", "trace", "timeit", "cProfile", "profile", "pydoc", "doctest", "idlelib",
    "lib2to3", "_pyrepl", "test", "venv", "ensurepip", "pip", "setuptools", "distutils",
    "_osx_support", "_aix_support", "uuid._get_command_stdout",
    # indirection that turns data into calls
    "operator.attrgetter", "operator.methodcaller", "operator.itemgetter",
    "_operator.attrgetter", "_operator.methodcaller", "_operator.itemgetter",
    "functools.partial", "functools.reduce", "copyreg._extension_registry",
    # files and the network
    "shutil", "tempfile", "io.open", "io.FileIO", "_io.open", "_io.FileIO", "logging.FileHandler",
    "socket", "_socket", "ssl", "http", "httplib", "urllib", "urllib2", "requests", "aiohttp",
    "asyncio", "ftplib", "smtplib", "telnetlib", "imaplib", "poplib", "webbrowser",
    # loading more pickles or code
    "pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib.load", "pandas.read_pickle",
    "pandas.io.pickle", "numpy.load", "numpy.f2py", "numpy.testing._private.utils", "numpy.ctypeslib",
    "yaml.unsafe_load", "yaml.load", "torch.load", "torch.serialization.load", "torch.hub",
    "torch.jit.load", "torch.package", "torch._inductor.codecache", "torch.utils.cpp_extension",
    "torch.utils.collect_env", "torch.utils.bottleneck", "torch.utils._config_module",
    "torch.utils.data.datapipes.utils.decoder", "torch._dynamo", "torch.fx.experimental.symbolic_shapes",
    "torch.jit.unsupported_tensor_ops",
)

# What torch.load(weights_only=True) and numpy need to rebuild plain tensors and arrays.
SAFE = frozenset({
    "collections.OrderedDict", "collections.defaultdict", "collections.Counter", "collections.deque",
    "torch.Size", "torch.device", "torch.Tensor", "torch.nn.parameter.Parameter",
    "torch._tensor._rebuild_from_type_v2", "torch.serialization._get_layout",
    "torch.storage.UntypedStorage", "torch.storage.TypedStorage", "torch.storage._load_from_bytes",
    "numpy.ndarray", "numpy.dtype", "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar", "numpy.core.numeric._frombuffer",
    "numpy._core.numeric._frombuffer", "_codecs.encode", "copyreg._reconstructor",
    *(f"{b}.{t}" for b in ("builtins", "__builtin__") for t in (
        "set", "frozenset", "bytearray", "slice", "complex", "int", "float", "bool", "str", "bytes",
        "dict", "list", "tuple", "object", "range",
    )),
})
SAFE_PATTERNS = (
    re.compile(r"^torch\._utils\._rebuild_[a-z0-9_]+$"),  # _rebuild_tensor_v2, _rebuild_parameter, ...
    re.compile(r"^torch\.(storage\.)?[A-Za-z0-9]*Storage$"),  # torch.FloatStorage, torch.BFloat16Storage
    re.compile(r"^torch\.(float|bfloat|half|double|int|uint|long|short|bool|complex|cfloat|cdouble|qint|quint|"
               r"float8_|strided|sparse_|per_tensor|per_channel)[a-z0-9_]*$"),  # dtypes, layouts, qschemes
    re.compile(r"^numpy\.dtypes\.[A-Za-z0-9]+DType$"),  # numpy 2 pickles dtype classes
)

STRING_OPS = {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"}
PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}
GET_OPS = {"GET", "BINGET", "LONG_BINGET"}
UNRESOLVED = "<unresolved>"


def classify(module: str, name: str) -> str:
    """'dangerous', 'safe' or 'unknown' for an import the pickle makes."""
    full = f"{module}.{name}"
    if module == UNRESOLVED or name == UNRESOLVED:
        return "dangerous"  # an import we cannot name could be anything
    for prefix in DANGEROUS:
        if full == prefix or full.startswith(prefix + ".") or module == prefix or module.startswith(prefix + "."):
            return "dangerous"
    if full in SAFE or any(p.match(full) for p in SAFE_PATTERNS):
        return "safe"
    return "unknown"


@dataclass(frozen=True)
class Import:
    module: str
    name: str
    member: str | None  # the zip member it is in, None for a raw pickle
    verdict: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass
class PickleScan:
    file: str
    kind: str  # "pickle", "zip", "not-pickle"
    imports: list[Import] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why the scan may be incomplete
    bytes_left: int = MAX_SCAN_BYTES  # of the file's read budget

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


def _imports_of_stream(stream: IO[bytes]) -> tuple[list[tuple[str, str]], bool, str | None]:
    """Walk one pickle: (imports, reached STOP, problem). Runs the stack and memo abstractly.

    The stack holds the value of string pushes (str) and None for anything else; MARK
    starts a new stack as the real unpickler does, so every opcode's effect is exact.
    """
    imports: list[tuple[str, str]] = []
    stack: list[object] = []
    metastack: list[list[object]] = []
    memo: dict[int, object] = {}

    def pop() -> object:
        return stack.pop() if stack else None

    def pop_mark() -> None:
        nonlocal stack
        stack = metastack.pop() if metastack else []

    try:
        for opcode, arg, _pos in pickletools.genops(stream):
            name = opcode.name
            if name in STRING_OPS:
                stack.append(arg if isinstance(arg, str) else None)
            elif name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                imports.append((module, attr))
                if name == "INST":
                    pop_mark()
                stack.append(None)
            elif name == "STACK_GLOBAL":
                attr, module = pop(), pop()
                imports.append((
                    module if isinstance(module, str) else UNRESOLVED,
                    attr if isinstance(attr, str) else UNRESOLVED,
                ))
                stack.append(None)
            elif name in PUT_OPS:
                memo[arg] = stack[-1] if stack else None
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1] if stack else None
            elif name in GET_OPS:
                stack.append(memo.get(arg))
            elif name in ("EXT1", "EXT2", "EXT4"):
                # copyreg's extension registry maps codes to imports; it is empty unless a
                # program registers some, so a pickle that uses it is hiding something.
                imports.append(("copyreg._extension_registry", str(arg)))
                stack.append(None)
            elif name == "MARK":
                metastack.append(stack)
                stack = []
            elif name == "DUP":
                stack.append(stack[-1] if stack else None)
            elif name == "POP":
                if stack:
                    stack.pop()
                else:
                    pop_mark()
            elif name == "STOP":
                return imports, True, None
            else:
                before = opcode.stack_before
                if pickletools.markobject in before:
                    pop_mark()
                    for _ in range(before.index(pickletools.markobject)):
                        pop()
                else:
                    for _ in before:
                        pop()
                stack.extend(None for _ in opcode.stack_after)
    except _ScanLimit:
        return imports, False, f"its pickles are larger than {MAX_SCAN_BYTES // (1024 * 1024)} MB; only the start was scanned"
    except Exception as err:  # genops raises ValueError and friends on bytes that are not a pickle
        return imports, False, f"{type(err).__name__}: {err}"
    return imports, False, "the pickle ends without STOP (truncated)"


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
            imports, complete, problem = _imports_of_stream(reader)
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
