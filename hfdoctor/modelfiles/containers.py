"""Containers a model file can hide a pickle in, opened in memory and within bounds.

- zip (torch archives, .npz, .keras, plain .zip): the central directory says which members
  there are; each member's bytes are read from its *local* header, as torch's own reader
  (miniz) does, so a name that differs between the two, a wrong CRC or an "encrypted"
  flag over plain data hide nothing (Python's zipfile refuses all three, torch loads them).
  A member is streamed (a window on the file, or decompressed as it is read), so a torch
  archive's tensor data is never read unless a scan asks for it;
- tar (legacy torch files, .pth.tar, .tar): headers walked here (tarfile's pax parser is a
  backtracking regex, CVE-2024-6232), members streamed as windows, never extracted;
- compressed streams (gzip, bz2, xz/lzma, zlib: joblib's compressors and its old `ZF` format, .pkl.gz, .pt.gz),
  decompressed as they are read, a bounded step at a time, with a ratio cap (bombs);
- 7z: a minimal reader for what 7-Zip and py7zr write (LZMA, LZMA2, copy, one BCJ filter is
  refused), in hfdoctor.modelfiles.sevenzip.

Every read is bounded: member count, member size (compressed and decompressed, so a zip
bomb stops at the bound), and the caller's byte budget. Member names are data: a name that
would leave the extraction directory (`../`, an absolute path) is reported, never followed.
"""

from __future__ import annotations

import bz2
import io
import lzma
import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import IO, Iterator

from hfdoctor.sources.base import ByteRange

MAX_MEMBERS = 10_000
MAX_CENTRAL_DIRECTORY = MAX_MEMBERS * 1024  # bytes: a real entry is 46 bytes and its name
MAX_MEMBER_BYTES = 256 * 1024 * 1024  # decompressed, per member or stream

ZIP_LOCAL = b"PK\x03\x04"
GZIP, BZIP2, XZ, LZ4 = b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x04\x22\x4d\x18"
ZSTD = b"\x28\xb5\x2f\xfd"  # pandas.read_pickle reads .zst; no zstd in this Python's standard library
ZLIB_HEADS = (b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda")
SEVEN_ZIP = b"7z\xbc\xaf\x27\x1c"


class ContainerError(Exception):
    """The container cannot be read (damaged, an unsupported method, over a bound)."""


class TruncatedZip(ContainerError):
    """A zip archive with no end record: every zip reader, torch's included, refuses it."""


@dataclass
class Member:
    name: str
    data: bytes | None  # None: not read (the reason is in `problem`)
    problem: str | None = None


def escapes(name: str) -> bool:
    """A member name that extraction would write outside the target directory."""
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts


# --- zip -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZipEntry:
    name: str
    method: int
    data_offset: int  # where its (compressed) bytes start, from its local header
    compressed_size: int
    size: int


def zip_entries(handle: IO[bytes]) -> list[ZipEntry]:
    """The members of a zip archive: names from the central directory, data offsets from
    each local header (what torch's reader uses; the local name is not compared)."""
    try:
        handle.seek(0)
        end = zipfile._EndRecData(handle)  # what zipfile reads first: the end record (zip64 too)
        if end is not None and end[zipfile._ECD_SIZE] > MAX_CENTRAL_DIRECTORY:
            # zipfile builds an object per entry before anyone can count them: a central
            # directory of millions of entries (a few MB gzipped) is gigabytes of them.
            raise ContainerError(f"the zip archive's central directory is {end[zipfile._ECD_SIZE]:,} bytes, more "
                                 f"than the {MAX_MEMBERS:,} members hfdoctor opens can need")
        if end is None:  # no end record: torch's reader (miniz) finds no central directory either
            raise TruncatedZip("the zip archive is damaged: it has no end record (cut short?), so no reader, "
                               "torch.load's included, can list its members")
        handle.seek(0)
        infos = zipfile.ZipFile(handle).infolist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, RuntimeError) as err:
        raise ContainerError(f"the zip archive is damaged: {err}") from None
    if len(infos) > MAX_MEMBERS:
        raise ContainerError(f"the zip archive lists {len(infos):,} members, more than hfdoctor opens")
    entries = []
    for info in infos:
        if info.is_dir():
            continue
        local = b""
        try:  # a zip64 offset can be anything (2**63): that member is unreadable, the others are read
            if 0 <= info.header_offset < 1 << 62:
                handle.seek(info.header_offset)
                local = handle.read(30)
        except (OSError, OverflowError, ValueError):
            local = b""
        if len(local) < 30 or local[:4] != ZIP_LOCAL:
            entries.append(ZipEntry(info.filename, -1, 0, 0, 0))  # no local header: unreadable
            continue
        name_length, extra_length = struct.unpack("<HH", local[26:30])
        entries.append(ZipEntry(info.filename, info.compress_type, info.header_offset + 30 + name_length + extra_length,
                                info.compress_size, info.file_size))
    return entries


