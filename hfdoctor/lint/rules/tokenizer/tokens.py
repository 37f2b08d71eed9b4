"""Rules about the tokenizer files and the ids other files refer to."""

from __future__ import annotations

from typing import Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.lineage.adapter_base import adapter_base
from hfdoctor.knowledge import registry
from hfdoctor.chat.turns import end_of_turn
from hfdoctor.lint.edits.json_edits import json_add_to_id_list
from hfdoctor.findings import Edit, Facet, Finding, Fix, Severity
from hfdoctor.repo import SPECIAL_TOKEN_KEYS, ModelRepo, as_id_list, token_content
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule


@rule("TOK001", "special-token-missing", Severity.ERROR, fix=FixAvailability.NONE)
def special_token_missing(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A bos/eos/pad/unk token named in the config files is not in the vocabulary, or ids disagree.

    Why: a special token that is not a single vocabulary entry is tokenized as plain
    text, so the model never sees the id it was trained on (and generation never emits
    it, so it never stops). An id in config.json or generation_config.json that names no
    token makes transformers index past the embedding or stop on a random token.
    When tokenizer_config.json and special_tokens_map.json name different tokens, tools
    that read one file (TGI, llama.cpp converters) disagree with those that read the other.
    transformers reads tokenizer_config.json's, except when it has no added_tokens_decoder
    (the legacy layout): then special_tokens_map.json overrides it, and a null there
    (`"pad_token": null` overridden by the map's token) is info.
    config.json and generation_config.json giving other eos ids (sharing none) is a
    warning; another bos id is info unless the tokenizer's bos is in neither; pad: info.
    A bos_token other than the one the family (known for certain) starts every sequence
    with (Gemma's `<bos>`) is an error: the model never sees its bos.

    Example: eos_token "<|im_end|>" in a repo whose tokenizer.json came from Llama.

    Fix: none automatic; name tokens that exist, or add them to the tokenizer.
    """
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
            yield self.finding(
                repo,
                f"{key} is {a!r} in tokenizer_config.json but {b!r} in special_tokens_map.json: transformers uses the "
                "first, tools that read special_tokens_map.json use the second.",
                file="special_tokens_map.json", pointer=f"/{key}", severity=Severity.WARNING,
            )
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
    yield from _gguf_disagreements(repo, self)
    yield from _config_disagreements(repo, self)
    yield from _family_bos(repo, self)
    # The tokenizer's own eos must be one of the ids generation stops on.
    eos = repo.special_token("eos_token")
    eos_id = repo.token_id(eos) if eos else None
    if eos_id is not None and repo.eos_ids and eos_id not in repo.eos_ids:
        yield self.finding(
            repo,
            f"the tokenizer's eos_token {eos!r} is id {eos_id}, but {repo.eos_ids_source} stops on "
            f"{repo.eos_ids}: pipelines that stop on tokenizer.eos_token_id and engines that read the "
            "config disagree on where a reply ends.",
            file=repo.eos_ids_source, pointer="/eos_token_id", severity=Severity.WARNING,
        )


def _family_bos(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The tokenizer names another bos than the one its family starts every sequence with
    (a Gemma 2 fine-tune whose bos_token is <eos> or <start_of_turn>): `<bos>` is never
    emitted, and Gemma without it degrades badly. Only for a family known for certain."""
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


def _config_disagreements(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """config.json and generation_config.json give other bos/eos/pad ids (no tokenizer needed).

    generate() and vLLM read generation_config.json; mlx-lm before 0.30.1, some training
    code (model.config.pad_token_id) and exporters read config.json. eos sets that share
    no id stop generation in different places (warning); one a subset of the other is
    generation-config's concern. A bos that differs is info (the tokenizer adds its own)
    unless the tokenizer's bos id is in neither file (warning); pad: info.
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
        effect = {"eos_token_id": "engines that read one file stop generation where the others do not",
                  "bos_token_id": "code that starts sequences from the config and generate() start them differently",
                  "pad_token_id": "training code reading model.config pads with another id than generate()"}[key]
        yield self.finding(
            repo,
            f"config.json's {key} is {named(ours)} but generation_config.json's is {named(theirs)}: {effect}.{why}",
            file="config.json", pointer=f"/{key}", severity=severity,
        )


def _declared_id(repo: ModelRepo, token: str) -> int | None:
    """The token's id, from the vocabulary or, without one, tokenizer_config.json's added_tokens_decoder."""
    found = repo.token_id(token)
    if found is not None:
        return found
    return next((token_id for token_id, content in repo.added_tokens_decoder.items() if content == token), None)


def _gguf_disagreements(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """GGUF files beside the tokenizer files: llama.cpp reads the GGUF's copy, transformers the files."""
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


@rule("TOK002", "added-tokens-inconsistent", Severity.ERROR, fix=FixAvailability.NONE)
def added_tokens_inconsistent(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """`added_tokens_decoder` in tokenizer_config.json disagrees with tokenizer.json's added tokens.

    Why: transformers builds the fast tokenizer from tokenizer.json, then re-adds every
    entry of added_tokens_decoder. An id that maps to different text in the two files
    means the same token gets two ids (or one id decodes to two texts): training data
    tokenized by one stack and served by another no longer agree.

    Example: a fine-tune added `<tool_call>` to tokenizer_config.json by hand but not to
    tokenizer.json.

    Fix: none automatic; regenerate both files with `tokenizer.save_pretrained()`.
    """
    decoder = repo.added_tokens_decoder
    added = repo.tokenizer_json_added
    if not decoder or repo.tokenizer_json is None:
        return
    vocab = repo.vocab or {}
    for token_id, content in sorted(decoder.items()):
        pointer = f"/added_tokens_decoder/{token_id}"
        if token_id in added and added[token_id] != content:
            yield self.finding(
                repo,
                f"id {token_id} is {content!r} in tokenizer_config.json but {added[token_id]!r} in tokenizer.json.",
                file="tokenizer_config.json", pointer=pointer,
            )
        elif token_id not in added and vocab.get(content) != token_id:
            real = vocab.get(content)
            yield self.finding(
                repo,
                f"tokenizer_config.json adds {content!r} as id {token_id}, which tokenizer.json does not have"
                + (f" (there it is id {real})" if real is not None else "")
                + ": transformers appends it under a new id, so its id differs between tools.",
                file="tokenizer_config.json", pointer=pointer,
            )
    for token_id, content in sorted(added.items()):
        if token_id not in decoder:
            yield self.finding(
                repo,
                f"tokenizer.json has added token {content!r} (id {token_id}) that tokenizer_config.json's "
                "added_tokens_decoder lacks: slow tokenizers and tools reading tokenizer_config.json miss it.",
                file="tokenizer_config.json", pointer="/added_tokens_decoder", severity=Severity.WARNING,
            )


@rule("TOK003", "tokenizer-lineage-mismatch", Severity.ERROR, fix=FixAvailability.NONE)
def tokenizer_lineage_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The tokenizer belongs to another model family than config.json declares.

    Why: token ids only mean something to the weights they were trained with. A Llama 3
    tokenizer in front of Qwen3 weights feeds the model ids from another vocabulary:
    output is garbage, and special tokens (end of turn, <think>) land on unrelated rows.

    How it is decided: the config's model_type gives candidate families; the tokenizer
    is fingerprinted independently (its vocabulary at fixed ids, how it encodes a fixed
    text, and its signature special tokens with their ids). No family in common is a
    mismatch.

    Example: Qwen3-8B's config.json and weights with Llama-3.1-8B-Instruct's tokenizer.json
    (model_type qwen3, a Llama 3 vocabulary).

    Fix: none automatic; ship the tokenizer of the model the weights come from.
    """
    if repo.config is None:
        return
    from_config = lineage_mod.config_families(repo)
    from_tokenizer = lineage_mod.tokenizer_families(repo)
    if not from_config or not from_tokenizer:
        return
    if {f.key for f in from_config} & {f.key for f in from_tokenizer}:
        return
    model_type = registry.config_value(repo.config, "model_type")
    tok_names = ", ".join(f.display for f in from_tokenizer)
    cfg_names = ", ".join(f.display for f in from_config)
    group = registry.vocab_groups().get(lineage_mod.vocab_sample(repo) or "")
    evidence = []
    if group:
        evidence.append(f"its vocabulary is the {group} one")
    sig = from_tokenizer[0].signature_tokens
    shown = [f"{t}={i}" for t, i in list(sig.items())[:3] if i is not None]
    if shown:
        evidence.append("it has " + ", ".join(shown))
    file = "tokenizer.json" if repo.tokenizer_json is not None else "tokenizer_config.json"
    yield self.finding(
        repo,
        f"config.json declares model_type {model_type!r} ({cfg_names}) but the tokenizer is {tok_names}"
        + (f" ({'; '.join(evidence)})" if evidence else "")
        + ": the weights would receive ids from another vocabulary. Ship the tokenizer the weights were trained with.",
        file=file,
    )


@rule("TOK004", "eos-not-end-of-turn", Severity.ERROR, fix=FixAvailability.SAFE)
def eos_not_end_of_turn(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The token that ends an assistant turn in the chat template is not an eos id.

    Why: the model learned to end every reply with the template's end-of-turn token
    (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`...). transformers' generate(), vLLM and
    TGI stop only on the eos ids of generation_config.json (config.json's when there is
    none). If the end-of-turn id is not among them, generation runs past the reply: the
    model writes the next user turn itself, or babbles until max_tokens.

    How it is found: render a conversation ending with an assistant reply and take the
    first token after the reply's text, which must be a control token (an added or
    special token). Harmony templates (gpt-oss) are judged on their stop tokens:
    `<|return|>` (the answer is done: error when missing) and `<|call|>` (a tool call:
    warning), never on `<|end|>`, which also closes the reasoning channel.

    When the template writes plain text after the reply (a newline, `[`, `<`), there is
    no token to stop on: that is reported as info, with no fix (servers need a stop
    string, or the model must emit an eos token of its own).

    Example: Qwen3 fine-tune whose generation_config.json has eos_token_id 151643
    (<|endoftext|>) only, while the template ends turns with <|im_end|> (151645).

    Severity: error for a chat model, warning when the repository shows no chat evidence,
    info for a checkpoint that says it is pre-trained (a base model: its template is for
    the fine-tunes built on it, and it is not served as a chat model).

    A PEFT adapter (no config.json, no generation_config.json: by design) stops where its
    base model stops: its end of turn is judged by the base's stop ids, read from the base's
    files in --upstream DIR or the Hugging Face cache, else from what hfdoctor's registry knows
    of the release (a chat release stops on its family's end-of-turn tokens). A base that
    stops elsewhere is a warning with no fix (the adapter cannot change it); a base hfdoctor
    cannot identify or read is info ("cannot verify without the base model").

    Fix: safe; add the end-of-turn id to generation_config.json's eos_token_id, keeping
    the ids already there. Only ever a control token's id.
    """
    template = repo.chat_template
    if template is None or not repo.vocab:
        return
    found = end_of_turn(repo, template.text)
    if found is None:
        return
    source = repo.eos_ids_source
    if found.token is None:
        yield self.finding(
            repo,
            f"the chat template writes plain text after an assistant reply ({found.context!r}), no control token: "
            "there is no end-of-turn id to stop generation on. Servers stop only on eos ids or configured stop "
            "strings; make sure the model emits an eos token after its replies, or end turns with one.",
            file=template.file, pointer=template.pointer, severity=Severity.INFO,
        )
        return
    if repo.is_adapter and repo.config is None and repo.generation_config is None:
        yield from _adapter_turn_end(repo, self, found.stops or (found.token,), template)
        return
    eos_ids = repo.eos_ids
    names = ", ".join(f"{i} ({repo.id_to_token.get(i, '?')})" for i in eos_ids) or "nothing"
    if found.stops:
        for stop in found.stops:
            stop_id = repo.token_id(stop)
            if stop_id is None or stop_id in eos_ids:
                continue
            answer = stop == found.stops[0]
            yield self.finding(
                repo,
                f"the chat template is harmony-style: generation must stop on {stop!r} (id {stop_id}), "
                + ("which ends the final answer" if answer else "which ends a tool call")
                + f", but {source} stops on {names}: "
                + ("replies run on past the answer until max_tokens. " if answer else
                   "after a tool call the model keeps generating instead of waiting for the result. ")
                + f"Add {stop_id} to {source}'s eos_token_id (not <|end|>: it also closes the reasoning channel).",
                file=source, pointer="/eos_token_id",
                severity=self.severity if answer else Severity.WARNING,
                fix=_add_eos_fix(repo, source, stop_id),
            )
        return
    if found.token_id is None or found.token_id in eos_ids:
        return
    fam = registry.family(lineage_mod.detect(repo).family)
    chat = bool(lineage_mod.chat_evidence(repo, fam))
    yield self.finding(
        repo,
        f"the chat template ends each assistant turn with {found.token!r} (id {found.token_id}), but {source} "
        f"stops generation on {names}: replies will run past the end of the turn until max_tokens. "
        f"Add {found.token_id} to {source}'s eos_token_id.",
        file=source, pointer="/eos_token_id",
        severity=Severity.ERROR if chat else Severity.WARNING,
        fix=_add_eos_fix(repo, source, found.token_id), facets=(Facet.CHAT_ONLY,),
    )


def _adapter_turn_end(repo: ModelRepo, self: Rule, needed: tuple[str, ...], template) -> Iterator[Finding]:
    """An adapter stops where its base model stops: judge the template's end of turn by the base's
    stop ids (its files, else what the registry knows of the release), never by files an adapter
    does not have."""
    base = adapter_base(repo)
    token = needed[0]
    token_id = repo.token_id(token)
    if base is None or token_id is None:
        return
    if base.eos_ids is not None:
        if token_id in base.eos_ids:
            return
        stops = ", ".join(f"{i} ({repo.id_to_token.get(i, '?')})" for i in base.eos_ids) or "nothing"
        because = f"the base model {base.repo_id} stops generation on {stops} ({base.eos_source})"
    elif base.stop_tokens:
        if token in base.stop_tokens:
            return
        because = (f"the base model {base.repo_id} ({base.family.display} chat release) stops on "
                   f"{', '.join(base.stop_tokens)}")
    else:
        yield self.finding(
            repo,
            f"this PEFT adapter's chat template ends each assistant turn with {token!r} (id {token_id}); an adapter "
            "stops where its base model stops, and hfdoctor " + base.cannot_verify("that the base stops on it")
            + ".", file=template.file, pointer=template.pointer, severity=Severity.INFO,
        )
        return
    yield self.finding(
        repo,
        f"this PEFT adapter's chat template ends each assistant turn with {token!r} (id {token_id}), but {because}: "
        "PEFT, vLLM (--enable-lora) and TGI take the stop ids from the base, so replies run past the end of the "
        f"turn until max_tokens. An adapter cannot change them: serve it with {token!r} as a stop token, or "
        "train it on the base's template.",
        file=template.file, pointer=template.pointer, severity=Severity.WARNING, facets=(Facet.CHAT_ONLY,),
    )


def _add_eos_fix(repo: ModelRepo, source: str, token_id: int) -> Fix | None:
    """The edit that appends `token_id` to eos_token_id, for a control token only."""
    if repo.id_to_token.get(token_id) not in repo.added_token_strings:
        return None  # never an ordinary piece of text as a stop id
    edit: Edit | None = json_add_to_id_list(repo, source, "/eos_token_id", token_id)
    if edit is None:
        return None
    return Fix(f"add {token_id} to {source} eos_token_id", (edit,))


RULES = [special_token_missing, added_tokens_inconsistent, tokenizer_lineage_mismatch, eos_not_end_of_turn]
