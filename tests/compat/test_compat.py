"""The compat section and its rules: consumer-incompatible, template-portability,
gguf-convert-blocker, serving-parser-mismatch (its cases: tests/rules/CMP003.yml), weights-metadata.

Facts checked here against the libraries installed (transformers 5.23, tokenizers,
minijinja, @huggingface/jinja when node has it). Facts about transformers 4.x were
checked by hand with 4.46.3 and 4.57.6 (wheels from PyPI in a separate venv), and are
recorded in hfdoctor/compat/knowledge.py: 4.x reads rope_theta only at the top level
(the v5-saved SmolLM2 below loads with rope_theta 10000.0 in 4.46, 100000.0 after the
fix), has no TokenizersBackend (ValueError: "Tokenizer class TokenizersBackend does not
exist"; PreTrainedTokenizerFast loads and renders the template), reads
chat_template.jinja only since 4.48.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, TESTS, UPSTREAM, run_cli
from hfdoctor.chat import engines
from hfdoctor.lint.check import check_target
from hfdoctor.compat import knowledge as kb
from hfdoctor.compat.assess import chk_hash
from hfdoctor.repo import ModelRepo

ENGINES = list(kb.ENGINES)
HF_JINJA = engines.run_hf_jinja("{{ 1 }}", {}).unavailable is None


def by_engine(report) -> dict[str, dict]:
    return {e["engine"]: e for e in report.sections["compat"]}


def codes(report) -> list[str]:
    return [f.rule for f in report.findings]


def folders() -> list[Path]:
    return sorted(p for p in UPSTREAM.iterdir() if p.is_dir() and p.name != "gguf-vocab")


# Every compat problem in the upstream corpus, and why each is true.
UPSTREAM_PROBLEMS = {
    # ships only chat_template.jinja, its tokenizer_config.json has no chat_template (TGI #3247);
    # minijinja does not know {% generation %} (minijinja #815)
    "HuggingFaceTB--SmolLM3-3B": {"consumer-incompatible", "template-portability"},
    "openai--gpt-oss-20b": {"consumer-incompatible"},
    # minijinja's tojson takes no ensure_ascii argument: every request with tools raises
    "MiniMaxAI--MiniMax-M2": {"template-portability"},
    "zai-org--GLM-4.6": {"template-portability"},
    # minijinja: `none is iterable` is true (jinja2: false), then `tools | length` raises
    "Qwen--Qwen3-Coder-30B-A3B-Instruct": {"template-portability"},
}
# @huggingface/jinja 0.5.11: SmolLM3's `| string` on a mapping ("Unknown ObjectValue filter:
# string"); Seed-OSS's dict literal with integer keys ("Object keys must be strings")
HF_JINJA_PROBLEMS = {"ByteDance-Seed--Seed-OSS-36B-Instruct": {"template-portability"}}


@pytest.mark.parametrize("folder", folders(), ids=lambda p: p.name)
def test_every_upstream_folder_has_a_compat_section(folder):
    report = check_target(str(folder))
    section = report.sections["compat"]
    assert [e["engine"] for e in section] == ENGINES
    assert all(e["status"] in ("loads", "caveat", "fails", "unknown") and e["why"] for e in section)
    expected = set(UPSTREAM_PROBLEMS.get(folder.name, set()))
    if HF_JINJA:
        expected |= HF_JINJA_PROBLEMS.get(folder.name, set())
    compat_rules = {"consumer-incompatible", "template-portability", "gguf-convert-blocker",
                    "serving-parser-mismatch", "weights-metadata"}
    assert {r for r in codes(report) if r in compat_rules} == expected
    if not expected:
        # metadata only (the weights are not here): no blocker found, and nothing said to load
        assert all(e["status"] == "unknown" and "not verified" in e["why"]
                   for e in section if e["engine"] != "mlx-lm"), section


def test_transformers5_checkpoint_is_incompatible_with_4x(smollm2_checkpoint, tmp_path):
    folder = tmp_path / "v5"
    shutil.copytree(smollm2_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    assert "rope_theta" not in config and config["rope_parameters"]["rope_theta"] == 100000.0
    report = check_target(str(folder))
    compat = by_engine(report)
    # metadata only: nothing blocks transformers 5, but without weights it is not said to load
    assert compat["transformers-5"]["status"] == "unknown" and "no safetensors weights" in compat["transformers-5"]["why"]
    assert compat["transformers-4"]["status"] == "fails"
    assert "silently falls back to llama's default 10000" in compat["transformers-4"]["why"]
    assert compat["vllm"]["status"] == "caveat" and compat["llama.cpp"]["status"] == "fails"
    found = {(f.rule, f.severity.name, f.file) for f in report.findings if f.rule == "consumer-incompatible"}
    # rope_theta: a warning (nothing declares a 4.x consumer); TokenizersBackend breaks every 4.x load
    # (warning); the .jinja-only template only TGI and the leaderboard, which it does not target (info).
    assert found == {("consumer-incompatible", "WARNING", "config.json"),
                     ("consumer-incompatible", "WARNING", "tokenizer_config.json"),
                     ("consumer-incompatible", "INFO", "tokenizer_config.json")}
    messages = " ".join(f.message for f in report.findings if f.rule == "consumer-incompatible")
    assert "TokenizersBackend" in messages and "only in chat_template.jinja" in messages

    result = run_cli("fix", str(folder), "--select", "consumer-incompatible", "--unsafe-fixes")
    assert result.returncode == 0, result.stdout + result.stderr
    after = check_target(str(folder))
    assert "consumer-incompatible" not in codes(after)
    assert all(e["status"] == "unknown" for e in after.sections["compat"])  # no blocker left; no weights here
    fixed = json.loads((folder / "config.json").read_text())
    assert fixed["rope_theta"] == 100000.0 and fixed["rope_parameters"] == config["rope_parameters"]
    assert read_rope_theta_4x(config) == 10000.0 and read_rope_theta_4x(fixed) == 100000.0

    # transformers 5 reads the fixed checkpoint exactly as before
    from transformers import AutoConfig, AutoTokenizer

    assert AutoConfig.from_pretrained(folder).rope_parameters == AutoConfig.from_pretrained(smollm2_checkpoint).rope_parameters
    before, now = AutoTokenizer.from_pretrained(smollm2_checkpoint), AutoTokenizer.from_pretrained(folder)
    chat = [{"role": "user", "content": "What is 2+2?"}]
    assert now.apply_chat_template(chat, tokenize=False) == before.apply_chat_template(chat, tokenize=False)
    assert now("hello world, 123")["input_ids"] == before("hello world, 123")["input_ids"]
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tokenizer_config["chat_template"] == (folder / "chat_template.jinja").read_text()


def read_rope_theta_4x(config: dict) -> float:
    """The rope_theta transformers 4.x uses for a config.json, as its code reads it (4.57.6): the
    config class takes `rope_theta` as an __init__ argument with its own default (LlamaConfig:
    10000.0, Lfm2Config: 1e6) and sets self.rope_theta from it; `rope_parameters` is no argument of
    any 4.x class, so PretrainedConfig keeps it as an attribute nobody reads; the rotary embedding
    reads config.rope_theta (modeling_rope_utils._compute_default_rope_parameters). The defaults
    are read from the 4.57.6 wheel by make_consumers.py."""
    return float(config.get("rope_theta", kb.rope_theta_default_4x(config["model_type"])))


# An interpreter with transformers 4.x installed (and no torch needed): the rope fix is then read
# by the real 4.x too. Made by hand: python -m venv /tmp/tf4 && /tmp/tf4/bin/pip install transformers==4.57.6
TRANSFORMERS_4_PYTHON = os.environ.get("HFDOCTOR_TRANSFORMERS4_PYTHON")


def test_the_rope_fix_is_read_alike_by_transformers_4_and_5(tmp_path):
    """tiny-thinker as transformers 5 saved it: one safe fix adds rope_theta beside rope_parameters (one
    line, nothing else changes); 5.x reads the same rope parameters as before, 4.x now reads 1e6
    where it read its default 10000."""
    folder = tmp_path / "tiny"
    shutil.copytree(ROOT / "fixtures" / "tiny-thinker", folder)
    before_text = (folder / "config.json").read_text()
    before = json.loads(before_text)
    [finding] = [f for f in check_target(str(folder)).findings if f.rule == "consumer-incompatible"]
    assert str(finding.severity) == "warning" and finding.fix.applicability.value == "safe"
    assert "nothing in the repository declares" in finding.severity_reason
    result = run_cli("fix", str(folder), "--select", "consumer-incompatible")
    assert result.returncode == 0, result.stdout + result.stderr
    after_text = (folder / "config.json").read_text()
    added = [line for line in after_text.splitlines() if line not in before_text.splitlines()]
    assert added == ['  "rope_theta": 1000000.0,'] and len(after_text.splitlines()) == len(before_text.splitlines()) + 1
    assert after_text.index('"rope_parameters"') < after_text.index('\n  "rope_theta"') < after_text.index('"sliding_window"')
    after = json.loads(after_text)
    assert (read_rope_theta_4x(before), read_rope_theta_4x(after)) == (10000.0, 1000000.0)
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(folder).rope_parameters == AutoConfig.from_pretrained(
        ROOT / "fixtures" / "tiny-thinker").rope_parameters == {"rope_theta": 1000000.0, "rope_type": "default"}
    if TRANSFORMERS_4_PYTHON:
        code = ("import sys; from transformers import AutoConfig; "
                "print(*(AutoConfig.from_pretrained(p).rope_theta for p in sys.argv[1:]))")
        proc = subprocess.run([TRANSFORMERS_4_PYTHON, "-c", code, str(ROOT / "fixtures" / "tiny-thinker"), str(folder)],
                              capture_output=True, text=True, timeout=300)
        assert proc.stdout.split() == ["10000.0", "1000000.0"], proc.stderr[-2000:]


CARD = "---\nlicense: apache-2.0\n---\n"


@pytest.mark.parametrize("files,severity", [
    ({"README.md": CARD + "Install with `pip install transformers==4.46.3`.\n"}, "error"),
    ({"requirements.txt": "torch\ntransformers>=4.51,<5\n"}, "error"),
    ({"README.md": CARD + "Serve it with text-generation-inference.\n"}, "error"),
    # Qwen3's card: "With transformers<4.51.0, you will encounter ... KeyError": no pin of 4.x
    ({"README.md": CARD + "With transformers<4.51.0, you will encounter an error.\n"}, "warning"),
    ({"README.md": CARD + "Requires transformers>=5.0.\n"}, "warning"),
    # a configuration file's engines replace what the repository shows
    ({".hfdoctor.toml": 'engines = ["transformers-5", "transformers-4"]\n'}, "error"),
    ({".hfdoctor.toml": 'engines = ["transformers-5", "vllm"]\n',
      "README.md": CARD + "Install with `pip install transformers==4.46.3`.\n"}, "warning"),
])
def test_rope_theta_is_an_error_only_where_a_4x_consumer_is_declared(tmp_path, files, severity):
    folder = tmp_path / "tiny"
    shutil.copytree(ROOT / "fixtures" / "tiny-thinker", folder)
    for name, text in files.items():
        (folder / name).write_text(text)
    report = json.loads(run_cli("check", str(folder), "--format", "json").stdout)
    [finding] = [f for f in report["findings"] if f["rule"] == "consumer-incompatible" and "rope_theta" in f["message"]]
    assert finding["severity"] == severity, finding["severity_reason"]


def test_the_project_fixtures_pass_their_own_check(tmp_path):
    """tiny-thinker and tiny-nothinker as they are, and the seed incident once fixed: exit 0."""
    for name in ("tiny-thinker", "tiny-nothinker"):
        result = run_cli("check", str(ROOT / "fixtures" / name))
        assert result.returncode == 0, result.stdout
    seed = tmp_path / "seed"
    shutil.copytree(ROOT / "fixtures" / "seed-incident", seed)
    assert run_cli("check", str(seed)).returncode == 1
    assert run_cli("fix", str(seed)).returncode == 0
    result = run_cli("check", str(seed))
    assert result.returncode == 0, result.stdout


def test_smollm3_is_not_portable_to_minijinja_and_qwen3_is():
    smol = check_target(str(UPSTREAM / "HuggingFaceTB--SmolLM3-3B"))
    portability = [f for f in smol.findings if f.rule == "template-portability"]
    assert any("minijinja" in f.message and "unknown statement generation" in f.message for f in portability)
    # SmolLM3's card does not name TGI: the finding is info, so the headline says caveat (never "fails" beside it)
    assert {str(f.severity) for f in portability if "minijinja" in f.message} == {"info"}
    assert by_engine(smol)["tgi"]["status"] == "caveat"

    qwen = check_target(str(UPSTREAM / "Qwen--Qwen3-8B"))
    assert "template-portability" not in codes(qwen)
    assert "minijinja: renders the 7 standard conversations exactly as transformers" in by_engine(qwen)["tgi"]["why"]
    if HF_JINJA:
        assert "@huggingface/jinja: renders the 7" in by_engine(qwen)["transformers.js"]["why"]


def test_minijinja_renders_like_transformers():
    """The engine harness itself: Qwen3's template rendered by minijinja is byte-equal to
    transformers' apply_chat_template on the same messages."""
    from transformers import AutoTokenizer

    folder = UPSTREAM / "Qwen--Qwen3-8B"
    template = (folder / "chat_template.jinja").read_text()
    _, result = engines.reference_and_minijinja(template, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
    assert result.compile_error is None and not result.errors
    tokenizer = AutoTokenizer.from_pretrained(folder)
    from hfdoctor.chat import corpus

    for (name, add_generation_prompt), text in result.texts.items():
        inputs = corpus.conversation(name).inputs()
        expected = tokenizer.apply_chat_template(inputs["messages"], tools=inputs["tools"], tokenize=False,
                                                 add_generation_prompt=add_generation_prompt)
        assert text == expected, name


@pytest.mark.skipif(not HF_JINJA, reason="node or @huggingface/jinja is not installed")
def test_hf_jinja_finds_smollm3_tool_rendering_error():
    template = (UPSTREAM / "HuggingFaceTB--SmolLM3-3B" / "chat_template.jinja").read_text()
    result = engines.run_hf_jinja(template, {})
    assert result.compile_error is None
    assert any("Unknown ObjectValue filter: string" in e for e in result.errors.values())


def test_converter_fingerprints_match_llama_cpp():
    """The hashes convert_hf_to_gguf computes for the upstream tokenizers are the ones it
    registers under their llama.cpp names (qwen2, llama-bpe)."""
    assert kb.pre_tokenizer_name(chk_hash(ModelRepo(UPSTREAM / "Qwen--Qwen3-8B"))) == "qwen2"
    assert kb.pre_tokenizer_name(chk_hash(ModelRepo(UPSTREAM / "meta-llama--Llama-3.1-8B-Instruct"))) == "llama-bpe"
    for folder in folders():
        digest = chk_hash(ModelRepo(folder))
        assert digest is None or kb.pre_tokenizer_name(digest), folder.name


def test_changed_pre_tokenizer_blocks_gguf_conversion(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    tok = json.loads((folder / "tokenizer.json").read_text())
    split = tok["pre_tokenizer"]["pretokenizers"][0]
    # punctuation no longer takes the space before it: " ------" becomes " " + "------"
    split["pattern"]["Regex"] = split["pattern"]["Regex"].replace(r" ?[^\s\p{L}\p{N}]+", r"[^\s\p{L}\p{N}]+", 1)
    (folder / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    report = check_target(str(folder))
    blockers = [f for f in report.findings if f.rule == "gguf-convert-blocker"]
    assert len(blockers) == 1 and "BPE pre-tokenizer was not recognized" in blockers[0].message
    assert blockers[0].fix is None
    assert by_engine(report)["llama.cpp"]["status"] == "fails"


def test_gemma2_without_tokenizer_model(tmp_path, smollm2_checkpoint):
    folder = tmp_path / "gemma2-ft"
    shutil.copytree(smollm2_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "gemma2"
    (folder / "config.json").write_text(json.dumps(config))
    report = check_target(str(folder))
    assert any(f.rule == "gguf-convert-blocker" and "tokenizer.model" in f.message for f in report.findings)
    (folder / "tokenizer.model").write_bytes(b"\x0a\x00")  # present: the converter takes the SentencePiece path
    assert "gguf-convert-blocker" not in codes(check_target(str(folder)))


def write_tiny_safetensors(path: Path, metadata: dict | None) -> None:
    import torch
    from safetensors.torch import save_file

    save_file({"model.embed_tokens.weight": torch.zeros(4, 2)}, str(path), metadata=metadata)


# No metadata: only transformers before 4.48 and the leaderboard refuse it (info unless targeted).
@pytest.mark.parametrize("metadata,severity", [(None, "INFO"), ({"format": "np"}, "ERROR"),
                                               ({"format": "pt"}, None), ({"format": "mlx"}, None)])
def test_weights_metadata(tmp_path, metadata, severity):
    write_tiny_safetensors(tmp_path / "model.safetensors", metadata)
    found = [f for f in check_target(str(tmp_path)).findings if f.rule == "weights-metadata"]
    assert [f.severity.name for f in found] == ([severity] if severity else [])
    if found:
        assert found[0].file == "model.safetensors" and found[0].fix is None
    # what the rule says transformers 5 does: it reads every one of them
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert f.metadata() == metadata


def test_real_mlx_weights_have_accepted_metadata():
    corpus = TESTS / "corpus" / "quantized"
    for folder in sorted(p for p in corpus.iterdir() if p.is_dir()):
        assert "weights-metadata" not in codes(check_target(str(folder))), folder.name


def test_compat_in_json_and_text(copy_upstream):
    folder = copy_upstream("openai--gpt-oss-20b")
    out = run_cli("check", str(folder), "--format", "json")
    data = json.loads(out.stdout)
    entries = {e["engine"]: e for e in data["compat"]}
    # The card does not name TGI or the leaderboard: the finding is info, so the headline says caveat, not fails
    assert set(entries) == set(ENGINES) and entries["tgi"]["status"] == "caveat"
    assert {f["severity"] for f in data["findings"] if "only in chat_template.jinja" in f["message"]} == {"info"}
    text = run_cli("check", str(folder)).stdout
    assert "compat: caveat: transformers-4, tgi, open-llm-leaderboard; unknown: transformers-5," in text
    assert "tgi, open-llm-leaderboard caveat: the chat template is only" in text


def test_template_copied_into_tokenizer_config_changes_nothing_for_transformers(copy_upstream):
    folder = copy_upstream("openai--gpt-oss-20b")
    before = (folder / "tokenizer_config.json").read_bytes()
    # Unsafe (a second copy of the template can drift): only with --unsafe-fixes.
    assert run_cli("fix", str(folder), "--select", "consumer-incompatible").returncode in (0, 1)
    assert (folder / "tokenizer_config.json").read_bytes() == before
    assert run_cli("fix", str(folder), "--select", "consumer-incompatible", "--unsafe-fixes").returncode in (0, 1)
    after = json.loads((folder / "tokenizer_config.json").read_text())
    assert after["chat_template"] == (folder / "chat_template.jinja").read_text()
    assert {k: v for k, v in after.items() if k != "chat_template"} == json.loads(before)
    assert run_cli("fix", str(folder), "--select", "consumer-incompatible", "--unsafe-fixes").returncode in (0, 1)
    assert json.loads((folder / "tokenizer_config.json").read_text()) == after  # idempotent


def test_knowledge_tables_have_sources():
    data = kb.consumers()
    assert data["transformers"]["model_type_since"]["qwen3"] == "4.51.3"
    assert data["transformers"]["model_type_since"]["llama"] == data["transformers"]["oldest_sampled"]
    assert "llama.cpp@" in data["llama_cpp_converter"]["source"]
    for kind in ("reasoning", "tool_call"):
        assert all(entry["source"] for entry in kb.serving_parsers()[kind].values())
    # the installed transformers knows every model type the table says its version knows
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if transformers.__version__ == data["transformers"]["sampled_versions"][-1]:
        assert set(CONFIG_MAPPING_NAMES) <= set(data["transformers"]["model_type_since"])
    digest = hashlib.sha256(kb.chktxt().encode()).hexdigest()
    assert len(kb.chktxt()) > 100 and digest


# --- compat says what it knows (issue 32) ------------------------------------------------------------


def test_gguf_only_folder_loads_only_in_llama_cpp(tmp_path):
    """A folder of GGUF files: llama.cpp's checks ran (the GGUF reads); transformers, mlx-lm,
    transformers.js and the leaderboard have nothing they load here, so they are unknown."""
    from gguf_util import write_gguf

    folder = tmp_path / "gguf-only"
    folder.mkdir()
    upstream = UPSTREAM / "Qwen--Qwen3-8B"
    write_gguf(folder / "model.gguf", upstream, (upstream / "chat_template.jinja").read_text()
               if (upstream / "chat_template.jinja").is_file() else None)
    compat = by_engine(check_target(str(folder)))
    assert compat["llama.cpp"]["status"] == "loads", compat["llama.cpp"]
    for engine in ("mlx-lm", "transformers.js", "open-llm-leaderboard", "transformers-5", "vllm"):
        assert compat[engine]["status"] == "unknown", compat[engine]
        assert "not verified" in compat[engine]["why"]
    assert "GGUF files only" in compat["open-llm-leaderboard"]["why"]


def test_headline_follows_the_severity_the_repository_targets(copy_upstream):
    """The same .jinja-only template: info and `tgi caveat` when the card never names TGI;
    a warning and `tgi fails` once it does."""
    folder = copy_upstream("openai--gpt-oss-20b")
    data = json.loads(run_cli("check", str(folder), "--format", "json").stdout)
    assert {e["engine"]: e["status"] for e in data["compat"]}["tgi"] == "caveat"
    finding = next(f for f in data["findings"] if "only in chat_template.jinja" in f["message"])
    assert finding["severity"] == "info" and "tgi caveat" in finding["message"] and "fails" not in finding["message"]
    card = folder / "README.md"
    card.write_text(card.read_text() + "\n\nServe it with text-generation-inference (TGI).\n")
    data = json.loads(run_cli("check", str(folder), "--format", "json").stdout)
    assert {e["engine"]: e["status"] for e in data["compat"]}["tgi"] == "fails"
    assert {f["severity"] for f in data["findings"] if "only in chat_template.jinja" in f["message"]} == {"warning"}


def test_no_status_contradicts_the_findings(copy_upstream):
    """`fails` in the headline only beside a finding above info, on every folder with a problem."""
    for name in ("openai--gpt-oss-20b", "Qwen--Qwen3-Coder-30B-A3B-Instruct"):
        data = json.loads(run_cli("check", str(copy_upstream(name)), "--format", "json").stdout)
        failing = [e for e in data["compat"] if e["status"] == "fails"]
        loud = [f for f in data["findings"] if f["severity"] in ("error", "warning")]
        assert not failing or loud, (name, failing)


def test_weights_make_loads(tmp_path):
    """tiny-thinker with its real weights: every check transformers needs ran: loads."""
    from conftest import ROOT

    report = check_target(str(ROOT / "fixtures" / "tiny-thinker"))
    compat = by_engine(report)
    assert compat["transformers-5"]["status"] == "loads", compat["transformers-5"]
    assert compat["transformers.js"]["status"] == "unknown"


def test_seed_incident_tokenizer_is_recognised_by_llama_cpp():
    """The demo's tokenizer is Qwen3's own (its merges cut to what the converter's check text
    needs): llama.cpp's converter fingerprint is Qwen's, and the demo shows only the seed's
    two real problems."""
    from conftest import ROOT
    from hfdoctor.compat.assess import compute_chk_hash

    seed = ROOT / "fixtures" / "seed-incident"
    digest = compute_chk_hash(ModelRepo(str(seed)))
    assert digest == compute_chk_hash(ModelRepo(str(UPSTREAM / "Qwen--Qwen3-8B")))
    assert kb.pre_tokenizer_name(digest) == "qwen2"
    report = check_target(str(seed))
    assert sorted(f.rule for f in report.findings) == ["base-model-mismatch", "missing-chat-template"]
    assert "fails" not in {e["status"] for e in report.sections["compat"]}
