"""CFG: the repository's files and configuration (readable, consistent, a model at all)."""

from hfdoctor.lint.rules.base import Rule
from hfdoctor.lint.rules.config import consistency, files, generation, scope

RULES: list[Rule] = [*files.RULES, *generation.RULES, *consistency.RULES, *scope.RULES]
