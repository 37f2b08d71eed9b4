"""quantization-inconsistent on what real quantizers write, and on broken copies of it.

Real layouts: tests/corpus/quantized/ holds the headers and config.json that mlx-lm,
compressed-tensors and bitsandbytes wrote for one tiny model (make_quantized.py), and
../shared/upstream holds the real tensor names of an MLX 4-bit Qwen3-14B and of gpt-oss-20b
(MXFP4) with their configs. GPTQ, AWQ and fp8 (whose quantizers need a GPU) are laid out
from their loaders' definitions, as the module docstring of hfdoctor.weights.quantized says.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from conftest import TESTS, UPSTREAM, rules_alone, run_cli
from hfdoctor.knowledge.upstream import Upstream
from weights_util import model_tensors, write_mixed_safetensors

OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
CORPUS = TESTS / "corpus" / "quantized"
REAL = ("mlx-4bit", "compressed-tensors-w4a16", "bitsandbytes-nf4", "bitsandbytes-int8", "dense-bf16")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def dump(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def findings(folder: Path):
    return [(f.code, str(f.severity), f.message, f.fix) for f in rules_alone(folder, ["WGT", "CFG005"], OFFLINE)]


def from_corpus(name: str, dest: Path) -> Path:
    """A checkpoint folder from a recorded header: config.json and a sparse model.safetensors."""
    dest.mkdir(parents=True)
    shutil.copy(CORPUS / name / "config.json", dest / "config.json")
    header = load(CORPUS / name / "header.json")
    tensors = {n: (t["dtype"], tuple(t["shape"])) for n, t in header["tensors"].items()}
    write_mixed_safetensors(dest / "model.safetensors", tensors, header["metadata"])
    return dest


def edit_config(folder: Path, change) -> Path:
    config = load(folder / "config.json")
    change(config)
    dump(folder / "config.json", config)
    return folder


@pytest.mark.parametrize("name", REAL)
def test_real_quantizer_output_is_clean(name, tmp_path):
    assert findings(from_corpus(name, tmp_path / name)) == []


def test_leftover_config_on_a_16bit_merge(tmp_path):
    """unsloth #1601: a merged_16bit export that kept the 4-bit model's quantization_config."""
    folder = from_corpus("dense-bf16", tmp_path / "merged")
    bnb = load(CORPUS / "bitsandbytes-nf4" / "config.json")["quantization_config"]
    edit_config(folder, lambda c: c.update(quantization_config=bnb))
    [(code, severity, message, fix)] = findings(folder)
    assert (code, severity) == ("WGT006", "error") and "every tensor is plain float" in message
    assert fix.title == "remove quantization_config from config.json" and str(fix.applicability) == "safe"
    run_cli("fix", str(folder))
    assert "quantization_config" not in load(folder / "config.json") and findings(folder) == []
    before = (folder / "config.json").read_bytes()
    run_cli("fix", str(folder))
    assert (folder / "config.json").read_bytes() == before


def test_packed_tensors_without_a_config(tmp_path):
    folder = edit_config(from_corpus("mlx-4bit", tmp_path / "mlx"),
                         lambda c: (c.pop("quantization"), c.pop("quantization_config")))
    found = findings(folder)
    assert [(c, s) for c, s, *_ in found] == [("WGT006", "error")]  # one finding: weights-config-mismatch defers
    assert "quantized (mlx:" in found[0][2]


@pytest.mark.parametrize("name, change, expected", [
    ("mlx-4bit", lambda c: (c["quantization"].update(bits=8), c["quantization_config"].update(bits=8)),
     "declares 8-bit mlx but the packing of 16 modules is 4-bit"),
    ("compressed-tensors-w4a16",
     lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"].update(group_size=64),
     "declares 4-bit compressed-tensors but the packing of 14 modules is 2-bit"),
    ("bitsandbytes-nf4",
     lambda c: c["quantization_config"].update(load_in_4bit=False, _load_in_4bit=False, load_in_8bit=True),
     "declares 8-bit bitsandbytes but the packing of 14 modules is 4-bit"),
    ("mlx-4bit", lambda c: (c.pop("quantization"), c.update(quantization_config={"quant_method": "gptq", "bits": 4})),
     "declares gptq but 16 modules are stored as mlx"),
    ("compressed-tensors-w4a16", lambda c: c.update(intermediate_size=512),
     "do not fit the LlamaForCausalLM config.json declares: model.layers.0.mlp.down_proj unpacks to [128, 256], "
     "config needs [128, 512]"),
])
def test_broken_copies_of_real_quantizer_output(tmp_path, name, change, expected):
    folder = edit_config(from_corpus(name, tmp_path / "q"), change)
    found = findings(folder)
    assert [(c, s) for c, s, *_ in found] == [("WGT006", "error")], found
    assert expected in found[0][2]


