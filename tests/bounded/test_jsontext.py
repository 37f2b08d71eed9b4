"""The byte-level JSON locator and editor (hfdoctor/bounded/jsontext.py, hfdoctor/lint/edits/json_spans.py).

The central property: cut one member out of a file textually, put it back with
set_value, and the file is byte-identical, whatever json.dumps options wrote it (or
whatever real upstream file it is). Where a file's keys are sorted, a new key goes in
its sorted place; elsewhere at the end.
"""

from __future__ import annotations

import json
import random

import pytest

from conftest import UPSTREAM
from hfdoctor.lint.edits import json_spans as je
from hfdoctor.bounded import jsontext as jt

DOC = {
    "add_bos_token": False,
    "added_tokens_decoder": {"151643": {"content": "<|endoftext|>", "special": True}},
    "bos_token": None,
    "chat_template": "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}",
    "eos_token": "<|im_end|>",
    "extra": [1, 2, 3],
    "model_max_length": 131072,
}
UNSORTED = {"zeta": 1, "alpha": [1, 2], "mid": {"b": 1, "a": "x"}, "last": "end"}

DUMPS_STYLES = {
    "2 spaces": dict(indent=2),
    "4 spaces": dict(indent=4),
    "tabs": dict(indent="\t"),
    "compact": dict(),
    "compact tight": dict(separators=(",", ":")),
}


def removed(data: bytes, pointer: str) -> bytes:
    start, end = je.member_removal_span(data, pointer)
    return data[:start] + data[end:]


def reinsert(data: bytes, pointer: str, value) -> bytes:
    cut = removed(data, pointer)
    splice = je.set_value(cut, pointer, value, je.detect_style(cut))
    assert splice is not None
    return splice.apply(cut)


@pytest.mark.parametrize("style", DUMPS_STYLES)
@pytest.mark.parametrize("trailing_newline", [True, False])
def test_sorted_file_every_key_round_trips(style, trailing_newline):
    text = json.dumps(DOC, sort_keys=True, **DUMPS_STYLES[style]) + ("\n" if trailing_newline else "")
    data = text.encode()
    for key in DOC:
        assert reinsert(data, jt.make_pointer(key), DOC[key]) == data, key


@pytest.mark.parametrize("style", DUMPS_STYLES)
def test_unsorted_file_appends_at_the_end(style):
    data = json.dumps(UNSORTED, **DUMPS_STYLES[style]).encode()
    assert reinsert(data, "/last", "end") == data
    # A key that was in the middle comes back at the end: file order is kept otherwise.
    moved = reinsert(data, "/alpha", [1, 2])
    assert list(json.loads(moved)) == ["zeta", "mid", "last", "alpha"]
    assert moved == json.dumps({"zeta": 1, "mid": UNSORTED["mid"], "last": "end", "alpha": [1, 2]},
                               **DUMPS_STYLES[style]).encode()


def test_replacing_a_value_touches_only_its_bytes():
    data = json.dumps(DOC, indent=2, sort_keys=True).encode() + b"\n"
    splice = je.set_value(data, "/model_max_length", 32768, je.detect_style(data))
    new = splice.apply(data)
    assert new == data.replace(b"131072", b"32768")
    splice = je.set_value(data, "/extra", {"a": [1]}, je.detect_style(data))
    assert json.loads(splice.apply(data))["extra"] == {"a": [1]}
    assert splice.apply(data) == json.dumps({**DOC, "extra": {"a": [1]}}, indent=2, sort_keys=True).encode() + b"\n"


@pytest.mark.parametrize("style", ["2 spaces", "4 spaces", "tabs", "compact"])
def test_nested_pointers_insert_into_the_nested_object(style):
    doc = {"a": {"b": {"c": 1, "e": 3}}, "z": 0}
    data = json.dumps(doc, **DUMPS_STYLES[style]).encode()
    splice = je.set_value(data, "/a/b/d", [4, 5], je.detect_style(data))
    expected = {"a": {"b": {"c": 1, "d": [4, 5], "e": 3}}, "z": 0}  # sorted place in a sorted object
    assert splice.apply(data) == json.dumps(expected, **DUMPS_STYLES[style]).encode()
    # Missing parents are created, laid out like the rest of the file.
    splice = je.set_value(data, "/a/x/y", "v", je.detect_style(data))
    expected = {"a": {"b": doc["a"]["b"], "x": {"y": "v"}}, "z": 0}
    assert splice.apply(data) == json.dumps(expected, **DUMPS_STYLES[style]).encode()
    # Through an array index, and RFC 6902's "-" appends.
    data = json.dumps({"list": [{"k": 1}, {"k": 2}]}, **DUMPS_STYLES[style]).encode()
    new = je.set_value(data, "/list/1/k", 3, je.detect_style(data)).apply(data)
    assert json.loads(new) == {"list": [{"k": 1}, {"k": 3}]}
    new = je.set_value(data, "/list/-", {"k": 9}, je.detect_style(data)).apply(data)
    assert new == json.dumps({"list": [{"k": 1}, {"k": 2}, {"k": 9}]}, **DUMPS_STYLES[style]).encode()


