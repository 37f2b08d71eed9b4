"""TPL013 template-drift: does the template render like the one the weights were trained on?

Drift is measured against the template the weights learnt, when that one can be known: the
family's canonical upstream template, and every other template upstream published for it
(another release's, an earlier revision). What is not drift:

- a checkpoint trained from another format: the family's pre-trained release (said at info:
  a pre-trained release has no chat format, so the fine-tune's template is its own), or a model
  the registry does not tie to the family (its weights learnt that model's format);
- a template whose turn markers are tokens the checkpoint itself added (a ChatML retrain of
  Mistral, a Gemma 2 fine-tune with <|im_start|>, granite-7b-lab's <|user|> past every Llama
  release's rows even though TinyLlama-Chat writes the same string as text): the fine-tune's own
  trained format;
- a template with `{% generation %}` tags (TRL's assistant_only_loss): a trainer saved the
  template it trained with, so it is the fine-tune's own trained format too; so is TRL's stock
  ChatML, byte for byte (setup_chat_format installs it on the model it is about to train, and
  SmolLM's cosmo2-tokenizer ships the same text to models pre-trained with it); so is Unsloth's own
  template (its header comment says so) on a checkpoint an Unsloth run, or a trainer, saved, and
  the template an Unsloth run saved beside the Ollama Modelfile it wrote from it (its opening text
  in both: an Alpaca preamble from Unsloth's notebooks);
- a template that only renames the default system message (a fine-tune's own identity in place
  of "You are Qwen, created by Alibaba Cloud"): every turn marker, and every conversation that
  sends its own system message, renders as upstream's;
- a difference no server ever sends: only what a finished conversation ends with after its
  last turn (unsloth's Phi-3.5 copy, without the trailing <|endoftext|>), or the default date
  string of a Llama 3.x template.

When the base a checkpoint was trained from cannot be read (an adapter naming a local folder,
or none), which template its weights learnt cannot be known: a difference is info. So it is when
the model's own stop ids miss its template's end of turn: a pre-trained checkpoint or one trained
from it (eos-not-end-of-turn reports the stop ids themselves). And so it is when the checkpoint was
trained here (an adapter, the Trainer's files beside it, an Unsloth run, a card a trainer wrote): a
trainer saves the template it trained with, so the saved one is most likely what the weights learnt.
What no training format intends stays drift even then: a template that fails where upstream's
renders, or that prints a special token between quote characters ('<s>').
"""

from __future__ import annotations

from typing import Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.chat import consistency, corpus
from hfdoctor.chat.analysis import analyze
from hfdoctor.chat.render_plan import TemplateAnalysis, render_key
from hfdoctor.findings import Finding, Severity
from hfdoctor.knowledge import registry
from hfdoctor.knowledge.registry import Variant
from hfdoctor.knowledge.upstream import canonical_template, shipped_revisions
from hfdoctor.lint.edits.template_edits import replace_template_fix
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.lint.rules.template.common import TRAINING_TEMPLATE, default_template, training_template
import hfdoctor.lint.rules.template.trained_format as trained_format
from hfdoctor.lint.rules.template.design import candidate_variants, upstream_templates
from hfdoctor.repo import ModelRepo









def _only_the_date_differs(ours: TemplateAnalysis, upstream: TemplateAnalysis) -> bool:
    """Every standard conversation renders the same once the Llama 3.x 'Today Date' value is
    blanked (a re-typed template that prints "26 July 2024" where upstream prints "26 Jul 2024")."""
    pairs = _drift_renders(ours, upstream)
    if pairs is None:
        return False
    differs = False
    for _, a, b in pairs:
        if a != b:
            if registry.without_rendered_date(a) != registry.without_rendered_date(b):
                return False
            differs = True
    return differs


def _drift_renders(ours: TemplateAnalysis, upstream: TemplateAnalysis) -> list[tuple[str, str, str]] | None:
    """(conversation, our text, upstream's text) for each conversation drift compares; None when
    either template failed to render one of them (then nothing can be said to be all that differs)."""
    pairs = []
    for name, add_generation_prompt in consistency.DRIFT_RENDERS:
        key = render_key(name, add_generation_prompt)
        a, b = ours.renders.get(key), upstream.renders.get(key)
        if a is None or b is None or a.text is None or b.text is None:
            return None
        pairs.append((name, a.text, b.text))
    return pairs


