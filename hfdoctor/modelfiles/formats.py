"""Model formats other than pickle that run code on load, read as data.

- numpy .npy: a header (a Python dict literal, parsed with ast.literal_eval, bounded)
  then the array; an object dtype (`'O'` anywhere in descr) stores a pickle after the
  header, which np.load(allow_pickle=True) unpickles;
- Keras: `.keras` is a zip whose config.json describes the model; `.h5` holds the same
  JSON in its root group's `model_config` attribute (read by hfdoctor.modelfiles.hdf5). A `Lambda` layer carries marshalled Python
  bytecode that loading runs (keras 2, and keras 3 with safe_mode=False), and a layer or
  object whose `module` is not Keras's own makes the loader import that module;
- ONNX: a TensorProto whose data is external names a file (`location`); a path that is
  absolute or climbs out of the model's directory makes onnx read any file on the machine;
- TensorFlow SavedModel: a PyFunc op (PyFunc, PyFuncStateless, EagerPyFunc) calls a Python
  function registered in the process that loads it.

ONNX and SavedModel are protobuf: a small wire-format reader walks only the fields that
matter, with bounds on depth and count.
"""

from __future__ import annotations

import ast
import struct
from typing import Any, Iterator

NPY_MAGIC = b"\x93NUMPY"
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
MAX_NPY_HEADER = 64 * 1024
PYFUNC_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
MAX_PROTO_DEPTH = 16
MAX_PROTO_FIELDS = 2_000_000


# --- numpy ------------------------------------------------------------------------------------


class NpyHeaderTooLarge(ValueError):
    """A header longer than hfdoctor reads: np.load(allow_pickle=True) reads any length."""


