"""The false alarms and harmful fixes issue 9 names, each pinned on real data.

Templates from tests/corpus (what TRL, axolotl, unsloth and chujiezheng/chat_templates
publish), from ../shared/upstream, and broken copies made from them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, UPSTREAM
from hfdoctor.chat.analysis import special_tokens_for_render
from hfdoctor.lint.check import check_target
from hfdoctor.fix.plan import plan_fixes
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import Upstream

OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
CORPUS = ROOT / "tests" / "corpus" / "templates"


def check(folder: Path):
    report = check_target(str(folder), upstream=OFFLINE)
    assert not report.internal_errors, report.internal_errors
    return report


def rule(report, name: str, severity: str | None = None) -> list:
    return [f for f in report.findings if f.rule == name and (severity is None or str(f.severity) == severity)]


def template_only(tmp_path: Path, text: str, name: str = "repo") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "chat_template.jinja").write_text(text, encoding="utf-8")
    return folder


def with_template(tmp_path: Path, upstream_folder: str, text: str) -> Path:
    """A copy of a real upstream folder whose template is replaced by `text`."""
    folder = tmp_path / upstream_folder
    shutil.copytree(UPSTREAM / upstream_folder, folder, ignore=shutil.ignore_patterns("history"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    (folder / "chat_template.jinja").write_text(text, encoding="utf-8")
    return folder


# --- eos-not-end-of-turn: only control tokens, harmony's stop tokens ----------------------------


def test_harmony_stops_are_return_and_call_never_end(tmp_path):
    """gpt-oss-20b (HF revision of 2025-08) stops on <|return|> and <|endoftext|>: the missing
    <|call|> is a warning with a safe fix; <|end|> (which closes the analysis channel) is
    never proposed. OpenAI's later generation_config.json adds 200012 too."""
    report = check(UPSTREAM / "openai--gpt-oss-20b")
    (found,) = rule(report, "eos-not-end-of-turn")
    assert str(found.severity) == "warning" and "'<|call|>' (id 200012)" in found.message
    assert found.fix.title == "add 200012 to generation_config.json eos_token_id"
    assert "200007" not in found.fix.title


@pytest.mark.parametrize("template", ["chat_template.jinja", "history/chat_template.2025-08-05.jinja",
                                      "history/chat_template.2025-08-07.jinja"])
def test_harmony_without_return_is_an_error_and_never_adds_end(tmp_path, template):
    text = (UPSTREAM / "openai--gpt-oss-20b" / template).read_text()
    folder = with_template(tmp_path, "openai--gpt-oss-20b", text)
    gen = json.loads((folder / "generation_config.json").read_text())
    gen["eos_token_id"] = [199999]
    (folder / "generation_config.json").write_text(json.dumps(gen, indent=2))
    found = {f.fix.title: str(f.severity) for f in rule(check(folder), "eos-not-end-of-turn")}
    assert found == {"add 200002 to generation_config.json eos_token_id": "error",
                     "add 200012 to generation_config.json eos_token_id": "warning"}


@pytest.mark.parametrize("name", ["chujiezheng/falcon-instruct", "chujiezheng/vicuna", "chujiezheng/alpaca"])
def test_plain_text_after_a_reply_is_said_and_never_made_an_eos(tmp_path, name):
    """Templates that end turns with text ("\\n\\nUser:", "\\n"): no token to stop on. The old
    rule took the first BPE piece ('\\n', '<') and its safe fix added it to eos_token_id."""
    folder = with_template(tmp_path, "Qwen--Qwen3-8B", (CORPUS / f"{name}.jinja").read_text())
    found = rule(check(folder), "eos-not-end-of-turn")
    assert all(f.fix is None for f in found)
    assert all(str(f.severity) == "info" and "plain text" in f.message for f in found)
    plan = plan_fixes(folder, upstream=OFFLINE, unsafe_fixes=True)
    assert "generation_config.json" not in plan.changed


# --- generation-prompt-noop -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["axolotl/command_a", "axolotl/command_a_rag", "axolotl/command_a_tool_use"])
def test_a_prompt_that_already_opens_the_assistant_turn_is_no_noop(tmp_path, name):
    """Command-A's template always ends with <|CHATBOT_TOKEN|>; the model writes
    <|START_RESPONSE|> itself, by design. That it appends the header to a finished conversation
    too is said at info only: no Cohere upstream template is known here to call it its design."""
    found = rule(check(template_only(tmp_path, (CORPUS / f"{name}.jinja").read_text())), "generation-prompt-noop")
    assert all(str(f.severity) == "info" and "whatever add_generation_prompt says" in f.message
               and "No upstream template of this family" in f.message for f in found), found


@pytest.mark.parametrize("folder", ["mistralai--Mistral-Nemo-Instruct-2407", "mistralai--Mistral-Small-3.2-24B-Instruct-2506",
                                    "unsloth--Devstral-Small-2507", "mistralai--Ministral-3-14B-Reasoning-2512"])
def test_mistral_templates_that_move_the_system_prompt_are_no_noop(tmp_path, folder):
    text = (UPSTREAM / folder / "chat_template.jinja").read_text()
    assert not rule(check(template_only(tmp_path, text)), "generation-prompt-noop")


# --- chat-template-render-error severity ----------------------------------------------------------


