"""Quantized weights, read from the safetensors headers alone: which format, which bits, which shapes.

Each quantized Linear is stored as a few tensors beside each other. The layouts below are
what the quantizers write (checked against real output where the library runs on CPU:
mlx-lm 0.32 `convert`, compressed-tensors 0.20 `pack-quantized`, bitsandbytes 0.50 4-bit
and 8-bit through transformers; the others from the loaders' own code):

- gptq (AutoGPTQ/GPTQModel QuantLinear): `qweight` I32 [in*bits/32, out], `qzeros` I32
  [groups, out*bits/32], `scales` F16 [groups, out], `g_idx` I32 [in];
- awq (AutoAWQ WQLinear_GEMM): `qweight` I32 [in, out*bits/32], `qzeros` I32 [groups,
  out*bits/32], `scales` F16 [groups, out];
- compressed-tensors pack-quantized: `weight_packed` I32 [out, in*bits/32], `weight_scale`
  [out, groups], `weight_shape` I64 [2]; float-/int-quantized: `weight` F8/I8 [out, in] and
  `weight_scale`;
- fp8 (transformers FineGrainedFP8, DeepSeek-V3/R1): `weight` F8_E4M3 [out, in] and
  `weight_scale_inv` F32 [ceil(out/b0), ceil(in/b1)] for weight_block_size [b0, b1];
- bitsandbytes 4-bit: `weight` U8 [out*in/2, 1] with `weight.absmax`, `weight.quant_map`,
  `weight.quant_state.bitsandbytes__nf4|fp4`; 8-bit: `weight` I8 [out, in] with `SCB` F32 [out];
- mxfp4 (gpt-oss): `X_blocks` U8 [experts, out, in/32, 16] and `X_scales` U8 [experts, out, in/32]
  for the parameter X of shape [experts, in, out];
- mlx (mlx-lm, config "quantization"): `weight` U32 [out, in*bits/32], `scales` and (affine
  mode) `biases` [out, in/group_size].

From those shapes each module's dense shape (out, in) and its bits are derived, so the
declared quantization_config and the architecture can both be checked.
"""

from __future__ import annotations

import bisect

import math
from dataclasses import dataclass, field
from typing import Any

from hfdoctor.weights.headers import TensorInfo

DENSE_FLOATS = {"BF16", "F16", "F32", "F64"}
# The suffix that marks each format, tried in this order (longest first where they overlap).
MARKERS = (
    (".weight.quant_state.bitsandbytes__nf4", "bitsandbytes-4bit"),
    (".weight.quant_state.bitsandbytes__fp4", "bitsandbytes-4bit"),
    (".weight_packed", "compressed-tensors"),
    (".weight_scale_inv", "fp8"),
    (".qweight", "gptq-or-awq"),
    (".SCB", "bitsandbytes-8bit"),
    ("_blocks", "mxfp4"),
    (".biases", "mlx"),
    (".weight_scale", "compressed-tensors"),
)
# quant_method values (and MLX's "quantization" block) as the format names above.
METHODS = {"gptq": "gptq", "awq": "awq", "fp8": "fp8", "bitsandbytes": "bitsandbytes", "mxfp4": "mxfp4",
           "compressed-tensors": "compressed-tensors", "mlx": "mlx"}


@dataclass
class Declared:
    """What config.json says the weights are."""

    method: str  # a METHODS value, or the unknown quant_method as written
    key: str  # "quantization_config" or "quantization"
    bits: int | None = None
    group_size: int | None = None
    block: tuple[int, int] | None = None  # fp8 weight_block_size
    bnb_bits: int | None = None
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # mlx per-module bits/group_size

    @property
    def known(self) -> bool:
        return self.method in METHODS.values()


