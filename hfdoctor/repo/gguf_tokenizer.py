"""The tokenizer and chat templates a GGUF file carries in its metadata: what llama.cpp uses.

A GGUF holds its whole tokenizer as metadata: `tokenizer.ggml.tokens` (id order) with
`tokenizer.ggml.token_type` (3 = control, 4 = user-defined: the added/special tokens),
the special ids (`tokenizer.ggml.bos_token_id`, `eos_token_id`, `eot_token_id`...), the
add_bos/add_eos flags, and the chat templates (`tokenizer.chat_template`, and named ones as
`tokenizer.chat_template.<name>`). For a GGUF-only repository this is the tokenizer every
rule reads; for a repository with both, the two are compared.
"""

from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass

from hfdoctor.bounded.budget import Budget
from hfdoctor.sources.base import Source, Unreadable
from hfdoctor.repo.gguf import GGUFError, GgufHeader, KeptArrays, header_digest, read_gguf_metadata

CONTROL, USER_DEFINED = 3, 4
# tokenizer_config.json's names for the ids a GGUF records.
SPECIAL_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
    "eot_token": "tokenizer.ggml.eot_token_id",
    "eom_token": "tokenizer.ggml.eom_token_id",
}
# The tokens llama.cpp ends generation on besides the eos/eot/eom ids: llama-vocab.cpp adds
# every token with one of these texts to its end-of-generation set (as of late 2025).
LLAMA_CPP_EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
})
TEMPLATE_KEY = "tokenizer.chat_template"


@dataclass(frozen=True)
class GgufTokenizer:
    file: str
    vocab: dict[str, int]
    added: frozenset[str]  # control and user-defined tokens
    specials: dict[str, str]  # bos_token/eos_token/... -> text
    special_ids: dict[str, int]
    stop_ids: tuple[int, ...]  # what llama.cpp stops generation on
    templates: tuple[tuple[str, str, str], ...]  # (name, metadata key, text)
    add_bos: bool | None
    add_eos: bool | None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _vocabulary(tokens: list, types: object) -> tuple[dict[str, int], frozenset[str]]:
    """token -> id, and the control and user-defined tokens."""
    types = types if isinstance(types, list) and len(types) == len(tokens) else [None] * len(tokens)
    vocab = {token: i for i, token in enumerate(tokens) if isinstance(token, str) and token}
    added = frozenset(t for t, kind in zip(tokens, types)
                      if isinstance(t, str) and t and kind in (CONTROL, USER_DEFINED))
    return vocab, added


def gguf_tokenizer(header: GgufHeader,
                   vocabulary: tuple[dict[str, int], frozenset[str]] | None = None) -> GgufTokenizer:
    """The tokenizer of one GGUF header; `vocabulary`: `_vocabulary` of its arrays, when built
    already for another header that holds the same arrays (one dict for every quantization)."""
    meta = header.metadata
    tokens = header.tokens
    vocab, added = vocabulary or _vocabulary(tokens, meta.get("tokenizer.ggml.token_type"))
    special_ids = {name: i for name, key in SPECIAL_IDS.items()
                   if (i := _int(meta.get(key))) is not None and 0 <= i < len(tokens)}
    specials = {name: tokens[i] for name, i in special_ids.items() if isinstance(tokens[i], str) and tokens[i]}
    stops = [special_ids[k] for k in ("eos_token", "eot_token", "eom_token") if k in special_ids]
    stops += [i for t, i in vocab.items() if t in LLAMA_CPP_EOG_TEXTS]
    templates = gguf_templates(meta)
    add_bos, add_eos = meta.get("tokenizer.ggml.add_bos_token"), meta.get("tokenizer.ggml.add_eos_token")
    return GgufTokenizer(
        file=header.file, vocab=vocab, added=added, specials=specials, special_ids=special_ids,
        stop_ids=tuple(dict.fromkeys(stops)), templates=templates,
        add_bos=add_bos if isinstance(add_bos, bool) else None, add_eos=add_eos if isinstance(add_eos, bool) else None,
    )


# Headers read per repository: a repo of 20 quantizations carries 20 copies of one tokenizer.
MAX_GGUF_FILES = 16


@dataclass
class GgufFiles:
    """The GGUF files of a repository, read header-only."""

    headers: dict[str, GgufHeader]
    errors: dict[str, str]  # rel -> why no loader can read it
    skipped: list[str]  # beyond MAX_GGUF_FILES, or past the check's budget

    @property
    def tokenizers(self) -> dict[str, GgufTokenizer]:
        cached = getattr(self, "_tokenizers", None)
        if cached is None:
            # Equal files share one metadata dict: one tokenizer built. Files that differ elsewhere
            # but hold the same vocabulary (the reader keeps equal arrays as one list) share one
            # vocabulary dict.
            cached, by_metadata, by_arrays = {}, {}, {}
            for rel, header in self.headers.items():
                if not header.tokens:
                    continue
                built = by_metadata.get(id(header.metadata))
                if built is None:
                    types = header.metadata.get("tokenizer.ggml.token_type")
                    arrays = (id(header.tokens), id(types))
                    if arrays not in by_arrays:
                        by_arrays[arrays] = _vocabulary(header.tokens, types)
                    built = by_metadata[id(header.metadata)] = gguf_tokenizer(header, by_arrays[arrays])
                cached[rel] = dataclasses.replace(built, file=rel)
            self._tokenizers = cached
        return cached

    @property
    def templates(self) -> dict[str, tuple[tuple[str, str, str], ...]]:
        """rel -> the chat templates of every GGUF, a vocabulary or not: llama.cpp (and
        llama-cpp-python, CVE-2024-34359) renders a GGUF's template whatever else it holds."""
        return {rel: gguf_templates(h.metadata) for rel, h in self.headers.items() if gguf_templates(h.metadata)}

    @property
    def primary(self) -> GgufTokenizer | None:
        """The tokenizer of the first readable GGUF (by name): what a GGUF-only repo is read as."""
        return next(iter(self.tokenizers.values()), None)


