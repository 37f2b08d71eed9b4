"""Scan one file of a repository for what loading it would run.

One entry point, `scan_model_file(source, rel, budget)`, for every format that runs code
on load: pickles (raw, torch zip and legacy tar archives, joblib, dill, numpy object
arrays), the same compressed (gzip, bz2, xz, lzma, zlib) or inside archives (zip, tar, 7z,
nested up to MAX_DEPTH), Keras (.keras, .h5), ONNX external data, and TensorFlow
SavedModel PyFunc ops. A file is told by its content (magic bytes) first and its name
second, so a pickle named .zip or a zip named .bin is what it is.

Container tricks are judged as the loader that opens the file would see them:
- torch.load takes a file for a zip only when it starts with a zip local header; a pickle placed
  in front of a zip (whose central directory, at the end, still reads as a zip) is unpickled
  from byte 0: that front pickle is scanned as what runs, and the zip as well;
- zip members are read from their local headers, whatever the central directory's name, the
  CRC or the encryption flag say (torch ignores all three); a legacy torch tar's are all scanned;
- `torch.storage._load_from_bytes(b'...')` is torch.load(weights_only=False) of its argument:
  that argument is scanned as a file of its own, and what it imports counts;
- a pickle stored as data (raw bytes, base64 or hex in a string) runs only if something unpickles
  that field later: it is scanned apart and reported, not counted as running.

Everything is read in memory, never extracted, within the file's pickle budget, its
in-memory allowance (MAX_IN_MEMORY: decompressed streams, nested archives and 7z folders
together, so nesting cannot multiply it), a depth of MAX_DEPTH (archives and nested loads
alike), and the repository's byte budget and deadline. Where a bound or unreadable
container content stops the scan of what holds or may hold a pickle, the scan says so in
`unproven`, and the file is not proven safe (an error, never a warning). Scans are cached by
content identity (an inode, a git blob, an LFS object): sixteen hard links are one scan.
"""

from __future__ import annotations

import hashlib
import io
import os
from typing import IO

from hfdoctor.bounded.budget import Budget
import hfdoctor.modelfiles.containers as containers
import hfdoctor.modelfiles.formats as formats
import hfdoctor.modelfiles.hdf5 as hdf5
import hfdoctor.modelfiles.picklemachine as picklemachine
import hfdoctor.modelfiles.sevenzip as sevenzip
from hfdoctor.modelfiles.containers import ContainerError
from hfdoctor.modelfiles.result import MAX_SCAN_BYTES, Import, PickleScan
from hfdoctor.sources.base import Unreadable

MAX_DEPTH = 4
# Said when malformed data reaches a path no reader check covers: the scan is incomplete
# (the fuzz tests fail on it, so each such path gets a check of its own).
SCANNER_FAILED = "the scanner stopped on malformed data"
MAX_WHOLE_FILE = 512 * 1024 * 1024  # the most of one file read whole (ONNX, SavedModel, 7z, HDF5 prefix)
# The root attributes Keras's HDF5 loader builds from (training_config: compile's losses and
# metrics, which may name modules too).
KERAS_H5_ATTRIBUTES = ("model_config", "training_config")
KERAS_CONFIG_BYTES = 16 * 1024 * 1024
# A compressed file that is neither a pickle nor a container at its start is read to its end
# (kept: its last 64 KB) to see whether a zip closes it; past this, it is not proven safe.
MAX_DRAIN = 1024 * 1024 * 1024
# Files a loader may unpickle or execute, by name; anything else is scanned only when its content says it is a
# pickle or an archive (a polyglot). zstd and lz4 only under a pickle's name: pandas.read_pickle reads x.pkl.zst.
SCANNED_SUFFIXES = (
    ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib", ".dill", ".npy", ".npz", ".gz", ".bz2", ".xz",
    ".lzma", ".zip", ".tar", ".tgz", ".7z", ".keras", ".h5", ".hdf5", ".onnx", ".mar", ".nemo", ".pb", ".pbtxt",
)


def scanned(rel: str) -> bool:
    return rel.lower().removesuffix(".zst").removesuffix(".zstd").removesuffix(".lz4").endswith(SCANNED_SUFFIXES)