def npy_header(data: bytes) -> tuple[dict[str, Any], int] | None:
    """(the header dict, where the array starts) of an .npy file, or None when it is not one
    numpy reads either. NpyHeaderTooLarge past MAX_NPY_HEADER."""
    if not data.startswith(NPY_MAGIC) or len(data) < 10:
        return None
    major = data[6]
    if major == 1:
        (length,), start = struct.unpack("<H", data[8:10]), 10
    elif major in (2, 3) and len(data) >= 12:
        (length,), start = struct.unpack("<I", data[8:12]), 12
    else:
        return None
    if length > MAX_NPY_HEADER:
        raise NpyHeaderTooLarge(f"a numpy header of {length:,} bytes, more than hfdoctor reads")
    if start + length > len(data):
        return None
    text = data[start:start + length].decode("utf-8" if major == 3 else "latin-1", "replace")
    # numpy's own reading (literal_eval, then its _filter_header: Python 2's `3L`, `3 L`), and a
    # plainer one: any dict either finds is scanned.
    for candidate in (lambda: text, lambda: _python2_filtered(text), lambda: _without_long_suffixes(text)):
        try:
            header = ast.literal_eval(candidate().strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(header, dict):
            return header, start + length
    return None


def _python2_filtered(text: str) -> str:
    """numpy's _filter_header, as it reads a header literal_eval refused: every NAME token `L`
    right after a NUMBER token dropped (`(1 L,)` is `(1,)`), the rest untokenized."""
    import tokenize
    from io import StringIO

    tokens, after_number = [], False
    try:
        for token in tokenize.generate_tokens(StringIO(text).readline):
            if not (after_number and token[0] == tokenize.NAME and token[1] == "L"):
                tokens.append(token)
            after_number = token[0] == tokenize.NUMBER
        return tokenize.untokenize(tokens)
    except (tokenize.TokenError, SyntaxError, ValueError):  # numpy's load fails there too
        return ""


def _without_long_suffixes(text: str) -> str:
    """The header with the `L` after a number removed (`(3L, 4L)`), as numpy reads old files."""
    out = []
    for i, char in enumerate(text):
        if char == "L" and i and text[i - 1].isdigit() and not text[i + 1:i + 2].isalnum():
            continue
        out.append(char)
    return "".join(out)


def holds_objects(descr: Any) -> bool:
    """An object dtype anywhere in a numpy descr ('|O', 'object', or a structured dtype with
    such a field). A string is numpy's dtype grammar, where fields and subarrays hide in it
    (`'i4,O'`, `'(2,)O'`): any `O` or `object` in it counts (no other type code or name
    holds a capital O)."""
    if isinstance(descr, str):
        return "O" in descr or "object" in descr
    if isinstance(descr, tuple) and descr:  # (base, shape): a subarray
        return holds_objects(descr[0])
    if isinstance(descr, list):  # fields: (name, dtype) or (name, dtype, shape); a name is no dtype
        return any(holds_objects(field[1]) if isinstance(field, (list, tuple)) and len(field) >= 2
                   else holds_objects(field) for field in descr)
    if isinstance(descr, dict):
        return any(holds_objects(part) for part in descr.values())
    return False


# --- Keras --------------------------------------------------------------------------------------


# Top-level packages whose objects a Keras config may name: Keras's own.
KERAS_MODULES = frozenset({"keras", "tf_keras", "tensorflow", "keras_hub", "keras_nlp", "keras_cv"})


# Nodes of one Keras config walked: a real model's config has a few thousand; 16 MB of JSON
# (what is read of it) holds at most a few million, walked in about a second.
MAX_KERAS_NODES = 4_000_000


class KerasConfigTooLarge(Exception):
    """The config has more nodes than MAX_KERAS_NODES: what was not walked is unknown."""


def keras_config_problems(config: Any) -> list[str]:
    """What loading a Keras model with this config would run, from the config alone.
    KerasConfigTooLarge (with what was found) when the walk stops at its bound."""
    found: list[str] = []
    stack, seen = [config], 0
    while stack:
        if seen >= MAX_KERAS_NODES:
            raise KerasConfigTooLarge(list(dict.fromkeys(found)))
        node = stack.pop()
        seen += 1
        if isinstance(node, dict):
            if node.get("class_name") == "Lambda":
                inner = node.get("config") if isinstance(node.get("config"), dict) else {}
                name = inner.get("name", "?")
                found.append(f"a Lambda layer ({name!r}) whose Python code loading runs")
            module = node.get("module")
            if isinstance(module, str) and module and module.split(".")[0] not in KERAS_MODULES:
                what = node.get("config") if node.get("class_name") == "function" else node.get("class_name")
                found.append(f"a reference to {module}.{what} (loading imports and calls it)")
            if node.get("class_name") == "__lambda__":
                found.append("a serialized Python lambda (loading rebuilds and runs its bytecode)")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return list(dict.fromkeys(found))


# --- protobuf (ONNX, SavedModel) -----------------------------------------------------------------


class ProtoError(ValueError):
    pass


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise ProtoError("a varint runs past the end")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def proto_fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message: ints for varint/fixed, bytes for
    length-delimited fields (strings and sub-messages alike)."""
    at, n = 0, 0
    while at < len(data):
        n += 1
        if n > MAX_PROTO_FIELDS:
            raise ProtoError("too many fields")
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise ProtoError("a field runs past the end")
            value, at = data[at:at + length], at + length
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        elif wire in (3, 4):  # a group's start or end (deprecated): parsers skip it, so its fields are read on
            continue
        else:
            raise ProtoError(f"wire type {wire} is not a protobuf message")
        yield number, wire, value


def _submessages(data: bytes, number: int) -> Iterator[bytes]:
    for field_number, wire, value in proto_fields(data):
        if field_number == number and wire == 2:
            yield value


def onnx_external_paths(model: bytes) -> list[str]:
    """Every `location` of external tensor data in an ONNX ModelProto: graph initializers and
    sparse initializers, tensors and sparse tensors in node attributes, nested graphs,
    functions, and the graphs of training_info."""
    found: list[str] = []

    def tensor(data: bytes) -> None:  # TensorProto: external_data = 13 (key 1, value 2)
        for entry in _submessages(data, 13):
            pairs = {k: v for k, _, v in proto_fields(entry)}  # the last of a field wins, as in protobuf
            if pairs.get(1) == b"location" and isinstance(pairs.get(2), bytes):
                found.append(pairs[2].decode("utf-8", "replace"))

    def sparse(data: bytes) -> None:  # SparseTensorProto: values 1, indices 2 (TensorProtos)
        for number, wire, value in proto_fields(data):
            if wire == 2 and number in (1, 2):
                tensor(value)

    def graph(data: bytes, depth: int) -> None:  # GraphProto: node 1, initializer 5, sparse_initializer 15
        if depth > MAX_PROTO_DEPTH:
            raise ProtoError("graphs nested too deep")
        for number, wire, value in proto_fields(data):
            if wire != 2:
                continue
            if number == 5:
                tensor(value)
            elif number == 15:
                sparse(value)
            elif number == 1:  # NodeProto: attribute 5 -> AttributeProto: t 5, g 6, tensors 10, graphs 11,
                for attribute in _submessages(value, 5):  # sparse_tensor 22, sparse_tensors 23
                    for a_number, a_wire, a_value in proto_fields(attribute):
                        if a_wire == 2 and a_number in (5, 10):
                            tensor(a_value)
                        elif a_wire == 2 and a_number in (22, 23):
                            sparse(a_value)
                        elif a_wire == 2 and a_number in (6, 11):
                            graph(a_value, depth + 1)

    for g in _submessages(model, 7):  # ModelProto.graph
        graph(g, 0)
    for training in _submessages(model, 20):  # ModelProto.training_info: initialization 1, algorithm 2
        for number, wire, value in proto_fields(training):
            if wire == 2 and number in (1, 2):
                graph(value, 1)
    for function in _submessages(model, 25):  # ModelProto.functions: FunctionProto.node 7
        for node in _submessages(function, 7):
            graph(b"\x0a" + _length(node) + node, 1)
    return found


def _length(data: bytes) -> bytes:
    out, n = bytearray(), len(data)
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def path_escapes(location: str) -> bool:
    """An external-data path that is absolute or leaves the model's directory."""
    parts = location.replace("\\", "/").split("/")
    return location.startswith(("/", "\\", "~")) or (len(location) > 1 and location[1] == ":") or ".." in parts


def _last_string(message: bytes, number: int) -> bytes:
    """A singular string field: protobuf parsers keep the last occurrence."""
    value = b""
    for n, wire, v in proto_fields(message):
        if n == number and wire == 2:
            value = v
    return value


def savedmodel_pyfunc_ops(data: bytes) -> list[str]:
    """PyFunc ops in a SavedModel (saved_model.pb: meta_graphs 2 -> graph_def 2) or a GraphDef
    (a frozen graph .pb) itself: node 1 (op 2), and library 2 -> function 1 -> node_def 3."""
    found: list[str] = []

    def nodes(container: bytes, field_number: int) -> None:
        for node in _submessages(container, field_number):
            op = _last_string(node, 2).decode("utf-8", "replace")
            if op in PYFUNC_OPS:
                found.append(f"{op} op {_last_string(node, 1).decode('utf-8', 'replace')!r}")

    def graph(graph_def: bytes) -> None:
        nodes(graph_def, 1)
        for library in _submessages(graph_def, 2):
            for function in _submessages(library, 1):
                nodes(function, 3)

    def saved_model() -> None:
        for meta_graph in _submessages(data, 2):
            for graph_def in _submessages(meta_graph, 2):
                graph(graph_def)

    # Read both ways: as a SavedModel, and as a GraphDef (a frozen graph); the bytes are
    # only malformed when neither reading holds.
    errors = []
    for reading in (saved_model, lambda: graph(data)):
        try:
            reading()
        except ProtoError as err:
            errors.append(err)
    if len(errors) == 2:
        raise errors[0]
    return list(dict.fromkeys(found))


_SPACE = b" \t\r\n\f\v"


def pbtxt_pyfunc_ops(text: bytes) -> list[str]:
    """PyFunc ops in a text-format SavedModel or GraphDef (saved_model.pbtxt): `op: "PyFunc"`
    (either quote, any spaces). One linear pass per op name."""
    found = []
    for op in sorted(PYFUNC_OPS):
        for quote in (b'"', b"'"):
            quoted, at = quote + op.encode() + quote, 0
            while (at := text.find(quoted, at)) >= 0:
                j = at - 1
                while j >= 0 and text[j] in _SPACE:
                    j -= 1
                if j >= 0 and text[j] == 0x3A:  # ':'
                    j -= 1
                    while j >= 0 and text[j] in _SPACE:
                        j -= 1
                    if text[max(0, j - 1):j + 1] == b"op" and (j < 2 or not (chr(text[j - 2]).isalnum()
                                                                               or text[j - 2] == 0x5F)):
                        found.append(f"{op} op")
                at += len(quoted)
    return list(dict.fromkeys(found))
