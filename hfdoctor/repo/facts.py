"""What one check derives from one repository, computed once, on first use, and kept with it.

ModelRepo reads files. What is derived from them is the work of other modules: the lineage
(hfdoctor.lineage), an adapter's base model (lineage.adapter_base), the weights' headers and layout
and their comparison with the declared model (hfdoctor.weights), the model-file scans
(lint.rules.security.pickles), the chat templates' analyses (chat.analysis), the compat problems and targets
(hfdoctor.compat), the family's upstream templates (lint.rules.template.design). Several rules ask
for each, so each is computed once per repository and kept in that repository's Facts:
`repo.facts`, made with the repository and gone with it.

A module declares a fact by decorating the function that computes it:

    @fact
    def detect(repo: ModelRepo) -> Lineage: ...

`detect(repo)` then computes the lineage the first time and returns the same object after; the
type is the function's own. A fact with arguments (one analysis per template text) is asked with
`repo.facts.get(compute, *args)`. `repo.facts.known()` lists what has been computed (grep `@fact`
for every fact there is). Nothing else is set on a repository from outside.

A fact that raises is not kept: the next caller computes it again (and meets the same error).
A fact that asks for itself while it is being computed is a bug, and raises at once.
"""

from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING, Any, Callable, Hashable, TypeVar

if TYPE_CHECKING:
    from hfdoctor.repo import ModelRepo

T = TypeVar("T")


class Facts:
    """The facts one check has derived from one repository."""

    def __init__(self, repo: "ModelRepo") -> None:
        # A weak reference: no repository <-> facts cycle, so a catalog's repositories are freed
        # as soon as each check ends, not at the next cyclic collection.
        self._repo = weakref.ref(repo)
        self._values: dict[tuple[Callable[..., Any], tuple[Hashable, ...]], Any] = {}
        self._computing: set[tuple[Callable[..., Any], tuple[Hashable, ...]]] = set()

    def get(self, compute: Callable[..., T], *args: Hashable) -> T:
        """compute(repo, *args), computed once for this repository."""
        key = (compute, args)
        if key in self._values:
            return self._values[key]
        if key in self._computing:
            raise RuntimeError(f"fact {_name(compute)} asked for itself while being computed")
        self._computing.add(key)
        try:
            repo = self._repo()
            if repo is None:
                raise RuntimeError(f"fact {_name(compute)} asked of a repository that is gone")
            value = compute(repo, *args)
        finally:
            self._computing.discard(key)
        self._values[key] = value
        return value

    def peek(self, compute: Callable[..., T], *args: Hashable) -> T | None:
        """The fact if it has been computed already, else None (computes nothing)."""
        return self._values.get((compute, args))

    def known(self) -> list[str]:
        """The facts computed so far, by the function that computes each."""
        return sorted({_name(compute) for compute, _ in self._values})


def _name(compute: Callable[..., Any]) -> str:
    return f"{compute.__module__}.{compute.__qualname__}"


def fact(compute: Callable[["ModelRepo"], T]) -> Callable[["ModelRepo"], T]:
    """Make `compute(repo)` a fact of the repository: computed on first use, then kept."""

    @functools.wraps(compute)
    def kept(repo: "ModelRepo") -> T:
        return repo.facts.get(compute)

    return kept
