"""Rules about code and pickles that could run on load (filled in by the security work)."""

RULES: list = []
