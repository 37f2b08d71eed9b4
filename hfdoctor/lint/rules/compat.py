"""CMP: the engines that consume the repository (hfdoctor.compat.assess finds the facts;
these rules report them and offer the fixes that are certain). Two more of assess's
problems are reported by the rules of what they are about: TPL015 template-portability
(template/portability.py) and WGT007 weights-metadata (weights/metadata.py)."""

from __future__ import annotations

from typing import Iterator

from hfdoctor.compat.assess import Problem
from hfdoctor.lint.edits.json_edits import json_set_value
from hfdoctor.findings import Applicability, Finding, Fix, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.assessment import assessed_findings
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule


def _consumer_fix(repo: ModelRepo, problem: Problem) -> Fix | None:
    if "rope_theta" in problem.data:
        edit = json_set_value(repo, "config.json", "/rope_theta", problem.data["rope_theta"])
        return Fix("add rope_theta at the top level of config.json (the value rope_parameters holds)",
                   (edit,)) if edit else None
    if "template" in problem.data:
        edit = json_set_value(repo, "tokenizer_config.json", "/chat_template", problem.data["template"])
        # Unsafe: two copies of the template drift apart at the next edit of either.
        return Fix("copy chat_template.jinja into tokenizer_config.json's chat_template", (edit,),
                   Applicability.UNSAFE) if edit else None
    if problem.data.get("has_tokenizer_json"):
        edit = json_set_value(repo, "tokenizer_config.json", "/tokenizer_class", "PreTrainedTokenizerFast")
        return Fix("set tokenizer_class to PreTrainedTokenizerFast (loads tokenizer.json in 4.x and 5.x)", (edit,),
                   Applicability.UNSAFE) if edit else None
    return None


