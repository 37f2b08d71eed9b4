"""The tokenizer and chat templates a GGUF file carries in its metadata: what llama.cpp uses.

A GGUF holds its whole tokenizer as metadata: `tokenizer.ggml.tokens` (id order) with
`tokenizer.ggml.token_type` (3 = control, 4 = user-defined: the added/special tokens),
the special ids (`tokenizer.ggml.bos_token_id`, `eos_token_id`, `eot_token_id`...), the
add_bos/add_eos flags, and the chat templates (`tokenizer.chat_template`, and named ones as
`tokenizer.chat_template.<name>`). For a GGUF-only repository this is the tokenizer every
rule reads; for a repository with both, the two are compared.
"""

from __future__ import annotations

from dataclasses import dataclass

from hfdoctor.sources.base import Source
from hfdoctor.weights.gguf import GGUFError, GgufHeader, read_gguf_metadata

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


def gguf_tokenizer(header: GgufHeader) -> GgufTokenizer:
    meta = header.metadata
    tokens = [t if isinstance(t, str) else "" for t in header.tokens]
    types = meta.get("tokenizer.ggml.token_type")
    types = types if isinstance(types, list) and len(types) == len(tokens) else [None] * len(tokens)
    vocab = {token: i for i, token in enumerate(tokens) if token}
    added = frozenset(t for t, kind in zip(tokens, types) if t and kind in (CONTROL, USER_DEFINED))
    special_ids = {name: i for name, key in SPECIAL_IDS.items()
                   if (i := _int(meta.get(key))) is not None and 0 <= i < len(tokens)}
    specials = {name: tokens[i] for name, i in special_ids.items() if tokens[i]}
    stops = [special_ids[k] for k in ("eos_token", "eot_token", "eom_token") if k in special_ids]
    stops += [i for t, i in vocab.items() if t in LLAMA_CPP_EOG_TEXTS]
    templates = []
    if isinstance(meta.get(TEMPLATE_KEY), str):
        templates.append(("default", TEMPLATE_KEY, meta[TEMPLATE_KEY]))
    for key, value in meta.items():
        if key.startswith(TEMPLATE_KEY + ".") and isinstance(value, str):
            templates.append((key[len(TEMPLATE_KEY) + 1:], key, value))
    add_bos, add_eos = meta.get("tokenizer.ggml.add_bos_token"), meta.get("tokenizer.ggml.add_eos_token")
    return GgufTokenizer(
        file=header.file, vocab=vocab, added=added, specials=specials, special_ids=special_ids,
        stop_ids=tuple(dict.fromkeys(stops)), templates=tuple(templates),
        add_bos=add_bos if isinstance(add_bos, bool) else None, add_eos=add_eos if isinstance(add_eos, bool) else None,
    )


# Headers read per repository: a repo of 20 quantizations carries 20 copies of one tokenizer.
MAX_GGUF_FILES = 16


@dataclass
class GgufFiles:
    """The GGUF files of a repository, read header-only."""

    headers: dict[str, GgufHeader]
    errors: dict[str, str]  # rel -> why no loader can read it
    skipped: list[str]  # beyond MAX_GGUF_FILES

    @property
    def tokenizers(self) -> dict[str, GgufTokenizer]:
        cached = getattr(self, "_tokenizers", None)
        if cached is None:
            cached = {rel: gguf_tokenizer(h) for rel, h in self.headers.items() if h.tokens}
            self._tokenizers = cached
        return cached

    @property
    def primary(self) -> GgufTokenizer | None:
        """The tokenizer of the first readable GGUF (by name): what a GGUF-only repo is read as."""
        return next(iter(self.tokenizers.values()), None)


def read_gguf_files(source: Source, files: list[str]) -> GgufFiles:
    headers, errors = {}, {}
    for rel in sorted(files)[:MAX_GGUF_FILES]:
        try:
            headers[rel] = read_gguf_metadata(source, rel)
        except GGUFError as err:
            errors[rel] = str(err)
    return GgufFiles(headers, errors, sorted(files)[MAX_GGUF_FILES:])
