"""Hostile repositories, built by the tests: each one is what an attacker (or a broken tool)
could upload to make a linter run its code, hang, crash, write, or go online.

`build(name, root)` makes the repository `name` under `root` and returns a Case: the target
to check, the extra arguments, the directory to run in, and a marker file that exists only
if code from the repository ran. The cases are the classes of issue 20; tests/test_hostile.py
runs `hfdoctor check` on each one under an audit hook.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TINY = FIXTURES / "tiny-thinker"
MB = 1024 * 1024


@dataclass
class Case:
    target: Path
    args: list[str] = field(default_factory=list)
    cwd: Path | None = None
    marker: Path | None = None  # exists only if the repository's code ran
    # rules one of which must report the hostile file (empty: exit 0 or 1 is enough)
    expect: tuple[str, ...] = ()


def _metadata_copy(dest: Path) -> Path:
    """tiny-thinker's metadata (no weights): a small, real, clean chat checkpoint."""
    shutil.copytree(TINY, dest, ignore=shutil.ignore_patterns("*.safetensors"))
    return dest


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=repo, env=env, check=True,
                          capture_output=True, text=True).stdout


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], pad_header_to: int = 0) -> None:
    """A safetensors file whose data is a hole; the header padded with spaces to `pad_header_to` bytes."""
    sizes = {"BF16": 2, "F32": 4, "I32": 4, "U32": 4, "U8": 1}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * max(-len(raw) % 8, pad_header_to - len(raw))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + offset)


# --- code from the repository runs ------------------------------------------------------


def node_modules_in_repo(root: Path) -> Case:
    """`check .` from inside a repository that ships its own @huggingface/jinja."""
    repo = _metadata_copy(root / "repo")
    marker = root / "node-ran"
    package = repo / "node_modules" / "@huggingface" / "jinja"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@huggingface/jinja", "main": "index.js"}))
    (package / "index.js").write_text(f"require('fs').writeFileSync({json.dumps(str(marker))}, 'ran');\n"
                                      "module.exports = {Template: class { render() { return ''; } }};\n")
    return Case(Path("."), cwd=repo, marker=marker)


def git_fsmonitor(root: Path) -> Case:
    """A work tree whose .git/config sets core.fsmonitor (and hooks) to a command."""
    repo = _metadata_copy(root / "repo")
    marker = root / "fsmonitor-ran"
    _git(repo, "init", "-q")
    _git(repo, "config", "core.fsmonitor", f"touch {marker}; false")
    _git(repo, "config", "core.hooksPath", str(root))
    (root / "post-index-change").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (root / "post-index-change").chmod(0o755)
    big = repo / "big.bin"
    with open(big, "wb") as f:
        f.truncate(11 * MB)
    return Case(repo, marker=marker, expect=("lfs-attributes",))


