"""hfdoctor.bounded.parsing: JSON and YAML with limits (a hostile file is a ParseError, never a crash)."""

from __future__ import annotations

import gc
import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hfdoctor.bounded.parsing import MAX_DEPTH, ParseError, gc_paused, load_json, load_yaml, nesting_exceeds

# Strings full of what the bracket counter must see through: brackets, quotes, backslashes.
tricky_text = st.text(alphabet='[]{}"\\ab:,', max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=30,
)


def depth(value) -> int:
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


@given(json_values, st.integers(0, 8), st.booleans())
def test_nesting_exceeds_is_the_depth_of_the_value(value, limit, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert nesting_exceeds(text.encode("utf-8"), limit) is (depth(value) > limit)


def test_objects_and_arrays_nested_in_turn_count_every_level():
    # Before: one pass deleted `[]` and then the `{}` that left, so this counted as 100 deep.
    alternating = '{"a": [' * 100 + "]}" * 100
    with pytest.raises(ParseError, match="nested deeper than"):
        load_json(alternating)


@given(json_values)
def test_load_json_gives_what_json_loads_gives(value):
    text = json.dumps(value, indent=1)
    assert load_json(text) == json.loads(text)


def test_json_deeper_than_the_limit_is_refused_not_a_recursion_error():
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(ParseError, match="nested deeper than"):
        load_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    with pytest.raises(ParseError, match="nested deeper than"):
        load_json("[" * 20000)


def test_json_errors_say_truncated_or_invalid_with_the_line():
    with pytest.raises(ParseError) as cut:
        load_json('{\n  "a": 1,\n  "b": "unterminated')
    assert cut.value.message.startswith("is truncated") and cut.value.line == 3
    with pytest.raises(ParseError) as bad:
        load_json('{\n  "a": 1,,\n  "b": 2\n}')
    assert bad.value.message.startswith("is not valid JSON") and bad.value.line == 2
    with pytest.raises(ParseError, match="4,300 digits"):
        load_json("[" + "9" * 5000 + "]")


def test_yaml_alias_bomb_and_deep_nesting_are_refused():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(6))
    with pytest.raises(ParseError, match="alias bomb"):
        load_yaml(bomb)
    with pytest.raises(ParseError, match="nests deeper than") as deep:
        load_yaml("x:\n" + "[" * (MAX_DEPTH + 5), first_line=2)
    assert deep.value.line == 3  # the line of the file, not of the front matter
    with pytest.raises(ParseError, match="4,300 digits"):
        load_yaml("n: " + "9" * 5000)


def test_yaml_error_lines_count_from_first_line():
    with pytest.raises(ParseError) as err:
        load_yaml("license: mit\nbase_model: [a\n\tbad: x\n", first_line=2)
    assert err.value.message.startswith("is not valid YAML") and err.value.line == 4


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet="abc xyz-_.", max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet="abc", min_size=1, max_size=4),
                                                                inner, max_size=3),
    max_leaves=20,
)


@given(yaml_values)
def test_load_yaml_gives_what_safe_load_gives(value):
    text = yaml.safe_dump(value)
    assert load_yaml(text) == yaml.safe_load(text)


def test_gc_paused_restores_the_collector_even_when_the_parse_fails():
    assert gc.isenabled()
    with pytest.raises(ValueError):
        with gc_paused():
            assert not gc.isenabled()
            raise ValueError("the parse failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def test_json_that_would_build_too_many_values_is_refused_before_parsing(monkeypatch):
    """63 MB of `{}` (65 KB as a git blob) parsed into 21 million dicts: 1.7 GB. Bytes and depth bound
    neither; the brackets and commas counted at C speed do (brackets inside strings count too)."""
    from hfdoctor.bounded import parsing

    monkeypatch.setattr(parsing, "MAX_CONTAINERS", 100)
    monkeypatch.setattr(parsing, "MAX_VALUES", 300)
    with pytest.raises(ParseError, match="more than 100 arrays and objects"):
        load_json("[" + "{}," * 100 + "{}]")
    with pytest.raises(ParseError, match="more than 300 values"):
        load_json("[" + "0," * 300 + "0]")
    assert load_json("[" + "{}," * 98 + "{}]") == [{}] * 99  # 100 with the outer array
    assert parsing.too_many_values(b'{"a": "[[[[,,,,"}') is None


def test_a_large_parse_is_remembered_only_when_it_is_not_too_heavy(monkeypatch):
    """The memo of large parses held two tokenizer.json values whatever their size: it weighs each
    by its values (the brackets and commas) and keeps at most its max_bytes of them."""
    from hfdoctor.bounded import parsing

    parsing.LARGE_PARSES.clear()
    light = json.dumps({"x": "a" * parsing.GC_PAUSE_BYTES})
    assert load_json(light) is load_json(light)  # remembered: one value
    heavy = json.dumps([0] * (parsing.GC_PAUSE_BYTES // 2))
    monkeypatch.setattr(parsing.LARGE_PARSES, "max_bytes", len(heavy) * 2)
    assert load_json(heavy) is not load_json(heavy)  # ~40x its bytes parsed: never held
    assert len(parsing.LARGE_PARSES) == 1 and parsing.LARGE_PARSES.held_bytes <= parsing.LARGE_PARSES.max_bytes
    parsing.LARGE_PARSES.clear()
