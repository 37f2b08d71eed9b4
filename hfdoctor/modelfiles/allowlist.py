"""Which imports a pickle may make: an allowlist, not a denylist.

A denylist is always one module short: real payloads reach `eval` through
`numpy.__builtins__`, read files with `pandas.read_csv`, run code through `mlflow` or
`timm` loaders, none of which a list of "dangerous" modules names. So, like fickling's
ML allowlist and torch.load(weights_only=True), only what rebuilding tensors and arrays
needs is safe. Each import gets one verdict:

- `safe`: torch's tensor and storage rebuilders, dtypes, OrderedDict, numpy arrays;
- `known`: plain data classes that training libraries pickle beside the weights
  (transformers' TrainingArguments and its enums, TRL configs, argparse.Namespace). They
  run no code when rebuilt, but torch.load(weights_only=True) refuses them;
- `dangerous`: a module that runs code, spawns processes, touches files or the network
  or loads more pickles (the denylist is kept to say *why*), an attribute path
  (`prod.os.system`) or a dunder (`__builtins__`) that walks from a harmless module to
  anything, and an import whose name cannot be determined;
- `unlisted`: everything else. Loading it means importing and calling code nobody
  vetted, so it is an error too.
"""

from __future__ import annotations

import re
from functools import lru_cache

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


# Plain data classes and enums that trainers pickle into training_args.bin and friends.
# Rebuilding one creates an object and fills its __dict__; nothing else runs.
KNOWN = frozenset({
    "argparse.Namespace",
    "transformers.training_args.TrainingArguments", "transformers.training_args.OptimizerNames",
    "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
    "transformers.trainer_pt_utils.AcceleratorConfig", "transformers.debug_utils.DebugOption",
    *(f"transformers.trainer_utils.{name}" for name in (
        "IntervalStrategy", "SchedulerType", "HubStrategy", "SaveStrategy", "EvaluationStrategy", "FSDPOption",
        "ShardedDDPOption",
    )),
    "accelerate.utils.dataclasses.DistributedType",
    *(f"trl.trainer.{module}_config.{name}Config" for module, name in (
        ("sft", "SFT"), ("dpo", "DPO"), ("grpo", "GRPO"), ("kto", "KTO"), ("orpo", "ORPO"), ("reward", "Reward"),
        ("cpo", "CPO"), ("ppo", "PPO"),
    )),
    "trl.trainer.dpo_config.FDivergenceType",
    "sentence_transformers.training_args.SentenceTransformerTrainingArguments",
    "sentence_transformers.training_args.BatchSamplers", "sentence_transformers.training_args.MultiDatasetBatchSamplers",
})
# torch.save(model) pickles torch's own layer classes; rebuilding one is __new__ plus __setstate__.
KNOWN_PATTERNS = (re.compile(r"^torch\.nn\.modules\.[a-z_]+\.[A-Z][A-Za-z0-9]*$"),)

# Attribute names that lead from any object to the interpreter's internals.
DUNDER = re.compile(r"(^|\.)__[A-Za-z0-9_]+__($|\.)")


@lru_cache(maxsize=4096)  # a torch pickle calls the same few rebuilders thousands of times
def classify(module: str, name: str) -> str:
    """'safe', 'known', 'dangerous' or 'unlisted' for an import `module.name` a pickle makes."""
    full = f"{module}.{name}"
    if module == UNRESOLVED or name == UNRESOLVED:
        return "dangerous"  # an import we cannot name could be anything
    if "." in name or DUNDER.search(name) or DUNDER.search(module.replace("__builtin__", "").replace("__main__", "")):
        return "dangerous"  # pickle resolves `a.b.c` by getattr: numpy + "core._internal.sys.modules"
    for prefix in DANGEROUS:
        if full == prefix or full.startswith(prefix + ".") or module == prefix or module.startswith(prefix + "."):
            return "dangerous"
    if full in SAFE or any(p.match(full) for p in SAFE_PATTERNS):
        return "safe"
    if full in KNOWN or any(p.match(full) for p in KNOWN_PATTERNS):
        return "known"
    return "unlisted"