# Conversations a template can decline: (name, the needle upstream's render must keep to support it).
_OPTIONAL_SHAPES = (("tools_available", corpus.TOOL_NEEDLE), ("tool_result", corpus.RESULT_NEEDLE))


def _unsupported(upstream: TemplateAnalysis) -> frozenset[str]:
    """Standard conversations upstream's template drops (Phi-3.5's has no tool turns): the
    weights never learnt a format for them, so no render of them is drift."""
    skip = set()
    for name, needle in _OPTIONAL_SHAPES:
        for key, render in upstream.renders.items():
            if key == render_key(name, True) and render is not None and render.text is not None and needle not in render.text:
                skip.add(name)
    return frozenset(skip)


def _drifts(ours: TemplateAnalysis, upstream: TemplateAnalysis) -> list[consistency.Drift]:
    return consistency.drift(ours, upstream, _unsupported(upstream))


def _same_format(ours: TemplateAnalysis, upstream: TemplateAnalysis) -> bool:
    """Renders like `upstream` on every standard conversation, the default date aside."""
    if registry.without_default_date(ours.text) == registry.without_default_date(upstream.text):
        return True
    return not _drifts(ours, upstream) or _only_the_date_differs(ours, upstream)


def _serving_unaffected(repo: ModelRepo, ours: TemplateAnalysis, upstream: TemplateAnalysis) -> bool:
    """Every prompt a server sends (the renders with a generation prompt) is the same, and the
    finished conversations differ only by control tokens one of them appends after the last
    turn (unsloth's Phi-3.5 copy omits the trailing <|endoftext|>)."""
    differs = False
    skip = _unsupported(upstream)
    for name, add_generation_prompt in consistency.DRIFT_RENDERS:
        key = render_key(name, add_generation_prompt)
        a, b = ours.renders.get(key), upstream.renders.get(key)
        if name in skip or a is None or b is None or a.text == b.text:
            continue
        if add_generation_prompt or a.text is None or b.text is None:
            return False
        longer, shorter = (a.text, b.text) if len(a.text) > len(b.text) else (b.text, a.text)
        if not longer.startswith(shorter) or not _control_tokens_only(repo, longer[len(shorter):]):
            return False
        differs = True
    return differs


def _control_tokens_only(repo: ModelRepo, text: str) -> bool:
    """`text` is whitespace and the checkpoint's added tokens, nothing else."""
    rest = text.strip()
    tokens = sorted((t for t in repo.added_token_strings if t and t in rest), key=len, reverse=True)
    for token in tokens:
        rest = rest.replace(token, "")
    return bool(text.strip()) and not rest.strip()


def _rendered_texts(analysis: TemplateAnalysis) -> list[str]:
    """The text of every render of `analysis` that produced any."""
    return [r.text for r in analysis.renders.values() if r is not None and r.text]


def _own_markers(repo: ModelRepo, lineage: lineage_mod.Lineage, ours: TemplateAnalysis,
                 upstream: list[TemplateAnalysis]) -> list[str]:
    """Tokens the checkpoint added (ids at or past the family's vocabulary, as the registry
    records it) that its template writes and no upstream template does: the fine-tune trained
    on its own format (a ChatML retrain of Mistral adds <|im_start|>=32000, <|im_end|>=32001)."""
    fam = lineage.family_ref
    rows = fam.vocab_rows(smallest=True) if fam is not None else None
    if rows is None:
        return []
    added = {t for t in repo.added_token_strings if t and (repo.token_id(t) or 0) >= rows}
    # Past every release's rows, a token no upstream tokenizer has: an upstream template that
    # writes the same string writes it as plain text, split into pieces (TinyLlama-Chat's
    # '<|user|>'), so the weights that learnt it as one added token learnt their own format
    # (granite-7b-lab's <|user|>=32002 on a Llama-shaped vocabulary).
    largest = max([fam.vocab_rows() or rows, *(b.dims.get("vocab_size") or rows for b in fam.bases)])
    beyond = {t for t in added if (repo.token_id(t) or 0) >= largest}

    def written(analysis: TemplateAnalysis) -> set[str]:
        texts = _rendered_texts(analysis)
        return {t for t in added if any(t in text for text in texts)}

    theirs = set().union(*(written(u) for u in upstream)) if upstream else set()
    return sorted(written(ours) - (theirs - beyond))


