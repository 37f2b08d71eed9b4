"""The rule registry: an explicit, ordered list, so `hfdoctor rules` is stable.

One package or module per code prefix: CFG config/, TOK tokenizer/, TPL template/, CARD
card/, WGT weights/, ADP adapter, PUB publishing, CMP compat, SEC security (each lists its
RULES in code order; tests/test_rule_metadata.py holds the map). A rule reads
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


def matches(r: Rule, selector: str) -> bool:
    """--select/--ignore: a code, a name, or a prefix of either (TPL, TPL0, chat-template)."""
    selector = selector.strip().lower()
    if not selector:
        return False
    if selector.upper() == "ALL":
        return True
    return r.code.lower().startswith(selector) or r.name.startswith(selector)


def selected_rules(select: list[str] | None = None, ignore: list[str] | None = None) -> list[Rule]:
    chosen = [r for r in ALL_RULES if not select or any(matches(r, s) for s in select)]
    return [r for r in chosen if not ignore or not any(matches(r, s) for s in ignore)]
