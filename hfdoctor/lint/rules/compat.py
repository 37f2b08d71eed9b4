"""Rules about the engines that consume the repository (hfdoctor.compat.assess finds the
facts; these rules report them and offer the fixes that are certain)."""

from __future__ import annotations

from typing import Iterator

from hfdoctor.compat.assess import Problem, assess, engine_status
from hfdoctor.lint.edits.json_edits import json_set_value
from hfdoctor.findings import Applicability, Facet, FacetKind, Finding, Fix, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import Rule, rule


def _findings(repo: ModelRepo, self: Rule, fix_for=None) -> Iterator[Finding]:
    for problem in assess(repo):
        if problem.rule != self.name:
            continue
        if problem.severity is None:
            continue  # the compat section's only: not a fault this rule reports (Problem.severity)
        affected = ", ".join(f"{engine} {engine_status(repo, problem, engine)}" for engine in problem.engines)
        yield self.finding(repo, f"{problem.why} [{affected}]", file=problem.file, pointer=problem.pointer,
                           line=problem.data.get("line"), severity=problem.severity,
                           fix=fix_for(repo, problem) if fix_for else None,
                           facets=tuple(Facet(FacetKind.ENGINE, engine) for engine in problem.audience))


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


@rule("CMP001", "consumer-incompatible", Severity.WARNING)
def consumer_incompatible(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """An engine that consumes model repos cannot load this one, or silently misreads it.

    Derived from the files and hfdoctor's table of what each engine reads (the report's
    `compat` section lists every engine). Reported:
    - rope_theta only inside `rope_parameters` (transformers 5's layout): transformers
      4.x, and the vLLM/SGLang/TGI releases that bundle it, read the top-level key and
      silently use the default 10000: wrong RoPE, degraded output, no error (error;
      checked on 4.46 and 4.57). Safe fix: add the same rope_theta at the top level,
      which transformers 5 reads identically.
    - tokenizer_class `TokenizersBackend` (written by transformers 5): every 4.x
      AutoTokenizer raises, and with it convert_hf_to_gguf and mlx-lm on 4.x (warning).
      Unsafe fix: PreTrainedTokenizerFast, which loads tokenizer.json everywhere but
      drops class-specific behaviour.
    - the chat template only in chat_template.jinja: TGI, transformers < 4.48 and the
      Open LLM Leaderboard read only tokenizer_config.json's `chat_template` (warning when
      the card names TGI or the leaderboard, info otherwise). Unsafe fix: write the same
      text there (transformers 5 still prefers the .jinja), a second copy that can drift.
    - a model_type no transformers 4.x release knows (info: it is the architecture's
      age, not a fault of the files).
    """
    yield from _findings(repo, self, _consumer_fix)


@rule("CMP002", "gguf-convert-blocker", Severity.WARNING)
def gguf_convert_blocker(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """llama.cpp's convert_hf_to_gguf would refuse this checkpoint.

    - A byte-level BPE tokenizer whose pre-tokenizer fingerprint (the sha256 of the ids
      of llama.cpp's test text, as the converter computes it) is not among the converter's
      known hashes: "BPE pre-tokenizer was not recognized" (llama.cpp #8649). This
      happens after a tokenizer is changed (added pre-tokenizer rules, another
      normalizer); upstream tokenizers are all known.
    - A Gemma / Gemma 2 checkpoint without tokenizer.model: the converter builds their
      vocabulary only from the SentencePiece file (unsloth #785, llama.cpp #9673) (error).
    No fix: the tokenizer files are the trainer's; copy tokenizer.model from the base.
    The hash table is upstream_templates/sources/llama_cpp_pre_tokenizers.txt (llama.cpp
    commit in its header).
    """
    yield from _findings(repo, self)


@rule("CMP003", "serving-parser-mismatch", Severity.WARNING)
def serving_parser_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The reasoning or tool-call parser the card tells servers to use cannot parse this model.

    Read from the card's serve commands (`--reasoning-parser X`, `--tool-call-parser Y`,
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
    No fix: the right parser depends on the server; the message names the markers.
    """
    yield from _findings(repo, self)


@rule("WGT007", "weights-metadata", Severity.WARNING)
def weights_metadata(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """safetensors metadata that loaders require is missing or wrong.

    transformers 4.x refuses a safetensors file whose __metadata__ has no `format` in
    pt/tf/flax/mlx (error: every 4.x release; mlx #743), and releases before 4.48 refuse
    a file with no __metadata__ at all (warning). transformers 5 loads both. Checked by
    loading such files with 4.46 and 4.57. No fix: it is a weights edit (re-save with
    `save_file(tensors, path, metadata={"format": "pt"})`); hfdoctor never rewrites weights.
    """
    yield from _findings(repo, self)


@rule("TPL015", "template-portability", Severity.WARNING)
def template_portability(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The chat template fails or renders differently in another template engine.

    transformers renders templates with jinja2; TGI, mistral.rs and NVIDIA dynamo use
    minijinja (configured as TGI configures it), transformers.js and LM Studio use
    @huggingface/jinja. hfdoctor renders the standard conversations in each engine it can
    run (minijinja always, @huggingface/jinja when node and the package are installed)
    and compares with transformers' render:
    - the template does not compile there, or raises where jinja2 renders (warning:
      e.g. SmolLM3's `{% generation %}` is an unknown statement in minijinja, #815);
    - it renders other text (warning), or only other whitespace (info).
    No fix: portable rewrites change the template; the message shows the first difference.
    llama.cpp's minja is not run here (it needs a C++ build).
    """
    yield from _findings(repo, self)


RULES = [consumer_incompatible, template_portability, gguf_convert_blocker, serving_parser_mismatch, weights_metadata]
