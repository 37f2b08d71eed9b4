"""Rules about a repository as it is pushed and loaded as a whole: git-lfs routing, processor files."""

from __future__ import annotations

import re
from typing import Iterator

from hfdoctor.sources import gitfiles
from hfdoctor.findings import Edit, Finding, Fix, Severity
from hfdoctor.lineage import card_base_models
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule

# The Hub refuses a git push holding a file above this size that is not stored with git-lfs.
LFS_LIMIT = 10 * 1024 * 1024
LFS_LINE = "{} filter=lfs diff=lfs merge=lfs -text\n"
# Files a transformers processor is built from: the image processor's (preprocessor_config.json)
# or, since processors save as one file, processor_config.json.
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


def _pushed_files(repo: ModelRepo) -> tuple[dict[str, int], bool] | None:
    """(path -> size of the plain files a git push of this target would carry, whether git-lfs
    would store routed files as lfs objects), or None when this is not a git push."""
    source = repo.source
    entries = repo.entries
    if source.kind == "git":
        if getattr(source, "prefix", ""):
            return None  # a subfolder of the repository: the root's .gitattributes is not in view
        # The commit is what is pushed: a blob that is not an lfs pointer is sent as it is.
        return {rel: e.size for rel, e in entries.items() if e.is_file and e.lfs is None and e.size is not None}, False
    root = source.local_dir
    if source.kind != "directory" or root is None or not (root / ".git").exists():
        return None  # not a git work tree: `hf upload` routes large files by itself
    files = [rel for rel, e in entries.items() if e.is_file]
    # git's index and ignore files, read as data: git itself never runs in the checked repository.
    listed = gitfiles.committable(root, files)
    if listed is None:
        return None
    sizes = {rel: entries[rel].size for rel in listed if entries[rel].size is not None}
    return sizes, gitfiles.lfs_filter_configured(root)


