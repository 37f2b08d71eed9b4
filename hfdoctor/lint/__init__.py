"""The check itself: rules, their edits, the severity policy, and the one entry point from a target to a report."""
