"""adapter-inconsistent, the saved weights: what adapter_model.safetensors (or .bin) holds against
adapter_config.json, the base model it names and the servers that load it."""

from __future__ import annotations

from typing import Any, Iterator

from hfdoctor.bounded import patterns
from hfdoctor.findings import Finding, Severity
from hfdoctor.lineage.adapter_base import adapter_base
from hfdoctor.lint.rules.base import Rule
from hfdoctor.lint.rules.security.pickles import model_file_scans
from hfdoctor.modelfiles.result import PickleScan
from hfdoctor.repo import ADAPTER_CONFIG, ModelRepo
from hfdoctor.weights.adapter import (MAX_RANK_PATTERN_KEYS, READS_HIDDEN, WRITES_HIDDEN, AdapterWeights,
                                      ModuleTargets, RankPatterns, adapter_weights, registry_base)
from hfdoctor.weights.headers import repo_weights

VLLM_DEFAULT_MAX_RANK = 16  # vLLM's --max-lora-rank default
SHOWN = 5  # names a message lists before "and N more"
# Names of the input and output embeddings across architectures (a saved whole tensor carries them).
EMBEDDING_NAMES = ("embed_tokens", "lm_head", "wte", "embed_in", "embed_out", "word_embeddings", "output_layer")


def saved_weight_problems(repo: ModelRepo, self: Rule, config: dict[str, Any], base: Any) -> Iterator[Finding]:
    """The LoRA weight files against the config, the base and the servers (nothing when there are none:
    `no_weights` says that)."""
    view = repo_weights(repo)
    files = [f for f in view.headers if repo.is_adapter_file(f)]
    pickled = [f for f in repo.weight_files if repo.is_adapter_file(f) and not f.endswith(".safetensors")]
    scans = {rel: scan for rel in pickled if isinstance(scan := model_file_scans(repo).get(rel), PickleScan)}
    empty = [rel for rel in files if not view.headers[rel].tensors] + [
        rel for rel, scan in scans.items() if scan.holds_no_tensor]
    unloadable = [rel for rel, scan in scans.items()
                  if scan.kind == "not-pickle" and not scan.problems and not scan.unproven or scan.truncated_zip]
    for rel in unloadable:  # a text placeholder, another format under torch.load's name, or a cut-short upload
        what = ("a zip archive cut short (no end record: an interrupted upload or copy)" if scans[rel].truncated_zip
                else "neither a pickle nor a torch zip archive")
        yield self.finding(repo, f"{rel} is {what}: PEFT reads adapter_model.bin with torch.load, which cannot read "
                           "it, so the adapter does not load. Upload the trained weights again.", file=rel)
    if (empty or unloadable) and len(empty) + len(unloadable) == len(files) + len(pickled):
        if empty:  # and nothing else loads: no file holds a trained tensor
            yield _empty_weights(repo, self, empty)
        return
    if not files:
        if not pickled and not view.pointers and not any(repo.is_adapter_file(f) for f in view.broken):
            yield no_weights(repo, self)
        return
    tensors = {}
    for rel in files:
        tensors.update(view.headers[rel].tensors)
    weights = adapter_weights(tensors)
    yield from _rank_problems(repo, self, config, weights)
    yield from _target_problems(repo, self, config, weights)
    if isinstance(base, str):
        yield from _base_shape_problems(repo, self, base, weights)
    yield from _vocab_problems(repo, self, config, weights)
    yield from _serving_problems(repo, self, config, weights)


# adapter_model.safetensors.partaa, adapter_model_part_aa, adapter_model.bin.part1: the weights cut
# into pieces (split -b) to pass a file-size limit (GitHub's 100 MB). Names are repository data: RE2.
SPLIT_PART = patterns.compile(r"^adapter_model(\.safetensors|\.bin)?[._-]?part[._-]?[A-Za-z0-9]{1,4}$")


def no_weights(repo: ModelRepo, self: Rule) -> Finding:
    """No adapter weights PEFT can load: none at all, or only the parts of one file split to pass an
    upload limit, which PEFT cannot read until they are joined."""
    parts = sorted(rel for rel in repo.files if "/" not in rel and SPLIT_PART.match(rel) is not None)
    if not parts:
        return self.finding(repo, "adapter_config.json but no adapter_model.safetensors (or .bin): PEFT has no "
                            "weights to load.", file=ADAPTER_CONFIG)
    suffix = next((m.group(1) for m in map(SPLIT_PART.match, parts) if m.group(1)), None)
    joined = f"adapter_model{suffix}" if suffix else "adapter_model.safetensors"
    which = "" if suffix else " (adapter_model.bin if the parts hold a pickle)"
    stem = parts[0][:parts[0].lower().rindex("part")]
    shown = ", ".join(parts[:SHOWN]) + (f" and {len(parts) - SHOWN} more" if len(parts) > SHOWN else "")
    return self.finding(
        repo, f"the adapter weights are split into {len(parts)} parts ({shown}) and no adapter_model.safetensors "
        f"(or .bin) exists: PEFT, vLLM and TGI read only the whole file, so the adapter cannot be loaded until "
        f"the parts are joined: `cat {stem}part* > {joined}`{which}, then delete the parts.",
        file=ADAPTER_CONFIG)


