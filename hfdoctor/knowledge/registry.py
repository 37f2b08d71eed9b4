"""The family registry: what each upstream model family looks like, and its variants.

The data lives in `upstream_templates/families.json` (shipped inside the package as
package data, and read from the source tree in a checkout). A family is what a
tokenizer and an architecture identify: the config model types it uses, the special
tokens (and ids) and vocabulary fingerprints of its tokenizer, its end-of-turn tokens.
A family has one or more variants, which share all that but differ in behaviour:
Qwen3's hybrid-thinking releases, its Instruct-2507 (never thinks) and Thinking-2507
(always thinks) releases, Qwen3-Coder. A variant names its thinking mode, its upstream
repos with their dimensions, and its canonical chat template (repo, sha256; the text
itself ships in upstream_templates/templates/, see hfdoctor.knowledge.upstream).

A family written without "variants" in the JSON has exactly one, built from the
family-level fields.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from hfdoctor.bounded import patterns

_DATA_DIRS = (
    Path(__file__).resolve().parents[1] / "data",  # installed wheel (force-included as hfdoctor/data)
    Path(__file__).resolve().parents[2] / "upstream_templates",  # source checkout
)
# The fields a variant may set (the rest belong to the family).
VARIANT_FIELDS = ("thinking", "chat", "repo_patterns", "bases", "template", "template_needles",
                  "template_excludes", "template_revisions", "sampling")


def data_file(name: str) -> Path:
    """A file of the registry data directory (upstream_templates/ in the source tree)."""
    for directory in _DATA_DIRS:
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{name} not found: hfdoctor's package data is missing")


def config_value(config: dict[str, Any] | None, key: str) -> Any:
    """A config value, looking into text_config for multimodal wrappers."""
    config = config or {}
    if key in config:
        return config[key]
    text_config = config.get("text_config")
    if isinstance(text_config, dict):
        return text_config.get(key)
    return None


@dataclass(frozen=True)
class BaseModel:
    repo: str  # the released (chat/instruct) repo of this size
    base_repo: str | None  # its pretrained-only sibling, when there is one
    dims: dict[str, Any]

    def matches(self, config: dict[str, Any]) -> bool:
        """True when every dimension this entry records equals the config's."""
        for key, value in self.dims.items():
            if key == "num_experts":
                got = config.get("num_experts", config.get("n_routed_experts", config_value(config, "num_experts")))
            else:
                got = config_value(config, key)
            if got != value:
                return False
        return True


