"""What servers need from a template: a generation prompt, one BOS, a thinking switch that
works, and kwargs that do not crash when absent."""

from __future__ import annotations

import re
from typing import Any, Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.chat import capabilities, corpus
from hfdoctor.lint.edits.template_edits import upstream_replacement
from hfdoctor.findings import Facet, FacetKind, Finding, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.lint.rules.template.common import (
    TRAINING_TEMPLATE, analysis_of, default_template, is_token_name, line_of_text, location, mode_text, shapes_text,
    template_sources, training_template,
)
from hfdoctor.lint.rules.template.design import behaviour_facets, design_facets, fixed_upstream, upstream_templates
from hfdoctor.lint.rules.template.drift import own_format_markers


@rule("TPL006", "generation-prompt-noop", Severity.WARNING, fix=FixAvailability.NONE)
def generation_prompt_noop(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """`add_generation_prompt=True` changes nothing, although replies start with a header.

    Why: servers render every request with add_generation_prompt=True so that the
    prompt ends with the assistant header (`<|im_start|>assistant\\n`,
    `<|start_header_id|>assistant<|end_header_id|>\\n\\n`). If the flag does nothing, the
    prompt ends after the user turn: the model writes the header itself, continues the
    user's text, or answers in the wrong role.

    Judged from what follows the last user message, not by comparing whole prompts (a
    template may move the system prompt into the last user turn): the markers that open an
    assistant turn are those the full render puts between the user's message and the
    reply and never before a user message. Not reported when the prompt already contains
    one of them: Mistral's prompt ends with `[/INST]`, Command-A's with
    `<|CHATBOT_TOKEN|>` (the model itself then writes `<|START_RESPONSE|>`, by design). When the
    template's turn markers are tokens the checkpoint added (its own format, as granite-7b-lab's
    <|user|>/<|assistant|>), no upstream template hfdoctor knows is of that format to tell the
    release's design from a bug: info.

    Example: Qwen3-8B's template with its `{%- if add_generation_prompt %}` block cut off:
    the prompt ends after the user's `<|im_end|>`, without `<|im_start|>assistant`.

    Fix: none automatic; emit the assistant header inside `{% if add_generation_prompt %}`.
    """

    found = default_template(repo)
    if found is None:
        return
    source, analysis = found
    with_prompt, without = analysis.rendered("user", True), analysis.rendered("user", False)
    full = analysis.rendered("reply", False)
    if with_prompt is None or without is None or full is None or with_prompt != without:
        return
    user_end, reply_at = full.find(corpus.USER_1), full.find(corpus.ASSISTANT_1)
    prompt_at = with_prompt.rfind(corpus.USER_1)
    if user_end < 0 or reply_at < 0 or prompt_at < 0:
        return
    header = full[user_end + len(corpus.USER_1):reply_at]  # after the user's text, up to the reply
    prompt_tail = with_prompt[prompt_at + len(corpus.USER_1):]
    history = analysis.rendered("multi_turn", True) or ""
    if corpus.ASSISTANT_1 in history and corpus.USER_2 in history:
        user_side = history[history.find(corpus.ASSISTANT_1) + len(corpus.ASSISTANT_1):history.find(corpus.USER_2)]
    else:
        user_side = with_prompt[:prompt_at][-80:]
    opener = [p for p in _pieces(header) if p not in _pieces(user_side)]
    dangling = _dangling_header(analysis) if opener and set(opener) & set(_pieces(prompt_tail)) else None
    if dangling is not None:
        facets = behaviour_facets(repo, analysis, lambda a: _dangling_header(a) is not None)
        # Some families do this on purpose (Cohere's Command-A, whose model writes <|START_RESPONSE|>
        # itself): without an upstream template to compare, say so, quietly. Meta-Llama-3's launch
        # template did it too, and Meta fixed it: a copy of it carries the bug.
        fixed = fixed_upstream(analysis.text)
        compared = [f for f in facets if f.kind is not FacetKind.TEMPLATE_BEHAVIOUR]
        unverified = not compared and not fixed and not upstream_templates(repo)
        yield self.finding(
            repo,
            f"the chat template appends the assistant header {dangling!r} whatever add_generation_prompt says: a "
            "finished conversation rendered with add_generation_prompt=False (training data, continue_final_message) "
            "ends with an empty assistant turn, and the flag servers and trainers use to tell a prompt from a "
            "conversation does nothing. Emit the header only in `{% if add_generation_prompt %}`."
            + (f" This is {fixed}, which upstream later fixed: update to its current template." if fixed else "")
            + (" (No upstream template of this family is known here to tell whether it is its design.)"
               if unverified else ""),
            file=source.file, pointer=source.pointer, facets=[Facet(FacetKind.CHAT_ONLY), *facets],
            severity=Severity.INFO if unverified else None,
        )
        return
    if not opener or set(opener) & set(_pieces(prompt_tail)):
        return  # no assistant header, or the prompt already opens the assistant turn (Mistral's [/INST])
    reads = "reads add_generation_prompt but" if "add_generation_prompt" in analysis.variables else "never reads add_generation_prompt and"
    # A format of the checkpoint's own added tokens: no upstream template hfdoctor knows is of that
    # format, so whether its release does the same (granite-7b-lab's LAB template) cannot be told.
    own = own_format_markers(repo, analysis)
    yield self.finding(
        repo,
        f"the chat template {reads} renders the same prompt with add_generation_prompt=True as without, while a "
        f"reply is preceded by {header!r} in the full render: served prompts end before that assistant header, so "
        "the model writes it itself or continues the user's turn. Emit the header in `{% if add_generation_prompt %}`."
        + (f" (Its turn markers ({', '.join(own[:4])}) are tokens this checkpoint added: no upstream template of "
           "that format is known here to tell whether it is its release's design.)" if own else ""),
        file=source.file, pointer=source.pointer,
        # Only the exact upstream template (Llama Guard 2's, which always ends with [/INST]) is named as a
        # design here: a family template that merely ignores the flag (Llama 2's) has no header to miss.
        facets=[Facet(FacetKind.CHAT_ONLY), *behaviour_facets(repo, analysis, lambda upstream: False)],
        severity=Severity.INFO if own else None,
    )


def _dangling_header(analysis) -> str | None:
    """What the prompt ends with after the user's message (the assistant header), when a finished
    conversation (a reply, no generation prompt) also ends with it after the reply: the template
    appends it unconditionally."""
    prompt, full = analysis.rendered("user", True), analysis.rendered("reply", False)
    if prompt is None or full is None or corpus.USER_1 not in prompt or corpus.ASSISTANT_1 not in full:
        return None
    tail = prompt[prompt.rfind(corpus.USER_1) + len(corpus.USER_1):].strip()
    after = full[full.find(corpus.ASSISTANT_1) + len(corpus.ASSISTANT_1):].rstrip()
    opens = [p for p in _pieces(tail) if p.startswith(("<", "["))]  # a marker, not a word or punctuation
    return tail if opens and after.endswith(tail) else None


# Markers and words, to compare what opens an assistant turn with what opens a user turn.
_PIECE = re.compile(r"<\|[^|<>]{1,48}\|>|<｜[^｜<>]{1,48}｜>|</?[A-Za-z_][\w:.\-]{0,30}>|\[/?[A-Z_]{2,30}\]|[A-Za-z]+")


def _pieces(text: str) -> list[str]:
    return _PIECE.findall(text)


def _bos_added_by_tokenizer(repo: ModelRepo, bos: str) -> str | None:
    """How the tokenizer adds a BOS when encoding with add_special_tokens=True (None: it does not).

    Read from tokenizer.json's post-processor (the `single` template of a
    TemplateProcessing, inside a Sequence or not), so no tokenizer is built.
    """
    tokenizer_json = repo.tokenizer_json
    if tokenizer_json is not None:
        processor = tokenizer_json.get("post_processor")
        for step in _processors(processor):
            single = step.get("single") if step.get("type") == "TemplateProcessing" else None
            if not isinstance(single, list):
                continue
            for item in single:
                if isinstance(item, dict) and "Sequence" in item:
                    break  # the text comes before any special token
                special = item.get("SpecialToken") if isinstance(item, dict) else None
                if isinstance(special, dict) and special.get("id") == bos:
                    kind = processor.get("type") if isinstance(processor, dict) else "TemplateProcessing"
                    return f"tokenizer.json's post-processor ({kind}) adds it"
        return None
    if (repo.tokenizer_config or {}).get("add_bos_token") is True:
        return "tokenizer_config.json sets add_bos_token: true"
    return None


def _processors(processor: Any) -> list[dict]:
    if not isinstance(processor, dict):
        return []
    if processor.get("type") == "Sequence":
        return [p for p in processor.get("processors") or [] if isinstance(p, dict)]
    return [processor]


@rule("TPL007", "double-bos", Severity.WARNING, fix=FixAvailability.NONE)
def double_bos(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The template emits the BOS token and the tokenizer also adds one.

    Why: a second BOS at the start of the prompt is a sequence the model never saw in
    training, and it degrades output. Who doubles it: transformers'
    apply_chat_template(tokenize=True) and vLLM's chat endpoint encode the rendered text
    with add_special_tokens=False (one BOS); but everything that renders to text first
    and then calls `tokenizer(text)` with the default add_special_tokens=True gets two
    (TGI-style prompt encoding, SFT pipelines that tokenize pre-rendered chats,
    `pipeline()` on rendered text), and llama.cpp after GGUF conversion (add_bos_token
    true) warns that the prompt now starts with 2 BOS tokens.

    Example: Llama 3.1 Instruct (`{{- bos_token }}` in the template, TemplateProcessing
    adding <|begin_of_text|>), Mistral 7B Instruct.

    Severity: info when the template is the upstream one, or the family's canonical
    template starts with the BOS too (by design of the family upstream), or no upstream
    template of the family is known to compare with; a warning when the family's own
    template does not start with it.

    Fix: none automatic. It is upstream's own design for these models; encode rendered
    chats with add_special_tokens=False.
    """
    found = default_template(repo)
    if found is None:
        return
    source, analysis = found
    bos = repo.special_token("bos_token")
    prompt = analysis.rendered("user", True)
    if not bos or prompt is None or not prompt.lstrip().startswith(bos):  # a newline before it changes nothing
        return
    how = _bos_added_by_tokenizer(repo, bos)
    if how is None:
        return
    facets = design_facets(repo, analysis, lambda up: (up.rendered("user", True) or "").lstrip().startswith(bos))
    # Most SentencePiece families' own templates start with the BOS: without an upstream template to
    # compare, nothing says this one departs from its family's design.
    unverified = not facets and not upstream_templates(repo)
    yield self.finding(
        repo,
        f"the chat template starts with the BOS token {bos!r} and {how}: code that renders the chat to text and then "
        "calls tokenizer(text) (add_special_tokens=True by default) feeds the model two BOS tokens, and llama.cpp "
        "after conversion warns about the same. apply_chat_template(tokenize=True) and vLLM's chat endpoint "
        "encode with add_special_tokens=False and are not affected. Encode rendered chats with "
        "add_special_tokens=False."
        + (" (No upstream template of this family is known here to tell whether it is its design.)"
           if unverified else ""),
        **location(repo, source, line_of_text(source, "bos_token")), facets=facets,
        severity=Severity.INFO if unverified else None,
    )


@rule("TPL008", "thinking-toggle-ignored", Severity.WARNING, fix=FixAvailability.UNSAFE)
def thinking_toggle_ignored(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A hybrid-thinking family whose template ignores `enable_thinking` (or the toggle changes nothing).

    Only when the evidence names a hybrid variant: Qwen3's hybrid releases (not its
    Instruct-2507, Thinking-2507 or Coder releases, which never switch), SmolLM3, DeepSeek
    V3.1, GLM-4.5/4.6. A checkpoint whose variant is unknown (a 30B-A3B config with no card
    and its own template could be hybrid or Instruct-2507) is not judged. Hybrid variants switch
    reasoning per request with a template kwarg: clients send
    `chat_template_kwargs={"enable_thinking": false}` (vLLM, SGLang) or call
    apply_chat_template(..., enable_thinking=False). The template must read it and render
    a different prompt (Qwen3 pre-fills an empty `<think></think>`).

    Why: when the kwarg is ignored, "thinking off" silently does nothing: the model
    thinks anyway (slower, costlier, `<think>` blocks in answers), or can never think.

    Example: Qwen3-8B's template without its `{%- if enable_thinking is defined and
    enable_thinking is false %}` branch (the empty `<think></think>` pre-fill): the
    template never reads enable_thinking.

    Fix: unsafe; replace the template with the variant's upstream template; unsafe
    because any local edits to the template are lost.

    Info, not a warning, for a template with `{% generation %}` tags: a trainer saved the
    template it trained with (TRL's assistant_only_loss), so the fine-tune learnt that one,
    switch or no switch, and upstream's would serve it prompts it never saw.
    """

    found = default_template(repo)
    if found is None:
        return
    source, analysis = found
    lineage = lineage_mod.detect(repo)
    variant = lineage.variant_ref
    if variant is None or variant.thinking != "hybrid" or not lineage.certain:
        return
    toggles = capabilities.thinking_toggles(analysis)
    if any(t.effective for t in toggles):
        return
    if toggles:
        what = " and ".join(f"{t.kwarg}=True and {t.kwarg}=False" for t in toggles) + " render the same prompt"
    else:
        what = "the template never reads enable_thinking"
    if training_template(analysis):
        # The checkpoint learnt this template, switch or no switch: upstream's would serve it
        # prompts (an empty <think></think> pre-fill) it never saw.
        yield self.finding(
            repo,
            f"{variant.display} is a hybrid-thinking model and {what}, but {TRAINING_TEMPLATE}: the fine-tune "
            "learnt no thinking switch. Serve it with this template; chat_template_kwargs={'enable_thinking': ...} "
            "changes nothing for it.",
            file=source.file, pointer=source.pointer, severity=Severity.INFO,
        )
        return
    fix, note = upstream_replacement(repo, source, variant,
                                     f"replace the template with the upstream {variant.display} one")
    yield self.finding(
        repo,
        f"{variant.display} is a hybrid-thinking model, but {what}: requests that switch thinking off "
        "(chat_template_kwargs={'enable_thinking': False}) are silently ignored, so the model thinks anyway or "
        f"never does. {note}",
        file=source.file, pointer=source.pointer, fix=fix,
    )


@rule("TPL009", "template-kwarg-crash", Severity.ERROR, fix=FixAvailability.NONE)
def template_kwarg_crash(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The template reads a kwarg and fails when it is absent (or when it is passed).

    The kwargs a template reads are its undeclared variables (jinja2.meta, as vLLM
    computes them) minus what apply_chat_template always passes. The template is
    rendered without them, then with the values clients send (enable_thinking
    True/False, thinking True/False, reasoning_effort low/high).

    Why: a server renders requests without kwargs unless the client sends
    chat_template_kwargs, so a template that needs one fails every plain request (error);
    one that crashes when a documented kwarg is passed fails those requests (warning).

    Example: llama-3-firefunction-v2's template iterates `functions`, which no client
    passes: "'functions' is undefined".

    Fix: none automatic; give the kwarg a default (`{% set x = x | default(...) %}`) or
    test `x is defined`.
    """
    for source in template_sources(repo):
        analysis = analysis_of(repo, source)
        if not analysis.compiled or analysis.fatal is not None:
            continue
        missing: dict[str, list[str]] = {}
        lines: dict[str, int | None] = {}
        for (name, _, kwargs), outcome in analysis.renders.items():
            error = outcome.error
            if kwargs or error is None or error.kind != "undefined" or error.variable not in analysis.variables:
                continue
            if is_token_name(error.variable):
                continue  # a special token the tokenizer config does not name: render-error says it
            missing.setdefault(error.variable, []).append(name)
            lines.setdefault(error.variable, error.line)
        for variable, names in missing.items():
            yield self.finding(
                repo,
                f"the {source.name!r} template reads {variable!r} and crashes when it is not passed "
                f"({shapes_text(names)}): every request without chat_template_kwargs={{{variable!r}: ...}} fails. "
                f"Give it a default: `{{% set {variable} = {variable} | default(...) %}}`.",
                **location(repo, source, lines[variable]), facets=[Facet(FacetKind.CHAT_ONLY)],
            )
        crashed: dict[tuple, list[str]] = {}
        for (name, gen, kwargs), outcome in analysis.renders.items():
            if not kwargs or outcome.error is None or outcome.error.kind == "declined":
                continue
            plain = analysis.outcome(name, gen)
            if plain is None or plain.error is not None:
                continue  # fails without the kwarg as well: not the kwarg's doing
            crashed.setdefault((kwargs, outcome.error.describe(), outcome.error.line), []).append(name)
        for (kwargs, described, line), names in crashed.items():
            yield self.finding(
                repo,
                f"the {source.name!r} template crashes when {mode_text(dict(kwargs))} is passed ({shapes_text(names)}): "
                f"{described}. Clients that send this kwarg get HTTP 500.",
                severity=Severity.WARNING, **location(repo, source, line), facets=[Facet(FacetKind.CHAT_ONLY)],
            )


RULES = [generation_prompt_noop, double_bos, thinking_toggle_ignored, template_kwarg_crash]