def _empty_weights(repo: ModelRepo, self: Rule, empty: list[str]) -> Finding:
    """Weights saved as an empty state dict: alpaca-lora's and qlora's `model.state_dict` override
    under a newer PEFT filtered every LoRA tensor out (the famous 443-byte adapter_model.bin)."""
    return self.finding(
        repo, f"{_some(empty)} holds no tensor at all (an empty state dict): PEFT loads it (at most warning of missing keys) "
        "and serves the base model unchanged, so none of the training is in it. A training script that overrides "
        "model.state_dict for PEFT (alpaca-lora's) saves this under a newer PEFT; the checkpoint-N folders of the "
        "run hold the trained weights. Save again with the PeftModel's own save_pretrained().", file=empty[0])


def _some(names: list[str], shown: int = SHOWN, sep: str = ", ") -> str:
    """The first few of `names` (repository text: each shortened), and how many more."""
    listed = sep.join(name if len(name) <= 160 else name[:160] + "…" for name in names[:shown])
    return listed + (f" and {len(names) - shown:,} more" if len(names) > shown else "")


def _rank_problems(repo: ModelRepo, self: Rule, config: dict[str, Any], weights: AdapterWeights) -> Iterator[Finding]:
    odd = [m for m in weights.modules.values() if not m.matrices]
    if odd:
        first = odd[0]
        yield self.finding(
            repo,
            f"{len(odd)} LoRA module(s) save A or B as something other than a matrix (e.g. {_some([first.name])}: A "
            f"{list(first.a) if first.a is not None else None}, B {list(first.b) if first.b is not None else None}): "
            "every LoRA layer is a pair of matrices, so PEFT's load fails with a size mismatch."
            + (" Empty tensors (shape [0]) are DeepSpeed ZeRO-3's partitions saved without gathering them: save "
               "with stage3_gather_16bit_weights_on_model_save, or from zero_to_fp32.py's output."
               if any(shape == (0,) for m in odd for shape in (m.a, m.b)) else ""), file=ADAPTER_CONFIG)
    ranks = RankPatterns(config, repo.budget.deadline)
    wrong, torn = [], []
    for module in weights.modules.values():
        if not module.matrices:
            continue
        a_rank = module.a[0] if module.a else None
        b_rank = module.b[-1] if module.b else None
        if a_rank is not None and b_rank is not None and a_rank != b_rank:
            torn.append(f"{module.name} (A rank {a_rank}, B rank {b_rank})")
            continue
        want = ranks.rank(module.name)
        if want is not None and a_rank is not None and a_rank != want:
            wrong.append((module.name, a_rank, want))
    if ranks.unknown:
        repo.budget.skip(f"the rank of {ranks.unknown:,} LoRA module(s) that none of the first {ranks.tried:,} "
                         f"rank_pattern keys matches", f"hfdoctor tries at most {MAX_RANK_PATTERN_KEYS} keys, while "
                         "the time budget of this repository lasts")
    if torn:
        yield self.finding(repo, f"LoRA A and B disagree on the rank: {_some(torn)}: no loader can build "
                           "these layers.", file=ADAPTER_CONFIG)
    if wrong:
        name, got, want = wrong[0]
        yield self.finding(
            repo,
            f"{len(wrong)} LoRA modules have rank {got} but adapter_config.json gives r={want} (e.g. {_some([name])}): "
            "PEFT builds rank-{want} layers and the load fails with a size mismatch. Make r (or rank_pattern) say "
            "what was trained.".replace("{want}", str(want)),
            file=ADAPTER_CONFIG, pointer="/r",
        )


def _target_problems(repo: ModelRepo, self: Rule, config: dict[str, Any], weights: AdapterWeights) -> Iterator[Finding]:
    target = config.get("target_modules")
    names = list(weights.modules)
    if target is None or not names:
        return
    targets = ModuleTargets(target, repo.budget.deadline)
    used: set[str] = set()
    stray = []
    for name in names:
        matched = targets.matches(name) if targets.is_list else []
        used.update(matched)
        if not matched and targets.targets(name) is False:
            stray.append(name)
    if targets.unknown:
        repo.budget.skip(f"whether target_modules matches {targets.unknown:,} LoRA module(s)",
                         "the time budget of this repository ran out")
    unused = [t for t in targets.entries if t not in used]
    if unused:
        yield self.finding(
            repo,
            f"target_modules names {_some(unused)} but the adapter holds no LoRA weights for them: the base "
            "it was trained on has no such modules, so fewer modules were adapted than configured (a recipe "
            "written for another architecture?).",
            file=ADAPTER_CONFIG, pointer="/target_modules", severity=Severity.WARNING,
        )
    if stray:
        yield self.finding(
            repo,
            f"the adapter holds LoRA weights for {len(stray)} modules target_modules does not match "
            f"(e.g. {_some(stray[:1])}): PEFT creates no layer for them and drops those weights on load.",
            file=ADAPTER_CONFIG, pointer="/target_modules", severity=Severity.WARNING,
        )


