"""Regenerate vocab_fingerprints.json: which vocabulary a tokenizer is, from llama.cpp's vocabulary files.

llama.cpp's repository ships the vocabularies of many families as small GGUF files
(models/ggml-vocab-*.gguf: the tokens, their ids, the merges and the pre-tokenizer type,
no weights). For each one this writes only derived hashes, never the vocabulary:

- sample: sha256 of the tokens at ids 1000, 2000, ... 30000 (hfdoctor.lineage.VOCAB_SAMPLE_IDS),
  the same hash lineage computes from a repository's tokenizer.json; equal for equal vocabularies;
- merges_head: sha256 of the first 1,000 merges (BPE vocabularies only);
- pre: the pre-tokenizer type llama.cpp's converter recorded (tokenizer.ggml.pre);
- the group this vocabulary is named in families.json's vocab_groups.

Llama 1/2, TinyLlama and Phi-3 share the Llama SentencePiece vocabulary ("llama-spm"); Mistral's
32,000-entry vocabulary is another one, though both have <s>=1 and </s>=2.

    python upstream_templates/make_vocab_fingerprints.py LLAMA_CPP_GIT_DIR
(a clone or bare mirror of ggml-org/llama.cpp; files of 4 MiB and more may be absent from
snapshots: those are skipped and listed.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import tempfile
from pathlib import Path

import gguf

# convert_hf_to_gguf_update.py lists the Hub repo each vocabulary file was converted from.
UPDATE_SCRIPT = "convert_hf_to_gguf_update.py"
MODEL_LINE = re.compile(r'"name":\s*"([^"]+)".*?"repo":\s*"https://huggingface.co/([^"]+)"')

HERE = Path(__file__).resolve().parent
FILE = "vocab_fingerprints.json"
SAMPLE_IDS = range(1000, 30001, 1000)  # hfdoctor.lineage.VOCAB_SAMPLE_IDS
# ggml-vocab-<name>.gguf -> the group families.json names it by (the same vocabulary
# under two file names gets one group: phi-3 is llama-spm plus added tokens).
GROUPS = {
    "llama-spm": "llama-spm", "phi-3": "llama-spm", "falcon": "falcon-bpe", "gpt-2": "gpt2-bpe",
    "gpt-neox": "neox-bpe", "mpt": "neox-bpe",
    # llama.cpp's "starcoder" vocabulary is bigcode/starcoder2-3b's; "refact" (Refact-1.6) uses the
    # first StarCoder's (WizardCoder-15B's tokenizer.json has the same sample).
    "starcoder": "starcoder2-bpe", "refact": "starcoder-bpe",
    "deepseek-coder": "deepseek-coder-bpe", "deepseek-llm": "deepseek-llm-bpe", "baichuan": "baichuan-spm",
    "command-r": "command-r-bpe", "qwen2": "qwen2-bpe", "llama-bpe": "cl100k-bpe",
}


def _string(field) -> str:
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def _strings(field) -> list[str]:
    return [bytes(field.parts[i]).decode("utf-8", "surrogatepass") for i in field.data]


def fingerprint(path: Path) -> dict:
    fields = gguf.GGUFReader(path).fields
    tokens = _strings(fields["tokenizer.ggml.tokens"])
    merges = _strings(fields["tokenizer.ggml.merges"]) if "tokenizer.ggml.merges" in fields else []
    found = {
        "model": _string(fields["tokenizer.ggml.model"]),
        "pre": _string(fields["tokenizer.ggml.pre"]) if "tokenizer.ggml.pre" in fields else None,
        "size": len(tokens),
        "sample": (hashlib.sha256("\n".join(tokens[i] for i in SAMPLE_IDS).encode()).hexdigest()[:16]
                   if len(tokens) > max(SAMPLE_IDS) else None),
        "merges_head": hashlib.sha256("\n".join(merges[:1000]).encode()).hexdigest()[:16] if merges else None,
    }
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("git_dir", help="a clone or mirror of ggml-org/llama.cpp")
    parser.add_argument("--commit", default="HEAD")
    args = parser.parse_args()
    git = ["git", "--git-dir", args.git_dir]
    commit = subprocess.run(git + ["rev-parse", args.commit], capture_output=True, text=True, check=True).stdout.strip()
    listing = subprocess.run(git + ["ls-tree", "-l", commit, "models/"], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    update = subprocess.run(git + ["show", f"{commit}:{UPDATE_SCRIPT}"], capture_output=True, text=True).stdout
    converted_from = dict(MODEL_LINE.findall(update))
    vocabularies, absent = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for line in listing:
            meta, _, path = line.partition("\t")
            name = Path(path).name
            if not (name.startswith("ggml-vocab-") and name.endswith(".gguf")):
                continue
            key = name[len("ggml-vocab-"):-len(".gguf")]
            blob = meta.split()[2]
            data = subprocess.run(git + ["cat-file", "blob", blob], capture_output=True).stdout
            if not data.startswith(b"GGUF"):
                absent.append(path)
                continue
            local = Path(tmp) / name
            local.write_bytes(data)
            entry = {"file": path, "git_blob": blob, "converted_from": converted_from.get(key), "group": GROUPS.get(key)}
            entry.update(fingerprint(local))
            vocabularies.append(entry)
    out = {"about": "Generated by make_vocab_fingerprints.py from llama.cpp's models/ggml-vocab-*.gguf: derived "
                    "hashes only (sample: sha256 of the tokens at ids 1000..30000 step 1000; merges_head: sha256 "
                    "of the first 1,000 merges; pre: llama.cpp's pre-tokenizer type).",
           "source": {"repo": "ggml-org/llama.cpp", "commit": commit},
           "absent_from_snapshot": absent,
           "vocabularies": vocabularies}
    (HERE / FILE).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {FILE}: {len(vocabularies)} vocabularies, {len(absent)} absent")


if __name__ == "__main__":
    main()
