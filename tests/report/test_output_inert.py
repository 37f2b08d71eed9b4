"""Output is inert (CONTRACT "What users see": Output is inert), in every format.

A real repository (the seed incident's files) is made hostile where a repository controls
text: its model card, a token string, its chat template and its file names (one of them not
valid UTF-8) hold GitHub workflow commands, terminal escapes (colour, OSC 8 hyperlink, `\\r`),
a bidi override, rich markup, an autolink and HTML. `check` runs in every format, and a served
endpoint whose replies hold the same is probed: each output must reach the hostile text (so
the test can fail) and show it as data. Hypothesis properties then hold each format's escaping
to that on any string.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import string
import subprocess
from datetime import timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from conftest import ROOT, run_cli
from inert_checks import MARKDOWN, RAW, assert_inert, assert_markdown_inert, runner_commands
from hfdoctor.findings import Finding, Report, Severity, TargetError
from hfdoctor.report import inert
from hfdoctor.report.github import write_github
from hfdoctor.report.markdown import write_markdown
from hfdoctor.report.sarif import write_sarif
from hfdoctor.report.text import Display, line, write_text

SEED = ROOT / "fixtures" / "seed-incident"
HOSTILE = ("\n::add-mask::x\n::error file=a::b\n##[warning]w \x1b[31mred\x1b]8;;http://evil\x07link\x1b]8;;\x07 "
           "\rover \u202eevil\u2066 [/] [/bold] [link=http://x]l[/link] www.example.com.pkl <img src=x> ``tick``")
# A pickle whose only content is an import of os.system: SEC001 names the file (never loaded).
PICKLE = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03."
FILE_NAMES = [b"\n::error file=a::b.pkl", "x\x1b[31m\u202e.bin".encode(), b"bad\xff\xfe.pkl",
              b"[link=http:x]www.example.com.pkl", b"##[warning]w.pkl"]
FUZZ = settings(max_examples=200, deadline=timedelta(seconds=3), database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile") / "model"
    shutil.copytree(SEED, root)
    card = (root / "README.md").read_text()
    card = card.replace("base_model: meta-llama/Meta-Llama-3.1-8B",
                        "base_model: " + json.dumps("meta-llama/Meta-Llama-3.1-8B" + HOSTILE))
    (root / "README.md").write_text(card + "\n" + HOSTILE + "\n")
    config = json.loads((root / "tokenizer_config.json").read_text())
    config["eos_token"] = "<|im_end|>" + HOSTILE
    config["chat_template"] = "{% for m in messages %}{{ m.content }}" + HOSTILE + "{% endfor %}"
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    for name in FILE_NAMES:
        (Path(os.fsdecode(os.fsencode(root) + b"/" + name))).write_bytes(PICKLE)
    return root


def check(root: Path, *args: str) -> str:
    proc = run_cli("check", str(root), *args)
    assert proc.returncode == 1, proc.stderr  # the hostile text is found, and nothing crashed
    assert "Traceback" not in proc.stderr and "MarkupError" not in proc.stderr
    assert_inert(proc.stderr)
    return proc.stdout


def strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *strings(v)]]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


def strict_json(text: str):
    """What a strict parser (serde_json, Go, I-JSON) accepts: UTF-8 text, no lone surrogate even escaped."""
    text.encode("utf-8")
    value = json.loads(text)
    assert not any(inert.has_surrogate(s) for s in strings(value))
    return value


@pytest.mark.parametrize("args", [(), ("--verbose",), ("--show-info", "--verbose"), ("--quiet",)])
def test_text_output_shows_the_hostile_text_as_data(hostile, args):
    out = check(hostile, *args)
    assert_inert(out)
    if "--quiet" in args:
        assert out.count("\n") == 1 and out.startswith(f"{hostile}: 7 error(s)") and "info: --show-info" in out
        return
    if "--verbose" not in args:  # messages cut at about 160 characters: inert all the same
        return
    # The payloads reached the output, visibly: escapes shown, markup printed as written.
    for shown in ("\\n::add-mask::x", "\\x1b[31m", "\\x1b]8;;http://evil\\x07", "\\rover", "<U+202E>", "<U+2066>",
                  "[/] [/bold] [link=http://x]l[/link]", "bad\\xff\\xfe.pkl",
                  "/\\n::error file=a::b.pkl: error SEC001"):
        assert shown in out, shown


def test_json_and_jsonl_are_strict_json_with_the_raw_bytes_beside(hostile):
    report = strict_json(check(hostile, "--format", "json"))
    assert strict_json(check(hostile, "--format", "jsonl").strip()) == report
    bad = next(f for f in report["findings"] if f["file"] == "bad\ufffd\ufffd.pkl")
    assert bytes.fromhex(bad["file_raw"]) == b"bad\xff\xfe.pkl" and "message_raw" in bad
    card = next(f for f in report["findings"] if f["code"] == "CARD001")
    assert "::add-mask::x" in card["message"] and "file_raw" not in card  # valid text is kept as it is


def test_json_on_a_real_pipe_is_utf8_with_no_raw_controls(hostile):
    proc = run_cli("check", str(hostile), "--format", "json", subprocess_=True)
    assert proc.returncode == 1, proc.stderr
    assert_inert(proc.stdout)
    strict_json(proc.stdout)


def test_sarif_is_strict_json_and_keeps_the_bytes_in_the_uri(hostile):
    sarif = strict_json(check(hostile, "--format", "sarif"))
    results = sarif["runs"][0]["results"]
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results]
    bad = next(r for r, uri in zip(results, uris) if uri.endswith("bad%FF%FE.pkl"))
    assert bytes.fromhex(bad["properties"]["message_raw"]).startswith(b"bad\xff\xfe.pkl")


def test_github_annotations_carry_the_text_escaped(hostile):
    for args in ((), ("--show-info",)):
        out = check(hostile, "--format", "github", *args)
        levels = [annotation(line)[0] for line in out.splitlines()]
        assert ("notice" in levels) == bool(args) and "error" in levels  # info findings only when asked
        assert "%0A::add-mask::x%0A::error file=a::b%0A##[warning]" in out
        assert "file=" + inert.github_property(f"{hostile}/\n::error file=a::b.pkl") in out


def annotation(line: str) -> tuple[str, dict[str, str], str]:
    """A workflow command line as GitHub's runner splits it: level, properties, message."""
    assert line.startswith("::") and "\n" not in line and "\r" not in line
    head, sep, data = line[2:].partition("::")
    assert sep
    level, _, props = head.partition(" ")
    assert level in ("error", "warning", "notice"), line
    properties = dict(p.split("=", 1) for p in props.split(","))
    assert set(properties) <= {"file", "line", "title"}, line
    return level, properties, data