def _base_shape_problems(repo: ModelRepo, self: Rule, base: str, weights: AdapterWeights) -> Iterator[Finding]:
    found = registry_base(base)
    if found is None:
        return
    _, release = found
    hidden, layers = release.dims.get("hidden_size"), release.dims.get("num_hidden_layers")
    problems = []
    for module in weights.modules.values():
        if module.embedding or module.a is None or module.b is None or not module.matrices:
            continue
        if hidden and module.leaf in READS_HIDDEN and module.a[-1] != hidden:
            problems.append(f"{module.name} reads {module.a[-1]} features")
        elif hidden and module.leaf in WRITES_HIDDEN and module.b[0] != hidden:
            problems.append(f"{module.name} writes {module.b[0]} features")
        elif layers and module.layer is not None and module.layer >= layers:
            problems.append(f"{module.name} is beyond the base's {layers} layers")
    if problems:
        yield self.finding(
            repo,
            f"the adapter does not fit {release.repo} (hidden size {hidden}, {layers} layers) that "
            f"base_model_name_or_path {base!r} names: {_some(problems, 3, '; ')}"
            + ". It was trained on another model: PEFT's load fails with a size mismatch.",
            file=ADAPTER_CONFIG, pointer="/base_model_name_or_path",
        )


def _saves_embeddings(config: dict[str, Any], weights: AdapterWeights) -> bool:
    """The adapter carries (resized) embeddings: whole tensors, LoRA on them, or PEFT's trainable tokens."""
    if any(m.embedding for m in weights.modules.values()) or config.get("trainable_token_indices"):
        return True
    return any(part in name for name in weights.full for part in EMBEDDING_NAMES)


def _vocab_problems(repo: ModelRepo, self: Rule, config: dict[str, Any], weights: AdapterWeights) -> Iterator[Finding]:
    """The adapter's tokenizer has ids beyond the base's embedding rows and no embeddings are saved."""
    found = adapter_base(repo)
    if found is None or found.vocab_size is None or not repo.id_to_token or _saves_embeddings(config, weights):
        return
    beyond = sorted(i for i in repo.id_to_token if i >= found.vocab_size)
    if not beyond:
        return
    shown = ", ".join(f"{repo.id_to_token[i]!r} ({i})" for i in beyond[:3]) + (" ..." if len(beyond) > 3 else "")
    yield self.finding(
        repo,
        f"the adapter's tokenizer has {len(beyond)} token(s) beyond the {found.vocab_size:,} embedding rows of its base "
        f"{found.repo_id} ({found.vocab_source}): {shown}, and the adapter saves no embeddings (modules_to_save "
        f"{config.get('modules_to_save')!r}, no embed_tokens or lm_head in its weights). The first prompt holding one "
        "of them indexes past the embedding (IndexError on CPU, a device-side assert on CUDA). Save the resized "
        "embeddings (modules_to_save=['embed_tokens', 'lm_head'], or PEFT's save_embedding_layers=True) or ship the "
        "base's tokenizer.",
        file="tokenizer.json" if repo.tokenizer_json is not None else "tokenizer_config.json",
    )


def _serving_problems(repo: ModelRepo, self: Rule, config: dict[str, Any], weights: AdapterWeights) -> Iterator[Finding]:
    saved = config.get("modules_to_save")
    if (isinstance(saved, list) and saved) or weights.full:
        what = _some(list(weights.full)) or _some([str(s) for s in saved])
        yield self.finding(
            repo,
            f"the adapter trains whole modules beside LoRA ({what}"
            + (", modules_to_save" if saved else "") + "): vLLM refuses it at the first request that uses it "
            "(\"vLLM only supports modules_to_save being None\"), and merging is the only way to serve it there.",
            file=ADAPTER_CONFIG, pointer="/modules_to_save" if saved else None, severity=Severity.WARNING,
        )
    ranks = [m.rank for m in weights.modules.values() if m.rank]
    if ranks and max(ranks) > VLLM_DEFAULT_MAX_RANK:
        yield self.finding(
            repo, f"LoRA rank {max(ranks)} is above vLLM's default --max-lora-rank ({VLLM_DEFAULT_MAX_RANK}): serve it "
            f"with --max-lora-rank {max(ranks)} or more.", file=ADAPTER_CONFIG, pointer="/r", severity=Severity.INFO,
        )
