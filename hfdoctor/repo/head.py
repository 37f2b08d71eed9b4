"""What the model does with its output: does it generate text at all?

Rules about how generation stops (the end-of-turn id, generation_config.json's stop ids, the
generation prompt) describe a model that generates. A classifier, a reward model, a sentence
embedder or a speech recogniser with a CTC head never calls generate(): how it would stop is not a
problem of it. Rules about tokenization read the same facts (an encoder's tokenizer appends [SEP]
or </s> to every input by design).

The evidence is the repository's own declaration, never a guess from its name:
- config.json's `architectures`, when every class has a head that generates nothing
  (*ForSequenceClassification, *ForTokenClassification...: a causal model with a classification
  head, a reward model, is read as a classifier too; so are remote code's *ForRewardModel and
  *ForProcessRewardModel);
- config.json's `model_type`, when it is an encoder-only architecture (BERT, RoBERTa, DeBERTa...:
  a sentence-transformers folder's config.json names the bare BertModel);
- a PEFT adapter_config.json's `task_type` (SEQ_CLS, TOKEN_CLS, QUESTION_ANS, FEATURE_EXTRACTION);
- a sentence-transformers folder: modules.json listing sentence_transformers modules, or
  config_sentence_transformers.json (an embedder built on a decoder, such as Qwen3-Embedding, keeps
  `Qwen3ForCausalLM` in its architectures, yet its tokenizer appends the eos it pools on);
- an LLM2Vec folder: llm2vec_config.json (its pooling), or a PEFT adapter_config.json whose
  auto_mapping is one of llm2vec's bidirectional models (LlamaBiModel): a decoder made a text encoder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hfdoctor.repo import ModelRepo

# Encoder-decoder model types of transformers: their tokenizers append the eos to the encoder's input.
ENCODER_DECODER_TYPES = frozenset({
    "t5", "mt5", "umt5", "longt5", "switch_transformers", "bart", "mbart", "plbart", "pegasus", "pegasus_x",
    "bigbird_pegasus", "marian", "m2m_100", "nllb-moe", "led", "blenderbot", "blenderbot-small", "fsmt",
    "prophetnet", "xlm-prophetnet", "mvp"})

# PEFT task types of models that encode and never generate (peft.TaskType).
ENCODER_TASK_TYPES = frozenset({"SEQ_CLS", "TOKEN_CLS", "QUESTION_ANS", "FEATURE_EXTRACTION"})

# Heads of transformers' classes that generate nothing, whatever the body (a decoder with a
# sequence-classification head is a reward model or a classifier). Remote-code reward models name
# theirs so too: InternLM2ForRewardModel (internlm2-*-reward, a scalar score from the last token),
# Qwen2ForProcessRewardModel (Qwen2.5-Math-PRM, a score per step).
ENCODER_HEADS = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering", "ForMaskedLM",
                 "ForMultipleChoice", "ForNextSentencePrediction", "ForImageClassification",
                 "ForAudioClassification", "ForAudioFrameClassification", "ForCTC", "ForRewardModel",
                 "ForProcessRewardModel")

# Model types of transformers that are encoders only: no class of theirs generates text.
ENCODER_ONLY_TYPES = frozenset({
    "bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "deberta", "deberta-v2", "distilbert", "electra", "albert",
    "mpnet", "camembert", "modernbert", "ernie", "megatron-bert", "mobilebert", "squeezebert", "funnel", "rembert",
    "roformer", "nezha", "luke", "canine", "big_bird", "longformer", "flaubert", "xlm", "esm", "data2vec-text",
    "wav2vec2", "hubert", "wavlm", "vit", "deit", "beit", "convnext", "resnet", "swin", "dinov2", "clip",
    "clip_text_model", "siglip", "siglip_text_model"})


def encoder_decoder(repo: "ModelRepo") -> bool:
    """An encoder-decoder (seq2seq) model, as its config.json or its PEFT adapter_config.json says."""
    config = repo.config or {}
    if config.get("is_encoder_decoder") is True or config.get("model_type") in ENCODER_DECODER_TYPES:
        return True
    return str((repo.adapter_config or {}).get("task_type", "")).upper() == "SEQ_2_SEQ_LM"


def sentence_transformers(repo: "ModelRepo") -> bool:
    """The folder is a sentence-transformers model: its modules.json lists sentence_transformers modules, or it has
    that library's config_sentence_transformers.json."""
    if repo.json_object("config_sentence_transformers.json") is not None:
        return True
    modules = repo.json("modules.json") if repo.exists("modules.json") else None
    return isinstance(modules, list) and any(
        isinstance(m, dict) and str(m.get("type", "")).startswith("sentence_transformers.") for m in modules)


def llm2vec(repo: "ModelRepo") -> bool:
    """An LLM2Vec text encoder: its llm2vec_config.json, or a PEFT adapter of one of llm2vec's bidirectional models."""
    mapping = (repo.adapter_config or {}).get("auto_mapping")
    library = mapping.get("parent_library") if isinstance(mapping, dict) else None
    return repo.exists("llm2vec_config.json") or (isinstance(library, str) and library.startswith("llm2vec."))


def encoder_only(repo: "ModelRepo") -> bool:
    """A model that encodes and never generates, as its PEFT adapter_config.json's task_type, its config.json's
    architectures or model_type, or its sentence-transformers or LLM2Vec files say."""
    return generates_nothing_because(repo) is not None


def generates_nothing_because(repo: "ModelRepo") -> str | None:
    """Why the model never generates text (None: it may). The reason names the declaration."""
    task = str((repo.adapter_config or {}).get("task_type", "")).upper()
    if task in ENCODER_TASK_TYPES:
        return f"the adapter's task_type is {task}: the model encodes and generates no text"
    if sentence_transformers(repo):
        return "a sentence-transformers model (modules.json, config_sentence_transformers.json): it embeds text"
    if llm2vec(repo):
        return "an LLM2Vec model (llm2vec_config.json, or an adapter of llm2vec's bidirectional model): it embeds text"
    config = repo.config or {}
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures and all(
            isinstance(a, str) and a.endswith(ENCODER_HEADS) for a in architectures):
        return f"config.json's architectures ({', '.join(architectures[:2])}) have a head that generates no text"
    if config.get("model_type") in ENCODER_ONLY_TYPES and not config.get("is_encoder_decoder"):
        return f"model_type {config.get('model_type')!r} is an encoder: it generates no text"
    return None
