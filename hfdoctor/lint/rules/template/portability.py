"""TPL015 template-portability: the chat template in the other template engines that
serve it (hfdoctor.compat.portability renders it; hfdoctor.compat.assess reports it)."""

from __future__ import annotations

from typing import Iterator

from hfdoctor.findings import Finding, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.assessment import assessed_findings
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule


@rule("TPL015", "template-portability", Severity.WARNING, fix=FixAvailability.NONE)
def template_portability(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The chat template fails or renders differently in another template engine.

    Why: the same template is rendered by different Jinja implementations, and a
    construct one accepts another rejects or renders differently: the model is then
    served prompts it was not trained on, or not served at all.

    transformers renders templates with jinja2; TGI, mistral.rs and NVIDIA dynamo use
    minijinja (configured as TGI configures it), transformers.js and LM Studio use
    @huggingface/jinja. hfdoctor renders the standard conversations in each engine it can
    run (minijinja always, @huggingface/jinja when node and the package are installed)
    and compares with transformers' render:
    - the template does not compile there, or raises where jinja2 renders (warning);
    - it renders other text (warning), or only other whitespace (info).
    llama.cpp's minja is not run here (it needs a C++ build).

    Severity: info unless the repository targets an engine that renders with that template
    engine (its card names TGI, for minijinja).

    Example: SmolLM3-3B's template: `{% generation %}` is an unknown statement in minijinja
    (#815), so TGI cannot compile it (info: SmolLM3's card does not name TGI). Qwen3-8B's
    renders the standard conversations in minijinja exactly as in transformers.

    Fix: none; portable rewrites change the template; the message shows the first difference.
    """
    yield from assessed_findings(repo, self)


RULES = [template_portability]
