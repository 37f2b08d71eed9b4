"""Containers a model file can hide a pickle in, opened in memory and within bounds.

- zip (torch archives, .npz, .keras, plain .zip): the central directory says which members
  there are; each member's bytes are read from its *local* header, as torch's own reader
  (miniz) does, so a name that differs between the two, a wrong CRC or an "encrypted"
  flag over plain data hide nothing (Python's zipfile refuses all three, torch loads them).
  A member is streamed (a window on the file, or decompressed as it is read), so a torch
  archive's tensor data is never read unless a scan asks for it;
- tar (legacy torch files, .pth.tar, .tar): members read in memory, never extracted;
- compressed streams (gzip, bz2, xz/lzma, zlib: joblib's compressors, .pkl.gz, .pt.gz);
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
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from typing import IO, Iterator

from hfdoctor.sources.base import ByteRange

MAX_MEMBERS = 10_000
MAX_MEMBER_BYTES = 256 * 1024 * 1024  # decompressed, per member or stream

ZIP_LOCAL = b"PK\x03\x04"
GZIP, BZIP2, XZ, LZ4 = b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x04\x22\x4d\x18"
ZLIB_HEADS = (b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda")
SEVEN_ZIP = b"7z\xbc\xaf\x27\x1c"


class ContainerError(Exception):
    """The container cannot be read (damaged, an unsupported method, over a bound)."""


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
        if info.header_offset >= 0:
            handle.seek(info.header_offset)
            local = handle.read(30)
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


class _Inflating(io.RawIOBase):
    """A compressed member, decompressed as it is read (never more than `limit` bytes out)."""

    def __init__(self, raw: IO[bytes], decompressor, limit: int):
        self.raw, self.decompressor, self.left, self.buffer, self.done = raw, decompressor, limit, b"", False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.buffer and not self.done:
            chunk = self.raw.read(1 << 14)  # 16 KB in: even a deflate bomb gives ~17 MB out
            try:
                if chunk:
                    out = self.decompressor.decompress(chunk)
                else:
                    out = self.decompressor.flush() if hasattr(self.decompressor, "flush") else b""
                    self.done = True
            except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError) as err:
                raise ContainerError(f"it cannot be decompressed: {err}") from None
            if len(out) >= self.left:
                out, self.done = out[:self.left], True
            self.left -= len(out)
            self.buffer = out
            if getattr(self.decompressor, "eof", False):
                self.done = True
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


def _bounded(decompressor, raw: bytes, limit: int) -> bytes:
    """Decompress at most `limit` bytes (a bomb stops there), turning failures into ContainerError."""
    try:
        return decompressor.decompress(raw, limit)
    except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError) as err:
        raise ContainerError(f"it cannot be decompressed: {err}") from None


# --- compressed streams -----------------------------------------------------------------------------


def compression_of(head: bytes) -> str | None:
    if head.startswith(GZIP):
        return "gzip"
    if head.startswith(BZIP2) and head[3:4].isdigit():
        return "bzip2"
    if head.startswith(XZ):
        return "xz"
    if head.startswith(LZ4):
        return "lz4"
    if head[:2] in ZLIB_HEADS:
        return "zlib"
    if len(head) >= 13 and head[0] == 0x5D and (head[5:13] == b"\xff" * 8 or int.from_bytes(head[5:13], "little") < 1 << 40):
        return "lzma"  # the legacy .lzma "alone" format (joblib's lzma): lc=3 lp=0 pb=2, a dictionary, a size
    return None


def decompress_stream(kind: str, raw: bytes, limit: int) -> bytes:
    """The decompressed bytes of a whole compressed file (at most `limit`)."""
    if kind == "gzip":
        return _bounded(zlib.decompressobj(16 + zlib.MAX_WBITS), raw, limit)
    if kind == "zlib":
        return _bounded(zlib.decompressobj(), raw, limit)
    if kind == "bzip2":
        return _bounded(bz2.BZ2Decompressor(), raw, limit)
    if kind in ("xz", "lzma"):
        return _bounded(lzma.LZMADecompressor(lzma.FORMAT_XZ if kind == "xz" else lzma.FORMAT_ALONE), raw, limit)
    raise ContainerError(f"it is {kind}-compressed, which hfdoctor does not decompress (no {kind} in the standard "
                         "library): what it holds was not scanned")


# --- tar -----------------------------------------------------------------------------------------


def is_tar(handle: IO[bytes]) -> bool:
    handle.seek(0)
    block = handle.read(512)
    return len(block) == 512 and block[257:262] == b"ustar"


def tar_members(handle: IO[bytes], limit: int) -> Iterator[Member]:
    """The regular members of a tar archive, read in memory (up to `limit` each)."""
    handle.seek(0)
    try:
        archive = tarfile.open(fileobj=handle, mode="r:")
    except (tarfile.TarError, OSError, EOFError, ValueError) as err:
        raise ContainerError(f"the tar archive is damaged: {err}") from None
    count = 0
    try:
        while True:
            try:
                info = archive.next()
            except (tarfile.TarError, OSError, EOFError, ValueError) as err:
                yield Member("(the rest of the archive)", None, f"the tar archive is damaged: {err}")
                return
            if info is None:
                return
            count += 1
            if count > MAX_MEMBERS:
                yield Member("(the rest of the archive)", None, "more members than hfdoctor opens")
                return
            if not info.isreg():
                continue
            if info.size > min(limit, MAX_MEMBER_BYTES):
                yield Member(info.name, None, f"it is {info.size:,} bytes, more than hfdoctor reads")
                continue
            try:
                extracted = archive.extractfile(info)
                data = extracted.read(info.size) if extracted is not None else b""
            except (tarfile.TarError, OSError, EOFError, ValueError) as err:
                yield Member(info.name, None, f"the tar archive is damaged: {err}")
                return
            yield Member(info.name, data)
    finally:
        archive.close()
