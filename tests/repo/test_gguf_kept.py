"""What the GGUF reader keeps of a repository's files: bounded per repository, one copy of what
repeats (hfdoctor.repo.gguf.KeptArrays)."""

from __future__ import annotations

from blowup import write_gguf
from hfdoctor.bounded.budget import Budget
from hfdoctor.repo import gguf
from hfdoctor.repo.gguf_tokenizer import read_gguf_files
from hfdoctor.sources.local import LocalSource


def test_quantizations_of_one_vocabulary_share_one_list_and_one_dict(tmp_path):
    for name, extra in (("q4.gguf", [("general.name", "q4")]), ("q8.gguf", [("general.name", "q8 differs")])):
        write_gguf(tmp_path / name, ["a", "b", "<|im_end|>"], extra)
    files = read_gguf_files(LocalSource(tmp_path), ["q4.gguf", "q8.gguf"], Budget())
    q4, q8 = files.headers["q4.gguf"], files.headers["q8.gguf"]
    assert q4.metadata is not q8.metadata and q4.tokens is q8.tokens
    assert files.tokenizers["q4.gguf"].vocab is files.tokenizers["q8.gguf"].vocab == {"a": 0, "b": 1, "<|im_end|>": 2}


def test_vocabularies_past_the_bounds_are_walked_not_kept(tmp_path, monkeypatch):
    """Three files of two million tokens each held 2 GB: one array keeps at most MAX_VOCABULARY
    strings, a repository's distinct arrays MAX_KEPT_STRINGS, and what is left out is said."""
    monkeypatch.setattr(gguf, "MAX_VOCABULARY", 4)
    monkeypatch.setattr(gguf, "MAX_KEPT_STRINGS", 6)
    write_gguf(tmp_path / "a.gguf", ("a", 3))
    write_gguf(tmp_path / "b.gguf", ("b", 3))
    write_gguf(tmp_path / "c.gguf", ("c", 3))  # 9 distinct strings in all: the third is one too many
    write_gguf(tmp_path / "d.gguf", ("d", 5))  # past what one array keeps
    budget = Budget()
    files = read_gguf_files(LocalSource(tmp_path), ["a.gguf", "b.gguf", "c.gguf", "d.gguf"], budget)
    assert [len(files.headers[f].tokens) for f in ("a.gguf", "b.gguf", "c.gguf", "d.gguf")] == [3, 3, 0, 0]
    assert not files.errors and sorted(files.tokenizers) == ["a.gguf", "b.gguf"]
    assert files.headers["c.gguf"].dropped[0][0] == "tokenizer.ggml.tokens"
    assert any("c.gguf" in entry and "keeps of a repository's GGUF vocabularies" in entry for entry in budget.skipped)
    assert any("d.gguf" in entry and "5 values, past the 4" in entry for entry in budget.skipped)
