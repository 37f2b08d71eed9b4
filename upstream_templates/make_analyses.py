"""Regenerate analyses/: the template analysis of each family's canonical template.

`check` reads upstream_templates/analyses/<key>.json instead of compiling and rendering
a template it has seen before (hfdoctor/chat/store.py). For each family the registry
pins a canonical template for, the template is taken from the upstream folder (verified
against the pinned sha256), rendered with that folder's special tokens, and the analysis
written under its key. Only derived renders are written, never the upstream files.
Each file also records the other template engines' verdicts on the template (minijinja,
@huggingface/jinja when node has it: HFDOCTOR_NODE_MODULES), with their versions, so that
`check` renders nothing for a canonical template (compat/portability.py).
Run it after changing the renderer, the corpus or the render plan (tests fail until you do):
    python upstream_templates/make_analyses.py [--upstream DIR]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from hfdoctor.knowledge import registry
from hfdoctor.chat import store
from hfdoctor.chat.analysis import run_analysis, special_tokens_for_render
from hfdoctor.compat.portability import verdicts_to_record
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import Upstream, canonical_template

HERE = Path(__file__).resolve().parent
DEFAULT_UPSTREAM = Path(os.environ.get("HFDOCTOR_TEST_UPSTREAM", HERE.parent.parent / "shared" / "upstream"))


def canonical_entries(upstream_dir: Path) -> list[tuple[str, str, dict[str, str]]]:
    """(upstream repo id, template text, special tokens) for every pinned canonical template found."""
    upstream = Upstream((upstream_dir,), use_cache=False, use_hub=False)
    found = []
    for _, variant in registry.all_variants():
        if variant.template is None:
            continue
        lookup = canonical_template(upstream, variant)
        if lookup.text is None:
            continue
        folder = upstream_dir / variant.template.repo.replace("/", "--")
        tokens = special_tokens_for_render(ModelRepo(folder, upstream=upstream))
        if tokens:  # a folder without tokenizer config: no real repo would render with its (no) tokens
            found.append((variant.template.repo, lookup.text, tokens))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", default=str(DEFAULT_UPSTREAM))
    args = parser.parse_args()
    out = HERE / store.DIRECTORY
    out.mkdir(exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    for repo_id, text, tokens in canonical_entries(Path(args.upstream)):
        analysis = run_analysis(text, tokens)
        if analysis.fatal is not None or not analysis.compiled:
            raise SystemExit(f"{repo_id}: the canonical template does not analyse cleanly")
        entry = {"source": repo_id, "special_tokens": tokens, "analysis": store.to_json(analysis),
                 "portability": verdicts_to_record(text, tokens)}
        path = out / f"{store.key(text, tokens, False)}.json"
        path.write_text(json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"{repo_id}: {path.name} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
