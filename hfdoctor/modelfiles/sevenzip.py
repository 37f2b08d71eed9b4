"""A minimal 7z reader: the member names and bytes of what 7-Zip and py7zr write, in memory.

Enough of the format (7zFormat.txt of the LZMA SDK) to see what an archive holds: the
signature header, an encoded (compressed) header or a plain one, pack/unpack info, folders
of one coder (copy, LZMA, LZMA2, deflate, bzip2), substreams, and file names. Folders of
several coders (BCJ filters, AES encryption) are reported as not readable, never guessed.
Every count and size is bounded; a malformed archive is a SevenZipError.
"""

from __future__ import annotations

import bz2
import lzma
import struct
import zlib
from dataclasses import dataclass, field

from hfdoctor.modelfiles.containers import ContainerError, Member

SIGNATURE = b"7z\xbc\xaf\x27\x1c"
MAX_COUNT = 10_000
MAX_HEADER_BYTES = 16 * 1024 * 1024
K_END, K_HEADER, K_ARCHIVE_PROPERTIES, K_ADDITIONAL, K_MAIN = 0x00, 0x01, 0x02, 0x03, 0x04
K_FILES, K_PACK, K_UNPACK, K_SUBSTREAMS, K_SIZE, K_CRC, K_FOLDER = 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B
K_UNPACK_SIZE, K_NUM_UNPACK, K_EMPTY_STREAM, K_NAME, K_ENCODED = 0x0C, 0x0D, 0x0E, 0x11, 0x17
CODERS = {b"\x00": "copy", b"\x03\x01\x01": "lzma", b"\x21": "lzma2", b"\x04\x01\x08": "deflate",
          b"\x04\x02\x02": "bzip2"}
# Branch-converter filters 7-Zip puts before LZMA for executables (and py7zr by default).
BCJ = {b"\x03\x03\x01\x03": lzma.FILTER_X86, b"\x03\x03\x02\x05": lzma.FILTER_POWERPC,
       b"\x03\x03\x04\x01": lzma.FILTER_IA64, b"\x03\x03\x05\x01": lzma.FILTER_ARM,
       b"\x03\x03\x07\x01": lzma.FILTER_ARMTHUMB, b"\x03\x03\x08\x05": lzma.FILTER_SPARC}


class SevenZipError(ContainerError):
    pass


class _Bytes:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise SevenZipError("the 7z header is truncated")
        self.at += 1
        return self.data[self.at - 1]

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise SevenZipError("the 7z header is truncated")
        self.at += n
        return self.data[self.at - n:self.at]

    def number(self) -> int:
        """7z's NUMBER: the first byte's leading one bits count the bytes that follow."""
        first, mask, value = self.byte(), 0x80, 0
        for i in range(8):
            if first & mask == 0:
                return value | ((first & (mask - 1)) << (8 * i))
            value |= self.byte() << (8 * i)
            mask >>= 1
        return value

    def count(self) -> int:
        n = self.number()
        if n > MAX_COUNT:
            raise SevenZipError(f"the 7z header declares {n:,} items")
        return n

    def bits(self, n: int) -> list[bool]:
        out, mask, byte = [], 0, 0
        for _ in range(n):
            if mask == 0:
                byte, mask = self.byte(), 0x80
            out.append(bool(byte & mask))
            mask >>= 1
        return out

    def skip_digests(self, n: int) -> None:
        defined = [True] * n if self.byte() else self.bits(n)
        self.take(4 * sum(defined))


@dataclass
class _Folder:
    coder: str | None  # None: coders hfdoctor does not decode (encryption, an unknown method)
    properties: bytes = b""
    unpack_size: int = 0
    bcj: tuple[int, ...] = ()  # BCJ filters chained before an LZMA coder


@dataclass
class _Streams:
    pack_pos: int = 0
    pack_sizes: list[int] = field(default_factory=list)
    folders: list[_Folder] = field(default_factory=list)
    substreams: list[list[int]] = field(default_factory=list)  # per folder: the size of each file in it


