"""Is a template property the family's own design? The facts the severity policy needs.

A rule that finds a property of the repository's template (its renders are not prefixes
of the next turn, it writes the BOS token...) asks here whether the family's canonical
upstream template has the same property. When it does, the finding describes the
family's design, and hfdoctor.lint.policy reports it as info, naming the template.

The canonical templates are those of the variants lineage detection allows, with at
least medium confidence (as for template-drift: a card or template markers alone never
decide whose design a template should follow), analysed with the repository's own
special tokens so the two sets of renders are comparable.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

from hfdoctor import lineage as lineage_mod
from hfdoctor.knowledge import registry
from hfdoctor.chat.analysis import analyze
from hfdoctor.chat.render_plan import TemplateAnalysis
from hfdoctor.findings import Facet, FacetKind
from hfdoctor.knowledge.registry import Variant
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import TemplateLookup, canonical_template
from hfdoctor.repo.facts import fact


@dataclass(frozen=True)
class UpstreamTemplate:
    variant: Variant
    family_display: str
    lookup: TemplateLookup
    analysis: TemplateAnalysis

    @property
    def repo_id(self) -> str:
        return self.variant.template.repo if self.variant.template else "?"


@fact
def upstream_templates(repo: ModelRepo) -> list[UpstreamTemplate]:
    """The canonical templates this repository's template should follow (empty when the
    lineage is not certain, or no canonical text can be found)."""
    return _find(repo)


def candidate_variants(repo: ModelRepo) -> list[Variant]:
    """The variants whose template applies: the detected one, else every variant of the family."""
    lineage = lineage_mod.detect(repo)
    if lineage.family_ref is None or not lineage.certain:
        return []
    candidates = [lineage.variant_ref] if lineage.variant_ref else list(lineage.family_ref.variants)
    return [v for v in candidates if v.template is not None]


def _find(repo: ModelRepo) -> list[UpstreamTemplate]:
    lineage = lineage_mod.detect(repo)
    found = []
    for variant in candidate_variants(repo):
        lookup = canonical_template(repo.upstream, variant)
        if lookup.text is not None:
            display = lineage.family_ref.display if lineage.family_ref else variant.display
            found.append(UpstreamTemplate(variant, display, lookup, analyze(repo, lookup.text)))
    return found


def exact_upstream(text: str) -> str | None:
    """'the upstream Qwen/Qwen3-8B template' when `text` is a canonical template (or an
    earlier upstream revision of one), whatever the lineage says. A revision upstream itself
    later fixed is not named: what a copy of it does is the bug, not the family's design."""
    sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    found = registry.variant_of_template(sha)
    if found is None or sha in found[1].fixed_revisions:
        return None
    return found[1].template_name(sha)


def fixed_upstream(text: str) -> str | None:
    """'the upstream meta-llama/Meta-Llama-3-8B-Instruct template (its April 2024 launch template...)'
    when `text` is a revision upstream later replaced to fix it; else None."""
    sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    found = registry.variant_of_template(sha)
    return found[1].template_name(sha) if found is not None and sha in found[1].fixed_revisions else None


def behaviour_facets(repo: ModelRepo, analysis: TemplateAnalysis,
                     shows_same: Callable[[TemplateAnalysis], bool]) -> list[Facet]:
    """design_facets, and a TEMPLATE_BEHAVIOUR facet: how the template renders is a property a release
    may have by design, so without a family known for certain to compare with, the policy says it at
    info. Not for a revision upstream later fixed: a copy of it carries the bug (Meta-Llama-3's launch
    template appending the assistant header)."""
    facets = design_facets(repo, analysis, shows_same)
    return facets if fixed_upstream(analysis.text) else facets + [Facet(FacetKind.TEMPLATE_BEHAVIOUR)]


def design_facets(repo: ModelRepo, analysis: TemplateAnalysis,
                  shows_same: Callable[[TemplateAnalysis], bool]) -> list[Facet]:
    """[a CANONICAL facet] when the template is upstream's own; [an UPSTREAM_DESIGN facet] when a
    canonical template of the family `shows_same` property; else []."""
    exact = exact_upstream(analysis.text)
    if exact is not None:
        return [Facet(FacetKind.CANONICAL, exact)]
    for upstream in upstream_templates(repo):
        if upstream.analysis.text != analysis.text and shows_same(upstream.analysis):
            return [Facet(FacetKind.UPSTREAM_DESIGN,
                          f"{upstream.family_display} upstream (the {upstream.repo_id} template does the same)")]
    return []
