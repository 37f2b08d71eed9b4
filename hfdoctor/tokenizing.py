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
