"""Placeholder until the probe lands (issue 6)."""
