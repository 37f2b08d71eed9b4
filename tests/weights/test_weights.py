"""Weights rules on sparse full-size checkpoints built from the real upstream configs.

Every checkpoint here has the real tensor names and shapes (transformers' meta-device
models of the upstream config.json, sharded like the real index where there is one) and
a data region that is a hole, so an 8B model costs a few hundred KB of disk.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, UPSTREAM
from hfdoctor import lineage
from hfdoctor.bounded import memo
from hfdoctor.knowledge import registry
from hfdoctor.weights import build
from hfdoctor.weights import expected as weights
from hfdoctor.weights.computed import computed_layout
from hfdoctor.lint.check import run_rules
from hfdoctor.lint.sections import weights_section
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules import selected_rules
from hfdoctor.knowledge.upstream import Upstream
from hfdoctor.weights.expected import CannotVerify, ExpectedLayout, expected_layout
from hfdoctor.weights.headers import WeightFileError, read_safetensors_header, repo_weights
from hfdoctor.weights.layout import infer_weights_families
from weights_util import model_tensors, run_measured, upstream_weight_map, write_checkpoint, write_sparse_safetensors

OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
WEIGHT_RULES = selected_rules(["WGT"])

# The six architectures the brief names, and the family their weights must be seen as.
MODELS = {
    "Qwen--Qwen3-8B": "qwen3",
    "meta-llama--Llama-3.1-8B": "llama3",
    "mistralai--Mistral-7B-Instruct-v0.3": "mistral",
    "microsoft--phi-4": "phi4",
    "google--gemma-2b-it": "gemma",
    "HuggingFaceTB--SmolLM3-3B": "smollm3",
}


def checkpoint(tmp_path, folder: str, weights_of: str | None = None, shards: int = 4) -> "os.PathLike":
    """A copy of an upstream folder with sparse weights (of `weights_of`, default its own)."""
    dest = tmp_path / folder
    shutil.copytree(UPSTREAM / folder, dest)
    source = UPSTREAM / (weights_of or folder)
    weight_map = upstream_weight_map(source) if weights_of is None else None
    if weights_of is not None and (dest / "model.safetensors.index.json").exists():
        (dest / "model.safetensors.index.json").unlink()
    write_checkpoint(dest, model_tensors(source / "config.json"), weight_map, shards=shards)
    return dest


def isolated_env(tmp_path) -> dict[str, str]:
    """The environment of a `hfdoctor` subprocess: offline, with an empty home of its own."""
    home = tmp_path / "home"
    home.mkdir()
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}


def findings(path, rules=WEIGHT_RULES):
    repo = ModelRepo(path, upstream=OFFLINE)
    found, internal = run_rules(repo, rules)
    assert not internal, internal
    return found, repo


def fired(found, severity: str | None = None) -> set[str]:
    return {f.rule for f in found if severity is None or str(f.severity) == severity}


# --- the header reader ------------------------------------------------------------------


def test_reader_agrees_with_safetensors_on_a_valid_file(tmp_path):
    from safetensors import safe_open

    tensors = {"a.weight": (4, 3), "b.bias": (3,), "empty": (0, 5)}
    write_sparse_safetensors(tmp_path / "x.safetensors", tensors)
    header = read_safetensors_header(tmp_path / "x.safetensors")
    with safe_open(tmp_path / "x.safetensors", "np") as f:
        assert set(f.keys()) == set(header.tensors)
        for name in f.keys():
            assert tuple(f.get_slice(name).get_shape()) == header.tensors[name].shape


def _header_text(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


def _json_header(entries: dict) -> bytes:
    return _header_text(json.dumps(entries))


def _ok_entry(start: int, end: int, dtype: str = "BF16") -> dict:
    return {"dtype": dtype, "shape": [(end - start) // 2], "data_offsets": [start, end]}


# (name, bytes of x.safetensors, words the message must contain)
BROKEN_FILES = [
    ("zero-byte", b"", "empty"),
    ("shorter than the length", b"\x01\x02\x03", "truncated"),
    ("truncated header", struct.pack("<Q", 1000) + b'{"a": {"dtype": "BF16"', "truncated"),
    ("length 2**60", struct.pack("<Q", 2**60) + b"{}", "100 MB"),
    ("not JSON", struct.pack("<Q", 12) + b"not json at!", "not valid JSON"),
    ("JSON list", _json_header([1, 2]), "not an object"),
    ("not UTF-8", struct.pack("<Q", 4) + b"\xff\xfe{}", "UTF-8"),
    ("unknown dtype", _json_header({"w": {"dtype": "F128", "shape": [2], "data_offsets": [0, 32]}}) + bytes(32),
     "unknown dtype"),
    ("bad shape", _json_header({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}) + bytes(8),
     "invalid shape"),
    ("size disagrees with shape", _json_header({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}) + bytes(8),
     "needs 12"),
    ("overlapping offsets", _json_header({"a": _ok_entry(0, 8), "b": _ok_entry(4, 12)}) + bytes(12), "overlapping"),
    ("gap between tensors", _json_header({"a": _ok_entry(0, 8), "b": _ok_entry(12, 16)}) + bytes(16), "gap"),
    ("data truncated", _json_header({"a": _ok_entry(0, 8), "b": _ok_entry(8, 16)}) + bytes(10), "truncated"),
    ("trailing bytes", _json_header({"a": _ok_entry(0, 8)}) + bytes(20), "after the last tensor"),
    ("metadata not strings", _json_header({"__metadata__": {"format": 1}}), "__metadata__"),
    # Hostile headers that once escaped as tracebacks (TypeError, ValueError, RecursionError).
    ("dtype not a string", _json_header({"w": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}) + bytes(4),
     "unknown dtype"),
    ("5000-digit dimension", _header_text('{"w":{"dtype":"F32","shape":[1%s],"data_offsets":[0,4]}}' % ("0" * 5000))
     + bytes(4), "beyond 64 bits"),
    ("nested 100,000 deep", _header_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
    ("tensor named twice", _header_text('{"a":%s,"a":%s}' % (json.dumps(_ok_entry(0, 8)), json.dumps(_ok_entry(8, 16))))
     + bytes(16), "'a' appears twice"),
    ("unpaired surrogate", _header_text('{"\\ud800":%s}' % json.dumps(_ok_entry(0, 8))) + bytes(8), "not valid Unicode"),
]


@pytest.mark.parametrize("content,words", [pytest.param(c, w, id=n) for n, c, w in BROKEN_FILES])
def test_broken_safetensors_is_weights_unreadable(tmp_path, content, words):
    from safetensors import safe_open

    repo_dir = tmp_path / "repo"
    repo_dir.mkdir()
    shutil.copy(UPSTREAM / "Qwen--Qwen3-8B" / "config.json", repo_dir)
    (repo_dir / "model.safetensors").write_bytes(content)
    with pytest.raises(WeightFileError, match=words):
        read_safetensors_header(repo_dir / "model.safetensors")
    # The safetensors library refuses every one of these files too.
    with pytest.raises(Exception):
        with safe_open(repo_dir / "model.safetensors", "np") as f:
            list(f.keys())
    found, _ = findings(repo_dir)
    unreadable = [f for f in found if f.rule == "weights-unreadable"]
    assert len(unreadable) == 1 and unreadable[0].file == "model.safetensors", [f.message for f in found]
    assert str(unreadable[0].severity) == "error"
    assert fired(found) <= {"weights-unreadable", "weights-config-mismatch"}


def _make_directory(path):
    path.mkdir()
    (path / "inner.bin").write_bytes(b"x")


def _make_symlink_loop(path):
    os.symlink(path.name, path)  # x.safetensors -> x.safetensors


def _make_broken_link(path):
    os.symlink("nowhere.safetensors", path)


def _make_fifo(path):
    os.mkfifo(path)


@pytest.mark.parametrize("make,words", [
    (_make_directory, "directory"), (_make_symlink_loop, "loop"), (_make_broken_link, "broken symbolic link"),
    (_make_fifo, "not a regular file"),
])
def test_weight_paths_that_are_not_files(tmp_path, make, words):
    repo_dir = tmp_path / "repo"
    repo_dir.mkdir()
    shutil.copy(UPSTREAM / "Qwen--Qwen3-8B" / "config.json", repo_dir)
    make(repo_dir / "x.safetensors")
    found, _ = findings(repo_dir)  # must return: a loop or a FIFO must not hang the walk or the read
    messages = [f.message for f in found if f.rule == "weights-unreadable"]
    assert len(messages) == 1 and words in messages[0], [f.message for f in found]


def test_symlinked_weights_of_a_cache_snapshot_are_followed(tmp_path):
    """The Hugging Face cache stores a snapshot's files as symlinks into the model folder's
    blobs/: those are read (relative links, as huggingface_hub writes them)."""
    model = tmp_path / "hub" / "models--google--gemma-2b-it"
    blobs, snapshot = model / "blobs", model / "snapshots" / "718cb18"
    blobs.mkdir(parents=True)
    shutil.copytree(UPSTREAM / "google--gemma-2b-it", snapshot)
    (snapshot / "model.safetensors.index.json").unlink()
    write_sparse_safetensors(blobs / "abc", model_tensors(UPSTREAM / "google--gemma-2b-it" / "config.json"))
    os.symlink(os.path.relpath(blobs / "abc", snapshot), snapshot / "model.safetensors")
    found, repo = findings(snapshot)
    assert not found, [f.message for f in found]
    assert repo_weights(repo).headers["model.safetensors"].tensors


def test_a_weight_link_leaving_the_repository_is_not_read(tmp_path, copy_upstream):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_sparse_safetensors(elsewhere / "abc", model_tensors(UPSTREAM / "google--gemma-2b-it" / "config.json"))
    repo_dir = copy_upstream("google--gemma-2b-it")
    (repo_dir / "model.safetensors.index.json").unlink()
    os.symlink(elsewhere / "abc", repo_dir / "model.safetensors")
    found, repo = findings(repo_dir, selected_rules(["CFG003", "WGT"]))
    assert [(f.rule, f.file) for f in found] == [("symlink-outside-repo", "model.safetensors")]
    assert repo_weights(repo).headers == {}


# --- transformers' layout against the real upstream indexes -----------------------------

INDEXED = sorted(
    p.name for p in UPSTREAM.iterdir()
    if (p / "model.safetensors.index.json").is_file() and (p / "config.json").is_file()
)


@pytest.mark.parametrize("folder", INDEXED)
def test_expected_layout_names_the_real_index(folder):
    """The names transformers builds for each real config are exactly the real checkpoint's."""
    config = json.loads((UPSTREAM / folder / "config.json").read_text())
    index = json.loads((UPSTREAM / folder / "model.safetensors.index.json").read_text())
    try:
        expected = expected_layout(config)
    except CannotVerify as err:
        assert "quantized" in str(err)  # gpt-oss (mxfp4) and MLX 4-bit: not the model's parameters
        return
    required = set(expected.tensors) - expected.optional
    assert required <= set(index["weight_map"]) <= set(expected.tensors), folder


