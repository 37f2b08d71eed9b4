"""Layouts computed from config.json without transformers (hfdoctor.weights.computed), and the
user's cache of the layouts transformers built (hfdoctor.weights.layout_cache).

The computed layout must be exactly what transformers builds on the meta device: every config
of ../shared/upstream (through the shipped table, itself rebuilt by test_weights.py), the
fixtures and the corpora, and variants of every key the families read. A config the module
cannot read exactly is declined, never guessed. A check of a fixture whose config the table lacks
imports neither torch nor transformers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, UPSTREAM
from hfdoctor.bounded import memo
from hfdoctor.weights import computed, expected, layout_cache
from hfdoctor.weights.computed import FAMILIES, Declined, computed_layout
from hfdoctor.weights.outcome import CannotVerify, ConfigRejected, ExpectedLayout

sys.path.insert(0, str(ROOT / "tests" / "corpus"))
import community_load  # noqa: E402

try:
    import transformers  # noqa: F401
    HAS_TRANSFORMERS = True
except ImportError:
    HAS_TRANSFORMERS = False
needs_transformers = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="the meta-device build needs torch/transformers")


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def corpus_configs() -> list[tuple[str, dict]]:
    """Every config.json of the fixtures and the corpora (community folders, adapters, quantized)."""
    found = [(str(p.relative_to(ROOT)), read(p)) for p in sorted((ROOT / "fixtures").glob("*/config.json"))]
    found += [(str(p.relative_to(ROOT)), read(p)) for p in sorted((ROOT / "tests" / "corpus").rglob("config.json"))]
    for slug in community_load.slugs():
        for name, entry in community_load.folder_info(slug)["files"].items():
            if name.rsplit("/", 1)[-1] == "config.json":
                try:
                    found.append((f"community/{slug}/{name}", json.loads(community_load.blob_bytes(entry["sha256"]))))
                except ValueError:
                    continue  # a broken config.json: file-unreadable's concern
    return [(name, config) for name, config in found if isinstance(config, dict)]


# --- the computed families against transformers ---------------------------------------------------


def test_every_upstream_config_of_a_family_is_computed_as_shipped():
    """The shipped table is transformers' build of each upstream config (test_weights.py rebuilds it):
    every unquantized upstream config of a family computed here gives the same layout."""
    computed_folders = []
    for path in sorted(UPSTREAM.glob("*/config.json")):
        config = read(path)
        entry = expected.shipped_layouts()[expected.config_key(config)]
        if config.get("model_type") not in FAMILIES or "layout" not in entry:
            assert computed_layout(config) is None, path  # quantized, or not a family here
            continue
        assert computed.compute(config) == ExpectedLayout.from_json(entry["layout"]), path.parent.name
        computed_folders.append(path.parent.name)
    assert len(computed_folders) >= 20 and "microsoft--phi-4" in computed_folders
    assert "Qwen--Qwen3-30B-A3B" in computed_folders  # 128 experts, max_window_layers beside them


def four_layers(config: dict) -> dict:
    """The config with at most four layers: what four layers are, forty are, layer for layer (a
    70B's 80 layers build in seconds, four in milliseconds)."""
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int) or layers <= 4:
        return config
    return {**{k: v[:4] if isinstance(v, list) and len(v) == layers else v for k, v in config.items()},
            "num_hidden_layers": 4}


@needs_transformers
def test_fixtures_and_corpora_are_computed_as_transformers_builds():
    from hfdoctor.weights.build import build_outcome

    computed_names, seen = [], set()
    for name, config in corpus_configs():
        config = four_layers(config)
        layout = computed_layout(config)
        if layout is None:
            continue
        computed_names.append(name)
        text = json.dumps(config, sort_keys=True)
        if text not in seen:  # many fine-tunes share their base's config
            seen.add(text)
            assert build_outcome(config) == layout, name
    assert {"fixtures/tiny-thinker/config.json", "fixtures/tiny-nothinker/config.json",
            "fixtures/seed-incident/config.json"} <= set(computed_names)
    assert len(computed_names) >= 25, computed_names