def _window(handle: IO[bytes], start: int, size: int) -> ByteRange:
    """Bytes [start, start + size) of a seekable file, as a seekable file of their own."""

    def read_at(offset: int, length: int) -> bytes:
        handle.seek(start + offset)
        return handle.read(length)

    return ByteRange(read_at, size)


# A decompression bomb: past RATIO_FLOOR bytes out, more than MAX_RATIO bytes out per byte
# in. Real pickles, torch archives and joblib files compress 2-20x; zeros compress 1000x
# (deflate) to a million times (bz2), and only bombs hold nothing but zeros.
MAX_RATIO = 1000
RATIO_FLOOR = 16 * 1024 * 1024
_STEP = 1 << 16  # bytes out per decompressor call: a bomb never expands past this at once
_MULTI_MAGIC = {"gzip": GZIP, "bzip2": BZIP2, "xz": XZ}  # formats whose readers go on to the next stream


def decompressor_for(kind: str):
    if kind == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if kind in ("zlib", "deflate-zlib", "joblib-zfile"):
        return zlib.decompressobj()
    if kind == "deflate":
        return zlib.decompressobj(-15)
    if kind == "bzip2":
        return bz2.BZ2Decompressor()
    if kind in ("xz", "lzma"):
        return lzma.LZMADecompressor(lzma.FORMAT_XZ if kind == "xz" else lzma.FORMAT_ALONE)
    raise ContainerError(f"it is {kind}-compressed, which hfdoctor does not decompress (no {kind} in the standard "
                         "library): what it holds was not scanned")


class _Inflating(io.RawIOBase):
    """A compressed stream, decompressed as it is read: at most `_STEP` bytes per call of the
    decompressor (so one call of a bz2 bomb cannot expand 16 KB to gigabytes), never more than
    `limit` bytes in all, and never more than MAX_RATIO times what it read (a bomb). gzip, bz2
    and xz go on to a following stream, as gzip.open, bz2.open and lzma.open do.
    `truncated` says it stopped at a bound rather than at the end of the data."""

    def __init__(self, raw: IO[bytes], decompressor, limit: int, kind: str | None = None):
        self.raw, self.decompressor, self.left, self.kind = raw, decompressor, limit, kind
        self.buffer, self.done, self.tail = b"", False, b""
        self.consumed, self.produced, self.truncated = 0, 0, False

    def readable(self) -> bool:
        return True

    def _wants_input(self) -> bool:
        if isinstance(self.decompressor, type(zlib.decompressobj())):
            return not self.tail
        return getattr(self.decompressor, "needs_input", True)

    def _next_stream(self) -> bool:
        """At the end of one stream: start the next one when the format chains them."""
        rest = self.decompressor.unused_data + self.tail
        self.tail = b""
        if not rest:
            rest = self.raw.read(1 << 14)
            self.consumed += len(rest)
        magic = _MULTI_MAGIC.get(self.kind or "")
        if magic is None or not rest.startswith(magic):
            return False
        self.decompressor = decompressor_for(self.kind)
        self.tail = rest
        return True

    def _pull(self) -> bytes:
        zlib_like = isinstance(self.decompressor, type(zlib.decompressobj()))
        if self._wants_input() and not self.tail:
            chunk = self.raw.read(1 << 14)
            self.consumed += len(chunk)
            if not chunk:
                self.done = True
                return self.decompressor.flush() if zlib_like else b""
        else:
            chunk, self.tail = self.tail, b""
        out = self.decompressor.decompress(chunk, _STEP)
        if zlib_like:
            self.tail = self.decompressor.unconsumed_tail
        if getattr(self.decompressor, "eof", False) and not self._next_stream():
            self.done = True
        return out

    def readinto(self, buffer) -> int:
        while not self.buffer and not self.done:
            try:
                out = self._pull()
            except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError) as err:
                raise ContainerError(f"it cannot be decompressed: {err}") from None
            self.produced += len(out)
            if self.produced > RATIO_FLOOR and self.produced > MAX_RATIO * max(1, self.consumed):
                raise ContainerError(f"it decompresses more than {MAX_RATIO} times its size (a decompression "
                                     "bomb); what it holds was not scanned")
            if len(out) >= self.left:
                out, self.done, self.truncated = out[:self.left], True, True
            self.left -= len(out)
            self.buffer = out
        n = min(len(buffer), len(self.buffer))
        buffer[:n], self.buffer = self.buffer[:n], self.buffer[n:]
        return n


