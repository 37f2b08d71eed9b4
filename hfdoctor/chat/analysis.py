"""One analysis per chat template: every render the template rules need, done once.

`analyze(repo, text)` compiles the template and renders a fixed plan of corpus
conversations (with and without the generation prompt, and with each thinking kwarg
the template reads) in ONE bounded worker process (hfdoctor.bounded.sandbox): a template
that loops forever, allocates gigabytes or pokes at Python internals ends as a
RenderError on the conversation that triggered it, within a few seconds, and
hfdoctor goes on. The result is cached on the repo, so the ~10 template rules and
TOK004 share it.

The parent process never runs the template. It reads the rendered strings and derives:
capabilities (by needle search: system role, tools, tool calls and their argument
shape, tool results, typed content, reasoning, thinking toggle), the markers the
template emits, prefix stability under continuation, and train/inference agreement.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import sys
from dataclasses import astuple
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Callable

from hfdoctor.knowledge import registry
from hfdoctor.chat import corpus, store
from hfdoctor.chat.render_plan import (
    FIXED_NOW, MAX_ANALYSIS_BYTES, MAX_MESSAGE_CHARS, MAX_RENDER_CHARS, SPECIAL_TOKEN_NAMES, Outcome, RenderError,
    RenderKey, TemplateAnalysis, plan,
)
from hfdoctor.bounded.memo import memo
from hfdoctor.bounded.sandbox import Limits, StepGuard, StepTimeout, run_bounded, run_in_process
from hfdoctor.repo import token_content

if TYPE_CHECKING:
    from hfdoctor.repo import ModelRepo


def _template_line(err: BaseException) -> int | None:
    """The template line of the innermost template frame of a traceback.

    jinja2 rewrites the traceback of an Exception so that its frames carry template
    lines; a BaseException (our StepTimeout) passes through untouched, and its frames
    carry lines of the generated Python code, which the template maps back.
    """
    line = None
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == "<template>":
            template = tb.tb_frame.f_globals.get("__jinja_template__")
            line = template.get_corresponding_lineno(tb.tb_lineno) if template is not None else tb.tb_lineno
        tb = tb.tb_next
    return line if line is not None else getattr(err, "template_line", None)


# Methods of str that format with attribute and item access ("{0.__class__}"): jinja2's
# sandbox wraps them since 2.8.1, and stored references to them were sandbox escapes until
# 3.1.5/3.1.6 (CVE-2024-56326, CVE-2025-27516). No chat template calls them; jinja2's own
# `format` filter (printf-style) is a different thing and stays allowed.
FORMAT_METHODS = frozenset({"format", "format_map"})


def sandbox_escape_attempts(source: str) -> list[tuple[str, int]]:
    """(what, line) for every first step of a jinja2 sandbox escape in the template's source:

    - an attribute or item that starts with an underscore (`x.__class__`,
      `x['__globals__']`, `x | attr('__class__')`, `self._TemplateReference__context`);
    - a name that starts with two underscores (`__builtins__`, `__import__`) and that the
      template does not define itself (YandexGPT-5's own template names its macros
      `__render_tool`, `__render_user_message`: a macro or `set` variable of the template is
      its own value, not something the environment hands it);
    - a dunder string passed to any call (`getattr('', '__class__')`);
    - `str.format` / `str.format_map`, called or kept as a reference;
    - `self`, the template reference (chat templates have no blocks to call through it).

    The sandbox holds against most of these at render time; a chat template has no reason
    to try any of them, so the template is refused before it is rendered at all.
    """
    import jinja2.nodes

    from hfdoctor.chat.render import parse_template

    def underscored(node: Any) -> bool:
        return isinstance(node, jinja2.nodes.Const) and isinstance(node.value, str) and node.value.startswith("_")

    ast = parse_template(source)
    found = {(n.attr, n.lineno) for n in ast.find_all(jinja2.nodes.Getattr)
             if n.attr.startswith("_") or n.attr in FORMAT_METHODS}
    found |= {(n.arg.value, n.lineno) for n in ast.find_all(jinja2.nodes.Getitem) if underscored(n.arg)}
    found |= {(n.args[0].value, n.lineno) for n in ast.find_all(jinja2.nodes.Filter)
              if n.name == "attr" and n.args and (underscored(n.args[0]) or (
                  isinstance(n.args[0], jinja2.nodes.Const) and n.args[0].value in FORMAT_METHODS))}
    own = {m.name for m in ast.find_all(jinja2.nodes.Macro)} | {
        n.name for n in ast.find_all(jinja2.nodes.Name) if n.ctx in ("store", "param")}
    found |= {(n.name, n.lineno) for n in ast.find_all(jinja2.nodes.Name)
              if (n.name.startswith("__") and n.name not in own) or n.name == "self"}
    found |= {(a.value, n.lineno) for n in ast.find_all(jinja2.nodes.Call) for a in n.args
              if isinstance(a, jinja2.nodes.Const) and isinstance(a.value, str) and a.value.startswith("__")}
    return sorted(found, key=lambda item: (item[1], item[0]))


def classify(err: BaseException) -> RenderError:
    """What kind of failure an exception from compiling or rendering is."""
    import jinja2

    from hfdoctor.chat.render import TemplateRaised

    name = type(err).__name__
    message = str(err)[:MAX_MESSAGE_CHARS]
    line = _template_line(err)
    if isinstance(err, jinja2.TemplateSyntaxError):
        return RenderError("syntax", name, (err.message or message)[:MAX_MESSAGE_CHARS], err.lineno)
    if isinstance(err, TemplateRaised):
        return RenderError("declined", name, message, line)
    if isinstance(err, StepTimeout):
        return RenderError("timeout", name, message, line)
    if isinstance(err, MemoryError):
        return RenderError("memory", name, message or "out of memory", line)
    if isinstance(err, RecursionError):
        return RenderError("error", name, "recursion too deep", line)
    if isinstance(err, jinja2.exceptions.SecurityError):
        internal = re.search(r"attribute '_|underscore-prefixed|not safely callable", message)
        return RenderError("unsafe" if internal else "forbidden", name, message, line)
    if isinstance(err, jinja2.UndefinedError):
        missing = re.match(r"'([A-Za-z_]\w*)' is undefined", message)
        return RenderError("undefined", name, message, line, missing.group(1) if missing else None)
    return RenderError("error", name, message, line)


# --- the worker: runs in the bounded child process ----------------------------------


def _render_one(source: str, key: RenderKey, special_tokens: dict[str, str], tool_use: bool,
                guard: StepGuard) -> Outcome:
    from hfdoctor.chat.render import pinned_clock, render

    name, add_generation_prompt, kwargs = key
    inputs = corpus.conversation(name).inputs()
    tools = inputs["tools"]
    if tools is None and tool_use:
        tools = [dict(t) for t in corpus.TOOLS]  # transformers picks a tool_use template only with tools
    try:
        with pinned_clock(FIXED_NOW), guard.step():
            result = render(source, inputs["messages"], tools=tools, documents=inputs["documents"],
                            add_generation_prompt=add_generation_prompt, special_tokens=special_tokens,
                            **dict(kwargs))
    except (Exception, StepTimeout) as err:  # every failure of a render is a finding, not a crash
        return Outcome(error=classify(err))
    if len(result.text) > MAX_RENDER_CHARS:
        return Outcome(error=RenderError("too-large", "OutputTooLarge",
                                         f"the rendered prompt is {len(result.text):,} characters"))
    return Outcome(result.text, tuple(result.generation_spans))


def _work(source: str, special_tokens: dict[str, str], tool_use: bool,
          emit: Callable[[Any], None], guard: StepGuard) -> None:
    from hfdoctor.chat.render import compile_template, template_kwargs, template_variables
    from hfdoctor.chat.triggers import parse_template_text

    try:
        with guard.step():
            compile_template(source)
            variables = template_variables(source)
            dunders = sandbox_escape_attempts(source)
    except (Exception, StepTimeout) as err:
        emit(("compile", classify(err)))
        return
    try:
        with guard.step():  # what the template does on purpose (template-backdoor reads it): parsed here, bounded
            emit(("reading", parse_template_text(source)))
    except (Exception, StepTimeout):
        pass  # not read: that rule says nothing of this template
    if dunders:
        # Refuse to render at all: the sandbox would most likely hold, but there is
        # no reason for a chat template to touch Python internals.
        name, line = dunders[0]
        emit(("render", None, Outcome(error=RenderError(
            "unsafe", "SandboxEscape", f"the template accesses {name!r}", line))))
        return
    kwargs_read = template_kwargs(source, special_tokens)
    emit(("variables", sorted(variables), sorted(kwargs_read)))
    held = 0
    for key in plan(kwargs_read):
        emit(("start", key))
        outcome = _render_one(source, key, special_tokens, tool_use, guard)
        held += sys.getsizeof(outcome.text) if outcome.text is not None else 0
        if held > MAX_ANALYSIS_BYTES:
            emit(("oversize", held))  # the parent would hold it all: stop here
            return
        emit(("render", key, outcome))
        if outcome.error is not None and outcome.error.fatal:
            return


# --- the analysis, as the parent sees it ----------------------------------------------



def trusted_templates() -> frozenset[str]:
    """sha256 of the registry's canonical templates: verified upstream text, rendered by
    the test suite over this very corpus, so they may run in-process (no fork)."""
    return frozenset(v.template.sha256 for _, v in registry.all_variants() if v.template is not None)


# The analyses this process has finished, by everything they are a function of: the fixer's
# trial re-checks of a patched view (whose template it did not touch) and templates that recur
# across a catalog reuse them instead of forking a worker again. A worker cut off at its limit,
# or a render stopped at its time limit, is not remembered: under less load it may finish.
# Bounded by the renders held as well: each analysis may hold MAX_ANALYSIS_BYTES.
FINISHED = memo("template analyses", 64, max_bytes=64 << 20, weigh=TemplateAnalysis.held_bytes)
# A template's source beyond this is not parsed at all (the largest real ones are under 20 KB;
# jinja2 takes a minute over 2 MB of expressions).
MAX_TEMPLATE_CHARS = 512 * 1024


def run_analysis(text: str, special_tokens: dict[str, str], tool_use: bool = False,
                 limits: Limits | None = None) -> TemplateAnalysis:
    """Analyse one template text: in a bounded worker, or in-process when it is trusted.

    The result is shared by whoever asks again with the same inputs: read it, never change it."""
    limits = limits or Limits()
    memo_key = (text, tuple(sorted(special_tokens.items())), tool_use, astuple(limits))
    finished = FINISHED.get(memo_key)
    if finished is not None:
        return finished
    # Import jinja2 here, not in the child: once per process instead of once per fork,
    # and no import lock can be held by another thread at the moment of the fork.
    import hfdoctor.chat.render  # noqa: F401

    work = partial(_work, text, dict(special_tokens), tool_use)
    if hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest() in trusted_templates():
        result = run_in_process(work)
    else:
        result = run_bounded(work, limits)
    analysis = TemplateAnalysis(text, tool_use)
    current: RenderKey | None = None
    compiled = False
    for message in result.messages:
        tag = message[0]
        if tag == "compile":
            analysis.compile_error = message[1]
        elif tag == "variables":
            compiled = True
            analysis.variables, analysis.kwargs = frozenset(message[1]), frozenset(message[2])
        elif tag == "reading":
            analysis.reading = message[1]
        elif tag == "start":
            current = message[1]
        elif tag == "oversize":
            analysis.renders.clear()  # not analysed: nothing of it is kept
            analysis.fatal = (None, RenderError(
                "skipped", "OutputTooLarge", f"its renders together hold more than {MAX_ANALYSIS_BYTES >> 20} MiB"))
        elif tag == "render":
            key, outcome = message[1], message[2]
            if key is not None:
                analysis.renders[key] = outcome
            current = None
            if outcome.error is not None and outcome.error.fatal:
                analysis.fatal = (key, outcome.error)
        elif tag == "too-large" and analysis.fatal is None:  # the first one: the child goes on
            analysis.fatal = (current, RenderError("too-large", "OutputTooLarge",
                                                   f"a render produced {message[1]:,} bytes"))
        elif tag == "crashed":
            analysis.fatal = (current, RenderError("error", "WorkerError", message[1]))
    if not result.finished and analysis.fatal is None:
        if result.failure == "timeout":
            error = RenderError("timeout", "Timeout", f"did not finish within {limits.total_s:g} s")
        elif result.signal is not None:
            # SIGXCPU: the CPU-time cap; SIGKILL from someone else: the kernel's OOM killer.
            kind = {int(signal.SIGXCPU): "timeout", int(signal.SIGKILL): "memory"}.get(result.signal, "error")
            error = RenderError(kind, "WorkerKilled", f"the render worker was {result.failure}")
        else:
            error = RenderError("error", "WorkerError", result.failure or "the render worker failed")
        if compiled:
            analysis.fatal = (current, error)
        elif analysis.compile_error is None:
            analysis.compile_error = error  # it never got past compiling
    timed_out = any(o.error is not None and o.error.kind == "timeout" for o in analysis.renders.values()) or (
        analysis.fatal is not None and analysis.fatal[1].kind == "timeout")
    if result.finished and not timed_out:
        FINISHED.put(memo_key, analysis)
    return analysis


def analyze(repo: "ModelRepo", text: str, *, tool_use: bool = False) -> TemplateAnalysis:
    """The analysis of `text` rendered with this repo's special tokens.

    A fact of the repository, so every rule shares it; an upstream canonical template with
    upstream tokens comes precomputed with hfdoctor (store.py).
    """
    return repo.facts.get(_analyze, text, tool_use)


def _analyze(repo: "ModelRepo", text: str, tool_use: bool) -> TemplateAnalysis:
    special_tokens = special_tokens_for_render(repo)
    analysis = store.load(text, special_tokens, tool_use)
    if analysis is None:
        analysis = _within_budget(repo, text, special_tokens, tool_use)
    return analysis


TEMPLATES_SKIPPED = "chat templates"  # budget.skip keys: one entry for all those left out
TEMPLATES_SKIPPED_MEMORY = "chat templates (memory)"
TEMPLATES_SKIPPED_COUNT = "chat templates (count)"
# Distinct templates analysed per repository, the default first: real ones store one to a few
# (default, tool_use, rag); a GGUF can name 20,000, each a worker run until the budget ran out.
MAX_TEMPLATES = 32


def _within_budget(repo: "ModelRepo", text: str, special_tokens: dict[str, str], tool_use: bool) -> TemplateAnalysis:
    """run_analysis, when the repository's budget still holds it; otherwise an analysis that says it
    was not analysed (the rules say nothing of it, and check-incomplete names it):

    - a template whose source passes MAX_TEMPLATE_CHARS is not parsed, nor one past the
      first MAX_TEMPLATES of the repository;
    - one whole worker's time limit must be left: a hundred templates that each run to their
      limit take the budget, not a hundred times the limit;
    - the renders the check keeps must fit the budget's allowance of memory (each analysis holds
      at most MAX_ANALYSIS_BYTES, and one that would hold more is not analysed either)."""
    limits = Limits()
    budget = repo.budget
    if len(text) > MAX_TEMPLATE_CHARS:
        why = f"its source is {len(text) / 2**20:.1f} MiB, over the {MAX_TEMPLATE_CHARS >> 10} KiB hfdoctor parses"
        budget.skip(f"chat templates ({_template_label(repo, text)})", why)
        return _not_analysed(text, tool_use, why)
    sources = repo.facts.get(_template_sources)
    if sources.get(text, (0, None))[0] >= MAX_TEMPLATES:
        why = f"hfdoctor analyses the first {MAX_TEMPLATES} templates of a repository"
        budget.skip(f"{len(sources) - MAX_TEMPLATES:,} chat templates after the first {MAX_TEMPLATES}", why,
                    TEMPLATES_SKIPPED_COUNT)
        return _not_analysed(text, tool_use, why)
    # The first template left out is named; the rest follow it (one entry, not one each).
    if budget.remaining() < limits.total_s:
        if not budget.noted(TEMPLATES_SKIPPED):
            budget.skip_for_time(f"chat templates ({_template_label(repo, text)} and any after it)",
                                 TEMPLATES_SKIPPED)
        return _not_analysed(text, tool_use, "the time budget of this check ran out")
    if budget.keeping_left() <= 0:
        why = f"the renders of the templates before it reached the {budget.keep_bytes >> 20} MiB a check keeps"
        if not budget.noted(TEMPLATES_SKIPPED_MEMORY):
            budget.skip(f"chat templates ({_template_label(repo, text)} and any after it)", why,
                        TEMPLATES_SKIPPED_MEMORY)
        return _not_analysed(text, tool_use, why)
    analysis = run_analysis(text, special_tokens, tool_use, limits)
    budget.keep(analysis.held_bytes())
    if analysis.fatal is not None and analysis.fatal[1].kind == "skipped":
        budget.skip(f"chat templates ({_template_label(repo, text)})", analysis.fatal[1].message)
    return analysis


def _not_analysed(text: str, tool_use: bool, why: str) -> TemplateAnalysis:
    analysis = TemplateAnalysis(text, tool_use)
    analysis.fatal = (None, RenderError("skipped", "NotAnalysed", why))
    return analysis


def _template_sources(repo: "ModelRepo") -> dict[str, tuple[int, Any]]:
    """text -> (position, first source) of each distinct template the repository stores, the
    default first (a fact: one pass over them, however many a GGUF names)."""
    found: dict[str, tuple[int, Any]] = {}
    default = repo.chat_template
    for source in ([default] if default is not None else []) + list(repo.chat_templates):
        if source.text not in found:
            found[source.text] = (len(found), source)
    return found


def _template_label(repo: "ModelRepo", text: str) -> str:
    found = repo.facts.get(_template_sources).get(text)
    return f"the {found[1].name!r} template in {found[1].where}" if found is not None else "a template"


def template_reading(repo: "ModelRepo", source: Any) -> Any:
    """What a template does on purpose (a hfdoctor.chat.triggers.TemplateText), read from its source:
    shipped for the canonical templates, else read in the analysis worker, under its deadline.
    None when it does not parse or was not analysed."""
    from hfdoctor.chat import triggers

    known = triggers.stored().get(triggers.sha256(source.text))
    if known is not None:
        return triggers.from_json(known)
    return analyze_source(repo, source).reading


def cached_analysis(repo: "ModelRepo", text: str) -> TemplateAnalysis | None:
    """The analysis of `text` if a rule has made it for this repo (default render mode)."""
    return repo.facts.peek(_analyze, text, False)


def analyze_source(repo: "ModelRepo", source: Any) -> TemplateAnalysis:
    """The analysis of a TemplateSource (a `tool_use` template is rendered with tools)."""
    return analyze(repo, source.text, tool_use=source.name == "tool_use")


def special_tokens_for_render(repo: "ModelRepo") -> dict[str, str]:
    """The named special tokens transformers passes to templates (`special_tokens_map`).

    bos/eos/unk/sep/pad/cls/mask from tokenizer_config.json, plus its other `*_token`
    strings and `extra_special_tokens` names (model-specific tokens such as
    image_token). special_tokens_map.json is read as transformers 5 reads it: only when
    tokenizer_config.json has no added_tokens_decoder, and then it wins. A name neither
    file mentions takes the tokenizer class's default (upstream_templates/
    tokenizer_defaults.json, generated from transformers).
    """
    config = repo.tokenizer_config or {}
    tokens: dict[str, str] = {}
    for key, value in config.items():
        if key in SPECIAL_TOKEN_NAMES:
            content = token_content(value)
            if content is not None:
                tokens[key] = content
        elif key.endswith("_token") and isinstance(value, str):
            tokens[key] = value
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):
        for key, value in extra.items():
            content = token_content(value)
            if content is not None:
                tokens[str(key)] = content
    special_map = repo.special_tokens_map or {}
    if "added_tokens_decoder" not in config:
        for key, value in special_map.items():
            content = token_content(value)
            if content is not None and (key in SPECIAL_TOKEN_NAMES or key.endswith("_token")):
                tokens[key] = content
    # A name the files do not mention at all gets the tokenizer class's default, as the
    # class's __init__ gives it (an explicit null stays unset).
    for key, value in tokenizer_class_defaults(config.get("tokenizer_class")).items():
        if key not in config and key not in special_map and key not in tokens:
            tokens[key] = value
    return tokens


@lru_cache(maxsize=1)
def _class_defaults() -> dict[str, dict[str, str]]:
    try:
        return json.loads(registry.data_file("tokenizer_defaults.json").read_text(encoding="utf-8"))["classes"]
    except (OSError, ValueError, KeyError):
        return {}


def tokenizer_class_defaults(name: object) -> dict[str, str]:
    """The special tokens transformers' tokenizer class `name` defaults to (GemmaTokenizer:
    <bos>, <eos>, <unk>, <pad>...); {} for an unknown class. `XTokenizerFast` is X's."""
    if not isinstance(name, str):
        return {}
    return dict(_class_defaults().get(name.removesuffix("Fast"), {}))
