"""Will the repository load where users run it? Facts about consuming engines, and the
assessment of a repository against them (the report's `compat` section and the rules
consumer-incompatible, gguf-convert-blocker, serving-parser-mismatch, weights-metadata)."""
