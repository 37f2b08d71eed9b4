"""What must be true before the probe loads any weights: a clear refusal beats an OOM crash.

Refused (exit 2) before anything heavy is loaded:
- a file of the checkout is a git-lfs pointer instead of its data (a clone without `git lfs pull`);
- the static rules weights-unreadable or weights-config-mismatch report an error (loading
  would crash, or silently build a model with freshly initialised tensors);
- there are no safetensors weights (pickle checkpoints are never unpickled by hfdoctor), or
  the index names shards that are not there;
- there is no chat template to render the prompts with;
- the parameter bytes the safetensors headers declare, plus the KV cache the probe's batch needs
  for its token budget (from config.json), exceed the free memory of the device (on a GPU: of all
  GPUs together, the model then spread over them).

Only headers are read here (hfdoctor.weights): a refused 70B checkpoint costs milliseconds.
The token budget is decided here too (default_budget), since the KV cache depends on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from hfdoctor.lint.check import check_repo
from hfdoctor.findings import Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.weights.headers import lfs_pointer, repo_weights

# The token budget when --max-new-tokens is not given. On a GPU: enough for a real reasoning model to close its
# block and answer (Qwen3, R1 distills and QwQ reason for hundreds of tokens even on "What is 2 plus 3?").
# On a CPU: what decoding affords there, from the bandwidth floor (every token reads every weight once):
# CPU_DECODE_SECONDS of decoding at CPU_DECODE_BYTES_PER_S, between MIN_BUDGET and GPU_BUDGET tokens.
GPU_BUDGET = 1024
MIN_BUDGET = 96
CPU_DECODE_BYTES_PER_S = 4e9
CPU_DECODE_SECONDS = 30
# The KV cache is sized for the probe's largest batch (plan.py: at most 6 requests) and for its prompts
# (under 256 tokens with the longest system headers of upstream templates) plus the budget.
PROBE_ROWS = 6
PROMPT_ALLOWANCE = 256

# The static rules whose errors mean that loading cannot work. (lfs-pointer is a warning:
# check_lfs_pointers refuses pointers before the rules run.)
BLOCKING_RULES = ["weights-unreadable", "weights-config-mismatch"]


class ProbeRefused(Exception):
    """The checkpoint cannot be probed; the message says why and what to do."""


@dataclass
class Weights:
    files: list[str]
    nbytes: int
    gguf: str | None = None  # the GGUF file transformers loads (gguf_file=), when it is one
    dtype: str = "F32"  # the safetensors dtype holding most of the bytes (a GGUF is dequantized to F32)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # unreachable


def check_lfs_pointers(repo: ModelRepo) -> None:
    """Any file still a git-lfs pointer: weights, but also a tokenizer.json stored in LFS."""
    pointers = [rel for rel in repo.files if lfs_pointer(repo.source, rel) is not None]
    if pointers:
        listed = ", ".join(pointers[:5]) + (f" and {len(pointers) - 5} more" if len(pointers) > 5 else "")
        raise ProbeRefused(
            f"{listed} {'is a git-lfs pointer' if len(pointers) == 1 else 'are git-lfs pointers'}, not the data: "
            "run `git lfs pull` in the checkout (or download the files) before probing"
        )


def check_static_rules(repo: ModelRepo) -> None:
    """Errors of the rules that predict a failed or meaningless load (every broken weight
    file among them: weights-unreadable reports each one)."""
    report = check_repo(repo, select=BLOCKING_RULES)
    errors = [f for f in report.findings if f.severity >= Severity.ERROR]
    if errors:
        lines = "; ".join(f"{f.rule}: {f.message}" for f in errors[:3])
        raise ProbeRefused(f"the weights cannot be loaded as declared ({lines}); see `hfdoctor check {repo.root}`")


def gguf_to_load(repo: ModelRepo, requested: str | None) -> Weights:
    """The GGUF file to load, and the bytes its tensors take once transformers has
    dequantized them to float32 (from the header: element counts only)."""
    headers = repo.gguf.headers
    if requested is None:
        if len(headers) > 1:
            raise ProbeRefused(f"the checkout holds {len(headers)} GGUF files ({', '.join(sorted(headers)[:4])}): "
                               "name the one to probe (hfdoctor probe DIR/FILE.gguf)")
        requested = next(iter(headers))
    header = headers.get(requested)
    if header is None:
        why = repo.gguf.errors.get(requested, "not a GGUF file of the checkout")
        raise ProbeRefused(f"{requested}: {why}")
    elements = sum(math.prod(t.shape) for t in header.tensors.values())
    return Weights([requested], elements * 4, gguf=requested)


def weights_to_load(repo: ModelRepo, gguf_file: str | None = None) -> Weights:
    """The safetensors files that hold the model and their parameter bytes, from headers only
    (read once per repo: check_static_rules has read them already); for a GGUF checkpoint
    (or a GGUF named on the command line), the GGUF file."""
    view = repo_weights(repo)
    if gguf_file is not None or (not view.main_files and repo.gguf.headers):
        return gguf_to_load(repo, gguf_file)
    if not view.main_files:
        pickles = [f for f in repo.weight_files if not f.endswith((".safetensors", ".gguf"))]
        if pickles:
            raise ProbeRefused(
                f"the weights are pickle files ({', '.join(pickles[:3])}): hfdoctor never unpickles; "
                "convert them to safetensors first"
            )
        raise ProbeRefused("no safetensors weights in the checkout: nothing to load")
    if view.missing_files:
        raise ProbeRefused(f"model.safetensors.index.json names shards that are missing: {', '.join(view.missing_files[:3])}")
    by_dtype: dict[str, int] = {}
    for tensor in view.main_tensors().values():
        by_dtype[tensor.dtype] = by_dtype.get(tensor.dtype, 0) + tensor.nbytes
    return Weights(view.main_files, sum(by_dtype.values()), dtype=max(by_dtype, key=by_dtype.get, default="F32"))


def default_budget(device: str, weights_bytes: int) -> tuple[int, str]:
    """The token budget when the user gave none, and how it was decided."""
    if device.startswith("cuda"):
        return GPU_BUDGET, "default on a GPU"
    affordable = int(CPU_DECODE_BYTES_PER_S * CPU_DECODE_SECONDS / max(weights_bytes, 1))
    budget = max(MIN_BUDGET, min(GPU_BUDGET, affordable // 32 * 32))
    return budget, (f"default on a CPU for {human_bytes(weights_bytes)} of weights ({GPU_BUDGET} tokens up to "
                    f"{human_bytes(CPU_DECODE_BYTES_PER_S * CPU_DECODE_SECONDS / GPU_BUDGET)}, falling to {MIN_BUDGET} "
                    f"from {human_bytes(CPU_DECODE_BYTES_PER_S * CPU_DECODE_SECONDS / MIN_BUDGET)})")


DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8}
DTYPE_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}


@dataclass
class KvCache:
    """The key/value cache of the probe's largest batch: layers × KV heads × head dim × 2 (keys, values) ×
    bytes per value × tokens × requests."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    tokens: int
    rows: int

    @property
    def nbytes(self) -> int:
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes * self.tokens * self.rows

    def describe(self) -> str:
        return (f"{self.layers} layers × {self.kv_heads} KV heads × {self.head_dim} × 2 × {self.dtype_bytes} bytes × "
                f"{self.tokens} tokens × {self.rows} requests")


