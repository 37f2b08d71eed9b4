"""Which imports a pickle may make: an allowlist, not a denylist.

A denylist is always one module short: real payloads reach `eval` through
`numpy.__builtins__`, read files with `pandas.read_csv`, run code through `mlflow` or
`timm` loaders, none of which a list of "dangerous" modules names. So, like fickling's
ML allowlist and torch.load(weights_only=True), only what rebuilding tensors and arrays
needs is safe. Each import gets one verdict:

- `safe`: torch's tensor and storage rebuilders, dtypes, OrderedDict, numpy arrays;
- `known`: plain data classes that training and ML libraries pickle beside the weights
  (transformers' TrainingArguments and accelerate's state in training_args.bin, TRL
  configs, scikit-learn estimators, argparse.Namespace). They run no code when rebuilt,
  but torch.load(weights_only=True) refuses them;

The safe and known decisions are data, each with where the class was seen
(upstream_templates/pickle_classes.json); the denylist below only says *why* an import
that is not safe is worse than unlisted.
- `dangerous`: a module that runs code, spawns processes, touches files or the network
  or loads more pickles (the denylist is kept to say *why*), an attribute path
  (`prod.os.system`) or a dunder (`__builtins__`) that walks from a harmless module to
  anything, and an import whose name cannot be determined;
- `unlisted`: everything else. Loading it means importing and calling code nobody
  vetted, so it is an error too.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

from hfdoctor.knowledge import registry

UNRESOLVED = "<unresolved>"

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
    "builtins.reload", "builtins.help", "builtins.memoryview", "builtins.type", "builtins.super",
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



@lru_cache(maxsize=1)
def _recorded() -> tuple[frozenset[str], tuple, frozenset[str], tuple]:
    """(safe names, safe patterns, known names, known patterns) from pickle_classes.json,
    where each decision names where the class was seen (upstream_templates/)."""
    data = json.loads(registry.data_file("pickle_classes.json").read_text(encoding="utf-8"))

    def names(kind: str) -> frozenset[str]:
        return frozenset(name for entry in data[kind] for name in entry["names"])

    def compiled(kind: str) -> tuple:
        return tuple(re.compile(entry["pattern"]) for entry in data[kind])

    return names("safe"), compiled("safe_patterns"), names("known"), compiled("known_patterns")


# Loaders that unpickle their own argument: what they run is what that argument holds, so
# the scanner reads the argument as a file of its own (a nested scan) instead of judging
# the import. torch.storage._load_from_bytes is torch.load(io.BytesIO(b), weights_only=False).
NESTED_LOADERS = {"torch.storage._load_from_bytes": "torch.load(weights_only=False) of its bytes argument"}

# Attribute names that lead from any object to the interpreter's internals.
DUNDER = re.compile(r"(^|\.)__[A-Za-z0-9_]+__($|\.)")


@lru_cache(maxsize=4096)  # a torch pickle calls the same few rebuilders thousands of times
def classify(module: str, name: str) -> str:
    """'safe', 'known', 'nested', 'dangerous' or 'unlisted' for an import `module.name` a pickle makes."""
    full = f"{module}.{name}"
    if full in NESTED_LOADERS:
        return "nested"
    if module == UNRESOLVED or name == UNRESOLVED:
        return "dangerous"  # an import we cannot name could be anything
    if "." in name or DUNDER.search(name) or DUNDER.search(module.replace("__builtin__", "").replace("__main__", "")):
        return "dangerous"  # pickle resolves `a.b.c` by getattr: numpy + "core._internal.sys.modules"
    for prefix in DANGEROUS:
        if full == prefix or full.startswith(prefix + ".") or module == prefix or module.startswith(prefix + "."):
            return "dangerous"
    safe, safe_patterns, known, known_patterns = _recorded()
    if full in safe or any(p.match(full) for p in safe_patterns):
        return "safe"
    if full in known or any(p.match(full) for p in known_patterns):
        return "known"
    return "unlisted"


# getattr as pickles import it (protocol 2 writes builtins under their Python 2 module name).
GETATTRS = frozenset({("builtins", "getattr"), ("__builtin__", "getattr")})


def enum_member(cls: tuple[str, str] | None, attr: str | None) -> bool:
    """`getattr(cls, attr)` only reads a member of a safe or known class: how Python 3.12's enum
    pickles members whose mixed-in type has no reducer of its own (enum.pickle_by_enum_name,
    Lib/enum.py: `return getattr, (self.__class__, self._name_)`), as str-mixin enums such as
    transformers' HubStrategy and vLLM's RequestOutputKind are. Unpickling it reads one public
    attribute of a class already vetted; a getattr asked anything else is a call like any other."""
    return (cls is not None and attr is not None and attr.isidentifier() and not attr.startswith("_")
            and classify(*cls) in ("safe", "known"))

