"""What the declared model looks like, as data: the layout, or why there is none.

ExpectedLayout is the checkpoint transformers would write for a config; CannotVerify and
ConfigRejected say why a config has no layout here. Each has a JSON form: the shipped
table (layouts.json), the user's cache of built layouts and the build child's message all
carry outcomes in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hfdoctor.weights.layout import layer_index


class CannotVerify(Exception):
    """The declared model cannot be built here (unknown architecture, quantized, no torch).

    `transient`: only here and now (out of time); another repository may have the time to build it.
    """

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


class ConfigRejected(Exception):
    """transformers refuses config.json itself."""


@dataclass(frozen=True)
class ExpectedLayout:
    """The checkpoint transformers would write (and expects to load) for a config."""

    model_class: str
    tensors: dict[str, tuple[int, ...]]
    optional: frozenset[str]  # tied weights: usually absent from the checkpoint
    ignore_missing: tuple[str, ...]  # regexes transformers does not miss on load
    ignore_unexpected: tuple[str, ...]  # regexes transformers ignores on load
    base_model_prefix: str = ""

    def to_json(self) -> dict[str, Any]:
        """The compact form layouts.json stores.

        A decoder stack whose layers all hold the same names and shapes (the common case,
        MoE experts included) is one template plus a layer count: Qwen3-30B-A3B's 18,867
        tensors become ~400 entries. A stack whose layers differ (mixed layer types, dense
        first layers before MoE ones) stays in `tensors`, name by name.
        """
        stacks: dict[str, dict[int, dict[str, list[int]]]] = {}
        for name, shape in self.tensors.items():
            found = layer_index(name)
            if found is not None:
                prefix, i, rest = found
                stacks.setdefault(prefix, {}).setdefault(i, {})[rest] = list(shape)
        flat = {name: list(shape) for name, shape in self.tensors.items()}
        repeated = []
        for prefix, layers in sorted(stacks.items()):
            template = layers[min(layers)]
            if sorted(layers) != list(range(len(layers))) or any(layer != template for layer in layers.values()):
                continue  # irregular: stored in full
            repeated.append({"prefix": prefix, "count": len(layers), "tensors": template})
            for i in range(len(layers)):
                for rest in template:
                    del flat[f"{prefix}.{i}.{rest}"]
        return {
            "model_class": self.model_class,
            "tensors": flat,
            "repeated_layers": repeated,
            "optional": sorted(self.optional),
            "ignore_missing": list(self.ignore_missing),
            "ignore_unexpected": list(self.ignore_unexpected),
            "base_model_prefix": self.base_model_prefix,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ExpectedLayout":
        tensors = {name: tuple(shape) for name, shape in data["tensors"].items()}
        for stack in data["repeated_layers"]:
            for i in range(stack["count"]):
                for rest, shape in stack["tensors"].items():
                    tensors[f"{stack['prefix']}.{i}.{rest}"] = tuple(shape)
        return cls(
            model_class=data["model_class"],
            tensors=tensors,
            optional=frozenset(data["optional"]),
            ignore_missing=tuple(data["ignore_missing"]),
            ignore_unexpected=tuple(data["ignore_unexpected"]),
            base_model_prefix=data["base_model_prefix"],
        )


Outcome = ExpectedLayout | CannotVerify | ConfigRejected


def outcome_to_json(outcome: Outcome) -> dict[str, Any]:
    if isinstance(outcome, ExpectedLayout):
        return {"layout": outcome.to_json()}
    return {"cannot_verify" if isinstance(outcome, CannotVerify) else "rejected": str(outcome)}


def outcome_from_json(data: dict[str, Any]) -> Outcome:
    if "cannot_verify" in data:
        return CannotVerify(data["cannot_verify"])
    if "rejected" in data:
        return ConfigRejected(data["rejected"])
    return ExpectedLayout.from_json(data["layout"])