def _peek(handle: IO[bytes], n: int = 512) -> bytes:
    handle.seek(0)
    head = handle.read(n)
    handle.seek(0)
    return head


def _join(where: str | None, name: str) -> str:
    return f"{where}/{name}" if where else name


class _Scanner:
    def __init__(self, scan: PickleScan, budget: Budget):
        self.scan, self.budget = scan, budget

    def whole(self, handle: IO[bytes], what: str) -> bytes | None:
        """All of a (member) file, when the file and the budget allow it."""
        handle.seek(0)
        data = handle.read(MAX_WHOLE_FILE + 1)
        if len(data) > MAX_WHOLE_FILE or not self.budget.take(len(data)):
            self.scan.problems.append(f"{what}: too large to read whole here; not scanned")
            return None
        return data

    def unproven(self, what: str, why: str) -> None:
        """A bound or unreadable content stopped the scan where a pickle may be."""
        self.scan.unproven.append(f"{what}: {why}")

    def file(self, handle: IO[bytes], name: str, where: str | None, depth: int) -> None:
        """Scan one file (or archive member) by what its content is."""
        what = where or self.scan.file
        if depth > MAX_DEPTH:
            self.unproven(what, f"archives or nested loads more than {MAX_DEPTH} deep; not scanned")
            return
        head = _peek(handle)
        lower = name.lower()
        if head.startswith(sevenzip.SIGNATURE):
            self.seven_zip(handle, where, depth)
        elif head.startswith(containers.ZIP_LOCAL) or head.startswith(b"PK\x05\x06"):
            self.zip(handle, name, where, depth)
        elif head.startswith(formats.NPY_MAGIC):
            self.npy(handle, head, where)
        elif head.startswith(formats.HDF5_MAGIC) or lower.endswith((".h5", ".hdf5", ".keras")):
            self.hdf5(handle, where)
        elif containers.is_tar(handle):
            self.tar(handle, where, depth)
            # torch.load unpickles a tar from byte 0 when tarfile refuses it, and always when
            # the file is not a file on disk (a stream): its front is scanned as a pickle too.
            self.pickle(handle, where)
        elif (kind := containers.compression_of(head)) is not None:
            self.decompress(handle, kind, name, where, depth)
        elif lower.endswith(".onnx"):
            self.onnx(handle, where)
        elif lower.endswith((".pb", ".pbtxt")):
            # a frozen graph or a SavedModel; any other .pb is read as what its bytes are, too
            if not self.savedmodel(handle, where, lower) or not lower.endswith(("saved_model.pb", ".pbtxt")):
                self.pickle(handle, where)
        else:
            self.pickle(handle, where)
            if _is_zip_anywhere(handle):  # a zip behind a front that torch.load unpickles: both are scanned
                self.zip(handle, name, where, depth)

    def pickle(self, handle: IO[bytes], where: str | None) -> None:
        handle.seek(0)
        if picklemachine.scan_streams(handle, where, self.scan) and self.scan.kind == "not-pickle":
            self.scan.kind = "pickle"

    def zip(self, handle: IO[bytes], name: str, where: str | None, depth: int) -> None:
        try:
            entries = containers.zip_entries(handle)
        except ContainerError as err:  # torch's own zip reader may read what zipfile refuses (not a cut-short one)
            self.unproven(where or self.scan.file, str(err))
            self.scan.truncated_zip |= isinstance(err, containers.TruncatedZip) and where is None
            return
        if self.scan.kind in ("not-pickle", "pickle"):
            self.scan.kind = "zip"
        keras = name.lower().endswith(".keras") or any(e.name == "config.json" for e in entries) and any(
            e.name.endswith(".weights.h5") for e in entries)
        for entry in entries:
            path = _join(where, entry.name)
            if self.scan.bytes_left <= 0:
                self.unproven(path, f"this and the next members were not scanned, the pickles before them already "
                                    f"hold {MAX_SCAN_BYTES // (1024 * 1024)} MB")
                break
            if containers.escapes(entry.name):
                self.scan.unsafe.append(("warning", f"the archive member {path!r} would be extracted outside "
                                                             "its directory (a path traversal)"))
            try:
                if not self._worth_opening(entry, keras) and not self._an_array(handle, entry, name):
                    continue
                member = containers.open_entry(handle, entry)
                if keras and entry.name == "config.json":
                    config = member.read(KERAS_CONFIG_BYTES + 1)
                    if len(config) > KERAS_CONFIG_BYTES:
                        self.unproven(path, f"a Keras config larger than {KERAS_CONFIG_BYTES // 2**20} MB, which "
                                            "hfdoctor does not read")
                    else:
                        self.keras_config(config, path)
                else:
                    self.member(member, entry.name, path, depth, entry.size)
            except ContainerError as err:
                self.unproven(path, str(err))

    @staticmethod
    def _worth_opening(entry: containers.ZipEntry, keras: bool) -> bool:
        """Members a loader may unpickle or run: by name, or any small member (its content
        decides). A torch archive's tensor data (`data/0`) is never read."""
        base = entry.name.rsplit("/", 1)[-1]
        if "/data/" in f"/{entry.name}" and base.isdigit():
            return False
        return scanned(entry.name) or (keras and base == "config.json") or entry.size <= 1024 * 1024

    @staticmethod
    def _an_array(handle: IO[bytes], entry: containers.ZipEntry, name: str) -> bool:
        """A member that starts as an .npy: np.load reads it as an array (an object one is unpickled),
        whatever its name. A torch archive's tensor data is not read, unless the file is an .npz."""
        tensor = "/data/" in f"/{entry.name}" and entry.name.rsplit("/", 1)[-1].isdigit()
        return (not tensor or name.lower().endswith(".npz")) and \
            containers.open_entry(handle, entry).read(len(formats.NPY_MAGIC)) == formats.NPY_MAGIC

    def member(self, member: IO[bytes], name: str, path: str, depth: int, size: int | None = None) -> None:
        """An archive member (of `size` bytes, where known): containers inside it need a
        seekable copy; pickles stream."""
        head = member.peek(512)[:512] if hasattr(member, "peek") else b""
        if self._container_head(head, name):
            if depth + 1 > MAX_DEPTH:  # checked before anything is decompressed
                self.unproven(path, f"archives nested more than {MAX_DEPTH} deep; not scanned")
                return
            limit = min(containers.MAX_MEMBER_BYTES, self.scan.in_memory_left)
            data = member.read(limit + 1)
            if len(data) > limit or not self.scan.hold(len(data)) or not self.budget.take(len(data)):
                self.unproven(path, "too large to open in memory (with what this file already holds); not scanned")
                return
            self.file(io.BytesIO(data), name, path, depth + 1)
        else:
            if picklemachine.scan_streams(member, path, self.scan, size) and self.scan.kind == "not-pickle":
                self.scan.kind = "pickle"

    def seven_zip(self, handle: IO[bytes], where: str | None, depth: int) -> None:
        what = where or self.scan.file
        self.scan.kind = "7z" if self.scan.kind == "not-pickle" else self.scan.kind

        def read_at(offset: int, n: int) -> bytes:
            handle.seek(offset)
            return handle.read(n)

        handle.seek(0, io.SEEK_END)
        size = handle.tell()
        try:
            for member in sevenzip.read_7z(read_at, size, containers.MAX_MEMBER_BYTES, self.scan.hold):
                self._archived(member, where, depth)
        except ContainerError as err:
            self.unproven(what, f"{err}; what it holds was not scanned")

    def tar(self, handle: IO[bytes], where: str | None, depth: int) -> None:
        self.scan.kind = "tar" if self.scan.kind == "not-pickle" else self.scan.kind
        try:
            for entry in containers.tar_entries(handle):
                path = _join(where, entry.name)
                if containers.escapes(entry.name):
                    self.scan.unsafe.append(("warning", f"the archive member {path!r} would be extracted outside "
                                                        "its directory (a path traversal)"))
                if self.scan.bytes_left <= 0:
                    self.unproven(path, f"this and the next members were not scanned, the pickles before them "
                                        f"already hold {MAX_SCAN_BYTES // (1024 * 1024)} MB")
                    return
                member = io.BufferedReader(containers._window(handle, entry.offset, entry.size), 1 << 16)
                try:
                    self.member(member, entry.name, path, depth)
                except ContainerError as err:
                    self.unproven(path, str(err))
        except ContainerError as err:
            self.unproven(where or self.scan.file, f"{err}; the members after it were not scanned")

    def _archived(self, member: containers.Member, where: str | None, depth: int) -> None:
        path = _join(where, member.name)
        if containers.escapes(member.name):
            self.scan.unsafe.append(("warning", f"the archive member {path!r} would be extracted outside "
                                                             "its directory (a path traversal)"))
        if member.data is None:
            self.unproven(path, member.problem or "not read")
        elif self.budget.take(len(member.data)):
            self.file(io.BytesIO(member.data), member.name, path, depth + 1)
        else:
            self.unproven(path, "the read budget of this check ran out; not scanned")

    def decompress(self, handle: IO[bytes], kind: str, name: str, where: str | None, depth: int) -> None:
        """A compressed file, decompressed as it is read: a pickle streams (bounded by the
        pickle budget), a container at its start is held in memory within the file's
        allowance. Anything else is read to its end first, keeping only its tail: a zip
        there (zipfile and unzip read an archive from its end) is opened as well."""
        inner = name.rsplit(".", 1)[0] if name.lower().endswith((".gz", ".bz2", ".xz", ".lzma", ".z")) else name
        path = _join(where, f"({kind})") if where else f"{self.scan.file} ({kind})"
        try:
            handle.seek(0)
            reader = containers.inflating(kind, handle)
            head = reader.peek(512)[:512]
            total = None
            if head[:1] != b"\x80" and not self._container_head(head, inner):
                total, tail = containers.drain(reader, MAX_DRAIN)
                if containers.ZIP_END in tail:
                    directory = containers.central_directory_size(tail)
                    if directory > containers.MAX_CENTRAL_DIRECTORY:
                        self.unproven(path, f"a zip archive ends it whose central directory is {directory:,} bytes, "
                                            "more than hfdoctor reads; not scanned")
                    else:
                        self._decompressed_zip(handle, kind, total, inner, path, depth)
                    return
                handle.seek(0)
                reader = containers.inflating(kind, handle)
            self.member(reader, inner, path, depth, total)
        except ContainerError as err:
            self.unproven(where or self.scan.file, str(err))

    def _decompressed_zip(self, handle: IO[bytes], kind: str, total: int, inner: str, path: str, depth: int) -> None:
        if depth + 1 > MAX_DEPTH:
            self.unproven(path, f"archives nested more than {MAX_DEPTH} deep; not scanned")
        elif total > min(containers.MAX_MEMBER_BYTES, self.scan.in_memory_left) or not self.scan.hold(total) \
                or not self.budget.take(total):
            self.unproven(path, f"a zip archive ends its {total:,} decompressed bytes, more than hfdoctor holds in "
                                "memory; not scanned")
        else:
            handle.seek(0)
            self.file(io.BytesIO(containers.inflating(kind, handle).read(total)), inner, path, depth + 1)

    @staticmethod
    def _container_head(head: bytes, name: str) -> bool:
        return head.startswith((containers.ZIP_LOCAL, sevenzip.SIGNATURE, formats.NPY_MAGIC, formats.HDF5_MAGIC)) or \
            containers.compression_of(head) is not None or head[257:262] == b"ustar" or \
            name.lower().endswith((".tar", ".onnx", ".pb"))

    def npy(self, handle: IO[bytes], head: bytes, where: str | None) -> None:
        handle.seek(0)
        what = where or self.scan.file
        try:
            parsed = formats.npy_header(handle.read(formats.MAX_NPY_HEADER + 16))
        except formats.NpyHeaderTooLarge as err:
            self.unproven(what, f"{err}; what follows may be an object array's pickle")
            return
        if parsed is None:  # numpy cannot read it either: np.load stops there
            self.scan.problems.append(f"{what}: a numpy header hfdoctor cannot read")
            return
        header, offset = parsed
        self.scan.kind = "numpy" if self.scan.kind == "not-pickle" else self.scan.kind
        if formats.holds_objects(header.get("descr")):  # np.load(allow_pickle=True) unpickles the rest
            handle.seek(offset)
            picklemachine.scan_streams(handle, where, self.scan)

    def hdf5(self, handle: IO[bytes], where: str | None) -> None:
        """A Keras HDF5 model: its root group's `model_config` and `training_config`, read
        where h5py reads them (hfdoctor.modelfiles.hdf5). A file whose structure that reader
        does not follow and that names a model_config is not proven safe."""
        what = where or self.scan.file
        handle.seek(0, io.SEEK_END)
        size = handle.tell()

        def read_at(offset: int, n: int) -> bytes:
            if not self.budget.take(n):
                raise hdf5.H5Unreadable("the read budget of this check ran out")
            handle.seek(offset)
            return handle.read(n)

        try:
            found = hdf5.root_attributes(read_at, size, KERAS_H5_ATTRIBUTES)
        except hdf5.H5Unreadable as err:
            if _names_a_model_config(handle, size):
                self.unproven(what, f"an HDF5 file naming a Keras model_config, read no further: {err}")
            return
        for name in KERAS_H5_ATTRIBUTES:
            value = found.get(name)
            if value is not None:
                self.keras_config(value, f"{what} ({name})")

    def keras_config(self, config, where: str) -> None:
        if isinstance(config, (bytes, bytearray)):
            try:
                import json

                config = json.loads(config)
            except ValueError:
                self.scan.problems.append(f"{where}: a Keras config that is not JSON")
                return
        self.scan.kind = "keras" if self.scan.kind in ("not-pickle", "zip") else self.scan.kind
        try:
            problems = formats.keras_config_problems(config)
        except formats.KerasConfigTooLarge as stopped:
            problems = stopped.args[0]
            self.unproven(where, f"its Keras config has more than {formats.MAX_KERAS_NODES:,} nodes; the rest, which "
                                 "loading runs too, was not read")
        for problem in problems:
            self.scan.unsafe.append(("error", f"{where}: {problem}"))

    def onnx(self, handle: IO[bytes], where: str | None) -> None:
        data = self.whole(handle, where or self.scan.file)
        if data is None:
            return
        try:
            paths = formats.onnx_external_paths(data)
        except formats.ProtoError as err:
            self.scan.problems.append(f"{where or self.scan.file}: not a readable ONNX model ({err})")
            return
        self.scan.kind = "onnx"
        for path in dict.fromkeys(paths):
            if formats.path_escapes(path):
                self.scan.unsafe.append(("error", f"{where or self.scan.file}: its tensor data is read from {path!r}, "
                                                  "outside the model's directory (onnx opens that file on load)"))
            elif where is None:
                self.scan.reaches.append(path)

    def savedmodel(self, handle: IO[bytes], where: str | None, lower: str) -> bool:
        """A SavedModel or a GraphDef (binary, or text for .pbtxt); False when a .pb other
        than saved_model.pb is no protobuf (it is then scanned by its content, as before)."""
        what = where or self.scan.file
        data = self.whole(handle, what)
        if data is None:
            return True
        if lower.endswith(".pbtxt"):
            ops = formats.pbtxt_pyfunc_ops(data)
        else:
            try:
                ops = formats.savedmodel_pyfunc_ops(data)
            except formats.ProtoError as err:
                if not lower.endswith("saved_model.pb"):
                    return False
                self.unproven(what, f"TensorFlow reads it as a SavedModel, hfdoctor cannot ({err})")
                return True
        self.scan.kind = "savedmodel"
        for op in ops:
            self.scan.unsafe.append(("error", f"{what}: a {op} that calls Python code of the loading process"))
        return True


