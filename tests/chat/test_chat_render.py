"""hfdoctor's renderer equals transformers' apply_chat_template(tokenize=False), byte for byte.

Every chat template in ../shared/upstream (every *.jinja file in every folder, history/
and named variants included; every tokenizer_config.json `chat_template`, string or
named list; the legacy chat_template.json kept in gpt-oss-20b/history/) is rendered over
the whole conversation corpus (hfdoctor.chat.corpus: every conversation, with and without
the generation prompt, with enable_thinking absent, True and False) by both engines.
Where transformers raises, hfdoctor must raise with the same message.

Exceptions: none. Every template renders identically on every corpus entry; templates
that raise on some shapes (Mistral's alternation check, Gemma refusing a system role,
Hermes' tool_use templates iterating `tools` when there are none, firefunction's missing
`functions`) raise the same message in both engines. firefunction-v2 is also rendered
with the kwargs it needs (REQUIRED_KWARGS), so that it renders something at all.

The templates are rendered with the named special tokens their own folder's tokenizer
config gives (hfdoctor.chat.analysis.special_tokens_for_render), passed to transformers
as the tokenizer's special tokens, so the test also checks that both agree on them.
strftime_now is pinned in both engines.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from conftest import UPSTREAM
from hfdoctor.chat import corpus
from hfdoctor.chat.analysis import special_tokens_for_render
from hfdoctor.chat.render import pinned_clock, render
from hfdoctor.repo import ModelRepo

transformers = pytest.importorskip("transformers")

NOW = datetime(2025, 7, 26, 12, 0, 0)
GENERIC_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def upstream_templates() -> list[tuple[str, str, Path]]:
    """(id, template text, folder) for every template stored under ../shared/upstream."""
    found = []
    for path in sorted(UPSTREAM.rglob("*.jinja")):
        found.append((str(path.relative_to(UPSTREAM)), path.read_text(encoding="utf-8"), path.parent))
    json_files = sorted(UPSTREAM.rglob("tokenizer_config.json")) + sorted(UPSTREAM.rglob("chat_template.json*"))
    for path in json_files:
        value = json.loads(path.read_text(encoding="utf-8")).get("chat_template")
        rel = str(path.relative_to(UPSTREAM))
        if isinstance(value, str):
            found.append((rel, value, path.parent))
        elif isinstance(value, list):
            found += [(f"{rel}:{item['name']}", item["template"], path.parent) for item in value]
    return found


TEMPLATES = upstream_templates()
# Templates that render nothing without caller kwargs: also rendered with them.
# firefunction-v2 concatenates `functions` (the tool schemas as a JSON string) and
# `datetime` into its system prompt, and crashes without them (template-kwarg-crash).
REQUIRED_KWARGS = {
    "fireworks-ai--llama-3-firefunction-v2/chat_template.jinja": {
        "functions": json.dumps([t["function"] for t in corpus.TOOLS]), "datetime": "2025-07-26",
    },
}


def test_the_corpus_of_templates_is_complete():
    # 45 .jinja files (history/ and named variants included), 13 tokenizer_config.json
    # templates and gpt-oss's legacy chat_template.json: a change here means new data.
    assert len(TEMPLATES) >= 59
    ids = {t[0] for t in TEMPLATES}
    assert "openai--gpt-oss-20b/history/chat_template.2025-08-05.jinja" in ids
    assert "CohereForAI--c4ai-command-r-plus/chat_template.tool_use.jinja" in ids
    assert "openai--gpt-oss-20b/history/chat_template.json.2025-08-05" in ids


def special_tokens_of(folder: Path) -> dict[str, str]:
    """The folder's named special tokens (the history/ subfolder borrows its parent's)."""
    if folder.name == "history":
        folder = folder.parent
    tokens = special_tokens_for_render(ModelRepo(folder))
    return tokens or dict(GENERIC_TOKENS)


@pytest.fixture(scope="module")
def hf_tokenizer_for():
    """A transformers tokenizer (tiny vocabulary) per set of special tokens, cached."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from transformers.utils import chat_template_utils

    class PinnedDatetime:
        @staticmethod
        def now():
            return NOW

    saved = chat_template_utils.datetime
    chat_template_utils.datetime = PinnedDatetime  # what transformers' strftime_now reads
    cache: dict[tuple, object] = {}

    def make(tokens: dict[str, str]):
        key = tuple(sorted(tokens.items()))
        if key not in cache:
            backend = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
            cache[key] = PreTrainedTokenizerFast(tokenizer_object=backend, **tokens)
        return cache[key]

    yield make
    chat_template_utils.datetime = saved


def _ours(text: str, tokens: dict[str, str], conv: corpus.Conversation, add_generation_prompt: bool, kwargs: dict):
    inputs = conv.inputs()
    try:
        with pinned_clock(NOW):
            return render(text, inputs["messages"], tools=inputs["tools"], documents=inputs["documents"],
                          add_generation_prompt=add_generation_prompt, special_tokens=tokens, **kwargs).text
    except Exception as err:  # compared with what transformers raises
        return ("raised", str(err))


