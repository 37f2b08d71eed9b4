"""generation_config.json: the defaults servers generate with when a request does not say."""

from __future__ import annotations

import json
from typing import Any, Iterator

from hfdoctor import lineage as lineage_mod
from hfdoctor.chat.turns import turn_stop
from hfdoctor.lint.edits.json_edits import json_add_to_id_list, json_set_value, json_set_values
from hfdoctor.findings import Applicability, Edit, Facet, FacetKind, Finding, Fix, Severity
from hfdoctor.repo import GENAI_CONFIG, ModelRepo, as_id_list
from hfdoctor.weights.quantized import declared as declared_quantization
from hfdoctor.repo.head import encoder_decoder
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule

GEN = "generation_config.json"
# Flags only sampling uses, and the value at which transformers considers them unset
# (GenerationConfig.validate: a greedy config with another value is invalid).
SAMPLING_FLAGS = {"temperature": 1.0, "top_p": 1.0, "top_k": 50, "min_p": None, "typical_p": 1.0,
                  "epsilon_cutoff": 0.0, "eta_cutoff": 0.0}
# A default reply length below this cuts ordinary answers short (vLLM takes max_new_tokens
# from generation_config.json as every request's default max_tokens).
SHORT_REPLY_TOKENS = 256


# How generation stops or samples: no problem of a model that generates no text (hfdoctor.lint.policy).
GENERATION = (Facet(FacetKind.GENERATION),)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _sampling_flags(gen: dict[str, Any]) -> dict[str, Any]:
    """The sampling-only flags a config sets to a non-neutral value."""
    return {k: gen[k] for k, neutral in SAMPLING_FLAGS.items()
            if _is_number(gen.get(k)) and (neutral is None or gen[k] != neutral)}


def _new_generation_config(config: dict[str, Any], stop_id: int | None) -> str | None:
    """generation_config.json as transformers writes it (indent 2, sorted keys), holding
    config.json's bos/eos/pad ids plus the end-of-turn id; None when there is no eos."""
    eos = as_id_list(config.get("eos_token_id"))
    if stop_id is not None and stop_id not in eos:
        eos.append(stop_id)
    if not eos:
        return None
    data: dict[str, Any] = {"eos_token_id": eos[0] if len(eos) == 1 else eos}
    for key in ("bos_token_id", "pad_token_id"):
        if isinstance(config.get(key), int) and not isinstance(config.get(key), bool):
            data[key] = config[key]
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