# --- the shipped layouts (upstream_templates/layouts.json) -------------------------------


def _make_layouts_module():
    spec = importlib.util.spec_from_file_location("make_layouts", ROOT / "upstream_templates" / "make_layouts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_layouts_are_what_transformers_builds():
    """Every shipped layout equals a fresh meta-device build with the installed transformers."""
    import transformers

    make_layouts = _make_layouts_module()
    table = json.loads(registry.data_file(weights.LAYOUTS_FILE).read_text(encoding="utf-8"))
    rerun = (f"layouts.json was generated with transformers {table['transformers']}, this is "
             f"{transformers.__version__}: rerun python upstream_templates/make_layouts.py")
    assert table["layout_version"] == weights.LAYOUT_VERSION, rerun
    rebuilt = make_layouts.build_layouts(make_layouts.upstream_configs(UPSTREAM))
    assert set(rebuilt) == set(table["layouts"]), rerun
    for key, entry in rebuilt.items():
        assert entry == table["layouts"][key], f"{entry['sources']}: {rerun}"
    # What the test above compares is what the rule sees: the compact form expands exactly.
    qwen3_8b = json.loads((UPSTREAM / "Qwen--Qwen3-8B" / "config.json").read_text())
    assert weights.outcome_from_json(rebuilt[weights.config_key(qwen3_8b)]) == build._build(qwen3_8b)


def test_shipped_layout_needs_no_build_and_ignores_unshaping_keys(monkeypatch):
    """A stock config (re-saved in another dtype by another version) comes from the table alone."""
    def no_build(config, budget=None):
        raise AssertionError("built a layout the table ships")

    memo.clear()  # nothing looked up or built before
    monkeypatch.setattr(weights, "build_bounded", no_build)
    config = json.loads((UPSTREAM / "Qwen--Qwen3-30B-A3B" / "config.json").read_text())
    config.update(transformers_version="4.99.0", torch_dtype="float16", _name_or_path="/tmp/ft", use_cache=False)
    expected = expected_layout(config)
    assert expected.model_class == "Qwen3MoeForCausalLM"
    assert len(expected.tensors) == 18867 and expected.tensors["model.layers.47.mlp.experts.127.down_proj.weight"] == (2048, 768)
    quantized = json.loads((UPSTREAM / "openai--gpt-oss-20b" / "config.json").read_text())
    with pytest.raises(CannotVerify, match="quantized"):
        expected_layout(quantized)


def test_unshipped_config_is_computed_or_built_and_agrees_with_the_table(monkeypatch):
    """A config the table lacks is computed (a family hfdoctor knows) or built by transformers (any
    other); either way its layout equals the shipped one."""
    def no_build(config, budget=None):
        raise AssertionError("built a layout the computed path knows")

    memo.clear()  # nothing looked up or built before
    config = json.loads((UPSTREAM / "Qwen--Qwen3-8B" / "config.json").read_text())
    shipped = expected_layout(config)
    # Not a shape, but a rope_scaling dict can make transformers refuse a config: it stays in the key.
    changed = {**config, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    assert weights.config_key(changed) not in weights.shipped_layouts()
    with monkeypatch.context() as patched:
        patched.setattr(weights, "build_bounded", no_build)
        assert expected_layout(changed) == shipped
    # A key the computed path does not read: transformers builds it, in the bounded child.
    odd = {**changed, "acme_router_mode": "fast"}
    assert computed_layout(odd) is None
    assert expected_layout(odd) == shipped


def _other_values(key: str, config: dict) -> list:
    """Values of a non-shaping key unlike the config's own, each one config_key drops."""
    layers = config["num_hidden_layers"]
    return {
        "transformers_version": ["4.30.0"], "_name_or_path": ["/tmp/finetune"], "use_cache": [False],
        "torch_dtype": ["float32"], "dtype": ["float16"],
        "initializer_range": [0.006], "attention_dropout": [0.1], "rms_norm_eps": [1e-3],
        "rope_theta": [12345, 7.5e6], "rope_parameters": [{"rope_theta": 2e6, "rope_type": "default"}],
        "rope_scaling": [None], "max_position_embeddings": [1024, 1_048_576],
        "bos_token_id": [None, 7], "eos_token_id": [[3, 9], None], "pad_token_id": [None, 0],
        "sliding_window": [None, 4096], "use_sliding_window": [True, False], "max_window_layers": [0, layers],
        "hidden_act": ["silu", "gelu_pytorch_tanh"],
        "layer_types": [["sliding_attention"] * layers, ["sliding_attention", "full_attention"] * (layers // 2)
                        + ["full_attention"] * (layers % 2)],
    }[key]


def _outcome_text(outcome) -> str:
    return repr(outcome) if isinstance(outcome, Exception) else json.dumps(outcome.to_json(), sort_keys=True)


# One shipped config of each model type: a key that shapes nothing in one config of a type
# shapes nothing in the others (same model class, same code).
ONE_PER_MODEL_TYPE = sorted({
    json.loads(p.read_text())["model_type"]: p.parent.name
    for p in sorted(UPSTREAM.glob("*/config.json"), reverse=True)
}.values())


@pytest.mark.parametrize("folder", ONE_PER_MODEL_TYPE)
def test_non_shaping_keys_change_no_layout(folder):
    """Every key config_key drops, changed or deleted, leaves transformers' outcome unchanged."""
    config = json.loads((UPSTREAM / folder / "config.json").read_text())
    # Four layers build what 48 do, layer for layer, 12x faster (the 128-expert MoE).
    layers = config["num_hidden_layers"]
    config = {k: v[:4] if isinstance(v, list) and len(v) == layers else v for k, v in config.items()}
    config["num_hidden_layers"] = min(layers, 4)
    base = _outcome_text(build.build_outcome(config))
    shaping = weights.shaping_config(config)
    variants = [("architectures", "a second architecture",
                 {**config, "architectures": [config["architectures"][0], "LlamaForCausalLM"]})]
    for key in weights.NON_SHAPING_CONFIG_KEYS:
        if key in config:
            variants.append((key, f"no {key}", {k: v for k, v in config.items() if k != key}))
        for value in _other_values(key, config):
            assert weights.NON_SHAPING_CONFIG_KEYS[key](value, config), (key, value)
            variants.append((key, f"{key}={value!r:.40}", {**config, key: value}))
    every = {key: _other_values(key, config)[-1] for key in weights.NON_SHAPING_CONFIG_KEYS}
    variants.append((None, "all of them at once", {**config, **every}))
    for key, what, variant in variants:
        if key == "architectures" or key not in {None, *shaping}:  # the config's own value is dropped too
            assert weights.config_key(variant) == weights.config_key(config), what
        assert _outcome_text(build.build_outcome(variant)) == base, f"{folder}: {what} changes the layout"


def test_fine_tune_resaved_by_another_version_hits_the_table(monkeypatch):
    """Qwen3-8B as a fine-tune re-saves it: other rope_theta, context, ids, an explicit layer_types."""
    def no_build(config, budget=None):
        raise AssertionError("built a layout the table ships")

    memo.clear()  # nothing looked up or built before
    monkeypatch.setattr(weights, "build_bounded", no_build)
    config = json.loads((UPSTREAM / "Qwen--Qwen3-8B" / "config.json").read_text())
    config.pop("torch_dtype")
    config.update(
        transformers_version="4.57.1", dtype="bfloat16", rope_theta=5_000_000, max_position_embeddings=131072,
        initializer_range=0.01, pad_token_id=151654, eos_token_id=[151645, 151643], use_sliding_window=False,
        layer_types=["full_attention"] * config["num_hidden_layers"], _name_or_path="/data/ckpt/sft-3",
    )
    assert expected_layout(config).model_class == "Qwen3ForCausalLM"
    # As transformers 5 re-saves it: rope_theta moves into rope_parameters.
    del config["rope_theta"], config["rope_scaling"]
    config["rope_parameters"] = {"rope_theta": 1_000_000, "rope_type": "default"}
    assert expected_layout(config).model_class == "Qwen3ForCausalLM"
    # A value transformers may refuse stays in the key: it is built, not looked up.
    for key, value in (("hidden_act", "bogus"), ("rms_norm_eps", -1.0), ("layer_types", ["full_attention"] * 3),
                       ("max_position_embeddings", "long")):
        assert weights.config_key({**config, key: value}) not in weights.shipped_layouts(), key


def _layout(tensors: dict[str, tuple[int, ...]]) -> ExpectedLayout:
    return ExpectedLayout("XForCausalLM", tensors, frozenset({"lm_head.weight"}), (), (r"rotary_emb\.inv_freq",), "model")


def test_compact_form_round_trips_regular_and_irregular_stacks():
    """Identical layers are stored once; dense-then-MoE layers, or a gap, are stored name by name."""
    dense = {"mlp.up_proj.weight": (16, 8), "input_layernorm.weight": (8,)}
    moe = {"mlp.experts.0.up_proj.weight": (4, 8), "mlp.experts.1.up_proj.weight": (4, 8), "mlp.gate.weight": (2, 8)}
    regular = {"model.embed_tokens.weight": (10, 8), **{f"model.layers.{i}.{k}": v for i in range(3) for k, v in dense.items()}}
    first_dense = {**regular, **{f"model.layers.{i}.{k}": v for i in (3, 4) for k, v in moe.items()}}
    vision = {**regular, **{f"vision.blocks.{i}.{k}": v for i in (0, 2) for k, v in dense.items()}}  # block 1 absent
    for tensors, stored in ((regular, 1), (first_dense, len(first_dense)), (vision, 1 + 4)):
        layout = _layout(tensors)
        data = json.loads(json.dumps(layout.to_json()))
        assert len(data["tensors"]) == stored
        assert ExpectedLayout.from_json(data) == layout


def test_check_of_a_stock_checkpoint_imports_no_torch_and_writes_nothing(tmp_path):
    """`check` on a full-size Qwen3-8B: the layout comes from the table; no file appears anywhere."""
    path = checkpoint(tmp_path, "Qwen--Qwen3-8B", shards=5)
    before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir())
    env = isolated_env(tmp_path)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "hfdoctor", "check", str(path), "--format", "json"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert "weights-config-mismatch" not in {f["rule"] for f in report["findings"]}
    assert report["weights"]["verified_against"] == "Qwen3ForCausalLM"
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert len(imported) > 100  # the -X importtime listing is there
    heavy = sorted(m for m in imported if m.split(".")[0] in ("torch", "transformers"))
    assert not heavy, heavy[:10]
    assert sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir()) == before
    written = sorted(str(p.relative_to(env["HOME"])) for p in Path(env["HOME"]).rglob("*"))
    assert not written, f"check wrote into the home directory: {written}"


# --- whole checkpoints -------------------------------------------------------------------


@pytest.mark.parametrize("folder,family", sorted(MODELS.items()))
def test_matching_weights_give_no_weights_finding(tmp_path, folder, family):
    path = checkpoint(tmp_path, folder)
    found, repo = findings(path, selected_rules(["WGT", "SEC"]))
    assert not found, [f.message for f in found]
    assert family in [f.key for f in infer_weights_families(repo)]
    assert weights_section(repo)["verified_against"].endswith("ForCausalLM")


def test_llama_weights_under_qwen3_config_seed_000(tmp_path):
    """Seed 000: Llama-3.1-8B weights shipped with the Qwen3-8B config and tokenizer."""
    path = checkpoint(tmp_path, "Qwen--Qwen3-8B", weights_of="meta-llama--Llama-3.1-8B")
    found, repo = findings(path)
    by_rule = {f.rule: f for f in found}
    assert set(by_rule) == {"weights-config-mismatch", "embedding-vocab-mismatch"}, [f.message for f in found]
    mismatch = by_rule["weights-config-mismatch"].message
    assert "Qwen3ForCausalLM" in mismatch and "32 layers" in mismatch and "vocab 128256" in mismatch
    assert "no q_norm/k_norm" in mismatch and "llama" in mismatch.lower() and "Llama-3.1-8B" in mismatch
    assert "128256 rows" in by_rule["embedding-vocab-mismatch"].message
    # Lineage: the weights vote Llama 3, the config and tokenizer Qwen3.
    detected = lineage.detect(repo)
    assert "llama3" in detected.by_source["weights"] and "qwen3" not in detected.by_source["weights"]
    assert "weights" not in detected.evidence


def test_deleted_shard_is_weights_index_inconsistent(tmp_path):
    path = checkpoint(tmp_path, "Qwen--Qwen3-8B")
    (path / "model-00003-of-00005.safetensors").unlink()
    found, _ = findings(path)
    assert fired(found) == {"weights-index-inconsistent"}, [f.message for f in found]
    assert "model-00003-of-00005.safetensors" in found[0].message and "1 of the 5 shards" in found[0].message


def _rewrite_shard(path, shard: str, drop: str | None = None, add: dict | None = None):
    header = read_safetensors_header(path / shard)
    tensors = {n: t.shape for n, t in header.tensors.items() if n != drop}
    tensors.update(add or {})
    write_sparse_safetensors(path / shard, tensors)


def test_index_and_shards_disagree(tmp_path):
    path = checkpoint(tmp_path, "Qwen--Qwen3-8B")
    index_path = path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    # A tensor the index lists, gone from its shard; and a tensor in a shard the index omits.
    _rewrite_shard(path, index["weight_map"]["model.norm.weight"], drop="model.norm.weight")
    del index["weight_map"]["model.embed_tokens.weight"]
    index["metadata"]["total_size"] += 2
    index_path.write_text(json.dumps(index))
    write_sparse_safetensors(path / "model-00006-of-00005.safetensors", {"extra.weight": (4, 4)})
    found, _ = findings(path)
    messages = " | ".join(f.message for f in found if f.rule == "weights-index-inconsistent")
    assert "in no shard: model.norm.weight" in messages
    assert "not in the index" in messages and "model.embed_tokens.weight" in messages
    assert "total_size" in messages and "model-00006-of-00005.safetensors" in messages
    assert {str(f.severity) for f in found if "total_size" in f.message} == {"warning"}


def test_tensor_in_the_wrong_shard(tmp_path):
    path = checkpoint(tmp_path, "google--gemma-2b-it")
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors"
    assert read_safetensors_header(path / "model-00002-of-00002.safetensors").tensors.get("model.norm.weight")
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    found, _ = findings(path)
    assert any("the index says model-00001-of-00002.safetensors" in f.message for f in found), [f.message for f in found]


def test_extra_tensors_alone_are_a_warning(tmp_path):
    path = checkpoint(tmp_path, "google--gemma-2b-it")
    shard = "model-00002-of-00002.safetensors"
    # An old RoPE buffer transformers drops silently, and a value head it drops with a warning.
    _rewrite_shard(path, shard, add={"model.layers.0.self_attn.rotary_emb.inv_freq": (128,), "v_head.weight": (1, 2048)})
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["weight_map"].update({"model.layers.0.self_attn.rotary_emb.inv_freq": shard, "v_head.weight": shard})
    index["metadata"]["total_size"] += 2 * (128 + 2048)
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    found, _ = findings(path)
    assert [(f.rule, str(f.severity)) for f in found] == [("weights-config-mismatch", "warning")], [f.message for f in found]
    assert "1 unexpected (v_head.weight)" in found[0].message


def test_checkpoint_of_the_bare_model(tmp_path, copy_upstream):
    """Saved from Qwen3Model (no `model.` prefix): transformers adds the prefix; lm_head is missing,
    which config-inconsistent says (Qwen3-8B's tie_word_embeddings is false)."""
    path = copy_upstream("Qwen--Qwen3-8B")
    (path / "model.safetensors.index.json").unlink()
    tensors = model_tensors(UPSTREAM / "Qwen--Qwen3-8B" / "config.json")
    bare = {n.removeprefix("model."): s for n, s in tensors.items() if n != "lm_head.weight"}
    write_checkpoint(path, bare, shards=2)
    found, _ = findings(path, selected_rules(["WGT", "CFG005"]))
    assert [(f.rule, str(f.severity)) for f in found] == [("config-inconsistent", "error")], [f.message for f in found]
    assert "no lm_head.weight" in found[0].message and "at random" in found[0].message


@pytest.mark.parametrize("folder", INDEXED)
def test_metadata_only_upstream_folders_are_not_errors(folder):
    """Upstream folders hold the index but no shards: nothing to check, and the report says so,
    with one info finding (never silent, never a warning: it is a metadata-only copy)."""
    found, repo = findings(UPSTREAM / folder, selected_rules(["WGT", "SEC001"]))
    assert [(f.rule, str(f.severity)) for f in found] == [("weights-index-inconsistent", "info")], \
        [f.message for f in found]
    assert "none of them is in this folder" in found[0].message and "not checked" in found[0].message
    assert "none of which is in this checkout" in weights_section(repo)["note"]


def test_lfs_pointers_are_skipped_not_failed(tmp_path, copy_upstream):
    path = copy_upstream("Qwen--Qwen3-8B")
    for shard in sorted(set(upstream_weight_map(path).values())):
        (path / shard).write_text(
            "version https://git-lfs.github.com/spec/v1\n"
            "oid sha256:4d7f1a1ba1a3e2b7b2f3f2c1c0f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2\nsize 3963750880\n"
        )
    (path / "training_args.bin").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 5\n")
    found, _ = findings(path, selected_rules(["WGT", "SEC"]))
    assert fired(found) == {"lfs-pointer"}, [f.message for f in found]
    # The five shards; training_args.bin is the Trainer's state, which nothing that serves the model loads.
    assert {str(f.severity) for f in found} == {"warning"} and len(found) == 5
    assert not any(f.file == "training_args.bin" for f in found)
    assert "4.0 GB" in found[0].message and "git lfs pull" in found[0].message


def test_unknown_architecture_is_info(tmp_path):
    path = checkpoint(tmp_path, "google--gemma-2b-it")
    config = json.loads((path / "config.json").read_text())
    config.update(model_type="acme_lm", architectures=["AcmeForCausalLM"])
    (path / "config.json").write_text(json.dumps(config))
    found, _ = findings(path)
    assert [(f.rule, str(f.severity)) for f in found] == [("weights-config-mismatch", "info")]
    assert "cannot verify" in found[0].message and "acme_lm" in found[0].message


@pytest.mark.parametrize("change,words", [
    ({"hidden_act": "no-such-activation"}, "building the model fails"),
    ({"layer_types": ["banana"]}, "layer_types"),
])
def test_config_transformers_cannot_build(tmp_path, change, words):
    path = checkpoint(tmp_path, "google--gemma-2b-it")
    config = json.loads((path / "config.json").read_text())
    config.update(change)
    (path / "config.json").write_text(json.dumps(config))
    found, _ = findings(path)
    assert [f.rule for f in found] == ["weights-config-mismatch"]
    assert "transformers cannot build" in found[0].message and words in found[0].message


def test_vocab_size_below_tokenizer_ids(copy_upstream):
    path = copy_upstream("Qwen--Qwen3-8B")
    config = json.loads((path / "config.json").read_text())
    config["vocab_size"] = 151000
    (path / "config.json").write_text(json.dumps(config))
    found, _ = findings(path)
    found = [f for f in found if "none of them is in this folder" not in f.message]  # metadata-only copy: info
    assert [f.rule for f in found] == ["embedding-vocab-mismatch"]
    assert found[0].pointer == "/vocab_size" and "151668" in found[0].message and "'</think>'" in found[0].message


def test_headers_only_lineage_imports_no_torch(tmp_path):
    """infer_weights_families (called by lineage on every check) reads headers, not torch."""
    path = checkpoint(tmp_path, "microsoft--phi-4")
    code = (
        "import sys; from hfdoctor.repo import ModelRepo; from hfdoctor.weights.layout import infer_weights_families; "
        f"print([f.key for f in infer_weights_families(ModelRepo({str(path)!r}))]); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['phi4']"


def test_cli_seed_000_reads_headers_only(tmp_path):
    """`hfdoctor check` on a 16 GB (sparse) checkpoint: findings, and no tensor data read."""
    path = checkpoint(tmp_path, "Qwen--Qwen3-8B", weights_of="meta-llama--Llama-3.1-8B")
    data_bytes = sum(p.stat().st_size for p in path.glob("*.safetensors"))
    assert data_bytes > 16e9
    env = isolated_env(tmp_path)
    proc, io = run_measured([sys.executable, "-m", "hfdoctor", "check", str(path), "--format", "json"], env)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    rules = {f["rule"] for f in report["findings"]}
    assert {"weights-config-mismatch", "embedding-vocab-mismatch"} <= rules
    assert report["weights"]["layout"].startswith("32 layers")
    # rchar counts every byte read() returned, holes included: reading even one of the
    # smallest layer tensors' worth of data per shard would blow this budget.
    assert io["rchar"] < 512 * 1024 * 1024, io