def _theirs(tokenizer, text: str, conv: corpus.Conversation, add_generation_prompt: bool, kwargs: dict):
    inputs = conv.inputs()
    try:
        return tokenizer.apply_chat_template(
            inputs["messages"], tools=inputs["tools"], documents=inputs["documents"], chat_template=text,
            add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs,
        )
    except Exception as err:
        return ("raised", str(err))


@pytest.mark.parametrize("template_id,text,folder", TEMPLATES, ids=[t[0] for t in TEMPLATES])
def test_render_equals_transformers(hf_tokenizer_for, template_id, text, folder):
    tokens = special_tokens_of(folder)
    tokenizer = hf_tokenizer_for(tokens)
    assert tokenizer.special_tokens_map == tokens  # both engines pass the same named tokens
    mismatches = []
    rendered = 0
    extra = REQUIRED_KWARGS.get(template_id)
    variants = list(corpus.variants())
    if extra:
        variants += [(conv, gen, {**kwargs, **extra}) for conv, gen, kwargs in corpus.variants()]
    for conv, add_generation_prompt, kwargs in variants:
        ours = _ours(text, tokens, conv, add_generation_prompt, kwargs)
        theirs = _theirs(tokenizer, text, conv, add_generation_prompt, kwargs)
        rendered += isinstance(theirs, str)
        if ours != theirs:
            mismatches.append((conv.name, add_generation_prompt, kwargs, theirs, ours))
    assert not mismatches, mismatches[:3]
    assert rendered > 0, f"{template_id}: transformers rendered nothing; the corpus no longer exercises it"


def test_generation_spans_equal_transformers_assistant_indices(hf_tokenizer_for):
    """{% generation %} spans are the character spans transformers' AssistantTracker records."""
    # hf_tokenizer_for pins transformers' clock to NOW too (the template prints today's date)
    from transformers.utils.chat_template_utils import render_jinja_template

    text = (UPSTREAM / "HuggingFaceTB--SmolLM3-3B" / "chat_template.jinja").read_text(encoding="utf-8")
    conv = corpus.conversation("multi_turn_reply")
    with pinned_clock(NOW):
        ours = render(text, conv.inputs()["messages"], special_tokens=GENERIC_TOKENS)
    rendered, indices = render_jinja_template(
        [conv.inputs()["messages"]], chat_template=text, return_assistant_tokens_mask=True, **GENERIC_TOKENS
    )
    assert ours.text == rendered[0]
    assert ours.generation_spans == indices[0]
    start, end = ours.generation_spans[0]
    assert corpus.ASSISTANT_1 in ours.text[start:end]


def test_message_preprocessing_matches_transformers():
    """None-valued keys dropped, reasoning aliased, JSON-string arguments left a string."""
    from hfdoctor.chat.render import prepare_messages

    messages = [
        {"role": "assistant", "content": None, "reasoning": "why", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
    ]
    prepared = prepare_messages(messages)[0]
    assert "content" not in prepared
    assert prepared["reasoning_content"] == prepared["thinking"] == "why"
    assert list(prepared)[0] == "thinking" and list(prepared)[-1] == "reasoning_content"  # transformers' key order
    assert prepared["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert messages[0]["content"] is None  # the caller's messages are not modified


def test_template_loading_precedence_matches_transformers(tmp_path):
    """repo.chat_template is the template AutoTokenizer loads, for each way of storing templates."""
    import shutil

    from transformers import AutoTokenizer

    qwen = UPSTREAM / "mistralai--Mistral-7B-Instruct-v0.2"  # the smallest tokenizer.json
    layouts = {
        "jinja-and-config": {"jinja": "JINJA", "config": "CONFIG"},
        "named-list": {"config": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]},
        "jinja-shadows-list": {"jinja": "JINJA", "config": [{"name": "default", "template": "D"}]},
        "additional-only": {"additional": {"tool_use": "EXTRA"}, "config": "CONFIG"},
        "legacy-json": {"chat_template_json": "JSON", "config": "CONFIG"},
    }
    for name, layout in layouts.items():
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(qwen / "tokenizer.json", folder)
        config = json.loads((qwen / "tokenizer_config.json").read_text())
        config["chat_template"] = layout["config"]
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        if "jinja" in layout:
            (folder / "chat_template.jinja").write_text(layout["jinja"])
        if "chat_template_json" in layout:
            (folder / "chat_template.json").write_text(json.dumps({"chat_template": layout["chat_template_json"]}))
        for template_name, template in layout.get("additional", {}).items():
            (folder / "additional_chat_templates").mkdir(exist_ok=True)
            (folder / "additional_chat_templates" / f"{template_name}.jinja").write_text(template)

        loaded = AutoTokenizer.from_pretrained(folder).chat_template
        default = loaded.get("default") if isinstance(loaded, dict) else loaded
        ours = ModelRepo(folder).chat_template
        if name == "legacy-json":
            # AutoTokenizer never reads chat_template.json; AutoProcessor (multimodal repos)
            # prefers it, and hfdoctor follows the processor there.
            assert default == "CONFIG" and ours.text == "JSON"
            continue
        assert (ours.text if ours else None) == default, name
