"""Do the weights fit the model config.json declares? Names and shapes, from headers.

One comparison per repository (kept on it): weights-config-mismatch reports it, the
compat section says every engine fails when the weights cannot load into the declared
model, and the report's weights section says plainly whether they match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hfdoctor.repo import ModelRepo
from hfdoctor.weights.expected import CannotVerify, ConfigRejected, ExpectedLayout, expected_layout
from hfdoctor.weights.headers import repo_weights
from hfdoctor.weights.quantized import quantized_modules
from hfdoctor.repo.facts import fact


@dataclass(frozen=True)
class Comparison:
    """The weights against the declared model. `expected` is None when it could not be built."""

    expected: ExpectedLayout | None
    names: dict[str, tuple[int, ...]]
    missing: list[str]
    unexpected: list[str]
    wrong: list[str]
    cannot_verify: str | None = None  # why the declared model could not be built (not verified)
    rejected: str | None = None  # transformers refuses the config itself

    @property
    def matches(self) -> bool | None:
        """True / False, or None when nothing was verified."""
        if self.expected is None:
            return False if self.rejected else None
        return not (self.missing or self.unexpected or self.wrong)

    @property
    def loads(self) -> bool | None:
        """Would the weights load into the declared model? Extra tensors alone are dropped on load."""
        if self.expected is None:
            return False if self.rejected else None
        return not (self.missing or self.wrong)


@fact
def compare(repo: ModelRepo) -> Comparison | None:
    """None when there is nothing to compare (no safetensors, no config, quantized weights)."""
    return _compare(repo)


def _compare(repo: ModelRepo) -> Comparison | None:
    view = repo_weights(repo)
    tensors = view.main_tensors()
    config = repo.config
    if not tensors or config is None:
        return None
    if config.get("quantization_config") or config.get("quantization") or quantized_modules(tensors, None):
        return None  # quantized tensors are not the model's parameters: quantization-inconsistent checks them
    names = {name: tuple(info.shape) for name, info in tensors.items()}
    try:
        expected = expected_layout(config, repo.budget, repo.root)
    except CannotVerify as err:
        return Comparison(None, names, [], [], [], cannot_verify=str(err))
    except ConfigRejected as err:
        return Comparison(None, names, [], [], [], rejected=str(err))
    prefix = expected.base_model_prefix + "." if expected.base_model_prefix else ""
    if prefix and not any(n.startswith(prefix) for n in names) and any(e.startswith(prefix) for e in expected.tensors):
        # Saved from the bare model (LlamaModel): transformers adds the prefix on load.
        names = {(prefix + n if prefix + n in expected.tensors else n): s for n, s in names.items()}

    def ignored(name: str, patterns: tuple[str, ...]) -> bool:
        return any(re.search(p, name) for p in patterns)

    missing = [] if not view.complete else sorted(
        n for n in expected.tensors
        if n not in names and n not in expected.optional and not ignored(n, expected.ignore_missing)
        and not n.endswith("lm_head.weight")  # an untied head that is absent: config-inconsistent says it
    )
    unexpected = sorted(n for n in names if n not in expected.tensors and not ignored(n, expected.ignore_unexpected))
    wrong = sorted(n for n in names if n in expected.tensors and tuple(names[n]) != tuple(expected.tensors[n]))
    return Comparison(expected, names, missing, unexpected, wrong)
