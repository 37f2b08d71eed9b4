"""The bounded byte stream the pickle walk reads (hfdoctor.modelfiles.picklemachine).

pickletools' readers read an opcode's whole argument (BINBYTES8 can claim 2**63 bytes), so
a byte budget, shared by every pickle of one file, is what keeps a hostile or huge file from
exhausting memory or time. A claim past what the stream holds is a truncated pickle (the
unpickler refuses it: Refused); a claim it holds past the budget is a ScanLimit (what follows
was not read: the file is not proven safe).
"""

from __future__ import annotations

from typing import IO

from hfdoctor.modelfiles.opcodes import Refused
from hfdoctor.modelfiles.result import MAX_SCAN_BYTES


class ScanLimit(Exception):
    """The file's byte or opcode budget, or the repository's deadline, ran out."""


class BoundedReader:
    """The read/readline view of a stream that pickletools needs, refusing to pass a byte budget.

    pickletools reads an opcode's whole argument (BINBYTES8 can claim 2**63 bytes), so
    the budget is what keeps a hostile or huge file from exhausting memory or time.
    """

    def __init__(self, raw: IO[bytes], budget: int, size: int | None = None):
        self.raw, self.budget, self.pending = raw, budget, b""
        # What the stream holds, where known (a zip member's declared size, a drained stream's
        # length), else measured on a seekable stream: a claim past it is a truncated pickle,
        # which the unpickler refuses, not a bound of hfdoctor's.
        self.size, self.taken = size, 0

    def _left(self) -> int | None:
        """Bytes the stream still holds (the pending one included), or None when unknown."""
        if self.size is not None:
            return max(0, self.size - self.taken) + len(self.pending)
        try:
            if not self.raw.seekable():
                return None
            here = self.raw.tell()
            end = self.raw.seek(0, 2)
            self.raw.seek(here)
        except (OSError, ValueError):
            return None
        return end - here + len(self.pending)

    def _over_budget(self) -> ScanLimit:
        self.budget = 0  # spent: the file's later members are not scanned either
        return ScanLimit(f"its pickles are larger than {MAX_SCAN_BYTES // (1024 * 1024)} MB; only the start was scanned")

    def _take(self, data: bytes) -> bytes:
        if len(data) > self.budget:
            raise self._over_budget()
        self.budget -= len(data)
        self.taken += len(data)
        return data

    def read(self, n: int = -1) -> bytes:
        if n < 0 or n > self.budget + len(self.pending):
            left = self._left() if n >= 0 else None
            if left is not None and n > left:
                raise Refused(f"an argument claims {n:,} bytes, more than the {left:,} left: the pickle is truncated")
            raise self._over_budget()
        head, self.pending = self.pending[:n], self.pending[n:]
        return head + self._take(self.raw.read(n - len(head))) if n > len(head) else head

    def readline(self) -> bytes:
        if self.pending:
            head, self.pending = self.pending, b""
            if head.endswith(b"\n"):
                return head
            return head + self.readline()
        line = self.raw.readline(self.budget + 1)
        return self._take(line)

    def position(self) -> int:
        """Bytes of the stream the walk has consumed."""
        return self.taken - len(self.pending)

    def at_end(self) -> bool:
        if not self.pending:
            self.pending = self._take(self.raw.read(1))
        return not self.pending

    def skip(self, n: int) -> None:
        """Pass over `n` bytes of data that is not pickle (a joblib array), without keeping them:
        seeking where the stream can, else reading them against the budget."""
        taken = min(n, len(self.pending))
        self.pending, n = self.pending[taken:], n - taken
        if n <= 0:
            return
        seekable = getattr(self.raw, "seekable", lambda: False)()
        if seekable:
            self.raw.seek(n, 1)
            self.taken += n
            return
        while n > 0:
            chunk = self.read(min(n, 1 << 20))
            if not chunk:
                return
            n -= len(chunk)
