"""Which chat format a checkpoint's weights learnt, as far as its own folder tells (template-drift's
evidence, split out of drift.py).

A template is drift only against the format the weights were trained on. These say when that format
is not the family's chat release's, or cannot be known:

- the checkpoint was trained from another model, or from the family's pre-trained release;
- its own stop ids miss its template's end of turn (a pre-trained checkpoint, or one trained from it);
- it names no readable base (an adapter of a local folder);
- its template is the one a trainer installs or saves (TRL's stock ChatML, Unsloth's own);
- it was trained here (an adapter, the Trainer's state files, an Unsloth run, a card a trainer wrote):
  a trainer saves the template it trained with, so what it saved is, most likely, what the weights learnt.
"""

from __future__ import annotations

from hfdoctor import lineage as lineage_mod
from hfdoctor.chat.render_plan import TemplateAnalysis
from hfdoctor.chat.turns import turn_stop
from hfdoctor.knowledge import registry
from hfdoctor.lineage.adapter_base import release_stage
from hfdoctor.repo import ModelRepo
from hfdoctor.repo.file_names import is_training_state
from hfdoctor.repo.modelfile import modelfile

# TRL's setup_chat_format ChatML template, byte for byte (also cosmo2-tokenizer's stock template).
TRL_CHATML_SHA256 = "153280e3ff55d19da1398bdb3914ee2a51b80429bfaedde11d7d216c39db80f3"
TRL_CHATML = ("it is TRL's stock ChatML template (setup_chat_format installs it on the model it trains), "
              "so the checkpoint was trained on its own format")
UNSLOTH = ("it is the template of the Unsloth run that saved this checkpoint (Unsloth's own, by its header comment, or "
           "the one its Modelfile was written from), so the checkpoint was trained on it")

def trained_from_another_format(repo: ModelRepo, lineage: lineage_mod.Lineage) -> bool:
    """The checkpoint was trained from a Hub model the registry does not tie to the family
    (SmolLM-135M-Instruct, another fine-tune): its weights learnt that model's format, not
    upstream's, so comparing them says nothing. An adapter that names no base of its own is read
    through its card's base_model. (A pre-trained release of the family is
    pretrained_release's: said at info.)"""
    fam = lineage.family_ref
    names = lineage_mod.trained_from(repo)
    if not names and repo.is_adapter and lineage_mod.adapter_base_model(repo) is None:
        names = lineage_mod.card_base_models(repo)
    return any(registry.family_of_repo_id(name) is not fam for name in names)

def pretrained_release(repo: ModelRepo, lineage: lineage_mod.Lineage) -> str | None:
    """The family's pre-trained release the checkpoint declares it was trained from, when every
    name it declares is one: the adapter's base or config.json's _name_or_path, else (none of
    them written) the card's base_model (Deep Cogito's cogito-v1-preview-qwen-14B names
    Qwen/Qwen2.5-14B; a GRPO adapter of gemma-3-1b-pt whose adapter_config.json lost the name).
    A pre-trained release has no chat format: the template the fine-tune trained with is its
    own, whatever the family's -Instruct release writes. A card naming an instruct release
    beside it (a merge) is not that evidence."""
    fam = lineage.family_ref
    names = lineage_mod.trained_from(repo)
    from_card = not names
    names = names or lineage_mod.card_base_models(repo)
    if not names or fam is None:
        return None
    if not all(registry.family_of_repo_id(name) is fam and release_stage(name) is True for name in names):
        return None
    if from_card and not all(_card_evidence(repo, fam, name) for name in names):
        return None
    return names[0]

def stops_before_no_turn_end(repo: ModelRepo) -> str | None:
    """Why the weights' format cannot be the instruct release's when the model's own stop ids miss its
    template's end of turn (a copy of the pre-trained SmolLM2-135M stopping on <|endoftext|> beside a
    ChatML template): a pre-trained checkpoint, or one trained from it, learnt no chat format, and a
    chat fine-tune that kept those ids is eos-not-end-of-turn's to report. Adapters stop as their base."""
    stop = turn_stop(repo)
    if repo.is_adapter or stop is None or not repo.eos_ids or stop[1] in repo.eos_ids:
        return None
    return (f"its {repo.eos_ids_source} stops only on {repo.eos_ids}, never on its template's end of turn "
            f"{stop[0]!r} ({stop[1]}): a pre-trained checkpoint, or one trained from it, whose weights learnt no "
            "instruct release's format (if it was chat-trained, eos-not-end-of-turn says what to fix)")

def _card_evidence(repo: ModelRepo, fam: registry.Family, pretrained: str) -> bool:
    """A card's base_model is evidence only for a pre-trained release the registry ties to its
    chat release, and only when the card's text does not name that chat release: upstream's own
    card of a chat release, or a copy of it, names the base it was trained from (Qwen3-8B's names
    Qwen3-8B-Base and is headed '# Qwen3-8B'; IBM's granite-3.1-1b-a400m-instruct names
    granite-3.1-1b-a400m-base), which says what upstream was trained from, not this checkpoint."""
    releases = [b.repo for b in fam.bases if b.base_repo and b.base_repo.lower() == pretrained.lower()
                and b.repo != b.base_repo]
    if not releases:
        return False
    body = (repo.card.body if repo.card is not None else "").lower()
    for release in (r.rsplit("/", 1)[-1].lower() for r in releases):
        start = body.find(release)
        while start != -1:
            after = body[start + len(release):start + len(release) + 1]
            if not after or not (after.isalnum() or after in "-_"):  # not part of a longer name (Qwen3-8B-Base)
                return False
            start = body.find(release, start + 1)
    return True