def test_keys_with_slash_and_tilde():
    doc = {"a/b": 1, "m~n": {"x/y~z": 2}, "plain": 3}
    data = json.dumps(doc, indent=2).encode()
    assert jt.locate(data, "/a~1b") is not None
    assert data[slice(*jt.locate(data, "/m~0n/x~1y~0z"))] == b"2"
    new = je.set_value(data, "/m~0n/x~1y~0z", 5, je.detect_style(data)).apply(data)
    assert json.loads(new) == {"a/b": 1, "m~n": {"x/y~z": 5}, "plain": 3}
    new = je.set_value(data, "/new~1key~0", True, je.detect_style(data)).apply(data)
    assert json.loads(new)["new/key~"] is True
    assert jt.make_pointer("a/b", "m~n") == "/a~1b/m~0n"


@pytest.mark.parametrize("style", ["2 spaces", "compact"])
def test_empty_object_gets_its_first_member(style):
    doc = {"outer": {}, "x": 1}
    data = json.dumps(doc, **DUMPS_STYLES[style]).encode()
    new = je.set_value(data, "/outer/k", "v", je.detect_style(data)).apply(data)
    assert new == json.dumps({"outer": {"k": "v"}, "x": 1}, **DUMPS_STYLES[style]).encode()
    assert je.set_value(b"{}", "/k", 1, je.detect_style(b"{}")).apply(b"{}") == b'{"k": 1}'


def test_duplicate_keys_edit_the_last_one_like_json_loads():
    data = b'{\n  "a": 1,\n  "a": 2\n}'
    new = je.set_value(data, "/a", 3, je.detect_style(data)).apply(data)
    assert new == b'{\n  "a": 1,\n  "a": 3\n}'


# --- string escaping -------------------------------------------------------------------------

STRINGS = ["plain", "quote \" backslash \\ slash /", "tab\tnl\ncr\r\b\f\x00\x1f\x7f", "ünïcödé 中文",
           "emoji 🦙 astral 𝔘", "<|im_start|> & <tool>", "\u2028 line sep", "\\u0041 not an escape"]


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_encode_string_matches_json_dumps(ensure_ascii):
    style = je.Style(ensure_ascii=ensure_ascii)
    rng = random.Random(5)
    alphabet = "".join(STRINGS) + "".join(chr(c) for c in range(0, 0x250))
    samples = STRINGS + ["".join(rng.choice(alphabet) for _ in range(40)) for _ in range(200)]
    for text in samples:
        assert je.encode_string(text, style) == json.dumps(text, ensure_ascii=ensure_ascii), text


def test_ensure_ascii_follows_the_file():
    doc = {"a": "ñ", "name": "café", "z": 1}  # "a" keeps the evidence once "name" is cut
    for ensure_ascii in (True, False):
        data = json.dumps(doc, indent=2, ensure_ascii=ensure_ascii).encode()
        assert je.detect_style(data, ensure_ascii_default=not ensure_ascii).ensure_ascii is ensure_ascii
        assert reinsert(data, "/name", "café") == data
    # An all-ASCII file does not say: the caller's default decides.
    ascii_only = json.dumps({"a": "x"}, indent=2).encode()
    assert je.detect_style(ascii_only, ensure_ascii_default=False).ensure_ascii is False
    assert je.detect_style(ascii_only, ensure_ascii_default=True).ensure_ascii is True