def test_the_job_summary_puts_repository_text_in_code_spans(hostile, tmp_path):
    summary = tmp_path / "summary.md"
    check(hostile, "--format", "json", "--summary", str(summary))
    markdown = summary.read_text(encoding="utf-8")
    assert_inert(markdown)
    codes = assert_markdown_inert(markdown)
    assert "[link=http:x]www.example.com.pkl" in codes and any("<img src=x>" in c for c in codes)


def test_fix_report_is_inert(hostile, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(hostile, folder)
    proc = run_cli("fix", str(folder))
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 1), proc.stderr
    assert_inert(proc.stdout)
    assert_inert(proc.stderr)
    assert "bad\\xff\\xfe.pkl" in proc.stdout


def test_fix_diff_is_byte_exact_and_under_github_actions_runs_no_command(tmp_path):
    """A patch prints the repository's lines as they are; a context line ` ::error::x` (right
    after the card's front matter, next to the base_model fix) is a command to GitHub's runner
    unless the patch sits between stop-commands lines, which git apply skips."""
    folder = tmp_path / "model"
    shutil.copytree(SEED, folder)
    card = (folder / "README.md").read_text()
    (folder / "README.md").write_text(card.replace("---\n\n# broken-model", "---\n::error::ctx\r::warning::cr\n"
                                                   "\n# broken-model"))
    plain = run_cli("fix", str(folder), "--diff")
    wrapped = run_cli("fix", str(folder), "--diff", env={"GITHUB_ACTIONS": "true"})
    assert plain.returncode == wrapped.returncode == 0, plain.stderr
    assert "\n ::error::ctx\r::warning::cr\n" in plain.stdout and runner_commands(plain.stdout) == ["error", "warning"]
    first, _, rest = wrapped.stdout.partition("\n")
    token = first.removeprefix("::stop-commands::")
    assert rest == plain.stdout + f"::{token}::\n" and len(token) >= 32
    assert runner_commands(wrapped.stdout) == ["stop-commands"]
    assert_inert(wrapped.stderr)
    for name, patch in (("plain", plain.stdout), ("wrapped", wrapped.stdout)):
        copy = tmp_path / name
        shutil.copytree(folder, copy)
        applied = subprocess.run(["git", "apply", "-p1", "-"], input=patch.encode(), cwd=copy, capture_output=True)
        assert applied.returncode == 0, applied.stderr
        assert b'base_model: Qwen/Qwen3-8B\n---\n::error::ctx\r::warning::cr\n' in (copy / "README.md").read_bytes()