def unknown_base(repo: ModelRepo) -> str | None:
    """Why the model an adapter was trained from cannot be read (a local folder, or no name)."""
    if not repo.is_adapter or lineage_mod.trained_from(repo) or lineage_mod.card_base_models(repo):
        return None
    base = lineage_mod.adapter_base_model(repo)
    return f"its base is {base!r}, a local folder" if base else "it names no base model"

def _unsloth_template(repo: ModelRepo, analysis: TemplateAnalysis) -> bool:
    """Unsloth's own template (a Jinja comment of its header: "Copyright 2025-present Unsloth ...
    Unsloth chat template fixes") on a checkpoint an Unsloth run saved (config.json's
    unsloth_fixed or unsloth_version, or a base named unsloth/...) or on a trainer's checkpoint: the
    run trained with the template it saved, so the weights learnt this one (a gpt-oss merge saved with
    Unsloth's gpt-oss fixes, a GRPO checkpoint of an Unsloth gpt-oss base)."""
    marked = False
    start = analysis.text.find("{#")
    while start != -1 and not marked:
        end = analysis.text.find("#}", start)
        comment = analysis.text[start:end if end != -1 else len(analysis.text)]
        marked = "Unsloth" in comment and "template" in comment.lower()
        start = analysis.text.find("{#", end) if end != -1 else -1
    config = repo.config or {}
    trained = "unsloth_fixed" in config or "unsloth_version" in config or any(
        name.lower().startswith("unsloth/") for name in lineage_mod.trained_from(repo))
    # A trainer's checkpoint (trainer_state.json beside it) saved the tokenizer it trained with:
    # Unsloth's template there came from the Unsloth base it loaded (a TRL GRPO run on gpt-oss).
    checkpoint = "trainer_state.json" in repo.files
    return marked and (trained or checkpoint)

def _unsloth_export(repo: ModelRepo, analysis: TemplateAnalysis) -> bool:
    """A checkpoint an Unsloth run saved (config.json's unsloth_version) with the Ollama Modelfile
    Unsloth writes from the chat template the run trained with: the template's opening text (an
    Alpaca preamble from Unsloth's notebooks) is in that Modelfile too, so the weights learnt it."""
    config = repo.config or {}
    found = modelfile(repo) if "unsloth_version" in config or "unsloth_fixed" in config else None
    start = analysis.text.find("{{ '")
    end = analysis.text.find("'", start + 4) if start != -1 else -1
    opening = analysis.text[start + 4:end] if end != -1 else ""
    return found is not None and len(opening) >= 20 and opening in (repo.text(found.file) or "")


def unsloth_saved(repo: ModelRepo, analysis: TemplateAnalysis) -> bool:
    """The template is the one an Unsloth run trained with (see _unsloth_template, _unsloth_export)."""
    return _unsloth_template(repo, analysis) or _unsloth_export(repo, analysis)


# Results files the Trainer writes beside the model it saves at the end of a run.
TRAINER_RESULTS = ("train_results.json", "all_results.json", "eval_results.json")
# Card tags the trainers and fine-tuning tools write (Trainer's generated_from_trainer, TRL's
# trl/sft/dpo..., LLaMA-Factory's, axolotl's, AutoTrain's, PEFT's). Not "unsloth": Unsloth tags its
# own quantized uploads of the releases with it too (unsloth/Llama-3.2-1B-Instruct-bnb-4bit).
TRAINING_TAGS = frozenset({
    "generated_from_trainer", "trl", "sft", "dpo", "orpo", "kto", "grpo", "ppo", "reward-trainer",
    "llama-factory", "axolotl", "autotrain", "peft", "lora", "qlora",
})
# What the card a trainer wrote says in its text: the Trainer's "This model is a fine-tuned version
# of [X] on the Y dataset", Unsloth's "trained 2x faster with Unsloth".
TRAINING_CARD_TEXT = ("is a fine-tuned version of", "trained 2x faster with")


def trained_here(repo: ModelRepo) -> str | None:
    """What in the folder says the checkpoint was trained by whoever saved it (an adapter, the
    Trainer's state or results files, an Unsloth run, a card a trainer wrote), or None. A trainer
    saves the tokenizer it trained with, template included (TRL, Unsloth, LLaMA-Factory and axolotl
    all do): the template beside a checkpoint it saved is, most likely, the format its weights learnt,
    not the base release's. A quantized or converted copy of a release shows none of these."""
    if repo.is_adapter:
        return "it is an adapter its trainer saved"
    state = sorted(f for f in repo.files if is_training_state(f) or f in TRAINER_RESULTS)
    if state:
        return f"the trainer's files beside it ({', '.join(state[:2])})"
    # unsloth_version is what an Unsloth run's save writes; unsloth_fixed alone marks Unsloth's own
    # uploads of the releases as well.
    if "unsloth_version" in (repo.config or {}):
        return "an Unsloth run saved it (config.json's unsloth_version)"
    metadata = repo.card.metadata if repo.card is not None and repo.card.metadata else {}
    tags = metadata.get("tags")
    tags = [tags] if isinstance(tags, str) else tags if isinstance(tags, list) else []
    named = sorted({t.lower() for t in tags if isinstance(t, str)} & TRAINING_TAGS)
    if named:
        return f"its card's tags ({', '.join(named[:3])})"
    if metadata.get("base_model_relation") in ("finetune", "adapter"):
        return f"its card's base_model_relation ({metadata['base_model_relation']})"
    body = (repo.card.body if repo.card is not None else "").lower()
    said = [text for text in TRAINING_CARD_TEXT if text in body]
    if said:
        return f"its card ('{said[0]}')"
    return None
