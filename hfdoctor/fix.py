"""Placeholder until the fix engine lands (issue 5)."""
