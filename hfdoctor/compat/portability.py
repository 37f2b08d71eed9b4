"""Does the chat template render the same in the other template engines?

The reference is transformers' own render (jinja2, hfdoctor.chat.analysis). Each other
engine (hfdoctor.chat.engines) renders the same standard conversations; a template that
does not compile there, raises where jinja2 renders, or renders other text is not portable
to the servers that use that engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hfdoctor.chat import corpus, engines, store
from hfdoctor.chat.analysis import MAX_TEMPLATE_CHARS, cached_analysis, special_tokens_for_render
from hfdoctor.repo import ModelRepo, TemplateSource
from hfdoctor.bounded.memo import memoized

CONTEXT_CHARS = 30


@dataclass(frozen=True)
class EngineVerdict:
    engine: str
    consumers: tuple[str, ...]
    # same | differs | whitespace (differs in whitespace only) | fails | unavailable
    outcome: str
    detail: str

    @property
    def portable(self) -> bool:
        return self.outcome in ("same", "unavailable")


def _first_difference(ours: str, theirs: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return (f"after {ours[max(0, at - CONTEXT_CHARS):at]!r} transformers renders {ours[at:at + CONTEXT_CHARS]!r}, "
            f"this engine {theirs[at:at + CONTEXT_CHARS]!r}")


def judge(result: engines.EngineResult, reference: dict[tuple[str, bool], str | None]) -> EngineVerdict:
    """Compare one engine's renders with transformers' (None: transformers fails too)."""
    def verdict(outcome: str, detail: str) -> EngineVerdict:
        return EngineVerdict(result.engine, result.consumers, outcome, detail)

    if result.unavailable:
        return verdict("unavailable", f"not rendered here: {result.unavailable}")
    if result.compile_error:
        return verdict("fails", f"the template does not compile: {result.compile_error}")
    failed = [(k, result.errors[k]) for k in result.errors if reference.get(k) is not None]
    if failed:
        (name, _), message = failed[0]
        return verdict("fails", f"{len(failed)} of {len(reference)} standard conversations raise where transformers "
                                f"renders them ({corpus.conversation(name).what}: {message})")
    differs = [k for k, text in result.texts.items() if reference.get(k) is not None and text != reference[k]]
    if not differs:
        return verdict("same", f"renders the {len(result.texts)} standard conversations exactly as transformers")
    key = differs[0]
    outcome = "whitespace" if all("".join(result.texts[k].split()) == "".join(reference[k].split())
                                  for k in differs) else "differs"
    return verdict(outcome, f"{len(differs)} of {len(reference)} standard conversations render differently "
                            f"({corpus.conversation(key[0]).what}: {_first_difference(reference[key], result.texts[key])})")


def _run(text: str, tokens: tuple[tuple[str, str], ...], repo_root: str | None) -> tuple[EngineVerdict, ...]:
    return _verdicts(text, tokens, engines.hf_jinja_runtime(Path(repo_root) if repo_root else None))


@memoized("portability verdicts", 64)
def _verdicts(text: str, tokens: tuple[tuple[str, str], ...], runtime: engines.HfJinjaRuntime
              ) -> tuple[EngineVerdict, ...]:
    """Cached by what decides them (the fixer's patched views and copies of a repository
    render once): the text, the tokens, and the node and @huggingface/jinja that render."""
    stored = _stored(text, tokens, runtime)
    if stored is not None:
        return stored
    reference, results = engines.run_all(text, dict(tokens), runtime=runtime)
    if not any(v is not None for v in reference.values()):
        return ()  # transformers renders none of them: the template rules report why
    return tuple(judge(result, reference) for result in results)


def _stored(text: str, tokens: tuple[tuple[str, str], ...], runtime: engines.HfJinjaRuntime
            ) -> tuple[EngineVerdict, ...] | None:
    """The verdicts make_analyses.py recorded for a canonical template (no render at check
    time), unless an engine installed here is of another version than the one recorded."""
    recorded = store.load_portability(text, dict(tokens))
    if not recorded:
        return None
    installed = engines.installed_versions(None, runtime)
    verdicts = []
    for entry in recorded:
        local = installed.get(entry["engine"])
        if local is not None and local != entry["version"]:
            return None
        verdicts.append(EngineVerdict(entry["engine"], tuple(entry["consumers"]), entry["outcome"],
                                      f"{entry['detail']} ({entry['engine']} {entry['version']})"))
    return tuple(verdicts)


def verdicts_to_record(text: str, tokens: dict[str, str]) -> list[dict]:
    """What make_analyses.py stores: every engine's verdict, with the engine version it came from."""
    reference, results = engines.run_all(text, tokens, None)
    versions = engines.installed_versions(None)
    return [{"engine": v.engine, "version": versions.get(v.engine), "consumers": list(v.consumers),
             "outcome": v.outcome, "detail": v.detail}
            for v in (judge(result, reference) for result in results) if v.outcome != "unavailable"]


def template_portability(repo: ModelRepo, source: TemplateSource) -> list[EngineVerdict]:
    """Each other engine's verdict on one template of the repo (cached per template text).

    The reference renders come from the same bounded child as minijinja's, so that a check
    limited by --select does not pay for the full template analysis; when the template
    rules have analysed it already and found it broken or hostile, nothing is run."""
    if len(source.text) > MAX_TEMPLATE_CHARS:
        return []  # not parsed by any engine (check-incomplete says so when the template rules run)
    analysis = cached_analysis(repo, source.text)
    if analysis is not None and (not analysis.compiled or analysis.fatal is not None):
        return []  # broken in transformers itself: the template rules report it
    tokens = tuple(sorted(special_tokens_for_render(repo).items()))
    root = repo.source.local_dir
    return list(_run(source.text, tokens, str(root) if root is not None else None))
