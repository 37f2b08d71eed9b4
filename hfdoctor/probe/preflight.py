"""What must be true before the probe loads any weights: a clear refusal beats an OOM crash.

Refused (exit 2) before anything heavy is loaded:
- a file of the checkout is a git-lfs pointer instead of its data (a clone without `git lfs pull`);
- the static rules weights-unreadable or weights-config-mismatch report an error (loading
  would crash, or silently build a model with freshly initialised tensors);
- there are no safetensors weights (pickle checkpoints are never unpickled by hfdoctor), or
  the index names shards that are not there;
- there is no chat template to render the prompts with;
- the parameter bytes the safetensors headers declare exceed the free memory of the device.

Only headers are read here (hfdoctor.weights): a refused 70B checkpoint costs milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hfdoctor.lint.check import check_repo
from hfdoctor.findings import Severity
from hfdoctor.repo import ModelRepo
from hfdoctor.weights.headers import lfs_pointer, repo_weights

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
    nbytes = sum(t.nbytes for t in view.main_tensors().values())
    return Weights(view.main_files, nbytes)


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


def check_memory(weights: Weights, device: str, staging_for: str | None = None) -> int | None:
    """Refuse when the weights alone do not fit; return the free bytes (None: unknown).

    staging_for: the GPU the weights pass through `device` (the CPU) on their way to.
    """
    free = available_bytes(device)
    if free is None or weights.nbytes <= free:
        return free
    if staging_for is not None:
        advice = (f"without accelerate, transformers loads the weights into CPU memory before moving them to "
                  f"{staging_for}: install accelerate to load them straight onto the GPU")
    elif device.startswith("cuda"):
        advice = "probe on a larger GPU"
    else:
        advice = "probe on a larger machine or with --device cuda"
    raise ProbeRefused(
        f"the weights need {human_bytes(weights.nbytes)} (from the safetensors headers) but {device} has "
        f"{human_bytes(free)} free: {advice}"
    )


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
