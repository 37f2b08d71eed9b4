"""Rules about the special tokens fine-tuning and serving add around text: padding, bos and eos."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.chat.analysis import analyze
from hfdoctor.chat.turns import turn_stop
from hfdoctor.lint.edits.json_edits import json_set_value
from hfdoctor.findings import Applicability, Edit, Facet, FacetKind, Finding, Fix, Severity
from hfdoctor.repo import ModelRepo, as_id_list
from hfdoctor.repo.head import encoder_decoder, encoder_only
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule

# Tokenizer classes whose transformers 4.x fast version rebuilds tokenizer.json's
# post-processor from add_bos_token/add_eos_token (and their defaults when the flags are
# absent); every other class, and all of transformers 5.x, keeps tokenizer.json's.
FLAG_CLASSES = {
    "LlamaTokenizer": (True, False), "LlamaTokenizerFast": (True, False),
    "CodeLlamaTokenizer": (True, False), "CodeLlamaTokenizerFast": (True, False),
    "GemmaTokenizer": (True, False), "GemmaTokenizerFast": (True, False),
    "CohereTokenizerFast": (True, False), "GPTNeoXTokenizerFast": (False, False),
}


@dataclass(frozen=True)
class PostProcessor:
    """What tokenizer.json's TemplateProcessing puts around a single sequence."""

    first: str | None  # the special token before $A, if any
    last: str | None  # the special token after $A, if any
    pointer: str  # where the TemplateProcessing is, for edits
    single: list[Any]


def post_processor(repo: ModelRepo) -> PostProcessor | None:
    """tokenizer.json's TemplateProcessing (alone or inside a Sequence), or None."""
    pp = (repo.tokenizer_json or {}).get("post_processor")
    if not isinstance(pp, dict):
        return None
    candidates = [(pp, "/post_processor")]
    if pp.get("type") == "Sequence" and isinstance(pp.get("processors"), list):
        candidates = [(p, f"/post_processor/processors/{i}") for i, p in enumerate(pp["processors"])]
    for proc, pointer in candidates:
        if isinstance(proc, dict) and proc.get("type") == "TemplateProcessing" and isinstance(proc.get("single"), list):
            single = proc["single"]
            names = [item.get("SpecialToken", {}).get("id") if isinstance(item, dict) else None for item in single]
            seq = next((i for i, item in enumerate(single) if isinstance(item, dict) and "Sequence" in item), None)
            if seq is None:
                return None
            first = next((n for n in names[:seq] if n), None)
            last = next((n for n in reversed(names[seq + 1:]) if n), None)
            return PostProcessor(first, last, pointer, single)
    return None


def _flag(config: dict[str, Any], key: str) -> bool | None:
    value = config.get(key)
    return value if isinstance(value, bool) else None


