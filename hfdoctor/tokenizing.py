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
from typing import Any, Callable


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
        return Splitter(Tokenizer.from_str(json.dumps(light)))
    except BaseException as err:
        if not _contained(err):
            raise
        return None


def load_tokenizer(text: str, on_failure: Callable[[str], None]) -> SafeTokenizer | None:
    """Build the tokenizer from tokenizer.json's text; None (and on_failure(why)) when it cannot be."""
    from tokenizers import Tokenizer

    try:
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
