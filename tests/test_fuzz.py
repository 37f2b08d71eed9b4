"""Every reader of repository data, fuzzed: a finding or clean, never an exception, within a deadline.

Hypothesis feeds each reader arbitrary bytes and mutations of valid files (truncated,
spliced, with random bytes written in). The property is the one issue 20 asks of every
reader: it returns (a value, a scan, a finding) or raises only its own documented error;
nothing else escapes, and each example finishes within its deadline (a hang or a
quadratic path shows up as a deadline error, not as a slow test).
"""

from __future__ import annotations

import io
import json
import struct
import tarfile
import zipfile
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hfdoctor.sources import gitfiles

from hfdoctor.bounded import jsontext
from hfdoctor.modelfiles.scan import scan_handle
from hfdoctor.modelfiles.scan import SCANNER_FAILED
from hfdoctor.bounded.parsing import ParseError, load_json, load_yaml
from hfdoctor.sources.local import LocalSource
from hfdoctor.repo.gguf import GGUFError, parse_gguf
from hfdoctor.weights.headers import HeaderSkipped, WeightFileError, read_safetensors_header

FUZZ = settings(max_examples=150, deadline=timedelta(seconds=3), database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=40,
)


def mutated(data: bytes) -> st.SearchStrategy[bytes]:
    """`data` truncated, with bytes overwritten, inserted or deleted at random places."""
    @st.composite
    def build(draw):
        out = bytearray(data)
        for _ in range(draw(st.integers(0, 4))):
            if not out:
                break
            at = draw(st.integers(0, len(out) - 1))
            action = draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
            if action == "set":
                out[at] = draw(st.integers(0, 255))
            elif action == "insert":
                out[at:at] = draw(st.binary(max_size=8))
            elif action == "delete":
                del out[at:at + draw(st.integers(1, 8))]
            else:
                del out[at:]
        return bytes(out)

    return build()


# --- JSON, with positions -------------------------------------------------------------------------


@FUZZ
@given(st.one_of(st.text(max_size=200), json_values.map(json.dumps),
                 st.integers(0, 3000).map(lambda n: "[" * n + "]" * n)))
def test_json_reader(text):
    try:
        load_json(text)
    except ParseError as err:
        assert err.message


@FUZZ
@given(json_values, st.lists(st.text(max_size=6) | st.integers(0, 5).map(str), max_size=4), st.integers(0, 2))
def test_json_positions(value, parts, indent):
    data = json.dumps({"root": value}, indent=indent or None).encode()
    index = jsontext.JsonIndex(data)
    line = index.line_of_pointer(jsontext.make_pointer("root", *parts))
    assert line is None or 1 <= line <= data.count(b"\n") + 1


# --- YAML front matter ------------------------------------------------------------------------------


@FUZZ
@given(st.one_of(st.text(max_size=300),
                 st.lists(st.sampled_from(["a: 1", "- x", "b: [1, 2", "&a [1]", "*a", "c: {d: e}", "  - y", "---",
                                           "k: 99999999999999999999", "? q", "!!python/object:os.system x"]),
                          max_size=12).map("\n".join)))
def test_yaml_reader(text):
    try:
        load_yaml(text)
    except ParseError as err:
        assert err.message


@FUZZ
@given(st.text(max_size=400))
def test_model_card(tmp_path_factory, text):
    from hfdoctor.repo import ModelRepo

    folder = tmp_path_factory.mktemp("card")
    (folder / "README.md").write_text("---\n" + text, encoding="utf-8", errors="surrogatepass")
    repo = ModelRepo(folder)
    repo.card  # noqa: B018 - parsed or a problem, never an exception


# --- safetensors headers ----------------------------------------------------------------------------


def _safetensors(tensors: dict) -> bytes:
    header, offset = {}, 0
    for name, shape in tensors.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


VALID_SAFETENSORS = _safetensors({"a.weight": [2, 3], "b.bias": [3]})