@rule("CMP001", "consumer-incompatible", Severity.WARNING, fix=FixAvailability.SOMETIMES)
def consumer_incompatible(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """An engine that consumes model repos cannot load this one, or silently misreads it.

    Why: a repository is loaded by many engines (transformers 4.x and 5.x, vLLM, SGLang,
    TGI, llama.cpp's converter, mlx-lm, the Open LLM Leaderboard), each reading the files
    its own way. A layout one of them writes can be one another refuses, or reads as
    something else without a word. Derived from the files and hfdoctor's table of what
    each engine reads (the report's `compat` section lists every engine). Reported:
    - rope_theta only inside `rope_parameters` (transformers 5's layout): transformers
      4.x, and the vLLM/SGLang/TGI releases that bundle it, read the top-level key and
      silently use their config class's default (10000 for most, 1e6 for LFM2 and
      Mixtral): wrong RoPE, degraded output, no error (checked on 4.46 and 4.57). Every
      checkpoint transformers 5 saves looks like this, so it is a warning, and an error
      when the repository declares a 4.x consumer (its card or requirements.txt pins
      transformers below 5, or it targets TGI or the Open LLM Leaderboard). Nothing is
      said when the default is the value anyway, or when no 4.x release has the model
      type. Safe fix: add the same rope_theta at the top level, beside rope_parameters:
      4.x reads it there, and transformers 5 still reads rope_parameters, unchanged.
    - tokenizer_class `TokenizersBackend` (written by transformers 5): every 4.x
      AutoTokenizer raises, and with it convert_hf_to_gguf and mlx-lm on 4.x (warning).
      Unsafe fix: PreTrainedTokenizerFast, which loads tokenizer.json everywhere but
      drops class-specific behaviour. Only where 4.x could load the model at all: when
      the model's type (config.json's; an adapter's base's, from adapter_config.json's
      auto_mapping, the base's config.json at hand, the registry or the adapter's own
      tokenizer and template) first appears in transformers 5 (qwen3_5,
      openai_privacy_filter), every consumer of it runs 5 (info, saying why); when the
      base is known only by its name, its type is not guessed: the warning stays and says
      that hfdoctor cannot verify whether a 4.x release can load the base.
    - the chat template only in chat_template.jinja: TGI, transformers < 4.48 and the
      Open LLM Leaderboard read only tokenizer_config.json's `chat_template` (warning when
      the card names TGI or the leaderboard, info otherwise). Unsafe fix: write the same
      text there (transformers 5 still prefers the .jinja), a second copy that can drift.
    - a model_type no transformers 4.x release knows (info: it is the architecture's
      age, not a fault of the files).

    Example: SmolLM2-135M-Instruct's metadata (read from its GGUF) saved by transformers 5:
    rope_theta only in rope_parameters (warning: 4.x silently uses 10000), tokenizer_class
    TokenizersBackend (warning), the template only in chat_template.jinja (info: nothing
    names TGI or the leaderboard). A LoRA of unsloth/Qwen3.5-0.8B saved by transformers 5
    (auto_mapping: transformers.models.qwen3_5): TokenizersBackend is info, since no 4.x
    release has qwen3_5.

    Fix: sometimes; safe for rope_theta (added at the top level, read identically by
    transformers 5), unsafe for tokenizer_class and for the template's second copy (see
    above). None for a model_type 4.x does not know.
    """
    yield from assessed_findings(repo, self, _consumer_fix)


@rule("CMP002", "gguf-convert-blocker", Severity.WARNING, fix=FixAvailability.NONE)
def gguf_convert_blocker(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """llama.cpp's convert_hf_to_gguf would refuse this checkpoint.

    Why: convert_hf_to_gguf is how a checkpoint becomes a GGUF for llama.cpp, Ollama and LM
    Studio; when it refuses, nobody can make one without patching the converter. Reported:
    - A byte-level BPE tokenizer whose pre-tokenizer fingerprint (the sha256 of the ids
      of llama.cpp's test text, as the converter computes it) is not among the converter's
      known hashes: "BPE pre-tokenizer was not recognized" (llama.cpp #8649). This
      happens after a tokenizer is changed (added pre-tokenizer rules, another
      normalizer); upstream tokenizers are all known.
    - A Gemma / Gemma 2 checkpoint without tokenizer.model: the converter builds their
      vocabulary only from the SentencePiece file (unsloth #785, llama.cpp #9673) (error).
    The hash table is upstream_templates/sources/llama_cpp_pre_tokenizers.txt (llama.cpp
    commit in its header).

    Example: Qwen3-8B's tokenizer.json with one pre-tokenizer regex changed (punctuation no
    longer takes the space before it): its fingerprint is no longer Qwen2's, and the
    converter stops with "BPE pre-tokenizer was not recognized".

    Fix: none; the tokenizer files are the trainer's (ship the base's tokenizer, or copy
    tokenizer.model from the base).
    """
    yield from assessed_findings(repo, self)


@rule("CMP003", "serving-parser-mismatch", Severity.WARNING, fix=FixAvailability.NONE)
def serving_parser_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The reasoning or tool-call parser the card tells servers to use cannot parse this model.

    Why: vLLM and SGLang split reasoning and tool calls out of the model's text with the
    parser named on their command line; a parser that does not fit the model refuses to
    start, or hands tool calls back as plain text. Read from the card's serve commands (`--reasoning-parser X`, `--tool-call-parser Y`,
    vLLM and SGLang spellings) against upstream_templates/serving_parsers.json, the
    markers each parser needs (with the parser's source):
    - a parser that requires its markers to be single tokens (hermes, qwen3_coder,
      deepseek_r1, qwen3, mistral...) on a vocabulary where they are not: vLLM refuses to
      start (error; vLLM #9304).
    - a tool-call parser whose markers the chat template never writes while it does teach
      tool calls: tool calls come back as plain text (warning).
    - a thinking family (registry) whose <think>/</think> are not single tokens: the
      reasoning parsers refuse it and the model cannot emit what it was trained to
      (error; vLLM #13125).

    Example: a card of Llama-3.1-8B-Instruct that serves it with `--tool-call-parser
    hermes`: Llama 3.1's vocabulary has no <tool_call> token, and vLLM refuses to start
    (vLLM #9304).

    Fix: none; the right parser depends on the server; the message names the markers.
    """
    yield from assessed_findings(repo, self)


RULES = [consumer_incompatible, gguf_convert_blocker, serving_parser_mismatch]
