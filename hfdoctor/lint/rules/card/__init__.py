"""CARD: the model card (README.md): its metadata and its examples."""

from hfdoctor.lint.rules.base import Rule
from hfdoctor.lint.rules.card import examples, metadata

RULES: list[Rule] = [*metadata.RULES, *examples.RULES]
