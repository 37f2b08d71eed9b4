"""Does the template work at all: it compiles, renders the standard conversations, and emits
only markers that are tokens of the vocabulary."""

from __future__ import annotations

import difflib
import os
import re
from typing import TYPE_CHECKING, Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.bounded import patterns
from hfdoctor.chat import capabilities, corpus
from hfdoctor.findings import Facet, FacetKind, Finding, Severity
from hfdoctor.repo.vocabulary import has_whole_vocabulary
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import shipped_template
from hfdoctor.knowledge import registry
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.bounded.tokenizing import TokenizerFailed
from hfdoctor.lint.rules.template.common import (
    analysis_of, default_template, is_token_name, line_of_text, location, quoted_line, shapes_text, template_sources,
)

if TYPE_CHECKING:
    from hfdoctor.chat.render_plan import RenderError, TemplateAnalysis

# Shapes whose crash is only reported in the capabilities (servers flatten typed text
# parts for text-only models; documents are not an OpenAI field).
CAPABILITY_ONLY = {"typed_content", "typed_system", "documents"}
TOOL_SHAPES = {"tool_call", "tool_result", "tool_result_reply", "tool_call_string_args", "tool_call_null_content",
               "parallel_tool_calls"}

@rule("TPL003", "chat-template-syntax-error", Severity.ERROR, fix=FixAvailability.NONE)
def chat_template_syntax_error(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The chat template does not compile.

    Why: transformers compiles the template on the first apply_chat_template call, so
    every chat request fails (vLLM and TGI answer HTTP 500, `transformers serve` and
    training scripts raise jinja2.TemplateSyntaxError). Compiled as transformers does:
    jinja2 with trim_blocks, lstrip_blocks, loopcontrols and the `{% generation %}` tag.

    Example: a template cut short by a bad copy-paste ends inside `{% for %}`:
    "Unexpected end of template. Jinja was looking for 'endfor'".

    Fix: none automatic; the message gives the template line. Restore the upstream
    template or close the block.
    """
    for source in template_sources(repo):
        error = analysis_of(repo, source).compile_error
        if error is None:
            continue
        if error.kind == "syntax":
            message = (f"the {source.name!r} chat template does not compile: {error.message} "
                       f"(template line {error.line}{quoted_line(source, error.line)}). "
                       "Every apply_chat_template call and every chat request fails.")
        else:
            message = (f"the {source.name!r} chat template could not be compiled within hfdoctor's limits: "
                       f"{error.describe()}. Servers would stall or fail on it as well.")
        yield self.finding(repo, message, **location(repo, source, error.line))


def _crash_hint(analysis: "TemplateAnalysis", names: set[str], error: "RenderError") -> str:
    if error.kind == "undefined" and is_token_name(error.variable):
        return (f" transformers passes the tokenizer's named special tokens to the template, and this tokenizer "
                f"config names no {error.variable}; define it in tokenizer_config.json.")
    args_object = analysis.outcome("tool_call", False)
    args_string = analysis.outcome("tool_call_string_args", True)
    object_fails = args_object is not None and args_object.error is not None
    string_fails = args_string is not None and args_string.error is not None
    if error.kind == "forbidden":
        return (" transformers renders in an immutable sandbox, so list.append / dict.update are refused; "
                "build lists with `namespace` or filters instead.")
    if names == {"tool_call_null_content"} and "content" in error.message:
        return (" OpenAI clients send `content: null` beside tool_calls and transformers drops null-valued keys, "
                "so `message.content` is undefined here; test `message.content is string` before using it.")
    if object_fails and not string_fails and names & {"tool_call", "tool_result", "tool_result_reply"}:
        return (" The template expects function.arguments as a JSON string, but vLLM and `transformers serve` "
                "parse arguments into an object before rendering, so tool calls crash there; "
                "accept both (`arguments if arguments is string else arguments | tojson`).")
    if string_fails and not object_fails and "tool_call_string_args" in names:
        return (" The template expects function.arguments as an object; code that passes OpenAI's JSON string "
                "straight to apply_chat_template crashes it. Parse arguments with json.loads first, or test "
                "`arguments is string` in the template.")
    return ""


@rule("TPL004", "chat-template-render-error", Severity.ERROR, fix=FixAvailability.NONE)
def chat_template_render_error(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The template raises, or never returns, on a standard conversation.

    Rendered over hfdoctor's conversation corpus (user turns, system prompt, replies,
    reasoning_content, tool definitions, tool calls with object and JSON-string
    arguments, tool results, parallel calls), exactly as transformers'
    apply_chat_template would, in a separate process bounded in time and memory.

    Why: a crash is an HTTP 500 for every request of that shape in vLLM, TGI, SGLang and
    `transformers serve`, and an exception in training-data pipelines.

    Example: QwQ-32B's template raises on an assistant message with content null
    (warning); MiniMax-M2's raises on tool-call arguments given as a JSON string (info).

    Severity: error when a core shape (user/system/assistant turns) crashes, or when the
    template loops forever, exhausts memory or reaches for Python internals (a sandbox
    escape attempt); warning when an optional feature (tools, reasoning) crashes. A
    template that declines a shape on purpose with raise_exception (Mistral v0.2 refusing
    a system role, Llama 3.1 refusing parallel tool calls) is its documented format: that
    is reported as info, not as an error. On purpose means the template's own logic chose
    the shape: a template that handles system prompts (it tests for the system role) but
    raises on the standard system + user conversation with a message that does not say
    system prompts are refused (a loop over `messages` instead of its trimmed list) has a
    bug: error. A crash only on tool-call arguments given as a JSON string is info:
    servers parse them into an object before rendering, so only direct
    apply_chat_template callers meet it.

    A template that renders OpenAI content parts but crashes on string content (vision
    templates iterating `message.content`) is called with parts by vLLM and SGLang: the
    `template` section says "OpenAI content parts only"; no finding.

    Fix: none automatic; the message names the shape, the exception and the template line.
    """

    for source in template_sources(repo):
        analysis = analysis_of(repo, source)
        if not analysis.compiled:
            continue
        if analysis.fatal is not None:
            key, error = analysis.fatal
            if error.kind == "skipped":
                continue  # not analysed (the time budget ran out): check-incomplete says so
            if key is None:
                what = f"hfdoctor refused to render the {source.name!r} chat template"
            else:
                what = f"rendering the {source.name!r} chat template on {corpus.conversation(key[0]).what} was stopped"
            yield self.finding(
                repo,
                f"{what}: {error.describe()}. A server rendering this template hangs, dies or is attacked on "
                "requests like this; treat the template as hostile until you know where it came from.",
                **location(repo, source, error.line),
            )
            continue
        # A template that renders no tool call at all has no tool support: what it does
        # with tool messages is moot (the capabilities section shows it).
        skip = set(CAPABILITY_ONLY)
        tool_call = analysis.rendered("tool_call", False)
        if tool_call is None or corpus.ARGUMENT_VALUE not in tool_call:
            skip |= TOOL_SHAPES
        parts_only = capabilities.needs_content_parts(analysis)
        groups: dict["RenderError", list[str]] = {}  # the same error on several shapes: one finding
        for (name, _, kwargs), outcome in analysis.renders.items():
            error = outcome.error
            if kwargs or error is None or name in skip:
                continue
            if parts_only and error.kind != "declined":
                continue  # string content, which this template is never served
            if error.kind == "undefined" and error.variable in analysis.variables:
                if not is_token_name(error.variable):
                    continue  # a missing caller kwarg: template-kwarg-crash says it
                if repo.tokenizer_config is None and repo.special_tokens_map is None:
                    continue  # no tokenizer config here: which tokens it names is unknown
            groups.setdefault(error, []).append(name)
        for error, names in groups.items():
            line = error.line
            system = any(corpus.SYSTEM in str(corpus.conversation(n).messages) for n in names)
            if error.kind == "declined" and system and _handles_system(source.text) \
                    and not _refuses_system(error.message):
                yield self.finding(
                    repo,
                    f"the {source.name!r} template handles system prompts, yet raises on {shapes_text(names)}: "
                    f"{error.describe()}{quoted_line(source, line)}. That is not a declined shape but a bug (a loop "
                    "over `messages` where the template meant the list without the system message?): every request "
                    "with a system prompt gets an error from the server.",
                    severity=Severity.ERROR, **location(repo, source, line),
                )
                continue
            if error.kind == "declined":
                yield self.finding(
                    repo,
                    f"the {source.name!r} template declines {shapes_text(names)} on purpose with {error.describe()}. "
                    "Requests of that shape get an error from the server; this is the model's documented format, "
                    "not a bug" + (" (clients can merge a system prompt into the first user message)." if system else "."),
                    severity=Severity.INFO, **location(repo, source, line),
                )
                continue
            core = any(corpus.conversation(n).core for n in names)
            if set(names) == {"tool_call_string_args"}:
                # Servers parse OpenAI's JSON-string arguments into an object before they
                # render (vLLM, SGLang, transformers serve): only direct callers hit this.
                yield self.finding(
                    repo,
                    f"the {source.name!r} template crashes on {shapes_text(names)}: {error.describe()}"
                    f"{quoted_line(source, line)}." + _crash_hint(analysis, set(names), error),
                    severity=Severity.WARNING, facets=(Facet(FacetKind.CAPABILITY, STRING_ARGUMENTS),),
                    **location(repo, source, line),
                )
                continue
            yield self.finding(
                repo,
                f"the {source.name!r} template crashes on {shapes_text(names)}: {error.describe()}"
                f"{quoted_line(source, line)}. Servers answer such requests with HTTP 500 and "
                "apply_chat_template raises." + _crash_hint(analysis, set(names), error),
                severity=Severity.ERROR if core else Severity.WARNING, **location(repo, source, line),
            )


STRING_ARGUMENTS = ("tool-call arguments as a JSON string: vLLM, SGLang and transformers serve parse them into an "
                    "object before rendering, so only code that calls apply_chat_template directly with the "
                    "string must json.loads it first")


# Over the template's source (repository data): RE2, since `\S*role` after each `'system'`
# is quadratic in a backtracking engine.
SYSTEM_TEST = patterns.compile(r"""(role\W{1,4}(==|!=|is|in)\s*\(?\s*['"]system['"])|(['"]system['"]\s*(==|!=|in)\s*\S*role)""")


def _refuses_system(message: str) -> bool:
    """The raised message says system prompts are refused ("System role not supported")."""
    return re.search(r"system[^.]*\b(not|no|unsupported|never|cannot)\b|\b(not|no|never|cannot|only)\b[^.]*system",
                     message, re.IGNORECASE) is not None


def _handles_system(text: str) -> bool:
    """The template tests for the system role (so it means to accept one)."""
    return SYSTEM_TEST.search(text) is not None


# Markers judged, and missing markers reported one by one (real templates emit a few dozen
# markers in all; judging a tag costs a spelling comparison with the tags nearest it).
MAX_MARKERS_JUDGED = 1000
MAX_MARKERS_REPORTED = 100


@rule("TPL005", "template-unknown-token", Severity.ERROR, fix=FixAvailability.NONE)
def template_unknown_token(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A marker the template emits is not a single token of the vocabulary.

    Markers are read off the rendered output: every `<|...|>`, `<｜...｜>` and (when the
    vocabulary has such tokens) `[INST]`-style string, and tags such as `<think>`,
    `<tool_call>` or `<start_of_turn>`. A tag counts when its open/close partner is a
    token (`</think>` for `<think>`) or when it nearly spells an added token
    (`<thinking>` for `<think>`); other tags are plain text in their family (Qwen's
    `<tools>`).

    Why: the model was trained on ONE token id for each marker. Written as text that
    is not in the vocabulary, the marker is split into several ordinary tokens: the model
    reads a prompt it has never seen, and cannot emit the marker as one token, so stop
    sequences and reasoning/tool parsers that look for it never fire.

    Example: a template edited to write `<|im_begin|>` for a Qwen tokenizer that only
    has `<|im_start|>`.

    Severity: info when the family's own upstream template writes the same marker as text
    (TinyLlama-Chat's `<|user|>`; the DeepSeek-R1 distills' tool-call markers, which their
    Qwen and Llama vocabularies lack), or when every missing marker is a role marker of a
    published format that writes them as text (Zephyr's <|system|>, <|user|>, <|assistant|>)
    and none is a token here: the model was trained that way. A warning, not an error, for a
    marker no upstream template of the family writes (a tool role a training framework's template
    adds), and for one the template never writes itself but builds from a role's name
    ('<|' + role + '|>' on a tool message, as Phi-tiny-MoE's template does) when the vocabulary has
    that format's user and assistant markers: the format has no such role, which is no broken
    trained token, but such turns reach the model in a form it never saw.

    Judged only with the whole vocabulary at hand (tokenizer.json, vocab.json or a GGUF): a
    folder that commits only its added tokens (a Granite 3 folder without vocab.json, whose
    <|end_of_text|> is id 0 of the vocabulary it left out) cannot say a marker is unknown.

    Fix: none automatic; use the token the vocabulary has (the message suggests one).
    """

    found = default_template(repo)
    vocab = repo.vocab
    if found is None or not vocab or not has_whole_vocabulary(repo):
        return  # added tokens alone (no vocab.json, tokenizer.json or GGUF) cannot say a marker is unknown
    source, analysis = found
    added = sorted(repo.added_token_strings)
    emitted = capabilities.emitted_markers(analysis, MAX_MARKERS_JUDGED)
    if len(emitted) > MAX_MARKERS_JUDGED:
        repo.budget.skip(f"the markers the chat template emits after the first {MAX_MARKERS_JUDGED:,} "
                         "(template-unknown-token)", "too many to judge one by one")
        emitted = emitted[:MAX_MARKERS_JUDGED]
    missing = capabilities.expected_tokens(emitted, vocab, added)
    if not missing:
        return
    if len(missing) > MAX_MARKERS_REPORTED:
        repo.budget.skip(f"{len(missing) - MAX_MARKERS_REPORTED:,} more markers the chat template emits that are not "
                         f"tokens of the vocabulary either (template-unknown-token reports the first "
                         f"{MAX_MARKERS_REPORTED})", "too many to report one by one")
        missing = missing[:MAX_MARKERS_REPORTED]
    # A renamed marker most likely replaced a token the template no longer emits.
    emitted_set = set(emitted)
    unused = [t for t in added if t not in emitted_set]  # sorted, as `added` is
    upstream = _family_upstream_texts(repo)  # read once, whatever the number of missing markers
    upstream_markers = _upstream_markers(upstream, added)
    for marker in missing:
        pieces = ""
        if repo.tokenizer is not None:
            try:
                tokens = repo.tokenizer.encode(marker, add_special_tokens=False).tokens
                pieces = f" (it is split into {len(tokens)} tokens: {', '.join(repr(t) for t in tokens[:6])})"
            except TokenizerFailed:
                pieces = ""
        close = _closest(marker, unused)
        hint = f" Did you mean {close!r}?" if close else ""
        line = line_of_text(source, marker)
        foreign = _foreign_to_upstream(upstream, marker, emitted_set, upstream_markers)
        if foreign is not None:
            # No upstream template of the family writes this marker at all (a role upstream lacks,
            # such as a tool turn a training framework's template adds): the model was never trained
            # on it as a control token, so nothing it learned is broken; parsers still never see one.
            yield self.finding(
                repo,
                f"the chat template emits {marker!r}, which is not a token of the vocabulary{pieces}, and no "
                f"{foreign} upstream template writes it: the model never learned it as a control token, and "
                f"stop sequences or parsers waiting for it as one token never fire.{hint}",
                **location(repo, source, line), severity=Severity.WARNING,
            )
            continue
        role = _role_without_token(repo, analysis.text, marker)
        if role is not None:
            # The template builds every role's marker from the role's name ('<|' + role + '|>') and the
            # vocabulary has that format's chat roles: a role the release never had (a tool turn) comes
            # out as text. No trained token is broken, but such turns reach the model in a form it never saw.
            yield self.finding(
                repo,
                f"the chat template builds each role's marker from the role's name, and this vocabulary has its "
                f"format's chat roles as tokens but none for a {role!r} role: a {role} message is written as the "
                f"plain text {marker!r}{pieces}. The model never learned it as a control token, so {role} turns "
                f"reach it in a form it never saw, and parsers waiting for {marker!r} as one token never fire.",
                **location(repo, source, line), severity=Severity.WARNING,
            )
            continue
        yield self.finding(
            repo,
            f"the chat template emits {marker!r}, which is not a token of the vocabulary{pieces}: the model reads "
            "plain text where it was trained on one control token, and cannot emit it, so stop sequences and "
            f"parsers waiting for it never fire.{hint}",
            **location(repo, source, line),
            facets=_written_as_text_upstream(repo, marker) or _text_marker_format(marker, missing, vocab),
        )


# The roles hfdoctor's standard conversations send, and the chat roles every format writes.
ROLES_SENT = ("system", "user", "assistant", "tool")
CHAT_ROLES = ("user", "assistant")


def _role_without_token(repo: ModelRepo, template_text: str, marker: str) -> str | None:
    """The role whose name `marker` was built from ('<|tool|>' from a tool message, by a template that
    writes '<|' + role + '|>'), when the template never writes the marker itself and the vocabulary has
    the same format's markers for the chat roles (Phi-3's <|user|> and <|assistant|>): a role the
    format does not have. None otherwise (a marker the template writes, or a format the vocabulary
    lacks altogether, which is a broken template)."""
    if marker in template_text:
        return None
    for role in ROLES_SENT:
        if role in CHAT_ROLES or marker.count(role) != 1:
            continue
        if all(repo.token_id(marker.replace(role, other)) is not None for other in CHAT_ROLES):
            return role
    return None


def _family_upstream_texts(repo: ModelRepo) -> tuple[str, list[str]] | None:
    """(the family's name, the text of each of its upstream templates) when the family is known for
    certain and hfdoctor ships every one of its upstream templates; else None."""
    lineage = lineage_mod.detect(repo)
    fam = lineage.family_ref if lineage.certain else None
    if fam is None or not fam.variants:
        return None
    texts = [shipped_template(v) for v in fam.variants]
    return None if any(text is None for text in texts) else (fam.display, texts)


def _upstream_markers(upstream: tuple[str, list[str]] | None, added: list[str]) -> set[str]:
    """The added tokens that the family's upstream templates write."""
    if upstream is None:
        return set()
    _, texts = upstream
    return {token for token in added if any(token in text for text in texts)}


def _foreign_to_upstream(upstream: tuple[str, list[str]] | None, marker: str, emitted: set[str],
                         upstream_markers: set[str]) -> str | None:
    """The family's name when `marker` is an extra the template adds, not a renamed marker: none of
    the family's upstream templates contains `marker`, and this template still renders every added
    token they write (`upstream_markers`: a typo such as `<|im_begin|>` for `<|im_start|>` drops
    one). Else None: no evidence either way (also when the family or its upstream templates are
    unknown)."""
    if upstream is None:
        return None
    family, texts = upstream
    if any(marker in text for text in texts):
        return None
    return family if upstream_markers and upstream_markers <= emitted else None


def _written_as_text_upstream(repo: ModelRepo, marker: str) -> tuple[Facet, ...]:
    """(an UPSTREAM_DESIGN facet,) when the family's own upstream template writes `marker` as plain
    text too (TinyLlama-Chat's `<|user|>`, the R1 distills' tool markers): the registry says
    which upstream, and the family must be known for certain (never from this template alone)."""
    lineage = lineage_mod.detect(repo)
    fam = lineage.family_ref if lineage.certain else None
    upstream = fam.text_markers.get(marker) if fam is not None else None
    variant = lineage.variant_ref
    if upstream is None or (variant is not None and variant.template is not None and len(fam.variants) > 1
                            and variant.template.repo != upstream):
        return ()
    return (Facet(FacetKind.UPSTREAM_DESIGN, f"{fam.display} upstream (the {upstream} template writes {marker} as "
                                             "text, not as a token)"),)


def _text_marker_format(marker: str, missing: list[str], vocab: dict[str, int]) -> tuple[Facet, ...]:
    """(an UPSTREAM_DESIGN facet,) when `marker` is a role marker of a published format that writes
    its markers as text (Zephyr's <|user|>, which TinyLlama-Chat and zephyr-sft fine-tunes use), every
    marker the template lacks is one of that format's, and none of them is a token here: the weights
    trained on that format learnt them as text."""
    for fmt in registry.text_marker_formats():
        markers = set(fmt["markers"])
        if marker in markers and set(missing) <= markers and not markers & set(vocab):
            return (Facet(FacetKind.UPSTREAM_DESIGN, f"the {fmt['name']} chat format (the {fmt['repo']} template "
                                                     f"writes {marker} as text, not as a token)"),)
    return ()


def _closest(marker: str, tokens: list[str]) -> str | None:
    """The token `marker` most likely misspells: longest shared start, then similarity. `tokens` is
    sorted; among thousands only those nearest `marker` in that order are compared (they share
    its longest start)."""
    scored = [(len(os.path.commonprefix([marker, t])), difflib.SequenceMatcher(None, marker, t).ratio(), t)
              for t in capabilities.nearest(marker, tokens)]
    # the first of the best, in `tokens` order
    best = max(((shared, ratio, -i) for i, (shared, ratio, _) in enumerate(scored) if ratio >= 0.5), default=None)
    return scored[-best[2]][2] if best is not None else None


RULES = [chat_template_syntax_error, chat_template_render_error, template_unknown_token]
