"""Add a model folder from a public git repository to the community corpus (tests/corpus/community).

The folder's own files (not its subfolders) are read with `git show` from one commit of a git
checkout or bare snapshot, so the commit recorded is exactly the one read. What is stored:

- model metadata (JSON, templates, the model card, tokenizer files, Modelfile, .gitattributes,
  LICENSE, YAML, merges/vocab text, a SentencePiece model under 4 MiB), byte for byte;
- git-lfs pointers, whatever their name (a few hundred bytes: what a checkout without LFS data has);
- trainer state pickles under 64 KiB (training_args.bin, optimizer-free *.pt of a few KiB): what
  the security rules read;
- files named with --include (an app.py read as text, never run).

Weights, other pickles and code are listed under left_out with the reason, as are files of 4 MiB
and more that the snapshot lacks. Each content is stored once as _blobs/<sha256>.xz; folder.json
and MANIFEST.tsv record the source repository, path, commit, licence, kind and family.

    python tests/corpus/community_add.py GIT_DIR OWNER/NAME DIR --kind adapter --family falcon3 \
        [--license mit] [--commit REV] [--include app.py] [--subdir final_model] [--slug SLUG]
    python tests/corpus/community_add.py --remove SLUG

DIR is the folder inside the repository ("" or "." for its root); --subdir also stores the files of
a folder below it (a Modelfile's ADAPTER ./final_model), under their relative names. --remove
takes a folder out, with the blobs no other folder uses.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMUNITY = HERE / "community"
BLOBS = COMMUNITY / "_blobs"
MANIFEST = COMMUNITY / "MANIFEST.tsv"
KINDS = ("adapter", "checkpoint", "fine-tune", "merge", "gptq", "awq", "bnb", "gguf", "mlx", "base")
MIB4 = 4 * 1024 * 1024
METADATA_SUFFIXES = (".json", ".jinja", ".md", ".txt", ".model", ".yml", ".yaml", ".tiktoken", ".gitattributes")
METADATA_NAMES = ("Modelfile", "LICENSE", "LICENSE.txt", "NOTICE", "USE_POLICY.md", ".gitattributes", "tokenizer.model")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".npz",
                   ".npy", ".pkl", ".joblib", ".rar", ".zip", ".tar", ".gz", ".7z", ".ggml")
SMALL_STATE = 64 * 1024
LFS_HEAD = b"version https://git-lfs.github.com/spec/v1"


def git(git_dir: str, *args: str, binary: bool = False):
    out = subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, check=True).stdout
    return out if binary else out.decode("utf-8")


def slug_of(repo: str, folder: str) -> str:
    """owner__name[__dir_with_underscores]; long slugs keep their start and end around a short hash."""
    slug = repo.replace("/", "__") + ("__" + folder.strip("/").replace("/", "_") if folder.strip("/.") else "")
    if len(slug) > 100:
        digest = hashlib.sha256(slug.encode()).hexdigest()[:6]
        slug = f"{slug[:60]}-{digest}-{slug[-33:]}"
    return slug


def listing(git_dir: str, commit: str, folder: str) -> list[tuple[str, str, int | None]]:
    """(name, blob, size or None when the snapshot lacks the blob) of the folder's own files."""
    prefix = folder.strip("/")
    spec = f"{commit}:{prefix}" if prefix and prefix != "." else f"{commit}:"
    rows = []
    for line in git(git_dir, "ls-tree", "-l", spec).splitlines():
        meta, _, name = line.partition("\t")
        mode, kind, blob, size = meta.split()
        if kind != "blob" or mode == "120000":
            continue
        present = subprocess.run(["git", "--git-dir", git_dir, "cat-file", "-e", blob], capture_output=True).returncode == 0
        rows.append((name, blob, int(size) if present else None))
    return rows


def verdict(name: str, data: bytes | None, size: int | None, include: set[str]) -> str | None:
    """None to store the file, else the reason it is left out."""
    if size is None or data is None:
        return "absent from the snapshot (4 MiB or more)"
    if data.startswith(LFS_HEAD):
        return None
    if name in include:
        return None
    if size >= MIB4:
        return "absent from the snapshot (4 MiB or more)"
    lower = name.lower()
    if lower.endswith(WEIGHT_SUFFIXES):
        if (lower in ("training_args.bin",) or lower.endswith((".pt", ".pth", ".bin"))) and size < SMALL_STATE \
                and not lower.startswith(("adapter_model", "pytorch_model", "model")):
            return None  # trainer state (training_args.bin, rng_state.pth, scheduler.pt): the security rules read it
        return "weights/pickle/code not stored"
    if lower.endswith((".py", ".ipynb", ".sh")):
        return "weights/pickle/code not stored"
    if name in METADATA_NAMES or lower.endswith(METADATA_SUFFIXES):
        return None
    return "not model metadata"


