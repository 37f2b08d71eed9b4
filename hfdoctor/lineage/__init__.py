"""Which family and which upstream base model a checkpoint is.

Each source of evidence votes independently, so that a disagreement between them is
itself a finding (tokenizer-lineage-mismatch, base-model-mismatch,
weights-config-mismatch):

- config: `model_type` (and `architectures`) name candidate families; the
  dimensions pick the exact size (Qwen3-8B vs Qwen3-14B).
- tokenizer: a vocabulary fingerprint (the tokens at fixed ids, hashed) and the
  family's signature special tokens with ids.
- template: literal markers only one family's template uses.
- card: the `base_model` of the model card, mapped to a family by repo id.
- weights: what the safetensors headers look like (added by the weights rules).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from hfdoctor.lineage import card_usage

from hfdoctor.bounded import patterns

from hfdoctor.knowledge import registry
from hfdoctor.knowledge.registry import Family, Variant
from hfdoctor.repo import ModelRepo, token_content
from hfdoctor.repo.facts import fact
from hfdoctor.weights.layout import infer_weights_families

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
    # The model_type the checkpoint declares: what the architecture is even when the
    # family is unknown ("llama architecture, family unknown").
    architecture: str | None = None
    # The variant within the family (hybrid, instruct-2507, ...), when the evidence says.
    variant: str | None = None
    # What each source says on its own: family keys it is consistent with.
    by_source: dict[str, list[str]] = field(default_factory=dict)
    # high: the tokenizer and an independent source agree; medium: one decisive source
    # (the tokenizer, or without tokenizer files the config's exact dimensions or the exact
    # upstream template); low: only weaker hints (template markers, card, weight shapes);
    # conflict: a decisive source (config dimensions, tokenizer, weights) names only other
    # families, listed in `disagree` (by_source says what each one names).
    confidence: str = "none"
    disagree: list[str] = field(default_factory=list)
    # "pretrained" when the checkpoint says it is a base model (and nothing says chat),
    # with the reasons in stage_evidence; None when the evidence does not say.
    stage: str | None = None
    stage_evidence: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    family_ref: Family | None = field(default=None, repr=False, compare=False)
    variant_ref: Variant | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "variant": self.variant, "base_model": self.base_model,
                "architecture": self.architecture, "evidence": self.evidence, "confidence": self.confidence,
                "by_source": self.by_source, "disagree": self.disagree, "stage": self.stage}

    @property
    def certain(self) -> bool:
        """Enough to act on (a fix that writes the family's files): medium or high, never a conflict."""
        return self.confidence in ("high", "medium")

    def conflict_text(self) -> str:
        """'the weights say llama3 / deepseek-r1, config and tokenizer say qwen3' (empty without a conflict)."""
        if not self.disagree:
            return ""
        agree = [name for name in self.evidence if name not in self.disagree]
        said = [f"the {name} {'say' if name == 'weights' else 'says'} {' / '.join(self.by_source.get(name, []))}"
                for name in self.disagree]
        return ", ".join(said) + (f", while {' and '.join(agree)} say {self.family}" if agree else "")

def vocab_sample(repo: ModelRepo) -> str | None:
    """Hash of the tokens at fixed ids: equal for equal base vocabularies."""
    if not repo.vocab:
        return None
    by_id = repo.id_to_token  # built once per repository (150k entries)
    if not all(i in by_id for i in VOCAB_SAMPLE_IDS):
        return None
    return hashlib.sha256("\n".join(by_id[i] for i in VOCAB_SAMPLE_IDS).encode()).hexdigest()[:16]


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


# Special tokens that most SentencePiece and BPE vocabularies share: a signature made of
# these alone (Mistral's and Llama 2's <s>=1, </s>=2) names no family by itself.
GENERIC_TOKENS = frozenset({"<unk>", "<s>", "</s>", "<pad>", "<|endoftext|>", "<bos>", "<eos>", "<mask>"})


def generic_signature(fam: Family) -> bool:
    """The family's signature tokens are ones many vocabularies have: only its vocabulary
    (a known vocab group) can name it."""
    return all(token in GENERIC_TOKENS for token in fam.signature_tokens)


def tokenizer_families(repo: ModelRepo) -> list[Family] | None:
    """Families whose tokenizer this is; None when the repo has no tokenizer files.

    What decides is what tells families apart: the vocabulary (the tokens at fixed ids, a
    known vocab group) and special tokens only some families have. A signature of generic
    tokens (<s>=1, </s>=2: Llama 1/2, TinyLlama, Mistral, Yi...) counts only with the
    family's own vocabulary; a vocabulary several families share names none of them alone.
    """
    tokens = known_tokens(repo)
    if not tokens:
        return None
    group = registry.vocab_groups().get(vocab_sample(repo) or "")
    ids_known = repo.vocab is not None

    def signature_matches(fam: Family) -> bool:
        if not fam.signature_tokens:
            return False
        if generic_signature(fam) and (group is None or group not in fam.vocab_groups):
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
        sharing = [f for f in registry.families() if group in f.vocab_groups]
        matched = sharing if len(sharing) == 1 else []  # a shared vocabulary singles out no family
    if not matched and vocab_sample(repo) is None:
        return None  # no vocabulary to read (special_tokens_map.json alone): the tokenizer says nothing
    return matched


def config_families(repo: ModelRepo) -> list[Family]:
    """Families whose architecture is the config's model_type: what the architecture allows,
    not evidence of a family (hundreds of families share LlamaForCausalLM)."""
    model_type = architecture(repo)
    return [f for f in registry.families() if model_type in f.model_types] if model_type else []


# GGUF `general.architecture` names that are not transformers' model_type.
GGUF_ARCHITECTURES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "deepseek2": "deepseek_v3",
                      "command-r": "cohere", "cohere2": "cohere2", "granitehybrid": "granitemoehybrid"}


