"""Rules about the chat template: presence, sources, and what it renders.

Every rule from TPL003 on reads one TemplateAnalysis per template
(hfdoctor.chat.analysis): the template is compiled and rendered over the conversation
corpus once, in a bounded worker process, and the rules compare those renders. The
default template's capabilities go into the report as its `template` section.
"""

from __future__ import annotations

import difflib
import os
from typing import TYPE_CHECKING, Any, Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor import registry
from hfdoctor.findings import Applicability, Edit, Finding, Fix, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.rules.base import Rule, rule

if TYPE_CHECKING:
    from hfdoctor.chat.analysis import RenderError, TemplateAnalysis
    from hfdoctor.repo import TemplateSource


@rule("TPL001", "missing-chat-template", Severity.ERROR)
def missing_chat_template(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A chat/instruct model ships no chat template.

    Why: OpenAI-compatible servers (vLLM, TGI, SGLang, transformers serve) render
    `messages` with the repo's chat template; without one `/v1/chat/completions` fails
    (transformers raises "Cannot use chat template functions because
    tokenizer.chat_template is not set"), and tools that fall back on a generic format
    produce prompts the model was never trained on.

    Where templates are looked for: tokenizer_config.json `chat_template` (a string or
    named list), chat_template.jinja, chat_template.json, additional_chat_templates/.

    A model counts as chat/instruct when its eos token is an end-of-turn marker, its
    generation config stops on one, its card says so (tags, base_model), or its family
    only ships chat models. A base model without a template is not reported.

    Fix (safe): insert the canonical template of the detected base model, taken from
    upstream (--upstream, HFDOCTOR_UPSTREAM, the HF cache, or the Hub) and verified
    against the sha256 pinned in hfdoctor's registry.
    """
    if repo.chat_templates:
        return
    if repo.tokenizer_config is None and repo.tokenizer_json is None:
        return  # no tokenizer at all: nothing could apply a template anyway
    if "tokenizer_config.json" in repo.problems or "chat_template.json" in repo.problems:
        return  # file-unreadable already says why no template could be read
    lineage = lineage_mod.detect(repo)
    fam = registry.family(lineage.family)
    reasons = lineage_mod.chat_evidence(repo, fam)
    if not reasons:
        return
    fix, fix_note = _template_fix(repo, fam)
    target = "tokenizer_config.json" if repo.tokenizer_config is not None else None
    yield self.finding(
        repo,
        "no chat template: this is a chat model ("
        + "; ".join(reasons[:2])
        + "), but no tokenizer_config.json chat_template, chat_template.jinja or chat_template.json exists, "
        "so /chat/completions fails and apply_chat_template raises. " + fix_note,
        file=target, pointer="/chat_template" if target else None, line=None,
        fix=fix,
    )


def _template_fix(repo: ModelRepo, fam: registry.Family | None) -> tuple[Fix | None, str]:
    if fam is None:
        return None, "Add the template of the model this checkpoint was trained from."
    try:
        from hfdoctor.fix import missing_template_fix
    except ImportError:
        return None, f"Add the {fam.display} template."
    return missing_template_fix(repo, fam)


@rule("TPL002", "chat-template-conflict", Severity.WARNING)
def chat_template_conflict(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """Two template sources disagree (e.g. tokenizer_config.json vs chat_template.jinja).

    Why: transformers reads chat_template.jinja first and ignores tokenizer_config.json's
    `chat_template`, but llama.cpp's converter, older transformers, TGI and many
    training scripts read tokenizer_config.json. When both exist and differ, the model
    is served with one template and trained or converted with the other.

    Also reported: a default template in tokenizer_config.json that transformers ignores
    because additional_chat_templates/ holds files (the tokenizer then has no default
    template at all). Two copies that differ only in whitespace are info.

    Example: a fine-tune edited chat_template.jinja to add tool calling, but the stale
    copy in tokenizer_config.json still ships.

    Fix (unsafe): make tokenizer_config.json's copy equal to the one transformers uses.
    Unsafe because which version the author meant cannot be known. None for the ignored
    default: save it as chat_template.jinja.
    """
    shadowed = [s for s in repo.chat_templates if s.file == "tokenizer_config.json" and s.name == "default"]
    if shadowed and repo.chat_template is None:
        yield self.finding(
            repo,
            "tokenizer_config.json has a default chat_template, but transformers ignores it because "
            "additional_chat_templates/ holds template files: the tokenizer ends up with no default template and "
            "apply_chat_template without tools raises. Save the default as chat_template.jinja.",
            file="tokenizer_config.json", pointer=shadowed[0].pointer,
        )
    by_name: dict[str, list] = {}
    for source in repo.chat_templates:
        by_name.setdefault(source.name, []).append(source)
    for name, sources in by_name.items():
        winner = sources[0]
        for other in sources[1:]:
            if other.text == winner.text:
                continue
            whitespace_only = "".join(other.text.split()) == "".join(winner.text.split())
            fix = _conflict_fix(repo, winner, other)
            yield self.finding(
                repo,
                f"the {name!r} chat template in {other.where} differs from the one in {winner.where}"
                + (" (whitespace only)" if whitespace_only else "")
                + f": transformers uses {winner.file}, while tools that read {other.file} render a different prompt.",
                file=other.file, pointer=other.pointer,
                severity=Severity.INFO if whitespace_only else self.severity,
                fix=fix,
            )


def _conflict_fix(repo: ModelRepo, winner, other) -> Fix | None:
    try:
        from hfdoctor.fix import json_set_value
    except ImportError:
        return None
    if other.pointer is None:
        return None
    edit = json_set_value(repo, other.file, other.pointer, winner.text)
    if edit is None:
        return None
    return Fix(f"copy the template of {winner.file} into {other.file}", (edit,), Applicability.UNSAFE)


# --- shared by the rendering rules ---------------------------------------------------------

# Shapes whose crash is only reported in the capabilities (servers flatten typed text
# parts for text-only models; documents are not an OpenAI field).
CAPABILITY_ONLY = {"typed_content", "typed_system", "documents"}
TOOL_SHAPES = {"tool_call", "tool_result", "tool_result_reply", "tool_call_string_args", "tool_call_null_content",
               "parallel_tool_calls"}


def _sources(repo: ModelRepo) -> list["TemplateSource"]:
    """Each distinct template text once, the default first."""
    seen: set[str] = set()
    found = []
    default = repo.chat_template
    for source in ([default] if default else []) + list(repo.chat_templates):
        if source.text not in seen:
            seen.add(source.text)
            found.append(source)
    return found


def _analysis(repo: ModelRepo, source: "TemplateSource") -> "TemplateAnalysis":
    from hfdoctor.chat.analysis import analyze_source

    analysis = analyze_source(repo, source)
    _publish(repo)
    return analysis


def _default(repo: ModelRepo) -> tuple["TemplateSource", "TemplateAnalysis"] | None:
    """The default template and its analysis, when it compiles and renders at all."""
    source = repo.chat_template
    if source is None:
        return None
    analysis = _analysis(repo, source)
    if not analysis.compiled or analysis.fatal is not None:
        return None  # TPL003 / TPL004 say why
    return source, analysis


def _publish(repo: ModelRepo) -> None:
    """Put the default template's capabilities into the report (once)."""
    if "template" in repo.report_sections or repo.chat_template is None:
        return
    from hfdoctor.chat import capabilities
    from hfdoctor.chat.analysis import analyze_source

    source = repo.chat_template
    analysis = analyze_source(repo, source)
    section: dict[str, Any] = {"source": source.where}
    if not analysis.compiled:
        section["status"] = "does not compile"
    elif analysis.fatal is not None:
        section["status"] = "render aborted: " + analysis.fatal[1].kind
    else:
        section.update(capabilities.capabilities(analysis))
        declines = capabilities.declines(analysis)
        if declines:
            section["declines"] = declines
    others = [s.name for s in repo.chat_templates if s.name != "default"]
    if others:
        section["other_templates"] = sorted(set(others))
    repo.report_sections["template"] = section


def _location(repo: ModelRepo, source: "TemplateSource", template_line: int | None) -> dict[str, Any]:
    """file/pointer/line of a template line: the file line for .jinja, the JSON value's line otherwise."""
    line = template_line if source.pointer is None else None
    return {"file": source.file, "pointer": source.pointer, "line": line}


def _line_of_text(source: "TemplateSource", needle: str) -> int | None:
    at = source.text.find(needle)
    return source.text.count("\n", 0, at) + 1 if at >= 0 else None


def _template_line_text(source: "TemplateSource", line: int | None) -> str:
    if not line:
        return ""
    lines = source.text.splitlines()
    if not 0 < line <= len(lines):
        return ""
    text = lines[line - 1].strip()
    return f": `{text[:100]}{'…' if len(text) > 100 else ''}`"


def _shapes(names: list[str]) -> str:
    from hfdoctor.chat import corpus

    whats = list(dict.fromkeys(corpus.conversation(n).what for n in names))
    return "; ".join(whats[:4]) + (f" (and {len(whats) - 4} more)" if len(whats) > 4 else "")


def _mode_text(mode: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in mode.items()) or "no kwargs"


def _replace_with_upstream(repo: ModelRepo, source: "TemplateSource", text: str, title: str) -> Fix | None:
    """Unsafe fix: the whole template replaced by the upstream one (local edits are lost)."""
    if source.pointer is not None:
        try:
            from hfdoctor.fix import json_set_value
        except ImportError:
            return None
        edit = json_set_value(repo, source.file, source.pointer, text)
    else:
        raw = repo.raw(source.file)
        edit = Edit(source.file, 0, len(raw), text) if raw is not None else None
    return Fix(title, (edit,), Applicability.UNSAFE) if edit is not None else None


# --- TPL003 .. TPL013 -------------------------------------------------------------------------


@rule("TPL003", "chat-template-syntax-error", Severity.ERROR)
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
    for source in _sources(repo):
        error = _analysis(repo, source).compile_error
        if error is None:
            continue
        if error.kind == "syntax":
            message = (f"the {source.name!r} chat template does not compile: {error.message} "
                       f"(template line {error.line}{_template_line_text(source, error.line)}). "
                       "Every apply_chat_template call and every chat request fails.")
        else:
            message = (f"the {source.name!r} chat template could not be compiled within hfdoctor's limits: "
                       f"{error.describe()}. Servers would stall or fail on it as well.")
        yield self.finding(repo, message, **_location(repo, source, error.line))


def _is_token_name(variable: str | None) -> bool:
    """bos_token, eos_token, image_token...: passed from the tokenizer config, not by callers."""
    return bool(variable) and variable.endswith("_token")


def _crash_hint(analysis: "TemplateAnalysis", names: set[str], error: "RenderError") -> str:
    if error.kind == "undefined" and _is_token_name(error.variable):
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


@rule("TPL004", "chat-template-render-error", Severity.ERROR)
def chat_template_render_error(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The template raises, or never returns, on a standard conversation.

    Rendered over hfdoctor's conversation corpus (user turns, system prompt, replies,
    reasoning_content, tool definitions, tool calls with object and JSON-string
    arguments, tool results, parallel calls), exactly as transformers'
    apply_chat_template would, in a separate process bounded in time and memory.

    Severity: error when a core shape (user/system/assistant turns) crashes, or when the
    template loops forever, exhausts memory or reaches for Python internals (a sandbox
    escape attempt); warning when an optional feature (tools, reasoning) crashes. A
    template that declines a shape on purpose with raise_exception (Mistral v0.2 refusing
    a system role, Llama 3.1 refusing parallel tool calls) is its documented format: that
    is reported as info, not as an error.

    Why: a crash is an HTTP 500 for every request of that shape in vLLM, TGI, SGLang and
    `transformers serve`, and an exception in training-data pipelines.

    Fix: none automatic; the message names the shape, the exception and the template line.
    """
    from hfdoctor.chat import corpus

    for source in _sources(repo):
        analysis = _analysis(repo, source)
        if not analysis.compiled:
            continue
        if analysis.fatal is not None:
            key, error = analysis.fatal
            if key is None:
                what = f"hfdoctor refused to render the {source.name!r} chat template"
            else:
                what = f"rendering the {source.name!r} chat template on {corpus.conversation(key[0]).what} was stopped"
            yield self.finding(
                repo,
                f"{what}: {error.describe()}. A server rendering this template hangs, dies or is attacked on "
                "requests like this; treat the template as hostile until you know where it came from.",
                **_location(repo, source, error.line),
            )
            continue
        # A template that renders no tool call at all has no tool support: what it does
        # with tool messages is moot (the capabilities section shows it).
        skip = set(CAPABILITY_ONLY)
        tool_call = analysis.rendered("tool_call", False)
        if tool_call is None or corpus.ARGUMENT_VALUE not in tool_call:
            skip |= TOOL_SHAPES
        groups: dict["RenderError", list[str]] = {}  # the same error on several shapes: one finding
        for (name, _, kwargs), outcome in analysis.renders.items():
            error = outcome.error
            if kwargs or error is None or name in skip:
                continue
            if error.kind == "undefined" and error.variable in analysis.variables:
                if not _is_token_name(error.variable):
                    continue  # a missing caller kwarg: template-kwarg-crash says it
                if repo.tokenizer_config is None and repo.special_tokens_map is None:
                    continue  # no tokenizer config here: which tokens it names is unknown
            groups.setdefault(error, []).append(name)
        for error, names in groups.items():
            line = error.line
            if error.kind == "declined":
                system = any(corpus.SYSTEM in str(corpus.conversation(n).messages) for n in names)
                yield self.finding(
                    repo,
                    f"the {source.name!r} template declines {_shapes(names)} on purpose with {error.describe()}. "
                    "Requests of that shape get an error from the server; this is the model's documented format, "
                    "not a bug" + (" (clients can merge a system prompt into the first user message)." if system else "."),
                    severity=Severity.INFO, **_location(repo, source, line),
                )
                continue
            core = any(corpus.conversation(n).core for n in names)
            yield self.finding(
                repo,
                f"the {source.name!r} template crashes on {_shapes(names)}: {error.describe()}"
                f"{_template_line_text(source, line)}. Servers answer such requests with HTTP 500 and "
                "apply_chat_template raises." + _crash_hint(analysis, set(names), error),
                severity=Severity.ERROR if core else Severity.WARNING, **_location(repo, source, line),
            )


@rule("TPL005", "template-unknown-token", Severity.ERROR)
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

    Fix: none automatic; use the token the vocabulary has (the message suggests one).
    """
    from hfdoctor.chat import capabilities

    found = _default(repo)
    vocab = repo.vocab
    if found is None or not vocab:
        return
    source, analysis = found
    added = sorted(repo.added_token_strings)
    emitted = capabilities.emitted_markers(analysis)
    missing = capabilities.expected_tokens(emitted, vocab, added)
    if not missing:
        return
    # A renamed marker most likely replaced a token the template no longer emits.
    unused = [t for t in added if t not in emitted]
    for marker in missing:
        pieces = ""
        if repo.tokenizer is not None:
            tokens = repo.tokenizer.encode(marker, add_special_tokens=False).tokens
            pieces = f" (it is split into {len(tokens)} tokens: {', '.join(repr(t) for t in tokens[:6])})"
        close = _closest(marker, unused)
        hint = f" Did you mean {close!r}?" if close else ""
        line = _line_of_text(source, marker)
        yield self.finding(
            repo,
            f"the chat template emits {marker!r}, which is not a token of the vocabulary{pieces}: the model reads "
            "plain text where it was trained on one control token, and cannot emit it, so stop sequences and "
            f"parsers waiting for it never fire.{hint}",
            **_location(repo, source, line),
        )


def _closest(marker: str, tokens: list[str]) -> str | None:
    """The token `marker` most likely misspells: longest shared start, then similarity."""
    def score(token: str) -> tuple[int, float]:
        shared = len(os.path.commonprefix([marker, token]))
        return shared, difflib.SequenceMatcher(None, marker, token).ratio()

    candidates = [t for t in tokens if difflib.SequenceMatcher(None, marker, t).ratio() >= 0.5]
    return max(candidates, key=score, default=None)


@rule("TPL006", "generation-prompt-noop", Severity.WARNING)
def generation_prompt_noop(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """`add_generation_prompt=True` changes nothing, although replies start with a header.

    Why: servers render every request with add_generation_prompt=True so that the
    prompt ends with the assistant header (`<|im_start|>assistant\\n`,
    `<|start_header_id|>assistant<|end_header_id|>\\n\\n`). If the flag does nothing, the
    prompt ends after the user turn: the model writes the header itself, continues the
    user's text, or answers in the wrong role.

    Not reported when the format has no assistant header (Mistral's `[/INST]` already
    cues the reply): then the full render of a reply starts right where the prompt ends.

    Fix: none automatic; emit the assistant header inside `{% if add_generation_prompt %}`.
    """
    from hfdoctor.chat import corpus

    found = _default(repo)
    if found is None:
        return
    source, analysis = found
    with_prompt, without = analysis.rendered("user", True), analysis.rendered("user", False)
    full = analysis.rendered("reply", False)
    if with_prompt is None or without is None or full is None or with_prompt != without:
        return
    reply_at = full.find(corpus.ASSISTANT_1)
    if reply_at < 0:
        return
    common = len(os.path.commonprefix([with_prompt, full]))
    header = full[common:reply_at]
    if not header.strip():
        return
    reads = "reads add_generation_prompt but" if "add_generation_prompt" in analysis.variables else "never reads add_generation_prompt and"
    yield self.finding(
        repo,
        f"the chat template {reads} renders the same prompt with add_generation_prompt=True as without, while a "
        f"reply is preceded by {header!r} in the full render: served prompts end before that assistant header, so "
        "the model writes it itself or continues the user's turn. Emit the header in `{% if add_generation_prompt %}`.",
        file=source.file, pointer=source.pointer,
    )


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


@rule("TPL007", "double-bos", Severity.WARNING)
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

    Fix: none automatic. It is upstream's own design for these models; encode rendered
    chats with add_special_tokens=False.
    """
    found = _default(repo)
    if found is None:
        return
    source, analysis = found
    bos = repo.special_token("bos_token")
    prompt = analysis.rendered("user", True)
    if not bos or prompt is None or not prompt.startswith(bos):
        return
    how = _bos_added_by_tokenizer(repo, bos)
    if how is None:
        return
    yield self.finding(
        repo,
        f"the chat template starts with the BOS token {bos!r} and {how}: code that renders the chat to text and then "
        "calls tokenizer(text) (add_special_tokens=True by default) feeds the model two BOS tokens, and llama.cpp "
        "after conversion warns about the same. apply_chat_template(tokenize=True) and vLLM's chat endpoint "
        "encode with add_special_tokens=False and are not affected. Encode rendered chats with "
        "add_special_tokens=False.",
        **_location(repo, source, _line_of_text(source, "bos_token")),
    )


@rule("TPL008", "thinking-toggle-ignored", Severity.WARNING)
def thinking_toggle_ignored(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A hybrid-thinking family whose template ignores `enable_thinking` (or the toggle changes nothing).

    Hybrid families (Qwen3, SmolLM3, DeepSeek V3.1: registry `thinking: hybrid`) switch
    reasoning per request with a template kwarg: clients send
    `chat_template_kwargs={"enable_thinking": false}` (vLLM, SGLang) or call
    apply_chat_template(..., enable_thinking=False). The template must read it and render
    a different prompt (Qwen3 pre-fills an empty `<think></think>`).

    Why: when the kwarg is ignored, "thinking off" silently does nothing: the model
    thinks anyway (slower, costlier, `<think>` blocks in answers), or can never think.

    Fix (unsafe): replace the template with the family's upstream template; unsafe
    because any local edits to the template are lost.
    """
    from hfdoctor.chat import capabilities

    found = _default(repo)
    if found is None:
        return
    source, analysis = found
    fam = registry.family(lineage_mod.detect(repo).family)
    if fam is None or fam.thinking != "hybrid":
        return
    toggles = capabilities.thinking_toggles(analysis)
    if any(t.effective for t in toggles):
        return
    if toggles:
        what = " and ".join(f"{t.kwarg}=True and {t.kwarg}=False" for t in toggles) + " render the same prompt"
    else:
        what = "the template never reads enable_thinking"
    fix, note = _upstream_replacement(repo, source, fam, f"replace the template with the upstream {fam.display} one")
    yield self.finding(
        repo,
        f"{fam.display} is a hybrid-thinking family, but {what}: requests that switch thinking off "
        "(chat_template_kwargs={'enable_thinking': False}) are silently ignored, so the model thinks anyway or "
        f"never does. {note}",
        file=source.file, pointer=source.pointer, fix=fix,
    )


def _upstream_replacement(repo: ModelRepo, source: "TemplateSource", fam: registry.Family,
                          title: str) -> tuple[Fix | None, str]:
    from hfdoctor.upstream import canonical_template

    if fam.template is None:
        return None, f"Restore the upstream {fam.display} template."
    lookup = canonical_template(repo.upstream, fam)
    if lookup.text is None:
        return None, f"Restore the {fam.template.repo} template (not available here: {lookup.source})."
    fix = _replace_with_upstream(repo, source, lookup.text, title)
    return fix, f"Restore the {fam.template.repo} template."


@rule("TPL009", "template-kwarg-crash", Severity.ERROR)
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
    for source in _sources(repo):
        analysis = _analysis(repo, source)
        if not analysis.compiled or analysis.fatal is not None:
            continue
        missing: dict[str, list[str]] = {}
        lines: dict[str, int | None] = {}
        for (name, _, kwargs), outcome in analysis.renders.items():
            error = outcome.error
            if kwargs or error is None or error.kind != "undefined" or error.variable not in analysis.variables:
                continue
            if _is_token_name(error.variable):
                continue  # a special token the tokenizer config does not name: render-error says it
            missing.setdefault(error.variable, []).append(name)
            lines.setdefault(error.variable, error.line)
        for variable, names in missing.items():
            yield self.finding(
                repo,
                f"the {source.name!r} template reads {variable!r} and crashes when it is not passed "
                f"({_shapes(names)}): every request without chat_template_kwargs={{{variable!r}: ...}} fails. "
                f"Give it a default: `{{% set {variable} = {variable} | default(...) %}}`.",
                **_location(repo, source, lines[variable]),
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
                f"the {source.name!r} template crashes when {_mode_text(dict(kwargs))} is passed ({_shapes(names)}): "
                f"{described}. Clients that send this kwarg get HTTP 500.",
                severity=Severity.WARNING, **_location(repo, source, line),
            )


@rule("TPL010", "prefix-instability", Severity.WARNING)
def prefix_instability(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The rendering of a conversation is not a prefix of the rendering of its continuation.

    For each scenario (a reply then the next user turn; a reply with reasoning then the
    next turn; a tool call then its result) the finished conversation and the next
    request are rendered and compared in TOKENS, like TRL's
    is_chat_template_prefix_preserving: added tokens cut the text into segments that
    tokenize independently, so the repo's tokenizer is built only when the boundary
    between the turns is not an added token (then "\n" + "\n" merging into one token
    is caught too). Without tokenizer files, characters are compared.

    Why: prompt caches (vLLM automatic prefix caching, SGLang RadixAttention, llama.cpp
    cache_prompt) reuse the KV cache of the previous turn only up to the first token
    that differs; after it, the whole rest of the conversation is recomputed every turn.
    Multi-turn agents pay that on every step.

    Example: Qwen3 drops the reasoning (and the empty `<think></think>`) of earlier
    turns, by design.

    Fix: none automatic. When it is the family's design, nothing to do but know it;
    otherwise render earlier turns the same way whatever follows them.
    """
    from hfdoctor.chat import consistency, corpus

    found = _default(repo)
    if found is None:
        return
    source, analysis = found
    vocabulary = _vocabulary(repo)
    for scenario in corpus.CONTINUATIONS:
        div = consistency.prefix_divergence(analysis, scenario, vocabulary)
        if div is None:
            continue
        where = f"token #{div.index}" if div.unit == "token" else f"character {div.index}"
        yield self.finding(
            repo,
            f"{scenario.what}: the earlier rendering is not a prefix of the next request. First divergent token "
            f"({where}, after …{div.context!r}): {div.earlier!r} becomes {div.later!r} — {div.reason}. "
            "Prefix caches (vLLM, SGLang, llama.cpp) recompute the conversation from there on every turn.",
            severity=Severity.WARNING, file=source.file, pointer=source.pointer,
        )


def _vocabulary(repo: ModelRepo):
    """The repo's added tokens for token-boundary reasoning; the tokenizer built only if needed."""
    from hfdoctor.chat.consistency import Vocabulary

    added = repo.added_token_strings
    lstrip = {str(t.get("content")) for t in repo.tokenizer_json_added_entries if t.get("lstrip")}
    return Vocabulary(tuple(sorted(a for a in added if a)), frozenset(lstrip), lambda: repo.tokenizer)


@rule("TPL011", "train-inference-mismatch", Severity.WARNING)
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

    Fix: none automatic; build training examples as generation prompt + reply + end of
    turn, or pass the same kwargs (e.g. enable_thinking=False) in training and serving.
    """
    from hfdoctor.chat import consistency, corpus

    found = _default(repo)
    if found is None:
        return
    source, analysis = found
    groups: dict[tuple[str, str, bool], tuple[list[str], list[str], Any]] = {}
    for mode in analysis.modes:
        for scenario in corpus.COMPLETIONS:
            mismatch = consistency.completion_mismatch(analysis, scenario, mode)
            if mismatch is None:
                continue
            modes, whats, first = groups.setdefault((mismatch.prompt_has, mismatch.full_has, mismatch.inserted),
                                                    ([], [], mismatch))
            if _mode_text(mode) not in modes:
                modes.append(_mode_text(mode))
            if scenario.what not in whats:
                whats.append(scenario.what)
    for (prompt_has, full_has, inserted), (modes, whats, first) in groups.items():
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
            f"with {' / '.join(modes)}, for {', '.join(whats)}: {what}. A model fine-tuned on full renders learns to "
            "follow the prompt with text it is never served (or is served a prompt it never saw). Build training "
            "examples as generation prompt + reply + end of turn, with the same kwargs as in serving.",
            file=source.file, pointer=source.pointer,
        )


@rule("TPL012", "no-assistant-mask", Severity.INFO)
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
    from hfdoctor.chat import corpus
    from hfdoctor.chat.analysis import has_generation_tag

    found = _default(repo)
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
    if outcome is None or outcome.text is None:
        return
    masked = "".join(outcome.text[a:b] for a, b in outcome.spans)
    if corpus.ASSISTANT_1 in masked and corpus.USER_1 not in masked:
        return
    problem = "do not cover the assistant's reply" if corpus.ASSISTANT_1 not in masked else "also cover the user's turn"
    yield self.finding(
        repo,
        f"the chat template's {{% generation %}} blocks {problem} (masked text: {masked[:60]!r}): assistant-only "
        "loss masks train on the wrong tokens.",
        severity=Severity.WARNING, **_location(repo, source, _line_of_text(source, "generation")),
    )


@rule("TPL013", "template-drift", Severity.WARNING)
def template_drift(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The rendered output differs from the upstream family template on standard conversations.

    The family comes from lineage detection; its canonical template from upstream
    (--upstream, HFDOCTOR_UPSTREAM, the HF cache, the Hub), verified against the sha256
    pinned in hfdoctor's registry. Both templates render the same conversations with
    this repo's special tokens and the outputs are compared (not the template source:
    a reformatted template that renders the same is not drift). Whitespace-only
    differences are reported as such, at info. When upstream cannot be found, an info
    finding says so.

    Why: the weights were trained on the upstream format. A fine-tune that ships a
    different template is served prompts the base never saw, unless the fine-tune
    retrained on exactly the new format.

    Example: a Qwen3 fine-tune that kept the April 2025 template, which the July
    revision changed for tool calls.

    Fix (unsafe): replace the template with the upstream one; unsafe because the change
    may have been intended by the fine-tune.
    """
    from hfdoctor.chat import consistency
    from hfdoctor.chat.analysis import analyze
    from hfdoctor.upstream import canonical_template

    found = _default(repo)
    if found is None:
        return
    source, analysis = found
    fam = registry.family(lineage_mod.detect(repo).family)
    if fam is None or fam.template is None or analysis.sha256 == fam.template.sha256:
        return
    lookup = canonical_template(repo.upstream, fam)
    if lookup.text is None:
        yield self.finding(
            repo,
            f"cannot compare with the upstream {fam.display} template: {lookup.source}.",
            severity=Severity.INFO, file=source.file, pointer=source.pointer,
        )
        return
    upstream = analyze(repo, lookup.text)
    drifts = consistency.drift(analysis, upstream)
    if not drifts:
        return
    whitespace_only = all(d.whitespace_only for d in drifts)
    first = drifts[0]
    if first.ours is None or first.theirs is None:
        detail = (f"on {first.what} the {'repo' if first.ours is None else 'upstream'} template fails while the "
                  "other renders")
    else:
        detail = f"on {first.what}, after …{first.context!r}, this template has {first.ours!r} where upstream has {first.theirs!r}"
    fix = _replace_with_upstream(repo, source, lookup.text, f"replace the template with the upstream {fam.template.repo} one")
    yield self.finding(
        repo,
        f"the chat template renders {len(drifts)} of {len(consistency.DRIFT_RENDERS)} standard conversations "
        f"differently from the upstream {fam.template.repo} template"
        + (" (whitespace only)" if whitespace_only else "")
        + f": {detail}. The weights were trained on the upstream format; unless this fine-tune was retrained on its "
        "own template, it is served prompts it never saw.",
        severity=Severity.INFO if whitespace_only else self.severity,
        file=source.file, pointer=source.pointer, fix=fix,
    )


RULES = [
    missing_chat_template,
    chat_template_conflict,
    chat_template_syntax_error,
    chat_template_render_error,
    template_unknown_token,
    generation_prompt_noop,
    double_bos,
    thinking_toggle_ignored,
    template_kwarg_crash,
    prefix_instability,
    train_inference_mismatch,
    no_assistant_mask,
    template_drift,
]
