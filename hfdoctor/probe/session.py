"""The loaded model and tokenizer, and generation on the repo's own chat template.

Everything a user's serving stack would do, nothing more: AutoTokenizer and
AutoModelForCausalLM from the checkout (never the repo's Python code unless
--trust-remote-code), the chat template through tokenizer.apply_chat_template, the eos ids
of generation_config.json, greedy decoding or seeded sampling (decode.py: batched, each row
stopping at its own end). torch and transformers are imported here and in decode.py only.
"""

from __future__ import annotations

import copy
import os
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Iterator

from hfdoctor.probe.preflight import ProbeRefused


@dataclass
class Generation:
    """One reply: the rendered prompt and what came after it."""

    prompt: str
    prompt_tokens: int
    ids: list[int]  # generated ids, up to and including the eos id that stopped it
    text: str  # decoded with special tokens kept, so markers stay visible
    seconds: float  # the whole call that produced it (a batch: shared by its rows)
    stopped_on: int | None  # the eos id that ended it, None when the budget ran out
    seed: int | None = None  # None: greedy; else the seed of its sampling
    trace: Any = None  # decode.Trace: each step's best candidates, for the numerics verdicts
    batch: int = 1  # rows in the call that produced it

    @property
    def tokens(self) -> int:
        return len(self.ids)


def resolve_device(requested: str) -> str:
    """auto|cpu|cuda -> "cpu" or "cuda:0"; asking for CUDA without one is a usage error."""
    import torch

    if requested == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda:0"
    if requested == "cuda":
        raise ProbeRefused("--device cuda was asked for but torch sees no CUDA device (torch.cuda.is_available() is False)")
    return "cpu"


def loads_via_cpu(device: str) -> bool:
    """Whether the weights pass through CPU memory on their way to `device`.

    transformers places weights straight onto a GPU (device_map) only with accelerate
    installed; without it they are loaded on the CPU and moved.
    """
    if device == "cpu":
        return True
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return True
    return False