@dataclass(frozen=True)
class CanonicalTemplate:
    repo: str
    revision: str | None
    file: str
    sha256: str
    revision_note: str = ""


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per variant
class Variant:
    key: str  # "" for the only variant of a family
    display: str
    thinking: str  # none | hybrid | always | effort
    chat: bool  # every release of it is a chat model
    repo_patterns: tuple[str, ...]
    bases: tuple[BaseModel, ...]
    template: CanonicalTemplate | None
    # Literal strings only this variant's templates contain (and must not contain).
    template_needles: tuple[str, ...] = ()
    template_excludes: tuple[str, ...] = ()
    # sha256 of other upstream revisions of its template (still this variant's own).
    template_revisions: tuple[str, ...] = ()
    # sha256 -> (the repo that shipped it, when not the canonical template's; what it is):
    # a revision is named after its own repo, never as another model's.
    revision_notes: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    # sha256 of revisions upstream itself replaced to fix a bug (Meta-Llama-3-8B-Instruct's April
    # 2024 launch template appended the assistant header always): a copy carries the bug, not
    # the family's design.
    fixed_revisions: frozenset[str] = frozenset()
    # sha256 of revisions newer than the pinned canonical one (never "updated" to the older text).
    later_revisions: frozenset[str] = frozenset()
    # sha256 of the templates of other releases of the variant's weights, each its own format rather than a
    # date of the canonical one (Qwen2-Instruct's ChatML under Qwen2.5; Llama Guard 2's safety prompt under
    # Llama 3): never "updated" to the canonical text either.
    other_releases: frozenset[str] = frozenset()
    # The decoding defaults its upstream generation_config.json ships ({"do_sample": true,
    # "temperature": 0.6, ...}, and "source": the file they come from), when recorded.
    sampling: dict[str, Any] = field(default_factory=dict)
    # The pad token this variant's own upstream tokenizer sets when it is the end-of-turn token and
    # the family's other releases do not (TinyLlama-Chat pads with '</s>'; Llama-2-chat sets none):
    # (token, repo it was read from).
    upstream_pad_token: tuple[str, str] | None = None
    # The other pad id that release's own config.json or generation_config.json names beside it
    # (TinyLlama-Chat's generation_config.json: 0, <unk>), when it does.
    upstream_config_pad_id: int | None = None

    def owns_repo_id(self, repo_id: str) -> bool:
        return any(re.search(p, repo_id, re.IGNORECASE) for p in self.repo_patterns)

    def base_for(self, config: dict[str, Any] | None) -> BaseModel | None:
        if not config:
            return None
        return next((base for base in self.bases if base.matches(config)), None)

    def base_by_repo(self, repo_id: str) -> BaseModel | None:
        low = repo_id.lower()
        return next((b for b in self.bases if low in (b.repo.lower(), (b.base_repo or "").lower())), None)

    def template_shas(self) -> set[str]:
        return ({self.template.sha256} if self.template else set()) | set(self.template_revisions)

    def template_name(self, sha256: str) -> str | None:
        """'the upstream deepseek-ai/DeepSeek-R1 template (DeepSeek-R1's own January 2025 template)'
        for the canonical template or a revision of it; None for any other text."""
        if self.template is None or sha256 not in self.template_shas():
            return None
        if sha256 == self.template.sha256:
            return f"the upstream {self.template.repo} template"
        repo, note = self.revision_notes.get(sha256, (None, "an earlier upstream revision"))
        return f"the upstream {repo or self.template.repo} template ({note or 'an earlier upstream revision'})"

    def template_matches(self, text: str) -> bool:
        """The literal-needle test: every needle present, no exclude present."""
        return bool(self.template_needles) and all(n in text for n in self.template_needles) and not any(
            x in text for x in self.template_excludes)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per family
