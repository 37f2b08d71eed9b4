"""TOK: the tokenizer and its special tokens."""

from hfdoctor.lint.rules.base import Rule
from hfdoctor.lint.rules.tokenizer import special_token_agreement, special_tokens, tokens

# In code order: TOK001 first, and the codes split from it in 0.4 (TOK007-TOK012) after TOK006.
RULES: list[Rule] = sorted([*special_token_agreement.RULES, *tokens.RULES, *special_tokens.RULES],
                           key=lambda r: r.code)