@rule("CFG004", "generation-config", Severity.WARNING, fix=FixAvailability.SOMETIMES)
def generation_config(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """generation_config.json is missing on a chat model, or its eos/sampling/length defaults break serving.

    Why: transformers' generate(), vLLM and TGI take their defaults from
    generation_config.json: the ids to stop on, and (vLLM since 0.6, whatever do_sample
    says) temperature/top_p/top_k/max_new_tokens. Without the file they fall back on
    config.json's single eos and greedy decoding (LLaMA-Factory #7454). mlx-lm before
    0.30.1 stopped on config.json's eos_token_id (and the tokenizer's eos) only; since
    0.30.1 (ml-explore/mlx-lm#701) it reads generation_config.json's too.

    What is flagged:
    - a chat model that ships weights but no generation_config.json, when config.json's
      eos_token_id misses the template's end of turn or the model reasons with upstream
      sampling (safe fix: create it with config.json's bos/eos/pad ids plus the template's
      end-of-turn id, nothing else). When config.json's eos ids already include the end of
      turn, servers stop right without the file: nothing is reported; nor for an ONNX Runtime
      GenAI export, whose runtime reads genai_config.json instead (eos-not-end-of-turn checks
      its stop ids); an MLX quantized conversion (only mlx-lm loads it, and mlx-lm takes
      sampling from its caller) is asked for the file only for its stop ids;
    - generation_config.json stops on the end-of-turn token but config.json's
      eos_token_id does not: mlx-lm before 0.30.1 never stops (info: current engines read
      generation_config.json; safe fix: add the id to config.json);
    - sampling flags (temperature, top_p, top_k...) without `do_sample: true`:
      transformers 4.x (checked on 4.46) raises ValueError in save_pretrained, so the next
      fine-tune cannot save a checkpoint (transformers #29988, LLaMA-Factory #2837), 5.x
      ignores them while vLLM samples with them: engines disagree (unsafe fix:
      `do_sample: true`, which makes transformers sample too);
    - greedy defaults on a reasoning model whose upstream generation_config.json samples
      (Qwen3 hybrid, DeepSeek-R1, SmolLM3): greedy decoding loops in the thinking
      (mlx-lm #139) (unsafe fix: upstream's sampling values);
    - max_new_tokens / max_length below 256: every reply is cut there by default. On an
      encoder-decoder (T5, BART, Blenderbot...) it bounds the decoder's output only, and seq2seq
      checkpoints ship their task's tuned length (facebook/bart-large-cnn 142): info.

    Example: a Qwen3 fine-tune exported without generation_config.json, whose config.json
    says eos_token_id 151643 (<|endoftext|>): served, it never stops on <|im_end|>.

    Fix: sometimes; safe where it only adds stop ids (create generation_config.json with
    config.json's ids and the end-of-turn id; add the end-of-turn id to config.json's
    eos_token_id), unsafe where it changes how the model decodes (`do_sample: true`,
    upstream's sampling values). None for a short max_new_tokens: the author chose it.
    """
    config = repo.config
    if config is None or GEN in repo.problems:
        return
    lineage = lineage_mod.detect(repo)
    fam, variant = lineage.family_ref, lineage.variant_ref
    chat = bool(lineage_mod.chat_evidence(repo, fam, variant)) and repo.chat_template is not None
    stop = turn_stop(repo)
    sampling = variant.sampling if variant is not None and lineage.certain else {}
    reasoning = variant is not None and variant.thinking in ("hybrid", "always") and sampling.get("do_sample") is True
    gen = repo.generation_config
    if gen is None:
        if repo.eos_ids_source == GENAI_CONFIG:
            return  # ONNX Runtime GenAI reads its stop ids and search options from genai_config.json
        cfg_eos = as_id_list(config.get("eos_token_id"))
        # mlx-lm reads only eos_token_id from generation_config.json (mlx_lm/utils.py) and takes sampling
        # from its caller, and only mlx-lm loads an MLX quantized conversion: sampling values change nothing.
        mlx = (found := declared_quantization(config)) is not None and found.method == "mlx"
        greedy_loops = reasoning and not mlx
        # Harm only when config.json's eos misses the end of turn, or greedy decoding loops a reasoning model.
        harm = (stop is not None and stop[1] not in cfg_eos) or greedy_loops
        if chat and harm and (repo.weight_files or repo.weight_dirs):
            yield _missing(repo, self, config, stop, sampling if greedy_loops else {})
        return
    gen_eos, cfg_eos = as_id_list(gen.get("eos_token_id")), as_id_list(config.get("eos_token_id"))
    if stop is not None and stop[1] in gen_eos and "eos_token_id" in config and stop[1] not in cfg_eos:
        edit = json_add_to_id_list(repo, "config.json", "/eos_token_id", stop[1])
        yield self.finding(
            repo,
            f"{GEN} stops on the end-of-turn {stop[0]!r} ({stop[1]}) but config.json's eos_token_id "
            f"{cfg_eos} does not: mlx-lm before 0.30.1 (which read only config.json's eos) never stops after a "
            "reply; transformers, vLLM, TGI and current mlx-lm read generation_config.json. Add "
            f"{stop[1]} to config.json's eos_token_id for older stacks.",
            file="config.json", pointer="/eos_token_id", severity=Severity.INFO,
            fix=Fix(f"add {stop[1]} to config.json eos_token_id", (edit,)) if edit else None,
        )
    flags = _sampling_flags(gen)
    if flags and gen.get("do_sample") is not True:
        shown = ", ".join(f"{k}={v}" for k, v in flags.items())
        edit = json_set_value(repo, GEN, "/do_sample", True)
        yield self.finding(
            repo,
            f"{GEN} sets {shown} but do_sample is {gen.get('do_sample', 'unset')}: transformers 4.x raises "
            "ValueError in save_pretrained (a fine-tune of this model cannot save its checkpoints), 5.x "
            "generates greedily and ignores them, while vLLM samples with them. Set do_sample: true if sampling "
            "is meant, else remove the flags.",
            file=GEN, pointer="/do_sample" if "do_sample" in gen else None,
            fix=Fix("set do_sample: true in generation_config.json", (edit,), Applicability.UNSAFE) if edit else None,
        )
    elif chat and reasoning and gen.get("do_sample") is not True:
        yield _greedy_reasoning(repo, self, gen, sampling)
    seq2seq = encoder_decoder(repo)
    for key in ("max_new_tokens", "max_length"):
        value = gen.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < SHORT_REPLY_TOKENS:
            if seq2seq:
                # The decoder's output alone: a summariser's or a dialogue model's tuned length default
                # (facebook/bart-large-cnn 142, blenderbot_small-90M 128), not a prompt eating the budget.
                yield self.finding(
                    repo,
                    f"{GEN} sets {key} {value}: generate() stops each output of this encoder-decoder after {value} "
                    "tokens (the decoder's output only, not the input). Seq2seq checkpoints ship their task's "
                    "length default; raise it if longer outputs are meant.",
                    file=GEN, pointer=f"/{key}", severity=Severity.INFO, facets=GENERATION,
                )
                continue
            yield self.finding(
                repo,
                f"{GEN} sets {key} {value}: generate() (and vLLM, which takes max_new_tokens as every request's "
                f"default max_tokens) stops every reply after {value} tokens"
                + (" counting the prompt" if key == "max_length" else "") + ". Remove it or raise it.",
                file=GEN, pointer=f"/{key}", facets=GENERATION,
            )


def _missing(repo: ModelRepo, self: Rule, config: dict[str, Any], stop: tuple[str, int] | None,
             sampling: dict[str, Any]) -> Finding:
    cfg_eos = as_id_list(config.get("eos_token_id"))
    consequences = [f"servers stop only on config.json's eos_token_id {cfg_eos or '(none)'}"]
    if stop is not None and stop[1] not in cfg_eos:
        consequences[0] += f", never on the end-of-turn {stop[0]!r} ({stop[1]}): replies run on"
    if sampling:
        consequences.append(f"decode greedily, where upstream samples ({_sampling_text(sampling)}): "
                            "greedy reasoning loops")
    text = _new_generation_config(config, stop[1] if stop else None)
    fix = Fix("create generation_config.json with config.json's ids and the end-of-turn id",
              (Edit(GEN, 0, 0, text, create=True),)) if text else None
    return self.finding(
        repo,
        f"this chat model ships no {GEN}: " + "; and ".join(consequences)
        + ". Create it (save_pretrained writes one) with the ids generation must stop on"
        + (f", and {_sampling_text(sampling)} as in {sampling.get('source')}" if sampling else "") + ".",
        file=GEN, fix=fix, facets=GENERATION,
    )


def _sampling_text(sampling: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sampling.items() if k != "source")


def _greedy_reasoning(repo: ModelRepo, self: Rule, gen: dict[str, Any], sampling: dict[str, Any]) -> Finding:
    wanted = {f"/{k}": v for k, v in sampling.items() if k != "source"}
    edit = json_set_values(repo, GEN, wanted)
    return self.finding(
        repo,
        f"{GEN} decodes greedily (do_sample {gen.get('do_sample', 'unset')}) but this is a reasoning model whose "
        f"upstream samples ({_sampling_text(sampling)}, {sampling.get('source')}): greedy decoding repeats itself "
        "in long thinking and never ends it (mlx-lm #139). Use upstream's sampling defaults.",
        file=GEN, pointer="/do_sample" if "do_sample" in gen else None,
        fix=Fix("use upstream's sampling defaults in generation_config.json", (edit,), Applicability.UNSAFE)
        if edit else None, facets=GENERATION,
    )


RULES = [generation_config]