def _pack_info(r: _Bytes, s: _Streams) -> None:
    s.pack_pos = r.number()
    n = r.count()
    while True:
        prop = r.byte()
        if prop == K_END:
            return
        if prop == K_SIZE:
            s.pack_sizes = [r.number() for _ in range(n)]
        elif prop == K_CRC:
            r.skip_digests(n)
        else:
            raise SevenZipError(f"unexpected property {prop} in the pack info")


def _folder(r: _Bytes) -> tuple[_Folder, int]:
    coders = r.count()
    outs, ins, found = 0, 0, []
    for _ in range(coders):
        flag = r.byte()
        codec = r.take(flag & 0x0F)
        n_in, n_out = (r.count(), r.count()) if flag & 0x10 else (1, 1)
        properties = r.take(r.count()) if flag & 0x20 else b""
        ins, outs = ins + n_in, outs + n_out
        found.append((codec, properties))
    for _ in range(outs - 1):  # bind pairs
        r.number(), r.number()
    packed = ins - (outs - 1)
    if packed > 1:
        for _ in range(packed):
            r.number()
    main = [(c, p) for c, p in found if c not in BCJ]
    filters = tuple(BCJ[c] for c, _ in found if c in BCJ)
    if len(main) != 1 or (filters and CODERS.get(main[0][0]) not in ("lzma", "lzma2")):
        return _Folder(None), outs
    return _Folder(CODERS.get(main[0][0]), main[0][1], bcj=filters), outs


def _unpack_info(r: _Bytes, s: _Streams) -> None:
    if r.byte() != K_FOLDER:
        raise SevenZipError("the unpack info has no folders")
    n = r.count()
    if r.byte() != 0:
        raise SevenZipError("external folder lists are not supported")
    folders = [_folder(r) for _ in range(n)]
    if r.byte() != K_UNPACK_SIZE:
        raise SevenZipError("the unpack info has no sizes")
    for folder, outs in folders:
        sizes = [r.number() for _ in range(outs)]
        folder.unpack_size = max(sizes) if sizes else 0  # the final output of the chain (filters keep the size)
        s.folders.append(folder)
    while True:
        prop = r.byte()
        if prop == K_END:
            return
        if prop == K_CRC:
            r.skip_digests(len(s.folders))
        else:
            raise SevenZipError(f"unexpected property {prop} in the unpack info")


def _substreams(r: _Bytes, s: _Streams) -> None:
    counts = [1] * len(s.folders)
    prop = r.byte()
    if prop == K_NUM_UNPACK:
        counts = [r.count() for _ in s.folders]
        prop = r.byte()
    sizes: list[list[int]] = []
    for folder, count in zip(s.folders, counts):
        listed = [r.number() for _ in range(count - 1)] if prop == K_SIZE else []
        if count:
            listed.append(max(0, folder.unpack_size - sum(listed)))
        sizes.append(listed)
    if prop == K_SIZE:
        prop = r.byte()
    s.substreams = sizes
    while prop != K_END:
        if prop != K_CRC:
            raise SevenZipError(f"unexpected property {prop} in the substreams info")
        r.skip_digests(sum(counts))
        prop = r.byte()


def _streams_info(r: _Bytes) -> _Streams:
    s = _Streams()
    while True:
        prop = r.byte()
        if prop == K_END:
            if not s.substreams:
                s.substreams = [[f.unpack_size] for f in s.folders]
            return s
        {K_PACK: _pack_info, K_UNPACK: _unpack_info, K_SUBSTREAMS: _substreams}.get(prop, _bad)(r, s)


def _bad(r: _Bytes, s: _Streams) -> None:
    raise SevenZipError("the 7z streams info is malformed")


