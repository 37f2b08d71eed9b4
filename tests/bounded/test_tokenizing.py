"""hfdoctor.bounded.tokenizing: the tokenizers library behind a wall that panics cannot cross."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import UPSTREAM
from hfdoctor.bounded.tokenizing import TokenizerFailed, load_splitter, load_tokenizer, quiet_rust_stderr


def word_level(pre_tokenizer: dict) -> str:
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                       "normalizer": None, "pre_tokenizer": pre_tokenizer, "post_processor": None, "decoder": None,
                       "model": {"type": "WordLevel", "vocab": {"a": 0, "[UNK]": 1}, "unk_token": "[UNK]"}})


def test_a_tokenizer_that_panics_while_encoding_is_a_verdict():
    failures: list[str] = []
    tokenizer = load_tokenizer(word_level({"type": "FixedLength", "length": 0}), failures.append)
    assert tokenizer is not None and failures == []
    with pytest.raises(TokenizerFailed, match="panics"):
        tokenizer.encode("abc")
    assert failures == ["makes the tokenizers library panic while encoding text: chunk size must be non-zero"]


def test_a_tokenizer_json_that_does_not_load_is_reported_not_raised():
    failures: list[str] = []
    assert load_tokenizer('{"version": "1.0"', failures.append) is None
    assert load_tokenizer('{"model": {"type": "NoSuchModel"}}', failures.append) is None
    assert len(failures) == 2 and all(f.startswith("is JSON but tokenizers cannot load it") for f in failures)


def test_lone_surrogates_are_refused_as_tokenizer_failed():
    failures: list[str] = []
    tokenizer = load_tokenizer(word_level({"type": "Whitespace"}), failures.append)
    assert tokenizer.encode("a b a").ids == [0, 1, 0] and tokenizer.token_to_id("a") == 0
    with pytest.raises(TokenizerFailed, match="raises TypeError"):
        tokenizer.encode("a\ud800")
    assert failures == []  # a refusal is not a panic: nothing to report about tokenizer.json


def test_quiet_rust_stderr_silences_fd_2_and_restores_it(capfd):
    with quiet_rust_stderr():
        with quiet_rust_stderr():  # nested: the outer one restores
            os.write(2, b"inner\n")
        os.write(2, b"outer\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


@pytest.fixture(scope="module")
def qwen3_splitter():
    return load_splitter(json.loads((UPSTREAM / "Qwen--Qwen3-8B" / "tokenizer.json").read_text(encoding="utf-8")))


@given(text=st.text(max_size=60))
def test_splitter_pieces_are_ordered_spans_of_the_text_or_none(qwen3_splitter, text):
    pieces = qwen3_splitter.pieces(text)
    if pieces is None:  # NFC changes the text, or the library refused it (a lone surrogate)
        return
    assert all(0 <= start <= end <= len(text) for start, end in pieces)
    assert [start for start, _ in pieces] == sorted(start for start, _ in pieces)
    # Qwen3's pre-tokenizer isolates every piece it splits: together they are the text.
    assert "".join(text[start:end] for start, end in pieces) == text


def test_a_splitter_whose_pre_tokenizer_does_not_load_is_none():
    assert load_splitter({"pre_tokenizer": {"type": "NoSuchPreTokenizer"}}) is None
    assert load_splitter({"normalizer": None, "pre_tokenizer": None}).pieces("a b") == [(0, 3)]