@rule("TOK005", "pad-token-is-eos", Severity.WARNING, fix=FixAvailability.SOMETIMES)
def pad_token_is_eos(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The pad token is the token that ends an assistant turn (the eos of a chat model).

    Why: transformers' DataCollatorForLanguageModeling, and many fine-tuning scripts built
    on it, set the label of every pad-token id to -100. When pad is the end-of-turn token,
    every `<|im_end|>` of the training data is masked too: the model never learns to stop,
    and after fine-tuning it runs on until max_tokens (trl, alignment-handbook #127,
    unsloth #416). Serving is not affected; fine-tuning is.

    How it is decided: the tokenizer's pad_token is compared with the token the chat
    template writes after an assistant reply (or, without a vocabulary to render with,
    with an eos_token that is an end-of-turn marker). Only chat models are checked.

    Example: SmolLM2-135M-Instruct pads with <|im_end|>, its end of turn: the collator
    masks every <|im_end|> of the training data.

    Fix: sometimes; safe when config.json or generation_config.json names another pad id (the
    tokenizer is made to agree with it); unsafe when the only candidate is an unused
    special token named like a pad token (`<|finetune_right_pad_id|>`, `<pad>`) or the
    `<|endoftext|>` document separator that ChatML families pad with.

    Severity: info when the family's (or the release's) own upstream tokenizer pads with its
    end-of-turn token (SmolLM3, DeepSeek-R1, TinyLlama-Chat's '</s>', Granite 3.x's '<|end_of_text|>' at id 0,
    not Granite 4.0's, which pads with '<|pad|>'): that is the family's design, and its fine-tuning
    recipes set their own pad token. Never when the repository's own config.json or
    generation_config.json names another pad id (a contradiction inside one repository), unless
    the release's own files name that same id beside the same pad (TinyLlama-Chat's
    generation_config.json: 0; SmolLM3-3B's config files: 128004): then the copy carries the
    release's files as its makers published them (the safe fix that makes the tokenizer agree is
    still offered). Nor when the upstream named is the repository itself. Info, too, for a model that
    generates no text (an LLM2Vec encoder, a classifier): it has no end of turn to learn.
    """
    pad = repo.special_token("pad_token")
    if pad is None or repo.gguf_tokenizer is not None:
        return  # (a GGUF-only repository is served by llama.cpp, not fine-tuned)
    lineage = lineage_mod.detect(repo)
    fam = lineage.family_ref
    if not lineage_mod.chat_evidence(repo, fam, lineage.variant_ref):
        return
    stop = turn_stop(repo)
    markers = lineage_mod.TURN_END_MARKERS | set(fam.end_of_turn if fam else ())
    eos = repo.special_token("eos_token")
    stop_token = stop[0] if stop is not None else (eos if eos in markers else None)
    if stop_token is None or pad != stop_token:
        return
    file = "tokenizer_config.json" if "pad_token" in (repo.tokenizer_config or {}) else "special_tokens_map.json"
    candidate, safe = _pad_candidate(repo, stop_token)
    fix = _pad_fix(repo, candidate, safe) if candidate else None
    # The release's own pad: a variant's (TinyLlama-Chat's '</s>', where Llama-2-chat sets none) or the family's.
    upstream = fam.pad_by_design(lineage.variant_ref, repo.token_id(pad)) if fam is not None and lineage.certain else None
    release = lineage.variant_ref.display if lineage.variant_ref and lineage.variant_ref.upstream_pad_token else \
        fam.display if fam else ""
    # A config.json or generation_config.json naming another pad id contradicts the tokenizer
    # inside this repository: not a design, unless the release's own files name that same id
    # beside the same pad (TinyLlama-Chat's generation_config.json says 0, SmolLM3-3B's 128004).
    own_contradiction = safe and fam is not None and _named_pad_id(repo, candidate) == \
        fam.config_pad_by_design(lineage.variant_ref)
    by_design = upstream is not None and upstream[0] == pad and (not safe or own_contradiction)
    design = (Facet(FacetKind.UPSTREAM_DESIGN, f"{release}: {upstream[1]} pads with {upstream[0]!r}"
                    + (" beside that other pad id" if safe else "")),) if by_design else ()
    # Learning to stop is a problem of a model that generates: an encoder (an LLM2Vec embedder, a
    # classifier) has no end of turn to learn, and the policy says so at info.
    design += (Facet(FacetKind.GENERATION),)
    yield self.finding(
        repo,
        f"pad_token is {pad!r}, the token that ends every assistant turn: collators that mask pad ids "
        "(DataCollatorForLanguageModeling) mask every end of turn too, so a fine-tune never learns to stop. "
        + (f"{_named_by(repo, candidate)} Use {candidate!r} as pad_token." if safe and candidate else
           f"Use {candidate!r} as pad_token." if candidate else "Set pad_token to a token the model never emits."),
        file=file, pointer="/pad_token", fix=fix, facets=design,
    )


def _pad_candidate(repo: ModelRepo, stop_token: str) -> tuple[str | None, bool]:
    """(another pad token, whether the files make it certain)."""
    eos, bos = repo.special_token("eos_token"), repo.special_token("bos_token")
    used = {stop_token, eos, bos}
    template = repo.chat_template.text if repo.chat_template else ""
    for _, _, token in _config_pads(repo):
        if token and token not in used and token in repo.added_token_strings:
            return token, True
    unused = [t for t in repo.added_token_strings if t not in used and t not in template]
    # A token named for padding, else the document separator ChatML families pad with (Qwen: <|endoftext|>).
    named = sorted(t for t in unused if "pad" in t.lower()) or [t for t in unused if t == "<|endoftext|>"]
    return (named[0], False) if named else (None, False)


def _config_pads(repo: ModelRepo) -> Iterator[tuple[str, int, str | None]]:
    """(file, pad id, its token) of the pad id config.json and generation_config.json each name first."""
    for file, data in (("config.json", repo.config), ("generation_config.json", repo.generation_config)):
        for pad_id in as_id_list((data or {}).get("pad_token_id"))[:1]:
            yield file, pad_id, repo.id_to_token.get(pad_id)


def _named_pad_id(repo: ModelRepo, token: str | None) -> int | None:
    """The pad id config.json or generation_config.json names for `token`."""
    return next((pad_id for _, pad_id, named in _config_pads(repo) if token is not None and named == token), None)


def _named_by(repo: ModelRepo, token: str) -> str:
    """'generation_config.json names pad_token_id 0 (<unk>) already.': the file that contradicts the tokenizer."""
    for file, pad_id, named in _config_pads(repo):
        if named == token:
            return f"{file} already names pad_token_id {pad_id} ({token!r}): the tokenizer contradicts it."
    return ""


def _pad_fix(repo: ModelRepo, token: str, safe: bool) -> Fix | None:
    edits: list[Edit] = []
    for file, data in (("tokenizer_config.json", repo.tokenizer_config), ("special_tokens_map.json", repo.special_tokens_map)):
        value = (data or {}).get("pad_token")
        if value is None:
            continue
        pointer = "/pad_token/content" if isinstance(value, dict) else "/pad_token"
        edit = json_set_value(repo, file, pointer, token)
        if edit is None:
            return None
        edits.append(edit)
    if not edits:
        return None
    return Fix(f"set pad_token to {token}", tuple(edits), Applicability.SAFE if safe else Applicability.UNSAFE)


@rule("TOK006", "tokenizer-adds-eos", Severity.ERROR, fix=FixAvailability.SOMETIMES)
def tokenizer_adds_eos(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """add_bos_token/add_eos_token disagree with tokenizer.json's post-processor, or an eos is appended after the generation prompt.

    Why: which special tokens a plain `tokenizer(text)` adds depends on who reads the
    files. transformers 5.x, TGI and the tokenizers library use tokenizer.json's
    post-processor; transformers 4.x (Llama/Gemma/CodeLlama/Cohere/GPT-NeoX fast
    tokenizers) rebuilds it from tokenizer_config.json's add_bos_token/add_eos_token, and
    llama.cpp's converter lets those flags override it (transformers #30947). When they
    disagree, the same text gets different ids in training and in serving.

    An eos appended to every encode is an error on a chat model: servers and pipelines
    that encode the rendered prompt with special tokens (llama.cpp, completions endpoints,
    text-generation pipelines, SFT scripts tokenizing rendered text) put an eos right
    after the generation prompt, where the model was never trained to continue. A
    template whose generation prompt itself ends with the eos is the same error.

    Example: Llama-3.1-8B-Instruct's files with `add_eos_token: true` added to
    tokenizer_config.json (transformers #30947): tokenizer.json's post-processor adds no
    eos, but llama.cpp's converter (and transformers 4.x, for its Llama class) follow the
    flag and append one to every encode.

    Fix: sometimes; when the eos comes from add_eos_token while tokenizer.json adds none,
    setting add_eos_token to false is safe (every reader then agrees, with no eos); when
    tokenizer.json's post-processor appends it, removing it there is unsafe (it changes
    tokenization in every engine). bos disagreements have no automatic fix.

    Not reported for an encoder-decoder model (T5, BART, Pegasus, Marian...: config.json's
    is_encoder_decoder or model_type, or a PEFT adapter whose task_type is SEQ_2_SEQ_LM):
    its tokenizer ends the encoder's input with the eos by design, and the decoder starts
    from its own start token. Nor for an encoder that generates nothing (a BERT or RoBERTa
    classifier: a PEFT adapter whose task_type is SEQ_CLS, TOKEN_CLS, QUESTION_ANS or
    FEATURE_EXTRACTION, or config.json's architectures all *ForSequenceClassification and the
    like): its tokenizer ends every input with [SEP] or </s> by design; nor for a sentence-transformers
    embedder (its modules.json), which pools on the eos it appends, even on a decoder (Qwen3-Embedding).
    A checkpoint trained from a decoder whose own tokenizer appends the eos by design, keeping its
    tokenizer class (rinna's T5Tokenizer GPT-NeoX releases), is told so at info.
    """
    if encoder_decoder(repo) or encoder_only(repo):
        return
    tc = repo.tokenizer_config or {}
    eos, bos = repo.special_token("eos_token"), repo.special_token("bos_token")
    chat = repo.chat_template is not None
    pp = post_processor(repo)
    defaults = FLAG_CLASSES.get(str(tc.get("tokenizer_class")))
    add_bos, add_eos = _flag(tc, "add_bos_token"), _flag(tc, "add_eos_token")
    if pp is not None:
        pp_bos, pp_eos = pp.first is not None and pp.first == bos, pp.last is not None and pp.last == eos
        if defaults:  # transformers 4.x rebuilds the post-processor from the flags or the class defaults
            v4_bos = add_bos if add_bos is not None else defaults[0]
            v4_eos = add_eos if add_eos is not None else defaults[1]
        else:
            v4_bos, v4_eos = pp_bos, pp_eos
        flag_bos = add_bos if add_bos is not None else pp_bos  # llama.cpp's converter
        flag_eos = add_eos if add_eos is not None else pp_eos
        upstream = _upstream_appends_eos(repo)
        if pp_eos and eos and upstream:
            yield self.finding(
                repo,
                f"tokenizer.json's post-processor appends {eos!r} to every encode, as {upstream}: the base's "
                "design, which this checkpoint keeps. Encode prompts with add_special_tokens=False, as that card does.",
                file="tokenizer.json", severity=Severity.INFO,
            )
        elif pp_eos and eos:
            yield _appends_eos(repo, self, f"tokenizer.json's post-processor appends {eos!r} to every encode "
                               "(transformers, TGI, vLLM, llama.cpp)", chat, _remove_eos_fix(repo, pp))
        elif (v4_eos or flag_eos) and eos:
            readers = ("transformers 4.x and llama.cpp's converter" if v4_eos else "llama.cpp's converter")
            edit = json_set_value(repo, "tokenizer_config.json", "/add_eos_token", False)
            yield _appends_eos(
                repo, self, f"tokenizer_config.json's add_eos_token makes {readers} append {eos!r} to every encode, "
                "while tokenizer.json (transformers 5.x, TGI) appends nothing", chat,
                Fix("set add_eos_token to false in tokenizer_config.json", (edit,)) if edit else None)
        if bos and (v4_bos != pp_bos or flag_bos != pp_bos):
            readers = [r for r, v in (("transformers 4.x", v4_bos), ("llama.cpp's converter", flag_bos)) if v != pp_bos]
            yield self.finding(
                repo,
                f"tokenizer.json's post-processor {'adds' if pp_bos else 'does not add'} the bos {bos!r}, but "
                f"tokenizer_config.json's add_bos_token{' (absent: the class default)' if add_bos is None else ''} "
                f"makes {' and '.join(readers)} {'leave it out' if pp_bos else 'add it'}: the same text starts with "
                "different ids in different engines. Make add_bos_token say what tokenizer.json does.",
                file="tokenizer_config.json", pointer="/add_bos_token" if add_bos is not None else None,
                severity=Severity.WARNING,
            )
    elif add_eos and eos and repo.tokenizer_json is None:
        edit = json_set_value(repo, "tokenizer_config.json", "/add_eos_token", False)
        yield _appends_eos(repo, self, f"tokenizer_config.json's add_eos_token makes the tokenizer append {eos!r} to "
                           "every encode", chat,
                           Fix("set add_eos_token to false in tokenizer_config.json", (edit,)) if edit else None)
    yield from _prompt_ends_with_eos(repo, self, eos)


# Decoders whose own tokenizer appends the eos to every encode, by the design of the class they ship:
# rinna's Japanese GPT-NeoX and GPT-2 releases (japanese-gpt-neox-3.6b and its -instruction-sft/-ppo,
# japanese-gpt-1b, bilingual-gpt-neox-4b) ship a T5Tokenizer (spiece.model), which ends every encode with
# </s>; their cards encode prompts with add_special_tokens=False.
EOS_APPENDING_BASES = (("rinna/", "T5Tokenizer", "rinna's own T5Tokenizer does for its GPT-NeoX and GPT-2 releases"),)


def _upstream_appends_eos(repo: ModelRepo) -> str | None:
    """Which upstream's own tokenizer appends the eos, when this checkpoint was trained from one that
    does and keeps its tokenizer class (an adapter on rinna/japanese-gpt-neox-3.6b)."""
    tokenizer_class = str((repo.tokenizer_config or {}).get("tokenizer_class"))
    names = lineage_mod.trained_from(repo) + lineage_mod.card_base_models(repo)
    for prefix, cls, what in EOS_APPENDING_BASES:
        base = next((n for n in names if n.lower().startswith(prefix)), None)
        if base is not None and tokenizer_class == cls:
            return f"{base}'s tokenizer does ({what})"
    return None


def _appends_eos(repo: ModelRepo, self: Rule, what: str, chat: bool, fix: Fix | None) -> Finding:
    return self.finding(
        repo,
        what + (": every prompt a server or pipeline encodes with special tokens ends with an eos after the "
                "generation prompt, where the model was never trained to go on. " if chat else
                ": generation from any encoded prompt starts after an end of sequence. ")
        + "A causal language model should add no eos when encoding.",
        file="tokenizer_config.json" if fix is None or fix.edits[0].file == "tokenizer_config.json" else "tokenizer.json",
        pointer="/add_eos_token" if "add_eos_token" in (repo.tokenizer_config or {}) else None,
        severity=Severity.ERROR if chat else Severity.WARNING, fix=fix,
    )


def _remove_eos_fix(repo: ModelRepo, pp: PostProcessor) -> Fix | None:
    single = list(pp.single)
    while single and isinstance(single[-1], dict) and "SpecialToken" in single[-1]:
        single.pop()
    edit = json_set_value(repo, "tokenizer.json", f"{pp.pointer}/single", single)
    if edit is None:
        return None
    return Fix("remove the eos from tokenizer.json's post-processor", (edit,), Applicability.UNSAFE)


def _prompt_ends_with_eos(repo: ModelRepo, self: Rule, eos: str | None) -> Iterator[Finding]:
    template = repo.chat_template
    if template is None or not eos:
        return
    prompt, without = (analyze(repo, template.text).rendered("user", flag) for flag in (True, False))
    if prompt is None or without is None or prompt == without:
        return  # generation-prompt-noop says it
    if prompt.rstrip().endswith(eos):
        yield self.finding(
            repo,
            f"the generation prompt ends with the eos {eos!r} ({prompt[-40:]!r}): the model is asked to continue after "
            "an end of sequence on every request. End the generation prompt with the assistant header.",
            file=template.file, pointer=template.pointer,
        )


RULES = [pad_token_is_eos, tokenizer_adds_eos]
