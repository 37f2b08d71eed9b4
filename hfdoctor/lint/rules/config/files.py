"""Rules about the checkpoint's files and config.json."""

from __future__ import annotations

import difflib

from typing import Iterator

from hfdoctor.knowledge import registry
from hfdoctor.repo.file_names import browser_duplicate_of, is_transformers_weight
from hfdoctor.findings import Finding, Severity
from hfdoctor.repo import METADATA_JSON_FILES, ModelRepo, remote_code
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.weights.headers import bin_index_shards, safetensors_index_shards

# The files loaders look for by name: one saved as `name (1).ext` is never read.
LOADER_FILES = frozenset({*METADATA_JSON_FILES, "chat_template.jinja", "tokenizer.model", "merges.txt", "README.md",
                          "adapter_model.safetensors", "adapter_model.bin", "model.safetensors", "pytorch_model.bin"})


@rule("CFG001", "file-unreadable", Severity.ERROR, fix=FixAvailability.NONE)
def file_unreadable(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A metadata file is missing where required, is not valid JSON/YAML, or is truncated.

    Why: transformers, vLLM, TGI and the Hub all parse these files at load time; one
    that does not parse stops the model from loading at all, and one that is missing
    (config.json next to weights) leaves the loader without an architecture.

    Example: tokenizer_config.json cut off in the middle by an interrupted upload;
    README.md front matter with a tab-indented list; generation_config.json that is a FIFO
    (never opened in a way that could block); a tokenizer.json above the size hfdoctor
    reads (256 MB; 64 MB for any other metadata file).

    A PEFT adapter (adapter_config.json beside adapter_model.safetensors) needs no
    config.json: its base model has one; adapter-inconsistent checks it. Neither does a
    repository of GGUF files: each carries its architecture, tokenizer and template. The
    Trainer's state files (training_args.bin, optimizer.pt, rng_state.pth...) are not
    weights: a PEFT checkpoint folder (adapter + trainer state) needs no config.json either,
    nor an adapter beside a backbone checkpoint that is not transformers weights (Meta's
    DINOv3 .pth, which DINOv3's own code builds).

    Trainer state under a browser-duplicate name (`training_args (1).bin`, a checkpoint
    uploaded through a browser) is still trainer state; when the folder has `config (4).json`,
    the message says that is probably the config under another name.

    Also reported: a tokenizer.json that is not a tokenizer (no `model` object: a
    placeholder; error), and a file loaders look for saved under a browser-duplicate name
    (`tokenizer (1).json`, `generation_config (1).json`): no loader reads it (warning when
    the real name is missing, info when it is a stray second copy).

    Fix: none automatic; the finding names the file, line and parser error. Rules that
    need the file are skipped (never crash) until it is repaired.
    """
    repo.load_all()
    for problem in repo.problems.values():
        if problem.file == "README.md" and problem.message.startswith("front matter"):
            continue  # card-metadata owns the model card's front matter
        if problem.kind in ("outside", "lfs-pointer"):
            continue  # symlink-outside-repo and lfs-pointer say it
        yield self.finding(repo, f"{problem.file} {problem.message}", file=problem.file, line=problem.line)
    yield from _browser_duplicates(repo, self)
    gguf_only = all(f.endswith(".gguf") for f in repo.weight_files)  # a GGUF carries its own config
    if repo.config is None and "config.json" not in repo.problems and repo.weight_files and not repo.is_adapter \
            and not gguf_only and not _adapter_beside_foreign_backbone(repo):
        renamed = next((rel for rel in repo.files if "/" not in rel and browser_duplicate_of(rel) == "config.json"),
                       None)
        advice = (f"{renamed} is probably it, saved under a browser-duplicate name: rename it to config.json"
                  if renamed else "Copy config.json from the model the weights were trained from")
        yield self.finding(
            repo,
            "config.json is missing but the repository ships weights: no loader can tell which "
            f"architecture to build. {advice}.",
            file="config.json",
        )


def _browser_duplicates(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """`tokenizer (1).json` and the like: a file loaders look for, saved under the name a browser
    gives a second download. No loader reads it."""
    for rel in repo.files:
        original = browser_duplicate_of(rel)
        if original is None or "/" in rel or original not in LOADER_FILES:
            continue
        if repo.exists(original):
            yield self.finding(
                repo, f"{rel} is a second copy of {original} under a browser-duplicate name: no loader reads it "
                f"(they read {original}). Delete it.", file=rel, severity=Severity.INFO,
            )
        else:
            yield self.finding(
                repo, f"{rel} is saved under a browser-duplicate name: no loader reads it, so for transformers, vLLM "
                f"and the Hub this repository has no {original}. Rename it to {original}.",
                file=rel, severity=Severity.WARNING,
            )


def _adapter_beside_foreign_backbone(repo: ModelRepo) -> bool:
    """A PEFT adapter whose other weight files are not transformers weights (Meta's DINOv3
    checkpoint dinov3_vits16_pretrain_lvd.pth beside a LoRA of it): that library's own code builds
    the backbone, and no config.json is read."""
    others = [rel for rel in repo.weight_files if not repo.is_adapter_file(rel)]
    return repo.exists("adapter_config.json") and not any(map(is_transformers_weight, others))


def _own_model_config(repo: ModelRepo, config: dict) -> bool:
    """A config.json a plain-PyTorch (or other library's) model wrote for its own class: no model_type,
    architectures, transformers_version or _name_or_path, and no transformers weight file in the folder."""
    if any(k in config for k in ("model_type", "architectures", "transformers_version", "_name_or_path", "auto_map")):
        return False
    return not any(map(is_transformers_weight, repo.files))


# Meta's params.json keys (llama's reference code), which mlx-examples' Llama and from-scratch tutorials write
# into a config.json; transformers' LlamaConfig names them hidden_size, num_hidden_layers, num_attention_heads.
META_PARAMS_KEYS = ("dim", "n_layers", "n_heads")


def _meta_params_config(repo: ModelRepo, config: dict) -> bool:
    """config.json in Meta's reference format (dim, n_layers, n_heads; none of transformers' names for them), with
    no transformers weight file in the folder."""
    return all(k in config for k in META_PARAMS_KEYS) and not any(
        k in config for k in ("hidden_size", "num_hidden_layers", "num_attention_heads")) and not any(
        map(is_transformers_weight, repo.files))


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@rule("CFG002", "config-architecture-mismatch", Severity.ERROR, fix=FixAvailability.NONE)
def config_architecture_mismatch(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """config.json's `architectures` and `model_type` disagree, or the config cannot be built.

    Why: AutoConfig picks the config class from `model_type`, while pipelines, vLLM and
    the Hub pick the model class from `architectures`. When they name different
    families (model_type "qwen3", architectures ["LlamaForCausalLM"]) each tool loads a
    different model, and at least one of them loads the weights wrongly or not at all.
    Dimensions that cannot form the model (hidden_size not divisible by the heads, key/value
    heads that do not divide the attention heads) make transformers fail at load.

    Example: a merge script copied `architectures` from one parent and `model_type` from
    the other.

    The repository's own code can also contradict model_type: a config with model_type "qwen2"
    whose auto_map sends AutoModelForCausalLM to its own modeling_qwen2.py, which turns each MLP
    into a mixture of experts (`self.experts = nn.ModuleList(...)`), is an MoE model only under
    trust_remote_code=True. vLLM, TGI, SGLang, llama.cpp's converter and plain transformers build
    the dense native class, and the expert weights do not fit it (warning; the code is read as
    text, never run, and only for model types whose native class is dense).

    Fix: none automatic (which side is right depends on the weights; weights-config-mismatch
    tells). Model types transformers does not know (custom code) are reported as info. A
    config.json without `architectures` beside a GGUF or a PEFT adapter (Unsloth's stub
    `{"model_type": "llama"}`) is not reported: no loader builds a model class from it there;
    beside a full model's shard index (model.safetensors.index.json) it is. A config.json with
    none of transformers' keys and no transformers weight file beside it (a GPT written in plain
    PyTorch saving embed_dim and num_layers beside model.pt) is that model's own: info; so is one
    without `architectures` whose model_type no transformers release knows and no auto_map names
    (nanoGPT's `"model_type": "gpt"`), and one in Meta's reference format (dim, n_layers, n_heads,
    as mlx-examples' Llama code and from-scratch tutorials write it, with a model_type) beside no
    transformers weight file. A config with no model_type whose auto_map names an AutoConfig class
    is built by that remote class (remote-code reports what loading runs).
    """
    config = repo.config
    if config is None:
        return
    model_type = config.get("model_type")
    architectures = config.get("architectures")
    if not isinstance(model_type, str) or not model_type:
        if _own_model_config(repo, config):
            yield self.finding(
                repo, "config.json has none of the keys transformers writes (model_type, architectures, "
                "transformers_version) and no transformers weight file is beside it: it is the config of a model "
                "written in plain PyTorch or another library (its own class's arguments), which transformers does "
                "not load; hfdoctor does not check it as a transformers config.",
                file="config.json", severity=Severity.INFO,
            )
            return
        auto_map = config.get("auto_map")
        if isinstance(auto_map, dict) and isinstance(auto_map.get("AutoConfig"), str):
            return  # AutoConfig loads the remote class auto_map names, model_type or not (remote-code says so)
        yield self.finding(
            repo,
            "config.json has no `model_type`: AutoConfig cannot choose a config class, so "
            "transformers refuses to load the model. Add the model_type of the architecture.",
            file="config.json", pointer="/model_type" if "model_type" in config else None,
        )
        return
    table = registry.architectures()
    known = table.get(model_type)
    # Unsloth writes a stub config.json ({"model_type": "llama"}) beside a GGUF or a LoRA adapter: no
    # loader builds a model class from it there (the GGUF carries its architecture, PEFT loads the base).
    # Beside a full model's shard index, though, transformers builds that model from it.
    full_model = any(i is not None and i.shards for i in (safetensors_index_shards(repo), bin_index_shards(repo)))
    stub_is_fine = not full_model and (
        repo.is_adapter or bool(repo.weight_files) and all(f.endswith(".gguf") for f in repo.weight_files))
    if architectures is None or architectures == []:
        if _meta_params_config(repo, config):
            # Meta's reference params.json keys (dim, n_layers, n_heads), as mlx-examples' Llama code and
            # from-scratch tutorials write them with a model_type: that code's config, not transformers'.
            yield self.finding(
                repo,
                f"config.json holds Meta's reference keys (dim, n_layers, n_heads) with model_type {model_type!r}, "
                "not transformers' (hidden_size, num_hidden_layers), and no transformers weight file is beside it: "
                "it is the config of Meta's reference code or mlx-examples' Llama format, which transformers does "
                "not load; hfdoctor does not check it as a transformers config.",
                file="config.json", severity=Severity.INFO,
            )
        elif known is None and "auto_map" not in config:
            # No transformers release knows this model_type and no code of the repository names one:
            # the config of another library (nanoGPT's model_type "gpt"), which `architectures` cannot help.
            yield self.finding(
                repo,
                f"config.json has no `architectures` and model_type {model_type!r} is unknown to transformers (and "
                "there is no auto_map): hfdoctor cannot tell which library this config is for, so it does not check "
                "it as a transformers config.",
                file="config.json", pointer="/model_type", severity=Severity.INFO,
            )
        elif not stub_is_fine:
            yield self.finding(
                repo,
                f"config.json has no `architectures`: transformers falls back on model_type {model_type!r}, "
                "but vLLM, TGI and the Hub need it to choose the model class. Add e.g. "
                f"{(known or ['<Name>ForCausalLM'])[0]!r}.",
                file="config.json", severity=Severity.WARNING,
            )
    elif not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        yield self.finding(repo, "`architectures` must be a list of class names", file="config.json", pointer="/architectures")
    elif known is None:
        if "auto_map" not in config:
            yield self.finding(
                repo,
                f"model_type {model_type!r} is unknown to transformers (and there is no auto_map): "
                "hfdoctor cannot verify the architecture, and AutoConfig will refuse it.",
                file="config.json", pointer="/model_type", severity=Severity.INFO,
            )
    else:
        for i, arch in enumerate(architectures):
            if arch in known:
                continue
            owners = sorted(mt for mt, classes in table.items() if arch in classes)
            if owners:
                yield self.finding(
                    repo,
                    f"architectures names {arch} (model_type {', '.join(owners)}) but model_type is "
                    f"{model_type!r} (classes {', '.join(known[:2])}...): AutoConfig builds a {model_type} "
                    f"config while pipelines and vLLM build {arch}. Make both name the architecture of the weights.",
                    file="config.json", pointer=f"/architectures/{i}",
                )
            elif "auto_map" not in config:
                # A near miss of a class transformers has is a typo; anything else is a class of the
                # model's own code (fnlp's CPT under model_type bart), loaded by its authors' code.
                close = [c for classes in table.values() for c in classes if c.lower() == arch.lower()] \
                    or difflib.get_close_matches(arch, known, 1, 0.93)
                yield self.finding(
                    repo,
                    f"architectures names {arch}, which transformers does not know for model_type {model_type!r}"
                    + (f": did you mean {close[0]!r}? Pipelines, vLLM and the Hub cannot build {arch}." if close else
                       ": a class of the model's own code, which pipelines and vLLM cannot build from architectures."),
                    file="config.json", pointer=f"/architectures/{i}",
                    severity=Severity.WARNING if close else Severity.INFO,
                )
    yield from _experts_under_dense_type(repo, self)
    yield from _dimension_problems(repo, self, config)


def _experts_under_dense_type(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    found = remote_code.experts_in_dense_type(repo)
    if found is None:
        return
    yield self.finding(
        repo,
        f"model_type {found.model_type!r} is a dense model in transformers, but the code auto_map loads for "
        f"{found.auto_class} ({found.ref}) is a mixture of experts ({found.file} line {found.line} creates "
        "`self.experts`): only transformers with trust_remote_code=True builds these experts. vLLM, TGI, SGLang, "
        f"llama.cpp's converter and transformers without it build a dense {found.model_type} whose layers have "
        "no experts, so the expert weights fail to load or are left out. Give the model a model_type of its own "
        "(or the mixture-of-experts type whose layout it follows).",
        file="config.json", pointer="/model_type", severity=Severity.WARNING,
    )


def _dimension_problems(repo: ModelRepo, self: Rule, config: dict) -> Iterator[Finding]:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    cfg, prefix = (text, "/text_config") if text is not None and "hidden_size" not in config else (config, "")
    for key in ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"):
        if key in cfg and not _positive_int(cfg[key]):
            yield self.finding(
                repo, f"`{key}` must be a positive integer, found {cfg[key]!r}: the config cannot be built.",
                file="config.json", pointer=f"{prefix}/{key}",
            )
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    kv_heads, head_dim = cfg.get("num_key_value_heads"), cfg.get("head_dim")
    if _positive_int(hidden) and _positive_int(heads) and head_dim is None and hidden % heads:
        yield self.finding(
            repo, f"hidden_size {hidden} is not divisible by num_attention_heads {heads} and no head_dim is set: "
            "the attention projections cannot be shaped.", file="config.json", pointer=f"{prefix}/hidden_size",
        )
    if _positive_int(heads) and _positive_int(kv_heads) and heads % kv_heads:
        yield self.finding(
            repo, f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}: "
            "grouped-query attention cannot share key/value heads.", file="config.json",
            pointer=f"{prefix}/num_key_value_heads",
        )


@rule("CFG003", "symlink-outside-repo", Severity.ERROR, fix=FixAvailability.NONE)
def symlink_outside_repo(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A file of the repository is a symbolic link that leaves it; hfdoctor never reads through it.

    Why: what a link outside the repository points to is not part of the model, yet
    uploads follow it: `huggingface-cli upload` and `git add` of a resolved checkout
    publish the target's bytes (a README.md linked to /etc/passwd uploads the password
    file). Loaders read whatever the link points to on the machine that loads it, which
    is not what was checked; a link to /dev/zero or /dev/urandom hangs them. hfdoctor
    reports the link and reads nothing through it, so every rule that needs the file
    skips it.

    Links inside the repository are followed, and so are the links of a Hugging Face
    cache snapshot (models--ORG--NAME/snapshots/REV/), whose files point into the same
    model folder's blobs/.

    Example: `config.json -> /dev/zero`, `README.md -> /etc/passwd`.

    Fix: none automatic; copy the file into the repository, or point the link inside it.
    """
    for entry in repo.outside_links:
        yield self.finding(repo, f"{entry.rel} {entry.detail}: not read. Uploads would publish what it points to "
                           "and loaders would read it on their machine; copy the file into the repository.",
                           file=entry.rel)


RULES = [file_unreadable, config_architecture_mismatch, symlink_outside_repo]