@rule("PUB001", "lfs-attributes", Severity.ERROR, fix=FixAvailability.SAFE)
def lfs_attributes(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A file over 10 MiB is not routed through git-lfs by `.gitattributes`: the Hub refuses the push.

    Why: the Hub stores large files with git-lfs and rejects a git push that carries a file
    above 10 MiB as a plain git blob ("Your push was rejected because it contains files
    larger than 10 MiB", huggingface_hub #138, #2666), after the upload has started. The
    Hub's default .gitattributes routes weight formats (*.safetensors, *.bin, *.pt...) but
    not tokenizer.json (11 MB for Qwen, Llama 3, Gemma) nor *.gguf, so hand-made repos hit
    it. Checked for a git work tree (the files git would commit, .gitignore respected; a
    routed file still fails when git-lfs is not set up, `git lfs install`) and for a commit
    being pushed (--git-rev, the pre-push hook: a large blob that is not an lfs pointer
    fails whatever .gitattributes says). A directory that is not a git repository is
    uploaded with `hf upload`, which routes large files by itself.

    Example: Qwen3-8B's files in a git work tree with the Hub's default .gitattributes:
    its tokenizer.json (10.9 MiB) is not routed, so the push is refused.

    Fix: safe; append `<file> filter=lfs diff=lfs merge=lfs -text` to .gitattributes (it is
    created when missing). A file already committed as a plain blob must then be re-added
    (`git rm --cached FILE && git add FILE`, or `git lfs migrate import --include=FILE` for
    older commits).
    """
    pushed = _pushed_files(repo)
    if pushed is None:
        return
    files, lfs_ready = pushed
    rules = gitfiles.lfs_rules(repo.text(".gitattributes") or "")
    large = sorted(rel for rel, size in files.items() if size > LFS_LIMIT and rel != ".gitattributes")
    unrouted = [rel for rel in large if not gitfiles.routed_to_lfs(rel, rules)]
    plain = [rel for rel in large if rel not in unrouted and not lfs_ready]
    if unrouted:
        shown = ", ".join(f"{rel} ({files[rel] / 2**20:.1f} MiB)" for rel in unrouted[:4])
        yield self.finding(
            repo,
            f"{len(unrouted)} file(s) over 10 MiB are not routed through git-lfs by .gitattributes: {shown}"
            + (f" and {len(unrouted) - 4} more" if len(unrouted) > 4 else "")
            + ". The Hub rejects the push. Track them with git-lfs, then re-add them so the commit holds lfs pointers.",
            file=".gitattributes", fix=_route_fix(repo, unrouted),
        )
    yield from _pushed_large_blobs(repo, self)
    if plain:
        where = "the commit holds them as plain blobs" if repo.source.kind == "git" else \
            "git-lfs is not set up in this repository (no filter.lfs.clean: run `git lfs install`)"
        yield self.finding(
            repo,
            f".gitattributes routes {', '.join(plain[:4])} through git-lfs, but {where}: they are pushed as plain "
            "files over 10 MiB and the Hub rejects the push. Re-add them with git-lfs active.",
            file=plain[0],
        )


def _pushed_large_blobs(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """Plain blobs over 10 MiB that earlier commits of the push add (pre-push, --git-since):
    the Hub refuses the whole push whatever the tip holds."""
    large = [b for b in getattr(repo.source, "pushed", ()) if b.size > LFS_LIMIT]
    for blob in large[:10]:
        yield self.finding(
            repo,
            (f"commit {blob.commit[:12]} of this push adds" if blob.commit else "this push carries (from a merge or "
             "an earlier commit)") + f" {blob.path} ({blob.size / 2**20:.1f} MiB) as a plain git blob, "
            "not an lfs pointer: the Hub rejects the whole push even though a later commit removes or moves it. "
            "Rewrite that commit (git lfs migrate import --include=PATH, or git rebase -i) before pushing.",
            file=blob.path,
        )
    if len(large) > 10:
        yield self.finding(repo, f"{len(large) - 10} more plain blobs over 10 MiB in earlier commits of this push.",
                           file=large[10].path)


def _route_fix(repo: ModelRepo, files: list[str]) -> Fix | None:
    addable = [rel for rel in files if not re.search(r"[\s\"\\#!\[\]*?]", rel)]
    if not addable:
        return None
    lines = "".join(LFS_LINE.format(rel) for rel in addable)
    title = "route the large files through git-lfs in .gitattributes"
    raw = repo.raw(".gitattributes") if repo.exists(".gitattributes") else None
    if raw is None:
        return Fix(title, (Edit(".gitattributes", 0, 0, lines, create=True),))
    prefix = "" if not raw or raw.endswith(b"\n") else "\n"
    return Fix(title, (Edit(".gitattributes", len(raw), len(raw), prefix + lines),))


@rule("PUB002", "processor-missing", Severity.ERROR, fix=FixAvailability.NONE)
def processor_missing(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A vision-language model lacks the processor files its loaders need.

    Why: a model whose config.json has a `vision_config` takes images through a processor
    (AutoProcessor: image processor + tokenizer + chat template). transformers builds the
    image processor from preprocessor_config.json (or processor_config.json, where newer
    versions save the whole processor); without either, AutoProcessor raises ("Can't load
    image processor", checked on transformers 5.23) and vLLM fails to start the model (vLLM #18983, LLaMA-Factory #7495,
    Qwen3-VL #1488): fine-tunes saved with `model.save_pretrained` and
    `tokenizer.save_pretrained` (not the processor's) ship exactly that. Checked on
    checkpoints (with weights), not on metadata-only folders.

    Example: a checkpoint of the Qwen2.5-VL architecture (model_type qwen2_5_vl) saved with
    `model.save_pretrained` and the tokenizer's, without preprocessor_config.json:
    AutoProcessor.from_pretrained raises "Can't load image processor".

    Fix: none automatic (hfdoctor ships no upstream processor files yet); copy
    preprocessor_config.json (and chat_template.json, video_preprocessor_config.json when
    upstream has them) from the base model named by the card, or save with
    `processor.save_pretrained`.
    """
    config = repo.config
    if not config or not isinstance(config.get("vision_config"), dict):
        return
    if not (repo.weight_files or repo.weight_dirs) or repo.is_adapter:
        return
    if any(repo.exists(f) for f in PROCESSOR_FILES):
        return
    model_type = config.get("model_type")
    bases = card_base_models(repo)
    yield self.finding(
        repo,
        f"this vision-language model ({model_type}) ships no preprocessor_config.json or processor_config.json: "
        "AutoProcessor cannot build its image processor and vLLM cannot start it. Copy "
        "the processor files from " + (f"{bases[0]}" if bases else "the base model") + ", or save the processor "
        "with processor.save_pretrained.",
        file="preprocessor_config.json",
    )


RULES = [lfs_attributes, processor_missing]