def add(git_dir: str, repo: str, folder: str, kind: str, family: str, license_: str, commit: str = "HEAD",
        include: set[str] | None = None, slug: str | None = None, subdirs: tuple[str, ...] = ()) -> str:
    commit = git(git_dir, "rev-parse", commit).strip()
    folder = "" if folder.strip("/") in ("", ".") else folder.strip("/")
    slug = slug or slug_of(repo, folder)
    out = COMMUNITY / slug
    if out.exists():
        raise SystemExit(f"{slug} is already in the corpus")
    files, left_out, rows = {}, {}, []
    entries = [(name, blob, size) for name, blob, size in listing(git_dir, commit, folder)]
    for sub in subdirs:
        inner = f"{folder}/{sub}" if folder else sub
        entries += [(f"{sub}/{name}", blob, size) for name, blob, size in listing(git_dir, commit, inner)]
    for name, blob, size in entries:
        data = git(git_dir, "cat-file", "blob", blob, binary=True) if size is not None else None
        reason = verdict(name.rsplit("/", 1)[-1], data, size, include or set())
        if reason is not None:
            left_out[name] = reason
            continue
        digest = hashlib.sha256(data).hexdigest()
        BLOBS.mkdir(parents=True, exist_ok=True)
        if not (BLOBS / f"{digest}.xz").exists():
            (BLOBS / f"{digest}.xz").write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
        source_path = f"{folder}/{name}" if folder else name
        files[name] = {"sha256": digest, "size": len(data), "source_path": source_path}
        rows.append("\t".join((slug, repo, source_path, commit, digest, license_, kind, family)))
    if not files:
        raise SystemExit(f"{repo}:{folder} has no model metadata to store")
    out.mkdir(parents=True)
    info = {"source_repo": repo, "source_dir": folder, "commit": commit, "license": license_, "kind": kind,
            "family": family, "files": dict(sorted(files.items())), "left_out": dict(sorted(left_out.items()))}
    (out / "folder.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    lines = MANIFEST.read_text(encoding="utf-8").splitlines()
    header, body = lines[0], lines[1:] + rows
    MANIFEST.write_text("\n".join([header] + sorted(body)) + "\n", encoding="utf-8")
    return slug


def remove(slug: str) -> None:
    """Take a folder out of the corpus, with its MANIFEST.tsv rows and the blobs only it used."""
    info = json.loads((COMMUNITY / slug / "folder.json").read_text(encoding="utf-8"))
    (COMMUNITY / slug / "folder.json").unlink()
    (COMMUNITY / slug).rmdir()
    used = {e["sha256"] for p in COMMUNITY.glob("*/folder.json")
            for e in json.loads(p.read_text(encoding="utf-8"))["files"].values()}
    for entry in info["files"].values():
        if entry["sha256"] not in used and (BLOBS / f"{entry['sha256']}.xz").exists():
            (BLOBS / f"{entry['sha256']}.xz").unlink()
    lines = MANIFEST.read_text(encoding="utf-8").splitlines()
    MANIFEST.write_text("\n".join([lines[0]] + [r for r in lines[1:] if r.split("\t", 1)[0] != slug]) + "\n",
                        encoding="utf-8")


def main() -> None:
    if sys.argv[1:2] == ["--remove"]:
        for slug in sys.argv[2:]:
            remove(slug)
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("git_dir")
    parser.add_argument("repo", help="owner/name on GitHub")
    parser.add_argument("folder", help="the folder inside the repository ('' or '.' for its root)")
    parser.add_argument("--kind", required=True, choices=KINDS)
    parser.add_argument("--family", required=True)
    parser.add_argument("--license", default="unknown")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--include", action="append", default=[])
    parser.add_argument("--subdir", action="append", default=[])
    parser.add_argument("--slug")
    args = parser.parse_args()
    print(add(args.git_dir, args.repo, args.folder, args.kind, args.family, args.license, args.commit,
              set(args.include), args.slug, tuple(args.subdir)))


if __name__ == "__main__":
    main()
