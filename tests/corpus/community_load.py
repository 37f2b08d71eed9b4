"""The community corpus: model folders that people published in public GitHub repositories.

Layout (tests/corpus/community/):
  <slug>/folder.json   where the folder came from (source_repo, source_dir, commit, license, kind, family),
                       its files (name -> sha256, size, source_path) and the files left out and why
                       (weights, code, files of 4 MiB or more that the snapshot lacked);
  _blobs/<sha256>.xz   each distinct file content once, xz-compressed (many fine-tunes ship their base's
                       tokenizer.json byte for byte);
  MANIFEST.tsv         one row per stored file: slug, repo, path, commit, sha256, license, kind, family.

materialise() writes folders out as plain copies (never links: hfdoctor flags symlinks) and checks every
file's sha256, so a folder on disk is byte for byte the one published.

    python tests/corpus/community_load.py OUTDIR [SLUG ...]    # write folders out to look at them
"""

from __future__ import annotations

import lzma
import hashlib
import json
import sys
from pathlib import Path

COMMUNITY = Path(__file__).resolve().parent / "community"
BLOBS = COMMUNITY / "_blobs"


def slugs() -> list[str]:
    return sorted(p.parent.name for p in COMMUNITY.glob("*/folder.json"))


def folder_info(slug: str) -> dict:
    return json.loads((COMMUNITY / slug / "folder.json").read_text(encoding="utf-8"))


def blob_bytes(digest: str) -> bytes:
    data = lzma.decompress((BLOBS / f"{digest}.xz").read_bytes())
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError(f"blob {digest} does not match its sha256")
    return data


def materialise_one(slug: str, dest: Path) -> Path:
    """Write one folder under dest/slug (plain files) and return its path."""
    out = dest / slug
    out.mkdir(parents=True, exist_ok=True)
    for name, entry in folder_info(slug)["files"].items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)  # a Modelfile's ADAPTER folder below it
        (out / name).write_bytes(blob_bytes(entry["sha256"]))
    return out


def materialise(dest: Path, only: list[str] | None = None) -> dict[str, Path]:
    """slug -> folder written under dest, for every folder of the corpus (or those named)."""
    return {slug: materialise_one(slug, dest) for slug in (only or slugs())}


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    written = materialise(Path(sys.argv[1]), sys.argv[2:] or None)
    print(f"{len(written)} folders written under {sys.argv[1]}")


if __name__ == "__main__":
    main()
