"""A seekable, read-only file object over a source's ranged reads.

zipfile (torch archives: the central directory at the end, then `data.pkl`) and the GGUF
header reader need random access; over the Hub each read is an HTTP range request, so
reads go through io.BufferedReader to be coalesced into 64 KiB requests.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hfdoctor.sources.base import Source


class RangedFile(io.RawIOBase):
    def __init__(self, source: "Source", rel: str, size: int):
        self.source, self.rel, self.size = source, rel, size
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer) -> int:
        want = min(len(buffer), max(0, self.size - self.position))
        if want == 0:
            return 0
        data = self.source.read_range(self.rel, self.position, want)
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)
