"""The family registry's facts, checked against the real upstream files wherever they exist."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest

from conftest import ROOT, UPSTREAM
from hfdoctor import lineage
from hfdoctor.knowledge import registry
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge.upstream import shipped_template

FAMILIES = registry.families()


def folder_of(repo_id: str):
    path = UPSTREAM / repo_id.replace("/", "--")
    return path if path.is_dir() else None


def test_keys_are_unique_and_lowercase():
    keys = [f.key for f in FAMILIES]
    assert len(keys) == len(set(keys)) and all(k == k.lower() for k in keys)
    for required in ("qwen2.5", "qwen3", "qwq", "deepseek-r1", "llama3", "mistral", "gemma2", "gemma3", "phi3", "phi4", "gpt-oss", "smollm3"):
        assert registry.family(required) is not None, required


VARIANTS = registry.all_variants()


def variant_id(pair) -> str:
    fam, variant = pair
    return fam.key + (f".{variant.key}" if variant.key else "")


@pytest.mark.parametrize("pair", [p for p in VARIANTS if p[1].template], ids=variant_id)
def test_pinned_template_sha256_matches_upstream(pair):
    fam, variant = pair
    folder = folder_of(variant.template.repo)
    if folder is None:
        pytest.skip(f"{variant.template.repo} is not in ../shared/upstream (its shipped copy is checked below)")
    texts = []
    if (folder / "chat_template.jinja").is_file():
        texts.append((folder / "chat_template.jinja").read_text(encoding="utf-8"))
    if (folder / "tokenizer_config.json").is_file():
        value = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
        if isinstance(value, str):
            texts.append(value)
    assert variant.template.sha256 in {hashlib.sha256(t.encode()).hexdigest() for t in texts}


@pytest.mark.parametrize("pair", [p for p in VARIANTS if p[1].template], ids=variant_id)
def test_every_pinned_template_ships_with_its_provenance(pair):
    """`fix` works offline: the text ships, verified, with repo, file, sha256 and license."""
    fam, variant = pair
    text = shipped_template(variant)
    assert text is not None and hashlib.sha256(text.encode()).hexdigest() == variant.template.sha256
    manifest = json.loads(registry.data_file("templates/MANIFEST.json").read_text())
    (entry,) = [e for e in manifest.values() if e["sha256"] == variant.template.sha256 and e["family"] == fam.key
                and e["variant"] == (variant.key or None)]
    assert entry["repo"] == variant.template.repo and entry["license"] and entry["copied_from"]


def test_the_shipped_folder_holds_nothing_else():
    folder = registry.data_file("templates/MANIFEST.json").parent
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    assert sorted(p.name for p in folder.glob("*.jinja")) == sorted(manifest)
    for name, entry in manifest.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == entry["sha256"], name


def test_variants_of_one_family_are_told_apart_by_repo_id():
    assert registry.variant_of_repo_id("Qwen/Qwen3-8B")[1].key == "hybrid"
    assert registry.variant_of_repo_id("Qwen/Qwen3-30B-A3B")[1].key == "hybrid"
    assert registry.variant_of_repo_id("Qwen/Qwen3-30B-A3B-Instruct-2507")[1].key == "instruct-2507"
    assert registry.variant_of_repo_id("Qwen/Qwen3-235B-A22B-Thinking-2507")[1].key == "thinking-2507"
    assert registry.variant_of_repo_id("Qwen/Qwen3-Coder-30B-A3B-Instruct")[1].key == "coder"
    assert registry.variant_of_repo_id("mistralai/Mistral-Nemo-Instruct-2407")[1].key == "tekken"
    assert registry.variant_of_repo_id("mistralai/Mistral-7B-Instruct-v0.3")[1].key == "spm"
    thinking = {v.key: v.thinking for v in registry.family("qwen3").variants}
    assert thinking == {"hybrid": "hybrid", "instruct-2507": "none", "thinking-2507": "always", "coder": "none"}


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.key)
def test_base_dimensions_match_upstream_configs(fam):
    checked = 0
    for base in fam.bases:
        for repo_id in (base.repo, base.base_repo):
            folder = folder_of(repo_id) if repo_id else None
            if folder is None or not (folder / "config.json").is_file():
                continue
            config = json.loads((folder / "config.json").read_text())
            assert base.matches(config), (repo_id, base.dims)
            assert config["model_type"] in fam.model_types
            checked += 1
    if not checked:
        pytest.skip("no upstream config for this family")


@pytest.mark.parametrize("fam", [f for f in FAMILIES if f.signature_tokens], ids=lambda f: f.key)
def test_signature_token_ids_match_upstream_tokenizers(fam):
    checked = 0
    for base in fam.bases:
        folder = folder_of(base.repo)
        if folder is None:
            continue
        repo = ModelRepo(folder)
        if repo.vocab is None:
            continue
        for token, token_id in fam.signature_tokens.items():
            assert token in repo.vocab, (base.repo, token)
            if token_id is not None:
                assert repo.vocab[token] == token_id, (base.repo, token)
        checked += 1
    if not checked:
        pytest.skip("no upstream tokenizer for this family")


def test_vocab_groups_from_real_tokenizers():
    groups = registry.vocab_groups()
    expect = {
        "Qwen--Qwen3-8B": "qwen2-bpe",
        "Qwen--Qwen2.5-Coder-32B-Instruct": "qwen2-bpe",
        "meta-llama--Llama-3.1-8B-Instruct": "cl100k-bpe",
        "microsoft--phi-4": "cl100k-bpe",
        "mistralai--Mistral-7B-Instruct-v0.2": "mistral-v1-spm",
        "mistralai--Mistral-7B-Instruct-v0.3": "mistral-v3-spm",
    }
    for name, group in expect.items():
        repo = ModelRepo(UPSTREAM / name)
        assert groups[lineage.vocab_sample(repo)] == group, name


def test_repo_patterns():
    assert registry.family_of_repo_id("Qwen/Qwen3-8B").key == "qwen3"
    assert registry.family_of_repo_id("Qwen/Qwen3-8B-Base").key == "qwen3"
    assert registry.family_of_repo_id("Qwen/Qwen2.5-7B-Instruct").key == "qwen2.5"
    assert registry.family_of_repo_id("meta-llama/Meta-Llama-3.1-8B").key == "llama3"
    assert registry.family_of_repo_id("deepseek-ai/DeepSeek-R1-Distill-Llama-8B").key == "deepseek-r1"
    assert registry.family_of_repo_id("openai/gpt-oss-20b").key == "gpt-oss"
    assert registry.family_of_repo_id("THUDM/glm-4-9b-chat").key == "glm4-9b"
    assert registry.family_of_repo_id("THUDM/chatglm3-6b").key == "chatglm"
    assert registry.family_of_repo_id("allenai/OLMo-2-1124-13B-Instruct").key == "olmo2"
    assert registry.family_of_repo_id("some-user/my-model") is None


def test_architectures_table_knows_the_families():
    table = registry.architectures()
    assert "Qwen3ForCausalLM" in table["qwen3"] and "LlamaForCausalLM" in table["llama"]
    for fam in FAMILIES:
        for model_type in fam.model_types:
            # (a family published only as remote code has no native class, by design)
            assert model_type in table or fam.remote_code_repo, (fam.key, model_type)


@pytest.mark.parametrize("pair", [p for p in VARIANTS if p[1].sampling], ids=variant_id)
def test_recorded_sampling_is_upstreams_generation_config(pair):
    """generation-config compares greedy fine-tunes with these values: each is exactly what
    the named upstream generation_config.json says."""
    _, variant = pair
    repo_id, _, file = variant.sampling["source"].partition(" ")
    assert file == "generation_config.json"
    folder = folder_of(repo_id)
    assert folder is not None, f"{repo_id} must be in ../shared/upstream to record its sampling"
    upstream = json.loads((folder / file).read_text(encoding="utf-8"))
    recorded = {k: v for k, v in variant.sampling.items() if k != "source"}
    assert recorded == {k: upstream[k] for k in ("do_sample", "temperature", "top_p", "top_k") if upstream.get(k) is not None}


PADS_BY_DESIGN = [(f, None) for f in registry.families() if f.upstream_pad_token] + [
    (f, v) for f in registry.families() for v in f.variants if v.upstream_pad_token]


@pytest.mark.parametrize("fam,variant", PADS_BY_DESIGN, ids=lambda x: x.key if x else "")
def test_recorded_upstream_pad_token_is_upstreams(fam, variant, tmp_path):
    """pad-token-is-eos calls a pad token the family's (or a release's) design only as upstream's own tokenizer
    sets it (read from ../shared/upstream, or from the community copy the registry names when that folder is not
    there)."""
    token, repo_id = (variant or fam).upstream_pad_token
    folder = UPSTREAM / repo_id.replace("/", "--")
    if not folder.is_dir():
        raw = next(f for f in json.loads(registry.data_file("families.json").read_text())["families"] if f["key"] == fam.key)
        if variant is not None:
            raw = next(v for v in raw["variants"] if v["key"] == variant.key)
        sys.path.insert(0, str(ROOT / "tests" / "corpus"))
        import community_load

        folder = community_load.materialise_one(raw["upstream_pad_token"]["copy"]["community"], tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    pad = config["pad_token"]
    assert (pad["content"] if isinstance(pad, dict) else pad) == token
    assert token in fam.end_of_turn or token == (config["eos_token"]["content"] if isinstance(config["eos_token"], dict)
                                                 else config["eos_token"])
    if variant is None and fam.upstream_pad_id is not None:  # the id the pad is design at is upstream's id of it
        assert config["added_tokens_decoder"][str(fam.upstream_pad_id)]["content"] == token


@pytest.mark.parametrize("fam", [f for f in registry.families() if f.pretrained_stop], ids=lambda f: f.key)
def test_recorded_pretrained_stop_is_the_base_releases(fam):
    """What an adapter of a pre-trained release stops on is what those releases' own config.json says."""
    seen = 0
    for base in fam.bases:
        folder = UPSTREAM / (base.base_repo or "").replace("/", "--")
        if not base.base_repo or not (folder / "config.json").is_file():
            continue
        eos = json.loads((folder / "config.json").read_text())["eos_token_id"]
        assert sorted(eos if isinstance(eos, list) else [eos]) == sorted(fam.pretrained_stop.values()), base.base_repo
        seen += 1
    assert seen, "no pre-trained release of the family in ../shared/upstream"


