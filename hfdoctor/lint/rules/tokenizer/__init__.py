"""TOK: the tokenizer and its special tokens."""

from hfdoctor.lint.rules.base import Rule
from hfdoctor.lint.rules.tokenizer import special_tokens, tokens

RULES: list[Rule] = [*tokens.RULES, *special_tokens.RULES]
