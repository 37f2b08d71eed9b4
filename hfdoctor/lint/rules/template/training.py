"""What fine-tuning and prompt caches need from a template: renders that are prefixes of
the next turn, full renders that equal prompt + reply, assistant masks, and the
family's own format is drift.py's (TPL013)."""

from __future__ import annotations

from typing import Any, Iterator

from hfdoctor.chat import consistency, corpus
from hfdoctor.chat.render_plan import has_generation_tag
from hfdoctor.chat.consistency import Vocabulary
from hfdoctor.findings import Facet, FacetKind, Finding, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.lint.rules.template.common import default_template, line_of_text, location, mode_text
from hfdoctor.lint.rules.template.design import behaviour_facets
from hfdoctor.bounded.tokenizing import Splitter, load_splitter


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
    return facets + behaviour_facets(repo, analysis, same_way)


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


RULES = [prefix_instability, train_inference_mismatch, no_assistant_mask]
