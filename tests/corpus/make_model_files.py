"""Build the model-file security corpus: malicious and benign samples, one repository each.

Every sample re-creates, with our own code, a technique from the test suites that the
model-file scanners publish (picklescan, modelaudit, modelscan, fickling) or a published
bypass; its provenance names the peer file or advisory it reproduces. No peer file is
copied: the payloads here run `touch <sentinel>`-free harmless commands, and none is ever
loaded by the tests (they only scan).

    python tests/corpus/make_model_files.py OUT      # writes OUT/<sample>/<file> and OUT/MANIFEST.json

`label` is what loading the file would do: "malicious" (runs code, or reaches outside the
repository, on load), "embedded" (holds a payload as data that loading does not run; the
peers call these malicious) and "benign". `expect` is the hfdoctor finding the sample must
get: a rule and its lowest severity ("error" / "warning"), or None for benign samples.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import lzma
import os
import pickle
import struct
import sys
import tarfile
import types
import zipfile
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

PICKLESCAN = "mmaitre314/picklescan@f15d54d"
MODELAUDIT = "promptfoo/modelaudit@5ddfcdc3"
MODELSCAN = "protectai/modelscan"
FICKLING = "trailofbits/fickling"
COMMAND = "echo corpus"


@dataclass
class Sample:
    name: str
    file: str
    data: bytes
    label: str  # malicious | embedded | benign
    expect: tuple[str, str] | None  # (rule, severity) hfdoctor must report, None: nothing at warning or above
    technique: str
    provenance: str


# --- pickle building blocks ------------------------------------------------------------------------


def short(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw  # SHORT_BINUNICODE


def call(module: str, name: str, *args: str, protocol: int = 4) -> bytes:
    """module.name(*args): STACK_GLOBAL (protocol 4) or GLOBAL (protocol 2), then REDUCE."""
    if protocol >= 4:
        head = b"\x80\x04" + short(module) + short(name) + b"\x93"
    else:
        head = b"\x80\x02c" + f"{module}\n{name}\n".encode()
    return head + b"(" + b"".join(short(a) for a in args) + b"tR."


def reduce_pickle(fn, args, protocol: int) -> bytes:
    """What pickle.dumps writes for an object whose __reduce__ returns (fn, args)."""
    class Payload:
        def __reduce__(self):
            return fn, args

    return pickle.dumps(Payload(), protocol=protocol)


class FakeClasses:
    """Classes pickle writes as `module.qualname`, without those libraries installed: their
    modules exist only inside this context (the bytes are what the real classes give; the
    recorded imports in upstream_templates/pickle_classes.json say where they were seen).
    Leaving the context removes every module it added, so nothing leaks into the process."""

    def __enter__(self) -> "FakeClasses":
        self.added: list[str] = []
        return self

    def __exit__(self, *exc) -> None:
        for name in reversed(self.added):
            sys.modules.pop(name, None)

    def instance(self, module: str, qualname: str, **state) -> object:
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name not in sys.modules:
                sys.modules[name] = types.ModuleType(name)
                self.added.append(name)
        cls = getattr(sys.modules[module], qualname, None)
        if cls is None:
            cls = type(qualname, (), {"__module__": module, "__qualname__": qualname})
            setattr(sys.modules[module], qualname, cls)
        obj = cls.__new__(cls)
        obj.__dict__.update(state)
        return obj


def torch_zip(pickle_bytes: bytes, prefix: str = "archive", tamper=None) -> bytes:
    """A torch.save-like zip: {prefix}/data.pkl, a version record, one tensor data member."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{prefix}/data.pkl", pickle_bytes)
        archive.writestr(f"{prefix}/version", "3\n")
        archive.writestr(f"{prefix}/data/0", bytes(16))
    data = bytearray(buffer.getvalue())
    return bytes(tamper(data)) if tamper else bytes(data)


def _set_flag(bit: int):
    def tamper(data: bytearray) -> bytearray:
        data[6] |= bit  # the first local header's general-purpose flags
        at = data.find(b"PK\x01\x02")
        data[at + 8] |= bit  # and the central directory's
        return data
    return tamper


def _rename_central(data: bytearray) -> bytearray:
    at = data.find(b"PK\x01\x02")
    name = data.find(b"data.pkl", at)
    data[name:name + 8] = b"datq.pkl"  # the central directory names another member than the local header
    return data


def _break_crc(data: bytearray) -> bytearray:
    data[14] ^= 0xFF  # local header CRC
    at = data.find(b"PK\x01\x02")
    data[at + 16] ^= 0xFF
    return data


def legacy_torch(main: bytes, extra_streams: list[bytes] = ()) -> bytes:
    """torch's legacy format: magic number, protocol version, sys info, the object, storage keys."""
    magic = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)
    return magic + pickle.dumps(1001, protocol=2) + pickle.dumps({"little_endian": True}, protocol=2) + main + \
        pickle.dumps([], protocol=2) + b"".join(extra_streams)


