"""Rules about weight files, from their headers alone (hfdoctor.weights reads them).

No rule here reads tensor data. weights-config-mismatch imports torch/transformers only
when the repo has safetensors weights to compare and its config.json is not one whose
layout is shipped (upstream_templates/layouts.json; the result is kept for the process).
"""

from __future__ import annotations

import re
from typing import Iterator

from hfdoctor.knowledge import registry
from hfdoctor.repo.file_names import is_training_state
from hfdoctor import lineage as lineage_mod
from hfdoctor.findings import Facet, FacetKind, Finding, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.weights.compare import compare
from hfdoctor.weights.headers import (BIN_INDEX_FILE, INDEX_FILE, SHARD_NAME, bin_index_shards, parse_lfs_pointer,
                                      repo_weights, safetensors_index_shards)
from hfdoctor.weights.layout import looks_like, repo_layout

EXAMPLES = 3


def _layer_pattern(name: str) -> str:
    return re.sub(r"(?<=\.)\d+(?=\.)", "*", name)


def _grouped(names: list[str]) -> str:
    """A few examples, with per-layer names folded: 'model.layers.*.self_attn.q_norm.weight (x36)'."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(_layer_pattern(name), []).append(name)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    parts = [members[0] if len(members) == 1 else f"{pattern} (x{len(members)})" for pattern, members in ordered]
    more = len(parts) - EXAMPLES
    return ", ".join(parts[:EXAMPLES]) + (f" and {more} more" if more > 0 else "")


def _listing(items: list[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _weights_file(repo: ModelRepo) -> str | None:
    """The file a finding about the model's weights points at: the index, or the single file."""
    view = repo_weights(repo)
    if view.index is not None:
        return INDEX_FILE
    return view.main_files[0] if len(view.main_files) == 1 else None


