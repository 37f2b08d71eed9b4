"""The base model of a PEFT adapter: what it stops on, whether it is a chat release, its vocabulary size.

An adapter folder has no config.json and no generation_config.json by design: PEFT,
vLLM (--enable-lora) and TGI load the base that adapter_config.json's
base_model_name_or_path names, and take the stop ids, the embedding rows and (for
vLLM's chat endpoint) the template from it. Rules that judge those on an adapter ask
this module, which knows the base from:

- the files of the base repository in an --upstream directory (HFDOCTOR_UPSTREAM) or the
  local Hugging Face cache: generation_config.json's (else config.json's) eos ids and
  config.json's vocab_size. The Hub is never asked: `check` on an adapter stays offline;
- hfdoctor's registry: which family and release a Hub id is, whether that release is the
  chat one (which stops on the family's end-of-turn tokens) or the pre-trained one.

When neither says, the answer is "unknown" and rules say they cannot verify.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hfdoctor import lineage as lineage_mod
from hfdoctor.bounded import patterns
from hfdoctor.knowledge import registry
from hfdoctor.knowledge.registry import Family, Variant
from hfdoctor.repo import ModelRepo, as_id_list
from hfdoctor.repo.facts import fact
from hfdoctor.knowledge.upstream import Upstream, read_file
from hfdoctor.weights.adapter import QUANTIZED_COPY, cached_hub_id, local_path

# The most bytes of a base's config file read from an upstream folder or the cache.
MAX_BASE_CONFIG_BYTES = 4 * 1024 * 1024
# The names vendors give pre-trained releases (Qwen3-4B-Base, gemma-3-4b-pt) and chat ones.
PRETRAINED_NAME = patterns.compile(r"(?i)[-_.](base|pt)$")
CHAT_NAME = patterns.compile(r"(?i)(instruct|chat|[-_.]it$|[-_.]it[-_.])")


@dataclass(frozen=True)
class AdapterBase:
    named: str | None  # base_model_name_or_path as adapter_config.json writes it
    repo_id: str | None  # the Hub id the base was resolved to
    how: str  # how repo_id was found ("adapter_config.json", "the model card's base_model", ...)
    family: Family | None = None
    variant: Variant | None = None
    pretrained: bool | None = None  # the pre-trained release (True), the chat one (False), unknown (None)
    eos_ids: tuple[int, ...] | None = None  # read from the base's own files
    eos_source: str | None = None  # where eos_ids were read
    vocab_size: int | None = None  # the base's embedding rows (config.json vocab_size)
    vocab_source: str | None = None
    model_type: str | None = None  # the base's config.json model_type, when its files were found
    model_type_source: str | None = None

    @property
    def known(self) -> bool:
        return self.repo_id is not None

    @property
    def label(self) -> str:
        if self.repo_id:
            return self.repo_id
        return repr(self.named) if self.named else "(no base named)"

    @property
    def stop_tokens(self) -> tuple[str, ...]:
        """What the registry knows the base stops on: a chat release of a known family stops on
        its end-of-turn (or stop) tokens, a pre-trained release on what the registry records of
        its family's pre-trained releases (Llama 3.x: <|end_of_text|>); else nothing is known."""
        if self.family is None or self.pretrained is None:
            return ()
        if self.pretrained:
            return tuple(self.family.pretrained_stop)
        return self.family.stop_tokens or self.family.end_of_turn

    def cannot_verify(self, what: str) -> str:
        """The sentence rules print when the base's files were not found."""
        if not self.known:
            named = (f"adapter_config.json's base_model_name_or_path {self.named!r} names no model hfdoctor can "
                     "identify" if self.named else "adapter_config.json names no base model")
            return f"cannot verify {what} without the base model: {named}"
        return (f"cannot verify {what} without the base model's files: pass --upstream DIR holding "
                f"{self.repo_id.replace('/', '--')}/ (its config.json and generation_config.json), or download "
                "them into the Hugging Face cache")


def config_is_the_bases(repo: ModelRepo) -> bool:
    """config.json sits in a PEFT adapter's folder (no weights but the adapter's) whose adapter_config.json names
    the base, as Unsloth and some trainers save the base's config there: AutoPeftModel, PEFT and vLLM load that
    base, with its own config.json and generation_config.json, never this one."""
    base = (repo.adapter_config or {}).get("base_model_name_or_path")
    return repo.config is not None and repo.is_adapter and "peft_type" in (repo.adapter_config or {}) \
        and isinstance(base, str) and bool(base.strip())


@fact
def adapter_base(repo: ModelRepo) -> AdapterBase | None:
    """The base model of an adapter repository (None when the repository is no adapter)."""
    return _resolve(repo) if repo.is_adapter else None