# --- formats laid out from their loaders' definitions --------------------------------------

def _dense(tmp_path: Path) -> tuple[dict, dict[str, tuple[int, ...]]]:
    config = load(CORPUS / "dense-bf16" / "config.json")
    header = load(CORPUS / "dense-bf16" / "header.json")["tensors"]
    return config, {n: tuple(t["shape"]) for n, t in header.items()}


def _layer_linear(name: str, shape) -> bool:
    return ".layers." in name and name.endswith("proj.weight") and len(shape) == 2


def gptq_layout(dense, bits=4, group=32) -> dict:
    out = {}
    for name, shape in dense.items():
        if not _layer_linear(name, shape):
            out[name] = ("F16", shape)
            continue
        prefix, (o, i) = name[: -len(".weight")], shape
        out.update({f"{prefix}.qweight": ("I32", (i * bits // 32, o)), f"{prefix}.qzeros": ("I32", (i // group, o * bits // 32)),
                    f"{prefix}.scales": ("F16", (i // group, o)), f"{prefix}.g_idx": ("I32", (i,))})
    return out


def awq_layout(dense, bits=4, group=32) -> dict:
    out = {}
    for name, shape in dense.items():
        if not _layer_linear(name, shape):
            out[name] = ("F16", shape)
            continue
        prefix, (o, i) = name[: -len(".weight")], shape
        out.update({f"{prefix}.qweight": ("I32", (i, o * bits // 32)), f"{prefix}.qzeros": ("I32", (i // group, o * bits // 32)),
                    f"{prefix}.scales": ("F16", (i // group, o))})
    return out


def fp8_layout(dense, block=(128, 128)) -> dict:
    out = {}
    for name, shape in dense.items():
        if not _layer_linear(name, shape):
            out[name] = ("BF16", shape)
            continue
        out[name] = ("F8_E4M3", shape)
        out[name + "_scale_inv"] = ("F32", (math.ceil(shape[0] / block[0]), math.ceil(shape[1] / block[1])))
    return out


def write_layout(folder: Path, config: dict, tensors: dict) -> Path:
    folder.mkdir(parents=True)
    dump(folder / "config.json", config)
    write_mixed_safetensors(folder / "model.safetensors", tensors)
    return folder


GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False, "sym": True}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm", "zero_point": True}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}


@pytest.mark.parametrize("method, layout, qc", [("gptq", gptq_layout, GPTQ), ("awq", awq_layout, AWQ),
                                                 ("fp8", fp8_layout, FP8)])
def test_gptq_awq_fp8_layouts(tmp_path, method, layout, qc):
    config, dense = _dense(tmp_path)
    good = write_layout(tmp_path / "good", {**config, "quantization_config": qc}, layout(dense))
    assert findings(good) == []
    other = {"gptq": AWQ, "awq": GPTQ, "fp8": GPTQ}[method]
    wrong = write_layout(tmp_path / "wrong", {**config, "quantization_config": other}, layout(dense))
    [(code, _, message, _)] = findings(wrong)
    assert f"modules are stored as {method}" in message


def test_gptq_with_other_bits_and_fp8_with_another_block(tmp_path):
    config, dense = _dense(tmp_path)
    eight = write_layout(tmp_path / "gptq8", {**config, "quantization_config": GPTQ}, gptq_layout(dense, bits=8))
    assert "declares 4-bit gptq but the packing of 14 modules is 8-bit" in findings(eight)[0][2]
    block = write_layout(tmp_path / "fp8", {**config, "quantization_config": {**FP8, "weight_block_size": [64, 64]}},
                         fp8_layout(dense))
    assert "down_proj.weight_scale_inv is [1, 2], blocks of [64, 64] need [2, 4] (and 13 more" in findings(block)[0][2]


# --- real tensor names from ../shared/upstream ----------------------------------------------

def _dense_of(config: dict) -> dict[str, tuple[int, ...]]:
    plain = {k: v for k, v in config.items() if k not in ("quantization", "quantization_config")}
    return model_tensors_from(plain)


def model_tensors_from(config: dict) -> dict[str, tuple[int, ...]]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        dump(path, config)
        return model_tensors(path)


def test_real_mlx_checkpoint_names(tmp_path):
    """lmstudio-community/Qwen3-14B-MLX-4bit: its index's names, shapes as mlx packs them."""
    src = UPSTREAM / "lmstudio-community--Qwen3-14B-MLX-4bit"
    config = load(src / "config.json")
    names = load(src / "model.safetensors.index.json")["weight_map"]
    dense = _dense_of(config)
    group, bits = config["quantization"]["group_size"], config["quantization"]["bits"]
    quantized = {n.rsplit(".", 1)[0] for n in names if n.endswith(".scales")}
    tensors = {}
    for name in sorted(names):
        prefix, leaf = name.rsplit(".", 1)
        if prefix in quantized:
            out, inp = dense[prefix + ".weight"]
            tensors[name] = ("U32", (out, inp * bits // 32)) if leaf == "weight" else ("BF16", (out, inp // group))
        else:
            tensors[name] = ("BF16", dense[name])
    folder = write_layout(tmp_path / "mlx14b", config, tensors)
    assert findings(folder) == []
    edit_config(folder, lambda c: (c["quantization"].update(group_size=32), c["quantization_config"].update(group_size=32)))
    assert "declares 4-bit mlx but the packing of" in findings(folder)[0][2]


def test_real_mxfp4_checkpoint_names(tmp_path):
    """openai/gpt-oss-20b: experts as MXFP4 _blocks/_scales, the rest bf16 (modules_to_not_convert)."""
    src = UPSTREAM / "openai--gpt-oss-20b"
    config = load(src / "config.json")
    names = load(src / "model.safetensors.index.json")["weight_map"]
    dense = _dense_of(config)
    tensors = {}
    for name in sorted(names):
        if name.endswith(("_blocks", "_scales")):
            experts, inp, out = dense[name.rsplit("_", 1)[0]]
            groups = inp // 32
            tensors[name] = ("U8", (experts, out, groups, 16) if name.endswith("_blocks") else (experts, out, groups))
        else:
            tensors[name] = ("BF16", dense[name])
    folder = write_layout(tmp_path / "gptoss", config, tensors)
    assert findings(folder) == []
    # A scales tensor cut for another group count: the blocks cannot be decoded.
    name = "model.layers.0.mlp.experts.down_proj_scales"
    experts, out, groups = tensors[name][1]
    tensors[name] = ("U8", (experts, out, groups // 2))
    (tmp_path / "gptoss" / "model.safetensors").unlink()
    write_mixed_safetensors(tmp_path / "gptoss" / "model.safetensors", tensors)
    assert "packed tensors contradict each other" in findings(folder)[0][2]


def test_zero_and_huge_dimensions_say_nothing_and_crash_nothing(tmp_path):
    """quant-huge-numbers (issue 40): packed shapes with a dimension of 0, an fp8 block of 0 or
    of 10**30 and dimensions past a float: quantization-inconsistent says nothing it cannot
    know and raises nothing (it was a ZeroDivisionError, exit 2)."""
    config, dense = _dense(tmp_path)
    awq = awq_layout(dense)
    name = next(n for n in awq if n.endswith(".scales"))
    awq[name] = ("F16", (awq[name][1][0], 0))
    awq[name.replace(".scales", ".qweight")] = ("I32", (awq[name][1][0], 0))
    folder = write_layout(tmp_path / "awq", {**config, "quantization_config": AWQ}, awq)
    assert all(code != "internal-error" for code, *_ in findings(folder))
    mlx = from_corpus("mlx-4bit", tmp_path / "mlx")
    header = load(CORPUS / "mlx-4bit" / "header.json")["tensors"]
    scales = next(n for n in header if n.endswith(".scales"))
    tensors = {n: (t["dtype"], tuple(t["shape"])) for n, t in header.items()}
    tensors[scales] = (tensors[scales][0], (*tensors[scales][1][:-1], 0))
    write_mixed_safetensors(mlx / "model.safetensors", tensors)
    assert all(code != "internal-error" for code, *_ in findings(mlx))
    for block in ([0, 0], [10**30, 10**30]):
        fp8 = write_layout(tmp_path / f"fp8-{block[0]}", {**config, "quantization_config": {**FP8, "weight_block_size": block}},
                           fp8_layout(dense))
        assert all(code != "internal-error" for code, *_ in findings(fp8))