def test_hook_install_shows_a_hostile_checkout_path_inert(tmp_path):
    repo = tmp_path / "clone\x1b[31m\n::error::x\u202e"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for command in ("install", "uninstall"):
        proc = run_cli("hook", command, "--repo", str(repo))
        assert proc.returncode == 0, proc.stderr
        assert_inert(proc.stdout + proc.stderr)
        assert "clone\\x1b[31m\\n::error::x<U+202E>/.git/hooks/pre-push" in proc.stdout


# --- a served endpoint whose replies are hostile ----------------------------------------------


@pytest.fixture()
def hostile_server():
    from openai_server import FakeOpenAI, _Handler

    class Handler(_Handler):
        def _answer(self, body, busy):
            message, finish = super()._answer(body, busy)
            if message.get("content"):
                message["content"] = HOSTILE + message["content"] + "\udcff"
            return message, finish

        def do_GET(self):
            return self._json(200, {"data": [{"id": "fake" + HOSTILE + "\udcff"}]})

    fake = FakeOpenAI("good")
    fake.http = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (Handler,), {"server_state": fake}))
    fake.http.daemon_threads = True
    yield fake.start()
    fake.stop()


def test_probe_endpoint_output_is_inert(hostile_server):
    proc = run_cli("probe", "--endpoint", hostile_server.url)
    assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr  # the reply is not the JSON asked for
    assert_inert(proc.stdout)
    assert_inert(proc.stderr)
    assert "\\n::add-mask::x" in proc.stdout and "(fake\\n::add-mask::x" in proc.stderr
    proc = run_cli("probe", "--endpoint", hostile_server.url, "--format", "json")
    assert_inert(proc.stdout)
    report = strict_json(proc.stdout)
    assert bytes.fromhex(report["served"]["model_raw"]).endswith(b"\xff")


# --- properties: any string in, inert out -------------------------------------------------------

# Any text, lone surrogates (undecodable bytes, JSON escapes) included.
ANY_TEXT = st.lists(st.characters() | st.integers(0xD800, 0xDFFF).map(chr) | st.sampled_from(
    ["\n::", "::", "##[", "\x1b[", "[/]", "[bold]", "`", "|", " ", "\r", "\u202e", "www.a.com", "<b>"]),
    max_size=60).map("".join)
PRINTABLE = st.text(alphabet=string.printable.strip("\t\n\r\x0b\x0c"), max_size=80)


def finding(file: str, message: str, severity: Severity = Severity.WARNING) -> Finding:
    return Finding("TPL001", "missing-chat-template", severity, file, 3, None, message)


@FUZZ
@given(ANY_TEXT)
def test_visible_is_one_inert_line(text):
    shown = inert.visible(text)
    assert "\n" not in shown and not RAW & set(shown)
    assert_inert(line(text).plain)  # where outside text starts a line, it starts no command


@FUZZ
@given(PRINTABLE)
def test_visible_keeps_printable_text(text):
    assert inert.visible(text) == text


