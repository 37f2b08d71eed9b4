"""A minimal 7z reader: the member names and bytes of what 7-Zip and py7zr write.

Enough of the format (7zFormat.txt of the LZMA SDK) to see what an archive holds: the
signature header, an encoded (compressed) header or a plain one, pack/unpack info, folders
of one coder (copy, LZMA, LZMA2, deflate, bzip2), substreams, and file names. Folders of
several coders (BCJ filters, AES encryption) are reported as not readable, never guessed.
Every count and size is bounded; a malformed archive is a SevenZipError.

The archive is read by ranges (never whole): the header, then one folder at a time, decoded
as a stream a bounded step at a time (containers._Inflating: a bomb stops at its ratio), and
charged to the caller's memory allowance at its declared size before anything is decoded.
Every count is checked against the bytes that must hold it before anything is allocated
from it (a digest count of 2**60, thousands of folders), and each pass is linear.
"""

from __future__ import annotations

import bz2
import io
import lzma
import struct
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

from hfdoctor.modelfiles.containers import ContainerError, Member, _Inflating as _inflate_raw
from hfdoctor.sources.base import ByteRange

ReadAt = Callable[[int, int], bytes]


def _window_at(read_at: ReadAt, start: int, size: int) -> io.BufferedReader:
    return io.BufferedReader(ByteRange(lambda offset, n: read_at(start + offset, n), size), 1 << 16)


def _inflate(window, decompressor, want: int, kind: str | None) -> io.BufferedReader:
    return io.BufferedReader(_inflate_raw(window, decompressor, want, kind), 1 << 16)

