"""Which engines a repository shows that it targets, and the evidence.

An engine-specific problem (a template TGI cannot compile, a tokenizer llama.cpp's
converter refuses) is worth a warning to the people who serve the model on that engine;
to everyone else it is a note. The evidence is what the repository itself says:
- the model card names the engine (a serve command, a "use with" section, a link);
- the card's front matter: `library_name`, `tags`;
- the files: GGUF files are for llama.cpp and its runtimes, ONNX files under onnx/ for
  transformers.js, an MLX quantization block for mlx-lm;
- a transformers checkpoint (config.json) targets transformers, 4.x included unless the
  card requires 5.x.
A configuration file's `engines` replaces all of this: the user says what they serve with.
"""

from __future__ import annotations


from hfdoctor.bounded import patterns
from hfdoctor.repo import ModelRepo
from hfdoctor.repo.facts import fact

# Card text that names an engine: engine key -> RE2 pattern (case-insensitive, words).
CARD_NAMES = {
    "vllm": r"\bvllm\b",
    "sglang": r"\bsglang\b",
    "tgi": r"text[-_ ]generation[-_ ]inference|\btgi\b",
    "llama.cpp": r"llama\.cpp|llama-server|llama-cli|\bollama\b|\bgguf\b",
    "mlx-lm": r"\bmlx[-_]lm\b|\bmlx\b",
    "transformers.js": r"transformers\.js|@huggingface/transformers|\blm ?studio\b",
    "open-llm-leaderboard": r"open[-_ ]llm[-_ ]leaderboard",
}
CARD_PATTERNS = {engine: patterns.compile(f"(?i){pattern}") for engine, pattern in CARD_NAMES.items()}
# Front matter: library_name or a tag -> engine.
CARD_KEYS = {
    "vllm": "vllm", "sglang": "sglang", "text-generation-inference": "tgi", "tgi": "tgi",
    "gguf": "llama.cpp", "llama.cpp": "llama.cpp", "ollama": "llama.cpp",
    "mlx": "mlx-lm", "mlx-lm": "mlx-lm", "transformers.js": "transformers.js",
}
# The card asks for transformers 5 (then 4.x is not a consumer it promises).
REQUIRES_V5 = patterns.compile(r"(?i)transformers\s*(?:>=|==|~=)\s*v?5\b|transformers\s+(?:v|version\s*)?5\.\d")
# A pin that keeps transformers below 5 (`transformers==4.46.3`, `~=4.51`, `<5`, `<=4.57`), in the card or
# a requirements file of the repository. `transformers<4.51` is not one: cards say it to warn off old releases.
PINS_V4 = patterns.compile(r"(?i)transformers(?:\[[a-z0-9_,\- ]*\])?\s*(?:(?:==|~=|<=)\s*v?4\.\d|"
                           r"(?:>=\s*v?[\d.]+\s*,\s*)?<\s*v?5(?:\.0)*\b)")
REQUIREMENTS_FILES = ("requirements.txt", "requirements-inference.txt")
# Engines whose releases run only on transformers 4.x: a repository served there consumes 4.x.
ONLY_ON_4X = ("tgi", "open-llm-leaderboard")
MAX_CARD_CHARS = 200_000  # where the names are: the first part of a card, not its appendix

@fact
def targeted_engines(repo: ModelRepo) -> dict[str, str]:
    """engine key (hfdoctor.compat.knowledge.ENGINES) -> why the repository targets it: what a
    configuration file declares, else what the repository shows."""
    if repo.declared_engines is not None:
        return dict(repo.declared_engines)
    return _find(repo)


@fact
def declared_transformers_4(repo: ModelRepo) -> str | None:
    """Why the repository declares a transformers 4.x consumer, or None: a configuration file whose
    `engines` name transformers-4 (or an engine that runs only on 4.x); without one, a pin below 5 in
    the card or a requirements file, or an engine that runs only on 4.x that it targets. A
    transformers checkpoint is loaded by 4.x too unless it says otherwise (targeted_engines), but
    only this evidence makes a 4.x misreading the repository's own problem."""
    targets = targeted_engines(repo)
    engine = next((e for e in ("transformers-4", *ONLY_ON_4X) if e in targets), None)
    if repo.declared_engines is not None:  # the user says what they serve with, and nothing else counts
        return f"the repository targets {describe([engine])}: {targets[engine]}" if engine else None
    card = repo.card
    card_text = card.text[:MAX_CARD_CHARS] if card is not None else ""
    pinned = PINS_V4.search(card_text)
    if pinned is not None:
        return f"the model card pins {pinned.group(0)!r}"
    for name in REQUIREMENTS_FILES:
        raw = repo.raw(name) if repo.exists(name) else None
        pinned = PINS_V4.search(raw[:MAX_CARD_CHARS].decode("utf-8", "replace")) if raw else None
        if pinned is not None:
            return f"{name} pins {pinned.group(0)!r}"
    engine = next((e for e in ONLY_ON_4X if e in targets), None)
    return f"it targets {describe([engine])}, which runs on transformers 4.x ({targets[engine]})" if engine else None


def _find(repo: ModelRepo) -> dict[str, str]:
    found: dict[str, str] = {}
    card = repo.card
    card_text = card.text[:MAX_CARD_CHARS] if card is not None else ""
    if repo.config is not None and not repo.is_adapter:
        found["transformers-5"] = "config.json makes it a transformers checkpoint"
        if not REQUIRES_V5.search(card_text):
            found["transformers-4"] = "config.json makes it a transformers checkpoint"
    for engine, pattern in CARD_PATTERNS.items():
        named = pattern.search(card_text)
        if named is not None:
            found.setdefault(engine, f"the model card names {named.group(0)!r}")
    metadata = card.metadata if card is not None and isinstance(card.metadata, dict) else {}
    tags = metadata.get("tags") if isinstance(metadata.get("tags"), list) else []
    for value in [metadata.get("library_name"), *tags]:
        engine = CARD_KEYS.get(value.lower()) if isinstance(value, str) else None
        if engine is not None:
            found.setdefault(engine, f"the model card's metadata lists {value!r}")
    gguf = next((f for f in repo.files if f.lower().endswith(".gguf")), None)
    if gguf is not None:
        found.setdefault("llama.cpp", f"it ships GGUF files ({gguf})")
    onnx = next((f for f in repo.files if f.startswith("onnx/") and f.endswith(".onnx")), None)
    if onnx is not None:
        found.setdefault("transformers.js", f"it ships ONNX files for transformers.js ({onnx})")
    quantization = (repo.config or {}).get("quantization")
    if isinstance(quantization, dict) and {"group_size", "bits"} <= set(quantization):
        found.setdefault("mlx-lm", "config.json has MLX's quantization block")
    return found


def describe(engines: list[str]) -> str:
    """'TGI' / 'TGI or transformers.js': the engines a finding is about, for a reason text."""
    from hfdoctor.compat.knowledge import ENGINES

    names = [ENGINES.get(e, e).split(" (")[0] for e in engines]
    return " or ".join(dict.fromkeys(names))