@FUZZ
@given(ANY_TEXT, ANY_TEXT, st.sampled_from([Display(), Display(show_info=True), Display(quiet=True)]))
def test_text_writer_on_any_names_and_messages(file, message, display):
    out = io.StringIO()
    console = Console(file=out, highlight=False, soft_wrap=True, width=60)
    write_text([Report("model", [finding(file, message), finding(message, file, Severity.INFO)]),
                TargetError(message, file)], console, display)
    assert_inert(out.getvalue())
    if not display.quiet:
        assert inert.visible(message) in out.getvalue()


@FUZZ
@given(PRINTABLE, PRINTABLE)
def test_text_writer_keeps_printable_messages_as_written(file, message):
    out = io.StringIO()
    write_text([Report("model", [finding(file, message)])], Console(file=out, highlight=False, soft_wrap=True))
    assert f"model/{file}:3: warning TPL001 missing-chat-template {message}" in out.getvalue()


@FUZZ
@given(ANY_TEXT, ANY_TEXT, ANY_TEXT)
def test_github_annotations_on_any_text(target, file, message):
    out = write_github([Report(target, [finding(file, message), finding(file, message, Severity.INFO)]),
                        TargetError(target, message)], show_info=True)
    lines = out.split("\n")
    assert len(lines) == 3  # nothing started another command
    for line in lines:
        assert not RAW & set(line)
        _, properties, data = annotation(line)
        # What the runner shows after unescaping: the text, other controls and bidi shown visibly.
        assert unescape(data) == message.translate(inert.GITHUB_VISIBLE)
    path = f"{target.rstrip('/')}/{file}" if file else target
    assert unescape(annotation(lines[0])[1]["file"]) == path.translate(inert.GITHUB_VISIBLE)


def unescape(text: str) -> str:
    """What GitHub's runner does to a property or message."""
    for escaped, plain in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(escaped, plain)
    return text


@FUZZ
@given(PRINTABLE)
def test_github_round_trip_of_printable_text(message):
    assert unescape(inert.github_data(message)) == message
    assert unescape(inert.github_property(message)) == message


@FUZZ
@given(ANY_TEXT)
def test_code_span_is_one_literal_span(text):
    span = inert.code_span(text)
    if not inert.visible(text):
        assert span == ""
        return
    codes = assert_markdown_inert(f"x {span} y\n")
    assert codes == [inert.visible(text)]
    cells = assert_markdown_inert(f"| a | b |\n|---|---|\n| {inert.code_span(text, in_table=True)} | z |\n")
    assert cells == [inert.visible(text)]


@FUZZ
@given(ANY_TEXT, ANY_TEXT)
def test_markdown_summary_on_any_text(target, message):
    markdown = write_markdown([Report(target, [finding(message, message)]), TargetError(target, message)])
    assert_inert(markdown)
    assert_markdown_inert(markdown)


@FUZZ
@given(ANY_TEXT)
def test_json_is_strict_and_keeps_the_raw_bytes(text):
    out = inert.dumps({"file": text, "list": [text], "keys": {text: 1}}, indent=2)
    assert_inert(out)
    value = strict_json(out)
    if inert.has_surrogate(text):
        assert bytes.fromhex(value["file_raw"]) == inert.raw_bytes(text)
    else:
        assert value["file"] == text and "file_raw" not in value and value["keys"][text] == 1


@FUZZ
@given(st.binary(max_size=40))
def test_raw_bytes_of_a_file_name_are_its_bytes(name):
    assert inert.raw_bytes(os.fsdecode(name)) == name


@settings(FUZZ, max_examples=50)  # a SARIF run describes every rule: 70 ms each
@given(ANY_TEXT, ANY_TEXT)
def test_sarif_on_any_text(file, message):
    out = write_sarif([Report("model", [finding(file, message)]), TargetError(file, message)], Path("/work"))
    assert_inert(out)
    strict_json(out)