def own_format_markers(repo: ModelRepo, analysis: TemplateAnalysis) -> list[str]:
    """The turn markers of `analysis` that are tokens this checkpoint added and no upstream
    template of its family writes as tokens: the template is the checkpoint's own trained format
    (granite-7b-lab's <|user|>/<|assistant|> on a Llama-shaped vocabulary), which no upstream
    template hfdoctor knows describes."""
    lineage = lineage_mod.detect(repo)
    return _own_markers(repo, lineage, analysis, [u.analysis for u in upstream_templates(repo)])




def _only_the_default_system_differs(repo: ModelRepo, ours: TemplateAnalysis, upstream: TemplateAnalysis) -> tuple[str, str] | None:
    """(ours, upstream's) default system text when that is all that differs: the conversation that
    sends its own system message renders the same, and every other render differs by one same
    stretch of plain text (no special or added token) that each template writes as a literal
    (a Qwen2.5 fine-tune's "GMeshNet-OSS-8B, created by Callimesh" for "Qwen, created by Alibaba Cloud")."""
    pairs = _drift_renders(ours, upstream)
    if pairs is None:
        return None
    pair = None
    for name, a, b in pairs:
        if a == b:
            continue
        if name == "system_user":
            return None  # a system message the caller sends is rendered differently: not just a default
        head = 0
        while head < min(len(a), len(b)) and a[head] == b[head]:
            head += 1
        tail = 0
        while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
            tail += 1
        found = (a[head:len(a) - tail], b[head:len(b) - tail])
        if pair is not None and found != pair:
            return None
        pair = found
    if pair is None or not all(pair):
        return None
    specials = (repo.special_token(key) for key in ("bos_token", "eos_token", "pad_token", "unk_token"))
    tokens = [t for t in (*repo.added_token_strings, *specials) if t]
    if any(t in text for t in tokens for text in pair):
        return None
    return pair if pair[0] in ours.text and pair[1] in upstream.text else None


def _other_releases(repo: ModelRepo, candidates: list[Variant]) -> list[tuple[Variant, str, str, TemplateAnalysis]]:
    """(variant, sha256, what it is, analysis) of the upstream templates hfdoctor ships that
    are not the canonical one: another release's, an earlier revision."""
    found = []
    for variant in candidates:
        for sha, text in shipped_revisions(variant):
            found.append((variant, sha, variant.template_name(sha) or variant.display, analyze(repo, text)))
    return found


def _template_bug(repo: ModelRepo, ours: TemplateAnalysis, upstreams: list[TemplateAnalysis]) -> str | None:
    """A difference no training format intends, so it is drift even on a checkpoint trained here:
    the template fails on a conversation upstream's renders, or it writes a special token between
    quote characters no upstream template writes (syGOAT's Mistral template prints '<s>' with its
    quotes: they sit outside the `{{ }}` that was meant to hold them)."""
    for name, add_generation_prompt in consistency.DRIFT_RENDERS:
        key = render_key(name, add_generation_prompt)
        mine = ours.renders.get(key)
        theirs = [u.renders.get(key) for u in upstreams]
        # A template that declines a shape with raise_exception (an Alpaca template refusing system
        # messages) does so on purpose; one that crashes does not.
        if (mine is not None and mine.text is None and mine.error is not None and mine.error.kind != "declined"
                and any(t is not None and t.text is not None for t in theirs)):
            return (f"it fails on {corpus.conversation(name).what}, which upstream's template renders "
                    f"({mine.error.describe()})")
    specials = (repo.special_token(key) for key in ("bos_token", "eos_token"))
    tokens = sorted({t for t in (*specials, *repo.added_token_strings) if t and len(t) > 1})
    # One string per side (NUL never occurs in a token): a vocabulary's thousands of added tokens are
    # each looked up twice, not once per render.
    ours_text = "\0".join(_rendered_texts(ours))
    theirs_text = "\0".join(t for u in upstreams for t in _rendered_texts(u))
    for token in tokens:
        for quote in ("'", '"'):
            quoted = f"{quote}{token}{quote}"
            if quoted in ours_text and quoted not in theirs_text:
                return f"it writes {quoted} with its quote characters, a quoting mistake no training format intends"
    return None


