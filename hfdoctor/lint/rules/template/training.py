"""What fine-tuning and prompt caches need from a template: renders that are prefixes of
the next turn, full renders that equal prompt + reply, assistant masks, and the
family's own format (drift)."""

from __future__ import annotations

from typing import Any, Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.knowledge import registry
from hfdoctor.chat import consistency, corpus
from hfdoctor.chat.render_plan import has_generation_tag, render_key
from hfdoctor.chat.consistency import Vocabulary
from hfdoctor.lint.edits.template_edits import replace_template_fix
from hfdoctor.findings import Facet, FacetKind, Finding, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.lint.rules.template.common import default_template, line_of_text, location, mode_text
from hfdoctor.lint.rules.template.design import candidate_variants, design_facets, upstream_templates
from hfdoctor.bounded.tokenizing import Splitter, load_splitter
from hfdoctor.knowledge.upstream import canonical_template


@rule("TPL010", "prefix-instability", Severity.WARNING, fix=FixAvailability.NONE)
def prefix_instability(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The rendering of a conversation is not a prefix of the rendering of its continuation.

    For each scenario (a reply then the next user turn; a reply with reasoning then the
    next turn; a tool call then its result), with each thinking kwarg the template reads,
    what a server cached for the turn (the generation prompt, then what the model wrote:
    its reasoning, its reply or tool call) must be how the next request starts. Compared
    in TOKENS, like TRL's is_chat_template_prefix_preserving: added tokens cut the text
    into segments that tokenize independently, so the repo's tokenizer is built only when
    the boundary is not an added token (then two newlines merging into one token is caught
    too). Without tokenizer files, characters are compared. Text the template appends to
    every finished conversation but the model writes itself (Command-A's turn opener) is
    not a divergence: it is what the model generated.

    Why: prompt caches (vLLM automatic prefix caching, SGLang RadixAttention, llama.cpp
    cache_prompt) reuse the KV cache of the previous turn only up to the first token
    that differs; after it, the whole rest of the conversation is recomputed every turn.
    Multi-turn agents pay that on every step.

    Example: Qwen3 drops the reasoning of earlier turns, and with enable_thinking=False
    the empty `<think></think>` its generation prompt pre-fills, by design.

    Fix: none automatic. When it is the family's design, nothing to do but know it;
    otherwise render earlier turns the same way whatever follows them.
    """

    found = default_template(repo)
    if found is None:
        return
    source, analysis = found
    vocabulary = _vocabulary(repo)
    for scenario in corpus.CONTINUATIONS:
        groups: dict[tuple, tuple[list[dict], consistency.Divergence]] = {}
        for mode in analysis.modes:
            div = consistency.prefix_divergence(analysis, scenario, vocabulary, mode)
            if div is not None:
                groups.setdefault((div.index, div.earlier, div.later, div.reason), ([], div))[0].append(mode)
        for modes, div in groups.values():
            where = f"token #{div.index}" if div.unit == "token" else f"character {div.index}"

            def same_way(upstream, modes=modes, div=div, scenario=scenario) -> bool:
                return any((d := consistency.prefix_divergence(upstream, scenario, vocabulary, m)) is not None
                           and d.kind == div.kind for m in modes)

            yield self.finding(
                repo,
                f"{scenario.what} ({' / '.join(mode_text(m) for m in modes)}): what the server cached for the turn "
                f"is not how the next request starts. First divergent token ({where}, after …{div.context!r}): "
                f"{div.earlier!r} becomes {div.later!r} — {div.reason}. Prefix caches (vLLM, SGLang, llama.cpp) "
                "recompute the conversation from there on every turn.",
                severity=Severity.WARNING, file=source.file, pointer=source.pointer,
                facets=_facets(repo, analysis, div.reasoning_only, same_way),
            )


def _facets(repo: ModelRepo, analysis, reasoning_only: bool, same_way) -> list[Facet]:
    facets = [Facet(FacetKind.CHAT_ONLY)] + ([Facet(FacetKind.REASONING_ONLY)] if reasoning_only else [])
    return facets + design_facets(repo, analysis, same_way)


def _vocabulary(repo: ModelRepo):
    """The repo's added tokens for token-boundary reasoning; the tokenizer built only if needed."""

    added = repo.added_token_strings
    lstrip = {str(t.get("content")) for t in repo.tokenizer_json_added_entries if t.get("lstrip")}
    splitter: list = []

    def split() -> Splitter | None:  # built once, on the first boundary that needs it
        if not splitter:
            splitter.append(load_splitter(repo.tokenizer_json) if repo.tokenizer_json is not None else None)
        return splitter[0]

    return Vocabulary(tuple(sorted(a for a in added if a)), frozenset(lstrip), lambda: repo.tokenizer, split)


@rule("TPL011", "train-inference-mismatch", Severity.WARNING, fix=FixAvailability.NONE)
def train_inference_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """Rendering a full conversation differs from generation prompt + reply + end of turn.

    For a plain reply, the reply of a second turn and the reply after a tool result,
    `render(prompt, add_generation_prompt=True) + reply` must be how
    `render(prompt + [reply])` starts; checked with each thinking kwarg setting the
    template reads.

    Why: fine-tuning renders whole conversations; serving renders the prompt and lets
    the model write the reply. Where the two differ, the model is trained to produce
    text after the prompt that it is never served (Qwen3: an empty `<think>\\n\\n</think>`
    before every reply of a conversation rendered without reasoning), or is served a
    prompt it never saw in training. A known source of fine-tunes that stop thinking.

    Example: Qwen3-8B's own template renders an empty thinking block before the last
    reply of a full conversation, never after the generation prompt (info: upstream's
    design, which its fine-tunes inherit).

    Fix: none automatic; build training examples as generation prompt + reply + end of
    turn, or pass the same kwargs (e.g. enable_thinking=False) in training and serving.
    """

    if repo.gguf_tokenizer is not None:
        return  # a GGUF-only repository is served by llama.cpp, not fine-tuned
    found = default_template(repo)
    if found is None:
        return
    source, analysis = found
    groups: dict[tuple[str, str, bool], tuple[list[dict], list[corpus.Completion], Any]] = {}
    for mode in analysis.modes:
        for scenario in corpus.COMPLETIONS:
            mismatch = consistency.completion_mismatch(analysis, scenario, mode)
            if mismatch is None:
                continue
            modes, scenarios, first = groups.setdefault((mismatch.prompt_has, mismatch.full_has, mismatch.inserted),
                                                        ([], [], mismatch))
            if mode not in modes:
                modes.append(mode)
            if scenario not in scenarios:
                scenarios.append(scenario)
    for (prompt_has, full_has, inserted), (modes, scenarios, first) in groups.items():
        whats = [s.what for s in scenarios]

        def same_way(upstream, modes=modes, scenarios=scenarios, first=first) -> bool:
            return any((m := consistency.completion_mismatch(upstream, s, mode)) is not None and m.kind == first.kind
                       for mode in modes for s in scenarios)

        if first.empty_thinking:
            what = (f"the full render puts an empty thinking block {full_has!r} between the generation prompt and "
                    "the reply; fine-tuned on such renders, the model learns to skip reasoning")
        elif inserted:
            what = (f"the full render puts {full_has!r} between the generation prompt and the reply, "
                    "which the generation prompt does not end with")
        else:
            what = (f"after …{first.context!r} the generation prompt has {prompt_has!r} where the full render has "
                    f"{full_has!r}")
        yield self.finding(
            repo,
            f"with {' / '.join(mode_text(m) for m in modes)}, for {', '.join(whats)}: {what}. A model fine-tuned on "
            "full renders learns to follow the prompt with text it is never served (or is served a prompt it never "
            "saw). Build training examples as generation prompt + reply + end of turn, with the same kwargs as in "
            "serving.",
            file=source.file, pointer=source.pointer,
            facets=_facets(repo, analysis, first.reasoning_only, same_way),
        )


@rule("TPL012", "no-assistant-mask", Severity.INFO, fix=FixAvailability.NONE)
def no_assistant_mask(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The template has no `{% generation %}` markers, so assistant-only loss masks are impossible.

    Why: transformers' apply_chat_template(return_assistant_tokens_mask=True) and TRL's
    `assistant_only_loss=True` find the assistant's tokens through the
    `{% generation %}...{% endgeneration %}` blocks of the template; without them the
    mask is all zeros (transformers only warns), so fine-tuning either trains on the
    user's text too or masks everything. When the blocks exist, they must cover the
    assistant's reply and nothing of the user's (checked on a rendered reply; warning).

    Example: SmolLM3's template wraps each assistant message in `{% generation %}`.

    Fix: none automatic; wrap each assistant message's content (and end of turn) in
    `{% generation %}...{% endgeneration %}`.
    """

    if repo.gguf_tokenizer is not None:
        return  # a GGUF-only repository is served by llama.cpp, not fine-tuned
    found = default_template(repo)
    if found is None:
        return
    source, analysis = found
    if not has_generation_tag(source.text):
        yield self.finding(
            repo,
            "the chat template has no {% generation %} blocks: return_assistant_tokens_mask / TRL's "
            "assistant_only_loss give an empty mask, so fine-tuning cannot train on the assistant's tokens only. "
            "Wrap assistant content in {% generation %}...{% endgeneration %} if this model will be fine-tuned.",
            file=source.file, pointer=source.pointer,
        )
        return
    outcome = analysis.outcome("reply", False)
    if outcome is None or outcome.text is None or corpus.ASSISTANT_1 not in outcome.text:
        return  # a template that drops string content is judged on parts, which it is served
    masked = "".join(outcome.text[a:b] for a, b in outcome.spans)
    if corpus.ASSISTANT_1 in masked and corpus.USER_1 not in masked:
        return
    problem = "do not cover the assistant's reply" if corpus.ASSISTANT_1 not in masked else "also cover the user's turn"
    yield self.finding(
        repo,
        f"the chat template's {{% generation %}} blocks {problem} (masked text: {masked[:60]!r}): assistant-only "
        "loss masks train on the wrong tokens.",
        severity=Severity.WARNING, **location(repo, source, line_of_text(source, "generation")),
    )


def _trained_from_another_format(repo: ModelRepo, lineage: lineage_mod.Lineage) -> bool:
    """The checkpoint was trained from a model whose format is not the family's chat template:
    its pre-trained base (SmolLM2-135M, fine-tuned with its own ChatML) or a Hub model the
    registry does not tie to the family (SmolLM-135M-Instruct, another fine-tune). Its weights
    learnt that model's format, not upstream's: comparing them says nothing."""
    fam = lineage.family_ref
    for name in lineage_mod.trained_from(repo):
        named = registry.family_of_repo_id(name)
        if named is None or named is not fam:
            return True
        if any(b.base_repo and b.base_repo.lower() == name.lower() and b.base_repo != b.repo for b in fam.bases):
            return True
    return False


def _only_the_date_differs(ours, upstream) -> bool:
    """Every standard conversation renders the same once the Llama 3.x 'Today Date' value is
    blanked (a re-typed template that prints "26 July 2024" where upstream prints "26 Jul 2024")."""
    differs = False
    for name, add_generation_prompt in consistency.DRIFT_RENDERS:
        key = render_key(name, add_generation_prompt)
        a, b = ours.renders.get(key), upstream.renders.get(key)
        if a is None or b is None or a.text is None or b.text is None:
            return False
        if a.text != b.text:
            if registry.without_rendered_date(a.text) != registry.without_rendered_date(b.text):
                return False
            differs = True
    return differs


@rule("TPL013", "template-drift", Severity.WARNING, fix=FixAvailability.UNSAFE)
def template_drift(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The rendered output differs from the upstream family template on standard conversations.

    The family and variant come from lineage detection, with at least medium confidence
    (the tokenizer, or the exact dimensions of a release): a template is never compared
    with a family that only its own markers or the card suggest. When the variant is unknown
    (Qwen3's hybrid and Instruct-2507 releases share their dimensions), the template is
    compared with every variant's and reported only when it matches none. The canonical
    texts ship with hfdoctor, verified against the sha256 its registry pins (--upstream
    DIR overrides them). Both templates render the same conversations with
    this repo's special tokens and the outputs are compared (not the template source:
    a reformatted template that renders the same is not drift). Whitespace-only
    differences are reported as such, at info. When upstream cannot be found, an info
    finding says so.

    Why: the weights were trained on the upstream format. A fine-tune that ships a
    different template is served prompts the base never saw, unless the fine-tune
    retrained on exactly the new format.

    Example: a fine-tune whose template writes `<|im_start|>user:` where Qwen3 writes
    `<|im_start|>user`. Upstream's own template of another date (Qwen3's April and May
    revisions; DeepSeek-R1's January template, which is R1's own and never called a
    revision of the distills' template) is info, not drift; a Llama 3.x template that differs
    only in its default date string is not drift at all. Nor is a checkpoint compared whose
    training started from another format: its family's pre-trained base (adapter base or
    config _name_or_path), or a Hub model the registry does not tie to the family.

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
    if _trained_from_another_format(repo, lineage):
        return
    compared = []
    for upstream in upstream_templates(repo):
        if registry.without_default_date(analysis.text) == registry.without_default_date(upstream.analysis.text) \
                or _only_the_date_differs(analysis, upstream.analysis):
            return  # only the default date differs (Llama 3.x: "Today Date: 26 Jul 2024")
        drifts = consistency.drift(analysis, upstream.analysis)
        if not drifts:
            return  # renders exactly like one of the possible upstream templates
        compared.append((upstream.variant, upstream.lookup, drifts))
    if not compared:
        yield self.finding(
            repo,
            f"cannot compare with the upstream {candidates[0].display} template: "
            f"{canonical_template(repo.upstream, candidates[0]).source}.",
            severity=Severity.INFO, file=source.file, pointer=source.pointer,
        )
        return
    variant, lookup, drifts = compared[0]
    if len(compared) > 1:
        others = ", ".join(v.template.repo for v, _, _ in compared[1:])
        also = f" (nor like {others}: the evidence does not say which {lineage.family_ref.display} release this is)"
    else:
        also = ""
    whitespace_only = all(d.whitespace_only for d in drifts)
    first = drifts[0]
    if first.ours is None or first.theirs is None:
        detail = (f"on {first.what} the {'repo' if first.ours is None else 'upstream'} template fails while the "
                  "other renders")
    else:
        detail = f"on {first.what}, after …{first.context!r}, this template has {first.ours!r} where upstream has {first.theirs!r}"
    fix = None
    if lineage.variant_ref is variant and lineage.certain:
        fix = replace_template_fix(repo, source, lookup.text, f"replace the template with the upstream {variant.template.repo} one")
    if analysis.sha256 in variant.template_revisions:
        # Upstream's own template of another date: the weights know this format too. Named
        # after the repo that shipped it; the canonical one is offered only when it is the
        # same model's (R1's January template is not an earlier R1-Distill template).
        own_repo = variant.revision_notes.get(analysis.sha256, (None, ""))[0]
        yield self.finding(
            repo,
            f"the chat template is {variant.template_name(analysis.sha256)}, not the current canonical "
            f"{variant.template.repo} one, which renders {len(drifts)} of {len(consistency.DRIFT_RENDERS)} standard "
            f"conversations differently: {detail}. Upstream's own format: update it only if you want the later "
            "changes.",
            severity=Severity.INFO, file=source.file, pointer=source.pointer,
            fix=fix if own_repo in (None, variant.template.repo) else None,
        )
        return
    yield self.finding(
        repo,
        f"the chat template renders {len(drifts)} of {len(consistency.DRIFT_RENDERS)} standard conversations "
        f"differently from the upstream {variant.template.repo} template{also}"
        + (" (whitespace only)" if whitespace_only else "")
        + f": {detail}. The weights were trained on the upstream format; unless this fine-tune was retrained on its "
        "own template, it is served prompts it never saw.",
        severity=Severity.INFO if whitespace_only else self.severity,
        file=source.file, pointer=source.pointer, fix=fix,
    )


RULES = [prefix_instability, train_inference_mismatch, no_assistant_mask, template_drift]