def architecture(repo: ModelRepo) -> str | None:
    """The model_type the checkpoint declares (config.json, text_config for wrappers; a
    GGUF-only repository's general.architecture)."""
    value = registry.config_value(repo.config, "model_type") if repo.config else None
    if value is None and repo.config is None and repo.gguf_tokenizer is not None:
        arch = repo.gguf.headers[repo.gguf_tokenizer.file].architecture
        value = GGUF_ARCHITECTURES.get(arch, arch) if arch else None
    return value if isinstance(value, str) and value else None


def dims_families(repo: ModelRepo) -> list[Family]:
    """Families with a release of exactly the config's dimensions (hidden size, layers, experts,
    and the vocabulary size where the registry records it) and its architecture."""
    config = repo.config
    model_type = architecture(repo)
    if not config or model_type is None:
        return []
    found = []
    for fam in registry.families():
        for base in fam.bases:
            wanted_type = base.dims.get("model_type")
            dims = {k: v for k, v in base.dims.items() if k != "model_type"}
            if (wanted_type or model_type) == model_type and model_type in fam.model_types \
                    and registry.BaseModel(base.repo, base.base_repo, dims).matches(config):
                found.append(fam)
                break
    return found


def template_variants(repo: ModelRepo) -> list[tuple[Family, Variant]]:
    """(family, variant) pairs the repo's template identifies: its exact text (a canonical
    template or a known upstream revision of it), else literal needles."""
    template = repo.chat_template
    if template is None:
        return []
    exact = registry.variant_of_template(hashlib.sha256(template.text.encode("utf-8", "surrogatepass")).hexdigest())
    if exact is not None:
        return [exact]
    return [(fam, v) for fam, v in registry.all_variants() if v.template_matches(template.text)]


def template_families(repo: ModelRepo) -> list[Family]:
    return list(dict.fromkeys(fam for fam, _ in template_variants(repo)))


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


adapter_base_model = card_usage.adapter_base_model


def adapter_families(repo: ModelRepo) -> list[Family]:
    base = adapter_base_model(repo)
    fam = registry.family_of_repo_id(base) if base else None
    return [fam] if fam is not None else []


def weights_families(repo: ModelRepo) -> list[Family] | None:
    """Families the weight headers look like (None when there is nothing to read)."""
    return infer_weights_families(repo)


card_chat_usage, trained_from = card_usage.card_chat_usage, card_usage.trained_from


def chat_evidence(repo: ModelRepo, family: Family | None = None, variant: Variant | None = None) -> list[str]:
    """Reasons to believe this checkpoint is a chat/instruct model (empty: looks base).

    An eos token that also ends plain documents (</s>, <|endoftext|>) is no evidence: a base
    model and an Alpaca-style instruction tune stop on it as well.
    """
    reasons: list[str] = []
    eos = repo.special_token("eos_token")
    turn_markers = (TURN_END_MARKERS | set(family.end_of_turn if family else ())) - GENERIC_TOKENS
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
            if card_usage.names_chat_release(repo_id):
                reasons.append(f"the model card's base_model {repo_id} is a chat model")
                break
    reasons += [r for r in (card_usage.card_chat_usage(repo), card_usage.chat_origin(repo)) if r is not None]
    if variant is not None and variant.chat:
        reasons.append(f"every {variant.display} release is a chat model")
    elif variant is None and family is not None and family.chat:
        reasons.append(f"every {family.display} release is a chat model")
    return reasons