@rule("TPL013", "template-drift", Severity.WARNING, fix=FixAvailability.UNSAFE)
def template_drift(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The rendered output differs from the upstream family template on standard conversations.

    The family and variant come from lineage detection, with at least medium confidence
    (the tokenizer, or the exact dimensions of a release): a template is never compared
    with a family that only its own markers or the card suggest. When the variant is unknown
    (Qwen3's hybrid and Instruct-2507 releases share their dimensions), the template is
    compared with every variant's and reported only when it matches none. A family has
    several legitimate templates: the canonical one (shipped with hfdoctor, verified against
    the sha256 its registry pins; --upstream DIR overrides it) and the other upstream
    releases and revisions hfdoctor knows; a template that renders like any of them is the
    family's own format. Both templates render the same conversations with this repo's
    special tokens and the outputs are compared (not the template source: a reformatted
    template that renders the same is not drift). Whitespace-only differences are info.

    Not drift: a checkpoint trained from a Hub model the registry does not tie to the family
    (silent), or from the family's pre-trained release (info: the adapter's base or config.json's
    _name_or_path names it, or, when neither is written, the card's base_model does and its text
    does not name the chat release, as upstream's own card of that release would); a template whose turn markers are
    tokens the checkpoint added itself (a ChatML retrain of Mistral or Gemma; granite-7b-lab's
    <|user|> past every Llama release's rows, which TinyLlama-Chat writes only as text), that carries
    `{% generation %}` tags (a trainer saved the template it trained with), that is TRL's stock
    ChatML (setup_chat_format installs it on the model it trains), or that is Unsloth's own template
    on a checkpoint an Unsloth run or a trainer (trainer_state.json) saved; a template that only renames the default system message
    (every turn marker and a caller's system message render as upstream's); differences no
    server sends (what a finished conversation ends with after its last turn, the default date
    of a Llama 3.x template). When the base an adapter was trained from cannot be read, which
    template its weights learnt cannot be known: info. So is a difference on a checkpoint trained
    here (an adapter, trainer_state.json or training_args.bin beside it, config.json's
    unsloth_version, a card whose tags or text a trainer wrote): a trainer saves the template it
    trained with. A template that fails where upstream's renders, or prints a special token between
    quote characters, is drift whoever saved it.

    Why: the weights were trained on the upstream format. A fine-tune that ships a
    different template is served prompts the base never saw, unless the fine-tune
    retrained on exactly the new format.

    Example: a copy of Qwen3-8B's weights (no adapter, trainer files or trainer's card) whose
    template writes `<|im_start|>user:` where Qwen3 writes `<|im_start|>user`; a LoRA whose
    template prints `'<s>'[INST]`, quotes included. Upstream's own template of another date or release (Qwen3's April and
    May revisions; Meta-Llama-3-8B-Instruct's, under a Llama 3.1 lineage; Granite 3.1's, under
    Granite 3.3's) is info, not drift; so is Deep Cogito's template on cogito-v1-preview-qwen-14B,
    trained from the pre-trained Qwen2.5-14B.

    Fix: unsafe; replace the template with the upstream one, only when the variant is
    known with at least medium confidence; unsafe because the change may have been
    intended by the fine-tune.
    """

    found = default_template(repo)
    if found is None:
        return
    source, analysis = found
    lineage = lineage_mod.detect(repo)
    candidates = candidate_variants(repo)  # none unless the lineage is certain
    if not candidates or any(analysis.sha256 == v.template.sha256 for v in candidates):
        return
    if trained_format.trained_from_another_format(repo, lineage):
        return
    upstreams = upstream_templates(repo)
    compared = []
    for upstream in upstreams:
        if _same_format(analysis, upstream.analysis) or _serving_unaffected(repo, analysis, upstream.analysis):
            return
        compared.append((upstream.variant, upstream.lookup, _drifts(analysis, upstream.analysis)))
    if not compared:
        yield self.finding(
            repo,
            f"cannot compare with the upstream {candidates[0].display} template: "
            f"{canonical_template(repo.upstream, candidates[0]).source}.",
            severity=Severity.INFO, file=source.file, pointer=source.pointer,
        )
        return
    variant, lookup, drifts = compared[0]
    first = drifts[0]
    if first.ours is None or first.theirs is None:
        detail = (f"on {first.what} the {'repo' if first.ours is None else 'upstream'} template fails while the "
                  "other renders")
    else:
        detail = f"on {first.what}, after …{first.context!r}, this template has {first.ours!r} where upstream has {first.theirs!r}"
    fix = None
    if lineage.variant_ref is variant and lineage.certain:
        fix = replace_template_fix(repo, source, lookup.text, f"replace the template with the upstream {variant.template.repo} one")
    differs = (f"which renders {len(drifts)} of {len(consistency.DRIFT_RENDERS)} standard conversations "
               f"differently: {detail}")
    if analysis.sha256 in variant.template_revisions:
        # Upstream's own template of another date: the weights know this format too. Named
        # after the repo that shipped it; the canonical one is offered only when it is the
        # same model's (R1's January template is not an earlier R1-Distill template).
        own_repo = variant.revision_notes.get(analysis.sha256, (None, ""))[0]
        later = analysis.sha256 in variant.later_revisions or analysis.sha256 in variant.other_releases
        yield self.finding(
            repo,
            f"the chat template is {variant.template_name(analysis.sha256)}, not the "
            + (f"{variant.template.repo} one hfdoctor pins" if later else f"current canonical {variant.template.repo} one")
            + f", {differs}. Upstream's own format"
            + (": nothing to change." if later else ": update it only if you want the later changes."),
            severity=Severity.INFO, file=source.file, pointer=source.pointer,
            fix=fix if own_repo in (None, variant.template.repo) and not later else None,
        )
        return
    for other, _sha, name, other_analysis in _other_releases(repo, candidates):
        if _same_format(analysis, other_analysis):
            yield self.finding(
                repo,
                f"the chat template renders like {name}, not like the current canonical {other.template.repo} one, "
                f"{differs}. Upstream's own format of another release: update it only if you want the later changes.",
                severity=Severity.INFO, file=source.file, pointer=source.pointer,
            )
            return
    own = _own_markers(repo, lineage, analysis, [u.analysis for u in upstreams])
    unknown = trained_format.unknown_base(repo)
    masked = training_template(analysis)
    chatml = analysis.sha256 == trained_format.TRL_CHATML_SHA256
    unsloth = trained_format.unsloth_saved(repo, analysis)
    system = _only_the_default_system_differs(repo, analysis, upstreams[0].analysis)
    pretrained = trained_format.pretrained_release(repo, lineage)
    never_stops = None if pretrained else trained_format.stops_before_no_turn_end(repo)
    bug = _template_bug(repo, analysis, [u.analysis for u in upstreams])
    whitespace_only = all(d.whitespace_only for d in drifts)
    here = None if bug or whitespace_only else trained_format.trained_here(repo)
    if own or unknown or masked or chatml or unsloth or system or pretrained or never_stops or here:
        why = (f"its turn markers ({', '.join(own[:4])}) are tokens this checkpoint added, so it was trained on "
               "its own format" if own else TRAINING_TEMPLATE if masked else trained_format.TRL_CHATML if chatml
               else trained_format.UNSLOTH if unsloth
               else f"only its default system message differs ({system[0][:60]!r} for {system[1][:60]!r}): every turn "
               "marker, and a system message the caller sends, render as upstream's" if system
               else f"it was trained from {pretrained}, a pre-trained {lineage.family_ref.display} release with no chat "
               "format of its own, so its weights learnt the template its own training used, not the instruct "
               "release's" if pretrained
               else never_stops if never_stops
               else f"{unknown}, so which template its weights learnt cannot be known" if unknown
               else f"it was trained here ({here}), and a trainer saves the template it trained with, so this is most "
               "likely the format its weights learnt (if the run trained on upstream's format instead, restore that one)")
        yield self.finding(
            repo,
            f"the chat template differs from the upstream {variant.template.repo} template, {differs}; {why}. "
            "Serve it with this template.",
            severity=Severity.INFO, file=source.file, pointer=source.pointer,
        )
        return
    if len(compared) > 1:
        others = ", ".join(v.template.repo for v, _, _ in compared[1:])
        also = f" (nor like {others}: the evidence does not say which {lineage.family_ref.display} release this is)"
    else:
        also = ""
    yield self.finding(
        repo,
        f"the chat template renders {len(drifts)} of {len(consistency.DRIFT_RENDERS)} standard conversations "
        f"differently from the upstream {variant.template.repo} template{also}"
        + (" (whitespace only)" if whitespace_only else "")
        + f": {detail}" + (f"; {bug}" if bug else "") + ". The weights were trained on the upstream format; unless this "
        "fine-tune was retrained on its own template, it is served prompts it never saw.",
        severity=Severity.INFO if whitespace_only else self.severity,
        file=source.file, pointer=source.pointer, fix=fix,
    )


RULES = [template_drift]