def test_escaped_slash_html_and_upper_hex_follow_the_file():
    # As PHP writes "/" and as Go/.NET write "<", ">", "&" (upper-case hex in .NET).
    data = b'{"a": "http:\\/\\/x", "b": "\\u003Cb\\u003E", "c": 1}'
    style = je.detect_style(data)
    assert (style.escape_slash, style.escape_html, style.upper_hex) == (True, True, True)
    new = je.set_value(data, "/d", "</s> & é", style).apply(data)
    assert new.endswith(b'"d": "\\u003C\\/s\\u003E \\u0026 \\u00E9"}')
    assert json.loads(new)["d"] == "</s> & é"
    # A literal backslash before "/" is not an escaped slash.
    assert je.detect_style(b'{"a": "C:\\\\/x"}').escape_slash is False
    plain = json.dumps({"a": "</s>"}).encode()
    assert je.detect_style(plain) == je.Style(indent=None, inline_scalar_lists=True)


# --- id lists (eos_token_id) -------------------------------------------------------------------

GEN = {"bos_token_id": 151643, "do_sample": True, "eos_token_id": 151643, "temperature": 0.6}


@pytest.mark.parametrize("style", DUMPS_STYLES)
def test_int_becomes_a_list_in_the_file_style(style):
    data = (json.dumps(GEN, sort_keys=True, **DUMPS_STYLES[style]) + "\n").encode()
    new = je.add_to_id_list(data, "/eos_token_id", 151645, je.detect_style(data)).apply(data)
    expected = json.dumps({**GEN, "eos_token_id": [151643, 151645]}, sort_keys=True, **DUMPS_STYLES[style]) + "\n"
    assert new == expected.encode()


def test_list_layout_follows_other_lists_of_the_file():
    # Hand-written files often keep short lists on one line inside an indented file.
    data = b'{\n  "bad_words_ids": [1, 2],\n  "eos_token_id": 7\n}\n'
    new = je.add_to_id_list(data, "/eos_token_id", 9, je.detect_style(data)).apply(data)
    assert new == b'{\n  "bad_words_ids": [1, 2],\n  "eos_token_id": [7, 9]\n}\n'


def test_append_to_existing_lists_keeps_their_layout():
    multi = json.dumps({"eos_token_id": [1, 2], "x": 0}, indent=4).encode()
    new = je.add_to_id_list(multi, "/eos_token_id", 3, je.detect_style(multi)).apply(multi)
    assert new == json.dumps({"eos_token_id": [1, 2, 3], "x": 0}, indent=4).encode()
    inline = b'{\n  "eos_token_id": [1,2],\n  "x": 0\n}'
    assert je.add_to_id_list(inline, "/eos_token_id", 3, je.detect_style(inline)).apply(inline) == \
        b'{\n  "eos_token_id": [1,2,3],\n  "x": 0\n}'
    one = json.dumps({"eos_token_id": [1]}, indent=2).encode()
    assert je.add_to_id_list(one, "/eos_token_id", 3, je.detect_style(one)).apply(one) == \
        json.dumps({"eos_token_id": [1, 3]}, indent=2).encode()
    empty = b'{"eos_token_id": []}'
    assert je.add_to_id_list(empty, "/eos_token_id", 3, je.detect_style(empty)).apply(empty) == b'{"eos_token_id": [3]}'


def test_id_list_edge_cases():
    data = json.dumps({"eos_token_id": [1, 2], "pad": None}, indent=2).encode()
    style = je.detect_style(data)
    assert je.add_to_id_list(data, "/eos_token_id", 2, style) is None  # already there
    assert je.add_to_id_list(data, "/pad", 5, style).apply(data) == data.replace(b"null", b"5")
    absent = je.add_to_id_list(data, "/bos_token_id", 0, style).apply(data)
    assert json.loads(absent) == {"bos_token_id": 0, "eos_token_id": [1, 2], "pad": None}
    assert je.add_to_id_list(b'{"eos_token_id": "x"}', "/eos_token_id", 5, style) is None


def test_real_llama_eos_list_round_trips():
    path = UPSTREAM / "meta-llama--Llama-3.1-8B-Instruct" / "generation_config.json"
    data = path.read_bytes()
    items = jt.array_items(data, jt.locate(data, "/eos_token_id")[0])
    cut = data[: items[-2][1]] + data[items[-1][1] :]  # drop the last id, 128009 (<|eot_id|>)
    assert json.loads(cut)["eos_token_id"] == [128001, 128008]
    assert je.add_to_id_list(cut, "/eos_token_id", 128009, je.detect_style(cut)).apply(cut) == data


