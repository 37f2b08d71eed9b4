"""quantization-inconsistent: quantized weights against quantization_config and the architecture."""

from __future__ import annotations

from typing import Iterator

from hfdoctor.lint.edits.json_edits import json_remove_member
from hfdoctor.findings import Finding, Fix, Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.weights.expected import CannotVerify, ConfigRejected, expected_layout
from hfdoctor.weights.headers import repo_weights
from hfdoctor.weights.quantized import (Declared, Module, declared, dense_floats, expected_bits, format_matches,
                                        quantized_modules)

EXAMPLES = 3


def _names(modules: list[Module]) -> str:
    shown = ", ".join(m.prefix for m in modules[:EXAMPLES])
    return shown + (f" and {len(modules) - EXAMPLES} more" if len(modules) > EXAMPLES else "")


@rule("WGT006", "quantization-inconsistent", Severity.ERROR, fix=FixAvailability.SAFE)
def quantization_inconsistent(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """Quantized weights do not match `quantization_config` or the architecture.

    Why: a loader picks its quantized kernels from config.json's quantization_config
    (MLX: "quantization") and expects the tensors that method writes. A config left
    over on plain 16-bit weights (unsloth #1601: a merged_16bit export keeping the 4-bit
    config) makes vLLM and SGLang fail and transformers re-quantize on load; packed
    tensors without a config load as unknown tensors while the real weights stay random;
    another method, other bits or another group size than the packing unpacks garbage.

    How: from the safetensors headers alone, each quantized module is recognised by the
    tensors its format writes (GPTQ and AWQ qweight/qzeros/scales, compressed-tensors
    weight_packed/weight_scale, fp8 weight + weight_scale_inv, bitsandbytes 4-bit and
    8-bit, gpt-oss MXFP4 _blocks/_scales, MLX weight/scales/biases); its dense shape and
    bits follow from the packed shapes. They are compared with the declared method,
    bits, group size and fp8 block size, and with the shapes config.json's architecture
    gives the unquantized model. A method hfdoctor does not know is reported as info:
    not verified.

    Example: a bf16 checkpoint whose config.json keeps the quantization_config of its
    bitsandbytes nf4 copy (unsloth #1601's merged_16bit export): every tensor is plain
    float (error).

    Fix: safe; removing quantization_config (or "quantization") when every tensor is
    plain float: nothing is quantized. Other cases have no automatic fix.
    """
    config = repo.config
    if config is None:
        return
    view = repo_weights(repo)
    tensors = view.main_tensors()
    if not tensors:
        return
    decl = declared(config)
    modules = quantized_modules(tensors, decl)
    where = view.main_files[0] if view.main_files else None
    if decl is None:
        if modules:
            formats = sorted({m.format for m in modules})
            yield self.finding(
                repo,
                f"the weights are quantized ({', '.join(formats)}: {_names(modules)}) but config.json declares no "
                "quantization_config: loaders read the packed tensors as unknown ones and leave the real weights "
                "randomly initialised. Ship the quantization_config the quantizer wrote.",
                file="config.json",
            )
        return
    if dense_floats(tensors):
        edit = json_remove_member(repo, "config.json", f"/{decl.key}")
        yield self.finding(
            repo,
            f"config.json declares {decl.key} ({decl.method}) but every tensor is plain float: nothing is quantized "
            "(a 16-bit merge that kept the quantized model's config?). Loaders build quantized layers and look for "
            "packed tensors: vLLM and SGLang fail to load; transformers with bitsandbytes builds 4-bit layers around "
            "the plain weights and fails at the first forward. Remove it.",
            file="config.json", pointer=f"/{decl.key}",
            fix=Fix(f"remove {decl.key} from config.json", (edit,)) if edit else None,
        )
        return
    if not decl.known:
        yield self.finding(
            repo, f"the weights are quantized with {decl.method!r}, a method hfdoctor does not know: not verified.",
            file="config.json", pointer=f"/{decl.key}", severity=Severity.INFO,
        )
        return
    if not modules:
        yield self.finding(
            repo,
            f"config.json declares {decl.method} quantization but no tensor has the layout {decl.method} writes "
            "(and not all are plain floats): the loader will not find its packed weights.",
            file="config.json", pointer=f"/{decl.key}",
        )
        return
    declared_problems = list(_against_declared(repo, self, decl, modules))
    yield from declared_problems
    if not declared_problems:  # shapes are derived with the declared group size: only then comparable
        yield from _against_architecture(repo, self, config, decl, modules, where)


def _against_declared(repo: ModelRepo, self: Rule, decl: Declared, modules: list[Module]) -> Iterator[Finding]:
    other = [m for m in modules if not format_matches(decl, m)]
    if other:
        formats = sorted({m.format for m in other})
        yield self.finding(
            repo,
            f"config.json declares {decl.method} but {len(other)} modules are stored as {', '.join(formats)} "
            f"({_names(other)}): the {decl.method} kernels would unpack another layout into garbage.",
            file="config.json", pointer=f"/{decl.key}",
        )
        return
    broken = [m for m in modules if m.problem]
    if broken:
        yield self.finding(repo, f"the packed tensors contradict each other: {broken[0].problem}"
                           + (f" (and {len(broken) - 1} more modules)" if len(broken) > 1 else "") + ".",
                           file="config.json", pointer=f"/{decl.key}")
    wrong_bits: dict[tuple[int | None, int | None], list[Module]] = {}
    for m in modules:
        want = expected_bits(decl, m)
        if m.bits is not None and want is not None and m.bits != want:
            wrong_bits.setdefault((m.bits, want), []).append(m)
    for (got, want), group in sorted(wrong_bits.items(), key=lambda kv: -len(kv[1])):
        yield self.finding(
            repo,
            f"config.json declares {want}-bit {decl.method} but the packing of {len(group)} modules is {got}-bit "
            f"({_names(group)}){' with group_size ' + str(decl.group_size) if decl.group_size else ''}: "
            "the kernels would read every weight wrongly. Make bits (and group_size) say what the quantizer used.",
            file="config.json", pointer=f"/{decl.key}",
        )


def _against_architecture(repo: ModelRepo, self: Rule, config: dict, decl: Declared, modules: list[Module],
                          where: str | None) -> Iterator[Finding]:
    dense_config = {k: v for k, v in config.items() if k not in ("quantization_config", "quantization")}
    try:
        expected = expected_layout(dense_config, repo.budget, repo.root)
    except (CannotVerify, ConfigRejected):
        return
    wrong = []
    for m in modules:
        want = expected.tensors.get(m.dense_name)
        if want is None:
            continue  # renamed by the quantizer (mlx-lm's switch_mlp experts): not compared
        if m.dense_shape is not None and tuple(m.dense_shape) != tuple(want):
            wrong.append(f"{m.prefix} unpacks to {list(m.dense_shape)}, config needs {list(want)}")
        elif m.dense_shape is None and m.dense_numel is not None and m.dense_numel != _numel(want):
            wrong.append(f"{m.prefix} holds {m.dense_numel} values, config needs {list(want)}")
    if wrong:
        yield self.finding(
            repo,
            f"{len(wrong)} quantized modules do not fit the {expected.model_class} config.json declares: "
            + "; ".join(wrong[:EXAMPLES]) + ". Ship the config of the model that was quantized.",
            file=where,
        )


def _numel(shape) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


RULES = [quantization_inconsistent]
