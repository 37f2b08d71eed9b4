"""Regular expressions that meet repository data run in linear time: RE2, never a backtracking engine.

Python's `re` backtracks. A pattern of ours such as `(?:.*\\.)?layers\\.` takes quadratic time on
a 100 KB tensor name, the front-matter pattern huggingface_hub uses takes minutes on a card
of blank lines, and a pattern the repository supplies itself (a PEFT `target_modules` regex,
a .gitattributes glob turned into a regex) can take exponential time. Every pattern that is
matched against what a repository holds is compiled here, by RE2 (google-re2), which matches
in time linear in the input and refuses what it cannot match that way (backreferences,
lookaround): such a pattern is "unknown", never a hang.

- `compile(pattern)`: our own patterns (a bad one is a bug: it raises);
- `compile_untrusted(pattern)`: a pattern from the repository; None when RE2 refuses it, when
  its program would pass MAX_UNTRUSTED_PROGRAM_BYTES, or when it is longer than
  MAX_PATTERN_CHARS. A few characters can ask for a program of megabytes (`\\pL{1000}`: a
  thousand copies of every letter of Unicode), and RE2 grows a matching cache per program
  beside it: the program limit bounds both, and what is remembered is a few such programs,
  not a thousand.

Nothing here imports the rest of hfdoctor.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import re2

# One character at a time, no backtracking: safe in Python's engine on any text.
_SURROGATE = re.compile("[\ud800-\udfff]")

MAX_PATTERN_CHARS = 4096
# RE2's memory for one compiled program; a pattern that needs more is refused, not slow.
MAX_PROGRAM_BYTES = 32 << 20
# The same for a pattern the repository supplies (a PEFT target_modules regex, a .gitattributes
# glob: a few hundred bytes of program). RE2 gives two thirds to the program and the rest to
# its matching cache; refusing a larger one takes a few milliseconds, compiling it took seconds.
MAX_UNTRUSTED_PROGRAM_BYTES = 256 << 10
# Untrusted patterns remembered (each up to MAX_UNTRUSTED_PROGRAM_BYTES).
UNTRUSTED_CACHE_ENTRIES = 64

Pattern = Any  # re2._Regexp: match, search, fullmatch, finditer, findall, sub, split


def _options(max_mem: int = MAX_PROGRAM_BYTES) -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused repository pattern is a verdict, not stderr noise
    options.max_mem = max_mem
    return options


class SafePattern:
    """A compiled RE2 pattern that also takes text with lone surrogates (JSON allows "\\ud800";
    RE2 needs UTF-8): such text is matched with each surrogate read as U+FFFD, so offsets
    stay those of the text given."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, compiled: Any):
        self._compiled = compiled
        self.pattern = compiled.pattern

    def _call(self, method: str, text: Any, *args: Any) -> Any:
        try:
            return getattr(self._compiled, method)(text, *args)
        except UnicodeEncodeError:
            return getattr(self._compiled, method)(_SURROGATE.sub("\ufffd", text), *args)

    def match(self, text: str, *args: Any) -> Any:
        return self._call("match", text, *args)

    def search(self, text: str, *args: Any) -> Any:
        return self._call("search", text, *args)

    def fullmatch(self, text: str, *args: Any) -> Any:
        return self._call("fullmatch", text, *args)

    def finditer(self, text: str, *args: Any) -> list:
        # A list, not RE2's lazy iterator: the encoding (and its surrogate error) happens on
        # the first step of that iterator, outside any try around the call.
        try:
            return list(self._compiled.finditer(text, *args))
        except UnicodeEncodeError:
            return list(self._compiled.finditer(_SURROGATE.sub("\ufffd", text), *args))

    def findall(self, text: str, *args: Any) -> Any:
        return self._call("findall", text, *args)

    def sub(self, replacement: Any, text: str, count: int = 0) -> str:
        try:
            return self._compiled.sub(replacement, text, count)
        except UnicodeEncodeError:
            return self._compiled.sub(replacement, _SURROGATE.sub("\ufffd", text), count)


def compile(pattern: str) -> Pattern:  # noqa: A001 - the name every reader of `re` expects
    """Compile one of hfdoctor's own patterns (fails loudly: a bad one is a bug)."""
    return SafePattern(re2.compile(pattern, _options()))


def compile_untrusted(pattern: str, cache: bool = True) -> Pattern | None:
    """Compile a pattern taken from the repository; None when RE2 cannot run it in linear time
    within MAX_UNTRUSTED_PROGRAM_BYTES. `cache=False` for a caller that keeps what it compiles
    (a pattern a repository gives once has no use in a process-wide cache)."""
    return _compile_untrusted_cached(pattern) if cache else _compile_untrusted(pattern)


def _compile_untrusted(pattern: str) -> Pattern | None:
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
        return None
    try:
        return SafePattern(re2.compile(pattern, _options(MAX_UNTRUSTED_PROGRAM_BYTES)))
    except Exception:  # re2.error, or a TypeError on odd input
        return None


@lru_cache(maxsize=UNTRUSTED_CACHE_ENTRIES)
def _compile_untrusted_cached(pattern: str) -> Pattern | None:
    return _compile_untrusted(pattern)


def compile_large(pattern: str, max_mem: int = 256 << 20) -> Pattern | None:
    """Compile a pattern hfdoctor builds from repository data (an alternation of a
    vocabulary's added tokens): no length limit, more memory; None when RE2 cannot."""
    try:
        return SafePattern(re2.compile(pattern, _options(max_mem)))
    except Exception:
        return None


def escape(text: str) -> str:
    return re2.escape(text)
