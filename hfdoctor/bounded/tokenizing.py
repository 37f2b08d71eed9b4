"""The repository's tokenizer.json as a `tokenizers.Tokenizer`, behind a wall that panics cannot cross.

The `tokenizers` library is Rust. A crafted tokenizer.json can make it panic while loading
(an invalid Precompiled charsmap) or while encoding (a FixedLength pre-tokenizer of length
0), and pyo3 turns a panic into `PanicException`, a BaseException that passes every
`except Exception`. Text with a lone surrogate is refused with a TypeError. So the
library is only ever called here: a failure to load is a problem of tokenizer.json (the
file-unreadable finding says it), and a failure to encode raises TokenizerFailed, an
ordinary Exception that the rule asking treats as "cannot tell".

Nothing here imports the rest of hfdoctor.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator


_STDERR_LOCK = threading.Lock()
_stderr_state = {"depth": 0, "saved": -1}


@contextmanager
def quiet_rust_stderr() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null while the library runs.

    Rust's panic hook writes "thread '...' panicked at ..." and, with RUST_BACKTRACE set,
    a whole backtrace straight to fd 2, below Python: text from a crafted repository on
    the user's terminal. The panic's message also comes back in the exception, which is
    what the finding quotes. Nested and concurrent users share one redirection (the last
    to leave restores the real stderr); other threads' writes in that window are lost,
    and the window is one library call.
    """
    with _STDERR_LOCK:
        if _stderr_state["depth"] == 0:
            try:
                sys.stderr.flush()
            except (OSError, ValueError, AttributeError):
                pass
            try:
                saved = os.dup(2)
                devnull = os.open(os.devnull, os.O_WRONLY)
                try:
                    os.dup2(devnull, 2)
                finally:
                    os.close(devnull)
            except OSError:  # no fd 2 to redirect: nothing reaches a terminal anyway
                saved = -1
            _stderr_state["saved"] = saved
        _stderr_state["depth"] += 1
    try:
        yield
    finally:
        with _STDERR_LOCK:
            _stderr_state["depth"] -= 1
            saved = _stderr_state["saved"]
            if _stderr_state["depth"] == 0 and saved >= 0:
                os.dup2(saved, 2)
                os.close(saved)
                _stderr_state["saved"] = -1


class TokenizerFailed(Exception):
    """The tokenizer could not encode or decode this input (it panicked or refused it)."""


def is_panic(err: BaseException) -> bool:
    """A Rust panic surfaced by pyo3 (pyo3_runtime.PanicException, a BaseException)."""
    return type(err).__name__ == "PanicException"


def _contained(err: BaseException) -> bool:
    """Failures of the library we turn into a verdict; anything else (Ctrl-C, a deadline) goes on up."""
    return isinstance(err, Exception) or is_panic(err)


def _describe(err: BaseException) -> str:
    kind = "panics" if is_panic(err) else f"raises {type(err).__name__}"
    return f"{kind}: {str(err).splitlines()[0][:300] if str(err) else ''}".rstrip(": ")


class SafeTokenizer:
    """The few calls hfdoctor makes on a tokenizers.Tokenizer, each contained."""

    def __init__(self, tokenizer: Any, on_failure: Callable[[str], None]):
        self._tokenizer = tokenizer
        self._on_failure = on_failure

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            with quiet_rust_stderr():
                return fn()
        except BaseException as err:
            if not _contained(err):
                raise
            message = f"tokenizers {_describe(err)} while {what}"
            if is_panic(err):
                self._on_failure(f"makes the tokenizers library panic while {what}: {str(err)[:300]}")
            raise TokenizerFailed(message) from None

    def encode(self, text: str, add_special_tokens: bool = False) -> Any:
        return self._call("encoding text", lambda: self._tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._call("decoding ids", lambda: self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))

    def token_to_id(self, token: str) -> int | None:
        return self._call("looking up a token", lambda: self._tokenizer.token_to_id(token))


# An empty model of each kind: the splitting tokenizer keeps the repository's normalizer and
# pre-tokenizer and nothing else.
EMPTY_MODEL = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
               "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
               "vocab": {}, "merges": []}


class Splitter:
    """How a tokenizer cuts text before its model sees it: the normalizer, then the
    pre-tokenizer. BPE, Unigram, WordPiece and WordLevel all tokenize each pre-token on
    its own, so two texts whose pieces agree up to a boundary that ends a piece in both
    have the same tokens up to it: settled in milliseconds, without building a 150k-token
    vocabulary (half a second for Qwen's)."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer

    def pieces(self, text: str) -> list[tuple[int, int]] | None:
        """(start, end) of each pre-token in `text`; None when the normalizer changes the text
        (offsets would not be the text's) or the library fails."""
        try:
            with quiet_rust_stderr():
                normalizer = self._tokenizer.normalizer
                if normalizer is not None and normalizer.normalize_str(text) != text:
                    return None
                pre = self._tokenizer.pre_tokenizer
                if pre is None:
                    return [(0, len(text))]
                return [span for _, span in pre.pre_tokenize_str(text)]
        except BaseException as err:
            if not _contained(err):
                raise
            return None


def load_splitter(tokenizer_json: dict[str, Any]) -> Splitter | None:
    """A Splitter for this tokenizer.json's normalizer and pre-tokenizer; None when they do not load."""
    from tokenizers import Tokenizer

    light = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
             "normalizer": tokenizer_json.get("normalizer"), "pre_tokenizer": tokenizer_json.get("pre_tokenizer"),
             "post_processor": None, "decoder": None, "model": EMPTY_MODEL}
    try:
        with quiet_rust_stderr():
            return Splitter(Tokenizer.from_str(json.dumps(light)))
    except BaseException as err:
        if not _contained(err):
            raise
        return None


def load_tokenizer(text: str, on_failure: Callable[[str], None]) -> SafeTokenizer | None:
    """Build the tokenizer from tokenizer.json's text; None (and on_failure(why)) when it cannot be."""
    from tokenizers import Tokenizer

    try:
        with quiet_rust_stderr():
            tokenizer = Tokenizer.from_str(text)
    except BaseException as err:
        if not _contained(err):
            raise
        if is_panic(err):
            on_failure(f"makes the tokenizers library panic while loading: {str(err).splitlines()[0][:300]}")
        else:
            on_failure(f"is JSON but tokenizers cannot load it: {str(err)[:300]}")
        return None
    return SafeTokenizer(tokenizer, on_failure)