def _small(model_type: str, **values) -> dict:
    """A small config of `model_type` as a trainer saves one: the sizes, the rest the class defaults."""
    return {"architectures": [FAMILIES[model_type].model_class], "model_type": model_type, "hidden_size": 64,
            "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 160, "pad_token_id": 0, "torch_dtype": "bfloat16", "transformers_version": "4.57.1",
            **values}


# A base config per family: the real upstream one where ../shared/upstream has it (its layers cut
# to two, so that each build takes milliseconds), a small one otherwise.
BASES = {
    "llama": "meta-llama--Llama-3.1-8B", "mistral": "mistralai--Mistral-7B-Instruct-v0.3", "qwen2": "Qwen--Qwen2.5-3B",
    "qwen3": "Qwen--Qwen3-8B", "qwen3_moe": "Qwen--Qwen3-30B-A3B", "gemma": "google--gemma-2b-it",
    "phi3": "microsoft--phi-4", "smollm3": "HuggingFaceTB--SmolLM3-3B",
}
SMALL = {
    "mixtral": dict(num_local_experts=3),
    "qwen2_moe": dict(num_experts=3, moe_intermediate_size=32, shared_expert_intermediate_size=48),
    "gemma2": dict(head_dim=16, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16),
    "gemma3_text": dict(head_dim=16, sliding_window_pattern=6, rope_local_base_freq=10000.0, rope_theta=1e6,
                        cache_implementation="hybrid"),
    "granite": dict(embedding_multiplier=12.0, residual_multiplier=0.22),
    "olmo2": dict(),
}


def base_config(model_type: str) -> dict:
    if model_type in BASES:
        config = read(UPSTREAM / BASES[model_type] / "config.json")
        config["num_hidden_layers"] = 2
        for key in ("layer_types", "no_rope_layers"):
            config.pop(key, None)  # one entry per layer of the full model
        if "num_experts" in config:
            config["num_experts"] = 4
        return config
    return _small(model_type, **SMALL[model_type])


# A value, as published configs carry it, of each key computed.py reads as inert or checks.
EXTRA_VALUES = {"_name_or_path": "/data/ckpt/sft-3", "_commit_hash": "0" * 40, "_attn_implementation_autoset": True,
                "unsloth_version": "2025.3.19", "unsloth_fixed": True, "cache_implementation": "hybrid",
                "max_sequence_length": 2048, "is_llama_config": True, "max_window_layers": 28,
                "hidden_act": "gelu_pytorch_tanh", "attention_bias": False, "sliding_window_pattern": 6,
                "rope_local_base_freq": 10000.0, "pretraining_tp": 1, "use_mrope": False,
                "auto_map": {"AutoConfig": "configuration_acme.AcmeConfig"}}