# --- real files --------------------------------------------------------------------------------


def real_json_files() -> list:
    found = []
    for folder in sorted(UPSTREAM.iterdir()):
        for name in ("tokenizer_config.json", "generation_config.json", "config.json", "special_tokens_map.json"):
            if (folder / name).is_file():
                found.append(f"{folder.name}/{name}")
    return found


def uniform_gaps(data: bytes) -> bool:
    members = jt.object_members(data, jt.skip_whitespace(data, 0))
    return len({data[a.value_end : b.key_start] for a, b in zip(members, members[1:])}) <= 1


def in_rule_position(keys: list[str], index: int) -> bool:
    """Whether the rule (sorted place in a sorted object, else the end) puts keys[index] back where it is."""
    others = keys[:index] + keys[index + 1 :]
    return je.insertion_index(others, keys[index], others == sorted(others)) == index


def written_in_file_style(data: bytes, key: str, style: je.Style) -> bool:
    start, end = jt.locate(data, jt.make_pointer(key))
    value = json.loads(data[start:end])
    return data[start:end].decode() == je.encode_value(value, style, je.line_indent_at(data, start))


@pytest.mark.parametrize("rel", real_json_files())
def test_real_upstream_files_round_trip(rel):
    """Every member of every real upstream metadata file: cut it, put it back, same bytes.

    Exceptions, each a real irregularity of the upstream file, not of the editor:
    - a key that is not where the rule puts it: Mistral-7B-Instruct-v0.2 appended
      chat_template by hand after an otherwise sorted key list (we insert it sorted);
    - a file whose members are not all separated alike: lmstudio's Qwen3-14B has one
      member glued to the previous line (we use the common separator);
    - a value not laid out in the file's own style: phi-4's generation_config indents the
      eos_token_id items 6 spaces inside a 4-space file (a new value is written regularly).
    Whatever the layout, the result is always the same document.
    """
    data = (UPSTREAM / rel).read_bytes()
    obj = json.loads(data)
    if not isinstance(obj, dict) or not obj:
        pytest.skip("not an object")
    keys = list(obj)
    style = je.detect_style(data)
    exact = [k for i, k in enumerate(keys)
             if uniform_gaps(data) and in_rule_position(keys, i) and written_in_file_style(data, k, style)]
    for key in exact:
        assert reinsert(data, jt.make_pointer(key), obj[key]) == data, key
    for key in keys:
        assert json.loads(reinsert(data, jt.make_pointer(key), obj[key])) == obj
    if "chat_template" in obj and not rel.startswith(("mistralai--Mistral-7B-Instruct-v0.2/", "lmstudio-community--Qwen3-14B")):
        assert "chat_template" in exact


def test_real_files_mostly_round_trip_exactly():
    """Guard against the exceptions above swallowing everything."""
    total = exact = 0
    for rel in real_json_files():
        data = (UPSTREAM / rel).read_bytes()
        obj = json.loads(data)
        style = je.detect_style(data)
        for i, key in enumerate(obj):
            total += 1
            exact += uniform_gaps(data) and in_rule_position(list(obj), i) and written_in_file_style(data, key, style)
    assert total > 500 and exact / total > 0.8, (exact, total)


def test_member_removal_is_the_inverse_of_insertion():
    data = json.dumps({"a": 1, "b": 2, "c": 3}, indent=2).encode()
    assert removed(data, "/a") == json.dumps({"b": 2, "c": 3}, indent=2).encode()
    assert removed(data, "/b") == json.dumps({"a": 1, "c": 3}, indent=2).encode()
    assert removed(data, "/c") == json.dumps({"a": 1, "b": 2}, indent=2).encode()
    assert removed(b'{"only": 1}', "/only") == b"{}"
    assert je.member_removal_span(data, "/missing") is None


def test_set_value_refuses_what_it_cannot_do_exactly():
    data = b'{"a": [1, 2], "s": "x"}'
    style = je.detect_style(data)
    assert je.set_value(data, "", {}, style) is None  # whole document: that is re-serialising
    assert je.set_value(data, "/s/x", 1, style) is None  # through a string
    assert je.set_value(data, "/a/7", 1, style) is None  # past the end of an array
    assert je.set_value(b'{"a": ', "/a", 1, style) is None  # broken text


