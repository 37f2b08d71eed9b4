"""How loud a finding is: severity from evidence.

Rules state what is true and the facets of it (hfdoctor.findings.Facet); this policy
decides how loud each finding is, the same way for every rule, and says why in the
finding's `severity_reason`. It only ever lowers a severity, to info:

- engine: a problem of particular engines (TGI cannot compile the template; llama.cpp's
  converter refuses the tokenizer) is as loud as the rule says only when the repository
  shows that it targets one of them (hfdoctor.compat.targets: the card names it, GGUF or
  ONNX files, tags); otherwise it is info.
- canonical: a property of the exact upstream template (or an earlier upstream revision
  of it) is upstream's own design: info, naming the template.
- upstream-design: a property the family's canonical upstream template shares in the
  same way: info, "by design of <family> upstream".
- reasoning-only: when the family is unknown (or only suggested), a divergence that only involves reasoning
  blocks (dropped from history, pre-filled in the prompt) is read as the template's
  design: info. Whitespace and format divergences stay warnings: those break models.
- hub-inferred: card metadata the Hub fills in from config.json: info.
- capability: an input shape the template does not support, which servers convert
  before rendering (tool-call arguments as a JSON string): info.
- avoidable: the usual way of loading never meets the problem (transformers loads the
  model natively, without the repository's remote code): info, saying how.
- chat-only: a chat-serving problem of a checkpoint that says it is pre-trained (a base
  model): info.
An engine the repository targets keeps the finding's severity, and says so.
"""

from __future__ import annotations

from dataclasses import replace

from hfdoctor import lineage
from hfdoctor.compat.targets import describe, targeted_engines
from hfdoctor.findings import Facet, Finding, Severity
from hfdoctor.repo import ModelRepo


def apply(repo: ModelRepo, findings: list[Finding]) -> list[Finding]:
    """The findings at the severity their evidence supports."""
    context = _Context(repo)
    return [_judge(f, context) for f in findings]


class _Context:
    """What the policy reads of the repository, computed on first use."""

    def __init__(self, repo: ModelRepo):
        self.repo = repo
        self._lineage = None

    @property
    def lineage(self):
        if self._lineage is None:
            try:
                self._lineage = lineage.detect(self.repo)
            except Exception:  # lineage's own crash is reported by check; judge as unknown
                self._lineage = lineage.Lineage(family=None, base_model=None, evidence=[])
        return self._lineage

    def targets(self) -> dict[str, str]:
        return targeted_engines(self.repo)


def _judge(finding: Finding, context: _Context) -> Finding:
    if not finding.facets or finding.severity == Severity.INFO:
        return finding
    facets = dict(Facet.split(f) for f in finding.facets if not f.startswith(Facet.ENGINE + ":"))
    engines = [Facet.split(f)[1] for f in finding.facets if f.startswith(Facet.ENGINE + ":")]
    if engines:
        targeted = context.targets()
        hit = next((e for e in engines if e in targeted), None)
        if hit is None:
            return _info(finding, f"only {describe(engines)} affected, and the repository does not show that it "
                                  "targets it (no mention in the card, no files or tags for it)")
        return replace(finding, severity_reason=f"the repository targets {describe([hit])}: {targeted[hit]}")
    if Facet.CANONICAL in facets:
        return _info(finding, f"{facets[Facet.CANONICAL]}: upstream's own design")
    if Facet.UPSTREAM_DESIGN in facets:
        return _info(finding, f"by design of {facets[Facet.UPSTREAM_DESIGN]}")
    if Facet.REASONING_ONLY in facets and not context.lineage.certain:
        return _info(finding, "only reasoning blocks differ, and the family is not known for certain (no upstream "
                              "template to compare with): read as the template's design")
    if Facet.HUB_INFERRED in facets:
        return _info(finding, "the Hub infers it from config.json when the card does not say")
    if Facet.CAPABILITY in facets:
        return _info(finding, facets[Facet.CAPABILITY] or "a shape the template does not support")
    if Facet.AVOIDABLE in facets:
        return _info(finding, facets[Facet.AVOIDABLE])
    if Facet.CHAT_ONLY in facets and context.lineage.stage == "pretrained":
        return _info(finding, "a pre-trained (base) checkpoint: " + "; ".join(context.lineage.stage_evidence))
    return finding


def _info(finding: Finding, why: str) -> Finding:
    return replace(finding, severity=Severity.INFO, severity_reason=why)