def variants(model_type: str, base: dict) -> list[tuple[str, dict, str]]:
    """(what, config, expect): expect `computed` (the module must compute it), `declined`, or
    `either` (computed or not, never different from transformers)."""
    family, fields = FAMILIES[model_type], computed.config_fields()["model_types"][model_type]["fields"]
    head_dim = base.get("head_dim") or base["hidden_size"] // base["num_attention_heads"]
    scaled = "computed" if family.scaled_rope and not family.head_dim_stays_none else "either"
    out = [
        ("as it is", base, "computed"),
        ("tied", {**base, "tie_word_embeddings": not base.get("tie_word_embeddings", fields.get(
            "tie_word_embeddings", {}).get("default", False))}, "computed"),
        ("three layers", {**base, "num_hidden_layers": 3}, "computed"),
        ("another vocabulary and MLP", {**base, "vocab_size": base["vocab_size"] + 64,
                                        "intermediate_size": base["intermediate_size"] + 32},
         "computed"),
        ("one kv head", {**base, "num_key_value_heads": 1}, "computed"),
        ("no kv heads key", {k: v for k, v in base.items() if k != "num_key_value_heads"}, "computed"),
        ("kv heads null", {**base, "num_key_value_heads": None}, "either"),
        ("explicit head_dim", {**base, "head_dim": head_dim * 2}, "either"),
        ("head_dim null", {**base, "head_dim": None}, "either"),
        ("no intermediate_size", {k: v for k, v in base.items() if k != "intermediate_size"}, "computed"),
        ("pad outside the vocabulary", {**base, "pad_token_id": base["vocab_size"]}, "declined"),
        ("hidden not a multiple of heads", {**base, "hidden_size": base["hidden_size"] + 1}, "declined"),
        ("hidden_size as text", {**base, "hidden_size": str(base["hidden_size"])}, "declined"),
        ("an unknown key", {**base, "acme_gate_size": 7}, "declined"),
        ("a classifier", {**base, "architectures": [family.model_class.replace("CausalLM", "SequenceClassification")]},
         "either"),
        ("layer_types", {**base, "layer_types": ["full_attention"] * base["num_hidden_layers"]}, "either"),
        ("layer_types of the wrong length", {**base, "layer_types": ["full_attention"]}, "declined"),
        ("yarn", {**base, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}},
         "either"),
        ("longrope", {**base, "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
         "declined"),
        ("rope without its factor", {**base, "rope_scaling": {"rope_type": "linear"}}, "declined"),
        ("an odd head", {**base, "head_dim": 7}, "declined"),
    ]
    if model_type != "gemma3_text":
        out += [("llama3 rope", {**base, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
                 scaled),
                ("linear rope as v5 saves it", {**base, "rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                                                            "rope_theta": 5e5}}, scaled)]
    for flag in ("attention_bias", "mlp_bias", "qkv_bias"):
        if flag in fields or flag in family.extra_keys:
            out.append((f"{flag} flipped", {**base, flag: not base.get(flag, fields.get(flag, {}).get("default"))},
                        "computed"))
    for key in sorted(computed.INERT_EXTRAS | family.extra_keys):
        out.append((f"extra {key}", {**base, key: EXTRA_VALUES[key]}, "computed"))
    if model_type in ("qwen3_moe", "qwen2_moe"):
        out += [("mlp_only_layers", {**base, "mlp_only_layers": [0]}, "computed"),
                ("every second layer sparse", {**base, "decoder_sparse_step": 2}, "computed"),
                ("other expert sizes", {**base, "num_experts": 2, "moe_intermediate_size": 24}, "computed")]
    if model_type == "mixtral":
        out.append(("num_experts alias", {**{k: v for k, v in base.items() if k != "num_local_experts"},
                                          "num_experts": 2}, "computed"))
    return out


@needs_transformers
@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_variants_of_each_family_are_computed_as_transformers_builds(model_type):
    from hfdoctor.weights.build import build_outcome

    for what, config, expect in variants(model_type, base_config(model_type)):
        layout = computed_layout(config)
        built = build_outcome(config)
        if layout is not None:
            assert built == layout, f"{model_type}: {what}: computed {layout.model_class}, transformers {built!r:.300}"
        if expect == "computed":
            assert layout is not None, f"{model_type}: {what} was declined: {why_declined(config)}"
        elif expect == "declined":
            assert layout is None, f"{model_type}: {what} was computed"


def why_declined(config: dict) -> str:
    try:
        computed.compute(config)
    except Declined as err:
        return str(err)
    return "computed"


@needs_transformers
def test_config_fields_are_what_the_installed_transformers_says():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_config_fields", ROOT / "upstream_templates" / "make_config_fields.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = computed.config_fields()
    assert module.table() == json.loads(json.dumps(module.table())) == shipped, (
        f"config_fields.json was made with transformers {shipped.get('transformers')}: rerun "
        "python upstream_templates/make_config_fields.py")


def test_a_hostile_size_is_declined_at_once():
    """1,024 layers of 8,192 experts would be 25 million names: declined (by the values' checks,
    before any name is made)."""
    config = {**read(UPSTREAM / "Qwen--Qwen3-30B-A3B" / "config.json"), "num_hidden_layers": 1024, "num_experts": 8192}
    assert "more tensors than any model has" in why_declined(config)
    assert "more than hfdoctor builds" in why_declined({**config, "num_experts": 8193})


def test_declines_say_why():
    config = read(ROOT / "fixtures" / "tiny-thinker" / "config.json")
    assert computed.compute(config).model_class == "Qwen3ForCausalLM"
    assert "not a field" in why_declined({**config, "acme": 1})
    assert "type transformers refuses" in why_declined({**config, "tie_word_embeddings": "yes"})
    assert "not a family" in why_declined({**config, "model_type": "acme_lm"})
    assert "quantization_config" in why_declined({**config, "quantization_config": {"quant_method": "gptq"}})


# --- check never imports torch for a known family ----------------------------------------------------


def test_check_of_tiny_thinker_imports_neither_torch_nor_transformers(tmp_path):
    """tiny-thinker's config is in no shipped table: its layout is computed, in check and in the hook's
    check of a pushed commit alike."""
    repo = tmp_path / "tiny"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for path in (ROOT / "fixtures" / "tiny-thinker").iterdir():
        (repo / path.name).write_bytes(path.read_bytes())
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "tiny"], check=True)
    script = textwrap.dedent(f"""
        import sys
        from hfdoctor.lint.check import Options, check_target
        for report in (check_target({str(repo)!r}), check_target({str(repo)!r}, Options(git_rev="HEAD"))):
            assert report.sections["weights"]["verified_against"] == "Qwen3ForCausalLM", report.sections["weights"]
            assert not [f for f in report.findings if f.rule == "weights-config-mismatch"], report.findings
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))
        assert not heavy, heavy[:5]
        print("ok")
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HFDOCTOR_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    assert not (tmp_path / "cache").exists()  # computed: nothing was built, nothing cached


# --- the cache of built layouts -------------------------------------------------------------------


UNKNOWN = {"model_type": "acme_lm", "architectures": ["AcmeForCausalLM"], "hidden_size": 8}
LAYOUT = ExpectedLayout("AcmeForCausalLM", {"model.embed_tokens.weight": (10, 8), "lm_head.weight": (10, 8)},
                        frozenset({"lm_head.weight"}), (), (), "model")


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """The configs built (in place of the bounded transformers child), with a fresh memo and cache."""
    memo.clear()
    monkeypatch.setenv("HFDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    made: list[dict] = []

    def build(config, budget=None):
        made.append(config)
        return LAYOUT if config.get("model_type") == "acme_lm" else ConfigRejected("refused")

    monkeypatch.setattr(expected, "build_bounded", build)
    yield made
    memo.clear()


def cache_files(tmp_path) -> list[Path]:
    return sorted((tmp_path / "cache" / "layouts").glob("*")) if (tmp_path / "cache" / "layouts").is_dir() else []


def test_a_built_layout_is_cached_and_read_back(builds, tmp_path):
    assert expected.expected_layout(UNKNOWN) == LAYOUT
    assert len(builds) == 1 and [p.suffix for p in cache_files(tmp_path)] == [".json"]  # no temporary left
    memo.clear()  # a new process: only the disk remembers
    assert expected.expected_layout(UNKNOWN) == LAYOUT and len(builds) == 1
    # a refusal is an outcome too: cached, and raised again from the cache
    refused = {**UNKNOWN, "model_type": "acme_bad"}
    for _ in range(2):
        memo.clear()
        with pytest.raises(ConfigRejected):
            expected.expected_layout(refused)
    assert len(builds) == 2
    # another transformers version builds anew
    slot = layout_cache.slot(UNKNOWN, expected.LAYOUT_VERSION)
    other = layout_cache.Slot(slot.directory, layout_cache.entry_key(UNKNOWN, "4.0.0", expected.LAYOUT_VERSION),
                              "4.0.0", expected.LAYOUT_VERSION)
    assert slot.key != other.key and other.read() is None


@pytest.mark.parametrize("damage", ["truncated", "another key", "a huge shape list", "not JSON", "too large",
                                    "a negative dimension"])
def test_a_damaged_cache_entry_is_ignored_and_rewritten(builds, tmp_path, damage):
    expected.expected_layout(UNKNOWN)
    (path,) = cache_files(tmp_path)
    entry = json.loads(path.read_bytes())
    data = {
        "truncated": path.read_bytes()[:40],
        "another key": json.dumps({**entry, "key": "0" * 64}).encode(),
        "a huge shape list": json.dumps({**entry, "outcome": {"layout": {**entry["outcome"]["layout"], "tensors": {
            "x": [1] * 100}}}}).encode(),
        "not JSON": b"\xff\xfe not json",
        "too large": b" " * (layout_cache.MAX_ENTRY_BYTES + 1),
        "a negative dimension": json.dumps({**entry, "outcome": {"layout": {**entry["outcome"]["layout"], "tensors": {
            "x": [-1]}}}}).encode(),
    }[damage]
    path.write_bytes(data)
    memo.clear()
    assert expected.expected_layout(UNKNOWN) == LAYOUT and len(builds) == 2  # built again
    assert json.loads(path.read_bytes()) == entry  # and the entry written whole again


_READ_IN_A_CHILD = """
import json, sys
from pathlib import Path
from hfdoctor.weights import layout_cache
slot = layout_cache.Slot(Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]))
outcome = slot.read()
# VmHWM: this program's own peak (ru_maxrss keeps the forking process's across exec)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"outcome": outcome is not None, "peak_kib": peak}))
"""


@pytest.mark.parametrize("hostile", ["a FIFO", "a link to another entry", "30 MB of empty objects"])
def test_a_hostile_cache_entry_is_ignored_without_a_wait_or_a_gigabyte(builds, tmp_path, hostile):
    """A FIFO under the entry's name hung every check of that config (open() waits for a writer);
    30 MB of `{},` built ten million dicts before the entry was validated. The cache is read only
    as the regular files it writes, within the bounded parser's limits."""
    expected.expected_layout(UNKNOWN)
    (path,) = cache_files(tmp_path)
    good = path.read_bytes()
    path.unlink()
    if hostile == "a FIFO":
        os.mkfifo(path)
    elif hostile == "a link to another entry":
        (tmp_path / "elsewhere.json").write_bytes(good)
        path.symlink_to(tmp_path / "elsewhere.json")
    else:
        path.write_bytes(b'{"key": "x", "outcome": [' + b"{}," * 10_000_000 + b"{}]}")
    slot = layout_cache.slot(UNKNOWN, expected.LAYOUT_VERSION)
    child = subprocess.run([sys.executable, "-c", _READ_IN_A_CHILD, str(slot.directory), slot.key, slot.built_with,
                            str(slot.layout_version)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    answer = json.loads(child.stdout)
    assert answer["outcome"] is False and answer["peak_kib"] < 400 * 1024, answer
    memo.clear()
    assert expected.expected_layout(UNKNOWN) == LAYOUT and not path.is_symlink()  # built again, written as a file
    assert json.loads(path.read_bytes()) == json.loads(good)


def test_no_cache_inside_the_checked_repository_or_when_turned_off(builds, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    monkeypatch.setenv("HFDOCTOR_CACHE_DIR", str(repo / ".cache"))
    repo.mkdir()
    expected.expected_layout(UNKNOWN, repo_root=repo)
    assert not (repo / ".cache").exists()
    memo.clear()
    for off in ("", "relative/dir"):
        monkeypatch.setenv("HFDOCTOR_CACHE_DIR", off)
        assert layout_cache.cache_dir() is None
    monkeypatch.delenv("HFDOCTOR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert layout_cache.cache_dir() == tmp_path / "xdg" / "hfdoctor" / "layouts"


def test_what_only_here_and_now_decides_is_not_cached(builds, tmp_path, monkeypatch):
    for outcome in (CannotVerify("not built: out of time", transient=True),
                    CannotVerify("torch/transformers are not installed (torch): pip install 'hfdoctor[probe]'")):
        assert not layout_cache.cacheable(outcome)
    monkeypatch.setattr(expected, "build_bounded", lambda config, budget=None: CannotVerify("x is not installed"))
    with pytest.raises(CannotVerify):
        expected.expected_layout(UNKNOWN)
    assert cache_files(tmp_path) == []


def test_the_cache_keeps_its_newest_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(layout_cache, "MAX_ENTRIES", 3)
    directory = tmp_path / "layouts"
    for i in range(5):
        config = {**UNKNOWN, "hidden_size": i}
        layout_cache.Slot(directory, layout_cache.entry_key(config, "5.0", 4), "5.0", 4).write(LAYOUT)
        os.utime(directory / f"{layout_cache.entry_key(config, '5.0', 4)}.json", ns=(i * 10**9, i * 10**9))
    names = sorted(p.name for p in directory.iterdir())
    assert len(names) == 3
    newest = {f"{layout_cache.entry_key({**UNKNOWN, 'hidden_size': i}, '5.0', 4)}.json" for i in (2, 3, 4)}
    assert set(names) == newest