def gguf_templates(meta: dict) -> tuple[tuple[str, str, str], ...]:
    """(name, metadata key, text) of each chat template in a GGUF's metadata."""
    templates = []
    if isinstance(meta.get(TEMPLATE_KEY), str):
        templates.append(("default", TEMPLATE_KEY, meta[TEMPLATE_KEY]))
    for key, value in meta.items():
        if key.startswith(TEMPLATE_KEY + ".") and isinstance(value, str):
            templates.append((key[len(TEMPLATE_KEY) + 1:], key, value))
    return tuple(templates)


def _size(source: Source, rel: str) -> int | None:
    entry = source.entries().get(rel)
    return entry.size if entry is not None else None


def read_gguf_files(source: Source, files: list[str], budget: Budget | None = None) -> GgufFiles:
    """The headers of a repository's GGUF files. Equal files are read once: one identity (a
    hard link, one blob or LFS object), or one size and the same header bytes (a copy: its
    first bytes are hashed against the header already read, which costs a read, not a
    parse); a header that fails fails alike for its copies. Each header is charged to the
    check's byte budget and stops at its deadline."""
    headers, errors, skipped = {}, {}, sorted(files)[MAX_GGUF_FILES:]
    kept = KeptArrays()  # what all of them keep together
    by_identity: dict[tuple, _Outcome] = {}
    by_size: dict[int, list[_Outcome]] = {}
    for rel in sorted(files)[:MAX_GGUF_FILES]:
        identity, size = source.identity(rel), _size(source, rel)
        known = by_identity.get(identity) if identity is not None else None
        if known is None and size is not None:
            known = next((o for o in by_size.get(size, [])[:2] if _same_start(source, rel, o, budget)), None)
        if known is None:
            if budget is not None and budget.expired():
                budget.skip_for_time(f"GGUF headers ({rel} and the files after it)")
                skipped.append(rel)
                continue
            known = _read(source, rel, budget, kept)
            if known is None:
                skipped.append(rel)
                continue
            if identity is not None:
                by_identity[identity] = known
            if size is not None:
                by_size.setdefault(size, []).append(known)
        if isinstance(known.result, GgufHeader):
            headers[rel] = dataclasses.replace(known.result, file=rel)
            for key, why in known.result.dropped:
                if budget is not None:
                    budget.skip(f"the {key} of {rel} (rules read it as a GGUF without a vocabulary)", why)
        else:
            errors[rel] = known.result
    return GgufFiles(headers, errors, skipped)


@dataclass
class _Outcome:
    rel: str  # the file that was read
    nbytes: int  # the bytes of it that decided the result
    result: GgufHeader | str  # its header, or why no loader can read it
    digest: bytes | None = None  # of its first nbytes, once a file of its size asks


def _read(source: Source, rel: str, budget: Budget | None, kept: KeptArrays | None = None) -> _Outcome | None:
    """Parse one header (None when the check's budget stopped it: not read, not broken)."""
    try:
        header = read_gguf_metadata(source, rel, budget.deadline if budget is not None else None, kept)
    except GGUFError as err:
        if budget is not None and budget.expired():
            budget.skip_for_time(f"GGUF headers ({rel} and the files after it)")
            return None
        return _Outcome(rel, err.read_bytes, str(err))
    if budget is not None and not budget.take(header.header_bytes):
        budget.skip_for_bytes(f"GGUF headers ({rel} and the files after it)")
        return None
    return _Outcome(rel, header.header_bytes, header)


def _digest(source: Source, rel: str, nbytes: int, budget: Budget | None) -> bytes | None:
    if nbytes <= 0 or (budget is not None and not budget.take(nbytes)):
        return None
    try:
        with source.open(rel) as raw:
            return header_digest(io.BufferedReader(raw, 1 << 20), nbytes)
    except (Unreadable, OSError):
        return None


def _same_start(source: Source, rel: str, outcome: _Outcome, budget: Budget | None) -> bool:
    """rel (a file of the same size) starts with the bytes that decided `outcome`."""
    if outcome.digest is None:
        outcome.digest = _digest(source, outcome.rel, outcome.nbytes, budget)
    return outcome.digest is not None and _digest(source, rel, outcome.nbytes, budget) == outcome.digest