def _names_a_model_config(handle: IO[bytes], size: int) -> bool:
    """Whether the bytes `model_config` (an attribute's name, never compressed in HDF5) are in
    the file: read in steps, up to MAX_WHOLE_FILE (past it: assumed so)."""
    if size > MAX_WHOLE_FILE:
        return True
    handle.seek(0)
    tail = b""
    while chunk := handle.read(1 << 20):
        if b"model_config" in tail + chunk:
            return True
        tail = chunk[-16:]
    return False


def _is_zip_anywhere(handle: IO[bytes]) -> bool:
    import zipfile

    try:
        handle.seek(0)
        found = zipfile.is_zipfile(handle)
        handle.seek(0)
    except Exception:  # noqa: BLE001 - a source that cannot seek that far (a git blob): not a zip here
        return False
    return found


def scan_handle(handle: IO[bytes], rel: str, budget: Budget | None = None) -> PickleScan:
    """Scan an open, seekable file named `rel` (this module's doc)."""
    budget = budget or Budget()
    scan = PickleScan(rel, "not-pickle", deadline=budget.deadline)
    scanner = _Scanner(scan, budget)
    _guarded(scan, rel, lambda: scanner.file(handle, os.path.basename(rel), None, 0))
    # What a nested loader unpickles on load is scanned as a file of its own (bounded count);
    # a load inside a load is one level deeper, and the depth is bounded like archives'.
    index = 0
    while index < len(scan.nested):
        where, blob, nesting = scan.nested[index]
        scan.nested[index] = (where, b"", nesting)  # scanned once: not kept in memory after
        scan.nesting = nesting
        _guarded(scan, where, lambda: scanner.file(io.BytesIO(blob), "nested.pt", where, nesting))
        index += 1
    return scan