class Family:
    key: str
    display: str
    model_types: tuple[str, ...]
    vocab_groups: tuple[str, ...]
    signature_tokens: dict[str, int | None]
    end_of_turn: tuple[str, ...]
    variants: tuple[Variant, ...]
    primary_for: tuple[str, ...] = ()
    # Tokens generation must stop on, when they are not simply the end-of-turn tokens
    # (harmony: <|return|> and <|call|>, while <|end|> only closes a channel).
    stop_tokens: tuple[str, ...] = ()
    # The pad token the family's own upstream tokenizer sets, when it is the end-of-turn
    # token (SmolLM3, DeepSeek-R1): (token, repo it was read from). That is upstream's
    # design, which pad-token-is-eos reports as info.
    upstream_pad_token: tuple[str, str] | None = None
    # The other pad id the release's own config.json or generation_config.json names beside it
    # (SmolLM3-3B's: 128004), when it does.
    upstream_config_pad_id: int | None = None
    # The id of that pad token in the releases that set it, when other releases of the family
    # put the same token elsewhere and pad with another (Granite 3.x: <|end_of_text|> is 0;
    # Granite 4.0's is 100257 and pads with <|pad|>).
    upstream_pad_id: int | None = None
    # The eos ids the family's own generation_config.json stops on when they disagree with its
    # config.json or its tokenizer (Falcon-RW: 2, from its RefinedWeb config, while config.json says
    # 50256; ruDialoGPT: 50256, while its tokenizer's eos is the added 50261): (ids, repo).
    # A fine-tune that saved that file unchanged inherits upstream's disagreement, which
    # special-token-ids-mismatch reports as info.
    upstream_generation_eos: tuple[tuple[int, ...], str] | None = None
    # Added tokens the family's own tokenizer places at or past its embedding rows, token -> id, and the
    # repo (ruDialoGPT's '<|endoftext|>' at 50261 with vocab_size 50261): a fine-tune that saved that
    # tokenizer unchanged inherits them, which embedding-vocab-mismatch reports as upstream's design.
    tokens_past_rows: tuple[dict[str, int], str] | None = None
    # Markers the family's own upstream template writes as plain text (not tokens of its
    # vocabulary): marker -> the upstream repo whose template writes it (TinyLlama-Chat's
    # `<|user|>`); template-unknown-token reports them as the family's design.
    text_markers: dict[str, str] = field(default_factory=dict)
    # The upstream repo that publishes this family only as remote code (model types
    # transformers has no native class for: ChatGLM, Qwen1, InternLM2...), when it does.
    remote_code_repo: str | None = None
    # The bos token every checkpoint of the family starts with, where the family depends on
    # it (Gemma: <bos>), from its upstream tokenizer.
    bos_token: str | None = None
    # The rows of the upstream embedding matrix when every release has the same (Gemma 2:
    # 256,000): ids at or past it are tokens a fine-tune added.
    vocab_size: int | None = None
    # What the pre-trained (base) releases stop on, token -> id (Llama 3.x: <|end_of_text|> 128001),
    # when their generation config is recorded: an adapter trained on one stops there.
    pretrained_stop: dict[str, int] = field(default_factory=dict)

    @property
    def only_variant(self) -> Variant | None:
        """The variant, when the family has just one (so knowing the family is knowing it)."""
        return self.variants[0] if len(self.variants) == 1 else None

    @property
    def chat(self) -> bool:
        """Every release of every variant is a chat model."""
        return all(v.chat for v in self.variants)

    @property
    def bases(self) -> tuple[BaseModel, ...]:
        return tuple(b for v in self.variants for b in v.bases)

    @property
    def templates(self) -> list[CanonicalTemplate]:
        return [v.template for v in self.variants if v.template is not None]

    def owns_repo_id(self, repo_id: str) -> bool:
        return any(v.owns_repo_id(repo_id) for v in self.variants)

    def pad_by_design(self, variant: Variant | None, token_id: int | None = None) -> tuple[str, str] | None:
        """The end-of-turn pad upstream ships: the variant's own when it records one, else the family's
        (when the family records the pad's id, only for a checkpoint whose pad has that id)."""
        if variant is not None and variant.upstream_pad_token:
            return variant.upstream_pad_token
        if self.upstream_pad_id is not None and token_id != self.upstream_pad_id:
            return None
        return self.upstream_pad_token

    def config_pad_by_design(self, variant: Variant | None) -> int | None:
        """The other pad id the release's own config files name beside the pad pad_by_design gives."""
        if variant is not None and variant.upstream_pad_token:
            return variant.upstream_config_pad_id
        return self.upstream_config_pad_id

    def variant_of_repo_id(self, repo_id: str) -> Variant | None:
        return next((v for v in self.variants if v.owns_repo_id(repo_id)), None)

    def variant(self, key: str | None) -> Variant | None:
        return next((v for v in self.variants if v.key == key), None)

    def variants_for(self, config: dict[str, Any] | None) -> list[Variant]:
        """The variants with a release of these dimensions."""
        return [v for v in self.variants if v.base_for(config) is not None]

    def base_for(self, config: dict[str, Any] | None) -> BaseModel | None:
        """The base of these dimensions, when only one variant has one."""
        found = {id(b): b for v in self.variants if (b := v.base_for(config)) is not None}
        return next(iter(found.values())) if len(found) == 1 else None

    def base_by_repo(self, repo_id: str) -> BaseModel | None:
        return next((b for v in self.variants if (b := v.base_by_repo(repo_id)) is not None), None)

    def vocab_rows(self, base: BaseModel | None = None, *, smallest: bool = False) -> int | None:
        """The embedding rows of `base` (its recorded vocab_size), else the family's (every release
        has the same); with `smallest`, else the smallest any release records. None when unknown."""
        if base is not None and isinstance(base.dims.get("vocab_size"), int):
            return base.dims["vocab_size"]
        if self.vocab_size is not None or not smallest:
            return self.vocab_size
        sizes = [b.dims["vocab_size"] for b in self.bases if isinstance(b.dims.get("vocab_size"), int)]
        return min(sizes) if sizes else None


@lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    return json.loads(data_file("families.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def architectures() -> dict[str, list[str]]:
    """model_type -> the model classes transformers maps it to (architectures.json)."""
    return json.loads(data_file("architectures.json").read_text(encoding="utf-8"))["model_types"]


def _template(data: dict[str, Any] | None) -> CanonicalTemplate | None:
    if not data:
        return None
    return CanonicalTemplate(data["repo"], data.get("revision"), data["file"], data["sha256"],
                             data.get("revision_note", ""))


def _variant(data: dict[str, Any], key: str, display: str) -> Variant:
    return Variant(
        key=key,
        display=display,
        thinking=data.get("thinking", "none"),
        chat=bool(data.get("chat", True)),
        repo_patterns=tuple(data.get("repo_patterns", ())),
        bases=tuple(BaseModel(b["repo"], b.get("base_repo"), dict(b["dims"])) for b in data.get("bases", ())),
        template=_template(data.get("template")),
        template_needles=tuple(data.get("template_needles", ())),
        template_excludes=tuple(data.get("template_excludes", ())),
        template_revisions=tuple(r["sha256"] if isinstance(r, dict) else r for r in data.get("template_revisions", ())),
        revision_notes={r["sha256"]: (r.get("repo"), r.get("note", "")) for r in data.get("template_revisions", ())
                        if isinstance(r, dict)},
        fixed_revisions=frozenset(r["sha256"] for r in data.get("template_revisions", ())
                                  if isinstance(r, dict) and r.get("fixed_by")),
        later_revisions=frozenset(r["sha256"] for r in data.get("template_revisions", ())
                                  if isinstance(r, dict) and r.get("later")),
        other_releases=frozenset(r["sha256"] for r in data.get("template_revisions", ())
                                 if isinstance(r, dict) and r.get("other_release")),
        sampling=dict(data.get("sampling", {})),
        upstream_pad_token=_upstream_pad_token(data),
        upstream_config_pad_id=(data.get("upstream_pad_token") or {}).get("config_pad_id"),
    )


def _upstream_pad_token(data: dict[str, Any]) -> tuple[str, str] | None:
    entry = data.get("upstream_pad_token")
    return (entry["token"], entry["repo"]) if entry else None


def _upstream_generation_eos(data: dict[str, Any] | None) -> tuple[tuple[int, ...], str] | None:
    return (tuple(data["ids"]), data["repo"]) if data else None


def _family(data: dict[str, Any]) -> Family:
    if "variants" in data:
        variants = tuple(_variant(v, v["key"], v.get("display", f"{data['display']} {v['key']}"))
                         for v in data["variants"])
    else:
        variants = (_variant({k: data[k] for k in VARIANT_FIELDS if k in data}, "", data["display"]),)
    return Family(
        key=data["key"],
        display=data["display"],
        model_types=tuple(data["model_types"]),
        vocab_groups=tuple(data.get("vocab_groups", ())),
        signature_tokens=dict(data.get("signature_tokens", {})),
        end_of_turn=tuple(data.get("end_of_turn", ())),
        variants=variants,
        primary_for=tuple(data.get("primary_for", ())),
        stop_tokens=tuple(data.get("stop_tokens", ())),
        upstream_pad_token=_upstream_pad_token(data),
        upstream_pad_id=(data.get("upstream_pad_token") or {}).get("id"),
        upstream_config_pad_id=(data.get("upstream_pad_token") or {}).get("config_pad_id"),
        upstream_generation_eos=_upstream_generation_eos(data.get("upstream_generation_eos")),
        tokens_past_rows=((dict(data["tokens_past_rows"]["tokens"]), data["tokens_past_rows"]["repo"])
                          if "tokens_past_rows" in data else None),
        text_markers={m: entry["repo"] for entry in data.get("text_markers", ()) for m in entry["markers"]},
        remote_code_repo=data.get("remote_code_repo"),
        bos_token=data.get("bos_token"),
        vocab_size=data.get("vocab_size"),
        pretrained_stop=dict(data.get("pretrained_stop", {}).get("tokens", {})),
    )


@lru_cache(maxsize=1)
def families() -> tuple[Family, ...]:
    return tuple(_family(f) for f in _load()["families"])


def all_variants() -> list[tuple[Family, Variant]]:
    return [(fam, v) for fam in families() for v in fam.variants]


@lru_cache(maxsize=1)
def vocab_groups() -> dict[str, str]:
    """vocabulary sample hash (hfdoctor.lineage.vocab_sample) -> the group families name:
    families.json's own table, and the vocabularies make_vocab_fingerprints.py read from
    llama.cpp's ggml-vocab-*.gguf files (vocab_fingerprints.json)."""
    groups = dict(_load()["vocab_groups"])
    try:
        shipped = json.loads(data_file("vocab_fingerprints.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        shipped = {}
    for entry in shipped.get("vocabularies", ()):
        if entry.get("sample") and entry.get("group"):
            groups.setdefault(entry["sample"], entry["group"])
    return groups


@lru_cache(maxsize=1)
def text_marker_formats() -> tuple[dict[str, Any], ...]:
    """Chat formats that write their role markers as text (Zephyr's <|user|>): name, repo, markers."""
    return tuple(_load().get("text_marker_formats", {}).get("formats", ()))


@lru_cache(maxsize=1)
def shared_architectures() -> frozenset[str]:
    """Model types other families reuse with vocabularies of their own (llama, mistral, gpt2...):
    the architecture alone does not say which tokenizer the weights were trained with."""
    return frozenset(_load().get("shared_architectures", {}).get("model_types", ()))


def remote_code_family(model_type: str | None) -> Family | None:
    """The family whose upstream publishes this model type only as remote code."""
    return next((fam for fam in families() if fam.remote_code_repo and model_type in fam.model_types), None)


# Llama 3.1+ templates default the date they print ("Today Date: 26 Jul 2024"); upstream
# revisions and re-uploads differ only in that string.
# (RE2 over the repository's text: no backreference, so either quote closes it.)
_DEFAULT_DATE = patterns.compile(r"""(date_string\s*=\s*)(["'])\d{1,2} [A-Z][a-z]{2} \d{4}(["'])""")


# The date a Llama 3.x template prints into its system header ("Today Date: 26 Jul 2024",
# "26 July 2024", or strftime_now's date), in a rendered prompt.
_RENDERED_DATE = patterns.compile(r"Today Date: [^\n]{0,40}")


def without_rendered_date(text: str) -> str:
    """A rendered prompt with the Llama 3.x 'Today Date' value blanked."""
    return _RENDERED_DATE.sub("Today Date: ", text)


def without_default_date(text: str) -> str:
    """The template with its default date string blanked (two texts equal after this differ
    only in the default date)."""
    return _DEFAULT_DATE.sub(r"\1\2\3", text)


def family(key: str | None) -> Family | None:
    return next((fam for fam in families() if fam.key == key), None)


def family_of_repo_id(repo_id: str) -> Family | None:
    """The family an upstream repo id belongs to (by its name pattern)."""
    return next((fam for fam in families() if fam.owns_repo_id(repo_id)), None)


def variant_of_repo_id(repo_id: str) -> tuple[Family, Variant] | None:
    """The family and variant an upstream repo id belongs to."""
    for fam in families():
        found = fam.variant_of_repo_id(repo_id)
        if found is not None:
            return fam, found
    return None


def variant_of_template(sha256: str) -> tuple[Family, Variant] | None:
    """The variant whose canonical template (or a known revision of it) has this sha256."""
    return next(((fam, v) for fam, v in all_variants() if sha256 in v.template_shas()), None)
