"""What a file's name alone says it is: the Trainer's training state, a weight file transformers
writes, or a copy saved under a browser-duplicate name that no loader reads.

Names are repository data: every pattern here runs in RE2.
"""

from __future__ import annotations

from hfdoctor.bounded import patterns

# Weight files transformers' save_pretrained writes (sharded or not): a config beside none of them,
# and with none of its keys, belongs to a model of another library or plain PyTorch (model.pt); an
# export beside none of them is run by another runtime (ONNX Runtime GenAI).
TRANSFORMERS_WEIGHTS = ("model.safetensors", "model-", "pytorch_model", "tf_model.h5", "flax_model.msgpack")


def is_transformers_weight(rel: str) -> bool:
    return rel.rsplit("/", 1)[-1].startswith(TRANSFORMERS_WEIGHTS)


# What transformers' Trainer (and accelerate, DeepSpeed) save beside a checkpoint to resume
# training: the optimizer, scheduler, AMP scaler and RNG states, the pickled TrainingArguments
# and the trainer's log. Training state, never the model's weights.
TRAINER_STATE_NAMES = frozenset({
    "training_args.bin", "optimizer.pt", "optimizer.bin", "scheduler.pt", "scheduler.bin", "scaler.pt",
    "scaler.bin", "rng_state.pth", "trainer_state.json",
})
TRAINER_STATE = patterns.compile(
    r"^(?:rng_state_\d+\.pth|random_states_\d+\.pkl|optimizer_\d+\.(?:pt|bin)|scheduler_\d+\.(?:pt|bin))$")
# DeepSpeed's checkpoint folder: global_step500/mp_rank_00_model_states.pt, ..._optim_states.pt.
DEEPSPEED_STEP_DIR = patterns.compile(r"^global_step\d+$")
# `tokenizer (1).json`, `generation_config (2).json`, `config(1).json`, `model (3).safetensors`:
# the name a browser gives a second download of the same file.
BROWSER_DUPLICATE = patterns.compile(r"^(?P<stem>.+?) ?\((?P<n>\d{1,3})\)(?P<ext>\.[A-Za-z0-9_.]+)$")


def is_training_state(rel: str) -> bool:
    """A file the Trainer saves to resume training (not weights a loader reads), also under a
    browser-duplicate name (`training_args (1).bin`, uploaded through a browser)."""
    parts = rel.split("/")
    name = parts[-1]
    if _trainer_state_name(name):
        return True
    original = browser_duplicate_of(name)
    if original is not None and _trainer_state_name(original):
        return True
    return any(DEEPSPEED_STEP_DIR.match(p) is not None for p in parts[:-1])


def _trainer_state_name(name: str) -> bool:
    return name in TRAINER_STATE_NAMES or TRAINER_STATE.match(name) is not None


def browser_duplicate_of(rel: str) -> str | None:
    """The file name a browser-duplicate name stands for (`tokenizer (1).json` -> tokenizer.json)."""
    head, _, name = rel.rpartition("/")
    match = BROWSER_DUPLICATE.match(name)
    if match is None:
        return None
    original = match.group("stem") + match.group("ext")
    return f"{head}/{original}" if head else original