# A model's own name ends with "-Base" (Qwen3-4B-Base, ...): the vendors' name for the
# pre-trained checkpoint. Read from a Hub id or the card's first heading.
BASE_NAME = patterns.compile(r"(?i)[-_.]base$")
# Qwen's cards: "- Training Stage: Pretraining" (chat releases: "Pretraining & Post-training").
PRETRAINING_STAGE = patterns.compile(r"(?im)^[\s*-]*training stage[\s*]*:[\s*]*pre-?training[\s*.]*$")
CARD_HEADING = patterns.compile(r"(?m)^#\s+(\S[^\n]{0,200}?)\s*$")


def pretrained_evidence(repo: ModelRepo) -> list[str]:
    """Reasons to believe this is a pre-trained (base) checkpoint, not a chat model.

    Empty when anything says chat (chat_evidence's own signals: an end-of-turn eos, chat
    tags, a chat base_model) or nothing names it a base.
    """
    own_signals = [r for r in chat_evidence(repo) if not r.startswith("every ")]
    if own_signals:
        return []
    reasons = []
    repo_id = getattr(repo.source, "repo_id", None)
    if isinstance(repo_id, str) and BASE_NAME.search(repo_id):
        reasons.append(f"its Hub name {repo_id} ends in Base")
    card = repo.card
    if card is not None:
        heading = CARD_HEADING.search(card.body[:20_000])
        if heading is not None and BASE_NAME.search(heading.group(1).strip("*` ")):
            reasons.append(f"the model card is titled {heading.group(1)!r}")
        if PRETRAINING_STAGE.search(card.body[:50_000]):
            reasons.append("the model card gives its training stage as pretraining")
    return reasons


# The sources whose disagreement is a conflict (the card is often wrong, and says so
# through base-model-mismatch; the template is often borrowed).
DECISIVE = ("config", "tokenizer", "weights")
# How much each source's word counts when several families remain possible.
WEIGHTS = {"config": 4.0, "tokenizer": 3.0, "adapter": 3.0, "template": 2.0, "weights": 2.0, "card": 1.0}


@fact
def detect(repo: ModelRepo) -> Lineage:
    """Combine the evidence into one family, variant and base model (a fact of the repository).

    The vocabulary and special tokens decide the family: when the repo has tokenizer
    files, only a family they match can be chosen, and an unknown vocabulary means an
    unknown family. Without tokenizer files, the config's exact dimensions, the exact
    upstream template, template markers, the weights' shapes or the card may name it. The
    architecture (model_type) alone never does: it only rules families out.
    """
    arch = architecture(repo)

    def fits(fams: list[Family] | None) -> list[Family] | None:
        return None if fams is None else [f for f in fams if arch is None or arch in f.model_types]

    tokenizer = tokenizer_families(repo)
    # What each source says on its own (the report shows it: weights that look like Llama
    # under a Qwen3 config say so); only families of the declared architecture can win.
    sources: dict[str, list[Family] | None] = {
        "config": dims_families(repo) or None,
        "tokenizer": tokenizer,
        "template": template_families(repo) or None,
        "card": card_families(repo) or None,
        "weights": weights_families(repo),
        "adapter": adapter_families(repo) or None,
    }
    if tokenizer is not None:
        candidates = fits(tokenizer) or []
        if tokenizer and not candidates:  # a tokenizer of another architecture: tokenizer-lineage-mismatch
            candidates = sources["config"] or []
    else:
        candidates = fits(list(dict.fromkeys(f for name in ("config", "adapter", "template", "weights", "card")
                                             for f in sources[name] or []))) or []

    def score(fam: Family) -> float:
        total = sum(WEIGHTS[name] for name, fams in sources.items() if fams and fam in fams)
        return total + (0.5 if arch in fam.primary_for else 0.0)

    chosen = max(candidates, key=score, default=None)
    if chosen is not None and sum(1 for f in candidates if score(f) == score(chosen)) > 1:
        # Evidence that does not single out one family is no evidence: a vocabulary two
        # families share (GPT-2's and Phi-2's) with nothing else to tell them apart.
        chosen = None
    evidence = [name for name, fams in sources.items() if chosen and fams and chosen in fams]
    # A decisive source that names only other families contradicts the choice: the
    # weights of one model under the config and tokenizer of another is a conflict to
    # report, not a verdict to act on (no fix may pick a side).
    disagree = [name for name in DECISIVE if chosen and sources[name] and chosen not in sources[name]]
    pretrained = pretrained_evidence(repo)
    variant = _variant(repo, chosen, bool(pretrained)) if chosen else None
    lineage = Lineage(
        family=chosen.key if chosen else None,
        base_model=_base_model(repo, chosen, variant, bool(pretrained)),
        evidence=evidence,
        architecture=arch,
        variant=(variant.key or None) if variant else None,
        by_source={name: [f.key for f in fams] for name, fams in sources.items() if fams is not None},
        confidence="conflict" if disagree else _confidence(repo, evidence, tokenizer is not None),
        disagree=disagree,
        stage="pretrained" if pretrained else None,
        stage_evidence=pretrained,
        family_ref=chosen,
        variant_ref=variant,
    )
    return lineage


