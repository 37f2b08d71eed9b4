"""How an adapter's tensors, target_modules and rank_pattern are read: as PEFT reads them, in time
linear in what the repository gives (hfdoctor.weights.adapter)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hfdoctor.bounded import patterns
from hfdoctor.weights import adapter
from hfdoctor.weights.adapter import LORA_TENSOR, ModuleTargets, RankPatterns, _lora_parts


def test_lora_tensor_names_are_read_as_the_pattern_reads_them():
    """_lora_parts (string operations) against LORA_TENSOR (the definition) on every name of up
    to four parts from pieces that matter: kinds, prefixes, adapter names, empty parts."""
    pieces = ["base_model", "model", "lora_A", "lora_B", "lora_embedding_B", "weight", "default", "q_proj", "",
              "a-b", "é", "layers", "base_model.model"]
    for n in range(1, 5):
        for combo in itertools.product(pieces, repeat=n):
            name = ".".join(combo)
            m = LORA_TENSOR.match(name)
            assert _lora_parts(name) == ((m.group("module"), m.group("kind")) if m else None), name


def test_a_layer_index_is_the_first_after_layers_h_or_blocks():
    module = adapter.LoraModule("model.layers.12.mlp.experts.3.up_proj")
    assert module.layer == 12
    assert adapter.LoraModule("transformer.h.0.attn").layer == 0
    assert adapter.LoraModule("model.layers." + "9" * 5000 + ".q_proj").layer is None  # not an int() of 5,000 digits
    assert adapter.LoraModule("model.embed_tokens").layer is None


NAME_PART = st.sampled_from(["model", "layers", "0", "1", "self_attn", "q_proj", "k_proj", "mlp", "", "x.y"])


@given(st.lists(st.lists(NAME_PART, min_size=1, max_size=6).map(".".join), max_size=8),
       st.lists(st.lists(NAME_PART, min_size=1, max_size=6).map(".".join), min_size=1, max_size=8))
def test_list_targets_match_as_peft_does(targets, names):
    """check_target_module_exists: `key in target_modules or key.endswith("." + target)`."""
    index = ModuleTargets(targets)
    for name in names:
        expected = {t for t in targets if name == t or name.endswith("." + t)}
        assert set(index.matches(name)) == expected
        assert index.targets(name) is bool(expected)


def test_list_targets_past_the_bounds_are_not_judged():
    deep = ".".join(["a"] * (adapter.MAX_TARGET_PARTS + 1))
    index = ModuleTargets(["q_proj", deep])
    assert index.unjudged == [deep] and index.entries == ["q_proj"]
    assert index.targets("model.q_proj") is True
    assert index.targets("model.v_proj") is None  # it might be the entry that was not judged


def test_a_regex_target_is_a_full_match_and_one_re2_refuses_is_unknown():
    assert ModuleTargets(r".*\.(q|v)_proj").targets("model.layers.0.q_proj") is True
    assert ModuleTargets(r".*\.(q|v)_proj").targets("model.layers.0.q_proj.x") is False
    assert ModuleTargets(r"(a)\1").targets("aa") is None  # a backreference: RE2 cannot
    assert ModuleTargets(r"\pL{1000}x").targets("x") is None  # a program of megabytes: refused


RANK_KEYS = ["q_proj", r"layers\.1\.self_attn\.q_proj", "v_proj|k_proj", r"layers\.\d+\.mlp\.up_proj", "mlp"]
MODULES = ["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.k_proj",
           "model.layers.3.mlp.up_proj", "model.layers.3.mlp", "model.layers.3.xmlp", "q_proj"]


def get_pattern_key(pattern_keys, key_to_match):
    """PEFT 0.21's peft.utils.other.get_pattern_key, as it is (importing peft takes torch)."""
    for key in pattern_keys:
        match = re.match(rf"(.*\.)?({key})$", key_to_match)
        if not match:
            continue
        return key

    return key_to_match


@pytest.mark.parametrize("keys", [RANK_KEYS, RANK_KEYS[::-1], RANK_KEYS[2:]])
def test_rank_pattern_is_applied_as_peft_applies_it(keys):
    """LoraModel._create_and_replace: the first key whose `(.*\\.)?(key)$` matches, else r."""
    rank_pattern = {key: 10 + i for i, key in enumerate(keys)}
    ranks = RankPatterns({"r": 8, "rank_pattern": rank_pattern})
    for module in MODULES:
        assert ranks.rank(module) == rank_pattern.get(get_pattern_key(rank_pattern.keys(), module), 8), module


def test_rank_pattern_keys_are_compiled_once_and_only_so_many():
    keys = {f"\\pL{{1000}}k{i}": 4 for i in range(3)}  # each refused by RE2's program limit: matches nothing
    ranks = RankPatterns({"r": 8, "rank_pattern": {**keys, "q_proj": 16}})
    assert ranks.rank("model.layers.0.q_proj") == 16 and ranks.rank("model.v_proj") == 8 and ranks.tried == 4
    many = {f"k{i}": 4 for i in range(adapter.MAX_RANK_PATTERN_KEYS + 1)}
    ranks = RankPatterns({"r": 8, "rank_pattern": many})
    assert ranks.rank("model.k3") == 4
    assert ranks.rank("model.q_proj") is None and ranks.unknown == 1  # the key left untried might match it
    assert ranks.tried == adapter.MAX_RANK_PATTERN_KEYS


def test_an_untrusted_pattern_of_a_huge_program_is_refused():
    assert patterns.compile_untrusted(r"\pL{1000}kN") is None
    assert patterns.compile_untrusted(r"(.*\.)?(q_proj|v_proj)") is not None


def test_matching_stops_at_the_deadline():
    """A regex RE2 accepts can still cost milliseconds a match on a long name (its NFA): past the
    check's deadline the rank, or whether a regex targets a name, is unknown."""
    ranks = RankPatterns({"r": 8, "rank_pattern": {"x_proj": 4, "q_proj": 16}}, deadline=0.0)
    assert ranks.rank("model.q_proj") is None and ranks.unknown == 1
    targets = ModuleTargets(r".*q_proj", deadline=0.0)
    assert targets.targets("model.q_proj") is None and targets.unknown == 1
    assert ModuleTargets(["q_proj"], deadline=0.0).targets("model.q_proj") is True  # a list costs nothing
