"""How loud a finding is: severity from evidence, decided in one place.

A finding's severity is decided in this order, and nowhere else:
1. the rule's default: the severity of its `@rule(code, name, severity)`;
2. the rule's own evidence: a rule may state one finding at another severity than its
   default (`self.finding(..., severity=...)`: consumer-incompatible's silent rope_theta
   misread under transformers 4 is an error where the repository declares a 4.x consumer); the
   compat detectors state theirs as a Severity too (hfdoctor.compat.assess.Problem; None: the compat section only, no finding);
3. this policy: a rule also states the facets of its finding (hfdoctor.findings.Facet),
   facts that decide how loud it should be, and never lowers its own severity for them. The
   TABLE below maps them to a severity (only ever lower: info) and says why in the
   finding's `severity_reason`, the same way for every rule;
4. nothing after it: there is no user override of severity (`--select`/`--ignore` choose
   rules, `--fail-on` decides which severities fail; neither changes a finding's severity).

The TABLE is read top to bottom and the first row that matches decides: a row matches when
the finding has a facet of the row's kind and the row's condition holds. A finding at info
already, or without facets, is left as it is. The rows, in their order:

1. engine, and no engine named is targeted: a problem of particular engines (TGI cannot
   compile the template; llama.cpp's converter refuses the tokenizer) is info unless the
   repository shows that it targets one of them (hfdoctor.compat.targets: the card names
   it, GGUF or ONNX files, tags).
2. engine, and an engine named is targeted: keeps the rule's severity, and says so. Rows 1
   and 2 cover every finding with an engine facet: its other facets are never read.
3. canonical: a property of the exact upstream template (or an earlier upstream revision
   of it) is upstream's own design: info, naming the template.
4. upstream-design, of another repository: a property the family's upstream shares in the
   same way (its canonical template, its tokenizer's pad token, the markers its template
   writes as text, the remote code it is only published as): info, "by design of <family>
   upstream".
5. reasoning-only, and the family is not known for certain (or only suggested): a
   divergence that only involves reasoning blocks (dropped from history, pre-filled in the
   prompt) is read as the template's design: info. Whitespace and format divergences stay
   warnings: those break models.
6. template-behaviour, and no family is known: how a template renders a conversation (its
   turns are not prefixes of the next request, a header it always appends, a system message it
   leaves out) is a release's own format as often as a publisher's mistake, and only the
   family's upstream template can tell which. When no file names a family hfdoctor knows and
   the template's format is none of theirs, there is none to compare with (a rebrand of a
   release hfdoctor does not know: YandexGPT, Hunyuan, Gemma 4 before they were registered), so
   it is info, saying so. A family named even weakly keeps the warning (an edited Hunyuan
   template; a Llama 2 template on another model), as do a known family that publishes no
   template at all and a template published without a model (a trainer's, a collection's):
   then the template is the publisher's own.
7. hub-inferred: card metadata the Hub fills in from config.json: info.
8. capability: an input shape the template does not support, which servers convert
   before rendering (tool-call arguments as a JSON string): info.
9. avoidable: the usual way of loading never meets the problem (transformers loads the
   model natively, without the repository's remote code): info, saying how.
10. chat-only, and the checkpoint says it is pre-trained (a base model): a chat-serving
   problem of it is info.
11. generation, and the repository declares a model that generates no text (a classifier or
   reward model's head, an encoder-only model type, a PEFT task type such as SEQ_CLS:
   hfdoctor.repo.head): how generation would stop or sample is not a problem of it: info,
   naming the declaration.
12. chat-only, and the repository declares a model that generates no text: the same.
13. upstream-design, of this repository itself: never circular. When the upstream a facet
   names is the repository itself (its Hub id, or a folder named `<org>--<name>` as the
   Hugging Face cache and ../shared/upstream name them), the finding keeps its severity and
   says so: a repository is not evidence of its own design. Last, so that rows 5-12 still
   lower such a finding for their own reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from hfdoctor import lineage
from hfdoctor.compat.targets import describe, targeted_engines
from hfdoctor.findings import FacetKind, Finding, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.repo.head import generates_nothing_because


def apply(repo: ModelRepo, findings: list[Finding]) -> list[Finding]:
    """The findings at the severity their evidence supports."""
    context = _Context(repo)
    return [_judge(f, context) for f in findings]


class _Context:
    """What the policy reads of the repository, computed on first use."""

    def __init__(self, repo: ModelRepo):
        self.repo = repo
        self._lineage = None  # kept here, a crash's stand-in too (a fact that raises is not kept)

    @property
    def lineage(self):
        if self._lineage is None:
            try:
                self._lineage = lineage.detect(self.repo)
            except Exception:  # lineage's own crash is reported by check; judge as unknown
                self._lineage = lineage.Lineage(family=None, base_model=None, evidence=[])
        return self._lineage

    def targets(self) -> dict[str, str]:
        return targeted_engines(self.repo)  # a fact of the repository: computed once

    def own_names(self) -> list[str]:
        """The Hub ids this repository is known by: its source's repo id, and a folder
        named <org>--<name> (the Hugging Face cache's and ../shared/upstream's layout)."""
        names = []
        repo_id = getattr(self.repo.source, "repo_id", None)
        if isinstance(repo_id, str) and "/" in repo_id:
            names.append(repo_id)
        folder = self.repo.root.name if self.repo.root is not None else ""
        if folder.startswith("models--"):
            folder = folder[len("models--"):]
        org, sep, name = folder.partition("--")
        if sep and org and name and "--" not in name:
            names.append(f"{org}/{name}")
        return names

    def own_name_in(self, text: str) -> str | None:
        """The name of this repository that `text` names, if any."""
        return next((name for name in self.own_names() if _names(text, name)), None)


# A row's reason: given the details of the finding's facets of the row's kind (in the
# finding's order) and the context, the finding's severity_reason, or None where the
# row's condition does not hold.
Reason = Callable[[list[str], _Context], str | None]


@dataclass(frozen=True)
class Row:
    kind: FacetKind  # the facet a finding must have for the row to match
    condition: str  # what else must hold, in words (the module docstring says the same)
    lowers_to: Severity | None  # the finding's new severity; None: it keeps the rule's
    reason: Reason


def _no_engine_targeted(engines: list[str], context: _Context) -> str | None:
    if any(engine in context.targets() for engine in engines):
        return None
    return (f"only {describe(engines)} affected, and the repository does not show that it targets it (no mention "
            "in the card, no files or tags for it)")


def _engine_targeted(engines: list[str], context: _Context) -> str | None:
    targeted = context.targets()
    hit = next((engine for engine in engines if engine in targeted), None)
    return None if hit is None else f"the repository targets {describe([hit])}: {targeted[hit]}"


def _canonical(details: list[str], context: _Context) -> str:
    return f"{details[0]}: upstream's own design"


def _design_of_another(details: list[str], context: _Context) -> str | None:
    return None if context.own_name_in(details[0]) else f"by design of {details[0]}"


def _family_uncertain(details: list[str], context: _Context) -> str | None:
    if context.lineage.certain:
        return None
    return ("only reasoning blocks differ, and the family is not known for certain (no upstream template to "
            "compare with): read as the template's design")


def _no_upstream_to_compare(details: list[str], context: _Context) -> str | None:
    # A family named even weakly (an edited Hunyuan template, a Llama 2 template on another model) is the
    # yardstick: its upstream format is what the template departs from. A template published on its own (no
    # config.json or adapter_config.json: a trainer's or a template collection's) is no release's design.
    if context.lineage.family_ref is not None or context.lineage.by_source.get("template"):
        return None
    if context.repo.config is None and context.repo.adapter_config is None:
        return None
    return ("no file names a model family hfdoctor knows and the template's format is none of theirs, so no upstream "
            "template can tell whether the release it comes from renders this way by design")


def _hub_inferred(details: list[str], context: _Context) -> str:
    return "the Hub infers it from config.json when the card does not say"


def _capability(details: list[str], context: _Context) -> str:
    return details[0] or "a shape the template does not support"


def _avoidable(details: list[str], context: _Context) -> str:
    return details[0]


def _pretrained(details: list[str], context: _Context) -> str | None:
    if context.lineage.stage != "pretrained":
        return None
    return "a pre-trained (base) checkpoint: " + "; ".join(context.lineage.stage_evidence)


def _generates_nothing(details: list[str], context: _Context) -> str | None:
    return generates_nothing_because(context.repo)


def _design_of_itself(details: list[str], context: _Context) -> str | None:
    own = context.own_name_in(details[0])
    if own is None:
        return None
    return f"not lowered: the upstream it would be the design of is {own}, this repository itself"


TABLE: tuple[Row, ...] = (
    Row(FacetKind.ENGINE, "no engine named is targeted", Severity.INFO, _no_engine_targeted),
    Row(FacetKind.ENGINE, "an engine named is targeted", None, _engine_targeted),
    Row(FacetKind.CANONICAL, "always", Severity.INFO, _canonical),
    Row(FacetKind.UPSTREAM_DESIGN, "the upstream named is another repository", Severity.INFO, _design_of_another),
    Row(FacetKind.REASONING_ONLY, "the family is not known for certain", Severity.INFO, _family_uncertain),
    Row(FacetKind.TEMPLATE_BEHAVIOUR, "no family is known", Severity.INFO, _no_upstream_to_compare),
    Row(FacetKind.HUB_INFERRED, "always", Severity.INFO, _hub_inferred),
    Row(FacetKind.CAPABILITY, "always", Severity.INFO, _capability),
    Row(FacetKind.AVOIDABLE, "always", Severity.INFO, _avoidable),
    Row(FacetKind.CHAT_ONLY, "the checkpoint says it is pre-trained", Severity.INFO, _pretrained),
    Row(FacetKind.GENERATION, "the model generates no text", Severity.INFO, _generates_nothing),
    Row(FacetKind.CHAT_ONLY, "the model generates no text", Severity.INFO, _generates_nothing),
    Row(FacetKind.UPSTREAM_DESIGN, "the upstream named is this repository itself", None, _design_of_itself),
)


def _judge(finding: Finding, context: _Context) -> Finding:
    """The finding as the first matching row of TABLE has it (unchanged when none matches)."""
    if not finding.facets or finding.severity == Severity.INFO:
        return finding
    for row in TABLE:
        details = [facet.detail for facet in finding.facets if facet.kind is row.kind]
        reason = row.reason(details, context) if details else None
        if reason is not None:
            severity = finding.severity if row.lowers_to is None else min(finding.severity, row.lowers_to)
            return replace(finding, severity=severity, severity_reason=reason)
    return finding


def _names(text: str, repo_id: str) -> bool:
    """`text` names `repo_id` as a whole id (Qwen/Qwen3-8B is not named by Qwen/Qwen3-8B-Base)."""
    start = text.find(repo_id)
    while start >= 0:
        before = text[start - 1] if start else " "
        after = text[start + len(repo_id):start + len(repo_id) + 1] or " "
        if not (before.isalnum() or before in "/-_.") and not (after.isalnum() or after in "/-_"):
            return True
        start = text.find(repo_id, start + 1)
    return False
