"""Rules about the tokenizer files and the ids other files refer to."""

from __future__ import annotations

from typing import Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.lineage.adapter_base import adapter_base, config_is_the_bases, release_stage
from hfdoctor.knowledge import registry
from hfdoctor.chat.turns import end_of_turn
from hfdoctor.lint.edits.json_edits import json_add_to_id_list
from hfdoctor.findings import Edit, Facet, FacetKind, Finding, Fix, Severity
from hfdoctor.repo import GENAI_CONFIG, ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule


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
    text, and its signature special tokens with their ids). A family is an architecture and
    a tokenizer: the pairs people publish are known (Falcon3 is model_type llama with its own
    131,072-token vocabulary; MiMo is model_type mimo with Qwen2's), and a vocabulary the
    config's family is known to use is no swap. No family in common is a mismatch when the
    architecture itself says which tokenizer goes with it (qwen3, gemma2) or the config's
    dimensions name a release; under an architecture many families reuse with vocabularies of
    their own (llama, mistral, gpt2) an unknown pair is reported at info, as unknown.

    Example: Qwen3-8B's config.json and weights with Llama-3.1-8B-Instruct's tokenizer.json
    (model_type qwen3, a Llama 3 vocabulary).

    The same holds inside one tokenizer: a known vocabulary whose family's special tokens sit
    at other ids (<|im_end|> and <|endoftext|> swapped in a Qwen tokenizer) feeds the weights
    the row of another token for each of them, with or without config.json.

    Fix: none automatic; ship the tokenizer of the model the weights come from.
    """
    yield from _moved_special_tokens(repo, self)
    if repo.config is None:
        return
    from_config = lineage_mod.config_families(repo)
    from_tokenizer = lineage_mod.tokenizer_families(repo)
    if not from_config or not from_tokenizer:
        return
    if {f.key for f in from_config} & {f.key for f in from_tokenizer}:
        return
    group = registry.vocab_groups().get(lineage_mod.vocab_sample(repo) or "")
    if group is not None and any(f.vocab_groups == (group,) for f in from_config):
        return  # the one vocabulary the config's family ships (MiMo's is Qwen2's)
    model_type = registry.config_value(repo.config, "model_type")
    tok_names = ", ".join(f.display for f in from_tokenizer)
    cfg_names = ", ".join(f.display for f in from_config)
    if model_type in registry.shared_architectures() and not lineage_mod.dims_families(repo):
        yield self.finding(
            repo,
            f"config.json declares model_type {model_type!r}, an architecture many families reuse with vocabularies "
            f"of their own, and the tokenizer is {tok_names}'s: hfdoctor does not know this pair, so it cannot tell "
            "whether these weights were trained with this tokenizer. Check that config.json's vocab_size and the "
            "embedding rows match the tokenizer.",
            file="tokenizer.json" if repo.tokenizer_json is not None else "tokenizer_config.json",
            severity=Severity.INFO,
        )
        return
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


def _moved_special_tokens(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A known vocabulary (its tokens at fixed ids) whose family's special tokens, all present, sit
    at other ids than every tokenizer of that family gives them."""
    group = registry.vocab_groups().get(lineage_mod.vocab_sample(repo) or "")
    vocab = repo.vocab or {}
    if group is None or lineage_mod.tokenizer_families(repo):
        return
    best: tuple[registry.Family, list[str]] | None = None
    for fam in registry.families():
        signature = {t: i for t, i in fam.signature_tokens.items() if i is not None}
        if group not in fam.vocab_groups or not signature or not all(t in vocab for t in signature):
            continue
        moved = [f"{t!r} is {vocab[t]} (every {fam.display} tokenizer: {i})" for t, i in signature.items() if vocab[t] != i]
        if moved and (best is None or len(signature) > len(best[0].signature_tokens)):
            best = (fam, moved)
    if best is None:
        return
    fam, moved = best
    file = "tokenizer.json" if repo.tokenizer_json is not None else "tokenizer_config.json"
    eos = repo.special_token("eos_token")
    home = fam.signature_tokens.get(eos) if eos is not None else None
    if home is not None and len(moved) == 1 and vocab.get(eos) != home and _from_a_pretrained_release(repo):
        # The end-of-turn marker renamed onto another id, its own id given the other token's name: unsloth's
        # get_chat_template(map_eos_token=True) does this on purpose, so a fine-tune of a base model writes
        # <|im_end|> and emits the base's own eos id. The weights trained that way stop where the files say.
        yield self.finding(
            repo,
            f"the vocabulary is the {group} one, but {moved[0]}, and id {home} is named "
            f"{repo.id_to_token.get(home)!r}: the end-of-turn marker was mapped onto the id {vocab[eos]} (as unsloth's "
            "map_eos_token does for a base model's eos). A fine-tune trained with these files stops where they say; "
            f"engines and tools that assume {fam.display}'s own ids do not.",
            file=file, severity=Severity.INFO,
        )
        return
    yield self.finding(
        repo,
        f"the vocabulary is the {group} one, but {'; '.join(moved[:4])}: the weights learnt each of these tokens at "
        f"its {fam.display} id, so this tokenizer feeds them another token's row (and stops on the wrong id). Ship the "
        "tokenizer the weights were trained with.",
        file=file,
    )


def _from_a_pretrained_release(repo: ModelRepo) -> bool:
    """The checkpoint was trained from a pre-trained (base) release: it never learnt the family's
    end-of-turn marker, so mapping that marker onto its own eos id is a choice, not a swap."""
    if lineage_mod.detect(repo).stage == "pretrained":
        return True
    return any(release_stage(name) is True for name in lineage_mod.trained_from(repo))


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
    the fine-tunes built on it, and it is not served as a chat model) or was trained from a
    pre-trained release and shows no chat evidence (the release's own pairing of its
    end-of-text stop with its stock template, kept), and info when no file
    names a model family hfdoctor knows (an xGen-MM or Molmo copy): whether that release
    ships its stop ids and template this way cannot be told from the folder.

    A PEFT adapter (no config.json, no generation_config.json: by design; or a config.json of the
    base that a trainer saved beside it, which no loader of the adapter reads) stops where its
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
    # An adapter's folder stops where its base stops, also when a trainer saved the base's config.json
    # beside it (Unsloth): loaders read the base's generation_config.json, not that file.
    if repo.is_adapter and repo.generation_config is None and (repo.config is None or config_is_the_bases(repo)):
        yield from _adapter_turn_end(repo, self, found.stops or (found.token,), template)
        return
    if repo.config is None and repo.generation_config is None and not repo.gguf_tokenizer:
        # No file here says where generation stops (a trainer checkpoint saved without config.json, a
        # tokenizer folder): the loader takes the stop ids from wherever the model comes from.
        yield self.finding(
            repo,
            f"the chat template ends each assistant turn with {found.token!r}, and neither config.json nor "
            "generation_config.json is here to say where generation stops: cannot verify that it stops on it.",
            file=template.file, pointer=template.pointer, severity=Severity.INFO,
        )
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
                file=source, pointer=_eos_pointer(source),
                severity=self.severity if answer else Severity.WARNING,
                fix=_add_eos_fix(repo, source, stop_id), facets=(Facet(FacetKind.GENERATION),),
            )
        return
    if found.token_id is None or found.token_id in eos_ids:
        return
    lineage = lineage_mod.detect(repo)
    fam = registry.family(lineage.family)
    chat = bool(lineage_mod.chat_evidence(repo, fam))
    # No file names a family hfdoctor knows (xGen-MM, Molmo): whether the release itself ships its stop ids
    # and template this way, or the publisher changed them, cannot be told, so the disagreement is info.
    unknown_release = fam is None
    # Trained from a pre-trained release (Qwen2.5-3B), which pairs its end-of-text stop with a stock
    # ChatML template, and nothing here shows chat training: the release's own pairing, kept.
    # (A checkpoint that is itself pre-trained is the severity policy's, which says so.)
    pretrained = not chat and lineage.stage != "pretrained" and _from_a_pretrained_release(repo)
    yield self.finding(
        repo,
        f"the chat template ends each assistant turn with {found.token!r} (id {found.token_id}), but {source} "
        f"stops generation on {names}: replies will run past the end of the turn until max_tokens. "
        f"Add {found.token_id} to {source}'s eos_token_id."
        + (" No file here names a model family hfdoctor knows, so it cannot tell whether the release itself ships "
           "these files this way: compare them with the release's own." if unknown_release else
           " It was trained from a pre-trained release, which pairs these stop ids with its stock template, and "
           "nothing here shows chat training: add the id if it was trained to chat." if pretrained else ""),
        file=source, pointer=_eos_pointer(source),
        severity=Severity.INFO if unknown_release or pretrained else Severity.ERROR if chat else Severity.WARNING,
        fix=_add_eos_fix(repo, source, found.token_id), facets=(Facet(FacetKind.CHAT_ONLY),),
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
        release = "pre-trained release" if base.pretrained else "chat release"
        because = (f"the base model {base.repo_id} ({base.family.display} {release}, as hfdoctor's registry "
                   f"records it) stops on {', '.join(base.stop_tokens)} only")
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
        file=template.file, pointer=template.pointer, severity=Severity.WARNING, facets=(Facet(FacetKind.CHAT_ONLY),),
    )


def _eos_pointer(source: str) -> str:
    """Where the stop ids are in the file that holds them (genai_config.json nests them under model)."""
    return "/model/eos_token_id" if source == GENAI_CONFIG else "/eos_token_id"


def _add_eos_fix(repo: ModelRepo, source: str, token_id: int) -> Fix | None:
    """The edit that appends `token_id` to eos_token_id, for a control token only."""
    if repo.id_to_token.get(token_id) not in repo.added_token_strings:
        return None  # never an ordinary piece of text as a stop id
    edit: Edit | None = json_add_to_id_list(repo, source, _eos_pointer(source), token_id)
    if edit is None:
        return None
    return Fix(f"add {token_id} to {source} eos_token_id", (edit,))


RULES = [added_tokens_inconsistent, tokenizer_lineage_mismatch, eos_not_end_of_turn]