@FUZZ
@given(ANY_TEXT, ANY_TEXT)
def test_probe_output_on_any_reply(reply, detail):
    from hfdoctor.probe.checks import CheckResult
    from hfdoctor.probe.output import ProbeResult, write_json, write_text
    from hfdoctor.probe.session import Generation

    gen = Generation(prompt=detail, prompt_tokens=1, ids=[1, 2], text=reply, seconds=0.1, stopped_on=None)
    result = ProbeResult(target=detail, device="cpu", family=reply, dtype="float32", load_seconds=1.0,
                         checks=[CheckResult("think-on", "failed", detail, gen)],
                         served={"endpoint": reply, "server": detail, "model": reply},
                         conformance=[CheckResult("seed-parity", "inconclusive", reply)])
    out = io.StringIO()
    write_text(result, Console(file=out, highlight=False, soft_wrap=True))
    assert_inert(out.getvalue())
    assert inert.visible(detail) in out.getvalue()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        write_json(result)
    assert_inert(printed.getvalue())
    assert strict_json(printed.getvalue())["checks"][0]["snippet"] == inert.replace_surrogates(reply)


@FUZZ
@given(ANY_TEXT)
def test_stop_commands_keeps_any_text_and_runs_no_command(text):
    wrapped = inert.stop_commands(text)
    first, _, rest = wrapped.partition("\n")
    token = first.removeprefix("::stop-commands::")
    body = text if not text or text.endswith("\n") else text + "\n"
    assert rest == body + f"::{token}::\n"
    assert runner_commands(wrapped) == ["stop-commands"]
    assert runner_commands(wrapped + "::error::after\n") == ["stop-commands", "error"]  # it resumes after


@FUZZ
@given(ANY_TEXT)
def test_code_fence_is_one_literal_block(text):
    tokens = MARKDOWN.parse("before\n\n" + inert.code_fence(text, "diff") + "\nafter\n")
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 1 and fences[0].info == "diff"
    assert fences[0].content == "\n".join(map(inert.visible, text.split("\n"))) + "\n"
    assert [t.content for t in tokens if t.type == "inline"] == ["before", "after"]


@FUZZ
@given(ANY_TEXT, ANY_TEXT, ANY_TEXT, ANY_TEXT)
def test_pull_request_description_on_any_text(repo_id, file, message, diff):
    """`fix --pr`'s Markdown, which the Hub renders: any repo id, file name, message, fix title,
    refusal and diff stay in code spans and one fenced block; no HTML, link or mention."""
    from types import SimpleNamespace

    from hfdoctor.findings import Fix
    from hfdoctor.fix.hub_pr import description_of

    fixed = Finding("CARD001", "base-model-mismatch", Severity.WARNING, file, 1, None, message, Fix(message, ()))
    left = finding(file, message, Severity.ERROR)
    plan = SimpleNamespace(applied=[fixed], after=Report(repo_id, [left]), refused=[message])
    markdown = description_of(repo_id, "0" * 40, plan, diff, unsafe_fixes=False)
    assert not RAW & set(markdown)
    codes = assert_markdown_inert(markdown)
    tokens = MARKDOWN.parse(markdown)
    texts = [child.content for t in tokens for child in t.children or [] if child.type == "text"]
    assert not any("@" in text or "[" in text or "`" in text for text in texts), texts
    [fence] = [t for t in tokens if t.type == "fence"]
    assert fence.content == "\n".join(map(inert.visible, diff.rstrip("\n").split("\n"))) + "\n"
    if inert.visible(message):
        assert codes.count(inert.visible(message)) >= 4  # the message, the fix title, the one left, the refusal


def test_the_template_diff_header_keeps_a_hostile_key_on_its_comment_line():
    from hfdoctor.report.diff import text_diffs

    key = "t\n+++ b/x\n@@ -1 +1 @@\x1b[31m"
    old = json.dumps({key: "a\nb"}).encode()
    new = json.dumps({key: "a\nc"}).encode()
    lines = text_diffs("t.json", old, new)
    assert lines[0] == ("# t.json /t\\n+++ b~1x\\n@@ -1 +1 @@\\x1b[31m as text "
                        "(for review; the JSON edit below is what applies):\n")
    assert all(line.startswith("# ") and line.count("\n") == 1 for line in lines)