def _template_sha(repo: ModelRepo) -> str | None:
    template = repo.chat_template
    return hashlib.sha256(template.text.encode("utf-8", "surrogatepass")).hexdigest() if template else None


def _confidence(repo: ModelRepo, evidence: list[str], has_tokenizer: bool) -> str:
    if not evidence:
        return "none"
    if "tokenizer" in evidence:
        return "high" if len(evidence) > 1 else "medium"
    if has_tokenizer:
        return "low"  # the tokenizer itself said nothing for this family
    exact = registry.variant_of_template(_template_sha(repo) or "") is not None
    decisive = "config" in evidence or "adapter" in evidence  # exact dimensions, or the base PEFT loads
    return "medium" if decisive or (exact and "template" in evidence) else "low"


def _variant(repo: ModelRepo, fam: Family, pretrained: bool = False) -> Variant | None:
    """Which variant of `fam` the evidence names; None when it does not say.

    A pre-trained checkpoint is none of several variants: Qwen3's -Base releases ship the
    hybrid template, but have no thinking mode (variants describe post-trained behaviour).
    The exact upstream template decides; then the card's base_model, unless the config's
    dimensions rule that variant out (and the base model a PEFT adapter names); then a
    variant's template markers; then the
    dimensions, when only one variant has a release of that size. How a template behaves
    is not evidence: the rules judge it against the variant.
    """
    if fam.only_variant is not None:
        return fam.only_variant
    if pretrained:
        return None
    sha = _template_sha(repo)
    exact = next((v for v in fam.variants if sha in v.template_shas()), None) if sha else None
    if exact is not None:
        return exact
    by_dims = fam.variants_for(repo.config) if repo.config else []
    adapter_base = adapter_base_model(repo)
    for repo_id in card_base_models(repo) + ([adapter_base] if adapter_base else []):
        named = fam.variant_of_repo_id(repo_id)
        if named is not None and (not by_dims or named in by_dims):
            return named
    marked = [v for f, v in template_variants(repo) if f is fam]
    if len(marked) == 1:
        return marked[0]
    return by_dims[0] if len(by_dims) == 1 else None


def _base_model(repo: ModelRepo, fam: Family | None, variant: Variant | None, pretrained: bool = False) -> str | None:
    if fam is None:
        return None
    config = repo.config
    if pretrained and config:  # the -Base release of these dimensions, whichever variant lists it
        named = {b.base_repo for v in fam.variants if (b := v.base_for(config)) is not None and b.base_repo}
        if len(named) == 1:
            return named.pop()
    by_dims = variant.base_for(config) if variant is not None else fam.base_for(config)
    # Trust the card's base_model when it is of this family and not contradicted by size.
    for repo_id in card_base_models(repo):
        if registry.family_of_repo_id(repo_id) is fam:
            named = fam.base_by_repo(repo_id)
            if named is None or by_dims is None or named is by_dims:
                return repo_id
    bases = variant.bases if variant is not None else fam.bases
    if by_dims is None:
        return bases[0].repo if len(bases) == 1 and not config else None
    if chat_evidence(repo, fam, variant) or by_dims.base_repo is None:
        return by_dims.repo
    return by_dims.base_repo
