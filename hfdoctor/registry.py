"""The family registry: what each upstream model family looks like.

The data lives in `upstream_templates/families.json` (shipped inside the package as
package data, and read from the source tree in a checkout). Each family names the
config model types it uses, the special tokens (and ids) that identify its
tokenizer, its end-of-turn tokens, whether it thinks, its upstream repos with their
dimensions, and the upstream repo whose chat template is canonical (with sha256).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

_DATA_DIRS = (
    Path(__file__).resolve().parent / "data",  # installed wheel (force-included)
    Path(__file__).resolve().parent.parent / "upstream_templates",  # source checkout
)


def data_file(name: str) -> Path:
    """A file of the registry data directory (upstream_templates/ in the source tree)."""
    for directory in _DATA_DIRS:
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{name} not found: hfdoctor's package data is missing")


@dataclass(frozen=True)
class BaseModel:
    repo: str  # the released (chat/instruct) repo of this size
    base_repo: str | None  # its pretrained-only sibling, when there is one
    dims: dict[str, Any]

    def matches(self, config: dict[str, Any]) -> bool:
        """True when every dimension this entry records equals the config's."""
        for key, value in self.dims.items():
            if key == "num_experts":
                got = config.get("num_experts", config.get("n_routed_experts"))
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


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per family
class Family:
    key: str
    display: str
    model_types: tuple[str, ...]
    vocab_groups: tuple[str, ...]
    signature_tokens: dict[str, int | None]
    end_of_turn: tuple[str, ...]
    thinking: str  # none | hybrid | always | effort
    chat: bool
    repo_patterns: tuple[str, ...]
    bases: tuple[BaseModel, ...]
    template: CanonicalTemplate | None
    primary_for: tuple[str, ...] = ()
    template_needles: tuple[str, ...] = ()
    encode_fingerprints: tuple[str, ...] = field(default_factory=tuple)

    def owns_repo_id(self, repo_id: str) -> bool:
        return any(re.search(p, repo_id, re.IGNORECASE) for p in self.repo_patterns)

    def base_for(self, config: dict[str, Any] | None) -> BaseModel | None:
        if not config:
            return None
        for base in self.bases:
            if base.matches(config):
                return base
        return None

    def base_by_repo(self, repo_id: str) -> BaseModel | None:
        low = repo_id.lower()
        for base in self.bases:
            if low in (base.repo.lower(), (base.base_repo or "").lower()):
                return base
        return None


def config_value(config: dict[str, Any] | None, key: str) -> Any:
    """A config value, looking into text_config for multimodal wrappers."""
    config = config or {}
    if key in config:
        return config[key]
    text_config = config.get("text_config")
    if isinstance(text_config, dict):
        return text_config.get(key)
    return None


@lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    return json.loads(data_file("families.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def architectures() -> dict[str, list[str]]:
    """model_type -> the model classes transformers maps it to (architectures.json)."""
    return json.loads(data_file("architectures.json").read_text(encoding="utf-8"))["model_types"]


def _family(data: dict[str, Any]) -> Family:
    template = data.get("template")
    return Family(
        key=data["key"],
        display=data["display"],
        model_types=tuple(data["model_types"]),
        vocab_groups=tuple(data.get("vocab_groups", ())),
        signature_tokens=dict(data.get("signature_tokens", {})),
        end_of_turn=tuple(data.get("end_of_turn", ())),
        thinking=data.get("thinking", "none"),
        chat=bool(data.get("chat", True)),
        repo_patterns=tuple(data.get("repo_patterns", ())),
        bases=tuple(BaseModel(b["repo"], b.get("base_repo"), dict(b["dims"])) for b in data.get("bases", ())),
        template=CanonicalTemplate(
            template["repo"], template.get("revision"), template["file"], template["sha256"],
            template.get("revision_note", ""),
        ) if template else None,
        primary_for=tuple(data.get("primary_for", ())),
        template_needles=tuple(data.get("template_needles", ())),
        encode_fingerprints=tuple(data.get("encode_fingerprints", ())),
    )


@lru_cache(maxsize=1)
def families() -> tuple[Family, ...]:
    return tuple(_family(f) for f in _load()["families"])


def vocab_groups() -> dict[str, str]:
    return dict(_load()["vocab_groups"])


def family(key: str | None) -> Family | None:
    for fam in families():
        if fam.key == key:
            return fam
    return None


def family_of_repo_id(repo_id: str) -> Family | None:
    """The family an upstream repo id belongs to (by its name pattern)."""
    for fam in families():
        if fam.owns_repo_id(repo_id):
            return fam
    return None
