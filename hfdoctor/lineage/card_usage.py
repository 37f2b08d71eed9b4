"""What a checkpoint's own metadata says of its use and origin: does the model card show chat
usage, and which Hub model was it trained from?

A fine-tune of a family the registry does not know has no family fact to say "chat"; its card
often does: code that calls apply_chat_template, a messages list, or the conversation prompt
format it declares (TheBloke-style `prompt_template: 'USER: {prompt} ASSISTANT:'`). The card
is untrusted text: RE2 patterns, a bounded read.
"""

from __future__ import annotations

import hashlib

from hfdoctor.bounded import patterns

from hfdoctor.knowledge import registry
from hfdoctor.repo import ModelRepo
from hfdoctor.weights.adapter import cached_hub_id

CARD_HEADING = patterns.compile(r"(?m)^#\s+(\S[^\n]{0,200}?)\s*$")


# The model card shows chat usage: code that renders messages with the chat template, or
# a list of {"role": "user", ...} messages.
CHAT_TEMPLATE_CALL = patterns.compile(r"apply_chat_template\s*\(")
MESSAGES_LIST = patterns.compile(r"""[{,]\s*["']role["']\s*:\s*["']user["']""")
# Prompt formats of a conversation (a user turn, then an assistant turn), as cards write them
# ("## Prompt template: Vicuna ... USER: {prompt} ASSISTANT:"). Alpaca's "### Instruction:" /
# "### Response:" is a plain instruction format and is not among them.
CHAT_FORMATS = (("USER:", "ASSISTANT:"), ("[INST]", "[/INST]"), ("### User:", "### Assistant:"),
                ("### Human:", "### Assistant:"), ("<|im_start|>user", "<|im_start|>assistant"),
                ("<|user|>", "<|assistant|>"), ("<start_of_turn>user", "<start_of_turn>model"))
CHAT_NAME = patterns.compile(r"(?i)(chat|instruct|vicuna|assistant)")
CARD_READ = 100_000  # characters of the card body searched


def card_chat_usage(repo: ModelRepo) -> str | None:
    """Why the model card shows this is used as a chat model, or None.

    A call to apply_chat_template or a messages list in the card says so. A conversation
    prompt format (USER:/ASSISTANT:, [INST]...[/INST], ### User:/### Assistant:...) says so
    when the card declares it as its prompt_template, or when the model's name says chat
    or instruct.
    """
    card = repo.card
    if card is None:
        return None
    body = card.body[:CARD_READ]
    if CHAT_TEMPLATE_CALL.search(body):
        return "the model card's usage example calls apply_chat_template"
    if MESSAGES_LIST.search(body):
        return "the model card's usage example sends a list of chat messages"
    declared = declared_chat_format(repo)
    if declared is not None:
        (a, b), where = declared
        return (f"the model card's prompt_template is a chat format ({a} … {b})" if where is None
                else f"the model card of {where!r} shows a chat prompt format ({a} … {b})")
    return None


def declared_chat_format(repo: ModelRepo) -> tuple[tuple[str, str], str | None] | None:
    """The conversation prompt format (its user and assistant markers) the model card declares as its
    prompt_template (then None as the second item), or shows in the card of a model named chat or
    instruct (then that name); else None."""
    card = repo.card
    if card is None:
        return None
    metadata = card.metadata or {}
    declared = metadata.get("prompt_template")
    declared = declared if isinstance(declared, str) else ""
    fmt = next((pair for pair in CHAT_FORMATS if all(marker in declared for marker in pair)), None)
    if fmt is not None:
        return fmt, None
    names = [metadata.get("model_name"), getattr(repo.source, "repo_id", None)]
    heading = CARD_HEADING.search(card.body[:20_000])
    names.append(heading.group(1) if heading else None)
    name = next((n for n in names if isinstance(n, str) and CHAT_NAME.search(n)), None)
    if name is None:
        return None
    body = card.body[:CARD_READ]
    fmt = next((pair for pair in CHAT_FORMATS if all(marker in body for marker in pair)), None)
    return (fmt, name) if fmt is not None else None


def trained_from(repo: ModelRepo) -> list[str]:
    """The Hub ids of the model this checkpoint was trained from, as training wrote them: the
    base a PEFT adapter names, config.json's _name_or_path (a Hugging Face cache download's path
    read as the repo it holds; other local paths left out)."""
    found = [adapter_base_model(repo), (repo.config or {}).get("_name_or_path")]
    names = [name if _hub_id(name) else cached_hub_id(name) for name in found if isinstance(name, str)]
    return [name for name in names if name]


def _hub_id(name: str) -> bool:
    org, sep, rest = name.strip().partition("/")
    return bool(sep and org and rest) and "/" not in rest and not name.startswith((".", "~"))


def adapter_base_model(repo: ModelRepo) -> str | None:
    """The base model a PEFT adapter names (adapter_config.json's base_model_name_or_path)."""
    value = (repo.adapter_config or {}).get("base_model_name_or_path")
    return value if isinstance(value, str) and value.strip() else None


CHAT_WORDS = ("instruct", "chat", "-r1", "qwq", "thinking")
# Gemma's chat releases end in "-it" (gemma-2-2b-it, gemma-3-4b-it-qat): a whole part of the
# name, never the start of a longer word (gpt2-small-italian is Italian, not instruction-tuned).
IT_PART = patterns.compile(r"(?i)[-_.]it(?:$|[-_.])")


def names_chat_release(name: str) -> bool:
    """Whether a Hub id's name says it is a chat / instruct release."""
    return any(word in name.lower() for word in CHAT_WORDS) or IT_PART.search(name) is not None


def chat_origin(repo: ModelRepo) -> str | None:
    """Why the checkpoint's origin says chat, or None: training started from a chat release
    (an adapter's base or _name_or_path named instruct/chat), or its eos </s> ends the turns of
    a chat release's own upstream template that it ships unchanged (TinyLlama-Chat,
    Llama-2-chat: </s> alone also ends plain documents, so it says nothing by itself)."""
    for name in trained_from(repo):
        if names_chat_release(name):
            return f"it was trained from {name}, a chat model"
    template = repo.chat_template
    if template is None or repo.special_token("eos_token") != "</s>":
        return None
    sha = hashlib.sha256(template.text.encode("utf-8", "surrogatepass")).hexdigest()
    found = registry.variant_of_template(sha)
    if found is None or "eos_token" not in template.text:
        return None
    return f"its eos </s> ends the assistant turns of {found[1].template_name(sha)}, which it ships"

