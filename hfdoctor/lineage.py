"""Which family and which upstream base model a checkpoint is.

Each source of evidence votes independently, so that a disagreement between them is
itself a finding (tokenizer-lineage-mismatch, base-model-mismatch,
weights-config-mismatch):

- config: `model_type` (and `architectures`) name candidate families; the
  dimensions pick the exact size (Qwen3-8B vs Qwen3-14B).
- tokenizer: a vocabulary fingerprint (the tokens at fixed ids, hashed), an encode
  fingerprint (the ids a fixed text tokenizes to, hashed: llama.cpp's chkhsh idea,
  computed with `tokenizers`), and the family's signature special tokens with ids.
- template: literal markers only one family's template uses.
- card: the `base_model` of the model card, mapped to a family by repo id.
- weights: what the safetensors headers look like (added by the weights rules).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from hfdoctor import registry
from hfdoctor.registry import Family
from hfdoctor.repo import ModelRepo, token_content
from hfdoctor.weights.layout import infer_weights_families

# Fixed probe text for the encode fingerprint: digits, contractions, runs of spaces,
# tabs and newlines, accents, CJK, emoji and code, where pre-tokenizers differ.
FINGERPRINT_TEXT = "Hello world! 123 4567 'll 've  \n\n\t tab  ünïcödé 中文 🦙 <think> def f(x): return x**2"
# Ids whose tokens identify a vocabulary; all below 32000, the smallest vocab we know.
VOCAB_SAMPLE_IDS = range(1000, 30001, 1000)
# Tokens that end a chat turn in some family; their presence as eos marks a chat model.
TURN_END_MARKERS = {
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>", "<|return|>",
    "<|endofturn|>", "<|END_OF_TURN_TOKEN|>", "<|user|>", "[/INST]",
}


@dataclass
class Lineage:
    family: str | None
    base_model: str | None
    evidence: list[str]
    # What each source says on its own: family keys it is consistent with.
    by_source: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "base_model": self.base_model, "evidence": self.evidence}


def vocab_sample(vocab: dict[str, int] | None) -> str | None:
    """Hash of the tokens at fixed ids: equal for equal base vocabularies."""
    if not vocab:
        return None
    by_id = dict(zip(vocab.values(), vocab.keys()))
    if not all(i in by_id for i in VOCAB_SAMPLE_IDS):
        return None
    return hashlib.sha256("\n".join(by_id[i] for i in VOCAB_SAMPLE_IDS).encode()).hexdigest()[:16]


def encode_fingerprint(repo: ModelRepo) -> str | None:
    tokenizer = repo.tokenizer
    if tokenizer is None:
        return None
    try:
        ids = tokenizer.encode(FINGERPRINT_TEXT, add_special_tokens=False).ids
    except Exception:
        return None
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def known_tokens(repo: ModelRepo) -> dict[str, int | None]:
    """Tokens the repo's tokenizer files name, with their ids where known."""
    tokens: dict[str, int | None] = dict(repo.vocab or {})
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        name = repo.special_token(key)
        if name is not None and name not in tokens:
            tokens[name] = None
    extras = (repo.tokenizer_config or {}).get("additional_special_tokens")
    for extra in extras if isinstance(extras, list) else []:
        name = token_content(extra)
        if name is not None and name not in tokens:
            tokens[name] = None
    return tokens


def tokenizer_families(repo: ModelRepo) -> list[Family] | None:
    """Families whose tokenizer this is; None when the repo has no tokenizer files."""
    tokens = known_tokens(repo)
    if not tokens:
        return None
    group = registry.vocab_groups().get(vocab_sample(repo.vocab) or "")
    ids_known = repo.vocab is not None

    def signature_matches(fam: Family) -> bool:
        if not fam.signature_tokens:
            return False
        for token, token_id in fam.signature_tokens.items():
            if token not in tokens:
                return False
            if ids_known and token_id is not None and tokens[token] != token_id:
                return False
        return True

    matched = [f for f in registry.families() if signature_matches(f)]
    if group is not None:
        matched = [f for f in matched if not f.vocab_groups or group in f.vocab_groups]
    # Keep only the most specific: drop a family whose signature is a strict subset of
    # another match's (a QwQ tokenizer also satisfies the Qwen2.5 signature).
    def dominated(f: Family) -> bool:
        mine = set(f.signature_tokens.items())
        return any(mine < set(g.signature_tokens.items()) for g in matched if g is not f)

    matched = [f for f in matched if not dominated(f)]
    if not matched and group is not None:
        matched = [f for f in registry.families() if group in f.vocab_groups]
    return matched


def config_families(repo: ModelRepo) -> list[Family]:
    config = repo.config or {}
    model_type = registry.config_value(config, "model_type")
    if not isinstance(model_type, str):
        return []
    return [f for f in registry.families() if model_type in f.model_types]


