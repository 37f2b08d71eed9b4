"""Apply edits to bytes in memory; refuse edits whose order would be ambiguous."""

from __future__ import annotations

from hfdoctor.findings import Edit


class EditConflict(ValueError):
    """Two edits of one file overlap (or insert at the same point): their order is unknown."""


def apply_edits(data: bytes, edits: list[Edit] | tuple[Edit, ...]) -> bytes:
    """`data` with every edit applied (back to front, so offsets stay valid)."""
    ordered = disjoint(edits)
    for edit in ordered:
        if not 0 <= edit.start <= edit.end <= len(data):
            raise EditConflict(f"edit of {edit.file} at {edit.start}..{edit.end} is outside the file ({len(data)} bytes)")
    for edit in reversed(ordered):
        data = data[: edit.start] + edit.new_text.encode("utf-8") + data[edit.end :]
    return data


def disjoint(edits) -> list[Edit]:
    """The edits of one file in order; EditConflict when two overlap or insert at one point."""
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    for a, b in zip(ordered, ordered[1:]):
        if b.start < a.end or b.start == a.start:
            raise EditConflict(f"edits of {a.file} overlap at byte {b.start}")
    if any(e.create for e in ordered) and len(ordered) > 1:
        raise EditConflict(f"{ordered[0].file} is created by one edit and edited by another")
    return ordered