def _decode(folder: _Folder, packed: bytes, limit: int) -> bytes:
    want = min(folder.unpack_size, limit)
    try:
        if folder.coder == "copy":
            return packed[:want]
        if folder.coder in ("lzma", "lzma2"):
            kind = lzma.FILTER_LZMA1 if folder.coder == "lzma" else lzma.FILTER_LZMA2
            filters = [{"id": f} for f in folder.bcj] + [lzma._decode_filter_properties(kind, folder.properties)]
            return lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=filters).decompress(packed, want)
        if folder.coder == "deflate":
            return zlib.decompressobj(-15).decompress(packed, want)
        if folder.coder == "bzip2":
            return bz2.BZ2Decompressor().decompress(packed, want)
    except (lzma.LZMAError, zlib.error, OSError, EOFError, ValueError) as err:
        raise SevenZipError(f"a 7z folder cannot be decompressed: {err}") from None
    raise SevenZipError("a 7z folder uses several coders (a filter or encryption) hfdoctor does not decode")


def _folder_bytes(data: bytes, s: _Streams, index: int, limit: int) -> bytes:
    start = 32 + s.pack_pos + sum(s.pack_sizes[:index])
    size = s.pack_sizes[index] if index < len(s.pack_sizes) else 0
    if start + size > len(data):
        raise SevenZipError("a 7z pack stream lies beyond the end of the file")
    return _decode(s.folders[index], data[start:start + size], limit)


def _names(r: _Bytes, n: int) -> tuple[list[str], list[bool]]:
    names, empty = [f"member{i}" for i in range(n)], [False] * n
    while True:
        prop = r.byte()
        if prop == K_END:
            return names, empty
        size = r.number()
        body = _Bytes(r.take(size))
        if prop == K_EMPTY_STREAM:
            empty = body.bits(n)
        elif prop == K_NAME and body.byte() == 0:
            text = body.data[body.at:].decode("utf-16-le", "replace")
            names = (text.split("\x00") + names)[:n] if text else names


def read_7z(data: bytes, limit: int) -> list[Member]:
    """The members of a 7z archive held in `data` (each up to `limit` bytes)."""
    if len(data) < 32 or not data.startswith(SIGNATURE):
        raise SevenZipError("not a 7z archive")
    offset, size = struct.unpack("<QQ", data[12:28])
    if size > MAX_HEADER_BYTES or 32 + offset + size > len(data):
        raise SevenZipError("the 7z header lies beyond the end of the file")
    r = _Bytes(data[32 + offset:32 + offset + size])
    if not r.data:
        return []
    kind = r.byte()
    for _ in range(4):  # an encoded header decodes to a header (which may itself be encoded)
        if kind != K_ENCODED:
            break
        s = _streams_info(r)
        if not s.folders:
            raise SevenZipError("the encoded 7z header has no folder")
        r = _Bytes(_folder_bytes(data, s, 0, MAX_HEADER_BYTES))
        kind = r.byte()
    if kind != K_HEADER:
        raise SevenZipError("the 7z header is malformed")
    streams, names, empty = _Streams(), [], []
    while True:
        prop = r.byte()
        if prop == K_END:
            break
        if prop == K_ARCHIVE_PROPERTIES:
            raise SevenZipError("7z archive properties are not supported")
        if prop in (K_ADDITIONAL, K_MAIN):
            found = _streams_info(r)
            if prop == K_MAIN:
                streams = found
        elif prop == K_FILES:
            n = r.count()
            names, empty = _names(r, n)
        else:
            raise SevenZipError(f"unexpected property {prop} in the 7z header")
    members, with_data = [], [name for name, e in zip(names, empty) if not e]
    position = 0
    for index, sizes in enumerate(streams.substreams):
        try:
            folder = _folder_bytes(data, streams, index, limit)
        except SevenZipError as err:
            members.extend(Member(name, None, str(err)) for name in with_data[position:position + len(sizes)])
            position += len(sizes)
            continue
        at = 0
        for size in sizes:
            name = with_data[position] if position < len(with_data) else f"member{position}"
            members.append(Member(name, folder[at:at + size]))
            at, position = at + size, position + 1
    return members