@pytest.mark.parametrize("name", ["trl/llava_next", "trl/llava_next_training"])
def test_a_parts_only_vision_template_is_a_capability_not_an_error(tmp_path, name):
    report = check(template_only(tmp_path, (CORPUS / f"{name}.jinja").read_text()))
    assert not rule(report, "chat-template-render-error")
    assert report.sections["template"]["content_format"].startswith("OpenAI content parts only")


def test_a_loop_over_messages_that_breaks_system_prompts_is_an_error(tmp_path):
    """Mistral Nemo's template takes the system message out and loops over `loop_messages`;
    looping over `messages` instead makes every system-prompt request raise 'roles must
    alternate': a bug, not a declined shape."""
    text = (UPSTREAM / "mistralai--Mistral-Nemo-Instruct-2407" / "chat_template.jinja").read_text()
    broken = text.replace("{%- for message in loop_messages %}", "{%- for message in messages %}")
    assert broken != text
    found = rule(check(template_only(tmp_path, broken)), "chat-template-render-error", "error")
    assert found and "handles system prompts, yet raises" in found[0].message


def test_a_template_without_system_support_still_declines_on_purpose(tmp_path):
    text = (UPSTREAM / "mistralai--Mistral-7B-Instruct-v0.2" / "chat_template.jinja").read_text()
    found = rule(check(template_only(tmp_path, text)), "chat-template-render-error")
    assert found and {str(f.severity) for f in found} == {"info"}


# --- smaller ones -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["trl/idefics3", "trl/idefics3_training"])
def test_templates_that_drop_string_content_are_not_judged_on_it(tmp_path, name):
    report = check(template_only(tmp_path, (CORPUS / f"{name}.jinja").read_text()))
    assert not rule(report, "no-assistant-mask", "warning") and not rule(report, "train-inference-mismatch")


def test_double_bos_after_leading_whitespace(tmp_path):
    text = (UPSTREAM / "meta-llama--Llama-3.1-8B-Instruct" / "chat_template.jinja").read_text()
    folder = with_template(tmp_path, "meta-llama--Llama-3.1-8B-Instruct", "\n" + text)
    assert rule(check(folder), "double-bos")


def test_the_tokenizer_class_default_bos_is_rendered_as_transformers_does(tmp_path):
    """A GemmaTokenizer config that names no bos_token: transformers still passes <bos>."""
    from transformers import AutoTokenizer

    folder = tmp_path / "gemma"
    folder.mkdir()
    shutil.copy(ROOT / "fixtures" / "tiny-thinker" / "tokenizer.json", folder)
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GemmaTokenizer", "chat_template": "[{{ bos_token }}|{{ eos_token }}|{{ pad_token }}]"}))
    tokens = special_tokens_for_render(ModelRepo(folder, upstream=OFFLINE))
    assert (tokens["bos_token"], tokens["eos_token"], tokens["pad_token"]) == ("<bos>", "<eos>", "<pad>")
    expected = AutoTokenizer.from_pretrained(folder).apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    assert expected == "[<bos>|<eos>|<pad>]"


@pytest.mark.parametrize("name, kwargs", [
    ("axolotl/command_a", ["enable_citations", "safety_mode"]),  # macros are not kwargs
    ("trl/qwen3_5_think", ["add_vision_id", "enable_thinking"]),  # nor a macro's `content` parameter
    ("axolotl/exaone4", ["enable_thinking", "skip_think"]),  # nor a value set earlier in the loop
])
def test_kwargs_report_names_only_what_callers_pass(tmp_path, name, kwargs):
    report = check(template_only(tmp_path, (CORPUS / f"{name}.jinja").read_text()))
    assert report.sections["template"]["kwargs"] == kwargs


def test_kwargs_with_a_default_inside_a_macro_are_still_kwargs():
    report = check(UPSTREAM / "openai--gpt-oss-20b")
    assert report.sections["template"]["kwargs"] == ["builtin_tools", "model_identity", "reasoning_effort"]


# --- must fire: broken copies of published templates ------------------------------------------------

CHATML = ["axolotl/chatml", "trl/qwen2_5", "trl/qwen3", "unsloth/chatml", "unsloth/qwen25"]


@pytest.mark.parametrize("name", CHATML)
def test_broken_copies_of_published_templates_fire(tmp_path, name):
    """Each published ChatML template, in a real Qwen3 repo, broken three ways."""
    text = (CORPUS / f"{name}.jinja").read_text()
    assert not rule(check(with_template(tmp_path / "ok", "Qwen--Qwen3-8B", text)), "template-unknown-token")
    renamed = text.replace("<|im_start|>", "<|im_begin|>")
    found = rule(check(with_template(tmp_path / "renamed", "Qwen--Qwen3-8B", renamed)), "template-unknown-token")
    assert found and "'<|im_begin|>'" in found[0].message and "<|im_start|>" in found[0].message
    truncated = text[: len(text) // 2]
    assert rule(check(with_template(tmp_path / "cut", "Qwen--Qwen3-8B", truncated)), "chat-template-syntax-error")
    no_prompt = text.replace("add_generation_prompt", "add_generation_prompt_never_passed")
    assert rule(check(with_template(tmp_path / "noop", "Qwen--Qwen3-8B", no_prompt)), "generation-prompt-noop")
