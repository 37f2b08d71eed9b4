"""ModelRepo: a lazy, cached, read-only view of one checkpoint directory.

Every property loads its file on first use and caches the result. A file that is
absent gives None. A file that exists but cannot be read or parsed gives None *and*
a FileProblem, which the `file-unreadable` rule reports; rules that need the file are
skipped. Nothing here ever writes, executes repository code, or reads tensor data.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any

from hfdoctor.bounded import jsontext
from hfdoctor.bounded.budget import Budget
from hfdoctor.repo.file_names import is_training_state, is_transformers_weight
from hfdoctor.repo.gguf_tokenizer import GgufFiles, GgufTokenizer, read_gguf_files
from hfdoctor.repo.card import FRONT_MATTER, Card, parse_card  # noqa: F401 (FRONT_MATTER: card edits)
from hfdoctor.repo.facts import Facts
from hfdoctor.repo.values import FileProblem, TemplateSource, int_values, as_id_list, token_content  # noqa: F401
from hfdoctor.bounded.parsing import ParseError, load_json
from hfdoctor.sources.base import WEIGHT_SUFFIXES, Entry, Source, Unreadable
from hfdoctor.sources.local import LocalSource
from hfdoctor.bounded.tokenizing import SafeTokenizer, load_tokenizer
from hfdoctor.knowledge.upstream import Upstream

METADATA_JSON_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "chat_template.json",
    "added_tokens.json",
    "vocab.json",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
    "adapter_config.json",
)
ADAPTER_CONFIG = "adapter_config.json"
# ONNX Runtime GenAI's own config (its runtime reads the stop ids and search options there).
GENAI_CONFIG = "genai_config.json"
# Keys an adapter trainer writes into adapter_config.json: PEFT's, mlx-lm's, AdapterHub's, a JAX export's.
ADAPTER_KEYS = frozenset({"peft_type", "r", "lora_alpha", "target_modules", "base_model_name_or_path", "task_type",
                          "rank", "alpha", "lora_rank", "lora_parameters", "fine_tune_type", "model", "base_model",
                          "model_name", "config"})
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
# git-lfs pointer files (what a clone without LFS data holds): a few hundred bytes of text.
LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/"
LFS_POINTER_MAX_BYTES = 1024
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


class ModelRepo:
    """The cached view of one repository, whatever its source (a directory, the Hub, a commit)."""

    def __init__(self, target: str | os.PathLike[str] | Source, upstream: Upstream | None = None,
                 budget: Budget | None = None, engines: dict[str, str] | None = None):
        self.source = target if isinstance(target, Source) else LocalSource(target)
        # One allowance of time and bytes for everything a check of this repository does.
        self.budget = budget if budget is not None else (self.source.budget or Budget.from_env())
        self.source.budget = self.budget
        # A directory's path; for other sources the label messages use.
        self.root = self.source.local_dir or Path(self.source.label)
        # Where rules and fixes look for upstream files (templates, configs).
        self.upstream = upstream if upstream is not None else Upstream.from_options()
        # The engines a configuration file says the repository targets (engine -> why); None:
        # found from the repository itself (hfdoctor.compat.targets).
        self.declared_engines = engines
        self.problems: dict[str, FileProblem] = {}
        # What the check derives from these files (lineage, weights, analyses...): see repo/facts.py.
        self.facts = Facts(self)
        self._raw: dict[str, bytes | None] = {}
        self._json: dict[str, Any] = {}
        self._json_index: dict[str, jsontext.JsonIndex] = {}

    def __repr__(self) -> str:
        return f"ModelRepo({self.source.label!r})"

    # --- files -----------------------------------------------------------------

    @property
    def entries(self) -> dict[str, Entry]:
        """Every path of the repository and what it is (sources.base.Entry)."""
        return self.source.entries()

    @cached_property
    def files(self) -> list[str]:
        """Every regular file below the root (posix relative paths, sorted), VCS dirs skipped."""
        return [rel for rel, entry in self.entries.items() if entry.is_file]

    @cached_property
    def outside_links(self) -> list[Entry]:
        """Symbolic links that leave the repository: never read through."""
        return [entry for entry in self.entries.values() if entry.kind == "outside"]

    def exists(self, rel: str) -> bool:
        return rel in self.entries

    def problem(self, rel: str, message: str, line: int | None = None, kind: str = "unreadable") -> None:
        self.problems.setdefault(rel, FileProblem(rel, message, line, kind))

    def raw(self, rel: str) -> bytes | None:
        """The bytes of a file, or None when it is absent or unreadable (a problem).

        Only regular files inside the repository are read, each up to the limit for its
        kind (sources.base.READ_LIMITS); anything else is a problem the rules report.
        """
        if rel in self._raw:
            return self._raw[rel]
        data: bytes | None = None
        entry = self.entries.get(rel)
        if entry is not None and entry.kind == "outside":
            self.problem(rel, entry.detail, kind="outside")  # symlink-outside-repo says it
        elif entry is not None:
            try:
                data = self.source.read(rel)
            except Unreadable as err:
                self.problem(rel, str(err))
        self._raw[rel] = data
        return data

    def text(self, rel: str) -> str | None:
        data = self.raw(rel)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            self.problem(rel, f"is not UTF-8 text (byte {err.start})")
            return None

    def json(self, rel: str) -> Any:
        """Parsed JSON of a file; None when absent or broken (broken is a problem)."""
        if rel in self._json:
            return self._json[rel]
        value = None
        data = self.raw(rel)
        if data is not None and len(data) <= LFS_POINTER_MAX_BYTES and data.startswith(LFS_POINTER_PREFIX):
            # A clone without git-lfs data: lfs-pointer reports it, not a JSON error.
            self.problem(rel, "is a git-lfs pointer, not the file", kind="lfs-pointer")
            self._json[rel] = None
            return None
        text = self.text(rel)
        if text is not None:
            try:
                value = load_json(text, self._raw.get(rel))
            except ParseError as err:
                self.problem(rel, err.message, err.line)
                value = None
            if value is None and rel not in self.problems:
                # `null` is valid JSON, but no loader takes it for a config: never "absent".
                self.problem(rel, "holds `null`, not a JSON object: loaders fail on it", 1)
        self._json[rel] = value
        return value

    def json_object(self, rel: str) -> dict[str, Any] | None:
        """Like json(), but the top level must be an object."""
        value = self.json(rel)
        if value is None or isinstance(value, dict):
            return value
        self.problem(rel, f"must hold a JSON object at the top level, found {type(value).__name__}", 1)
        return None

    def line_of(self, rel: str | None, pointer: str | None) -> int | None:
        """Line number of a JSON pointer (or front-matter key for README.md)."""
        if rel is None or pointer is None:
            return None
        if rel == "README.md":
            card = self.card
            key = jsontext.parse_pointer(pointer)[0] if pointer.startswith("/") else pointer
            return card.key_lines.get(key) if card else None
        if not rel.endswith(".json"):
            return None  # a GGUF metadata key has no line
        index = self._json_index.get(rel)
        if index is None:
            data = self._raw.get(rel) or self.raw(rel)
            if data is None:
                return None
            # One index per file: a repository with thousands of findings in one file costs
            # one walk of it, not one per finding.
            index = self._json_index[rel] = jsontext.JsonIndex(data)
        return index.line_of_pointer(pointer)

    def load_all(self) -> None:
        """Touch every metadata file so that all problems are known (file-unreadable).

        The `tokenizers` object is not built here: that takes longer than everything else
        in `check` together (0.26 s for Qwen's tokenizer.json), so only rules that encode
        text build it; a failure then is still reported, since file-unreadable runs last.
        vocab.json is read only when there is no tokenizer.json (nothing else reads it; a
        Hub check would download 2.8 MB for Qwen for nothing).
        """
        for rel in METADATA_JSON_FILES:
            if rel == "vocab.json" and self.exists("tokenizer.json"):
                continue
            self.json_object(rel)
        _ = self.card, self.chat_templates, self.tokenizer_json

    # --- metadata files -----------------------------------------------------------

    @property
    def config(self) -> dict[str, Any] | None:
        return self.json_object("config.json")

    @property
    def generation_config(self) -> dict[str, Any] | None:
        return self.json_object("generation_config.json")

    @property
    def tokenizer_config(self) -> dict[str, Any] | None:
        return self.json_object("tokenizer_config.json")

    @property
    def special_tokens_map(self) -> dict[str, Any] | None:
        return self.json_object("special_tokens_map.json")

    @property
    def tokenizer_json(self) -> dict[str, Any] | None:
        """tokenizer.json, when it is a tokenizer: a JSON object without a `model` object (`{}`, a
        placeholder) is a problem, and rules treat the file as unreadable."""
        value = self.json_object("tokenizer.json")
        if value is not None and not isinstance(value.get("model"), dict):
            self.problem("tokenizer.json", "is not a tokenizer: it has no `model` object (a placeholder?), so "
                         "transformers' fast tokenizer cannot load it", 1)
            return None
        return value

    @property
    def adapter_config(self) -> dict[str, Any] | None:
        """adapter_config.json of a PEFT adapter repository (None when this is not one)."""
        return self.json_object(ADAPTER_CONFIG) if self.exists(ADAPTER_CONFIG) else None

    @property
    def describes_adapter(self) -> bool:
        """adapter_config.json holds a key an adapter trainer writes; a file of that name with none is
        another program's settings (a Wi-Fi tool's network adapters), not adapter metadata."""
        config = self.adapter_config
        return config is not None and bool(ADAPTER_KEYS & config.keys())

    @property
    def is_adapter(self) -> bool:
        """A PEFT adapter: adapter_config.json, and any weights are the adapter's own."""
        return self.exists(ADAPTER_CONFIG) and all(self.is_adapter_file(f) for f in self.weight_files)

    @staticmethod
    def is_adapter_file(rel: str) -> bool:
        return rel.rsplit("/", 1)[-1].startswith("adapter_model")

    @cached_property
    def gguf(self) -> GgufFiles:
        """The GGUF files' headers (metadata and tensor shapes, never tensor data)."""
        return read_gguf_files(self.source, [f for f in self.weight_files if f.endswith(".gguf")], self.budget)

    @cached_property
    def gguf_tokenizer(self) -> GgufTokenizer | None:
        """The GGUF's tokenizer, when the repo has no tokenizer files of its own: what llama.cpp
        and every rule then read (vocabulary, special tokens, templates)."""
        if any(self.exists(f) for f in ("tokenizer.json", "vocab.json", "tokenizer_config.json")):
            return None
        return self.gguf.primary

    @cached_property
    def tokenizer(self) -> SafeTokenizer | None:
        """The tokenizer built from tokenizer.json (panics contained: hfdoctor.bounded.tokenizing), or None."""
        if self.tokenizer_json is None:
            return None
        return load_tokenizer(self.text("tokenizer.json"), lambda why: self.problem("tokenizer.json", why))

    @cached_property
    def vocab(self) -> dict[str, int] | None:
        """token -> id for the whole vocabulary, added tokens included.

        From tokenizer.json when present, else vocab.json + added_tokens.json +
        added_tokens_decoder (the slow-tokenizer layout). None when neither exists.
        """
        if self.gguf_tokenizer is not None:
            return dict(self.gguf_tokenizer.vocab) or None
        vocab: dict[str, int] = {}
        tok = self.tokenizer_json
        if tok is not None:
            model = tok.get("model") if isinstance(tok.get("model"), dict) else {}
            base = model.get("vocab")
            if isinstance(base, dict):
                vocab.update(int_values(base))
            elif isinstance(base, list):  # Unigram: [[piece, score], ...]
                vocab.update({p[0]: i for i, p in enumerate(base) if isinstance(p, list) and p and isinstance(p[0], str)})
            vocab.update({token: token_id for token_id, token in self.tokenizer_json_added.items()})
            return vocab or None
        base_vocab = self.json_object("vocab.json")
        if isinstance(base_vocab, dict):
            vocab.update(int_values(base_vocab))
        added = self.json_object("added_tokens.json")
        if isinstance(added, dict):
            vocab.update({k: v for k, v in added.items() if isinstance(v, int)})
        vocab.update({token: token_id for token_id, token in self.added_tokens_decoder.items()})
        return vocab or None

    @cached_property
    def id_to_token(self) -> dict[int, str]:
        vocab = self.vocab or {}
        return dict(zip(vocab.values(), vocab.keys()))  # C-speed: vocabularies hold 150k+ entries

    @cached_property
    def added_tokens_decoder(self) -> dict[int, str]:
        """id -> content from tokenizer_config.json's added_tokens_decoder."""
        decoder = (self.tokenizer_config or {}).get("added_tokens_decoder")
        result: dict[int, str] = {}
        if isinstance(decoder, dict):
            for key, value in decoder.items():
                content = token_content(value)
                if key.isascii() and key.isdecimal() and content is not None:
                    result[int(key)] = content
        return result

    @cached_property
    def tokenizer_json_added_entries(self) -> list[dict[str, Any]]:
        """tokenizer.json's added_tokens entries that are well formed (an int id)."""
        added_tokens = (self.tokenizer_json or {}).get("added_tokens")
        if not isinstance(added_tokens, list):
            return []
        return [a for a in added_tokens if isinstance(a, dict) and isinstance(a.get("id"), int)]

    @cached_property
    def tokenizer_json_added(self) -> dict[int, str]:
        """id -> content from tokenizer.json's added_tokens."""
        return {a["id"]: str(a.get("content")) for a in self.tokenizer_json_added_entries}

    @cached_property
    def added_token_strings(self) -> frozenset[str]:
        """Every added/special token text, from tokenizer.json and tokenizer_config.json."""
        gguf = self.gguf_tokenizer.added if self.gguf_tokenizer is not None else ()
        return frozenset(t for t in (*self.tokenizer_json_added.values(), *self.added_tokens_decoder.values(), *gguf)
                         if t)

    def token_id(self, token: str) -> int | None:
        return (self.vocab or {}).get(token)

    @property
    def special_tokens_map_overrides(self) -> bool:
        """transformers reads special_tokens_map.json over tokenizer_config.json's tokens when
        tokenizer_config.json has no added_tokens_decoder (the legacy layout; 4.x and 5.x alike)."""
        return self.tokenizer_config is not None and "added_tokens_decoder" not in self.tokenizer_config

    def special_token(self, key: str) -> str | None:
        """bos/eos/pad/unk token string as transformers reads it: tokenizer_config.json's, then
        special_tokens_map.json's (the map's first when it overrides: special_tokens_map_overrides)."""
        sources = (self.tokenizer_config, self.special_tokens_map)
        for source in (reversed(sources) if self.special_tokens_map_overrides else sources):
            if source and key in source:
                return token_content(source[key])
        return self.gguf_tokenizer.specials.get(key) if self.gguf_tokenizer is not None else None

    @property
    def eos_ids(self) -> list[int]:
        """The ids that stop generation: generation_config.json's, else config.json's."""
        return self._stop_ids[0]

    @property
    def eos_ids_source(self) -> str:
        return self._stop_ids[1]

    @cached_property
    def _stop_ids(self) -> tuple[list[int], str]:
        """(ids, the file that names them): generation_config.json, else config.json; a GGUF's
        without a config; ONNX Runtime GenAI's genai_config.json, which its runtime reads instead."""
        gen = self.generation_config
        if gen is not None and "eos_token_id" in gen:
            return as_id_list(gen["eos_token_id"]), "generation_config.json"
        if self.config is None and self.gguf_tokenizer is not None:
            return list(self.gguf_tokenizer.stop_ids), self.gguf_tokenizer.file
        ids = as_id_list((self.config or {}).get("eos_token_id"))
        genai = (self.json_object(GENAI_CONFIG) or {}).get("model") if self.exists(GENAI_CONFIG) else None
        # The runtime's, when config.json names none or is the source model's kept beside an export that
        # has no transformers weights.
        if isinstance(genai, dict) and "eos_token_id" in genai and (
                not ids or not any(map(is_transformers_weight, self.weight_files))):
            return as_id_list(genai["eos_token_id"]), GENAI_CONFIG
        return ids, "config.json"

    # --- chat templates -----------------------------------------------------------

    @cached_property
    def chat_templates(self) -> list[TemplateSource]:
        """Every chat template the repo stores, in transformers' order of precedence.

        transformers reads chat_template.jinja (and additional_chat_templates/) before
        chat_template.json, and both before tokenizer_config.json's `chat_template`.
        (Precisely: AutoTokenizer takes the .jinja files when there are any, else
        tokenizer_config.json, and never reads chat_template.json; AutoProcessor, which
        serves multimodal repos, prefers the legacy chat_template.json.)
        """
        sources: list[TemplateSource] = []
        jinja = self.text("chat_template.jinja")
        if jinja is not None:
            sources.append(TemplateSource("default", "chat_template.jinja", None, jinja))
        for rel in self.files:
            if rel.startswith("additional_chat_templates/") and rel.endswith(".jinja"):
                text = self.text(rel)
                if text is not None:
                    name = rel[len("additional_chat_templates/") : -len(".jinja")]
                    sources.append(TemplateSource(name, rel, None, text))
        chat_json = self.json_object("chat_template.json")
        if chat_json is not None:
            sources.extend(self._templates_in(chat_json, "chat_template.json"))
        if self.tokenizer_config is not None:
            sources.extend(self._templates_in(self.tokenizer_config, "tokenizer_config.json"))
        for rel, templates in self.gguf.templates.items():  # llama.cpp's (a vocabulary or not): after transformers'
            sources.extend(TemplateSource(name, rel, key, text) for name, key, text in templates)
        return sources

    def _templates_in(self, obj: dict[str, Any], rel: str) -> list[TemplateSource]:
        value = obj.get("chat_template")
        if isinstance(value, str):
            return [TemplateSource("default", rel, "/chat_template", value)]
        found: list[TemplateSource] = []
        if isinstance(value, list):  # [{"name": ..., "template": ...}, ...]
            for i, item in enumerate(value):
                if isinstance(item, dict) and isinstance(item.get("template"), str):
                    name = str(item.get("name") or "default")
                    found.append(TemplateSource(name, rel, f"/chat_template/{i}/template", item["template"]))
        elif value is not None:
            self.problem(rel, f"`chat_template` must be a string or a list of named templates, found {type(value).__name__}")
        return found

    @property
    def chat_template(self) -> TemplateSource | None:
        """The template `apply_chat_template` uses by default (first 'default' by precedence).

        transformers reads tokenizer_config.json's `chat_template` only when the repo has
        no template file at all: with additional_chat_templates/*.jinja but no
        chat_template.jinja, the tokenizer has no default template (verified against
        transformers 5.23 AutoTokenizer).
        """
        has_files = any(s.pointer is None for s in self.chat_templates)
        for source in self.chat_templates:
            if source.name == "default" and not (has_files and source.file == "tokenizer_config.json"):
                return source
        return None

    # --- model card -----------------------------------------------------------------

    @cached_property
    def card(self) -> Card | None:
        text = self.text("README.md")
        return None if text is None else parse_card(text, lambda why, line: self.problem("README.md", why, line))

    # --- weights ----------------------------------------------------------------------

    @cached_property
    def weight_files(self) -> list[str]:
        """The files that hold weights; the Trainer's state (optimizer.pt, rng_state.pth,
        training_args.bin...) is training state, not weights (file_names.is_training_state)."""
        return [f for f in self.files if f.endswith(WEIGHT_SUFFIXES) and not is_training_state(f)]

    @cached_property
    def weight_dirs(self) -> list[str]:
        """Directories named like weight files (`x.safetensors/`): always a mistake."""
        return [rel for rel, e in self.entries.items() if e.kind == "dir" and rel.endswith(WEIGHT_SUFFIXES)]