@pytest.mark.parametrize("style", ["2 spaces", "4 spaces", "tabs"])
def test_crlf_files_get_crlf_line_ends(style):
    """A file saved on Windows: new lines end in \\r\\n like the others, never a mix."""
    def crlf(doc) -> bytes:
        return json.dumps(doc, sort_keys=True, **DUMPS_STYLES[style]).replace("\n", "\r\n").encode() + b"\r\n"

    data = crlf(GEN)
    assert je.detect_style(data).newline == "\r\n"
    new = je.add_to_id_list(data, "/eos_token_id", 151645, je.detect_style(data)).apply(data)
    assert new == crlf({**GEN, "eos_token_id": [151643, 151645]})
    for key in DOC:
        assert reinsert(crlf(DOC), jt.make_pointer(key), DOC[key]) == crlf(DOC), key
    empty = crlf({"a": {}, "b": 1})
    new = je.set_value(empty, "/a/k", {"x": [1, {"y": 2}]}, je.detect_style(empty)).apply(empty)
    assert new == crlf({"a": {"k": {"x": [1, {"y": 2}]}}, "b": 1})


@pytest.mark.parametrize("text,expected", [
    (rb'{"a": "\u00e9"}', {"ensure_ascii": True, "upper_hex": False}),
    (rb'{"a": "\u00E9\u003C"}', {"ensure_ascii": True, "upper_hex": True, "escape_html": True}),
    (rb'{"a": "\\u00e9"}', {"ensure_ascii": None, "escape_html": False}),  # an escaped backslash, then text
    (rb'{"a": "\\\u0026"}', {"escape_html": True}),  # an escaped backslash, then an escape
    (rb'{"a": "x\/y"}', {"escape_slash": True}), (rb'{"a": "x\\/y"}', {"escape_slash": False}),
    ('{"a": "é\\u00e9"}'.encode(), {"ensure_ascii": False}),
])
def test_escape_style_is_read_escape_by_escape(text, expected):
    """Each backslash starts one escape sequence, so an escaped backslash followed by `u0041`
    or `/` says nothing about how the file escapes (None: the default decides)."""
    for default in (True, False):
        style = je.detect_style(text, ensure_ascii_default=default)
        for name, value in expected.items():
            assert getattr(style, name) == (default if value is None else value), (text, name, default)


@pytest.mark.parametrize("block", [1, 7, 1 << 16])
def test_json_index_lines_are_counted_per_block(monkeypatch, block):
    """A table of one count per block, not one offset per line break (a 64 MB file of blank lines
    held two gigabytes of them)."""
    monkeypatch.setattr(jt, "LINE_BLOCK", block)
    rng = random.Random(block)
    data = bytes(rng.choice(b"\n\nab") for _ in range(500))
    index = jt.JsonIndex(data)
    for offset in [0, 1, 6, 7, 8, 250, 499, 500]:
        assert index.line(offset) == data.count(b"\n", 0, offset) + 1


def test_json_index_walks_a_large_object_a_few_times_without_keeping_it(monkeypatch):
    monkeypatch.setattr(jt, "MAX_INDEXED_MEMBERS", 3)
    data = json.dumps({f"k{i}": [i, {"x": i}] for i in range(10)}, indent=1).encode()
    index = jt.JsonIndex(data)
    expected = {f"/k{i}/1/x": jt.line_of_pointer(data, f"/k{i}/1/x") for i in range(10)}
    assert all(expected.values())
    found = {pointer: index.line_of_pointer(pointer) for pointer in expected}
    assert list(found.values())[:jt.MAX_LARGE_WALKS] == list(expected.values())[:jt.MAX_LARGE_WALKS]
    assert index._members[jt.skip_whitespace(data, 0)] is None  # not kept
    many = jt.JsonIndex(data)
    answers = [many.line_of_pointer("/k9") for _ in range(jt.MAX_LARGE_WALKS + 2)]
    assert answers[:jt.MAX_LARGE_WALKS] == [jt.line_of_pointer(data, "/k9")] * jt.MAX_LARGE_WALKS
    assert answers[-1] is None  # past the walks a file allows: the line is unknown


def test_json_index_keeps_item_offsets_as_machine_integers():
    data = json.dumps(list(range(1000))).encode()
    index = jt.JsonIndex(data)
    assert index.line_of_pointer("/999") == 1 and index.line_of_pointer("/1000") is None
    assert index._items[0].itemsize == 8 and len(index._items[0]) == 1000
