"""TPL003-TPL013 on real upstream templates and on broken copies derived from them.

Each rule has cases that must fire and cases that must not; those that change one thing of
an upstream folder and expect one rule's findings are data, in tests/rules/TPL*.yml. Real
data: Qwen3-8B (hybrid thinking, drops history reasoning), Llama 3.1 Instruct (BOS in
template and in the post-processor), Mistral 7B v0.2 (declines a system role on purpose),
SmolLM3 (has {% generation %}), gpt-oss-20b, firefunction-v2 (needs a `functions` kwarg).
Hostile templates (runaway loop, 20 GB string, sandbox escape) must end as findings.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from conftest import ROOT, UPSTREAM, check_json, rules_fired
from hfdoctor.chat import analysis as analysis_mod
from hfdoctor.chat import render_plan as renders
from hfdoctor.chat import consistency, corpus
from hfdoctor.chat.analysis import analyze, run_analysis
from hfdoctor.bounded.sandbox import Limits, run_bounded
from hfdoctor.lint.check import check_target
from hfdoctor.findings import Report
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import Upstream
from hfdoctor.bounded import memo

LOCAL_UPSTREAM = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
CORPUS = ROOT / "tests" / "corpus" / "templates"
QWEN3 = "Qwen--Qwen3-8B"
LLAMA = "meta-llama--Llama-3.1-8B-Instruct"
MISTRAL = "mistralai--Mistral-7B-Instruct-v0.2"


def check(folder: Path | str, upstream: Upstream = LOCAL_UPSTREAM) -> Report:
    report = check_target(str(folder), select=["TPL", "TOK004"], upstream=upstream)
    assert not report.internal_errors, report.internal_errors
    return report


def findings(report: Report, rule: str, severity: str | None = None) -> list:
    return [f for f in report.findings if f.rule == rule and (severity is None or str(f.severity) == severity)]


def upstream_report(name: str) -> Report:
    return check(UPSTREAM / name)


@pytest.fixture(scope="module")
def qwen3() -> Report:
    return upstream_report(QWEN3)


@pytest.fixture(scope="module")
def llama() -> Report:
    return upstream_report(LLAMA)


@pytest.fixture(scope="module")
def mistral() -> Report:
    return upstream_report(MISTRAL)


def qwen3_template() -> str:
    return (UPSTREAM / QWEN3 / "chat_template.jinja").read_text(encoding="utf-8")


def set_template(folder: Path, text: str) -> None:
    """Write the template to chat_template.jinja and tokenizer_config.json alike (no conflict)."""
    (folder / "chat_template.jinja").write_text(text, encoding="utf-8")
    config_path = folder / "tokenizer_config.json"
    if config_path.exists():
        config = json.loads(config_path.read_text(encoding="utf-8"))
        if "chat_template" in config:
            config["chat_template"] = text
            config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")


def template_only_folder(tmp_path: Path, text: str, name: str = "repo") -> Path:
    """A small repo: a tokenizer_config.json (Mistral's tokens) and the template."""
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(UPSTREAM / MISTRAL / "tokenizer_config.json", folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text(text, encoding="utf-8")
    return folder


# --- TPL003 chat-template-syntax-error ------------------------------------------------------


def test_upstream_templates_compile(qwen3, llama, mistral):
    for report in (qwen3, llama, mistral):
        assert not findings(report, "chat-template-syntax-error")


# --- TPL004 chat-template-render-error ------------------------------------------------------


def test_mistral_declining_a_system_role_is_info_not_error(mistral):
    declined = findings(mistral, "chat-template-render-error")
    assert declined and all(str(f.severity) == "info" for f in declined)
    assert any("system prompt" in f.message and "raise_exception" in f.message for f in declined)


def test_null_content_tool_call_crash_is_a_warning_with_the_reason():
    # Qwen3-4B-Base ships the May 2025 template: `content` is undefined when transformers
    # drops an assistant tool call's `content: null`.
    found = findings(upstream_report("Qwen--Qwen3-4B-Base"), "chat-template-render-error")
    assert [str(f.severity) for f in found] == ["warning"]
    assert "content: null" in found[0].message


def test_upstream_templates_render(qwen3, llama):
    assert not findings(qwen3, "chat-template-render-error")
    assert not findings(llama, "chat-template-render-error", "error")


HOSTILE = {
    "runaway loop": "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
    "20 GB string": "{{ 'x' * 20000000000 }}",
    "sandbox escape": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "sandbox escape by filter": "{{ '' | attr('__class__') }}",  # renders '' in the sandbox: found statically
}


def test_hostile_templates_end_as_findings_within_bounds(tmp_path):
    """Each hostile template is one finding of the right kind, and the check returns: the
    parent kills the worker at Limits.total_s whatever the load, so the only time bound
    asserted is that deadline with a wide margin for a busy machine (never a speed)."""
    deadline = Limits().total_s
    for name, text in HOSTILE.items():
        folder = template_only_folder(tmp_path, text, name.replace(" ", "-"))
        started = time.monotonic()
        found = findings(check(folder), "chat-template-render-error", "error")
        assert time.monotonic() - started < deadline + 30, name
        assert found, name
        expected = {"runaway loop": "never returned", "20 GB string": "out of memory",
                    "sandbox escape": "Python internals", "sandbox escape by filter": "Python internals"}[name]
        assert expected in found[0].message, found[0].message


def test_a_huge_raise_exception_message_is_cut_short():
    result = run_analysis("{{ raise_exception('x' * 10000000) }}", {"eos_token": "</s>"})
    assert result.fatal is None and result.renders
    assert all(o.error.kind == "declined" and len(o.error.message) <= 500 for o in result.renders.values())


def test_the_first_oversized_message_is_the_one_reported():
    result = run_analysis("{{ 'x' * 400 }}", {"eos_token": "</s>"}, limits=Limits(message_bytes=300))
    assert result.fatal is not None and result.fatal[1].kind == "too-large"
    assert result.fatal[0] == renders.render_key(*renders.DEFAULT_RENDERS[0])


def test_doubling_string_is_stopped_by_the_memory_cap():
    """Only the memory cap can stop this one: the time limits are far beyond what doubling a
    string to 1 GiB takes on the busiest machine, so which limit wins never depends on speed."""
    text = "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"
    result = run_analysis(text, {"eos_token": "</s>"}, limits=Limits(total_s=300.0, step_s=300.0))
    assert result.fatal is not None and result.fatal[1].kind == "memory", result.fatal


def test_worker_that_hangs_outside_python_is_killed_at_the_deadline():
    def work(emit, guard):
        emit("started")
        signal_free_sleep = __import__("time").sleep
        signal_free_sleep(30)  # no step guard: only the parent's deadline stops it

    result = run_bounded(work, Limits(total_s=1.0))
    assert result.messages == ["started"] and result.failure == "timeout" and not result.finished


def test_worker_killed_by_a_signal_says_which():
    import os
    import signal

    result = run_bounded(lambda emit, guard: os.kill(os.getpid(), signal.SIGTERM))
    assert result.signal == signal.SIGTERM and result.failure == f"killed by signal {int(signal.SIGTERM)}"


def test_worker_is_killed_and_reaped_when_collecting_fails(monkeypatch):
    import os

    from hfdoctor.bounded import sandbox

    children = []

    def failing_collect(pid, read_fd, limits):
        children.append(pid)
        raise KeyboardInterrupt  # Ctrl-C while the parent waits for the child

    monkeypatch.setattr(sandbox, "_collect", failing_collect)
    with pytest.raises(KeyboardInterrupt):
        run_bounded(lambda emit, guard: __import__("time").sleep(30), Limits(total_s=60.0))
    with pytest.raises(ChildProcessError):  # killed and reaped: no process, no zombie left
        os.waitpid(children[0], os.WNOHANG)


# --- TPL005 template-unknown-token ------------------------------------------------------------


def test_plain_text_markers_are_not_tokens_on_purpose(qwen3, llama, mistral):
    # Qwen's <tools>, Mistral v0.2's [INST] (text in that vocabulary), Qwen2.5's <tool_response>.
    for report in (qwen3, llama, mistral, upstream_report("Qwen--Qwen2.5-Coder-32B-Instruct")):
        assert not findings(report, "template-unknown-token")


# --- TPL006 generation-prompt-noop --------------------------------------------------------------


# --- TPL010 prefix-instability ----------------------------------------------------------------------


def test_qwen3_drops_reasoning_of_earlier_turns(qwen3):
    # True, and Qwen3-8B's own design: info, naming the upstream template.
    found = findings(qwen3, "prefix-instability", "info")
    assert found and all("Qwen/Qwen3-8B" in f.severity_reason for f in found)
    by_scenario = {f.message.split(" (")[0]: f.message for f in found}
    assert set(by_scenario) == {"a reply followed by the next user message",
                                "a reply with reasoning followed by the next user message"}
    assert "reasoning of earlier turns is dropped" in by_scenario["a reply with reasoning followed by the next user message"]
    # With thinking off the prompt pre-fills <think></think>, which history drops: aligned
    # on the added token <think>, not on "<t".
    plain = by_scenario["a reply followed by the next user message"]
    assert "(enable_thinking=False)" in plain and "'<think>' becomes 'It'" in plain


def test_a_template_that_appends_a_turn_opener_is_judged_on_what_was_served():
    """Command-A renders a finished conversation with a dangling <|CHATBOT_TOKEN|> opener;
    the served prompt ends with it too and the model writes <|START_RESPONSE|> itself, so
    the cache of the last turn is a prefix of the next request: no finding (TRL's check of
    finished renders would say otherwise)."""
    text = (CORPUS / "axolotl" / "command_a.jinja").read_text()
    analysis = run_analysis(text, {})
    plain = corpus.CONTINUATIONS[0]
    assert consistency.prefix_divergence(analysis, plain) is None
    finished = analysis.rendered("reply", False)
    assert not analysis.rendered("multi_turn", True).startswith(finished)  # what a finished-render check sees


# --- TPL011 train-inference-mismatch ----------------------------------------------------------------


def test_qwen3_full_render_inserts_empty_thinking(qwen3):
    found = findings(qwen3, "train-inference-mismatch", "info")
    assert len(found) == 1 and "upstream" in found[0].severity_reason and "empty thinking block" in found[0].message
    assert "enable_thinking=False" not in found[0].message  # thinking off renders consistently


def test_no_train_inference_mismatch(llama):
    assert not findings(llama, "train-inference-mismatch")
    # gpt-oss writes <|channel|>final<|message|> before every reply, history included: the
    # model generates that header itself, so it is no mismatch.
    assert not findings(upstream_report("openai--gpt-oss-20b"), "train-inference-mismatch")


# --- TPL012 no-assistant-mask -----------------------------------------------------------------------


def test_no_generation_blocks_is_info(qwen3):
    assert [str(f.severity) for f in findings(qwen3, "no-assistant-mask")] == ["info"]


def test_smollm3_generation_blocks_cover_the_reply(copy_upstream):
    assert not findings(upstream_report("HuggingFaceTB--SmolLM3-3B"), "no-assistant-mask")
    folder = copy_upstream("HuggingFaceTB--SmolLM3-3B")
    lines = (folder / "chat_template.jinja").read_text().splitlines(keepends=True)
    # Move the {% generation %} block from the assistant's turn to the user's.
    lines = [line for line in lines if line.strip() not in ("{% generation %}", "{% endgeneration %}")]
    user = next(i for i, line in enumerate(lines) if 'message.role == "user"' in line) + 1
    lines[user] = "{% generation %}" + lines[user].rstrip("\n") + "{% endgeneration %}\n"
    set_template(folder, "".join(lines))
    found = findings(check(folder), "no-assistant-mask", "warning")
    assert found and "do not cover the assistant's reply" in found[0].message


# --- TPL013 template-drift -----------------------------------------------------------------------------


def test_upstream_unavailable_is_said_plainly(copy_upstream, monkeypatch):
    """Only a broken install lacks the shipped templates; then drift says it cannot compare."""
    from hfdoctor.knowledge import upstream as upstream_mod

    monkeypatch.setattr(upstream_mod, "_shipped_manifest", lambda: {})
    memo.clear()  # forget the templates looked up before the manifest was emptied
    folder = copy_upstream(QWEN3)
    set_template(folder, qwen3_template().replace("<|im_end|>\\n", "<|im_end|>\\n\\n"))
    report = check(folder, upstream=Upstream((), use_cache=False, use_hub=False))
    found = findings(report, "template-drift")
    assert [str(f.severity) for f in found] == ["info"] and "cannot compare" in found[0].message


# --- the report section and the analysis ----------------------------------------------------------


def test_template_section_in_json_report():
    report, _ = check_json(UPSTREAM / QWEN3, "--upstream", str(UPSTREAM))
    section = report["template"]
    assert section["thinking_toggle"] == "enable_thinking (on by default)"
    assert section["kwargs"] == ["enable_thinking"]
    assert section["tool_calls"] == "yes" and section["tool_call_arguments"] == "object, JSON string"
    assert section["reasoning"] == "last turn only"
    assert {"prefix-instability", "train-inference-mismatch"} <= rules_fired(report)
    assert "thinking-toggle-ignored" not in rules_fired(report)


def test_capabilities_of_real_templates():
    from hfdoctor.chat.capabilities import capabilities

    mistral = capabilities(analyze(ModelRepo(UPSTREAM / MISTRAL), (UPSTREAM / MISTRAL / "chat_template.jinja").read_text()))
    assert mistral["system_role"] == "declined" and mistral["tool_calls"] == "ignored"
    r1 = ModelRepo(UPSTREAM / "deepseek-ai--DeepSeek-R1")
    r1_caps = capabilities(analyze(r1, r1.chat_template.text))
    assert r1_caps["tool_call_arguments"] == "JSON string"  # object arguments crash R1's template
    llama = ModelRepo(UPSTREAM / LLAMA)
    assert capabilities(analyze(llama, llama.chat_template.text))["tool_call_arguments"] == \
        "object, JSON string (double-encoded)"


def _count_analyses(monkeypatch) -> list:
    runs = []
    real = analysis_mod.run_analysis

    def counting(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(analysis_mod, "run_analysis", counting)
    return runs


def test_one_analysis_per_template(monkeypatch):
    runs = _count_analyses(monkeypatch)
    # lmstudio's Qwen3 carries the April 2025 template: not shipped precomputed.
    check_target(str(UPSTREAM / "lmstudio-community--Qwen3-1.7B-MLX-bf16"), upstream=LOCAL_UPSTREAM)
    assert len(runs) == 1  # TOK004 and every TPL rule share one analysis


def test_canonical_template_comes_precomputed(monkeypatch):
    runs = _count_analyses(monkeypatch)
    report = check_target(str(UPSTREAM / QWEN3), upstream=LOCAL_UPSTREAM)
    assert runs == []  # read from upstream_templates/analyses/, nothing rendered
    assert {"prefix-instability", "train-inference-mismatch"} <= {f.rule for f in report.findings}


def test_shipped_analyses_equal_fresh_ones():
    """Run upstream_templates/make_analyses.py when this fails (renderer or corpus changed)."""
    import importlib.util

    from hfdoctor.chat import store
    from hfdoctor.knowledge.registry import data_file

    spec = importlib.util.spec_from_file_location("make_analyses", ROOT / "upstream_templates" / "make_analyses.py")
    make_analyses = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_analyses)
    entries = make_analyses.canonical_entries(UPSTREAM)
    assert len(entries) >= 8
    shipped = {p.name for p in (ROOT / "upstream_templates" / store.DIRECTORY).glob("*.json")}
    assert shipped == {f"{store.key(text, tokens, False)}.json" for _, text, tokens in entries}
    for repo_id, text, tokens in entries:
        stored = json.loads(data_file(f"{store.DIRECTORY}/{store.key(text, tokens, False)}.json").read_text())
        assert stored["analysis"] == json.loads(json.dumps(store.to_json(run_analysis(text, tokens)))), repo_id


def test_untrusted_templates_run_in_the_bounded_worker(monkeypatch):
    forks = []
    real = analysis_mod.run_bounded
    memo.clear()  # nothing remembered
    monkeypatch.setattr(analysis_mod, "run_bounded", lambda work, limits=None: forks.append(1) or real(work, limits))
    run_analysis(qwen3_template(), {"eos_token": "<|im_end|>"})  # the registry's pinned template: trusted
    assert forks == []
    run_analysis(qwen3_template() + " ", {"eos_token": "<|im_end|>"})
    assert forks == [1]


def test_a_finished_analysis_is_reused_and_a_cut_off_one_is_not(monkeypatch):
    """The fixer re-checks patched views whose template did not change: the same text with the
    same tokens is analysed once per process; other tokens, or a render cut off at its time
    limit (which may finish when the machine is less busy), are analysed again."""
    forks = []
    real = analysis_mod.run_bounded
    memo.clear()
    monkeypatch.setattr(analysis_mod, "run_bounded", lambda work, limits=None: forks.append(1) or real(work, limits))
    text = qwen3_template() + "\n"
    first = run_analysis(text, {"eos_token": "<|im_end|>"})
    assert run_analysis(text, {"eos_token": "<|im_end|>"}) is first and forks == [1]
    other = run_analysis(text, {"eos_token": "<|endoftext|>"})
    assert other is not first and forks == [1, 1]
    runaway, tight = HOSTILE["runaway loop"], Limits(total_s=3.0, step_s=0.5)
    assert run_analysis(runaway, {}, limits=tight).fatal[1].kind == "timeout"
    assert run_analysis(runaway, {}, limits=tight).fatal[1].kind == "timeout" and len(forks) == 4


def test_end_of_turn_still_found():
    from hfdoctor.chat.turns import end_of_turn

    repo = ModelRepo(UPSTREAM / QWEN3)
    found = end_of_turn(repo, repo.chat_template.text)
    assert found.token == "<|im_end|>" and found.token_id == 151645


def test_corpus_needles_do_not_look_like_markers():
    from hfdoctor.chat.capabilities import BRACKET_MARKER, FULLWIDTH_MARKER, PIPE_MARKER, TAG_MARKER

    text = json.dumps([c.inputs() for c in corpus.CORPUS])
    for pattern in (PIPE_MARKER, FULLWIDTH_MARKER, BRACKET_MARKER, TAG_MARKER):
        assert not pattern.search(text)


def _generator(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "upstream_templates" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_triggers_equal_fresh_ones():
    """Run upstream_templates/make_triggers.py when this fails (a shipped template or the reader changed)."""
    shipped = json.loads((ROOT / "upstream_templates" / "triggers.json").read_text(encoding="utf-8"))["templates"]
    assert shipped == json.loads(json.dumps(_generator("make_triggers").readings()))


def test_shipped_tokenizer_fingerprints_equal_fresh_ones(tmp_path):
    """Run upstream_templates/make_fingerprints.py --community DIR when this fails (the converter's text or
    tokenizers changed); the community copies it names are written out of the corpus here."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    import community_load

    maker = _generator("make_fingerprints")
    community_load.materialise(tmp_path, list(maker.COMMUNITY_COPIES))
    shipped = json.loads((ROOT / "upstream_templates" / "tokenizer_fingerprints.json").read_text())["tokenizers"]
    assert shipped == maker.fingerprints(UPSTREAM, tmp_path)


def test_shipped_portability_verdicts_equal_fresh_ones():
    """The other engines' verdicts make_analyses.py recorded, for each engine installed here in the
    recorded version (the others are facts about a version this machine does not have)."""
    from hfdoctor.chat import engines, store
    from hfdoctor.compat.portability import verdicts_to_record

    installed = engines.installed_versions(None)
    for _, text, tokens in _generator("make_analyses").canonical_entries(UPSTREAM):
        recorded = store.load_portability(text, tokens)
        assert recorded, "run upstream_templates/make_analyses.py"
        fresh = {v["engine"]: v for v in verdicts_to_record(text, tokens)}
        for entry in recorded:
            if installed.get(entry["engine"]) == entry["version"]:
                assert fresh[entry["engine"]] == entry