@rule("WGT001", "weights-unreadable", Severity.ERROR, fix=FixAvailability.NONE)
def weights_unreadable(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A weight file no loader can read: its safetensors header is invalid, or it is not a file.

    Why: safetensors, transformers, vLLM and TGI validate the header before reading a byte
    of data; an invalid one stops the model from loading (often after a long download).
    hfdoctor checks what the safetensors library checks: the 8-byte header length (at most
    100 MB and within the file), that the header is a JSON object naming no tensor twice,
    known dtypes, shapes, data offsets that match each tensor's size and tile the data
    region with no overlap and no gap, and a file size equal to header plus data. A weight "file" that is a
    directory, a symbolic link loop, a broken link, a FIFO or empty is reported too.

    Example: an upload interrupted at 3 GB leaves model-00002-of-00004.safetensors shorter
    than its header promises ("is truncated: its tensors need 4,983,... bytes").

    Fix: none automatic; re-upload or re-convert the file. Rules that need the headers skip it.
    """
    view = repo_weights(repo)
    for rel, why in sorted(view.broken.items()):
        yield self.finding(repo, f"{rel} {why}", file=rel)


@rule("WGT002", "weights-index-inconsistent", Severity.ERROR, fix=FixAvailability.NONE)
def weights_index_inconsistent(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """model.safetensors.index.json (or pytorch_model.bin.index.json) and the shards disagree.

    Why: loaders open the shards the index names and read each tensor from the shard the
    index says. A shard that is missing fails the load; a tensor the index places in the
    wrong shard fails it too; a tensor that is in a shard but not in the index is silently
    never loaded (lm_head left at random init is the classic result); a shard the index
    does not name is dead weight. Warnings, as loading still works: `metadata.total_size`
    (the sum of tensor byte sizes) disagreeing with the headers (few loaders use it), a
    tensor stored in two shards, and a shard-named file the index does not name.

    A folder with the index but none of the shards (metadata only, e.g. downloaded with
    allow_patterns, or a git repository that publishes the weights elsewhere) is not an
    error: the weights are simply not checked, which an info finding and the report's
    `weights` section say. An index whose weight_map is empty (a placeholder) is an error:
    loaders that read it load nothing.

    Example: a re-shard to 4 files left model.safetensors.index.json naming 5.

    Fix: none automatic; regenerate the index from the shards (save_pretrained writes both).
    """
    view = repo_weights(repo)
    if view.index is not None:
        yield from _check_safetensors_index(repo, self, view)
    elif repo.exists(INDEX_FILE) and isinstance(repo.json_object(INDEX_FILE), dict):
        yield self.finding(
            repo, f"{INDEX_FILE} has no `weight_map` object mapping tensor names to shard files: "
            "loaders cannot find any tensor.", file=INDEX_FILE,
            pointer="/weight_map" if "weight_map" in repo.json_object(INDEX_FILE) else None,
        )
    yield from _check_bin_index(repo, self)


def _check_safetensors_index(repo, self: Rule, view) -> Iterator[Finding]:
    weight_map = view.index
    indexed = safetensors_index_shards(repo)
    if indexed is None:  # an empty weight_map
        yield self.finding(
            repo, f"{INDEX_FILE}'s weight_map is empty (a placeholder?): loaders that read the index load no tensor "
            "at all, and every weight of the model is left at its random initialisation.",
            file=INDEX_FILE, pointer="/weight_map",
        )
        return
    shards, missing, present = indexed.shards, indexed.missing, view.present
    if indexed.none_here:
        yield _no_shards(repo, self, INDEX_FILE, shards)
        return
    if missing:
        lost = sum(1 for s in weight_map.values() if s in missing)
        yield self.finding(
            repo,
            f"{len(missing)} of the {len(shards)} shards {INDEX_FILE} names are not in the repository "
            f"({_listing(missing)}): the {lost} tensors it places there cannot be loaded.",
            file=INDEX_FILE, pointer="/weight_map",
        )
    readable = {s: view.headers[s] for s in shards if s in view.headers}
    where: dict[str, list[str]] = {}
    for shard, header in readable.items():
        for name in header.tensors:
            where.setdefault(name, []).append(shard)
    misplaced, absent = [], []
    for name, shard in weight_map.items():
        if shard in readable and name not in readable[shard].tensors:
            (misplaced if name in where else absent).append(name)
    if absent:
        yield self.finding(
            repo,
            f"{len(absent)} tensors the index lists are in no shard: {_grouped(sorted(absent))}. "
            "Loading fails looking for them.",
            file=INDEX_FILE, pointer=f"/weight_map/{absent[0]}",
        )
    if misplaced:
        name = sorted(misplaced)[0]
        yield self.finding(
            repo,
            f"{len(misplaced)} tensors are not in the shard the index names: e.g. {name} is in "
            f"{where[name][0]}, the index says {weight_map[name]}. Loading fails looking for them.",
            file=INDEX_FILE, pointer=f"/weight_map/{name}",
        )
    unlisted = sorted(n for n in where if n not in weight_map)
    if unlisted:
        yield self.finding(
            repo,
            f"{len(unlisted)} tensors in the shards are not in the index, so loaders never read them "
            f"(the model gets randomly initialised values instead): {_grouped(unlisted)} "
            f"(in {where[unlisted[0]][0]}).",
            file=INDEX_FILE, pointer="/weight_map",
        )
    duplicated = sorted(n for n, files in where.items() if len(files) > 1)
    if duplicated:
        yield self.finding(
            repo,
            f"{len(duplicated)} tensors are stored in more than one shard: {_grouped(duplicated)} "
            f"(in {', '.join(where[duplicated[0]])}); only the one the index names is loaded.",
            file=INDEX_FILE, pointer=f"/weight_map/{duplicated[0]}", severity=Severity.WARNING,
        )
    stems = {m.group("stem") for s in shards if (m := SHARD_NAME.match(s))}
    stray = sorted(
        f for f in present
        if "/" not in f and f not in shards and (m := SHARD_NAME.match(f)) and m.group("stem") in stems
    )
    if stray:
        yield self.finding(
            repo,
            f"{_listing(stray)} look like shards of this checkpoint but the index does not name them: "
            "nothing in them is loaded. Delete them or regenerate the index.",
            file=stray[0], severity=Severity.WARNING,
        )
    index = repo.json_object(INDEX_FILE) or {}
    total = (index.get("metadata") or {}).get("total_size") if isinstance(index.get("metadata"), dict) else None
    if isinstance(total, int) and not missing and len(readable) == len(shards):
        actual = sum(readable[where[n][0]].tensors[n].nbytes for n in where)
        if actual != total:
            yield self.finding(
                repo,
                f"metadata.total_size is {total:,} bytes but the shards' tensors add up to {actual:,}: "
                "tools that size downloads or memory from the index get it wrong.",
                file=INDEX_FILE, pointer="/metadata/total_size", severity=Severity.WARNING,
            )


def _no_shards(repo: ModelRepo, self: Rule, index_file: str, shards: list[str]) -> Finding:
    """Info: the index names shards, none of which is here (a metadata-only download, or a git
    repository that publishes the weights elsewhere): nothing checked, and this folder does not load."""
    return self.finding(
        repo, f"{index_file} names {len(shards)} shard(s) ({_listing(shards, 2)}) and none of them is in this folder: "
        "the weights were not checked, and loading from this folder fails until they are downloaded.",
        file=index_file, pointer="/weight_map", severity=Severity.INFO,
    )


def _check_bin_index(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    indexed = bin_index_shards(repo)
    if indexed is None or not indexed.missing:
        return
    if indexed.none_here:
        if not repo.exists(INDEX_FILE):  # one finding per folder: the safetensors index says it already
            yield _no_shards(repo, self, BIN_INDEX_FILE, indexed.shards)
        return
    missing = indexed.missing
    yield self.finding(
        repo,
        f"{len(missing)} of the {len(indexed.shards)} shards {BIN_INDEX_FILE} names are not in the repository "
        f"({_listing(missing)}): loading the .bin weights fails.",
        file=BIN_INDEX_FILE, pointer="/weight_map",
    )


def _declared(config: dict) -> str:
    parts = []
    for key, label in (("num_hidden_layers", "layers"), ("hidden_size", "hidden size"), ("vocab_size", "vocab")):
        value = registry.config_value(config, key)
        if isinstance(value, int):
            parts.append(f"{value} {label}" if label == "layers" else f"{label} {value}")
    return ", ".join(parts)


@rule("WGT003", "weights-config-mismatch", Severity.ERROR, fix=FixAvailability.NONE)
def weights_config_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """Tensor names or shapes do not match the architecture config.json declares.

    Why: transformers builds the model config.json describes and then loads the tensors
    into it. Weights of another architecture either fail to load (shape mismatch) or, when
    names and shapes happen to line up, load silently into the wrong model: Llama-3.1-8B
    weights under a Qwen3-8B config and tokenizer produce fluent nonsense, never think, and
    ignore every Qwen-only token.

    The expected names and shapes are what transformers would save for the declared
    model: precomputed for the known upstream configurations (upstream_templates/
    layouts.json, no torch needed), otherwise built on torch's meta device (no memory, no
    download, never trust_remote_code). They are compared with the safetensors headers. The message counts the missing,
    unexpected and wrong-shaped tensors with examples, and says what the weights look
    like instead (layers, hidden size, vocabulary, q_norm/k_norm, biases) and which known
    models have that shape. Tied embeddings (lm_head absent) are accepted. Extra tensors
    alone (a value head, MTP layers) are a warning: transformers drops them. An architecture
    transformers does not know, or quantized weights, are reported as info: not verified.
    A config.json transformers itself refuses to build is an error.

    Example: "config.json declares 36 layers, hidden size 4096, vocab 151936; the weights
    have 32 layers, vocab 128256, no q_norm/k_norm ... sized like Llama 3".

    Fix: none automatic; ship the config (and tokenizer) of the model the weights are.
    """
    comparison = compare(repo)
    if comparison is None:
        return
    config = repo.config
    layout = repo_layout(repo)
    where = _weights_file(repo)
    if comparison.cannot_verify is not None:
        yield self.finding(repo, f"cannot verify the weights against config.json: {comparison.cannot_verify}.",
                           file="config.json", severity=Severity.INFO)
        return
    if comparison.rejected is not None:
        yield self.finding(
            repo, f"transformers cannot build the model config.json declares, so these weights cannot be "
            f"loaded (or verified) with it: {comparison.rejected}", file="config.json",
        )
        return
    expected, names = comparison.expected, comparison.names
    missing, unexpected, wrong = comparison.missing, comparison.unexpected, comparison.wrong
    if not (missing or unexpected or wrong):
        return
    problems = []
    if missing:
        problems.append(f"{len(missing)} expected tensors missing ({_grouped(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected ({_grouped(unexpected)})")
    if wrong:
        groups: dict[tuple, list[str]] = {}
        for n in wrong:
            groups.setdefault((_layer_pattern(n), names[n], expected.tensors[n]), []).append(n)
        ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0][0]))
        shown = "; ".join(
            f"{members[0] if len(members) == 1 else pattern} is {list(got)}, config needs {list(want)}"
            + (f" (x{len(members)})" if len(members) > 1 else "")
            for (pattern, got, want), members in ordered[:EXAMPLES]
        )
        problems.append(f"{len(wrong)} with another shape ({shown})")
    declared = _declared(config)
    yield self.finding(
        repo,
        f"the weights are not the {expected.model_class} config.json declares"
        + (f" ({declared})" if declared else "") + ": " + "; ".join(problems) + ". "
        + (f"The weights have {looks_like(layout)}. " if layout is not None else "")
        + "Ship the config and tokenizer of the model the weights come from (or the weights the config names).",
        file=where,
        # Extra tensors alone load (transformers warns and drops them); missing or
        # wrong-shaped ones fail the load or leave parameters randomly initialised.
        severity=Severity.ERROR if missing or wrong else Severity.WARNING,
    )


@rule("WGT004", "embedding-vocab-mismatch", Severity.ERROR, fix=FixAvailability.NONE)
def embedding_vocab_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """Token ids of the tokenizer exceed the embedding rows (from the headers) or `vocab_size`.

    Why: every token id indexes a row of the input embedding (and of lm_head). An id at or
    past the number of rows crashes the forward pass (IndexError on CPU, "device-side
    assert triggered" on CUDA) the first time the tokenizer emits it, typically for the
    added special tokens (<think>, <|im_end|>) at the very end of the vocabulary. Rows
    beyond the tokenizer (padding to a multiple of 64 or 128) are normal and not reported, and
    so are ids in the rows a model's own code adds past vocab_size (Molmo's additional_vocab_size,
    128 by default, for its image tokens).

    Example: a Qwen3 tokenizer (ids up to 151668) with Llama-3.1 weights (128256 rows);
    tokens added to the tokenizer without model.resize_token_embeddings().

    Severity: info when every token past the rows is one the family's own release puts there at the
    same id (ruDialoGPT-small's added '<|endoftext|>' at 50261, its vocab_size; it stops on 50256):
    a fine-tune that saved that tokenizer unchanged inherits upstream's design.

    Fix: none automatic; resize the embeddings (and set vocab_size) or use the tokenizer
    the weights were trained with.
    """
    vocab = dict(repo.vocab or {})
    for token_id, token in repo.added_tokens_decoder.items():
        vocab.setdefault(token, token_id)
    if not vocab:
        return
    max_id = max(vocab.values())
    top_token = repo.id_to_token.get(max_id, repo.added_tokens_decoder.get(max_id))
    view = repo_weights(repo)
    layout = repo_layout(repo)
    if layout is not None and layout.embedding is not None and layout.vocab_size is not None:
        rows = layout.vocab_size
        if max_id >= rows:
            beyond = sum(1 for i in vocab.values() if i >= rows)
            shard = next((f for f in view.main_files if f in view.headers and layout.embedding in view.headers[f].tensors), None)
            yield self.finding(
                repo,
                f"the tokenizer has {beyond} token ids at or beyond {rows} (up to {max_id}, {top_token!r}) but "
                f"{layout.embedding} has only {rows} rows: those ids index past the embedding and crash the "
                "forward pass. Resize the embeddings or use the tokenizer the weights were trained with.",
                file=shard, facets=_release_design(repo, vocab, rows),
            )
    config = repo.config or {}
    vocab_size = registry.config_value(config, "vocab_size")
    rows = vocab_size + _additional_rows(config) if isinstance(vocab_size, int) and not isinstance(vocab_size, bool) \
        else None
    if rows is not None and max_id >= rows:
        beyond = sum(1 for i in vocab.values() if i >= rows)
        pointer = "/vocab_size" if "vocab_size" in config else "/text_config/vocab_size"
        more = f" (and {rows - vocab_size} additional rows)" if rows > vocab_size else ""
        yield self.finding(
            repo,
            f"config.json vocab_size is {vocab_size}{more} but the tokenizer has {beyond} token ids at or beyond "
            f"{'them' if more else 'it'} (up to {max_id}, {top_token!r}): the model is built with too few embedding "
            "rows for this tokenizer.",
            file="config.json", pointer=pointer, facets=_release_design(repo, vocab, rows),
        )


def _release_design(repo: ModelRepo, vocab: dict[str, int], rows: int) -> tuple[Facet, ...]:
    """An UPSTREAM_DESIGN facet when every token past the rows is one the family's own tokenizer puts there
    at the same id (ruDialoGPT's '<|endoftext|>' at 50261 = vocab_size), for a family known for certain: a
    fine-tune that saved the release's tokenizer unchanged inherits it."""
    lineage = lineage_mod.detect(repo)
    fam = lineage.family_ref if lineage.certain and not lineage.disagree else None
    if fam is None or fam.tokens_past_rows is None:
        return ()
    known, upstream = fam.tokens_past_rows
    beyond = {token: i for token, i in vocab.items() if i >= rows}
    if not beyond or any(known.get(token) != i for token, i in beyond.items()):
        return ()
    listed = ", ".join(f"{token!r} at {i}" for token, i in sorted(beyond.items(), key=lambda kv: kv[1]))
    return (Facet(FacetKind.UPSTREAM_DESIGN, f"{fam.display} upstream ({upstream}'s tokenizer puts {listed})"),)


def _additional_rows(config: dict) -> int:
    """Embedding rows a model builds past vocab_size by design: Molmo's remote code (model_type molmo)
    adds additional_vocab_size rows (128 unless the config says, as in allenai's Molmo configs and
    transformers' MolmoTextConfig) for its image tokens (<im_start>, <im_patch>, <|image|>...)."""
    if config.get("model_type") != "molmo":
        return 0
    extra = config.get("additional_vocab_size", 128)
    return extra if isinstance(extra, int) and not isinstance(extra, bool) and extra > 0 else 0


def _human_bytes(size: int | None) -> str:
    if size is None:
        return "unknown size"
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:,} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    return ""


@rule("WGT005", "lfs-pointer", Severity.WARNING, fix=FixAvailability.NONE)
def lfs_pointer(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A weight file (or a metadata file: tokenizer.json...) is a git-lfs pointer, not the data; rules skip it.

    Why: a clone without git-lfs (or with GIT_LFS_SKIP_SMUDGE=1, common in CI and pre-push
    checks) leaves ~130-byte pointer files where the weights should be. The repository on
    the Hub may be perfectly fine, so this is not an error and the other weight rules skip
    the file instead of calling it corrupt. It is still a warning: loading from this folder
    fails, and uploading it (huggingface-cli upload, a copy to another repo) publishes the
    pointer text as the weights.

    Example: model-00001-of-00004.safetensors is "version https://git-lfs.github.com/spec/v1
    oid sha256:... size 4976698672". A tokenizer.json stored in LFS is reported the same
    way (never as invalid JSON); the Trainer's state files (training_args.bin, optimizer.pt)
    are not reported: nothing that serves the model loads them.

    Fix: none automatic; run `git lfs pull` to fetch the data.
    """
    for problem in repo.problems.values():
        if problem.kind == "lfs-pointer":
            pointer = parse_lfs_pointer(repo.raw(problem.file) or b"", problem.file)
            oid = pointer.oid if pointer and pointer.oid else "no oid"
            yield self.finding(
                repo,
                f"{problem.file} is a git-lfs pointer ({oid}, {_human_bytes(pointer.size if pointer else None)}), not "
                "the file: this checkout has no LFS data, so the rules that read it skip it. Run `git lfs pull` "
                "before loading or uploading this folder.",
                file=problem.file,
            )
    for rel, pointer in sorted(repo_weights(repo).pointers.items()):
        if is_training_state(rel):
            continue  # the Trainer's state: nothing loads it to serve the model
        yield self.finding(
            repo,
            f"{rel} is a git-lfs pointer ({pointer.oid or 'no oid'}, {_human_bytes(pointer.size)}), not the weights: "
            "this checkout has no LFS data, so weight checks skip it. Run `git lfs pull` before loading or "
            "uploading this folder.",
            file=rel,
        )


RULES: list[Rule] = [
    weights_unreadable,
    weights_index_inconsistent,
    weights_config_mismatch,
    embedding_vocab_mismatch,
    lfs_pointer,
]
