"""The rule registry: an explicit, ordered list, so `hfdoctor rules` is stable.

One package or module per code prefix: CFG config/, TOK tokenizer/, TPL template/, CARD
card/, WGT weights/, ADP adapter, PUB publishing, CMP compat, SEC security (each lists its
RULES in code order; tests/lint/test_rule_metadata.py holds the map). A rule reads
the repository view (repo, lineage, chat, weights) and returns findings; a fix is data,
built with hfdoctor.lint.edits. Rules never import check, fix or report. Importing this
package imports no heavy library (torch, transformers): the few rules that need one
import it inside their check functions.
"""

from __future__ import annotations

from hfdoctor.lint.rules import adapter, card, compat, config, publishing, security, template, tokenizer, weights
from hfdoctor.lint.rules.base import Rule

ALL_RULES: list[Rule] = [
    *config.RULES,
    *tokenizer.RULES,
    *template.RULES,
    *card.RULES,
    *weights.RULES,
    *adapter.RULES,
    *publishing.RULES,
    *compat.RULES,
    *security.RULES,
]


def find_rule(key: str) -> Rule | None:
    """A rule by code (TPL001) or name (missing-chat-template), case-insensitive."""
    key = key.strip().lower()
    for r in ALL_RULES:
        if r.code.lower() == key or r.name == key:
            return r
    return None


def alias_names(r: Rule) -> tuple[str, ...]:
    """The old codes a rule answers to, with the names those codes had (a code keeps its name
    when one of the rules split from it keeps the code: TOK001 special-token-missing)."""
    names: list[str] = []
    for alias in r.aliases:
        names.append(alias)
        old = next((other for other in ALL_RULES if other.code == alias), None)
        if old is not None:
            names.append(old.name)
    return tuple(names)


def standing_for(key: str) -> list[Rule]:
    """The rules an old code or name stands for since it was split (TOK001 -> TOK001, TOK007...),
    in registry order; empty when no rule was split from it."""
    key = key.strip().lower()
    split = [r for r in ALL_RULES if key in (a.lower() for a in alias_names(r))]
    if not split:
        return []
    old = find_rule(key)
    return ([old] if old is not None and old not in split else []) + split


def split_codes() -> dict[str, list[Rule]]:
    """Each old code that was split, and the rules it stands for (itself first where it kept a rule)."""
    olds = dict.fromkeys(alias for r in ALL_RULES for alias in r.aliases)
    return {old: standing_for(old) for old in olds}


def matches(r: Rule, selector: str) -> bool:
    """--select/--ignore: a code, a name, or a prefix of either (TPL, TPL0, chat-template).

    A rule split from an old code also answers to that code and its name, prefix included,
    so a selector keeps taking every finding it took before the split (`--ignore TOK001`)."""
    selector = selector.strip().lower()
    if not selector:
        return False
    if selector.upper() == "ALL":
        return True
    keys = (r.code.lower(), r.name, *(a.lower() for a in alias_names(r)))
    return any(key.startswith(selector) for key in keys)


def selected_rules(select: list[str] | None = None, ignore: list[str] | None = None) -> list[Rule]:
    chosen = [r for r in ALL_RULES if not select or any(matches(r, s) for s in select)]
    return [r for r in chosen if not ignore or not any(matches(r, s) for s in ignore)]
