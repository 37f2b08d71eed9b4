"""Rules about weight files (filled in by the weights work)."""

RULES: list = []