def _resolve(repo: ModelRepo) -> AdapterBase:
    named = lineage_mod.adapter_base_model(repo)
    candidates: list[tuple[str, str]] = []
    if named and not local_path(named):
        candidates.append((named.strip(), "adapter_config.json"))
    candidates += [(b, "the model card's base_model") for b in lineage_mod.card_base_models(repo) if not local_path(b)]
    cached = cached_hub_id(named) if named and local_path(named) else None
    if cached is not None:
        candidates.insert(0, (cached, f"the Hugging Face cache folder {named!r}"))
    elif named and local_path(named):
        folder = named.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
        candidates += [(repo_id, f"the name of the training machine's folder {named!r}")
                       for repo_id in _registry_repos_named(folder)]
    for repo_id, how in candidates:
        base = _describe(repo, repo_id, named, how)
        if base.family is not None or base.eos_ids is not None:
            return base
    if candidates:
        return _describe(repo, candidates[0][0], named, candidates[0][1])
    return AdapterBase(named, None, "nothing names it")


def _registry_repos_named(name: str) -> list[str]:
    """Registry releases whose Hub name is exactly `name` (a local folder keeps the name it was downloaded as)."""
    wanted = name.lower()
    found = []
    for fam in registry.families():
        for base in fam.bases:
            for repo_id in (base.repo, base.base_repo):
                if repo_id and repo_id.rsplit("/", 1)[-1].lower() == wanted and repo_id not in found:
                    found.append(repo_id)
    return found if len(found) == 1 else []  # two releases of that name: the folder does not say which


def _describe(repo: ModelRepo, repo_id: str, named: str | None, how: str) -> AdapterBase:
    fam, variant, pretrained = _registry_release(repo_id)
    eos_ids = eos_source = vocab_size = vocab_source = model_type = model_type_source = None
    local_only = Upstream(repo.upstream.dirs, use_cache=repo.upstream.use_cache, use_hub=False)
    for ask in dict.fromkeys([repo_id, _unquantized(repo_id)]):
        gen, gen_where = _base_json(local_only, ask, "generation_config.json")
        config, config_where = _base_json(local_only, ask, "config.json")
        if gen is not None and "eos_token_id" in gen:
            eos_ids, eos_source = tuple(as_id_list(gen["eos_token_id"])), gen_where
        elif config is not None and "eos_token_id" in config:
            eos_ids, eos_source = tuple(as_id_list(config["eos_token_id"])), config_where
        size = registry.config_value(config, "vocab_size") if config is not None else None
        declared = registry.config_value(config, "model_type") if config is not None else None
        if isinstance(declared, str) and declared and model_type is None:
            model_type, model_type_source = declared, config_where
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            vocab_size, vocab_source = size, config_where
        if eos_ids is not None or vocab_size is not None:
            break
    if vocab_size is None and fam is not None:
        # Without the base's config.json, the rows the registry records for the release (or the
        # family, when every release has the same: Gemma 2's 256,000).
        release = next((b for b in fam.bases if repo_id.lower() in (b.repo.lower(), (b.base_repo or "").lower())
                        or _unquantized(repo_id).lower() in (b.repo.lower(), (b.base_repo or "").lower())), None)
        rows = fam.vocab_rows(release)
        if rows is not None:
            vocab_size, vocab_source = rows, f"hfdoctor's registry of {fam.display} releases"
    return AdapterBase(named, repo_id, how, fam, variant, pretrained, eos_ids, eos_source, vocab_size, vocab_source,
                       model_type, model_type_source)


def _unquantized(repo_id: str) -> str:
    return QUANTIZED_COPY.sub("", repo_id)


def _registry_release(repo_id: str) -> tuple[Family | None, Variant | None, bool | None]:
    """(family, variant, pre-trained?) of a Hub id by hfdoctor's registry and the release's name."""
    lowered = {repo_id.lower(), _unquantized(repo_id).lower()}
    name = _unquantized(repo_id).rsplit("/", 1)[-1].lower()
    for exact in (True, False):  # the release itself, then a copy of it under another organisation
        for fam in registry.families():
            for variant in fam.variants:
                for base in variant.bases:
                    for release, pretrained in ((base.repo, False), (base.base_repo, True)):
                        if release and (release.lower() in lowered if exact else
                                        release.rsplit("/", 1)[-1].lower() == name):
                            return fam, variant, pretrained
    found = registry.variant_of_repo_id(repo_id) or registry.variant_of_repo_id(_unquantized(repo_id))
    name = _unquantized(repo_id).rsplit("/", 1)[-1]
    pretrained = True if PRETRAINED_NAME.search(name) else (False if CHAT_NAME.search(name) else None)
    if found is None:
        return None, None, pretrained
    if pretrained is None and found[1].chat:
        pretrained = False  # every release of that variant is a chat model
    return found[0], found[1], pretrained


def release_stage(repo_id: str) -> bool | None:
    """Whether a Hub id is a pre-trained release (True), a chat one (False) or unknown (None), by
    hfdoctor's registry and the release's name (a quantized copy's too)."""
    return _registry_release(repo_id)[2]


def _base_json(upstream: Upstream, repo_id: str, filename: str) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON object of the base's repository from the upstream dirs or the cache (never the Hub)."""
    found = read_file(upstream, repo_id, filename, limit=MAX_BASE_CONFIG_BYTES)  # inside its roots, bounded
    if found is None:
        return None, None
    where, raw = found
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, None
    return (value, where) if isinstance(value, dict) else (None, None)