@FUZZ
@given(st.one_of(st.binary(max_size=64), mutated(VALID_SAFETENSORS)))
def test_safetensors_header_reader(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("st")
    (folder / "model.safetensors").write_bytes(data)
    try:
        read_safetensors_header(LocalSource(folder), "model.safetensors")
    except (WeightFileError, HeaderSkipped) as err:
        assert str(err)


# --- GGUF -----------------------------------------------------------------------------------------------


def _gguf() -> bytes:
    def string(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    kv = string("general.architecture") + struct.pack("<I", 8) + string("llama")
    kv += string("tokenizer.ggml.tokens") + struct.pack("<II", 9, 8) + struct.pack("<Q", 2) + string("a") + string("b")
    tensor = string("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 2, 4) + struct.pack("<IQ", 0, 0)
    return b"GGUF" + struct.pack("<IQQ", 3, 1, 2) + kv + tensor


@FUZZ
@given(st.one_of(st.binary(max_size=64), mutated(_gguf())))
def test_gguf_reader(data):
    try:
        parse_gguf(io.BufferedReader(io.BytesIO(data)), "model.gguf")
    except GGUFError as err:
        assert str(err)


# --- the pickle machine and the containers ------------------------------------------------------------


def _pickles() -> list[bytes]:
    import pickle

    class Reduce:
        def __reduce__(self):
            return (len, ("abc",))

    return [pickle.dumps({"w": [1, 2.5, "x"], "t": (None, True)}, protocol=p) for p in (0, 2, 4, 5)] + [
        pickle.dumps(Reduce(), protocol=4), b"\x80\x04\x8c\x05numpy\x8c\x04size\x93."]


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


SAMPLES = _pickles() + [_zip({"archive/data.pkl": p}) for p in _pickles()[:2]] + [_tar({"pickle": _pickles()[1]})]


@FUZZ
@given(st.one_of(st.binary(max_size=256), st.sampled_from(SAMPLES).flatmap(mutated)))
def test_model_file_scanner(data):
    scan = scan_handle(io.BytesIO(data), "model.bin")
    assert not any(SCANNER_FAILED in p for p in scan.problems + scan.unproven), (scan.problems, scan.unproven)


# --- git's files ------------------------------------------------------------------------------------------


globs = st.text(alphabet="ab*?[]!/\\. -^", max_size=24)


@FUZZ
@given(st.lists(globs, max_size=6), st.text(alphabet="ab/.[]*", max_size=40))
def test_gitattributes_and_gitignore(patterns, path):
    text = "\n".join(f"{p} filter=lfs" for p in patterns)
    gitfiles.routed_to_lfs(path, gitfiles.lfs_rules(text))
    gitfiles.ignored(path or "x", gitfiles.ignore_rules("\n".join(patterns)))


@FUZZ
@given(st.binary(max_size=200).map(lambda b: b"DIRC" + struct.pack(">II", 2, 3) + b))
def test_git_index_reader(tmp_path_factory, data):
    git_dir = tmp_path_factory.mktemp("git") / ".git"
    git_dir.mkdir()
    (git_dir / "index").write_bytes(data)
    found = gitfiles.tracked_paths(git_dir)
    assert found is None or isinstance(found, set)


@pytest.mark.parametrize("pattern,path", [("*a" * 30 + "b", "a" * 5000), ("**/" * 50 + "x", "a/" * 2000 + "y")])
def test_hostile_globs_match_in_linear_time(pattern, path):
    """Patterns that backtrack exponentially in Python's engine: RE2 answers at once."""
    rules = gitfiles.lfs_rules(f"{pattern} filter=lfs\n")
    assert not gitfiles.routed_to_lfs(path, rules)


# --- the model card's chat examples (hfdoctor.chat.examples) ----------------------------------------

CARD_PIECES = st.sampled_from(["```python\n", "```\n", "```bash\n", "messages = [", "{'role': 'user', 'content': ",
                               "\"hi\"", "prompt", "}", "]", ",", "\n", "(" * 40, "[" * 300, "'system'", "**kw",
                               "{\"role\": \"system\", \"content\": f\"{x}\"}", "\\x00", "é"])


@FUZZ
@given(st.lists(CARD_PIECES, max_size=60).map("".join) | st.text(max_size=2000))
def test_card_examples_are_a_list_or_nothing(body):
    from hfdoctor.chat.examples import MAX_EXAMPLES, card_examples

    examples = card_examples(body)
    assert len(examples) <= MAX_EXAMPLES
    assert all(role in ("system", "user", "assistant", "developer") for e in examples for role, _ in e.messages)


@FUZZ
@given(st.text(max_size=400), st.text(max_size=400))
def test_the_markdown_summary_escapes_whatever_a_repository_names(name, message):
    from hfdoctor.findings import Finding, Report, Severity
    from hfdoctor.report.markdown import write_markdown

    finding = Finding("TPL001", "missing-chat-template", Severity.ERROR, name, 3, None, message)
    out = write_markdown([Report(target=name, findings=[finding])])
    rows = [line for line in out.splitlines() if line.startswith("| error |")]
    assert len(rows) == 1 and rows[0].count(" | ") == 3  # one row, four cells: nothing injected a column


def test_a_large_parse_is_remembered_by_its_bytes_and_leaves_the_collector_on():
    """tokenizer.json-sized JSON: the same bytes give the same value without a second parse (the
    fixer's re-checks), other bytes are parsed, only the last two are kept, and the garbage
    collector paused for the parse is on again afterwards, after a broken file too."""
    import gc

    from hfdoctor.bounded import parsing

    big = json.dumps({"model": {"vocab": {f"t{i}": i for i in range(120_000)}}})
    assert len(big) > parsing.GC_PAUSE_BYTES
    first = load_json(big)
    assert load_json(big) is first and load_json(big, big.encode()) is first
    other = load_json(big.replace("t1", "u1"))
    assert other is not first and "u1" in other["model"]["vocab"]
    load_json(big.replace("t2", "v2"))
    assert len(parsing.LARGE_PARSES) <= parsing.LARGE_PARSES.max_entries and load_json(big) is not first
    assert load_json(big) == first and gc.isenabled()
    with pytest.raises(ParseError):
        load_json(big[:-1])
    assert gc.isenabled()
    small = '{"a": [1]}'
    assert load_json(small) is not load_json(small)  # small files are simply parsed


@FUZZ
@given(st.one_of(st.binary(max_size=400),
                 st.lists(st.sampled_from([b'"', b"\\", b"\\u00e9", b"\\u003C", b"\\/", b"[", b"]", b"{", b"}", b":",
                                           b",", b"a", b"\xc3\xa9", b" ", b"\n"]), max_size=300).map(b"".join),
                 st.integers(0, 20000).map(lambda n: b'{"a": ' + b"[" * n + b'"' + b"\\" * n)))
def test_json_style_and_spans_on_any_bytes(data):
    """The fixer's readers of repository JSON (the escape-sequence search, the bracket scanner)
    on any bytes: a style and a span or None, never an exception, within the deadline."""
    from hfdoctor.lint.edits import json_spans as jsonedit

    style = jsonedit.detect_style(data)
    assert style.newline in ("\n", "\r\n")
    span = jsontext.locate(data, "/a")
    assert span is None or 0 <= span[0] <= span[1] <= len(data)
