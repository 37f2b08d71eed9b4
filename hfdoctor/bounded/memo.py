"""Content memos: what hfdoctor computed from some content, kept for when the same content comes back.

Within one process the same content recurs: the fixer re-checks a patched view whose tokenizer.json
and template it did not touch, and a catalog holds many copies of one tokenizer or template. A memo
remembers a result by a key that holds everything the result is a function of (the text or a digest
of the bytes, and the options that shape it).

Every content memo of hfdoctor is made here, so that one place says what is kept and how much:

- each is bounded: past `max_entries` the least recently used entry goes, and so it does past
  `max_bytes` for a memo whose values can be large (template analyses: one can hold megabytes of
  renders, and a catalog brings a new one with each repository), each value weighed once, when it
  is put;
- `clear()` forgets them all (library users and tests that change what a key cannot see, such as
  HF_HUB_CACHE's contents; `sizes()` says what is held);
- a memo never holds an exception: a failure is computed again next time (it may have been transient,
  and a re-raised exception instance carries another call's traceback).

Facts about one repository (its lineage, its weights' layout) are not content memos: they live with
the repository, in hfdoctor.repo.facts, and go with it.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING: Any = object()


class Memo(Generic[K, V]):
    """A bounded map from content keys to results, least recently used first out."""

    def __init__(self, name: str, max_entries: int, max_bytes: int | None = None,
                 weigh: Callable[[V], int] | None = None) -> None:
        if max_entries < 1:
            raise ValueError("a memo holds at least one entry")
        if (max_bytes is None) != (weigh is None):
            raise ValueError("a memo bounded in bytes needs both max_bytes and weigh")
        self.name = name
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._weigh = weigh
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._weights: dict[K, int] = {}
        self.held_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    # `fix --pr --jobs N` checks repositories in threads that share every memo, so another
    # thread may evict an entry between two steps here: that is a miss, never a KeyError. (No
    # lock: the template analysis forks workers, and a lock another thread held at the fork
    # would stay locked in the child.)
    def get(self, key: K, default: Any = None) -> Any:
        try:
            value = self._entries[key]
            self._entries.move_to_end(key)
        except KeyError:
            return default
        return value

    def put(self, key: K, value: V) -> V:
        if isinstance(value, BaseException):
            raise TypeError(f"memo {self.name!r} would hold an exception ({type(value).__name__}): keep data instead")
        if self._weigh is not None:
            weight = self._weigh(value)
            if weight > self.max_bytes:
                return value  # never held: it would push out everything else and still not fit
            self.held_bytes += weight - self._weights.pop(key, 0)
            self._weights[key] = weight
        self._entries[key] = value
        try:
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries or (
                    self.max_bytes is not None and self.held_bytes > self.max_bytes and len(self._entries) > 1):
                old, _ = self._entries.popitem(last=False)
                self.held_bytes -= self._weights.pop(old, 0)
        except KeyError:  # another thread evicted it (or emptied the memo) meanwhile
            pass
        return value

    def lookup(self, key: K, compute: Callable[[], V]) -> V:
        """The remembered value, or compute() remembered (an exception propagates and is not kept)."""
        value = self.get(key, _MISSING)
        return self.put(key, compute()) if value is _MISSING else value

    def clear(self) -> None:
        self._entries.clear()
        self._weights.clear()
        self.held_bytes = 0


_MEMOS: dict[str, Memo[Any, Any]] = {}


def memo(name: str, max_entries: int, max_bytes: int | None = None,
         weigh: Callable[[Any], int] | None = None) -> Memo[Any, Any]:
    """The process's memo called `name` (made on first use; one name, one memo)."""
    found = _MEMOS.get(name)
    if found is None:
        found = _MEMOS[name] = Memo(name, max_entries, max_bytes, weigh)
    return found


def memoized(name: str, max_entries: int) -> Callable[[Callable[..., V]], Callable[..., V]]:
    """Remember a function of hashable positional arguments in memo `name`."""

    def wrap(fn: Callable[..., V]) -> Callable[..., V]:
        table = memo(name, max_entries)

        @functools.wraps(fn)
        def remembered(*args: Hashable) -> V:
            return table.lookup(args, lambda: fn(*args))

        return remembered

    return wrap


def clear() -> None:
    """Forget every content memo of this process."""
    for table in _MEMOS.values():
        table.clear()


def sizes() -> dict[str, int]:
    """name -> entries held, for every memo."""
    return {name: len(table) for name, table in sorted(_MEMOS.items())}
