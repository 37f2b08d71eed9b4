"""pad-token-is-eos and tokenizer-adds-eos, judged by what the real libraries do with the files.

Each broken copy is also read by the library whose behaviour the finding describes:
transformers (tokenizer, DataCollatorForLanguageModeling) and llama.cpp's converter
(gguf-py's SpecialVocab, the code convert_hf_to_gguf.py runs).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import UPSTREAM, read_json, rules_alone, run_cli, write_json
from hfdoctor.knowledge.upstream import Upstream

OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)


def findings(folder: Path, code: str):
    return rules_alone(folder, [code], OFFLINE)


def llama_cpp_adds(folder: Path) -> dict[str, bool]:
    """What llama.cpp's converter would write as tokenizer.ggml.add_{bos,eos}_token."""
    import gguf

    return dict(gguf.SpecialVocab(folder, load_merges=False).add_special_token)


def transformers_ids(folder: Path, text: str = "Hello world") -> list[int]:
    from transformers import AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    return AutoTokenizer.from_pretrained(folder)(text)["input_ids"]


# --- pad-token-is-eos ---------------------------------------------------------------------

def test_pad_token_is_eos_on_upstream():
    """SmolLM3, DeepSeek-R1 and its Qwen distill pad with their end of turn (true: the
    collator masks every end of turn); every other upstream folder is silent."""
    fired = {}
    for folder in sorted(p for p in UPSTREAM.iterdir() if p.is_dir()):
        for f in findings(folder, "TOK005"):
            fired[folder.name] = f
    assert set(fired) == {"HuggingFaceTB--SmolLM3-3B", "deepseek-ai--DeepSeek-R1",
                          "deepseek-ai--DeepSeek-R1-Distill-Qwen-32B"}
    smol3 = fired["HuggingFaceTB--SmolLM3-3B"]
    # config.json's pad_token_id 128004 is <|finetune_right_pad_id|>: the tokenizer is made to agree.
    assert smol3.fix.title == "set pad_token to <|finetune_right_pad_id|>" and str(smol3.fix.applicability) == "safe"


