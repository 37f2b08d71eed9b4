"""Small repositories that cost a reader a lot of time or memory (issue 40, §5), each beside a benign
repository of the same size.

`build(name, root, benign=False)` makes the repository `name` under `root` and returns a
hostile.Case. A hostile input is a few kilobytes to a few megabytes that made one of hfdoctor's
newer readers take minutes or gigabytes; its benign twin has the same size and shape but
nothing that provokes the blow-up (tests/test_blowup.py runs the hostile ones under the audit
harness, bench/bench_hostile.py prints both side by side).

The sizes are the smallest that still showed the old blow-up clearly (well past the promise of
45 s or 1 GB), so that a fixed hfdoctor checks each in a few seconds.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hostile import Case, _git, _metadata_copy, _safetensors

ADAPTER_BASE = "Qwen/Qwen3-8B"  # a base the registry knows: its hidden size and layers are checked
QWEN_HIDDEN = 4096


def _adapter(repo: Path, config: dict, modules: list[str],
             shapes: tuple[list[int], list[int]] = ([8, QWEN_HIDDEN], [QWEN_HIDDEN, 8])) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    config = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "base_model_name_or_path": ADAPTER_BASE,
              "task_type": "CAUSAL_LM", **config}
    (repo / "adapter_config.json").write_text(json.dumps(config))
    tensors = {}
    for name in modules:
        tensors[f"base_model.model.{name}.lora_A.weight"] = ("BF16", shapes[0])
        tensors[f"base_model.model.{name}.lora_B.weight"] = ("BF16", shapes[1])
    _safetensors(repo / "adapter_model.safetensors", tensors)


def _layers(n: int, leaf: str = "q_proj") -> list[str]:
    return [f"model.layers.{i % 36}.self_attn.{leaf}" if i < 36 else f"model.layers.{i % 36}.extra{i}.{leaf}"
            for i in range(n)]


# --- adapter_config.json -------------------------------------------------------------------


def adapter_rank_patterns(root: Path, benign: bool = False, keys: int = 100) -> Case:
    """rank_pattern keys of `\\pL{1000}` (2 KB in all): each RE2 program is megabytes, its DFA grows
    per module matched, and a 1024-entry cache kept every one of them alive."""
    pattern = {(f"layers.{i}.self_attn.q_proj" if benign else f"\\pL{{1000}}k{i}"): 4 for i in range(keys)}
    _adapter(root / "adapter", {"target_modules": ["q_proj"], "rank_pattern": pattern}, _layers(36))
    return Case(root / "adapter")


def adapter_many_targets(root: Path, benign: bool = False, n: int = 20_000) -> Case:
    """target_modules that name 20,000 modules, and 20,000 LoRA modules: every name tested against
    every target twice over (4 x 10^8 comparisons). Benign: the same modules, and target_modules
    the usual list of one leaf."""
    modules = [f"model.layers.{i % 36}.mlp.experts.{i}.up_proj" for i in range(n)]
    targets = ["up_proj"] if benign else [f"experts.{i}.up_proj" for i in range(n)][::-1]
    _adapter(root / "adapter", {"target_modules": targets}, modules, ([8, QWEN_HIDDEN], [12288, 8]))
    return Case(root / "adapter")


def adapter_scalar_shape(root: Path, benign: bool = False) -> Case:
    """A lora_A / lora_B tensor whose shape is [] (a scalar): ADP001 indexed its dimensions."""
    shapes = ([8, QWEN_HIDDEN], [QWEN_HIDDEN, 8]) if benign else ([], [])
    _adapter(root / "adapter", {"target_modules": ["q_proj"]}, _layers(4), shapes)
    return Case(root / "adapter")


# --- templates ------------------------------------------------------------------------------


def _tokenizer_config(repo: Path, **changes) -> dict:
    path = repo / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config, indent=2))
    return config


def _add_tokens(repo: Path, contents: list[str]) -> None:
    """Add `contents` as special tokens to both tokenizer files (ids after the vocabulary)."""
    tok = json.loads((repo / "tokenizer.json").read_text())
    config = json.loads((repo / "tokenizer_config.json").read_text())
    first = 1 + max([*tok["model"]["vocab"].values(), *(a["id"] for a in tok["added_tokens"])])
    for i, content in enumerate(contents):
        entry = {"content": content, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                 "special": True}
        tok["added_tokens"].append({"id": first + i, **entry})
        config["added_tokens_decoder"][str(first + i)] = entry
    (repo / "tokenizer.json").write_text(json.dumps(tok))
    (repo / "tokenizer_config.json").write_text(json.dumps(config))


def template_unknown_markers(root: Path, benign: bool = False, tokens: int = 4000, markers: int = 1000) -> Case:
    """4,000 added tokens and a template that emits 1,000 markers none of them is: the closest-token
    hint compared every marker with every token (difflib, 4 million times). Benign: the template
    emits the added tokens themselves."""
    repo = _metadata_copy(root / "repo")
    added = [f"<|tool_{i:05d}_{'x' * (i % 7)}|>" for i in range(tokens)]
    _add_tokens(repo, added)
    emitted = added[:markers] if benign else [f"<|mark_{i:05d}_{'y' * (i % 5)}|>" for i in range(markers)]
    template = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
                + "".join(emitted) + "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")
    _tokenizer_config(repo, chat_template=template)
    return Case(repo)


def _big_template(size: int, benign: bool) -> str:
    """A template of `size` bytes. Hostile: one expression after another (the lexer and parser make
    a node for each); benign: the same bytes as one comment."""
    head = "{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{%- endfor %}"
    if benign:
        return head + "{#" + "x" * (size - len(head) - 4) + "#}"
    unit = "{{ (a or b) ~ c.d[e] }}"
    return head + unit * ((size - len(head)) // len(unit))


def huge_template(root: Path, benign: bool = False, size: int = 2 << 20) -> Case:
    """A 2 MB chat_template.jinja: jinja2 parsed it in the checking process itself, with no deadline."""
    repo = _metadata_copy(root / "repo")
    (repo / "chat_template.jinja").write_text(_big_template(size, benign))
    config = json.loads((repo / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (repo / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return Case(repo)


SKIPPED_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def _gguf_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _gguf_kv_string(key: str, value: str) -> bytes:
    return _gguf_string(key) + struct.pack("<I", 8) + _gguf_string(value)


def _gguf_strings(key: str, values: list[str]) -> bytes:
    return (_gguf_string(key) + struct.pack("<IIQ", 9, 8, len(values))
            + b"".join(_gguf_string(v) for v in values))


def _numbered_strings(key: str, first: str, n: int) -> bytes:
    """A GGUF array of the n strings `first` + 7 decimal digits (0000000, 0000001...), built at C speed."""
    import numpy as np

    width = len(first) + 7
    table = np.empty((n, 8 + width), dtype=np.uint8)
    table[:, :8] = np.frombuffer(struct.pack("<Q", width), dtype=np.uint8)
    table[:, 8:8 + len(first)] = np.frombuffer(first.encode(), dtype=np.uint8)
    numbers = np.arange(n, dtype=np.int64)
    for place in range(7):
        table[:, 8 + width - 1 - place] = 48 + (numbers // 10**place) % 10
    return _gguf_string(key) + struct.pack("<IIQ", 9, 8, n) + table.tobytes()


def write_gguf(path: Path, tokens: list[str] | tuple[str, int], extra: list[tuple[str, str]] = (),
               merges: tuple[str, int] | None = None) -> None:
    """A GGUF (version 3) written directly: llama.cpp's writer takes a minute for millions of tokens.
    Metadata: the architecture, a gpt2 tokenizer of `tokens` (all normal; (first, n): n numbered
    strings) and `merges` (the same), and the string pairs in `extra`; one tiny tensor."""
    kvs = [_gguf_kv_string("general.architecture", "llama"), _gguf_kv_string("tokenizer.ggml.model", "gpt2")]
    if tokens:
        numbered = isinstance(tokens, tuple)
        n = tokens[1] if numbered else len(tokens)
        kvs.append(_numbered_strings("tokenizer.ggml.tokens", *tokens) if numbered
                   else _gguf_strings("tokenizer.ggml.tokens", tokens))
        kvs.append(_gguf_string("tokenizer.ggml.token_type") + struct.pack("<IIQ", 9, 5, n)
                   + struct.pack("<i", 1) * n)
    if merges:
        kvs.append(_numbered_strings("tokenizer.ggml.merges", *merges))
    kvs += [_gguf_kv_string(k, v) for k, v in extra]
    tensor = _gguf_string("token_embd.weight") + struct.pack("<IQQIQ", 2, 4, 2, 0, 0)
    header = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs)) + b"".join(kvs) + tensor
    header += b"\0" * (-len(header) % 32)
    path.write_bytes(header + b"\0" * 32)


def gguf_named_templates(root: Path, benign: bool = False, n: int = 20_000) -> Case:
    """A GGUF of 20,000 named chat templates (2 MB): past the time budget each was recorded as
    skipped by a scan of every entry recorded before it. Benign: one template, the same bytes of
    other metadata."""
    repo = root / "gguf"
    repo.mkdir(parents=True)
    extra = [("tokenizer.chat_template", SKIPPED_TEMPLATE)]
    if benign:
        extra += [(f"general.note.{i}", SKIPPED_TEMPLATE + f"{{# {i} #}}") for i in range(n)]
    else:
        extra += [(f"tokenizer.chat_template.t{i}", SKIPPED_TEMPLATE + f"{{# {i} #}}") for i in range(n)]
    write_gguf(repo / "model.gguf", ["a", "b", "<|im_end|>"], extra)
    return Case(repo)


def _wide_template(i: int, benign: bool, char: str = "\U0001F600") -> str:
    """A small template that renders nearly MAX_RENDER_CHARS wide characters (4 bytes each in memory)
    for every conversation (and reads the thinking kwargs, so that it is rendered in every mode:
    54 renders); benign: a few characters."""
    reps = 10 if benign else 1_000_000 - 64
    return ("{%- if enable_thinking or thinking or reasoning_effort %}{%- endif %}{{ '" + char + "' * "
            + str(reps) + " }}{%- for m in messages %}{{ m.content }}{%- endfor %}{# " + str(i) + " #}")


def many_wide_templates(root: Path, benign: bool = False, n: int = 30) -> Case:
    """30 named templates in a 6 KB tokenizer_config.json, each rendering a megabyte of 4-byte
    characters in each of its 54 renders: the check held every analysis whole (its worker's time
    limit stopped each after some 200 MB)."""
    repo = _metadata_copy(root / "repo")
    templates = [{"name": "default" if i == 0 else f"t{i}", "template": _wide_template(i, benign)} for i in range(n)]
    _tokenizer_config(repo, chat_template=templates)
    return Case(repo)


def catalog_of_wide_templates(root: Path, benign: bool = False, n: int = 12) -> Case:
    """12 repositories checked in one process, each with one such template of 2-byte characters (its
    analysis finishes in time: 108 MB of renders): the process-wide memo kept every analysis."""
    repos = []
    for i in range(n):
        repo = _metadata_copy(root / f"repo{i}")
        _tokenizer_config(repo, chat_template=_wide_template(i, benign, "\u03a9"))
        repos.append(repo)
    return Case(repos[0], [str(r) for r in repos[1:]] + ["--jobs", "1"])


# --- JSON, GGUF -------------------------------------------------------------------------------


def json_empty_objects(root: Path, benign: bool = False, size: int = 63 << 20) -> Case:
    """config.json of 63 MB of `{}` (65 KB as a git blob), checked at a commit: 21 million dicts.
    Benign: one string of the same size."""
    repo = _metadata_copy(root / "repo")
    _git(repo, "init", "-q")
    count = (size - 2) // 3
    with open(repo / "config.json", "w") as f:
        if benign:
            f.write('{"x": "' + "a" * (size - 9) + '"}')
        else:
            f.write("[" + "{}," * count + "{}]")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "x")
    return Case(repo, ["--git-rev", "HEAD"])


def gguf_split_vocabulary(root: Path, benign: bool = False, files: int = 3, tokens: int = 2_000_000) -> Case:
    """Three GGUF files, each with its own vocabulary of two million short tokens (15 MB each): every
    header's tokens, and a vocabulary dict for each, were held at once. Benign: the same files with
    the strings in an array hfdoctor does not keep (merges)."""
    repo = root / "gguf"
    repo.mkdir(parents=True)
    for f in range(files):
        path = repo / f"model-q{f}.gguf"
        words = (f"q{f}_", tokens)
        write_gguf(path, ["a", "b"], merges=words) if benign else write_gguf(path, words)
    return Case(repo)


BUILDERS: dict[str, Callable[..., Case]] = {f.__name__: f for f in (
    adapter_rank_patterns, adapter_many_targets, adapter_scalar_shape, template_unknown_markers, huge_template,
    gguf_named_templates, many_wide_templates, catalog_of_wide_templates, json_empty_objects, gguf_split_vocabulary,
)}


def build(name: str, root: Path, benign: bool = False, **sizes: int) -> Case:
    root.mkdir(parents=True, exist_ok=True)
    return BUILDERS[name](root, benign=benign, **sizes)


# --- measuring a check ----------------------------------------------------------------------

AUDIT_RUN = Path(__file__).resolve().parent / "audit_run.py"


@dataclass
class Measured:
    returncode: int | None  # None: killed at the wall limit
    seconds: float
    peak_bytes: int | None  # the checking process's peak resident memory (VmHWM), from the audit log
    stdout: str
    stderr: str
    events: list[dict]

    @property
    def reports(self) -> list[dict]:
        value = json.loads(self.stdout)
        return value if isinstance(value, list) else [value]


def measure(case: Case, log: Path, wall_s: float, env: dict[str, str] | None = None) -> Measured:
    """`hfdoctor check --format json` on the case, in a child under tests/audit_run.py."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    cmd = [sys.executable, str(AUDIT_RUN), str(log), "--", "check", str(case.target), *case.args, "--format", "json"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=case.cwd or log.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=wall_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its bounded workers too
        out, err = proc.communicate()
        code = None
    seconds = time.monotonic() - started
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    peaks = [e["bytes"] for e in events if e["event"] == "peak-rss" and e["pid"] == proc.pid]
    return Measured(code, seconds, peaks[0] if peaks else None, out, err, events)
