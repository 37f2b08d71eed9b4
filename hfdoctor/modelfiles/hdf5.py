"""The root group's string attributes of an HDF5 file (Keras's `model_config`), read as h5py reads them.

Keras 2 and Keras 3's legacy loader read `f.attrs["model_config"]`, a JSON text, and build
the model it describes (Lambda layers run their bytecode). Finding that text by searching
the file for `{"class_name"` misses a config written with its keys in another order, with
indentation, or past the part of the file read, and a decoy text earlier in the file
passes for it. So the attribute is read where h5py reads it: the superblock (versions 0 to
3) gives the root group's object header (version 1 or 2, with its continuation blocks);
its attribute messages (versions 1 to 3) give the value, a fixed-length string in place or
a variable-length one in a global heap collection.

Anything else (attributes in dense storage, a shared datatype, a malformed structure) is
an H5Unreadable: the caller says the file is not proven safe, never that it is clean.
Every read is a bounded range of the file; nothing here follows more than MAX_BLOCKS
header blocks or MAX_MESSAGES messages.
"""

from __future__ import annotations

import struct
from typing import Callable

ReadAt = Callable[[int, int], bytes]

SIGNATURE = b"\x89HDF\r\n\x1a\n"
MAX_BLOCKS = 64  # object header chunks followed (continuations)
MAX_MESSAGES = 4096
MAX_VALUE = 64 * 1024 * 1024  # bytes of one attribute value read
MAX_CHUNK = 16 * 1024 * 1024  # bytes of one object header chunk read
UNDEFINED = (1 << 64) - 1
ATTRIBUTE, CONTINUATION, ATTRIBUTE_INFO = 0x0C, 0x10, 0x15


class H5Unreadable(Exception):
    """The file's structure is one this reader does not follow (or is malformed)."""


def _uint(data: bytes, at: int, size: int) -> int:
    if at < 0 or at + size > len(data):
        raise H5Unreadable("a field runs past the end of its block")
    return int.from_bytes(data[at:at + size], "little")


class _File:
    def __init__(self, read_at: ReadAt, size: int):
        self.read_at, self.size = read_at, size
        self.offsets = self.lengths = 8
        self.base = 0

    def read(self, address: int, n: int) -> bytes:
        at = self.base + address
        if address == UNDEFINED or at < 0 or n < 0 or at + n > self.size:
            raise H5Unreadable("an address points past the end of the file")
        data = self.read_at(at, n)
        if len(data) != n:
            raise H5Unreadable("the file ends inside a block")
        return data

    def superblock(self) -> int:
        """The root group's object header address (superblock at 0, 512, 1024, 2048...)."""
        at = 0
        while at + 8 <= self.size:
            if self.read_at(at, 8) == SIGNATURE:
                break
            at = 512 if at == 0 else at * 2
        else:
            raise H5Unreadable("no HDF5 superblock")
        head = self.read_at(at, 96)
        version = _uint(head, 8, 1)
        if version in (0, 1):
            self.offsets, self.lengths = _uint(head, 13, 1), _uint(head, 14, 1)
            start = 24 if version == 0 else 28
            self._check_sizes()
            self.base = _uint(head, start, self.offsets)
            return _uint(head, start + 5 * self.offsets, self.offsets)  # root symbol table entry's header
        if version in (2, 3):
            self.offsets, self.lengths = _uint(head, 9, 1), _uint(head, 10, 1)
            self._check_sizes()
            self.base = _uint(head, 12, self.offsets)
            return _uint(head, 12 + 3 * self.offsets, self.offsets)
        raise H5Unreadable(f"superblock version {version}")

    def _check_sizes(self) -> None:
        if self.offsets not in (2, 4, 8) or self.lengths not in (2, 4, 8):
            raise H5Unreadable("unusual sizes of offsets or lengths")

    def messages(self, address: int) -> list[tuple[int, bytes]]:
        """(type, body) of every message of the object header at `address`."""
        first = self.read(address, 16)
        found: list[tuple[int, bytes]] = []
        if first[:4] == b"OHDR":
            blocks = [self._v2_first(address, first)]
            version = 2
        elif first[0] == 1:
            size = _uint(first, 8, 4)
            blocks = [(address + 16, min(size, MAX_CHUNK))]
            version = 1
        else:
            raise H5Unreadable("an object header version this reader does not follow")
        done = 0
        while blocks:
            done += 1
            if done > MAX_BLOCKS:
                raise H5Unreadable("an object header of too many blocks")
            start, length = blocks.pop(0)
            chunk = self.read(start, length)
            if version == 2 and done > 1:
                if chunk[:4] != b"OCHK":
                    raise H5Unreadable("a continuation block without its signature")
                chunk = chunk[4:-4]
            for kind, body in (self._v1_messages(chunk) if version == 1 else self._v2_messages(chunk)):
                found.append((kind, body))
                if len(found) > MAX_MESSAGES:
                    raise H5Unreadable("an object header of too many messages")
                if kind == CONTINUATION:
                    blocks.append((_uint(body, 0, self.offsets), min(_uint(body, self.offsets, self.lengths),
                                                                    MAX_CHUNK)))
        return found

    def _v2_first(self, address: int, first: bytes) -> tuple[int, int]:
        flags = first[5]
        at = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 0x03)
        head = self.read(address, at + width)
        size = _uint(head, at, width)
        self.v2_order = bool(flags & 0x04)
        return address + at + width, min(size, MAX_CHUNK)

    @staticmethod
    def _v1_messages(chunk: bytes):
        at = 0
        while at + 8 <= len(chunk):
            kind, size = _uint(chunk, at, 2), _uint(chunk, at + 2, 2)
            yield kind, chunk[at + 8:at + 8 + size]
            at += 8 + size

    def _v2_messages(self, chunk: bytes):
        at, order = 0, getattr(self, "v2_order", False)
        head = 6 if order else 4
        while at + head <= len(chunk):
            kind, size = chunk[at], _uint(chunk, at + 1, 2)
            yield kind, chunk[at + head:at + head + size]
            at += head + size

    def global_heap_object(self, collection: int, index: int) -> bytes:
        head = self.read(collection, 8 + self.lengths)
        if head[:4] != b"GCOL":
            raise H5Unreadable("a variable-length value outside a global heap collection")
        size = min(_uint(head, 8, self.lengths), MAX_VALUE + 4096)
        data = self.read(collection, size) if size <= self.size else b""
        at = 8 + self.lengths
        while at + 8 + self.lengths <= len(data):
            number, length = _uint(data, at, 2), _uint(data, at + 8, self.lengths)
            if number == 0:
                break
            start = at + 8 + self.lengths
            if number == index:
                if length > MAX_VALUE or start + length > len(data):
                    raise H5Unreadable("a global heap object larger than this reader reads")
                return data[start:start + length]
            at = start + (length + 7) // 8 * 8
        raise H5Unreadable("a variable-length value whose heap object is missing")