def kv_cache(config: dict | None, budget: int) -> KvCache | None:
    """From config.json (its text_config for a multimodal checkpoint); None where it lacks the fields."""
    if not isinstance(config, dict):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    layers, heads = text.get("num_hidden_layers"), text.get("num_attention_heads")
    kv_heads = text.get("num_key_value_heads") or heads
    hidden = text.get("hidden_size")
    head_dim = text.get("head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int)
                                        and heads > 0 else None)
    dtype = text.get("dtype") or text.get("torch_dtype") or config.get("dtype") or config.get("torch_dtype")
    numbers = (layers, kv_heads, head_dim)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in numbers):
        return None
    return KvCache(layers, kv_heads, head_dim, DTYPE_BYTES.get(str(dtype), 2), PROMPT_ALLOWANCE + budget, PROBE_ROWS)


def cpu_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is no such file: not Linux)."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def available_bytes(device: str) -> int | None:
    """Free memory of the device the model will be loaded onto ("cpu" or "cuda:N")."""
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    return cpu_available_bytes()


def gpus_free_bytes() -> list[int]:
    """Free memory of every GPU torch sees."""
    import torch

    return [int(torch.cuda.mem_get_info(torch.device("cuda", i))[0]) for i in range(torch.cuda.device_count())]


def needs(weights: Weights, kv: KvCache | None) -> str:
    if kv is None:
        return f"the weights need {human_bytes(weights.nbytes)} (from the safetensors headers)"
    return (f"the weights need {human_bytes(weights.nbytes)} (from the safetensors headers) and the KV cache for "
            f"{kv.tokens - PROMPT_ALLOWANCE} new tokens {human_bytes(kv.nbytes)} ({kv.describe()}): "
            f"{human_bytes(weights.nbytes + kv.nbytes)} in all,")


