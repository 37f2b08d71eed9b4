"""WGT007 weights-metadata: the safetensors `__metadata__` loaders require (read from the
headers by hfdoctor.compat.assess)."""

from __future__ import annotations

from typing import Iterator

from hfdoctor.findings import Finding, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.assessment import assessed_findings
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule


@rule("WGT007", "weights-metadata", Severity.WARNING, fix=FixAvailability.NONE)
def weights_metadata(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """safetensors metadata that loaders require is missing or wrong.

    Why: transformers 4.x refuses a safetensors file whose __metadata__ has no `format` in
    pt/tf/flax/mlx (error: every 4.x release; mlx #743), and releases before 4.48 refuse
    a file with no __metadata__ at all (warning; info unless the repository targets the
    Open LLM Leaderboard). transformers 5 loads both. Checked by loading such files with
    4.46 and 4.57.

    Example: a model.safetensors saved with `metadata={"format": "np"}` (error); one saved
    by safetensors' `save_file` without metadata (info). Files written by
    save_pretrained (format pt) and by mlx-lm (format mlx) are accepted.

    Fix: none; it is a weights edit (re-save with `save_file(tensors, path,
    metadata={"format": "pt"})`), and hfdoctor never rewrites weights.
    """
    yield from assessed_findings(repo, self)


RULES = [weights_metadata]
