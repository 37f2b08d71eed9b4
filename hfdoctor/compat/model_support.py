"""Whether any transformers 4.x release can load the model a repository is for at all.

A 4.x failure (a class only transformers 5 defines) cannot happen to a model whose type first
appears in 5: every consumer that loads it runs 5. The type is what config.json declares, or for
an adapter its base's, read from what the folder says; never guessed from the base's name.
"""

from __future__ import annotations

from hfdoctor import lineage
from hfdoctor.bounded import patterns
from hfdoctor.compat import knowledge as kb
from hfdoctor.knowledge import registry
from hfdoctor.lineage.adapter_base import adapter_base
from hfdoctor.repo import ModelRepo


# transformers' module of a model type, as PEFT writes it in adapter_config.json's auto_mapping.
_TRANSFORMERS_MODULE = patterns.compile(r"^transformers\.models\.([a-z0-9_]+)\.modeling_([a-z0-9_]+)$")


def _first_in_5x(model_type: str) -> bool:
    since = kb.transformers_since(model_type)
    return since is not None and kb.version_key(since) > kb.version_key(kb.latest_4x())


def _family_loads_on_4x(family: registry.Family) -> bool | None:
    """Whether 4.x can load a family's models: None when its model types disagree (or it has none)."""
    first_in_5x = {_first_in_5x(t) for t in family.model_types}
    return not first_in_5x.pop() if len(first_in_5x) == 1 else None


def loads_on_4x_at_all(repo: ModelRepo) -> tuple[bool | None, str]:
    """Whether a transformers 4.x release can load the model at all: False when its model_type first
    appears in 5.x, None when the type cannot be known (an adapter's base known only by its name);
    with where the type was read (or why it cannot be verified). A model_type no release knows is
    remote code, which 4.x runs: True."""
    if not repo.is_adapter:
        config = repo.config or {}
        model_type = registry.config_value(config, "model_type") if config else None
        if not isinstance(model_type, str) or "auto_map" in config:
            return True, ""
        return not _first_in_5x(model_type), f"config.json's model_type {model_type!r}"
    mapping = (repo.adapter_config or {}).get("auto_mapping")
    library = mapping.get("parent_library") if isinstance(mapping, dict) else None
    found = _TRANSFORMERS_MODULE.match(library) if isinstance(library, str) else None
    model_type = found.group(1) if found and found.group(1) == found.group(2) else None
    if model_type is not None and kb.transformers_since(model_type) is not None:
        return (not _first_in_5x(model_type),
                f"the base's model_type {model_type!r} (adapter_config.json's auto_mapping)")
    base = adapter_base(repo)
    if base is not None and base.model_type is not None:
        return (not _first_in_5x(base.model_type),
                f"the base's model_type {base.model_type!r} ({base.model_type_source})")
    if base is not None and base.family is not None:
        answer = _family_loads_on_4x(base.family)
        if answer is not None:
            return answer, f"the base {base.label} is a {base.family.display} release (hfdoctor's registry)"
    own = lineage.detect(repo)  # the adapter's own tokenizer and template, when they name a family
    if own.certain and own.family_ref is not None:
        answer = _family_loads_on_4x(own.family_ref)
        if answer is not None:
            verb = "are" if len(own.evidence) > 1 else "is"
            return answer, f"the adapter's {' and '.join(own.evidence)} {verb} {own.family_ref.display}'s"
    if base is None:
        return None, "adapter_config.json names no base model"
    return None, base.cannot_verify("which model_type the base is")