def open_entry(handle: IO[bytes], entry: ZipEntry) -> IO[bytes]:
    """A zip member's bytes as a file: a window for stored members (seekable, nothing read
    ahead), a decompressing reader for deflate, bzip2 and lzma."""
    window = _window(handle, entry.data_offset, entry.compressed_size)
    if entry.method == zipfile.ZIP_STORED:
        return io.BufferedReader(window, 1 << 16)
    if entry.method == zipfile.ZIP_DEFLATED:
        decompressor = zlib.decompressobj(-15)
    elif entry.method == zipfile.ZIP_BZIP2:
        decompressor = bz2.BZ2Decompressor()
    elif entry.method == zipfile.ZIP_LZMA:  # 2-byte version, 2-byte properties size, properties, raw LZMA1
        head = window.read(4)
        if len(head) < 4:
            raise ContainerError("its lzma header is truncated")
        (size,) = struct.unpack("<H", head[2:4])
        try:
            filters = [lzma._decode_filter_properties(lzma.FILTER_LZMA1, window.read(size))]
        except (lzma.LZMAError, ValueError) as err:
            raise ContainerError(f"its lzma properties are invalid: {err}") from None
        decompressor = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=filters)
    elif entry.method < 0:
        raise ContainerError("its local header is missing")
    else:
        raise ContainerError(f"it is compressed with method {entry.method}, which hfdoctor does not decompress")
    return io.BufferedReader(_Inflating(window, decompressor, MAX_MEMBER_BYTES), 1 << 16)


# --- compressed streams -----------------------------------------------------------------------------


# joblib's format before 0.10 (numpy_pickle_compat, still read by joblib.load): `ZF`, the
# pickle's length in hex padded to 19 bytes, an optional space, then a zlib stream of the pickle.
JOBLIB_ZFILE = b"ZF"
JOBLIB_ZFILE_HEADER = 2 + 19


def _joblib_zfile(head: bytes) -> bool:
    """Whether joblib.load reads this file as its old zlib format: its length field is what
    int(text, 16) reads (joblib's own test), else joblib refuses the file."""
    if not head.startswith(JOBLIB_ZFILE) or len(head) < JOBLIB_ZFILE_HEADER:
        return False
    try:
        int(head[2:JOBLIB_ZFILE_HEADER], 16)
    except ValueError:
        return False
    return True


def compression_of(head: bytes) -> str | None:
    if _joblib_zfile(head):
        return "joblib-zfile"
    if head.startswith(GZIP):
        return "gzip"
    if head.startswith(BZIP2) and head[3:4].isdigit():
        return "bzip2"
    if head.startswith(XZ):
        return "xz"
    if head.startswith(LZ4):
        return "lz4"
    if head.startswith(ZSTD):
        return "zstd"
    if head[:2] in ZLIB_HEADS:
        return "zlib"
    if len(head) >= 13 and head[0] == 0x5D and (head[5:13] == b"\xff" * 8 or int.from_bytes(head[5:13], "little") < 1 << 40):
        return "lzma"  # the legacy .lzma "alone" format (joblib's lzma): lc=3 lp=0 pb=2, a dictionary, a size
    return None


def inflating(kind: str, handle: IO[bytes]) -> io.BufferedReader:
    """A whole compressed file (gzip, zlib, bzip2, xz, lzma), decompressed as it is read: the
    reader's own bounds (the pickle budget, a member limit) say how much; the ratio cap stops
    a bomb. ContainerError for a format the standard library cannot decompress."""
    if kind == "joblib-zfile":  # the zlib stream after joblib's header (and the space it may end with)
        handle.seek(JOBLIB_ZFILE_HEADER)
        start = JOBLIB_ZFILE_HEADER + (handle.read(1) == b" ")
        handle.seek(0, io.SEEK_END)
        handle = _window(handle, start, max(0, handle.tell() - start))
    return io.BufferedReader(_Inflating(handle, decompressor_for(kind), 1 << 62, kind), 1 << 16)


ZIP_END = b"PK\x05\x06"
TAIL = 64 * 1024 + 22  # a zip's end record and the longest comment after it


def central_directory_size(tail: bytes) -> int:
    """The central directory size the last end record in `tail` (a stream's last bytes)
    declares; 0 when it is not there. zip64's 0xFFFFFFFF is taken as it stands: too large."""
    at = tail.rfind(ZIP_END)
    if at < 0 or at + 16 > len(tail):
        return 0
    return struct.unpack("<I", tail[at + 12:at + 16])[0]


def drain(reader: IO[bytes], limit: int) -> tuple[int, bytes]:
    """(how many bytes a stream holds, its last TAIL bytes), reading it to its end without
    keeping it; ContainerError past `limit` bytes."""
    total, tail = 0, b""
    while True:
        chunk = reader.read(1 << 20)
        if not chunk:
            return total, tail
        total += len(chunk)
        if total > limit:
            raise ContainerError(f"it decompresses to more than {limit // (1024 * 1024)} MB; what it holds was not "
                                 "scanned")
        tail = (tail + chunk)[-TAIL:]