def declared(config: dict[str, Any]) -> Declared | None:
    qc = config.get("quantization_config")
    mlx = config.get("quantization")
    if isinstance(mlx, dict) or (isinstance(qc, dict) and "quant_method" not in qc and "bits" in qc):
        block = mlx if isinstance(mlx, dict) else qc
        overrides = {k: {"bits": _int(v.get("bits")), "group_size": _group(v.get("group_size"))}
                     for k, v in block.items() if isinstance(v, dict)}
        return Declared("mlx", "quantization" if isinstance(mlx, dict) else "quantization_config",
                        _int(block.get("bits")), _group(block.get("group_size")), overrides=overrides)
    if not isinstance(qc, dict):
        return None
    method = str(qc.get("quant_method", "unknown")).lower()
    if method in ("gptq", "awq"):
        return Declared(method, "quantization_config", _int(qc.get("bits", qc.get("w_bit"))),
                        _group(qc.get("group_size", qc.get("q_group_size"))))
    if method == "fp8":
        size = qc.get("weight_block_size")
        block = tuple(size) if isinstance(size, list) and len(size) == 2 and all(map(_group, size)) else None
        return Declared(method, "quantization_config", 8, block=block)
    if method == "bitsandbytes":
        bits = 4 if qc.get("load_in_4bit") or qc.get("_load_in_4bit") else 8 if qc.get("load_in_8bit") else None
        return Declared(method, "quantization_config", bnb_bits=bits)
    if method == "compressed-tensors":
        weights = [g.get("weights") for g in (qc.get("config_groups") or {}).values() if isinstance(g, dict)]
        weights = [w for w in weights if isinstance(w, dict)]
        first = weights[0] if weights else {}
        return Declared(method, "quantization_config", _int(first.get("num_bits")), _group(first.get("group_size")))
    return Declared(method, "quantization_config")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _group(value: Any) -> int | None:
    """A group size the shapes can be divided by: a positive integer. 0, -1 (GPTQ's "one
    group per row"), "64" or 64.0 say nothing checkable about the packing: None."""
    size = _int(value)
    return size if size is not None and size > 0 else None


@dataclass(frozen=True)
class Module:
    """One quantized module: its tensors, its format and what the shapes say."""

    prefix: str  # e.g. model.layers.0.self_attn.q_proj (mxfp4: the parameter, ...experts.gate_up_proj)
    format: str  # gptq | awq | compressed-tensors | fp8 | bitsandbytes-4bit | bitsandbytes-8bit | mxfp4 | mlx
    dense_name: str  # the tensor the unquantized checkpoint has in its place
    dense_shape: tuple[int, ...] | None  # derived from the packed shapes; None when they do not say
    dense_numel: int | None  # for formats that keep only the element count (bitsandbytes 4-bit)
    bits: int | None  # implied by the packing
    problem: str | None = None  # the packed tensors contradict each other


def _shape(parts: dict[str, TensorInfo], suffix: str) -> tuple[int, ...] | None:
    info = parts.get(suffix)
    return tuple(info.shape) if info is not None else None


def quantized_modules(tensors: dict[str, TensorInfo], decl: Declared | None) -> list[Module]:
    """Every quantized module of the checkpoint, in name order."""
    modules: list[Module] = []
    claimed: set[str] = set()
    names = sorted(tensors)
    for name in names:
        for marker, fmt in MARKERS:
            if not name.endswith(marker):
                continue
            prefix = name[: -len(marker)]
            if prefix in claimed:
                break
            # The names that start with `prefix` are one run of the sorted list: found by
            # bisection, not by a scan of every tensor per module (30,000 modules).
            parts = {}
            at = bisect.bisect_left(names, prefix)
            while at < len(names) and names[at].startswith(prefix):
                rest = names[at][len(prefix):]
                if rest.startswith((".", "_")):
                    parts[rest] = tensors[names[at]]
                at += 1
            module = _module(prefix, fmt, parts, decl)
            if module is not None:
                claimed.add(prefix)
                modules.append(module)
            break
    return modules