def quiet_transformers() -> None:
    """transformers' own progress bars and warnings would garble our display and stderr."""
    import os

    from transformers.utils import logging

    os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF loader's own tqdm bar ignores logging
    logging.set_verbosity_error()
    logging.disable_progress_bar()


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within a load, each GGUF file parsed once and each tensor-name map built once.

    transformers' GGUF loading (the legacy path, which Llama-family files take) parses the file
    three times (tokenizer, config, weights: load_gguf_checkpoint imports `GGUFReader` from gguf
    on each call), each time building every metadata field in Python, turns the metadata into
    Python values again on each call, and rebuilds gguf's tensor-name map for every module of
    the model (397 times for SmolLM2): together most of a small GGUF's load. Here one reader
    serves the whole load, the metadata-only result (return_tensors=False: tokenizer and config)
    is computed once and handed out as a deep copy, and the map is a pure function of
    (architecture, layers). The reader also slices a plain array over the memory map, not
    numpy's memmap subclass, whose Python-level __getitem__ cost a microsecond for each of the
    vocabulary's ~100k strings.
    """
    try:
        import gguf
        import numpy as np
        from transformers import modeling_gguf_pytorch_utils as legacy
    except ImportError:
        yield
        return
    original_reader, original_map = gguf.GGUFReader, gguf.get_tensor_name_map
    original_load = legacy.load_gguf_checkpoint
    readers: dict[tuple[str, str], Any] = {}
    maps: dict[tuple[Any, int], Any] = {}
    metadata: dict[str, Any] = {}

    class PlainArrayReader(original_reader):  # type: ignore[misc, valid-type]
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, mapped):
            self._plain = mapped.view(np.ndarray)  # still backed by the map, read-only with mode 'r'

    def shared_reader(path, mode="r"):
        key = (os.path.realpath(os.fspath(path)), mode)
        if key not in readers:
            readers[key] = PlainArrayReader(path, mode)
        return readers[key]

    def shared_map(arch, n_blocks):
        if (arch, n_blocks) not in maps:
            maps[(arch, n_blocks)] = original_map(arch, n_blocks)
        return maps[(arch, n_blocks)]

    def load_once(path, return_tensors=False, model_to_load=None, **kwargs):
        if return_tensors or model_to_load is not None or kwargs:
            return original_load(path, return_tensors=return_tensors, model_to_load=model_to_load, **kwargs)
        key = os.path.realpath(os.fspath(path))
        if key not in metadata:
            metadata[key] = original_load(path, return_tensors=False)
        return copy.deepcopy(metadata[key])  # callers may change what they are given

    gguf.GGUFReader, gguf.get_tensor_name_map = shared_reader, shared_map
    legacy.load_gguf_checkpoint = load_once
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_map
        legacy.load_gguf_checkpoint = original_load


class Session:
    def __init__(self, path: str, device: str, max_new_tokens: int, eos_ids: list[int], trust_remote_code: bool,
                 gguf_file: str | None = None, device_map: str | None = None, graphs: bool = True,
                 dtype: str | None = None):
        """device_map: "auto" spreads the model over every GPU (one is too small); else it loads onto `device`.
        dtype: what to compute in ("float32", "bfloat16"...; preflight.compute_dtype); None: the weights' own."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from hfdoctor.probe.decode import Decoder, choose_runtime

        self.device = device
        self.max_new_tokens = max_new_tokens
        self.eos_ids = eos_ids
        started = time.perf_counter()
        try:
            # A GGUF is read by transformers' GGUF support (the gguf package): the tokenizer from its
            # metadata, the tensors dequantized to float32.
            source = {"gguf_file": gguf_file} if gguf_file else {"use_safetensors": True}
            via_cpu = loads_via_cpu(device)
            # Straight onto the GPU (device_map): the weights never sit in host memory as a whole.
            placement = {} if via_cpu else {"device_map": device_map or device}
            with gguf_parsed_once() if gguf_file else nullcontext():
                self.tokenizer = AutoTokenizer.from_pretrained(
                    path, trust_remote_code=trust_remote_code, **({"gguf_file": gguf_file} if gguf_file else {}))
                self.model = AutoModelForCausalLM.from_pretrained(
                    path, dtype=getattr(torch, dtype) if dtype else "auto", trust_remote_code=trust_remote_code,
                    **source, **placement,
                ).eval()
            if via_cpu and device != "cpu":
                self.model.to(device)
        except Exception as err:  # a repo transformers cannot load is the repo's problem, reported
            raise ProbeRefused(f"transformers could not load the checkpoint: {type(err).__name__}: {err}") from None
        self.load_seconds = time.perf_counter() - started
        self.dtype = str(self.model.dtype).replace("torch.", "")
        self.pad_id = self._pad_id()
        self._torch = torch
        self.runtime = choose_runtime(self.model, device, use_graphs=graphs)
        self.decoder = Decoder(self.model, device, eos_ids, self.pad_id, self.runtime)
        self.calls: list[dict[str, Any]] = []  # each generation call: rows, steps, seconds

    def _pad_id(self) -> int:
        """What left-pads a batch: the tokenizer's pad token, else the first eos id."""
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.eos_ids[0] if self.eos_ids else 0
        return int(pad)

    # --- the vocabulary -----------------------------------------------------------

    def single_token_id(self, token: str) -> int | None:
        """The id of `token` when the vocabulary has it as one token, else None."""
        token_id = self.tokenizer.get_vocab().get(token)
        return int(token_id) if token_id is not None else None

    def token_name(self, token_id: int) -> str:
        return str(self.tokenizer.convert_ids_to_tokens(token_id))

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    # --- prompts and generation --------------------------------------------------

    def render(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        """The generation prompt as the repo's chat template writes it."""
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
        except Exception as err:
            raise ProbeRefused(
                f"the chat template cannot render a one-question conversation: {type(err).__name__}: {err}; "
                "see `hfdoctor check`"
            ) from None

    def prompt_tokens(self, prompt: str) -> int:
        return len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    def generate(self, prompts: list[str], seeds: list[int | None] | None = None) -> list[Generation]:
        """Replies to `prompts`, as one left-padded batch, every row ending at its own eos: greedy, or sampled
        (temperature 1, top-k 50) from a generator seeded with the row's seed."""
        from hfdoctor.probe.decode import Row

        seeds = seeds or [None] * len(prompts)
        encoded = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        rows = [Row(tuple(int(i) for i in ids), seed) for ids, seed in zip(encoded, seeds)]
        try:
            call = self.decoder.run(rows, self.max_new_tokens)
        except Exception as err:  # the model loaded but cannot run (a forward error, out of memory): reported
            raise ProbeRefused(f"generation failed: {type(err).__name__}: {err}") from None
        self.calls.append({"rows": len(rows), "steps": call.steps, "seconds": call.seconds, "how": call.how})
        return [Generation(prompt=prompt, prompt_tokens=len(ids), ids=done.ids, text=self.decode(done.ids),
                           seconds=call.seconds, stopped_on=done.stopped_on, seed=seed, trace=done.trace,
                           batch=len(rows))
                for prompt, ids, seed, done in zip(prompts, encoded, seeds, call.rows)]
