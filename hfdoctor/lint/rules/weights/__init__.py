"""WGT: the weight files, their index and metadata, and quantization."""

from hfdoctor.lint.rules.base import Rule
from hfdoctor.lint.rules.weights import files, metadata, quantization

RULES: list[Rule] = [*files.RULES, *quantization.RULES, *metadata.RULES]
