"""adapter-inconsistent: a PEFT adapter's config, weights and card against each other and the base."""

from __future__ import annotations

from typing import Any, Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.findings import Applicability, Finding, Fix, Severity
from hfdoctor.knowledge import registry
from hfdoctor.lineage.adapter_base import release_stage
from hfdoctor.lint.edits.json_edits import json_set_value
from hfdoctor.lint.rules.adapter.saved_weights import saved_weight_problems
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.repo import ADAPTER_CONFIG, ModelRepo
from hfdoctor.repo.modelfile import modelfile
from hfdoctor.weights.adapter import cached_hub_id, local_path, quantized_copy, registry_release


@rule("ADP001", "adapter-inconsistent", Severity.ERROR, fix=FixAvailability.SOMETIMES)
def adapter_inconsistent(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A PEFT adapter's config, weights and card disagree with each other or with the base model.

    Why: PEFT, vLLM (--enable-lora) and TGI load an adapter onto the base model that
    adapter_config.json names, creating LoRA layers for target_modules with rank r and
    copying the saved A/B matrices in. Each disagreement fails there or serves something
    else than what was trained.

    What is flagged:
    - base_model_name_or_path is a folder of the training machine (`/content/model`,
      `outputs/checkpoint-500`): nobody else can load it (warning; unsafe fix: the card's
      base_model; a safe one when the folder is a Hugging Face cache download,
      `~/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/<commit>`, whose name is the
      Hub repo itself); a quantized copy (`unsloth/...-bnb-4bit`, GPTQ, AWQ): servers and
      merges load that lossy copy (warning); a model of another family than the card's
      base_model (error); no base named at all (error), except for an adapter of a model that
      is not a transformers model (auto_mapping of diffusers' UNet2DConditionModel or DINOv3's
      DinoVisionTransformer; an SD/SDXL UNet LoRA of to_q/to_k/to_v with no task_type): PEFT
      has no name to record for it (info);
    - adapter weights that hold no tensor at all (an empty state dict: the 443-byte
      adapter_model.bin that alpaca-lora's `model.state_dict` override saves under a newer
      PEFT, which loads it and serves the base unchanged), or that torch.load cannot read (a
      text placeholder, a zip archive cut short by an interrupted upload): error;
    - no adapter weights (or only the parts of one split to pass an upload limit,
      `adapter_model.safetensors.partaa`/`.partab`: PEFT cannot read them until they are
      joined with `cat adapter_model.safetensors.part* > adapter_model.safetensors`), LoRA
      A/B ranks that differ from r/rank_pattern or from each other (PEFT's load fails with
      a size mismatch: error), target_modules that no saved weight matches (the base has no
      such module, warning), and saved LoRA weights for
      modules target_modules does not name (PEFT ignores them, warning);
    - shapes that do not fit the base when hfdoctor knows its release (hidden size, layer
      count): error;
    - a tokenizer with ids beyond the base's embedding rows (the base's config.json
      vocab_size, read from --upstream DIR or the cache) while the adapter saves no
      embeddings: the first prompt with an added token indexes past the embedding (error;
      not reported when the base's config.json cannot be read);
    - an Ollama Modelfile that applies the adapter (ADAPTER) on a chat build while it was
      trained on the pre-trained release, or the other way round (warning): Ollama serves the
      LoRA deltas on weights they were not trained against;
    - modules_to_save or whole tensors saved beside the LoRA weights (a trained lm_head,
      resized embeddings): vLLM refuses the adapter ("only supports modules_to_save being
      None"), merge it to serve it (warning); a rank above 16 needs vLLM's --max-lora-rank
      (info);
    - an adapter_config.json with no peft_type whose keys are another trainer's (mlx-lm saves
      its training arguments under that name; a JAX export names its base `base_model` beside
      its LoRA rank; AdapterHub's `adapters` library saves its bottleneck config under `config`
      and its base as `model_name`, its weights as pytorch_adapter.bin; a bare {rank, alpha,
      dropout}, mlx-lm's lora_parameters saved alone) is not a PEFT config: info, and the PEFT
      checks above are skipped; a folder with no weight file at all is still an error. An
      adapter_config.json with none of the keys any adapter trainer writes (a Wi-Fi tool's
      network-adapter settings) is not adapter metadata at all: info, nothing else.

    Example: a LoRA of HuggingFaceTB/SmolLM2-135M-Instruct saved by PEFT from the folder
    it was trained from: base_model_name_or_path is that absolute path, while the card
    says base_model: HuggingFaceTB/SmolLM2-135M-Instruct (warning). The same adapter, with
    its base named, under a card whose base_model is meta-llama/Llama-3.2-1B-Instruct is
    an error: another family.

    Fix: sometimes; when the config names a folder of the training machine, safe when that
    folder is a Hugging Face cache download (the repo its name holds), else unsafe: the card's
    base_model (the card may be wrong too). The other
    disagreements have no automatic fix: they are the trainer's to redo.
    """
    yield from _modelfile_problems(repo, self)
    config = repo.adapter_config
    if config is None:
        return
    if not repo.describes_adapter:
        yield self.finding(
            repo, "adapter_config.json holds none of the keys an adapter trainer writes (PEFT's peft_type, r, "
            "base_model_name_or_path; mlx-lm's, AdapterHub's): it is another program's file of that name, not "
            "adapter metadata, and hfdoctor does not check it as an adapter.",
            file=ADAPTER_CONFIG, severity=Severity.INFO,
        )
        return
    if "peft_type" not in config and (other := _other_trainer(config)):  # PEFT always saves peft_type
        yield from _not_peft(repo, self, config, other)
        return
    base = config.get("base_model_name_or_path")
    yield from _base_problems(repo, self, config, base if isinstance(base, str) else None)
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        return  # other PEFT methods (IA3, prompt tuning...) store other tensors
    yield from saved_weight_problems(repo, self, config, base)


def _other_trainer(config: dict[str, Any]) -> str | None:
    """What wrote an adapter_config.json that is not PEFT's, when its keys say so: mlx-lm saves its
    training arguments under that name (fine_tune_type, lora_parameters, the base as `model`); other
    trainers export a LoRA's rank and alpha beside its base (a JAX tunix export: `base_model`);
    AdapterHub's `adapters` library nests its bottleneck config under `config` beside `model_name`,
    `model_class` and its `version` ("adapters.1.0.1")."""
    if "fine_tune_type" in config or "lora_parameters" in config:
        return "mlx-lm's training arguments"
    if "rank" in config and ("alpha" in config or "scale" in config):  # PEFT's rank is `r`
        return "another trainer's LoRA hyperparameters (rank and alpha, as mlx-lm's lora_parameters)"
    version = str(config.get("version", ""))
    if isinstance(config.get("config"), dict) and isinstance(config.get("model_name"), str) \
            and ("model_class" in config or version.startswith(("adapters.", "adapter-transformers"))):
        return "an AdapterHub (adapters library) adapter configuration"
    if any(k in config for k in ("lora_rank", "lora_alpha", "target_modules")) \
            and any(isinstance(config.get(k), str) for k in ("model", "base_model")):
        return "another trainer's adapter description"
    return None


def _not_peft(repo: ModelRepo, self: Rule, config: dict[str, Any], what: str) -> Iterator[Finding]:
    """PEFT's checks do not apply to another trainer's adapter_config.json, but a folder with no weight
    file at all still has nothing to load."""
    mlx = what.startswith("mlx-lm")
    base = next((v for k in ("model", "base_model", "model_name") if isinstance(v := config.get(k), str) and v.strip()),
                None)
    yield self.finding(
        repo,
        f"adapter_config.json has no peft_type: it is {what}, not a PEFT config"
        + (f" (its base: {base!r})" if base else "") + ". PEFT, vLLM and TGI cannot load this folder as an "
        "adapter; hfdoctor does not check it as a PEFT one.",
        file=ADAPTER_CONFIG, severity=Severity.INFO,
    )
    if not repo.weight_files:
        yield self.finding(repo, "adapter_config.json but no adapter_model.safetensors (or .bin)"
                           + (", nor mlx-lm's adapters.safetensors" if mlx else "")
                           + ": there are no adapter weights to load.", file=ADAPTER_CONFIG)


# Attention projections of diffusers' UNets and transformers (Stable Diffusion, SDXL, Flux); no
# transformers language model names its modules so.
DIFFUSERS_MODULES = frozenset({"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj",
                               "to_add_out"})


def non_transformers_base(config: dict[str, Any]) -> str | None:
    """What a PEFT config adapts when that is not a transformers model: PEFT records the class of such
    a model in auto_mapping (diffusers' UNet2DConditionModel, DINOv3's DinoVisionTransformer) and has
    no name to write as its base; an SD or SDXL UNet LoRA saved without auto_mapping targets only
    diffusers' attention projections and has no task type."""
    mapping = config.get("auto_mapping")
    library = mapping.get("parent_library") if isinstance(mapping, dict) else None
    if isinstance(library, str) and library and not library.startswith("transformers"):
        return f"{mapping.get('base_model_class') or 'a model'} of {library.split('.')[0]}"
    targets = config.get("target_modules")
    if config.get("task_type") is None and isinstance(targets, list) and targets \
            and set(map(str, targets)) <= DIFFUSERS_MODULES:
        return "a diffusers model (its attention projections " + ", ".join(sorted(map(str, targets))) + ")"
    return None


def _base_problems(repo: ModelRepo, self: Rule, config: dict[str, Any], base: str | None) -> Iterator[Finding]:
    pointer = "/base_model_name_or_path" if "base_model_name_or_path" in config else None
    if (not base or not base.strip()) and (other := non_transformers_base(config)):
        yield self.finding(repo, f"adapter_config.json names no base_model_name_or_path: it adapts {other}, not a "
                           "transformers model, which has no Hub name for PEFT to record; it is loaded onto the "
                           "model its code builds (PeftModel.from_pretrained(model, folder)). Name the base in "
                           "the model card.", file=ADAPTER_CONFIG, pointer=pointer, severity=Severity.INFO)
        return
    if not base or not base.strip():
        yield self.finding(repo, "adapter_config.json names no base_model_name_or_path: PEFT, vLLM and the Hub "
                           "cannot tell which model it adapts.", file=ADAPTER_CONFIG, pointer=pointer)
        return
    card_bases = [b for b in lineage_mod.card_base_models(repo) if not local_path(b)]
    cached = cached_hub_id(base) if local_path(base) else None
    if cached is not None:
        # The path itself names the Hub repo the weights were trained from: nothing is guessed.
        edit = json_set_value(repo, ADAPTER_CONFIG, "/base_model_name_or_path", cached)
        yield self.finding(
            repo,
            f"base_model_name_or_path is {base!r}, the training machine's Hugging Face cache download of {cached}: "
            f"PEFT's AutoPeftModel, vLLM and the Hub's model tree cannot find that path anywhere else. Name {cached}.",
            file=ADAPTER_CONFIG, pointer="/base_model_name_or_path", severity=Severity.WARNING,
            fix=Fix(f"set base_model_name_or_path to {cached}", (edit,), Applicability.SAFE) if edit else None,
        )
    elif local_path(base):
        fix = None
        if len(card_bases) == 1:
            edit = json_set_value(repo, ADAPTER_CONFIG, "/base_model_name_or_path", card_bases[0])
            fix = Fix(f"set base_model_name_or_path to {card_bases[0]}", (edit,), Applicability.UNSAFE) if edit else None
        yield self.finding(
            repo,
            f"base_model_name_or_path is {base!r}, a folder of the machine that trained it: PEFT's "
            "AutoPeftModel, vLLM and the Hub's model tree cannot find the base anywhere else. Name the Hub repo"
            + (f" (the card says {card_bases[0]})." if card_bases else "."),
            file=ADAPTER_CONFIG, pointer="/base_model_name_or_path", severity=Severity.WARNING, fix=fix,
        )
    elif quantized_copy(base):
        full = registry_release(base)
        yield self.finding(
            repo,
            f"base_model_name_or_path is {base!r}, a quantized copy made for QLoRA training: AutoPeftModel and "
            "merges load that lossy copy (PEFT merges into quantized layers with rounding errors, and not at all "
            "into GPTQ or AWQ ones), so the model users get is not the one the adapter is meant for. Name the "
            "16-bit model" + (f" ({full})" if full else "") + " the adapter is served on.",
            file=ADAPTER_CONFIG, pointer="/base_model_name_or_path", severity=Severity.WARNING,
        )
    fam = registry.family_of_repo_id(base) if not local_path(base) else None
    others = [b for b in card_bases if (f := registry.family_of_repo_id(b)) is not None and fam and f is not fam]
    if others:
        yield self.finding(
            repo,
            f"adapter_config.json adapts {base!r} ({fam.display}) but the model card's base_model is {others[0]!r} "
            f"({registry.family_of_repo_id(others[0]).display}): one of them is wrong, and loaders follow "
            "adapter_config.json.",
            file=ADAPTER_CONFIG, pointer="/base_model_name_or_path",
        )


# Ollama library models whose default tags are the chat builds (the pre-trained ones are *-text*).
OLLAMA_CHAT_LIBRARY = ("llama2", "llama3", "llama3.1", "llama3.2", "llama3.3", "mistral", "mixtral", "gemma", "gemma2",
                       "gemma3", "qwen", "qwen2", "qwen2.5", "qwen3", "phi3", "phi3.5", "phi4", "tinyllama", "smollm2",
                       "codellama", "deepseek-r1")


def _served_stage(base: str) -> bool | None:
    """Whether what a Modelfile's FROM names is a pre-trained build (True), a chat one (False) or unknown."""
    value = base.strip().replace("\\", "/")
    if "/" in value or value.startswith(".") or value.lower().endswith(".gguf"):
        name = value.rstrip("/").rsplit("/", 1)[-1].removesuffix(".gguf").removesuffix(".GGUF")
        return release_stage(name) if name else None
    name, _, tag = value.lower().partition(":")
    if "text" in tag or "base" in tag:
        return True
    if any(w in tag for w in ("instruct", "chat")) or name in OLLAMA_CHAT_LIBRARY:
        return False
    return None


def _modelfile_problems(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """The Modelfile applies an adapter on another stage of its base than it was trained on."""
    found = modelfile(repo)
    if found is None or found.base is None:
        return
    served = _served_stage(found.base)
    for path, line in found.adapters:
        folder = found.adapter_folder(path)
        config_file = f"{folder}/{ADAPTER_CONFIG}" if folder else ADAPTER_CONFIG
        config = repo.json_object(config_file) if folder is not None and repo.exists(config_file) else None
        trained = (config or {}).get("base_model_name_or_path")
        if served is None or not isinstance(trained, str) or local_path(trained):
            continue
        stage = release_stage(trained)
        if stage is None or stage == served:
            continue
        what = {True: "the pre-trained release", False: "a chat (instruct) build"}
        yield self.finding(
            repo,
            f"the Modelfile applies the adapter {path!r} on {found.base!r}, {what[served]}, but the adapter was "
            f"trained on {trained!r}, {what[stage]}: its LoRA deltas were learnt against other weights, so Ollama "
            "serves something it was never trained as. FROM the model the adapter was trained on.",
            file=found.file, line=line, severity=Severity.WARNING,
        )


RULES = [adapter_inconsistent]