def template_families(repo: ModelRepo) -> list[Family]:
    template = repo.chat_template
    if template is None:
        return []
    return [f for f in registry.families() if f.template_needles and all(n in template.text for n in f.template_needles)]


def card_base_models(repo: ModelRepo) -> list[str]:
    card = repo.card
    if card is None or not card.metadata:
        return []
    value = card.metadata.get("base_model")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def card_families(repo: ModelRepo) -> list[Family]:
    found = []
    for repo_id in card_base_models(repo):
        fam = registry.family_of_repo_id(repo_id)
        if fam is not None and fam not in found:
            found.append(fam)
    return found


def weights_families(repo: ModelRepo) -> list[Family] | None:
    """Families the weight headers look like (None when there is nothing to read)."""
    return infer_weights_families(repo)


def chat_evidence(repo: ModelRepo, family: Family | None = None) -> list[str]:
    """Reasons to believe this checkpoint is a chat/instruct model (empty: looks base)."""
    reasons: list[str] = []
    eos = repo.special_token("eos_token")
    turn_markers = TURN_END_MARKERS | set(family.end_of_turn if family else ())
    if eos in turn_markers:
        reasons.append(f"tokenizer_config.json's eos_token is the end-of-turn marker {eos}")
    # Without a vocabulary, the family's signature tokens still say what an id is.
    id_to_token = repo.id_to_token or {i: t for t, i in (family.signature_tokens if family else {}).items() if i is not None}
    for token_id in repo.eos_ids:
        token = id_to_token.get(token_id)
        if token in turn_markers and token != eos:
            reasons.append(f"{repo.eos_ids_source} stops on the end-of-turn marker {token} ({token_id})")
            break
    card = repo.card
    if card is not None and card.metadata:
        tags = card.metadata.get("tags") or []
        tags = [t.lower() for t in tags if isinstance(t, str)] if isinstance(tags, list) else []
        if {"conversational", "chat", "instruct"} & set(tags):
            reasons.append("the model card is tagged conversational/chat")
        if card.metadata.get("pipeline_tag") == "conversational":
            reasons.append("the model card's pipeline_tag is conversational")
        widget = card.metadata.get("widget")
        if isinstance(widget, list) and any(isinstance(w, dict) and "messages" in w for w in widget):
            reasons.append("the model card's widget sends chat messages")
        for repo_id in card_base_models(repo):
            if any(w in repo_id.lower() for w in ("instruct", "-it", "chat", "-r1", "qwq")):
                reasons.append(f"the model card's base_model {repo_id} is a chat model")
                break
    if family is not None and family.chat:
        reasons.append(f"every {family.display} release is a chat model")
    return reasons


def detect(repo: ModelRepo) -> Lineage:
    """Combine the evidence into one family and base model (cached on the repo)."""
    cached = getattr(repo, "_lineage", None)
    if cached is not None:
        return cached
    config = repo.config
    sources: dict[str, list[Family] | None] = {
        "config": config_families(repo) if config else None,
        "tokenizer": tokenizer_families(repo),
        "template": template_families(repo) or None,
        "card": card_families(repo) or None,
        "weights": weights_families(repo),
    }
    candidates = sources["config"] or sources["tokenizer"] or sources["weights"] or sources["card"] or []
    model_type = registry.config_value(config, "model_type") if config else None

    def score(fam: Family) -> float:
        s = 0.0
        weights = {"config": 4.0, "tokenizer": 3.0, "template": 2.0, "weights": 2.0, "card": 1.0}
        for name, fams in sources.items():
            if fams and fam in fams:
                s += weights[name]
        if fam.base_for(config) is not None:
            s += 1.0
        if model_type in fam.primary_for:
            s += 0.5
        return s

    chosen = max(candidates, key=score, default=None)  # max keeps the first of equals
    lineage = Lineage(
        family=chosen.key if chosen else None,
        base_model=_base_model(repo, chosen),
        evidence=[name for name, fams in sources.items() if chosen and fams and chosen in fams],
        by_source={name: [f.key for f in fams] for name, fams in sources.items() if fams is not None},
    )
    repo._lineage = lineage  # type: ignore[attr-defined]
    return lineage


def _base_model(repo: ModelRepo, fam: Family | None) -> str | None:
    if fam is None:
        return None
    config = repo.config
    by_dims = fam.base_for(config)
    # Trust the card's base_model when it is of this family and not contradicted by size.
    for repo_id in card_base_models(repo):
        if registry.family_of_repo_id(repo_id) is fam:
            named = fam.base_by_repo(repo_id)
            if named is None or by_dims is None or named is by_dims:
                return repo_id
    if by_dims is None:
        return fam.bases[0].repo if len(fam.bases) == 1 and not config else None
    if chat_evidence(repo, fam) or by_dims.base_repo is None:
        return by_dims.repo
    return by_dims.base_repo