def _module(prefix: str, fmt: str, parts: dict[str, TensorInfo], decl: Declared | None) -> Module | None:
    if fmt == "gptq-or-awq":
        return _gptq_or_awq(prefix, parts, decl)
    if fmt == "mlx":
        return _mlx(prefix, parts, decl)
    if fmt == "mxfp4":
        blocks, scales = _shape(parts, "_blocks"), _shape(parts, "_scales")
        if blocks is None or scales is None or len(blocks) < 3 or parts["_blocks"].dtype != "U8":
            return None
        problem = None if blocks[:-1] == scales else f"{prefix}_scales is {list(scales)}, blocks need {list(blocks[:-1])}"
        dense = (*blocks[:-3], blocks[-2] * blocks[-1] * 2, blocks[-3])  # [.., in, out] after transpose
        return Module(prefix, "mxfp4", prefix, dense, None, 4, problem)
    weight = _shape(parts, ".weight")
    if fmt == "fp8":
        scale = _shape(parts, ".weight_scale_inv")
        if weight is None or len(weight) != 2:
            return None
        problem = None
        if decl is not None and decl.block and scale is not None:
            want = (-(-weight[0] // decl.block[0]), -(-weight[1] // decl.block[1]))  # ceil, exact for any int
            if scale != want:
                problem = f"{prefix}.weight_scale_inv is {list(scale)}, blocks of {list(decl.block)} need {list(want)}"
        return Module(prefix, "fp8", prefix + ".weight", weight, None, 8, problem)
    if fmt == "bitsandbytes-8bit":
        return Module(prefix, fmt, prefix + ".weight", weight, None, 8) if weight else None
    if fmt == "bitsandbytes-4bit":
        if weight is None:
            return None
        return Module(prefix, fmt, prefix + ".weight", None, math.prod(weight) * 2, 4)
    if fmt == "compressed-tensors":
        packed, scale = _shape(parts, ".weight_packed"), _shape(parts, ".weight_scale")
        if packed is not None and scale is not None and len(packed) == 2 and len(scale) == 2:
            group = decl.group_size if decl is not None and decl.group_size else None
            if group and scale[1] > 1:
                width = scale[1] * group
                bits = _packed_bits(packed[1], width)
                return Module(prefix, fmt, prefix + ".weight", (packed[0], width), None, bits)
            bits = decl.bits if decl is not None else None
            width = packed[1] * 32 // bits if bits else None
            return Module(prefix, fmt, prefix + ".weight", (packed[0], width) if width else None, None, bits)
        if weight is not None and len(weight) == 2:  # float- or int-quantized: the weight keeps its shape
            info = parts[".weight"]
            return Module(prefix, fmt, prefix + ".weight", weight, None, 8 if info.dtype.startswith(("F8", "I8")) else None)
    return None


def _gptq_or_awq(prefix: str, parts: dict[str, TensorInfo], decl: Declared | None) -> Module | None:
    qweight, scales = _shape(parts, ".qweight"), _shape(parts, ".scales")
    if qweight is None or scales is None or len(qweight) != 2 or len(scales) != 2:
        return None
    g_idx = _shape(parts, ".g_idx")
    out = scales[1]
    if qweight[1] == out:  # GPTQ packs along the input: [in*bits/32, out]
        in_features = g_idx[0] if g_idx else (scales[0] * decl.group_size if decl and decl.group_size and
                                               decl.group_size > 0 else None)
        bits = _packed_bits(qweight[0], in_features)
        return Module(prefix, "gptq", prefix + ".weight", (out, in_features) if in_features else None, None, bits)
    # AWQ packs along the output: [in, out*bits/32]
    bits = _packed_bits(qweight[1], out)
    return Module(prefix, "awq", prefix + ".weight", (out, qweight[0]), None, bits)


def _mlx(prefix: str, parts: dict[str, TensorInfo], decl: Declared | None) -> Module | None:
    weight, scales = _shape(parts, ".weight"), _shape(parts, ".scales")
    if weight is None or scales is None or len(weight) < 2 or weight[:-1] != scales[:-1]:
        return None
    override = _mlx_override(decl, prefix)
    group = override.get("group_size") if override else (decl.group_size if decl else None)
    if not group:
        return Module(prefix, "mlx", prefix + ".weight", None, None, None)
    in_features = scales[-1] * group
    bits = _packed_bits(weight[-1], in_features)
    return Module(prefix, "mlx", prefix + ".weight", (*weight[:-1], in_features), None, bits)


def _packed_bits(packed_words: int, features: int | None) -> int | None:
    """The bits per value when `features` values are packed into `packed_words` 32-bit words;
    None when the shapes do not divide (a dimension of 0 or less says nothing)."""
    if not features or features <= 0 or (packed_words * 32) % features:
        return None
    return packed_words * 32 // features


def _mlx_override(decl: Declared | None, prefix: str) -> dict[str, Any] | None:
    """mlx-lm's mixed quantization: per-module {"bits", "group_size"} under the module's name."""
    if decl is None or not decl.overrides:
        return None
    return decl.overrides.get(prefix) or decl.overrides.get(prefix.removeprefix("model."))  # values checked by declared()


def expected_bits(decl: Declared, module: Module) -> int | None:
    """The bits config.json declares for this module."""
    if decl.method == "mlx":
        override = _mlx_override(decl, module.prefix)
        return override.get("bits") if override else decl.bits
    if decl.method == "bitsandbytes":
        return decl.bnb_bits
    if decl.method == "mxfp4":
        return 4
    return decl.bits


def format_matches(decl: Declared, module: Module) -> bool:
    """Whether a module's format is one the declared method writes."""
    if decl.method == "bitsandbytes":
        return module.format.startswith("bitsandbytes")
    return module.format == decl.method


def dense_floats(tensors: dict[str, TensorInfo]) -> bool:
    """Every tensor is a plain float: nothing here is quantized."""
    return all(info.dtype in DENSE_FLOATS for info in tensors.values())