# --- tar -----------------------------------------------------------------------------------------


def is_tar(handle: IO[bytes]) -> bool:
    """A ustar or GNU header, or any first block whose checksum holds (tarfile, and so
    torch's legacy loader, opens a pre-POSIX tar that has no magic at all)."""
    handle.seek(0)
    block = handle.read(512)
    return len(block) == 512 and (block[257:262] == b"ustar" or _tar_checksum_ok(block))


MAX_PAX_BYTES = 1024 * 1024  # a pax or GNU long-name header: real ones are a few hundred bytes
_TAR_REGULAR = (b"0", b"\0", b"7")


@dataclass(frozen=True)
class TarEntry:
    name: str
    offset: int  # where its data starts in the archive
    size: int


def _tar_number(field: bytes) -> int | None:
    """A header number as tarfile's nti() reads it: GNU base-256 (a first byte of 0o200 or
    0o377), else ASCII text up to a NUL read by int(text.strip() or "0", 8), which takes
    signs and underscores too; None where tarfile finds the header invalid."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value if field[0] == 0x80 else value - 256 ** (len(field) - 1)
    try:
        return int(field.split(b"\0", 1)[0].decode("ascii").strip() or "0", 8)
    except (UnicodeDecodeError, ValueError):
        return None


def _tar_checksum_ok(block: bytes) -> bool:
    stored = _tar_number(block[148:156])
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    signed = unsigned - 2 * (sum(c for c in block[:148] if c > 127) + sum(c for c in block[156:] if c > 127))
    return stored is not None and stored in (unsigned, signed)


def pax_records(data: bytes) -> dict[str, str]:
    """The records of a pax extended header (`<length> <key>=<value>\n` each), read in one
    linear pass. tarfile parses them with regular expressions that backtrack (a header of
    digits takes minutes: CVE-2024-6232); like tarfile, the records end at the first one
    that is malformed, and the archive goes on."""
    records, at = {}, 0
    while at < len(data):
        space = data.find(b" ", at, at + 20)
        digits = data[at:space] if space > at else b""
        if not digits.isdigit():
            break
        end = at + int(digits)
        if end <= space + 1 or end > len(data) or data[end - 1:end] != b"\n":
            break
        key, equals, value = data[space + 1:end - 1].partition(b"=")
        if not equals:
            break
        records[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        at = end
    return records


def pax_size(value: str) -> int:
    """A pax `size` record as tarfile reads it: Python's int() of the text (which takes any
    Unicode decimal digits, spaces and underscores), and 0 where int() refuses it (`²`): the
    member then has no data, and the next header is read right after this one."""
    try:
        return int(value)
    except ValueError:
        return 0


def tar_entries(handle: IO[bytes]) -> Iterator[TarEntry]:
    """The regular members of a tar archive (ustar, pax and GNU long names), found by walking
    the 512-byte headers; nothing is read but the headers (and pax/long-name bodies, bounded).
    Like tarfile (which torch's legacy loader uses), the archive ends at two zero blocks or at
    the first header that is not valid; ContainerError for what no reader can go past."""
    handle.seek(0, io.SEEK_END)
    total = handle.tell()
    at, count, pax, long_name = 0, 0, {}, None
    while at + 512 <= total:
        handle.seek(at)
        block = handle.read(512)
        if len(block) < 512 or block == bytes(512) or not _tar_checksum_ok(block):
            return
        count += 1
        if count > MAX_MEMBERS:
            raise ContainerError(f"the tar archive has more than {MAX_MEMBERS:,} members, more than hfdoctor opens")
        size = _tar_number(block[124:136])
        if size is None:  # tarfile: an invalid header ends the archive there
            return
        kind = block[156:157]
        data_at = at + 512
        if kind in (b"x", b"g", b"L", b"K"):
            if size > MAX_PAX_BYTES:
                raise ContainerError(f"a tar extended header of {size:,} bytes, more than hfdoctor reads")
            body = handle.read(max(0, size))
            if kind == b"x":
                pax = pax_records(body)
            elif kind == b"L":
                long_name = body.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        else:
            if "size" in pax:
                size = pax_size(pax["size"])
            if kind in _TAR_REGULAR:
                name = pax.get("path") or long_name
                if name is None:
                    prefix = block[345:500].split(b"\0", 1)[0] if block[257:262] == b"ustar" else b""
                    raw = block[:100].split(b"\0", 1)[0]
                    name = (prefix + b"/" + raw if prefix else raw).decode("utf-8", "surrogateescape")
                yield TarEntry(name, data_at, max(0, min(size, total - data_at)))
            pax, long_name = {}, None
        at = data_at + (size + 511) // 512 * 512