SIGNATURE = b"7z\xbc\xaf\x27\x1c"
MAX_COUNT = 10_000
MAX_CODERS = 64  # coders, and streams of one coder, in a folder (7-Zip's own limit)
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
        self.folders = 0  # declared in all the streams infos of this header together

    def charge_folders(self, n: int) -> None:
        """A header may hold many streams infos (additional streams): their folders are
        bounded together, or 200 of 10,000 empty folders each take a minute to walk."""
        self.folders += n
        if self.folders > MAX_COUNT:
            raise SevenZipError(f"the 7z header declares more than {MAX_COUNT:,} folders in all")

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
        packed = self.take((n + 7) // 8)  # n is a bounded count; the bytes must be there
        return [bool(packed[i >> 3] & (0x80 >> (i & 7))) for i in range(n)]

    def skip_digests(self, n: int) -> None:
        """Pass over n CRCs (all defined, or a bit vector saying which): counted from the
        bytes, never by building n of anything, and n itself is checked against the bytes."""
        if n > len(self.data) * 8:
            raise SevenZipError(f"the 7z header declares {n:,} digests, more than it holds")
        if self.byte():
            defined = n
        else:
            packed = self.take((n + 7) // 8)
            defined = sum(bin(b).count("1") for b in packed[:-1]) if packed else 0
            if packed:
                tail_bits = n - 8 * (len(packed) - 1)
                defined += bin(packed[-1] >> (8 - tail_bits)).count("1")
        self.take(4 * defined)


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


def _small(r: _Bytes, what: str) -> int:
    n = r.number()
    if n > MAX_CODERS:
        raise SevenZipError(f"a 7z folder declares {n:,} {what} (7-Zip allows {MAX_CODERS})")
    return n


def _folder(r: _Bytes) -> tuple[_Folder, int]:
    coders = _small(r, "coders")
    outs, ins, found = 0, 0, []
    for _ in range(coders):
        flag = r.byte()
        codec = r.take(flag & 0x0F)
        n_in, n_out = (_small(r, "streams"), _small(r, "streams")) if flag & 0x10 else (1, 1)
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
    r.charge_folders(n)
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
    if sum(counts) > MAX_COUNT:  # every file of the archive: the same bound as one count
        raise SevenZipError(f"the 7z header declares {sum(counts):,} files")
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


# An LZMA dictionary larger than what a folder unpacks to is never used; liblzma allocates
# what the properties ask (up to 4 GB), so the decoder gets only what the folder needs.
MIN_DICTIONARY = 1 << 16


def _decoder(folder: _Folder):
    if folder.coder in ("lzma", "lzma2"):
        kind = lzma.FILTER_LZMA1 if folder.coder == "lzma" else lzma.FILTER_LZMA2
        try:
            props = lzma._decode_filter_properties(kind, folder.properties)
        except (lzma.LZMAError, ValueError) as err:
            raise SevenZipError(f"a 7z folder has invalid lzma properties: {err}") from None
        props["dict_size"] = max(MIN_DICTIONARY, min(props.get("dict_size", MIN_DICTIONARY), folder.unpack_size))
        try:  # liblzma refuses some chains (more than 3 filters before LZMA): this folder only
            return lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[{"id": f} for f in folder.bcj] + [props]), None
        except (lzma.LZMAError, ValueError) as err:
            raise SevenZipError(f"a 7z folder's filter chain cannot be decoded here ({err})") from None
    if folder.coder == "deflate":
        return zlib.decompressobj(-15), None
    if folder.coder == "bzip2":
        return bz2.BZ2Decompressor(), None
    raise SevenZipError("a 7z folder uses several coders (a filter or encryption) hfdoctor does not decode")


def _folder_bytes(read_at: ReadAt, size: int, s: _Streams, starts: list[int], index: int, limit: int) -> bytes:
    """Folder `index` decoded (at most `limit` bytes), read from its pack stream as it decodes."""
    start = 32 + s.pack_pos + starts[index]
    packed = s.pack_sizes[index] if index < len(s.pack_sizes) else 0
    if start + packed > size:
        raise SevenZipError("a 7z pack stream lies beyond the end of the file")
    folder = s.folders[index]
    want = min(folder.unpack_size, limit)
    window = _window_at(read_at, start, packed)
    if folder.coder == "copy":
        return window.read(want)
    decompressor, kind = _decoder(folder)
    try:
        return _inflate(window, decompressor, want, kind).read(want)
    except ContainerError as err:
        raise SevenZipError(f"a 7z folder cannot be decompressed: {err}") from None


def _pack_starts(s: _Streams) -> list[int]:
    """Where each folder's pack stream starts, after pack_pos: one pass (prefix sums)."""
    starts, at = [], 0
    for size in s.pack_sizes:
        starts.append(at)
        at += size
    return starts + [at] * (len(s.folders) - len(starts))


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


def read_7z(read_at: ReadAt, size: int, limit: int, hold: Callable[[int], bool]) -> Iterator[Member]:
    """The members of a 7z archive of `size` bytes read by `read_at(offset, n)`, one folder
    at a time (each member up to `limit` bytes). `hold(n)` charges decoded bytes against
    the caller's allowance: when it refuses, the members left are yielded unread (so the
    caller says what was not scanned), and nothing more is decoded."""
    head = read_at(0, 32)
    if len(head) < 32 or not head.startswith(SIGNATURE):
        raise SevenZipError("not a 7z archive")
    offset, header_size = struct.unpack("<QQ", head[12:28])
    if header_size > MAX_HEADER_BYTES or 32 + offset + header_size > size:
        raise SevenZipError("the 7z header lies beyond the end of the file")
    if header_size == 0:
        if size > 32:  # data with no header naming it: 7-Zip sees an empty archive, but bytes are there
            raise SevenZipError("the 7z archive holds data but no header that lists it")
        return
    r = _Bytes(read_at(32 + offset, header_size))
    kind = r.byte()
    for _ in range(4):  # an encoded header decodes to a header (which may itself be encoded)
        if kind != K_ENCODED:
            break
        s = _streams_info(r)
        if not s.folders:
            raise SevenZipError("the encoded 7z header has no folder")
        r = _Bytes(_folder_bytes(read_at, size, s, _pack_starts(s), 0, MAX_HEADER_BYTES))
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
    with_data = [name for name, e in zip(names, empty) if not e]
    starts, position, spent = _pack_starts(streams), 0, False
    for index, sizes in enumerate(streams.substreams):
        mine = [with_data[p] if p < len(with_data) else f"member{p}" for p in range(position, position + len(sizes))]
        position += len(sizes)
        if spent:
            yield from (Member(name, None, "not decoded: the archive decodes to more than hfdoctor holds in memory")
                        for name in mine)
            continue
        # Charged at the size the folder declares, before decoding: a hostile size is refused
        # unread, never decoded first.
        if not hold(min(streams.folders[index].unpack_size, limit)):
            spent = True
            yield from (Member(name, None, "not decoded: the archive decodes to more than hfdoctor holds in memory")
                        for name in mine)
            continue
        try:
            folder = _folder_bytes(read_at, size, streams, starts, index, limit)
        except SevenZipError as err:
            yield from (Member(name, None, str(err)) for name in mine)
            continue
        at = 0
        for name, member_size in zip(mine, sizes):
            yield Member(name, folder[at:at + member_size])
            at += member_size
