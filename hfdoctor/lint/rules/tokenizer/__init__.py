"""TOK: the tokenizer and its special tokens."""

from hfdoctor.lint.rules.base import Rule
from hfdoctor.lint.rules.tokenizer import special_token_agreement, special_tokens, tokens

# special_token_agreement first: TOK001 and the codes split from it (TOK007-TOK012) keep TOK001's place.
RULES: list[Rule] = [*special_token_agreement.RULES, *tokens.RULES, *special_tokens.RULES]