def _padded(n: int, pad: bool) -> int:
    return (n + 7) // 8 * 8 if pad else n


def _attribute(h5: _File, body: bytes) -> tuple[str, bytes | None]:
    """(name, value) of one attribute message; the value None where it is not a string."""
    version = body[0] if body else 0
    if version not in (1, 2, 3):
        raise H5Unreadable(f"attribute message version {version}")
    if version >= 2 and body[1] & 0x03:
        raise H5Unreadable("an attribute with a shared datatype or dataspace")
    name_size, type_size, space_size = _uint(body, 2, 2), _uint(body, 4, 2), _uint(body, 6, 2)
    at = 8 + (1 if version == 3 else 0)
    pad = version == 1
    name = body[at:at + name_size].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    at += _padded(name_size, pad)
    datatype = body[at:at + type_size]
    at += _padded(type_size, pad)
    at += _padded(space_size, pad)
    data = body[at:]
    kind = datatype[0] & 0x0F if datatype else -1
    if kind == 3:  # fixed-length string: the value is in place
        size = _uint(datatype, 4, 4)
        return name, data[:size].split(b"\0", 1)[0]
    if kind == 9 and datatype[1] & 0x0F == 1:  # variable-length string: a global heap object
        collection, index = _uint(data, 4, h5.offsets), _uint(data, 4 + h5.offsets, 4)
        return name, h5.global_heap_object(collection, index)
    return name, None


def _dense(h5: _File, body: bytes) -> bool:
    """An Attribute Info message whose fractal heap address is defined: attributes kept there."""
    at = 2 + (2 if len(body) > 1 and body[1] & 0x01 else 0)
    return _uint(body, at, h5.offsets) != (1 << (8 * h5.offsets)) - 1


def root_attributes(read_at: ReadAt, size: int, names: tuple[str, ...]) -> dict[str, bytes | None]:
    """name -> value of the root group's attributes among `names` (None: not a string);
    H5Unreadable where the file is one this reader does not follow."""
    h5 = _File(read_at, size)
    try:
        messages = h5.messages(h5.superblock())
    except (IndexError, struct.error) as err:
        raise H5Unreadable(f"a malformed object header ({err})") from None
    found: dict[str, bytes | None] = {}
    for kind, body in messages:
        if kind == ATTRIBUTE_INFO and _dense(h5, body):
            raise H5Unreadable("attributes in dense storage (a fractal heap), which this reader does not follow")
        if kind == ATTRIBUTE:
            try:
                name, value = _attribute(h5, body)
            except (IndexError, struct.error) as err:
                raise H5Unreadable(f"a malformed attribute ({err})") from None
            if name in names:
                found[name] = value
    return found