def _family_raw(key: str) -> dict:
    return next(f for f in json.loads(registry.data_file("families.json").read_text())["families"] if f["key"] == key)


def _copy_folder(entry: dict, tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    import community_load

    return community_load.materialise_one(entry["copy"]["community"], tmp_path)


@pytest.mark.parametrize("fam", [f for f in registry.families() if f.upstream_generation_eos], ids=lambda f: f.key)
def test_recorded_upstream_generation_eos_is_the_copys(fam, tmp_path):
    """A stop id called the family's design is what the copy of the release's generation_config.json says."""
    ids, _ = fam.upstream_generation_eos
    folder = _copy_folder(_family_raw(fam.key)["upstream_generation_eos"], tmp_path)
    eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert set(eos if isinstance(eos, list) else [eos]) == set(ids)


@pytest.mark.parametrize("fam", [f for f in registry.families() if f.tokens_past_rows], ids=lambda f: f.key)
def test_recorded_tokens_past_rows_are_past_the_copys_rows(fam, tmp_path):
    """Tokens called the release's own past its embedding rows are at those ids in the copy, at or past its vocab_size."""
    tokens, _ = fam.tokens_past_rows
    folder = _copy_folder(_family_raw(fam.key)["tokens_past_rows"], tmp_path)
    vocab_size = json.loads((folder / "config.json").read_text())["vocab_size"]
    added = json.loads((folder / "added_tokens.json").read_text())
    for token, token_id in tokens.items():
        assert added[token] == token_id >= vocab_size
