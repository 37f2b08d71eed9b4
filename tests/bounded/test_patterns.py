"""hfdoctor.bounded.patterns: RE2 for every pattern that meets repository data."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from hfdoctor.bounded import patterns

# Patterns built from what RE2 and Python's `re` read alike (leftmost-first, greedy).
atoms = st.sampled_from(["a", "b", ".", "[ab]", "[^a]", r"\d", "(?:ab)", "x"])
pieces = st.tuples(atoms, st.sampled_from(["", "*", "+", "?", "{1,2}"])).map("".join)
simple_patterns = st.lists(st.lists(pieces, min_size=1, max_size=4).map("".join), min_size=1, max_size=3).map("|".join)
subjects = st.text(alphabet="abx1 \n", max_size=30)


@given(simple_patterns, subjects)
def test_search_agrees_with_python_re_on_what_both_read(pattern, text):
    ours, theirs = patterns.compile(pattern).search(text), re.search(pattern, text)
    assert (ours is None) == (theirs is None)
    if ours is not None:
        assert ours.span() == theirs.span()


@given(simple_patterns, st.text(alphabet=st.sampled_from(["a", "b", "\ud800", "\udfff", "é", "x"]), max_size=20))
def test_lone_surrogates_match_as_replacement_characters_at_the_same_offsets(pattern, text):
    compiled = patterns.compile(pattern)
    replaced = re.sub("[\ud800-\udfff]", "\ufffd", text)
    found, expected = compiled.search(text), compiled.search(replaced)
    assert (found.span() if found else None) == (expected.span() if expected else None)
    assert [m.span() for m in compiled.finditer(text)] == [m.span() for m in compiled.finditer(replaced)]
    assert compiled.sub("-", text) == compiled.sub("-", replaced)


@given(st.text(max_size=40).filter(lambda t: not re.search("[\ud800-\udfff]", t)))
def test_escape_matches_exactly_the_text(text):
    assert patterns.compile(patterns.escape(text)).fullmatch(text) is not None


def test_untrusted_patterns_that_need_backtracking_are_refused_not_run():
    assert patterns.compile_untrusted(r"(a)\1") is None  # a backreference
    assert patterns.compile_untrusted(r"a(?=b)") is None  # lookahead
    assert patterns.compile_untrusted("a" * (patterns.MAX_PATTERN_CHARS + 1)) is None
    assert patterns.compile_untrusted(12345) is None  # not text (its callers pass only str)
    assert patterns.compile_untrusted("(") is None
    # The classic catastrophic pattern runs in linear time under RE2: a verdict, not a hang.
    evil = patterns.compile_untrusted(r"(a+)+$")
    assert evil is not None and evil.match("a" * 50_000 + "b") is None


def test_compile_large_takes_long_alternations_that_compile_untrusted_refuses():
    tokens = "|".join(patterns.escape(f"<|reserved_special_token_{i}|>") for i in range(2000))
    assert len(tokens) > patterns.MAX_PATTERN_CHARS and patterns.compile_untrusted(tokens) is None
    large = patterns.compile_large(tokens)
    assert large is not None and large.search("x <|reserved_special_token_1999|> y").span() == (2, 33)
    assert patterns.compile_large(r"(a)\1") is None