def git_fsmonitor_git_rev(root: Path) -> Case:
    """--git-rev on a repository whose .git/config sets core.fsmonitor, a textconv and a smudge filter."""
    repo = _metadata_copy(root / "repo")
    marker = root / "fsmonitor-ran"
    _git(repo, "init", "-q")
    (repo / ".gitattributes").write_text("*.json diff=evil filter=evil\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "x")
    # set only after the commit: the builder's own git commands must not run them
    for key, value in (("core.fsmonitor", f"touch {marker}; false"), ("core.hooksPath", str(root)),
                       ("diff.evil.textconv", f"touch {marker}; cat"), ("filter.evil.smudge", f"touch {marker}; cat"),
                       ("filter.evil.clean", f"touch {marker}; cat"), ("filter.evil.process", f"touch {marker}")):
        _git(repo, "config", key, value)
    for hook in ("post-index-change", "reference-transaction", "post-checkout"):
        (root / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (root / hook).chmod(0o755)
    return Case(repo, ["--git-rev", "HEAD"], marker=marker)


def lfs_oid_traversal(root: Path) -> Case:
    """An LFS pointer whose oid climbs out of .git/lfs/objects (--git-rev)."""
    repo = _metadata_copy(root / "repo")
    _git(repo, "init", "-q")
    secret = root / "secret.bin"
    secret.write_bytes(b"\x80\x02cposix\nsystem\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03.")
    oid = str(secret)  # pathlib: joining an absolute path drops what came before it
    size = secret.stat().st_size
    (repo / "pytorch_model.bin").write_text(
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "x")
    return Case(repo, ["--git-rev", "HEAD"])


# --- hangs ---------------------------------------------------------------------------------


def gitattributes_backtracking(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    _git(repo, "init", "-q")
    name = "a" * 60
    with open(repo / name, "wb") as f:
        f.truncate(11 * MB)
    (repo / ".gitattributes").write_text("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b filter=lfs diff=lfs merge=lfs -text\n"
                                         "[ filter=lfs\n[z-a] filter=lfs\n")
    return Case(repo, expect=("lfs-attributes",))


def adapter_regex(root: Path) -> Case:
    repo = root / "adapter"
    repo.mkdir()
    name = "base_model.model." + "a" * 40 + "!.lora_A.weight"
    (repo / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": 8, "lora_alpha": 16, "base_model_name_or_path": "Qwen/Qwen3-8B",
        "target_modules": "(a|aa)+b", "rank_pattern": {"(a|aa)+b": 4}, "task_type": "CAUSAL_LM"}))
    _safetensors(repo / "adapter_model.safetensors", {name: ("BF16", [8, 16]),
                                                      name.replace("lora_A", "lora_B"): ("BF16", [16, 8])})
    return Case(repo)


def card_front_matter(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    (repo / "README.md").write_text("---\n" + "\n" * 200_000 + "license: x\n")
    return Case(repo)


def long_tensor_names(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    tensors = {("h." * 20_000) + f"x{i}": ("BF16", [2]) for i in range(20)}
    _safetensors(repo / "model.safetensors", tensors)
    return Case(repo, expect=("weights-config-mismatch",))


def empty_thinking_template(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    config = json.loads((repo / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ '<' + 'think' * 20000 + '>' }}{% for m in messages %}{{ m.content }}{% endfor %}"
    (repo / "tokenizer_config.json").write_text(json.dumps(config))
    return Case(repo)


def many_findings(root: Path) -> Case:
    """2,000 added tokens that disagree between tokenizer_config.json and tokenizer.json."""
    repo = _metadata_copy(root / "repo")
    config = json.loads((repo / "tokenizer_config.json").read_text())
    decoder = config.setdefault("added_tokens_decoder", {})
    for i in range(2000):
        decoder[str(100_000 + i)] = {"content": f"<extra_{i}>", "special": True, "lstrip": False, "rstrip": False,
                                     "normalized": False, "single_word": False}
    (repo / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return Case(repo)


SLOW_TEMPLATE = ("{% for i in range(99999) %}{% for j in range(99999) %}{% if i == j == 99998 %}x{% endif %}"
                 "{% endfor %}{% endfor %}")


def slow_additional_templates(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    extra = repo / "additional_chat_templates"
    extra.mkdir()
    for i in range(100):
        (extra / f"t{i}.jinja").write_text(SLOW_TEMPLATE + f"{{# {i} #}}")
    return Case(repo, expect=("check-incomplete",))


def gguf_named_templates(root: Path) -> Case:
    import gguf
    import numpy as np

    repo = root / "gguf"
    repo.mkdir()
    writer = gguf.GGUFWriter(str(repo / "model.gguf"), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b", "<|im_end|>"])
    writer.add_token_types([1, 1, 3])
    writer.add_eos_token_id(2)
    writer.add_chat_template(SLOW_TEMPLATE)
    for i in range(300):
        writer.add_string(f"tokenizer.chat_template.t{i}", SLOW_TEMPLATE + f"{{# {i} #}}")
    writer.add_tensor("token_embd.weight", np.zeros((3, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Case(repo, expect=("check-incomplete",))


def huge_headers(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    for i in range(4):
        tensors = {f"model.layers.{j}.w{i}": ("BF16", [1]) for j in range(2)}
        _safetensors(repo / f"model-{i + 1:05d}-of-00004.safetensors", tensors, pad_header_to=89 * MB)
    return Case(repo)


def hard_links(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    first = repo / "w0.bin"
    with open(first, "wb") as f:
        f.write(b"\x80\x02" + b"N0" * (32 * MB))  # 64 MB of None, pop: a pickle the scanner walks opcode by opcode
        f.truncate(500 * MB)
    for i in range(1, 16):
        os.link(first, repo / f"w{i}.bin")
    return Case(repo)


def many_quantized_modules(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    config = json.loads((repo / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    (repo / "config.json").write_text(json.dumps(config))
    tensors = {}
    for i in range(30_000):
        stem = f"model.layers.{i % 28}.mlp.experts.{i}.up_proj"
        tensors[f"{stem}.qweight"] = ("I32", [16, 64])
        tensors[f"{stem}.qzeros"] = ("I32", [1, 8])
        tensors[f"{stem}.scales"] = ("BF16", [1, 64])
    _safetensors(repo / "model.safetensors", tensors)
    return Case(repo)


def gpt2_many_layers(root: Path) -> Case:
    repo = root / "gpt2"
    repo.mkdir()
    (repo / "config.json").write_text(json.dumps({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 50_000, "n_embd": 8, "n_head": 2,
        "vocab_size": 16, "n_positions": 8}))
    _safetensors(repo / "model.safetensors", {"transformer.wte.weight": ("F32", [16, 8])})
    return Case(repo)


def git_big_blobs(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    _git(repo, "init", "-q")
    for i in range(3):
        with open(repo / f"pytorch_model-{i}.bin", "wb") as f:
            f.write(b"\x80\x02" + b"N0" * (20 * MB))  # 40 MB of opcodes each, as plain git blobs
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "x")
    return Case(repo, ["--git-rev", "HEAD"])


# --- crashes ----------------------------------------------------------------------------------


def deep_json(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    (repo / "config.json").write_text("[" * 20_000 + "]" * 20_000)
    (repo / "generation_config.json").write_text('{"a":' * 900 + "1" + "}" * 900)
    return Case(repo, expect=("file-unreadable",))


def deep_yaml(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    (repo / "README.md").write_text("---\nlicense: " + "[" * 20_000 + "]" * 20_000 + "\n---\nhi\n")
    return Case(repo, expect=("card-metadata",))  # the card's front matter is card-metadata's


def yaml_alias_bomb(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 30):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    (repo / "README.md").write_text("---\n" + "\n".join(lines) + "\ntags: *a29\n---\nhi\n")
    return Case(repo, expect=("card-metadata",))


def huge_integers(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    config = json.loads((repo / "config.json").read_text())
    text = json.dumps(config)[:-1] + ', "vocab_size_x": ' + "9" * 5000 + "}"
    (repo / "config.json").write_text(text)
    (repo / "README.md").write_text("---\nlicense: mit\nbase_model: " + "9" * 5000 + "\n---\n")
    return Case(repo, expect=("file-unreadable",))


def lone_surrogates(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    config = json.loads((repo / "tokenizer_config.json").read_text())
    config["eos_token"] = "\ud800"
    config["chat_template"] = "{{ '\ud800' }}{% for m in messages %}{{ m.content }}{% endfor %}"
    (repo / "tokenizer_config.json").write_text(json.dumps(config))
    return Case(repo)


def non_utf8_name(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    name = os.fsencode(str(repo)) + b"/model-\xff.safetensors"
    with open(name, "wb") as f:
        f.write(b"\x00" * 4)
    return Case(repo, expect=("weights-unreadable",))


def tokenizers_panic(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    tok = json.loads((repo / "tokenizer.json").read_text())
    # tokenizers panics (a BaseException) loading an invalid Precompiled charsmap
    # (huggingface/tokenizers #2156), and encoding with a FixedLength pre-tokenizer of length 0 (#2151).
    tok["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "!!not base64"}
    (repo / "tokenizer.json").write_text(json.dumps(tok))
    second = root / "repo2"
    shutil.copytree(repo, second)
    tok["normalizer"] = None
    tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [tok.get("pre_tokenizer") or {"type": "ByteLevel"},
                                                                 {"type": "FixedLength", "length": 0}]}
    (second / "tokenizer.json").write_text(json.dumps(tok))
    return Case(repo, [str(second)], expect=("file-unreadable",))


def wrong_types(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    tok = json.loads((repo / "tokenizer.json").read_text())
    tok["model"] = {"type": "Unigram", "unk_id": 0, "vocab": [[["x"], 0.0], ["y", 0.0], [{}, 1]]}
    (repo / "tokenizer.json").write_text(json.dumps(tok))
    config = json.loads((repo / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"]["²"] = {"content": "<sq>", "special": True}
    config["added_tokens_decoder"]["٣"] = {"content": "<ar>", "special": True}
    (repo / "tokenizer_config.json").write_text(json.dumps(config))
    return Case(repo)


def quantization_group_sizes(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    config = json.loads((repo / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 0}
    (repo / "config.json").write_text(json.dumps(config))
    _safetensors(repo / "model.safetensors", {"model.layers.0.mlp.up_proj.qweight": ("I32", [16, 64]),
                                              "model.layers.0.mlp.up_proj.scales": ("BF16", [1, 64]),
                                              "model.layers.1.mlp.up_proj.qweight": ("I32", [16, 64])})
    second = root / "repo2"
    shutil.copytree(repo, second)
    config["quantization_config"] = {"quant_method": "awq", "bits": "4", "group_size": "64", "zero_point": "x"}
    (second / "config.json").write_text(json.dumps(config))
    return Case(repo, [str(second)])


def unterminated_bracket_gitattributes(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    _git(repo, "init", "-q")
    with open(repo / "big[1].bin", "wb") as f:
        f.truncate(11 * MB)
    (repo / ".gitattributes").write_text("big[ filter=lfs\n*.bin[ filter=lfs\n[!]] filter=lfs\n[\\] filter=lfs\n")
    return Case(repo, expect=("lfs-attributes",))


def nested_directories(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    fd = os.open(repo, os.O_RDONLY)
    try:  # relative to a directory descriptor: the path itself would pass PATH_MAX
        for _ in range(1500):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open("model.safetensors", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"\x00" * 3)
        os.close(leaf)
    finally:
        os.close(fd)
    return Case(repo, expect=("check-incomplete",))


def unreadable_files(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    (repo / "secret").mkdir()
    (repo / "secret" / "model.safetensors").write_bytes(b"x")
    (repo / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    for rel in ("tokenizer.json", "pytorch_model.bin"):
        (repo / rel).chmod(0)
    (repo / "secret").chmod(0)
    # (as root nothing is unreadable: test_hostile simulates the refusal in-process)
    return Case(repo, expect=("file-unreadable", "weights-unreadable"))


# --- writes, network ----------------------------------------------------------------------------


def detr_backbone(root: Path) -> Case:
    repo = root / "detr"
    repo.mkdir()
    (repo / "config.json").write_text(json.dumps({
        "architectures": ["DetrForObjectDetection"], "model_type": "detr", "backbone": "resnet50",
        "use_timm_backbone": False, "use_pretrained_backbone": True, "backbone_config": None,
        "num_queries": 4, "d_model": 8}))
    _safetensors(repo / "model.safetensors", {"model.query_position_embeddings.weight": ("F32", [4, 8])})
    return Case(repo)


def null_config(root: Path) -> Case:
    repo = _metadata_copy(root / "repo")
    (repo / "config.json").write_text("null")
    return Case(repo, expect=("file-unreadable",))


BUILDERS: dict[str, Callable[[Path], Case]] = {f.__name__: f for f in (
    node_modules_in_repo, git_fsmonitor, git_fsmonitor_git_rev, lfs_oid_traversal,
    gitattributes_backtracking, adapter_regex, card_front_matter, long_tensor_names, empty_thinking_template,
    many_findings, slow_additional_templates, gguf_named_templates, huge_headers, hard_links,
    many_quantized_modules, gpt2_many_layers, git_big_blobs,
    deep_json, deep_yaml, yaml_alias_bomb, huge_integers, lone_surrogates, non_utf8_name, tokenizers_panic,
    wrong_types, quantization_group_sizes, unterminated_bracket_gitattributes, nested_directories,
    unreadable_files, detr_backbone, null_config,
)}


def remove_tree(root: Path) -> None:
    """Delete a tree iteratively (shutil.rmtree and pytest's cleanup recurse, and the nested
    directories case is deeper than Python's recursion limit)."""
    directories, pending = [], [str(root)]
    while pending:
        current = pending.pop()
        directories.append(current)
        with os.scandir(current) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    os.chmod(entry.path, 0o755)
                    pending.append(entry.path)
                else:
                    os.unlink(entry.path)
    for directory in reversed(directories):
        os.rmdir(directory)


def build(name: str, root: Path) -> Case:
    root.mkdir(parents=True, exist_ok=True)
    return BUILDERS[name](root)
