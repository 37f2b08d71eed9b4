"""Rules about the special tokens (bos/eos/pad/unk) and their ids agreeing across files.

These were one rule, TOK001 special-token-missing, until 0.4: each kind of finding now has
its own code, and each answers to TOK001 as an alias (`--select`/`--ignore TOK001` still
take them all). TOK001 keeps the core case: a named special token is not in the vocabulary.
Their codes follow the order the one rule emitted its findings in, so a report lists the
findings of one file and line in the order it did before the split.
"""

from __future__ import annotations

from typing import Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.lineage.adapter_base import config_is_the_bases
from hfdoctor.findings import Facet, FacetKind, Finding, Severity
from hfdoctor.repo.vocabulary import has_whole_vocabulary
from hfdoctor.repo import SPECIAL_TOKEN_KEYS, ModelRepo, as_id_list, token_content
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule

OLD_CODE = ("TOK001",)


@rule("TOK001", "special-token-missing", Severity.ERROR, fix=FixAvailability.NONE)
def special_token_missing(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A bos/eos/pad/unk token named in the tokenizer files is not a token of the vocabulary.

    Why: a special token that is not a single vocabulary entry is tokenized as plain
    text, so the model never sees the id it was trained on (and generation never emits
    it, so it never stops). The file named is the one transformers reads the token from:
    tokenizer_config.json, or special_tokens_map.json when tokenizer_config.json has no
    added_tokens_decoder (the legacy layout, where the map overrides it).

    Until 0.4 this code also covered the checks that are now TOK007 to TOK012;
    `--select TOK001` and `--ignore TOK001` still take them all.

    Example: Qwen3-8B's tokenizer_config.json with eos_token "<|im_stop|>" (a typo of
    "<|im_end|>"): its tokenizer.json has no such token.

    Not judged when the folder holds only its added tokens (added_tokens.json or
    added_tokens_decoder, no tokenizer.json, vocab.json or GGUF tokenizer): a Gemma 3 adapter
    saved with one added token names '<bos>' and '<eos>', tokens of the vocabulary it left out.

    Fix: none automatic; name tokens that exist, or add them to the tokenizer.
    """
    if not has_whole_vocabulary(repo):
        return  # only added tokens are at hand: a special token of the base vocabulary cannot be judged
    vocab = repo.vocab
    for key in SPECIAL_TOKEN_KEYS:
        token = repo.special_token(key)
        if token is None or vocab is None:
            continue
        if token not in vocab:
            in_map = key in (repo.special_tokens_map or {}) and (repo.special_tokens_map_overrides
                                                                 or key not in (repo.tokenizer_config or {}))
            where = "special_tokens_map.json" if in_map else "tokenizer_config.json"
            yield self.finding(
                repo,
                f"{key} {token!r} is not a token of the vocabulary ({len(vocab)} entries): it will be split "
                "into pieces, so the model never sees or emits the id it was trained with.",
                file=where, pointer=f"/{key}",
            )


@rule("TOK007", "special-tokens-map-mismatch", Severity.WARNING, fix=FixAvailability.NONE, aliases=OLD_CODE)
def special_tokens_map_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """tokenizer_config.json and special_tokens_map.json name different bos/eos/pad/unk tokens.

    Why: tools that read one file (TGI, llama.cpp converters) disagree with those that
    read the other. transformers reads tokenizer_config.json's, except when it has no
    added_tokens_decoder (the legacy layout): then special_tokens_map.json overrides it.

    Severity: warning; info when tokenizer_config.json's value is null and the legacy
    layout lets the map supply the token (transformers uses the map's), and info for a pad
    tokenizer_config.json leaves null beside added_tokens_decoder: transformers then has no pad
    and asks for one when a batch needs it, which decides nothing about where text starts or stops.

    Example: Mistral-7B-Instruct-v0.2, whose tokenizer_config.json says "eos_token": "</s>",
    with "eos_token": "<unk>" in its special_tokens_map.json: tokenizer_config.json has
    added_tokens_decoder, so transformers stops on </s>, while tools that read the map stop on
    <unk> (warning).

    Fix: none automatic; make the two files name the same tokens (`save_pretrained()`
    writes both).
    """
    tc, stm = repo.tokenizer_config or {}, repo.special_tokens_map or {}
    for key in SPECIAL_TOKEN_KEYS:
        a, b = token_content(tc.get(key)), token_content(stm.get(key))
        if key in tc and key in stm and a != b:
            if repo.special_tokens_map_overrides:
                # transformers merges special_tokens_map.json over tokenizer_config.json here.
                yield self.finding(
                    repo,
                    f"{key} is {a!r} in tokenizer_config.json but {b!r} in special_tokens_map.json: transformers "
                    "uses the second (tokenizer_config.json has no added_tokens_decoder, so special_tokens_map.json "
                    "overrides it); tools that read only tokenizer_config.json see the first.",
                    file="tokenizer_config.json", pointer=f"/{key}",
                    severity=Severity.INFO if a is None else Severity.WARNING,
                )
                continue
            # A pad tokenizer_config.json leaves unset is no disagreement about where text starts or stops:
            # transformers simply has no pad, and asks for one the first time a batch needs padding.
            unset_pad = key == "pad_token" and a is None
            yield self.finding(
                repo,
                f"{key} is {a!r} in tokenizer_config.json but {b!r} in special_tokens_map.json: transformers uses the "
                "first, tools that read special_tokens_map.json use the second."
                + (" An unset pad only matters for batching, where transformers asks for one." if unset_pad else ""),
                file="special_tokens_map.json", pointer=f"/{key}",
                severity=Severity.INFO if unset_pad else Severity.WARNING,
            )


@rule("TOK008", "special-token-id-unknown", Severity.ERROR, fix=FixAvailability.NONE, aliases=OLD_CODE)
def special_token_id_unknown(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A bos/eos/pad/decoder-start id in config.json or generation_config.json names no token of the tokenizer.

    Why: generation stops on (or pads with) that id, and the tokenizer can never produce
    it: an id beyond the vocabulary makes transformers index past the embedding, one
    inside it stops on a random token or never stops at all.

    Example: Qwen3-8B's generation_config.json with "eos_token_id": [151645, 999999]
    (999999 is beyond its vocab_size 151936).

    Fix: none automatic; use the ids the tokenizer gives its special tokens.
    """
    if not has_whole_vocabulary(repo):
        return  # only added tokens are at hand (no tokenizer.json, vocab.json or GGUF): the base ids cannot be judged
    id_to_token = repo.id_to_token
    vocab_size = (repo.config or {}).get("vocab_size")
    for rel, data in (("config.json", repo.config), ("generation_config.json", repo.generation_config)):
        if not data or not id_to_token:
            continue
        for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
            for i, token_id in enumerate(as_id_list(data.get(key))):
                if token_id in id_to_token:
                    continue
                beyond = isinstance(vocab_size, int) and token_id >= vocab_size
                pointer = f"/{key}" if not isinstance(data.get(key), list) else f"/{key}/{i}"
                yield self.finding(
                    repo,
                    f"{rel} {key} {token_id} names no token of the tokenizer"
                    + (f" and is beyond vocab_size {vocab_size}" if beyond else "")
                    + ": generation would stop on (or pad with) an id the tokenizer cannot produce.",
                    file=rel, pointer=pointer,
                )


@rule("TOK009", "gguf-tokenizer-mismatch", Severity.WARNING, fix=FixAvailability.NONE, aliases=OLD_CODE)
def gguf_tokenizer_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A GGUF file beside the tokenizer files carries another vocabulary, bos or eos than they do.

    Why: llama.cpp, Ollama and LM Studio read the GGUF's own copy of the tokenizer,
    transformers reads the tokenizer files: when they differ, the two tokenize the same
    text differently, or start and stop sequences on different tokens. A GGUF-only
    repository is not judged (there the GGUF is the tokenizer); convert_hf_to_gguf's
    padding of the vocabulary up to vocab_size is not a difference.

    Example: a Q8_0 GGUF of Qwen3-8B converted with eos_token "<|endoftext|>", beside
    tokenizer files whose eos_token is "<|im_end|>".

    Fix: none automatic (a GGUF's metadata is never edited in place); re-convert the GGUF
    from these tokenizer files.
    """
    vocab = repo.vocab
    if repo.gguf_tokenizer is not None or not vocab:
        return  # a GGUF-only repo: the GGUF is the tokenizer
    for rel, gguf in repo.gguf.tokenizers.items():
        # convert_hf_to_gguf pads the list up to vocab_size; every real token keeps its id.
        moved = [t for t, i in vocab.items() if gguf.vocab.get(t) != i]
        if moved:
            yield self.finding(
                repo, f"{rel} carries another vocabulary than the tokenizer files ({len(moved)} tokens are missing or "
                f"have other ids there, e.g. {moved[0]!r}): llama.cpp and transformers tokenize differently.",
                file=rel, severity=Severity.WARNING,
            )
            continue
        for key in ("bos_token", "eos_token"):
            ours, theirs = repo.special_token(key), gguf.specials.get(key)
            if ours and theirs and ours != theirs:
                yield self.finding(
                    repo, f"{rel} says {key} is {theirs!r}, the tokenizer files say {ours!r}: llama.cpp and "
                    "transformers start or stop sequences on different tokens. Re-convert the GGUF from these files.",
                    file=rel, severity=Severity.WARNING,
                )


@rule("TOK010", "special-token-ids-mismatch", Severity.WARNING, fix=FixAvailability.NONE, aliases=OLD_CODE)
def special_token_ids_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """config.json and generation_config.json give other bos/eos/pad ids.

    Why: generate() and vLLM read generation_config.json; mlx-lm before 0.30.1, some
    training code (model.config.pad_token_id) and exporters read config.json. eos sets
    that share no id stop generation in different places. One eos set that extends the
    other (Qwen3-8B, gpt-oss, Llama 3.1 Instruct stop on more ids in
    generation_config.json) is not reported here: generation-config says when that matters.
    No tokenizer is needed.

    Severity: warning for eos sets that share no id; info for pad, and for a bos that
    differs while the tokenizer's own bos is in one of the files or unknown (the
    tokenizer adds its own bos; generate() reads this id only to start an empty prompt);
    warning when the tokenizer's bos id is in neither file.

    Example: DeepSeek-R1-Distill-Qwen-32B's config.json keeps Qwen2.5's bos_token_id
    151643 (<|endoftext|>) while its generation_config.json and tokenizer use
    <｜begin▁of▁sentence｜> 151646 (info). An eos that the family's own generation_config.json
    gives against its own config.json (Falcon-RW: 2 against 50256), saved unchanged by a
    fine-tune, is upstream's disagreement: info.

    Fix: none automatic; make the two files give the same ids.
    """
    config, generation = repo.config, repo.generation_config
    if not isinstance(config, dict) or not isinstance(generation, dict):
        return
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}

    def named(ids: list[int]) -> str:
        return ", ".join(f"{i} ({repo.id_to_token[i]})" if i in repo.id_to_token else str(i) for i in ids)

    for key in ("eos_token_id", "bos_token_id", "pad_token_id"):
        ours = as_id_list(config.get(key, text.get(key)))
        theirs = as_id_list(generation.get(key))
        if not ours or not theirs or set(ours) == set(theirs):
            continue
        if key == "eos_token_id" and set(ours) & set(theirs):
            continue  # one stops on more: generation-config says when that matters
        severity = Severity.WARNING
        why = ""
        if key == "bos_token_id":
            # generate() reads generation_config.json's bos only to start an empty prompt, and
            # the tokenizer adds its own: a stale copy is a note unless the tokenizer's bos is
            # in neither file.
            bos = repo.special_token("bos_token")
            bos_id = _declared_id(repo, bos) if bos is not None else None
            if bos_id is None or bos_id in ours or bos_id in theirs:
                severity = Severity.INFO
                why = (f" The tokenizer's bos_token {bos!r} is id {bos_id}." if bos_id is not None else
                       " The tokenizer adds its own bos_token; generate() reads this id only to start an empty prompt.")
        elif key == "pad_token_id":
            severity = Severity.INFO
        elif (upstream := _upstream_generation_eos(repo)) is not None and set(theirs) == set(upstream[0]):
            severity = Severity.INFO
            why = (f" {upstream[1]}'s own generation_config.json stops on {named(list(upstream[0]))} too: the base's "
                   "disagreement, which a fine-tune that saved that file unchanged inherits.")
        effect = {"eos_token_id": "engines that read one file stop generation where the others do not",
                  "bos_token_id": "code that starts sequences from the config and generate() start them differently",
                  "pad_token_id": "training code reading model.config pads with another id than generate()"}[key]
        yield self.finding(
            repo,
            f"config.json's {key} is {named(ours)} but generation_config.json's is {named(theirs)}: {effect}.{why}",
            file="config.json", pointer=f"/{key}", severity=severity,
        )


def _upstream_generation_eos(repo: ModelRepo) -> tuple[tuple[int, ...], str] | None:
    """The eos ids the family's own generation_config.json stops on, where they disagree with its own
    config.json, for a family known for certain."""
    lineage = lineage_mod.detect(repo)
    fam = lineage.family_ref if lineage.certain and not lineage.disagree else None
    return fam.upstream_generation_eos if fam is not None else None


def _declared_id(repo: ModelRepo, token: str) -> int | None:
    """The token's id, from the vocabulary or, without one, tokenizer_config.json's added_tokens_decoder."""
    found = repo.token_id(token)
    if found is not None:
        return found
    return next((token_id for token_id, content in repo.added_tokens_decoder.items() if content == token), None)


@rule("TOK011", "family-bos-mismatch", Severity.ERROR, fix=FixAvailability.NONE, aliases=OLD_CODE)
def family_bos_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The tokenizer's bos_token is not the one its model family starts every sequence with.

    Why: the tokenizer, and templates that write `{{ bos_token }}`, put the configured bos
    first, so the model never sees the bos it was trained on; Gemma without its `<bos>`
    degrades badly. Only judged for a family known for certain (lineage certain and not
    contradicted) whose bos is in this vocabulary.

    Example: a Gemma 2 fine-tune (Hosiny89/Gemma2-fine-tuning) whose tokenizer_config.json
    and special_tokens_map.json say "bos_token": "<start_of_turn>" instead of "<bos>".

    Fix: none automatic; set bos_token to the family's (`<bos>` for Gemma).
    """
    lineage = lineage_mod.detect(repo)
    fam = lineage.family_ref if lineage.certain and not lineage.disagree else None
    bos = repo.special_token("bos_token")
    if fam is None or fam.bos_token is None or bos is None or bos == fam.bos_token:
        return
    if repo.vocab is not None and fam.bos_token not in repo.vocab:
        return  # not this family's vocabulary after all
    where = "tokenizer_config.json" if "bos_token" in (repo.tokenizer_config or {}) else "special_tokens_map.json"
    yield self.finding(
        repo,
        f"bos_token is {bos!r}, but every {fam.display} sequence starts with {fam.bos_token!r}: the tokenizer and "
        f"templates that write {{{{ bos_token }}}} put {bos!r} first, so the model never sees the {fam.bos_token!r} "
        f"it was trained on. Set bos_token to {fam.bos_token!r}.",
        file=where, pointer="/bos_token",
    )


@rule("TOK012", "eos-not-stop-id", Severity.WARNING, fix=FixAvailability.NONE, aliases=OLD_CODE)
def eos_not_stop_id(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The tokenizer's eos_token is not one of the ids generation stops on.

    Why: pipelines that stop on tokenizer.eos_token_id (and code that appends it to
    training examples) and engines that read generation_config.json's eos_token_id
    (config.json's when there is none) disagree on where a reply ends.

    Example: the Yi-1.5 merge YouriLalain/2PRYMMAL-Yi1.5-6B-SLERP: its tokenizer's
    eos_token is "<|im_end|>" (the chat end of turn), while config.json (there is no
    generation_config.json) stops on id 2 (<|endoftext|>) only.

    A stop id the family's own generation_config.json gives (Falcon-RW: 2), saved unchanged
    by a fine-tune, is upstream's design: info. So is a config.json beside a PEFT adapter that
    names its base (the base's config an Unsloth run saved there, or a hand-made stub): no loader
    of the adapter reads it.

    Fix: none automatic; add the eos id to eos_token_id, or name the end-of-turn token as
    the tokenizer's eos_token.
    """
    eos = repo.special_token("eos_token")
    eos_id = repo.token_id(eos) if eos else None
    if eos_id is not None and repo.eos_ids and eos_id not in repo.eos_ids:
        if repo.eos_ids_source == "config.json" and repo.generation_config is None and config_is_the_bases(repo):
            yield self.finding(
                repo,
                f"config.json stops on {repo.eos_ids} while the tokenizer's eos_token {eos!r} is id {eos_id}, but it "
                "sits beside a PEFT adapter that names its base: PEFT and vLLM load that base with its own "
                "config.json and generation_config.json, so this file never says where the adapter's replies end.",
                file="config.json", pointer="/eos_token_id", severity=Severity.INFO)
            return
        upstream = _upstream_generation_eos(repo) if repo.eos_ids_source == "generation_config.json" else None
        inherited = upstream is not None and set(repo.eos_ids) == set(upstream[0])
        yield self.finding(
            repo,
            f"the tokenizer's eos_token {eos!r} is id {eos_id}, but {repo.eos_ids_source} stops on "
            f"{repo.eos_ids}: pipelines that stop on tokenizer.eos_token_id and engines that read the "
            "config disagree on where a reply ends."
            + (f" {upstream[1]}'s own generation_config.json stops there too: the base's design, which a "
               "fine-tune that saved that file unchanged inherits." if inherited else ""),
            file=repo.eos_ids_source, pointer="/eos_token_id",
            severity=Severity.INFO if inherited else Severity.WARNING, facets=(Facet(FacetKind.GENERATION),),
        )


RULES: list[Rule] = [special_token_missing, special_tokens_map_mismatch, special_token_id_unknown,
                     gguf_tokenizer_mismatch, special_token_ids_mismatch, family_bos_mismatch, eos_not_stop_id]
