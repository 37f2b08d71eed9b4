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
- upstream-design: a property the family's upstream shares in the same way (its canonical
  template, its tokenizer's pad token, the markers its template writes as text, the remote
  code it is only published as): info, "by design of <family> upstream". Never circular:
  when the upstream it names is the repository itself (its Hub id, or a folder named
  `<org>--<name>` as the Hugging Face cache and ../shared/upstream name them), the finding
  keeps its severity: a repository is not evidence of its own design.
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
        own = next((name for name in context.own_names() if _names(facets[Facet.UPSTREAM_DESIGN], name)), None)
        if own is None:
            return _info(finding, f"by design of {facets[Facet.UPSTREAM_DESIGN]}")
        finding = replace(finding, severity_reason=f"not lowered: the upstream it would be the design of is {own}, "
                                                   "this repository itself")
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


def _info(finding: Finding, why: str) -> Finding:
    return replace(finding, severity=Severity.INFO, severity_reason=why)
