"""Edit builders: what a fix would change, as byte spans of one file. Nothing here writes.

Rules call these while checking, and attach the result to a finding as a Fix; the fix
pipeline (hfdoctor.fix) applies them. So this package may import the repository view
(repo, jsontext), the findings data, the registry and upstream lookups, and never the
rules, `check` or the fix pipeline.

- json_edits: replace or insert one JSON value in the file's own style.
- card_edits: set the model card's `base_model`, every other line kept byte for byte.
- template_edits: insert or replace a whole chat template with the verified upstream one.
- apply: apply edits to bytes in memory (and refuse overlapping ones).
"""