def check_memory(weights: Weights, device: str, staging_for: str | None = None,
                 kv: KvCache | None = None) -> int | None:
    """Refuse when the weights (and, on the device that runs the model, the KV cache) do not fit; return the
    free bytes (None: unknown).

    staging_for: the GPU the weights pass through `device` (the CPU) on their way to.
    """
    free = available_bytes(device)
    need = weights.nbytes + (kv.nbytes if kv is not None and staging_for is None else 0)
    if free is None or need <= free:
        return free
    if staging_for is not None:
        kv = None
        advice = (f"without accelerate, transformers loads the weights into CPU memory before moving them to "
                  f"{staging_for}: install accelerate to load them straight onto the GPU")
    elif device.startswith("cuda"):
        advice = "probe on a larger GPU, or on several" + (" (or with a smaller --max-new-tokens)" if kv else "")
    else:
        advice = "probe on a larger machine or with --device cuda"
    raise ProbeRefused(f"{needs(weights, kv)} but {device} has {human_bytes(free)} free: {advice}")


def compute_dtype(weights: Weights, kv: KvCache | None, device: str, requested: str = "auto") -> str | None:
    """The dtype the model computes in: `requested` unless "auto"; for "auto", the weights' own (None), except
    on a CPU, where 16-bit weights are computed in float32 if the float32 copy and its KV cache fit: CPUs
    without bf16/fp16 matrix units, most of them, run 16-bit products of a batch several times slower (Qwen3-8B's
    output layer for 5 rows: 82 ms in bfloat16, 24 ms in float32 on one AVX2 core), and float32 is what CPU
    inference stacks compute in."""
    if requested != "auto":
        return requested
    if device != "cpu" or weights.dtype not in ("BF16", "F16"):
        return None
    free = cpu_available_bytes()
    fits = free is not None and 2 * (weights.nbytes + (kv.nbytes if kv else 0)) <= free
    return "float32" if fits else None


def as_computed(weights: Weights, kv: KvCache | None, dtype: str | None) -> tuple[Weights, KvCache | None]:
    """The weights and KV cache as they will sit in memory when computed in `dtype` (None: as stored)."""
    if dtype is None:
        return weights, kv
    size = DTYPE_BYTES[dtype]
    stored = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8}.get(weights.dtype, size)
    loaded = Weights(weights.files, weights.nbytes * size // stored, weights.gguf, weights.dtype)
    return loaded, (replace(kv, dtype_bytes=size) if kv else None)


def placement(weights: Weights, kv: KvCache | None, device: str) -> str | None:
    """Where the model goes: None for `device` itself, "auto" to spread it over every GPU when one is too small
    and all of them together are large enough; refuses when nothing fits."""
    if not device.startswith("cuda"):
        check_memory(weights, device, kv=kv)
        return None
    need = weights.nbytes + (kv.nbytes if kv else 0)
    free = gpus_free_bytes()
    if len(free) > 1 and need > free[0]:
        if need <= sum(free):
            return "auto"
        raise ProbeRefused(f"{needs(weights, kv)} but the {len(free)} GPUs have {human_bytes(sum(free))} free "
                           f"together ({', '.join(human_bytes(f) for f in free)}): probe on larger GPUs")
    check_memory(weights, device, kv=kv)
    return None


def check_chat_template(repo: ModelRepo) -> None:
    """The probe renders its prompts with the repo's own template; without one there is
    nothing to test, and loading the weights first would only cost time."""
    if repo.chat_template is None:
        raise ProbeRefused(
            "the checkout has no chat template (chat_template.jinja, or `chat_template` in tokenizer_config.json) "
            "to render the prompts with: see `hfdoctor check` (missing-chat-template); `hfdoctor fix` inserts "
            "the upstream template when it knows the family"
        )


def before_loading(repo: ModelRepo, gguf_file: str | None = None) -> Weights:
    """Every check that needs no torch (the memory check comes once the device is known)."""
    check_lfs_pointers(repo)
    check_static_rules(repo)
    weights = weights_to_load(repo, gguf_file)
    check_chat_template(repo)
    return weights