def _guarded(scan: PickleScan, where: str, run) -> None:
    """Run one scan step; whatever exception stops it, the file was not read to its end and
    is not proven safe (SEC006, an error): the one place a failed scan becomes a verdict."""
    try:
        run()
    except ContainerError as err:  # what the container holds was not read: it may be anything
        scan.unproven.append(f"{where}: {err}")
    except (OSError, Unreadable) as err:
        scan.unproven.append(f"{where}: reading it failed part way ({err})")
    except Exception as err:  # noqa: BLE001 - malformed data this reader missed: not read to its end
        scan.unproven.append(f"{where}: {SCANNER_FAILED} ({type(err).__name__}: {str(err)[:200]})")


def embedded_imports(scan: PickleScan) -> list[tuple[str, list[Import]]]:
    """The unsafe imports of each pickle the file stores as data (not run by loading it), and
    of the pickles those store in turn (a multistage payload), a few levels deep.

    All of them together are read within what is left of the file's own budgets (bytes,
    opcodes, its deadline): a pickle of pickles of pickles cannot multiply the work. Each
    distinct blob is read once; past the budgets the rest is not reported (loading does not
    run these pickles, so nothing is left unproven)."""
    found: list[tuple[str, list[Import]]] = []
    budget = PickleScan(scan.file, "pickle", deadline=scan.deadline, bytes_left=max(0, scan.bytes_left),
                        opcodes_left=max(0, scan.opcodes_left))
    queue = [(where, blob, 0) for where, blob in reversed(scan.embedded)]
    seen: set[bytes] = set()
    while queue and budget.bytes_left > 0 and budget.opcodes_left > 0:
        where, blob, depth = queue.pop()  # depth first: few blobs alive at once
        digest = hashlib.sha256(blob).digest()
        if digest in seen or len(blob) > budget.bytes_left:
            continue
        seen.add(digest)
        inner = PickleScan(scan.file, "pickle", deadline=scan.deadline, bytes_left=budget.bytes_left,
                           opcodes_left=budget.opcodes_left)
        picklemachine.scan_streams(io.BytesIO(blob), where, inner)
        budget.bytes_left, budget.opcodes_left = inner.bytes_left, inner.opcodes_left
        unsafe = [i for i in inner.imports if i.verdict in ("dangerous", "unlisted", "nested")]
        if unsafe:
            found.append((where, unsafe))
        if depth < MAX_DEPTH:
            queue.extend((f"{where}, inside a pickle stored there", inner_blob, depth + 1)
                         for _, inner_blob in reversed(inner.embedded))
    return found


def scan_file(path: str | os.PathLike[str], budget: Budget | None = None) -> PickleScan:
    """Scan the file at `path` (a regular file on this disk)."""
    import stat

    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        return PickleScan(os.fspath(path), "not-pickle", problems=["is not a regular file"])
    with open(path, "rb") as handle:
        return scan_handle(handle, os.path.basename(path), budget)