def tar_of(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zip_of(members: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def seven_zip_stored(name: str, payload: bytes) -> bytes:
    """A 7z archive of one file, stored (copy coder), with a plain header: the layout 7-Zip
    writes with -mx0 (7zFormat.txt)."""
    def number(n: int) -> bytes:
        return bytes([n]) if n < 0x80 else b"\x80" + bytes([n & 0xFF]) if n < 0x4000 else \
            b"\xc0" + struct.pack("<H", n & 0xFFFF) if n < 0x200000 else b"\xff" + struct.pack("<Q", n)

    names = (name + "\0").encode("utf-16-le")
    header = (b"\x01\x04" + b"\x06" + number(0) + number(1) + b"\x09" + number(len(payload)) + b"\x00"
              + b"\x07\x0b" + number(1) + b"\x00" + b"\x01" + b"\x01\x00" + b"\x0c" + number(len(payload)) + b"\x00"
              + b"\x08\x00" + b"\x00"
              + b"\x05" + number(1) + b"\x11" + number(len(names) + 1) + b"\x00" + names + b"\x00" + b"\x00")
    start = struct.pack("<QQI", len(payload), len(header), zlib.crc32(header))
    return b"7z\xbc\xaf\x27\x1c\x00\x04" + struct.pack("<I", zlib.crc32(start)) + start + payload + header


def npy(header: dict, body: bytes) -> bytes:
    text = repr(header).encode("latin-1")
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + body


# --- protobuf, for ONNX and SavedModel ---------------------------------------------------------------


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def onnx_model(location: str | None) -> bytes:
    """ModelProto{ir_version, graph{node, initializer: TensorProto{dims, data_type, name, external_data | raw_data}}}."""
    tensor = field(1, 4) + field(2, 1) + field(8, b"weight")
    if location is None:
        tensor += field(9, bytes(16))
    else:
        tensor += field(13, field(1, b"location") + field(2, location.encode())) + field(14, 1)
    node = field(1, b"weight") + field(2, b"out") + field(4, b"Identity")
    graph = field(1, node) + field(2, b"g") + field(5, tensor)
    return field(1, 8) + field(7, graph)


def saved_model(op: str) -> bytes:
    """SavedModel{meta_graphs: MetaGraphDef{graph_def: GraphDef{node: NodeDef{name, op}}}}."""
    node = field(1, b"bad") + field(2, op.encode())
    return field(1, 1) + field(2, field(2, field(1, node)))


def keras_config(layers: list[dict]) -> dict:
    return {"class_name": "Sequential", "config": {"name": "sequential", "layers": layers}}


LAMBDA_LAYER = {"class_name": "Lambda", "config": {"name": "evil", "function": [
    base64.b64encode(b"\xe3" + bytes(64)).decode(), None, None], "function_type": "lambda"}}
DENSE_LAYER = {"module": "keras.layers", "class_name": "Dense", "config": {"name": "dense", "units": 2}}


def keras_zip(config: dict) -> bytes:
    return zip_of({"config.json": json.dumps(config).encode(), "metadata.json": b'{"keras_version": "3.8.0"}',
                   "model.weights.h5": b"\x89HDF\r\n\x1a\n" + bytes(64)})


def keras_h5(config: dict, **dumps) -> bytes:
    """An HDF5 file as Keras 2 writes a whole model (with h5py): the root group's attributes
    `model_config` (the JSON) and `keras_version`, and a weights group."""
    import tempfile

    import h5py

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.h5"
        with h5py.File(path, "w") as f:
            f.attrs["keras_version"] = "2.15.0"
            f.attrs["model_config"] = json.dumps(config, **dumps)
            f.create_group("model_weights").create_dataset("dense/kernel:0", data=[[0.5, 1.5]])
        return path.read_bytes()


# --- the samples --------------------------------------------------------------------------------------


DANGEROUS_CALLS = [  # (module, name, provenance) each a GLOBAL + REDUCE payload
    ("builtins", "eval", f"{PICKLESCAN} tests/data/malicious1_v4.pkl"),
    ("builtins", "exec", f"{PICKLESCAN} tests/data/malicious10.pkl"),
    ("posix", "system", f"{PICKLESCAN} tests/data/malicious2_v4.pkl"),
    ("nt", "system", f"{MODELAUDIT} tests/assets/pickles/nt_alias_attack.pkl"),
    ("subprocess", "run", f"{PICKLESCAN} tests/data/malicious8.pkl"),
    ("subprocess", "Popen", f"{MODELAUDIT} tests/assets/exploits/exploit7_nested_collections.pkl"),
    ("socket", "create_connection", f"{PICKLESCAN} tests/data/malicious7.pkl"),
    ("requests.api", "get", f"{PICKLESCAN} tests/data/malicious6.pkl"),
    ("aiohttp.client", "ClientSession", f"{PICKLESCAN} tests/data/malicious5.pickle"),
    ("urllib.request", "urlopen", f"{PICKLESCAN} tests/data2/urllib_request_urlopen.pkl"),
    ("runpy", "_run_code", f"{PICKLESCAN} tests/data/malicious14.pkl"),
    ("pip", "main", f"{PICKLESCAN} tests/data/malicious16.pkl"),
    ("torch._inductor.codecache", "compile_file", f"{PICKLESCAN} tests/data/malicious17.pkl"),
    ("pydoc", "pipepager", f"{PICKLESCAN} tests/data/malicious18.pkl"),
    ("venv", "create", f"{PICKLESCAN} tests/data/malicious20.pkl"),
    ("timeit", "timeit", f"{PICKLESCAN} tests/data2/malicious21.pkl"),
    ("numpy.testing._private.utils", "runstring", f"{PICKLESCAN} tests/data2/malicious22.pkl"),
    ("cProfile", "run", f"{PICKLESCAN} tests/data2/GHSA-49gj-c84q-6qm9.pkl"),
    ("pty", "spawn", f"{PICKLESCAN} tests/data2/GHSA-vqmv-47xg-9wpr.pkl"),
    ("ctypes", "CDLL", f"{PICKLESCAN} tests/data2/GHSA-4675-36f9-wf6r.pkl"),
    ("pkgutil", "resolve_name", f"{PICKLESCAN} tests/data2/GHSA-vvpj-8cmc-gx39.pkl"),
    ("ensurepip", "_run_pip", f"{PICKLESCAN} tests/data2/GHSA-xp4f-hrf8-rxw7.pkl"),
    ("uuid", "_get_command_stdout", f"{PICKLESCAN} tests/data2/GHSA-g38g-8gr9-h9xp-uuid.pkl"),
    ("_aix_support", "_read_cmd_output", f"{PICKLESCAN} tests/data2/GHSA-g38g-8gr9-h9xp-aix-support.pkl"),
    ("imaplib", "IMAP4_stream", f"{PICKLESCAN} tests/data2/GHSA-g38g-8gr9-h9xp-imaplib.pkl"),
    ("doctest", "debug_script", f"{PICKLESCAN} tests/data2/GHSA-fqq6-7vqf-w3fg.pkl"),
    ("torch.utils.collect_env", "run", f"{PICKLESCAN} tests/data2/GHSA-f745-w6jp-hpxx.pkl"),
    ("numpy.f2py.crackfortran", "getlincoef", f"{PICKLESCAN} tests/data2/GHSA-r8g5-cgf2-4m4m.pkl"),
    ("_io", "FileIO", f"{PICKLESCAN} tests/data2/io_FileIO.pkl"),
    ("logging", "FileHandler", f"{PICKLESCAN} tests/data2/logging_FileHandler.pkl"),
    ("types", "CodeType", f"{PICKLESCAN} tests/data2/types_CodeType.pkl"),
    ("ssl", "get_server_certificate", f"{PICKLESCAN} tests/data2/dns_exfiltration.npy"),
    ("pandas", "read_csv", "modelscan issue: exfiltration through pandas.read_csv"),
    ("mlflow.pyfunc", "load_model", "published bypass: a library loader fetches and runs a model"),
    ("webbrowser", "open", f"{MODELAUDIT} tests/detectors/test_network_comm_detector.py"),
    ("shutil", "rmtree", f"{MODELAUDIT} tests/scanners/test_pickle_scanner.py"),
    ("builtins", "__import__", f"{PICKLESCAN} tests/data2/GHSA-46h3-79wf-xr6c.pkl"),
    ("operator", "attrgetter", f"{PICKLESCAN} tests/data/malicious12.pkl"),
    ("pickle", "loads", f"{PICKLESCAN} tests/data/malicious13a.pkl"),
    ("_pickle", "loads", f"{PICKLESCAN} tests/data/malicious13b.pkl"),
    ("torch.serialization", "load", f"{PICKLESCAN} tests/data/malicious19.pkl"),
    ("sys", "exit", f"{PICKLESCAN} tests/data/malicious9.pkl"),
]


def malicious_pickles() -> list[Sample]:
    found = []
    for module, name, source in DANGEROUS_CALLS:
        found.append(Sample(f"call-{module}.{name}", "model.pkl", call(module, name, COMMAND), "malicious",
                            ("unsafe-pickle", "error"), f"{module}.{name} called on load", source))
    for proto in (0, 2, 3, 4, 5):
        found.append(Sample(f"eval-protocol-{proto}", "model.pkl", reduce_pickle(eval, ("1+1",), proto), "malicious",
                            ("unsafe-pickle", "error"), f"eval via __reduce__, protocol {proto}",
                            f"{PICKLESCAN} tests/data/malicious1_v0.pkl .. _v4.pkl"))
    memo = (b"\x80\x04" + short("os") + b"\x94" + b"0" + b"h\x00" + b"\x94" + b"0" + b"h\x01" + short("system")
            + b"\x93" + short(COMMAND) + b"\x85R.")
    found.append(Sample("memo-laundered-stack-global", "model.ckpt", memo, "malicious", ("unsafe-pickle", "error"),
                        "STACK_GLOBAL operands passed through the memo", f"{MODELAUDIT} tests/assets/pickles/memo_attack.pkl"))
    confusion = (b"\x80\x04cos\nsystem\nV" + COMMAND.encode() + b"\n\x85R0J*\x00\x00\x00\x94" + short("os")
                 + b"\x94h\x00h\x01\x93KB.")
    found.append(Sample("memo-type-confusion", "model.pkl", confusion, "malicious", ("unsafe-pickle", "error"),
                        "payload first, then memo indices that confuse look-back scanners",
                        f"{PICKLESCAN} tests/data2/type-confusion-exploit.pkl"))
    proto0 = b"Vos\np2\n0Vsystem\np3\n0g2\ng3\n\x93(V" + COMMAND.encode() + b"\ntR."
    found.append(Sample("protocol-0-memo", "model.pkl", proto0, "malicious", ("unsafe-pickle", "error"),
                        "protocol 0 text opcodes with PUT/GET", f"{PICKLESCAN} tests/data/malicious-invalid-bytes.pkl"))
    attribute_path = b"\x80\x04" + short("numpy") + short("lib._datasource.os.system") + b"\x93" + short(COMMAND) + b"\x85R."
    found.append(Sample("attribute-path", "model.pkl", attribute_path, "malicious", ("unsafe-pickle", "error"),
                        "pickle walks attributes from a harmless module to os.system", "modelscan issue #89"))
    second = pickle.dumps({"model": "safe_weights"}, protocol=5) + call("builtins", "eval", "1")
    found.append(Sample("second-stream", "model.pkl", second, "malicious", ("unsafe-pickle", "error"),
                        "a benign first pickle, the payload in the next stream",
                        f"{MODELAUDIT} tests/assets/pickles/multiple_stream_attack.pkl"))
    found.append(Sample("legacy-torch-magic", "pytorch_model.bin",
                        reduce_pickle(eval, ("1",), 2) + legacy_torch(pickle.dumps({}, protocol=2))[33:],
                        "malicious", ("unsafe-pickle", "error"), "payload in the legacy format's magic-number pickle",
                        f"{PICKLESCAN} tests/data/pytorch_magic_bypass.pt"))
    found.append(Sample("legacy-torch-later-stream", "pytorch_model.bin",
                        legacy_torch(pickle.dumps({"w": 1}, protocol=2), [call("posix", "system", COMMAND, protocol=2)]),
                        "malicious", ("unsafe-pickle", "error"), "payload in a stream after the storage keys",
                        "issue 20: a second pickle stream in the legacy format"))
    found.append(Sample("int-base-zero", "model.pkl", b"I0x1\n0" + call("builtins", "eval", "1+1", protocol=2)[2:],
                        "malicious", ("unsafe-pickle", "error"),
                        "an INT written 0x1: pickle.load reads it with base 0, pickletools.genops refuses it",
                        "issue 31: pickle.py load_int (int(data, 0)) and _pickle.c load_int (strtol(s, &end, 0))"))
    found.append(Sample("legacy-torch-hex-magic", "pytorch_model.bin",
                        b"L" + hex(0x1950A86A20F9469CFC6C).encode() + b"L\n." + pickle.dumps(1001, protocol=2)
                        + pickle.dumps({"little_endian": True}, protocol=2) + call("posix", "system", COMMAND, protocol=2)
                        + pickle.dumps([], protocol=2),
                        "malicious", ("unsafe-pickle", "error"),
                        "the legacy magic number as a hex LONG, then the payload in the model pickle",
                        "issue 31: torch.serialization._legacy_load reads magic, protocol, sys_info, then the model"))
    framed = (b"\x80\x04\x95" + struct.pack("<Q", 10) + short("builtins") + b"\x95" + struct.pack("<Q", 20)
              + short("eval") + b"\x93" + short("1+1") + b"\x85R.")
    found.append(Sample("frame-split", "model.pkl", framed, "malicious", ("unsafe-pickle", "error"),
                        "the payload split across a pickle FRAME boundary", "issue 20: a payload split across a frame"))
    found.append(Sample("dill-function", "model.dill",
                        b"\x80\x04" + short("dill._dill") + short("_create_function") + b"\x93" + short("code") + b"\x85R.",
                        "malicious", ("unsafe-pickle", "error"), "dill rebuilds a function from bytecode",
                        f"{MODELAUDIT} tests/assets/samples/pickles/dill_func.pkl"))
    found.append(Sample("cloudpickle-function", "model.pkl",
                        b"\x80\x04" + short("cloudpickle.cloudpickle") + short("_make_function") + b"\x93" + short("c")
                        + b"\x85R.", "malicious", ("unsafe-pickle", "error"), "cloudpickle rebuilds a function",
                        f"{PICKLESCAN} tests/data2/cloudpickle_codeinjection.pkl"))
    return found


def container_samples() -> list[Sample]:
    payload = reduce_pickle(eval, ("1+1",), 4)
    found = [
        Sample("torch-zip", "pytorch_model.bin", torch_zip(payload), "malicious", ("unsafe-pickle", "error"),
               "torch zip whose data.pkl calls eval", f"{MODELSCAN} tests/data/unsafe_zip_pytorch.pt"),
        Sample("zip-encrypted-flag", "model.pt", torch_zip(payload, tamper=_set_flag(0x01)), "malicious",
               ("unsafe-pickle", "error"), "the encryption flag over plain data (torch ignores it)",
               f"{PICKLESCAN} tests/data/malicious1_0x1.zip"),
        Sample("zip-patched-flag", "model.pt", torch_zip(payload, tamper=_set_flag(0x20)), "malicious",
               ("unsafe-pickle", "error"), "flag bit 5 (compressed patched data)", f"{PICKLESCAN} tests/data/malicious1_0x20.zip"),
        Sample("zip-strong-encryption-flag", "model.pt", torch_zip(payload, tamper=_set_flag(0x40)), "malicious",
               ("unsafe-pickle", "error"), "flag bit 6 (strong encryption)", f"{PICKLESCAN} tests/data/malicious1_0x40.zip"),
        Sample("zip-name-mismatch", "model.pt", torch_zip(payload, tamper=_rename_central), "malicious",
               ("unsafe-pickle", "error"), "central directory and local header name different members",
               f"{PICKLESCAN} tests/data/malicious1_central_directory.zip"),
        Sample("zip-bad-crc", "model.pt", torch_zip(payload, tamper=_break_crc), "malicious", ("unsafe-pickle", "error"),
               "a wrong CRC (torch does not check it)", f"{PICKLESCAN} tests/data2/malicious1_crc.zip"),
        Sample("zip-wrong-extension", "model.zip", zip_of({"data.txt": payload}), "malicious", ("unsafe-pickle", "error"),
               "a pickle member named .txt", f"{PICKLESCAN} tests/data/malicious1_wrong_ext.zip"),
        Sample("pickle-before-zip", "model.pt", payload + torch_zip(pickle.dumps({"w": 1}, protocol=2)), "malicious",
               ("unsafe-pickle", "error"), "a pickle in front of a torch zip (torch.load unpickles the front)",
               "issue 20: a pickle placed in front of a torch zip"),
        Sample("seven-zip", "model.7z", seven_zip_stored("data.pkl", payload), "malicious", ("unsafe-pickle", "error"),
               "a pickle inside a 7z archive", f"{PICKLESCAN} tests/data/malicious1.7z"),
        Sample("tar", "model.tar", tar_of({"data.pkl": payload}), "malicious", ("unsafe-pickle", "error"),
               "a pickle inside a tar archive", f"{MODELAUDIT} tests/scanners/test_tar_scanner.py"),
        Sample("pth-tar-legacy", "model.pth.tar",
               tar_of({"sys_info": pickle.dumps({}, protocol=2), "pickle": call("posix", "system", COMMAND, protocol=2),
                       "storages": pickle.dumps([], protocol=2), "tensors": pickle.dumps([], protocol=2)}),
               "malicious", ("unsafe-pickle", "error"), "torch's legacy tar format (every member is unpickled)",
               "issue 20: the legacy torch tar format"),
        Sample("gzip", "model.pkl.gz", gzip.compress(payload), "malicious", ("unsafe-pickle", "error"),
               "a gzip-compressed pickle", f"{MODELAUDIT} tests/scanners/test_compressed_scanner.py"),
        Sample("gzip-zip-behind-zeros", "model.pt.gz", gzip.compress(bytes(4096) + torch_zip(payload)), "malicious",
               ("unsafe-pickle", "error"), "a gzip of a torch zip behind 4 KB of zeros (zipfile finds a zip from its end)",
               "issue 31: a zip whose central directory is gzip-wrapped"),
        Sample("bz2", "model.pt.bz2", bz2.compress(payload), "malicious", ("unsafe-pickle", "error"),
               "a bz2-compressed pickle", f"{MODELAUDIT} tests/scanners/test_compressed_scanner.py"),
        Sample("xz", "model.pkl.xz", lzma.compress(payload), "malicious", ("unsafe-pickle", "error"),
               "an xz-compressed pickle", f"{MODELAUDIT} tests/scanners/test_compressed_scanner.py"),
        Sample("joblib-zlib", "model.joblib", zlib.compress(payload), "malicious", ("unsafe-pickle", "error"),
               "joblib's zlib compression", f"{MODELAUDIT} tests/scanners/test_joblib_scanner.py"),
        Sample("joblib-lzma", "model.joblib", lzma.compress(payload, format=lzma.FORMAT_ALONE), "malicious",
               ("unsafe-pickle", "error"), "joblib's lzma compression", f"{MODELAUDIT} tests/scanners/test_joblib_scanner.py"),
        Sample("zip-in-zip", "model.zip", zip_of({"inner.zip": zip_of({"weights.pkl": payload})}), "malicious",
               ("unsafe-pickle", "error"), "an archive inside an archive", f"{MODELAUDIT} tests/scanners/test_zip_scanner.py"),
        Sample("npy-object", "array.npy", npy({"descr": "|O", "fortran_order": False, "shape": (1,)},
                                              call("ssl", "get_server_certificate", "x", protocol=2)),
               "malicious", ("unsafe-pickle", "error"), "an object .npy whose pickle exfiltrates",
               f"{PICKLESCAN} tests/data2/dns_exfiltration.npy"),
        Sample("npz-object", "arrays.npz", zip_of({"a.npy": npy({"descr": "|O", "fortran_order": False, "shape": (1,)},
                                                               payload)}),
               "malicious", ("unsafe-pickle", "error"), "an object array inside .npz", f"{PICKLESCAN} tests/data2/object_arrays.npz"),
        Sample("load-from-bytes", "pytorch_model.bin",
               _load_from_bytes(torch_zip(payload)), "malicious", ("unsafe-pickle", "error"),
               "torch.storage._load_from_bytes of a payload torch file", "issue 20: _load_from_bytes is torch.load"),
        Sample("zip-path-traversal", "model.zip", zip_of({"../../../etc/evil.txt": b"x", "data.pkl": payload}),
               "malicious", ("unsafe-pickle", "error"), "a member named ../ (and a payload)",
               f"{MODELAUDIT} tests/assets/samples/archives/path_traversal.zip"),
    ]
    return found


def _load_from_bytes(inner: bytes) -> bytes:
    """torch.storage._load_from_bytes(b'<a torch file>'), as a storage's __reduce__ writes it."""
    return (b"\x80\x02ctorch.storage\n_load_from_bytes\nq\x00B" + struct.pack("<I", len(inner)) + inner
            + b"q\x01\x85q\x02Rq\x03.")


def format_samples() -> list[Sample]:
    return [
        Sample("keras-lambda", "model.keras", keras_zip(keras_config([DENSE_LAYER, LAMBDA_LAYER])), "malicious",
               ("unsafe-model-file", "error"), "a Lambda layer in a .keras archive",
               f"{MODELAUDIT} tests/scanners/test_keras_zip_scanner.py"),
        Sample("keras-h5-lambda", "model.h5", keras_h5(keras_config([LAMBDA_LAYER])), "malicious",
               ("unsafe-model-file", "error"), "a Lambda layer in an HDF5 Keras model",
               f"{MODELAUDIT} tests/assets/samples/keras/malicious_lambda.h5"),
        Sample("keras-module-reference", "model.keras", keras_zip(keras_config([
            {"module": "builtins", "class_name": "function", "config": "exec", "registered_name": "exec"}])),
               "malicious", ("unsafe-model-file", "error"), "a config object from module builtins",
               "CVE-2025-1550 (Keras safe_mode bypass through module references)"),
        Sample("onnx-external-traversal", "model.onnx", onnx_model("../../../../etc/passwd"), "malicious",
               ("unsafe-model-file", "error"), "external tensor data outside the model's directory",
               f"{MODELAUDIT} tests/scanners/test_onnx_scanner.py"),
        Sample("onnx-external-absolute", "model.onnx", onnx_model("/etc/shadow"), "malicious",
               ("unsafe-model-file", "error"), "external tensor data at an absolute path",
               f"{MODELAUDIT} tests/scanners/test_onnx_scanner.py"),
        Sample("savedmodel-pyfunc", "saved_model.pb", saved_model("PyFunc"), "malicious", ("unsafe-model-file", "error"),
               "a PyFunc op", f"{MODELAUDIT} tests/assets/samples/tensorflow/malicious_pyfunc/saved_model.pb"),
        Sample("savedmodel-eagerpyfunc", "saved_model.pb", saved_model("EagerPyFunc"), "malicious",
               ("unsafe-model-file", "error"), "an EagerPyFunc op", f"{MODELAUDIT} tests/scanners/test_tf_savedmodel_scanner.py"),
    ]


def joblib_samples() -> list[Sample]:
    """Real joblib files: arrays written after their NumpyArrayWrapper, object arrays as pickles."""
    import tempfile

    import joblib
    import numpy as np

    def dumped(value, **kwargs) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "x.joblib"
            joblib.dump(value, path, **kwargs)
            return path.read_bytes()

    class Payload:
        def __reduce__(self):
            return eval, ("1+1",)

    arrays = {"coef": np.arange(12, dtype=np.float32).reshape(3, 4), "ids": np.arange(5)}
    return [
        Sample("joblib-arrays", "model.joblib", dumped(arrays), "benign", None, "numeric arrays as joblib writes them",
               f"{MODELAUDIT} tests/scanners/test_joblib_scanner.py (benign joblib dump)"),
        Sample("joblib-arrays-zlib", "model.joblib", dumped(arrays, compress=3), "benign", None,
               "compressed numeric arrays", f"{MODELAUDIT} tests/scanners/test_joblib_scanner.py"),
        Sample("joblib-object-array", "model.joblib", dumped({"a": np.arange(3.0),
                                                              "o": np.array([Payload()], dtype=object)}),
               "malicious", ("unsafe-pickle", "error"), "a payload inside a joblib object array (after raw arrays)",
               f"{MODELAUDIT} tests/scanners/test_joblib_scanner.py"),
        Sample("joblib-lzma-payload", "model.joblib", dumped({"p": Payload()}, compress=("lzma", 3)), "malicious",
               ("unsafe-pickle", "error"), "a payload in an lzma-compressed joblib file",
               f"{MODELAUDIT} tests/scanners/test_compressed_scanner.py"),
    ]


def embedded_samples() -> list[Sample]:
    inner = reduce_pickle(print, ("x",), 4)
    stage1 = pickle.dumps({"stage2": inner}, protocol=4)
    return [
        Sample("embedded-raw", "model.pkl", pickle.dumps({"weights": [1, 2], "hidden": inner}, protocol=4), "embedded",
               ("embedded-pickle", "warning"), "a payload pickle stored as bytes",
               f"{MODELAUDIT} tests/assets/samples/pickles/nested_pickle_raw.pkl"),
        Sample("embedded-base64", "model.pkl",
               pickle.dumps({"encoded": base64.b64encode(inner).decode()}, protocol=4), "embedded",
               ("embedded-pickle", "warning"), "a payload pickle stored base64-encoded",
               f"{MODELAUDIT} tests/assets/samples/pickles/nested_pickle_base64.pkl"),
        Sample("embedded-hex", "model.pkl", pickle.dumps({"encoded": inner.hex()}, protocol=4), "embedded",
               ("embedded-pickle", "warning"), "a payload pickle stored hex-encoded",
               f"{MODELAUDIT} tests/assets/samples/pickles/nested_pickle_hex.pkl"),
        Sample("embedded-multistage", "model.pkl", pickle.dumps({"stage1": stage1}, protocol=4), "embedded",
               ("embedded-pickle", "warning"), "a pickle holding a pickle holding the payload",
               f"{MODELAUDIT} tests/assets/samples/pickles/nested_pickle_multistage.pkl"),
    ]


def benign_samples() -> list[Sample]:
    import numpy as np

    state = {"layer.weight": [0.1, 0.2], "step": 3}
    fakes = FakeClasses()
    with fakes:
        training_args = pickle.dumps(fakes.instance(
            "transformers.training_args", "TrainingArguments", output_dir="out", learning_rate=1e-5,
            distributed_state=fakes.instance("accelerate.state", "PartialState", _cpu=True)), protocol=2)
        estimator = pickle.dumps(fakes.instance("sklearn.linear_model._logistic", "LogisticRegression", C=1.0,
                                                coef_=np.zeros((1, 3)), _sklearn_version="1.9.1"), protocol=4)
        forest = pickle.dumps(fakes.instance("sklearn.ensemble._forest", "RandomForestClassifier", n_estimators=2,
                                             estimators_=[fakes.instance("sklearn.tree._classes",
                                                                         "DecisionTreeClassifier", max_depth=3)]),
                              protocol=4)
        pipeline = pickle.dumps(fakes.instance("sklearn.pipeline", "Pipeline", steps=[(
            "s", fakes.instance("sklearn.preprocessing._data", "StandardScaler", mean_=np.ones(3)))]), protocol=4)
    found = [Sample(f"plain-dict-protocol-{p}", "state.pkl", pickle.dumps(state, protocol=p), "benign", None,
                    "a dict of numbers", f"{PICKLESCAN} tests/data/benign0_v{p}.pkl") for p in (0, 2, 3, 4)]
    found += [
        Sample("numpy-array-pickle", "arrays.pkl", pickle.dumps({"a": np.arange(6).reshape(2, 3)}, protocol=4),
               "benign", None, "numpy arrays pickled", f"{MODELAUDIT} tests/assets/samples/pickles/safe_data.pkl"),
        Sample("numeric-npy", "array.npy", npy({"descr": "<i8", "fortran_order": False, "shape": (3,)}, bytes(24)),
               "benign", None, "a numeric .npy", f"{PICKLESCAN} tests/data2/int_array.npy"),
        Sample("numeric-npz", "arrays.npz", zip_of({"a.npy": npy({"descr": "<f4", "fortran_order": False, "shape": (2,)},
                                                               bytes(8))}), "benign", None, "a numeric .npz",
               f"{PICKLESCAN} tests/data2/int_arrays_compressed.npz"),
        Sample("torch-zip-state", "pytorch_model.bin", torch_zip(pickle.dumps(state, protocol=2)), "benign", None,
               "a torch zip of plain data", f"{PICKLESCAN} tests/data/new_pytorch_model.bin"),
        Sample("legacy-torch-state", "pytorch_model.bin", legacy_torch(pickle.dumps(state, protocol=2)), "benign", None,
               "the legacy torch format with plain data", f"{PICKLESCAN} tests/data/pytorch_model.bin"),
        Sample("training-args", "training_args.bin", torch_zip(training_args), "benign", None,
               "TrainingArguments with accelerate's PartialState, as Trainer saves it",
               "issue 20 false positive: training_args.bin importing accelerate.state.PartialState"),
        Sample("sklearn-logistic", "model.pkl", estimator, "benign", None,
               "a scikit-learn estimator", "issue 20 false positive: plain scikit-learn estimators"),
        Sample("sklearn-forest", "model.joblib", forest, "benign", None,
               "a scikit-learn random forest", "issue 20 false positive: plain scikit-learn estimators"),
        Sample("sklearn-pipeline", "pipeline.pkl", pipeline, "benign", None,
               "a scikit-learn pipeline", "issue 20 false positive: plain scikit-learn estimators"),
        Sample("builtins-len", "model.pkl", call("builtins", "len", "abc"), "benign", None, "builtins.len",
               "issue 20 false positive: builtins.len"),
        Sample("binary-field", "model.pkl", pickle.dumps({"blob": bytes(range(200))}, protocol=4), "benign", None,
               "bytes that are not a pickle", f"{MODELAUDIT} tests/assets/samples/pickles/safe_model_with_binary.pkl"),
        Sample("png-named-pt", "model.pt", b"\x89PNG\r\n\x1a\n" + bytes(32), "benign", None, "not a pickle at all",
               f"{PICKLESCAN} tests/data/bad_pytorch.pt"),
        Sample("zip-of-configs", "model.zip", zip_of({"config.json": b"{}", "README.txt": b"This is a model.\n"}),
               "benign", None, "a zip of text files", f"{MODELAUDIT} tests/assets/samples/archives/safe_model.zip"),
        Sample("keras-dense", "model.keras", keras_zip(keras_config([DENSE_LAYER])), "benign", None,
               "a Keras model without Lambda layers", f"{MODELAUDIT} tests/assets/samples/keras/safe_model.h5"),
        Sample("onnx-internal", "model.onnx", onnx_model(None), "benign", None, "ONNX with its data inside",
               f"{MODELAUDIT} tests/scanners/test_onnx_scanner.py"),
        Sample("onnx-external-beside", "model.onnx", onnx_model("model.onnx_data"), "benign", None,
               "ONNX with external data beside it", f"{MODELAUDIT} tests/scanners/test_onnx_scanner.py"),
        Sample("savedmodel-plain", "saved_model.pb", saved_model("MatMul"), "benign", None, "a SavedModel without PyFunc",
               f"{MODELAUDIT} tests/assets/samples/tensorflow/safe_savedmodel/saved_model.pb"),
        Sample("gzip-state", "state.pkl.gz", gzip.compress(pickle.dumps(state, protocol=4)), "benign", None,
               "a compressed plain pickle", f"{MODELAUDIT} tests/scanners/test_compressed_scanner.py"),
        Sample("tar-of-configs", "bundle.tar", tar_of({"config.json": b"{}"}), "benign", None, "a tar of configs",
               f"{MODELAUDIT} tests/scanners/test_tar_scanner.py"),
        Sample("seven-zip-state", "state.7z", seven_zip_stored("state.pkl", pickle.dumps(state, protocol=4)), "benign",
               None, "a plain pickle in 7z", f"{MODELAUDIT} tests/assets/generators/generate_7z_test_assets.py"),
    ]
    return found


# --- issue 40: what the loaders read that the scan did not --------------------------------------------
#
# Each builder takes the payload pickle (protocol 2, text GLOBAL), so the tests can load the same
# bytes with the real loader and a harmless payload (tests/modelfiles/test_real_loaders.py).


def nul_after_int(payload: bytes) -> bytes:
    """`I1\\x00junk\\n`: _pickle.c's strtol stops at the NUL and takes 1; then the payload, no PROTO."""
    return b"I1\x00junk\n0" + payload.removeprefix(b"\x80\x02")


def _tar_header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(tarfile.USTAR_FORMAT)


def _tar_padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def tar_pax_unicode_size(payload: bytes) -> bytes:
    """A legacy torch tar whose first member's pax `size` is `²`: str.isdigit takes it, int()
    does not, and tarfile then reads the size as 0, so that member's "data" is read as the
    next headers: `storages` (the payload, which torch unpickles first), `tensors`, `pickle`."""
    record = "size=²\n".encode()
    record = f"{len(record) + 3} ".encode() + record
    inner = b""
    for name, data in (("storages", payload), ("tensors", pickle.dumps(0, protocol=2)),
                       ("pickle", pickle.dumps({}, protocol=2))):
        inner += _tar_header(name, len(data)) + _tar_padded(data)
    return (_tar_header("././@PaxHeader", len(record), tarfile.XHDTYPE) + _tar_padded(record)
            + _tar_header("decoy", len(inner)) + inner + bytes(1024))


def npz_zip64_offset(payload: bytes) -> bytes:
    """An .npz whose first central-directory entry has a zip64 offset of 2**63; the second,
    b.npy, an object array, is read by np.load(allow_pickle=True) as usual."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.npy", npy({"descr": "<i8", "fortran_order": False, "shape": (1,)}, bytes(8)))
        archive.writestr("b.npy", npy({"descr": "|O", "fortran_order": False, "shape": (1,)}, payload))
    data = bytearray(buffer.getvalue())
    central = data.find(b"PK\x01\x02")
    (name_length,) = struct.unpack("<H", data[central + 28:central + 30])
    extra = struct.pack("<HHQ", 1, 8, 2**63)  # zip64 extended information: the local header's offset
    data[central + 42:central + 46] = struct.pack("<I", 0xFFFFFFFF)
    data[central + 30:central + 32] = struct.pack("<H", len(extra))
    data[central + 46 + name_length:central + 46 + name_length] = extra
    end = data.rfind(b"PK\x05\x06")
    (central_size,) = struct.unpack("<I", data[end + 12:end + 16])
    data[end + 12:end + 16] = struct.pack("<I", central_size + len(extra))
    return bytes(data)


def seven_zip_refused_chain(payload: bytes) -> bytes:
    """Folder 0: four x86 BCJ filters and LZMA1 (liblzma takes at most four filters in all);
    folder 1: stored (copy), holding data.pkl, the payload, which py7zr extracts."""
    number = _number7z
    junk = lzma.compress(b"x" * 10, format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA1}])
    props = lzma._encode_filter_properties({"id": lzma.FILTER_LZMA1})
    bcj = b"\x04\x03\x03\x01\x03"  # a simple coder with a 4-byte id: x86 BCJ
    lzma1 = b"\x23\x03\x01\x01" + number(len(props)) + props
    chain = number(5) + bcj * 4 + lzma1 + b"".join(number(i) + number(i + 1) for i in range(4))
    header = (b"\x01\x04" + b"\x06" + number(0) + number(2) + b"\x09" + number(len(junk)) + number(len(payload))
              + b"\x00" + b"\x07\x0b" + number(2) + b"\x00" + chain + b"\x01\x01\x00" + b"\x0c"
              + number(10) * 5 + number(len(payload)) + b"\x00" + b"\x08\x00" + b"\x00")
    names = "a.bin\0data.pkl\0".encode("utf-16-le")
    header += b"\x05" + number(2) + b"\x11" + number(len(names) + 1) + b"\x00" + names + b"\x00" + b"\x00"
    packed = junk + payload
    start = struct.pack("<QQI", len(packed), len(header), zlib.crc32(header))
    return b"7z\xbc\xaf\x27\x1c\x00\x04" + struct.pack("<I", zlib.crc32(start)) + start + packed + header


def npy_object_by_name(payload: bytes) -> bytes:
    """An .npy whose descr is `object` (numpy's name for 'O'): np.load(allow_pickle=True) unpickles the rest."""
    return npy({"descr": "object", "fortran_order": False, "shape": (1,)}, payload)


def npy_python2_header(payload: bytes) -> bytes:
    """An object .npy whose header writes its shape as Python 2 did, `(1L,)`: numpy drops the L."""
    text = b"{'descr': '|O', 'fortran_order': False, 'shape': (1L,), }"
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload


def npy_object_field_by_string(payload: bytes) -> bytes:
    """An .npy whose descr is the string `'i4,O'`: numpy's dtype grammar makes it a structured
    dtype with an object field, so np.load(allow_pickle=True) unpickles the rest."""
    return npy({"descr": "i4,O", "fortran_order": False, "shape": (1,)}, payload)


def npy_object_subarray_by_string(payload: bytes) -> bytes:
    """An .npy whose descr is `'(1,)O'`: a subarray of objects, unpickled by np.load(allow_pickle=True)."""
    return npy({"descr": "(1,)O", "fortran_order": False, "shape": (1,)}, payload)


def npy_python2_spaced_long(payload: bytes) -> bytes:
    """An object .npy whose shape is `(1 L,)`: numpy's Python 2 filter drops a NAME token `L` after
    a number, wherever the spaces are."""
    text = b"{'descr': '|O', 'fortran_order': False, 'shape': (1 L,), }"
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload


def npz_large_member_without_npy_name(payload: bytes) -> bytes:
    """An .npz whose member `b` (no .npy in its name, 2 MiB: past what is opened for its size
    alone) is an object array: np.load reads a member as an array by its magic, not its name."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("b", npy({"descr": "|O", "fortran_order": False, "shape": (1,)}, payload + bytes(2 << 20)))
    return buffer.getvalue()


def joblib_zfile(payload: bytes) -> bytes:
    """joblib's format before 0.10, which joblib.load still reads: `ZF`, the pickle's length in
    hex padded to 19 bytes, then the pickle, zlib-compressed."""
    return b"ZF" + b"%#x" % len(payload) + b" " * (19 - len(b"%#x" % len(payload))) + zlib.compress(payload)


def npy_huge_header(payload: bytes) -> bytes:
    """An object .npy (format 2.0) whose header is 100 KB of spaces: np.load(allow_pickle=True)
    reads any length (its 10,000-byte limit applies only without allow_pickle)."""
    text = b"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }" + b" " * 100_000 + b"\n"
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(text)) + text + payload


def frame_past_stop(payload: bytes) -> bytes:
    """A first pickle whose FRAME runs past its STOP, over a BINBYTES8 header that, read from
    the STOP on, swallows the payload (no PROTO: nothing to spot) as data. pickle.load of a
    stream without peek reads the frame whole, so its second load starts on the payload."""
    body = payload.removeprefix(b"\x80\x02")
    hidden = b"\x8e" + struct.pack("<Q", len(body))
    first = b"K\x01."
    return b"\x80\x04\x95" + struct.pack("<Q", len(first) + len(hidden)) + first + hidden + body + b"."


def class_name_last(value):
    """The same Keras config with every object's "class_name" written after its other keys."""
    if isinstance(value, dict):
        return {**{k: class_name_last(v) for k, v in value.items() if k != "class_name"},
                **({"class_name": value["class_name"]} if "class_name" in value else {})}
    return [class_name_last(v) for v in value] if isinstance(value, list) else value


def issue40_samples() -> list[Sample]:
    payload = call("posix", "system", COMMAND, protocol=2)
    lambda_config = keras_config([DENSE_LAYER, LAMBDA_LAYER])
    node_twice = field(1, b"bad") + field(2, b"Const") + field(2, b"PyFunc")
    outside = field(13, field(1, b"location") + field(2, b"../../etc/passwd")) + field(14, 1)
    sparse_graph = field(2, b"g") + field(15, field(1, field(1, 4) + field(2, 1) + field(8, b"v") + outside))
    unsafe, unproven = ("unsafe-pickle", "error"), ("pickle-not-proven-safe", "error")
    model_file = ("unsafe-model-file", "error")
    return [
        Sample("nul-after-int", "model.pkl", nul_after_int(payload), "malicious", unsafe,
               "INT `1\\x00junk`: strtol stops at the NUL", "issue 40: _pickle.c load_int"),
        Sample("torch-zip-nul-int", "pytorch_model.bin", torch_zip(nul_after_int(payload)), "malicious", unsafe,
               "the NUL trick in a torch zip's data.pkl, no PROTO", "issue 40: a data.pkl called not a pickle"),
        Sample("tar-pax-unicode-size", "model.pth", tar_pax_unicode_size(payload), "malicious", unsafe,
               "a pax size of `²`: tarfile reads 0 and the payload member follows",
               "issue 40: tarfile _apply_pax_info (int() or 0)"),
        Sample("npz-zip64-offset", "arrays.npz", npz_zip64_offset(payload), "malicious", unsafe,
               "a first zip entry at a zip64 offset of 2**63", "issue 40: np.load(allow_pickle=True) reads b.npy"),
        Sample("7z-refused-filter-chain", "model.7z", seven_zip_refused_chain(payload), "malicious", unsafe,
               "a folder liblzma refuses (4 BCJ + LZMA1) before the payload's folder", "issue 40: py7zr extracts it"),
        Sample("npy-object-by-name", "array.npy", npy_object_by_name(payload), "malicious", unsafe,
               "descr `object`, numpy's name for 'O'", "issue 40: numpy.lib.format.descr_to_dtype"),
        Sample("npy-python2-header", "array.npy", npy_python2_header(payload), "malicious", unsafe,
               "an object .npy whose header has Python 2 longs", "issue 40: numpy.lib.format._filter_header"),
        Sample("npy-huge-header", "array.npy", npy_huge_header(payload), "malicious", unproven,
               "a 100 KB header, which np.load(allow_pickle=True) reads", "issue 40: numpy max_header_size"),
        Sample("frame-past-stop", "model.pkl", frame_past_stop(payload), "malicious", unproven,
               "a FRAME past its STOP hides the next pickle", f"{MODELAUDIT} (FRAME crosses the STOP opcode)"),
        Sample("keras-h5-keys-reordered", "model.h5", keras_h5(class_name_last(lambda_config)), "malicious", model_file,
               "a Lambda layer in an h5 model_config whose class_name keys come last",
               f"{MODELAUDIT} tests/scanners/test_keras_h5_scanner.py"),
        Sample("keras-h5-indented", "model.h5", keras_h5(lambda_config, indent=2), "malicious", model_file,
               "a Lambda layer in an indented h5 model_config", f"{MODELAUDIT} tests/scanners/test_keras_h5_scanner.py"),
        Sample("savedmodel-op-named-twice", "saved_model.pb", field(1, 1) + field(2, field(2, field(1, node_twice))),
               "malicious", model_file, "a NodeDef naming its op twice (the last, PyFunc, wins)",
               f"{MODELAUDIT} tests/scanners/test_tf_savedmodel_scanner.py"),
        Sample("frozen-graph-pyfunc", "frozen_graph.pb", field(1, field(1, b"f") + field(2, b"EagerPyFunc")), "malicious",
               model_file, "a PyFunc op in a frozen GraphDef", f"{MODELAUDIT} tests/scanners/test_tf_savedmodel_scanner.py"),
        Sample("onnx-sparse-external-traversal", "model.onnx", field(1, 8) + field(7, sparse_graph), "malicious",
               model_file, "a sparse initializer's external data outside the model",
               f"{MODELAUDIT} tests/scanners/test_onnx_scanner.py"),
        Sample("undecodable-global-name", "not_a_pickle.bin", b"cmod\n\xf8\n", "benign", None,
               "a GLOBAL name that is not UTF-8: both unpicklers stop before any import",
               f"{PICKLESCAN} tests/data/not_a_pickle.bin"),
        Sample("tar-of-text-files", "bundle.tar", tar_of({"config.json": b'{\n  "a": 1\n}\n', "card.md": b"# x\ny\n"}),
               "benign", None, "a tar whose first member's name read as a pickle is a GLOBAL (`c`) with NULs",
               "issue 40: the front of a tar is scanned as a pickle (torch.load's fallback)"),
        Sample("keras-h5-dense-indented", "model.h5", keras_h5(keras_config([DENSE_LAYER]), indent=2), "benign", None,
               "an indented h5 model_config without Lambda", f"{MODELAUDIT} tests/assets/samples/keras/safe_model.h5"),
        Sample("frozen-graph-plain", "frozen_graph.pb", field(1, field(1, b"m") + field(2, b"MatMul")), "benign", None,
               "a frozen GraphDef without PyFunc", f"{MODELAUDIT} tests/scanners/test_tf_savedmodel_scanner.py"),
    ]


# --- hostile containers (issue 31): repositories built on disk, sparse where they are large ------------------
#
# Each builder writes one repository into an empty folder and returns what hfdoctor must say
# about it: (rule, lowest severity), or None where only "exit 0/1, within the bounds" is asked.
# tests/modelfiles/test_hostile_model_files.py checks each one under the audit hook, in a child whose
# memory and time are measured. Bombs are built without ever holding their output: a bz2
# block or a flushed deflate block of zeros is written once and repeated.


def bz2_zeros(blocks: int, head: bytes = b"") -> bytes:
    """One bz2 stream of `head` and then zeros, `blocks` blocks of 40 MB, ~50 bytes a block:
    each block is compressed once and its bits repeated (blocks are bit-aligned; the stream
    CRC combines the blocks')."""
    end_marker = f"{0x177245385090:048b}"

    def block_bits(data: bytes) -> str:
        bits = "".join(f"{b:08b}" for b in bz2.compress(data, 9))
        return bits[32:bits.rfind(end_marker)]  # after "BZh9", up to the end-of-stream marker

    zeros = block_bits(bytes(40 * 2**20))
    parts = [block_bits(head + bytes(40 * 2**20 - len(head))) if head else zeros] + [zeros] * (blocks - 1)
    combined = 0
    for part in parts:
        combined = (((combined << 1) | (combined >> 31)) & 0xFFFFFFFF) ^ int(part[48:80], 2)
    stream = "".join(parts) + end_marker + f"{combined:032b}"
    stream += "0" * (-len(stream) % 8)
    return b"BZh9" + int(stream, 2).to_bytes(len(stream) // 8, "big")


def gzip_pieces(pieces: list) -> bytes:
    """A gzip file of `pieces`: bytes, or an int n for n zero bytes (a flushed deflate block of
    1 MB of zeros repeated, so a gigabyte costs a megabyte and no time)."""
    zero_block = zlib.compressobj(9, zlib.DEFLATED, -15)
    one_mb = zero_block.compress(bytes(2**20)) + zero_block.flush(zlib.Z_FULL_FLUSH)
    out, crc, size = [b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"], 0, 0
    for piece in pieces:
        if isinstance(piece, int):
            assert piece % 2**20 == 0
            out.append(one_mb * (piece // 2**20))
            chunk = bytes(16 * 2**20)
            for at in range(0, piece, len(chunk)):
                crc = zlib.crc32(chunk[:min(len(chunk), piece - at)], crc)
        else:
            stream = zlib.compressobj(9, zlib.DEFLATED, -15)
            out.append(stream.compress(piece) + stream.flush(zlib.Z_FULL_FLUSH))
            crc = zlib.crc32(piece, crc)
        size += piece if isinstance(piece, int) else len(piece)
    out.append(zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH))  # an empty final block
    return b"".join(out) + struct.pack("<II", crc, size & 0xFFFFFFFF)


def zip_raw(name: str, method: int, compressed: bytes, crc: int, size: int) -> bytes:
    """A one-member zip whose member bytes are given already compressed (sizes as declared)."""
    raw = name.encode()
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 46, 0, method, 0, 0, crc, len(compressed),
                        size & 0xFFFFFFFF, len(raw), 0) + raw
    central = struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 46, 46, 0, method, 0, 0, crc, len(compressed),
                          size & 0xFFFFFFFF, len(raw), 0, 0, 0, 0, 0, 0) + raw
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local) + len(compressed), 0)
    return local + compressed + central + end


def _number7z(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    if n < 0x4000:
        return bytes([0x80 | (n >> 8), n & 0xFF])
    return b"\xff" + struct.pack("<Q", n)


def seven_zip_folders(payloads: list[bytes], digests_per_folder: int | None = None,
                      bz2_folders: tuple[bytes, int, int] | None = None) -> bytes:
    """A 7z of one stored (copy) folder per payload, one file each. With `digests_per_folder`,
    the substreams info instead declares that many files per folder, all with CRCs (a count
    the header cannot hold). With `bz2_folders` = (stream, unpacked size, count), that many
    bzip2 folders of that stream come first."""
    bombs = [] if bz2_folders is None else [bz2_folders] * bz2_folders[2]
    n = len(bombs) + len(payloads)
    coders = b"".join(b"\x01\x03\x04\x02\x02" for _ in bombs) + b"".join(b"\x01\x01\x00" for _ in payloads)
    packed = [b[0] for b in bombs] + payloads
    unpacked = [b[1] for b in bombs] + [len(p) for p in payloads]
    header = (b"\x01\x04" + b"\x06" + _number7z(0) + _number7z(n) + b"\x09"
              + b"".join(_number7z(len(p)) for p in packed) + b"\x00"
              + b"\x07\x0b" + _number7z(n) + b"\x00" + coders + b"\x0c"
              + b"".join(_number7z(u) for u in unpacked) + b"\x00")
    if digests_per_folder is not None:
        header += (b"\x08\x0d" + b"".join(_number7z(digests_per_folder) for _ in range(n)) + b"\x0a\x01"
                   + bytes(64) + b"\x00\x00")
    else:
        header += b"\x08\x00" + b"\x00"
    names = "".join(f"m{i}.pkl\0" for i in range(n)).encode("utf-16-le")
    header += b"\x05" + _number7z(n) + b"\x11" + _number7z(len(names) + 1) + b"\x00" + names + b"\x00" + b"\x00"
    body = b"".join(packed)
    start = struct.pack("<QQI", len(body), len(header), zlib.crc32(header))
    return b"7z\xbc\xaf\x27\x1c\x00\x04" + struct.pack("<I", zlib.crc32(start)) + start + body + header


def _sparse(path: Path, size: int, pieces: dict[int, bytes]) -> None:
    """A file of `size` bytes, zeros (a hole) but for `pieces` {offset: bytes}."""
    with open(path, "wb") as f:
        for offset, data in sorted(pieces.items()):
            if offset >= size:
                continue
            f.seek(offset)
            f.write(data)
        f.truncate(size)


def _gguf_string(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


CVE_2024_34359_TEMPLATE = (
    "{% for x in ().__class__.__base__.__subclasses__() %}{% if \"warning\" in x.__name__ %}"
    "{{x()._module.__builtins__['__import__']('os').popen(\"touch /tmp/hfdoctor-cve-2024-34359\")}}"
    "{%endif%}{% endfor %}"
)


def sparse_gguf(path: Path, size: int = 480 * 2**20, n: int = 950_000) -> None:
    """A GGUF of `size` bytes whose header is four arrays of n empty strings (zeros: a hole)."""
    kv = _gguf_string("general.architecture") + struct.pack("<I", 8) + _gguf_string("llama")
    pieces, at = {}, 0
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 5) + kv
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.extra0", "tokenizer.ggml.extra1"):
        head += _gguf_string(key) + struct.pack("<IIQ", 9, 8, n)
        pieces[at] = head
        at += len(head) + 8 * n  # n empty strings: n zero lengths, left as a hole
        head = b""
    _sparse(path, size, pieces)


def hostile_gguf_hard_links(folder: Path) -> tuple[str, str] | None:
    """16 hard links to one 480 MB GGUF whose header is 3.8 million empty strings (issue 31:
    57 s and 15 GB). Equal files are read once."""
    sparse_gguf(folder / "model-0.gguf")
    for i in range(1, 16):
        os.link(folder / "model-0.gguf", folder / f"model-{i}.gguf")
    return None


def hostile_gguf_copies(folder: Path) -> tuple[str, str] | None:
    """The same GGUF as sixteen sparse copies, not links: equal by size and header bytes."""
    for i in range(16):
        sparse_gguf(folder / f"model-{i}.gguf")
    return None


def hostile_gguf_huge_arrays(folder: Path) -> tuple[str, str] | None:
    """Arrays declaring 2**40 strings, and more strings in all than the reader walks."""
    sparse_gguf(folder / "a.gguf", n=2**40)
    sparse_gguf(folder / "b.gguf", n=3_000_000)
    return None


def hostile_gguf_template_only(folder: Path) -> tuple[str, str] | None:
    """A GGUF holding only a chat template, the CVE-2024-34359 proof of concept's shape
    (llama-cpp-python rendered it unsandboxed: GHSA-56xg-wfcc-g829), and no vocabulary."""
    kv = (_gguf_string("general.architecture") + struct.pack("<I", 8) + _gguf_string("llama")
          + _gguf_string("tokenizer.chat_template") + struct.pack("<I", 8) + _gguf_string(CVE_2024_34359_TEMPLATE))
    (folder / "model.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + kv)
    return ("chat-template-render-error", "error")


def hostile_7z_digest_counts(folder: Path) -> tuple[str, str] | None:
    """10,000 folders each declaring 10,000 files with CRCs: 10**8 digests in a 100 KB header."""
    payload = reduce_pickle(eval, ("1+1",), 4)
    (folder / "model.7z").write_bytes(seven_zip_folders([payload] * 10_000, digests_per_folder=10_000))
    return ("pickle-not-proven-safe", "error")


def hostile_7z_many_folders(folder: Path) -> tuple[str, str] | None:
    """3,000 bzip2 folders of 200 MB of zeros each (50 bytes apiece: 600 GB in 150 KB; each
    folder used to be decoded in full), then 2,000 folders of a harmless pickle, the payload
    in the last one."""
    harmless = pickle.dumps({"w": 1}, protocol=2)
    (folder / "model.7z").write_bytes(seven_zip_folders(
        [harmless] * 1_999 + [reduce_pickle(eval, ("1+1",), 4)], bz2_folders=(bz2_zeros(5), 5 * 40 * 2**20, 3_000)))
    return ("pickle-not-proven-safe", "error")


def hostile_7z_corrupt(folder: Path) -> tuple[str, str] | None:
    """A 7z holding a payload pickle whose start header says it has no header (size 0):
    7-Zip lists nothing, the bytes are there. Not proven safe is the only honest verdict."""
    data = bytearray(seven_zip_stored("data.pkl", reduce_pickle(eval, ("1+1",), 4)))
    start = struct.pack("<QQI", 0, 0, 0)
    data[12:32] = start
    data[8:12] = struct.pack("<I", zlib.crc32(start))
    (folder / "model.7z").write_bytes(bytes(data))
    return ("pickle-not-proven-safe", "error")


def hostile_nested_loaders(folder: Path) -> tuple[str, str] | None:
    """torch.storage._load_from_bytes of a torch file that does it again, 20 loads deep, the
    payload at the bottom (past the 16 nested loads a scan used to keep)."""
    inner = torch_zip(reduce_pickle(eval, ("1+1",), 4))
    for _ in range(20):
        inner = torch_zip(_load_from_bytes(inner))
    (folder / "pytorch_model.bin").write_bytes(inner)
    return ("pickle-not-proven-safe", "error")


def hostile_zip_bz2_member(folder: Path) -> tuple[str, str] | None:
    """A torch zip whose data.pkl is a bz2 member of 1.6 GB in 2 KB: a pickle whose BINBYTES8
    claims all of it, then zeros (one call of the decompressor on 16 KB of it used to return
    all 1.6 GB at once)."""
    size = 40 * 40 * 2**20
    bomb = bz2_zeros(40, head=b"\x80\x04\x8e" + struct.pack("<Q", size - 12))
    (folder / "pytorch_model.bin").write_bytes(zip_raw("archive/data.pkl", zipfile.ZIP_BZIP2, bomb, 0, size))
    return ("pickle-not-proven-safe", "error")


def hostile_gzip_wrapped_zip(folder: Path) -> tuple[str, str] | None:
    """A gzip of 1 GB of zeros then a torch zip with a payload: the zip's central directory is
    at the end of the decompressed stream, past any bound (it used to read as clean)."""
    (folder / "model.pt.gz").write_bytes(gzip_pieces([2**30, torch_zip(reduce_pickle(eval, ("1+1",), 4))]))
    return ("pickle-not-proven-safe", "error")


def hostile_tar_pax_redos(folder: Path) -> tuple[str, str] | None:
    """A pax header of 100,000 digits before a payload member: tarfile's `\\d+ hdrcharset=`
    search backtracks quadratically on it (CVE-2024-6232), and then reads on to the payload."""
    pax_body = b"1" * 100_000
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        info = tarfile.TarInfo("././@PaxHeader")
        info.type = tarfile.XHDTYPE
        info.size = len(pax_body)
        archive.addfile(info, io.BytesIO(pax_body))
        payload = reduce_pickle(eval, ("1+1",), 4)
        info = tarfile.TarInfo("data.pkl")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    (folder / "model.tar").write_bytes(buffer.getvalue())
    return ("unsafe-pickle", "error")


def hostile_tar_budget(folder: Path) -> tuple[str, str] | None:
    """A legacy-torch-like tar whose first member is a 96 MB pickle (zeros: a hole) that spends
    the 64 MB scan budget, then a payload member: the payload was only a warning."""
    big = 96 * 2**20
    pickle_head = b"\x80\x04\x8e" + struct.pack("<Q", big - 12)
    head = tarfile.TarInfo("pickle")
    head.size = big
    header = head.tobuf(tarfile.USTAR_FORMAT)
    payload = reduce_pickle(eval, ("1+1",), 4)
    second = tarfile.TarInfo("tensors")
    second.size = len(payload)
    at = 512 + big
    tail = second.tobuf(tarfile.USTAR_FORMAT) + payload + bytes(-len(payload) % 512) + bytes(1024)
    _sparse(folder / "model.pth.tar", at + len(tail), {0: header + pickle_head, 512 + big - 1: b".", at: tail})
    return ("pickle-not-proven-safe", "error")


def hostile_int_base_zero(folder: Path) -> tuple[str, str] | None:
    """INT written `I0x1`: pickle.load reads it (int(s, 0); strtol in _pickle.c), genops refuses."""
    (folder / "model.pkl").write_bytes(b"I0x1\n0" + call("builtins", "eval", "1+1", protocol=2)[2:])
    return ("unsafe-pickle", "error")


def hostile_legacy_hex_magic(folder: Path) -> tuple[str, str] | None:
    """A legacy torch file whose magic number is a protocol 0 LONG in hex (`L0x1950a86a...L`,
    what pickle.load reads as the magic number), then the model pickle with the payload."""
    magic = b"L" + hex(0x1950A86A20F9469CFC6C).encode() + b"L\n."
    (folder / "pytorch_model.bin").write_bytes(
        magic + pickle.dumps(1001, protocol=2) + pickle.dumps({"little_endian": True}, protocol=2)
        + call("posix", "system", COMMAND, protocol=2) + pickle.dumps([], protocol=2))
    return ("unsafe-pickle", "error")


def hostile_7z_empty_folders(folder: Path) -> tuple[str, str] | None:
    """Round 2's leftover (113 s): a 7z whose LZMA-encoded header (2 MB, 440 bytes packed)
    holds 200 "additional streams" of 10,000 empty folders each, 2 million in all, every
    count within the bound of one, behind a payload pickle no file names."""
    payload = reduce_pickle(eval, ("1+1",), 4)
    number = _number7z
    streams = b"\x03" + b"\x07\x0b" + number(10_000) + b"\x00" + bytes(10_000) + b"\x0c" + b"\x00" + b"\x00"
    header = b"\x01" + streams * 200 + b"\x00"
    packed = lzma.compress(header, format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA1}])
    props = lzma._encode_filter_properties({"id": lzma.FILTER_LZMA1})
    encoded = (b"\x17" + b"\x06" + number(len(payload)) + number(1) + b"\x09" + number(len(packed)) + b"\x00"
               + b"\x07\x0b" + number(1) + b"\x00" + number(1) + b"\x23\x03\x01\x01" + number(len(props)) + props
               + b"\x0c" + number(len(header)) + b"\x00" + b"\x00")
    body = payload + packed
    start = struct.pack("<QQI", len(body), len(encoded), zlib.crc32(encoded))
    (folder / "model.7z").write_bytes(b"7z\xbc\xaf\x27\x1c\x00\x04" + struct.pack("<I", zlib.crc32(start)) + start
                                      + body + encoded)
    return ("pickle-not-proven-safe", "error")


def hostile_nested_embedded(folder: Path) -> tuple[str, str] | None:
    """Round 2's leftover (110 s): pickles stored as data in pickles, 16 to a level, 4 levels,
    each leaf running 100,000 opcodes: every embedded pickle used to get a fresh budget."""
    leaf = b"\x80\x02" + b"N0" * 100_000 + reduce_pickle(eval, ("1+1",), 2)[2:]

    def holding(blobs: list[bytes]) -> bytes:
        return b"\x80\x04(" + b"".join(b"\x8e" + struct.pack("<Q", len(b)) + b for b in blobs) + b"l."

    level = leaf
    for _ in range(3):
        level = holding([level + bytes(i) for i in range(4)])  # NUL padding: four distinct pickles
    (folder / "model.pkl").write_bytes(holding([level, level + b"\x00"]))
    return None  # SEC005 (a warning): the bounds are what this case is about


def hostile_gzip_central_directory(folder: Path) -> tuple[str, str] | None:
    """Round 2's leftover (2 GB): a gzip of a zip whose central directory lists 4 million
    entries (190 MB, 200 KB gzipped): zipfile builds an object for each before any count."""
    name = b"a.pkl"
    payload = reduce_pickle(eval, ("1+1",), 4)
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0, zlib.crc32(payload), len(payload),
                        len(payload), len(name), 0) + name + payload
    entry = struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, zlib.crc32(payload), len(payload),
                        len(payload), len(name), 0, 0, 0, 0, 0, 0) + name
    n = 4_000_000
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, len(entry) * n, len(local), 0)
    stream = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [stream.compress(local)]
    chunk = entry * 100_000
    for _ in range(n // 100_000):
        parts.append(stream.compress(chunk))
    parts.append(stream.compress(end) + stream.flush())
    (folder / "model.pt.gz").write_bytes(b"".join(parts))
    return ("pickle-not-proven-safe", "error")


HOSTILE = {f.__name__[len("hostile_"):]: f for f in (
    hostile_gguf_hard_links, hostile_gguf_copies, hostile_gguf_huge_arrays, hostile_gguf_template_only, hostile_7z_digest_counts,
    hostile_7z_many_folders, hostile_7z_corrupt, hostile_nested_loaders, hostile_zip_bz2_member,
    hostile_gzip_wrapped_zip, hostile_tar_pax_redos, hostile_tar_budget, hostile_int_base_zero,
    hostile_legacy_hex_magic, hostile_7z_empty_folders, hostile_nested_embedded, hostile_gzip_central_directory)}


def samples() -> list[Sample]:
    return (malicious_pickles() + container_samples() + format_samples() + joblib_samples() + embedded_samples()
            + benign_samples() + issue40_samples())


def write(out: Path) -> list[Sample]:
    """Each sample as a repository of its own: OUT/<name>/<file>, and OUT/MANIFEST.json."""
    built = samples()
    for sample in built:
        folder = out / sample.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / sample.file).write_bytes(sample.data)
    manifest = [{k: v for k, v in asdict(s).items() if k != "data"} for s in built]
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return built


if __name__ == "__main__":
    written = write(Path(sys.argv[1]))
    print(f"{len(written)} samples in {sys.argv[1]}")