def test_pad_token_fix_on_a_real_checkpoint(smollm2_checkpoint, tmp_path):
    """SmolLM2-135M-Instruct pads with <|im_end|>: the collator masks every end of turn;
    after the (unsafe) fix it keeps them as labels."""
    import torch
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    folder = tmp_path / "smol"
    shutil.copytree(smollm2_checkpoint, folder)

    def masked_end_of_turn() -> bool:
        tok = AutoTokenizer.from_pretrained(folder)
        text = tok.apply_chat_template([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
                                       tokenize=False)
        batch = DataCollatorForLanguageModeling(tok, mlm=False)([tok(text), tok(text + " more")])
        end = tok.convert_tokens_to_ids("<|im_end|>")
        return bool(((batch["input_ids"] == end) & (batch["labels"] == -100)).any().item())

    assert masked_end_of_turn()
    [finding] = findings(folder, "TOK005")
    assert str(finding.fix.applicability) == "unsafe" and "<|endoftext|>" in finding.message
    run_cli("fix", "--unsafe-fixes", str(folder))
    assert read_json(folder / "tokenizer_config.json")["pad_token"] == "<|endoftext|>"
    assert not masked_end_of_turn() and not findings(folder, "TOK005")
    assert torch is not None


def test_pad_token_silent_when_pad_is_another_token(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")  # pad <|endoftext|>, end of turn <|im_end|>
    assert not findings(folder, "TOK005")
    tc = read_json(folder / "tokenizer_config.json")
    tc["pad_token"] = "<|im_end|>"
    write_json(folder / "tokenizer_config.json", tc, ensure_ascii=False)
    [finding] = findings(folder, "TOK005")
    # generation_config.json's pad_token_id 151643 (<|endoftext|>) makes the fix certain.
    assert finding.fix.title == "set pad_token to <|endoftext|>" and str(finding.fix.applicability) == "safe"
    run_cli("fix", str(folder))
    assert read_json(folder / "tokenizer_config.json")["pad_token"] == "<|endoftext|>"


def test_pad_token_of_a_base_model_is_not_checked(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-4B-Base")
    tc = read_json(folder / "tokenizer_config.json")
    tc["pad_token"] = tc["eos_token"]
    write_json(folder / "tokenizer_config.json", tc, ensure_ascii=False)
    assert not findings(folder, "TOK005")


# --- tokenizer-adds-eos -------------------------------------------------------------------

def test_tokenizer_adds_eos_silent_on_upstream():
    for folder in sorted(p for p in UPSTREAM.iterdir() if p.is_dir()):
        assert not findings(folder, "TOK006"), folder.name


def test_add_eos_flag_that_tokenizer_json_ignores(copy_upstream):
    """transformers #30947: add_eos_token true, tokenizer.json without eos; llama.cpp's
    converter follows the flag (and transformers 4.x would, for a Llama class)."""
    folder = copy_upstream("meta-llama--Llama-3.1-8B-Instruct")
    tc = read_json(folder / "tokenizer_config.json")
    tc["add_eos_token"] = True
    write_json(folder / "tokenizer_config.json", tc, ensure_ascii=False)
    assert llama_cpp_adds(folder)["eos"] is True
    assert transformers_ids(folder)[-1] != 128009  # transformers 5 reads tokenizer.json: no eos
    [finding] = findings(folder, "TOK006")
    assert str(finding.severity) == "error" and "llama.cpp's converter" in finding.message
    assert "transformers 4.x" not in finding.message  # PreTrainedTokenizerFast ignores the flag in 4.x
    run_cli("fix", str(folder))
    assert read_json(folder / "tokenizer_config.json")["add_eos_token"] is False
    assert llama_cpp_adds(folder)["eos"] is False and not findings(folder, "TOK006")


def test_add_eos_flag_on_a_llama_class_names_transformers_4(copy_upstream):
    folder = copy_upstream("meta-llama--Llama-3.1-8B-Instruct")
    tc = read_json(folder / "tokenizer_config.json")
    tc.update(add_eos_token=True, tokenizer_class="LlamaTokenizerFast")
    write_json(folder / "tokenizer_config.json", tc, ensure_ascii=False)
    [finding] = findings(folder, "TOK006")
    assert "transformers 4.x and llama.cpp's converter" in finding.message


def test_post_processor_appends_eos(copy_upstream):
    folder = copy_upstream("meta-llama--Llama-3.1-8B-Instruct")
    tj = read_json(folder / "tokenizer.json")
    template = tj["post_processor"]["processors"][1]
    template["single"].append({"SpecialToken": {"id": "<|eot_id|>", "type_id": 0}})
    template["special_tokens"]["<|eot_id|>"] = {"id": "<|eot_id|>", "ids": [128009], "tokens": ["<|eot_id|>"]}
    (folder / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")
    assert transformers_ids(folder)[-1] == 128009  # every engine appends it now
    [finding] = findings(folder, "TOK006")
    assert str(finding.severity) == "error" and "after the generation prompt" in finding.message
    assert str(finding.fix.applicability) == "unsafe"
    run_cli("fix", str(folder))
    assert transformers_ids(folder)[-1] == 128009  # unsafe: not applied by default
    run_cli("fix", "--unsafe-fixes", str(folder))
    assert transformers_ids(folder)[-1] != 128009 and not findings(folder, "TOK006")


def test_bos_flag_disagreement(copy_upstream):
    """Mistral's tokenizer.json adds <s>; add_bos_token false makes llama.cpp (and 4.x) drop it."""
    folder = copy_upstream("mistralai--Mistral-7B-Instruct-v0.3")
    assert llama_cpp_adds(folder)["bos"] is True and not findings(folder, "TOK006")
    tc = read_json(folder / "tokenizer_config.json")
    tc["add_bos_token"] = False
    write_json(folder / "tokenizer_config.json", tc, ensure_ascii=False)
    assert llama_cpp_adds(folder)["bos"] is False
    [finding] = findings(folder, "TOK006")
    assert str(finding.severity) == "warning" and finding.fix is None
    assert "transformers 4.x and llama.cpp's converter leave it out" in finding.message


def test_generation_prompt_ending_with_eos(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    path = folder / "chat_template.jinja"
    text = path.read_text(encoding="utf-8")
    assert text.count("'<|im_start|>assistant\\n'") >= 1
    path.write_text(text.replace("{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n' + eos_token }}"),
                    encoding="utf-8")
    [finding] = findings(folder, "TOK006")
    assert finding.file == "chat_template.jinja" and "generation prompt ends with the eos" in finding.message
