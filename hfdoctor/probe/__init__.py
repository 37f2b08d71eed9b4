"""`hfdoctor probe`: load the weights and prove the behaviour the metadata promises.

Static rules say what a checkpoint declares; only running it shows what the weights do
(seed 000: a template that offers thinking to weights that never learned `<think>`; seed
002: the same prompt giving different outputs). The probe renders prompts with the repo's
own chat template, decodes greedily (and with seeded sampling) and decides the checks (see checks.py). A GGUF
checkpoint (a directory holding one .gguf, or the file itself) is loaded through
transformers' GGUF support, dequantized.

Stages: preflight.py refuses what cannot be loaded or probed (git-lfs pointers, blocking
static findings, no chat template, weights and KV cache larger than the device's free memory)
before any weights are loaded, and decides the token budget; session.py loads with
transformers; plan.py batches the requests, decode.py generates them; checks.py decides (with
numerics.py where two identical requests differ); output.py shows, with what resources.py
measured.
This module imports nothing heavy: torch and transformers load inside run_probe only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from hfdoctor.probe.output import ProbeResult


def run_probe(
    path: str,
    device: str = "auto",
    max_new_tokens: int | None = None,
    output_format: str = "text",
    trust_remote_code: bool = False,
    console: "Console | None" = None,
    display_target: str | None = None,
    gguf_file: str | None = None,
    serve: bool = False,
    endpoint: str | None = None,
    endpoint_model: str | None = None,
    seeded: bool = False,
    threads: int | None = None,
    verbose: bool = False,
    cuda_graphs: bool = True,
    dtype: str = "auto",
) -> int:
    """Probe the checkpoint at `path`; print the result; return the exit code (0, 1 or 2).

    max_new_tokens: None for the default (preflight.default_budget: 1,024 on a GPU, what the weights' size
    affords on a CPU). dtype: what the model computes in; "auto": the weights' own, or float32 for 16-bit
    weights on a CPU (preflight.compute_dtype)."""
    if path is not None and not has_probe_extra():
        return 2
    from rich.console import Console

    from hfdoctor.probe.output import ProbeResult, write_json, write_text
    from hfdoctor.probe.preflight import ProbeRefused
    from hfdoctor.report.text import line

    console = console or Console(highlight=False, soft_wrap=True)
    # Progress and refusals go to stderr, so that --format json keeps stdout pure JSON.
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    result = ProbeResult(target=display_target or path)
    try:
        if path is None:  # --endpoint alone: only what serving suites check, no local weights
            endpoint_only(result, endpoint, endpoint_model, seeded, errors)
        else:
            probe(result, path, device, max_new_tokens, trust_remote_code, errors, gguf_file,
                  threads or available_cores(), verbose, cuda_graphs, dtype)
        if path is not None and (serve or endpoint):
            budget = result.max_new_tokens or max_new_tokens or 96
            probe_served(result, path, device, budget, serve, endpoint, endpoint_model, gguf_file, seeded)
    except ProbeRefused as err:
        result.refused = str(err)
        errors.print(line(("probe refused:", "bold red"), " ", str(err)))
    if output_format == "json":
        write_json(result)
    else:
        write_text(result, console)
    return result.exit_code()


def has_probe_extra() -> bool:
    """torch and transformers import; else one line on stderr naming the extra to install."""
    import sys

    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as err:
        missing = getattr(err, "name", None) or "torch or transformers"
        print(f"hfdoctor probe loads the weights with torch and transformers ({missing} is not installed): "
              "pip install 'hfdoctor[probe]'", file=sys.stderr)
        return False
    return True


def available_cores() -> int:
    """The cores this process may run on (a container's or taskset's share, not the machine's)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def endpoint_only(result: "ProbeResult", url: str, model: str | None, seeded: bool, errors: "Console") -> None:
    from hfdoctor.probe import conformance, served
    from hfdoctor.report.text import line
    from hfdoctor.probe.checks import CheckResult

    try:
        endpoint = served.external(url, model)
    except served.BadListing as err:  # the server answered, wrongly: a conformance failure, not a refusal
        result.served = {"endpoint": url, "server": "external", "model": None}
        result.conformance = [CheckResult("models-listed", "failed", str(err))]
        return
    result.served = {"endpoint": endpoint.url, "server": endpoint.how, "model": endpoint.model}
    errors.print(line(f"probing {endpoint.url} ({endpoint.model}): served conformance"))  # the server's name: inert
    result.conformance = conformance.conformance(endpoint.url, endpoint.model, seeded=seeded)


def probe_served(result: "ProbeResult", path: str, device: str, max_new_tokens: int, serve: bool,
                 endpoint_url: str | None, endpoint_model: str | None, gguf_file: str | None,
                 seeded: bool = False) -> None:
    """The same checks through an OpenAI-compatible endpoint, compared with the in-process ones."""
    from hfdoctor.probe import served
    from hfdoctor.probe.preflight import ProbeRefused
    from hfdoctor.repo import ModelRepo

    if serve and gguf_file:
        raise ProbeRefused("--serve starts transformers serve on a checkpoint directory; for a GGUF, serve it "
                           "yourself (llama-server) and pass --endpoint URL")
    endpoint = served.start_server(path, device) if serve else served.external(endpoint_url, endpoint_model)
    try:
        template = ModelRepo(path).chat_template
        by_name = {c.name: c for c in result.checks}
        switch = template is not None and "enable_thinking" in template.text
        result.served_checks = served.served_checks(endpoint, by_name, max_new_tokens, switch)
        result.served = {"endpoint": endpoint.url, "server": endpoint.how, "model": endpoint.model}
        result.checks.append(served.agreement(by_name, result.served_checks, endpoint))
        from hfdoctor.probe import conformance

        parser = conformance_parser(ModelRepo(path))
        result.conformance = conformance.conformance(endpoint.url, endpoint.model, seeded=seeded,
                                                     reasoning_parser=parser, server=endpoint.how)
    finally:
        endpoint.close()


def conformance_parser(repo) -> str | None:
    """The reasoning parser the card tells servers to use (`--reasoning-parser X`), if any."""
    from hfdoctor.compat.assess import SERVE_FLAG

    card = repo.card
    flags = SERVE_FLAG.finditer(card.text) if card is not None else ()
    return next((m.group(2) for m in flags if m.group(1) == "reasoning"), None)


def probe(result: "ProbeResult", path: str, device: str, max_new_tokens: int | None, trust_remote_code: bool,
          errors: "Console", gguf_file: str | None = None, threads: int = 1, verbose: bool = False,
          cuda_graphs: bool = True, dtype: str = "auto") -> None:
    """Fill `result` in, stage by stage, under a progress display on stderr."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from hfdoctor import lineage
    from hfdoctor.probe import preflight, resources
    from hfdoctor.repo import ModelRepo

    import time

    started = time.monotonic()
    # On a terminal, one live status line; in CI logs and pipes, a plain line per stage with
    # the seconds since the start (a GGUF's de-quantization alone takes tens of seconds).
    plain = not errors.is_terminal
    host = resources.HostMemory()  # sampled while it runs, and read at each stage
    with host, Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=errors, transient=True, disable=plain) as progress:
        task = progress.add_task("checking the checkout before loading")

        def step(description: str) -> None:
            host.sample()
            if plain:
                errors.print(f"hfdoctor probe [{time.monotonic() - started:5.1f} s] {description}", markup=False,
                             highlight=False)
            progress.update(task, description=description)

        step("checking the checkout before loading")

        repo = ModelRepo(path)
        weights = preflight.before_loading(repo, gguf_file)
        result.weights_bytes = weights.nbytes
        found = lineage.detect(repo)
        result.family = found.family
        family, variant = found.family_ref, found.variant_ref
        template = repo.chat_template.text  # preflight refused a repo without one

        step(f"importing torch ({threads} thread{'s' if threads != 1 else ''})")
        import torch

        from hfdoctor.probe import numerics
        from hfdoctor.probe.plan import run_checks
        from hfdoctor.probe.session import Session, loads_via_cpu, quiet_transformers, resolve_device

        determinism = numerics.Determinism(cublas_workspace=numerics.set_cublas_workspace())  # before CUDA starts
        # torch's default is every core of the machine, which under load (or in a container
        # given a share of them) is several times slower than the cores this process has.
        torch.set_num_threads(threads)
        if not verbose:
            quiet_transformers()

        result.device = resolve_device(device)
        if max_new_tokens is None:
            budget, result.budget = preflight.default_budget(result.device, weights.nbytes)
        else:
            budget, result.budget = max_new_tokens, "--max-new-tokens"
        result.max_new_tokens = budget
        kv = None if weights.gguf else preflight.kv_cache(repo.config, budget)
        compute = preflight.compute_dtype(weights, kv, result.device, dtype)
        loaded, kv = preflight.as_computed(weights, kv, compute)
        device_map = preflight.placement(loaded, kv, result.device)
        if result.device != "cpu" and loads_via_cpu(result.device):
            preflight.check_memory(loaded, "cpu", staging_for=result.device)
        where = "every GPU (one is too small)" if device_map == "auto" else result.device
        step(f"loading {preflight.human_bytes(weights.nbytes)} of weights onto {where}")
        resources.reset_gpu_peak()
        try:
            with numerics.deterministic_kernels(determinism):
                session = Session(path, result.device, budget, repo.eos_ids, trust_remote_code, weights.gguf,
                                  device_map=device_map, graphs=cuda_graphs, dtype=compute)
                result.dtype, result.load_seconds = session.dtype, session.load_seconds
                step(f"loaded in {session.load_seconds:.1f} s ({session.dtype})")
                result.checks = run_checks(session, family, template, step, variant)
        finally:
            host.sample()
            result.memory = {"peak_gpu_bytes": resources.gpu_peak_bytes(result.device), **host.to_json(),
                             "host_sampled_every_s": resources.SAMPLE_SECONDS}
        result.runtime = {
            "cache": session.runtime.how, "cuda_graphs": session.runtime.graphs, "not_faster": session.runtime.why_not,
            "weights_dtype": preflight.DTYPE_NAMES.get(weights.dtype, weights.dtype.lower()),
            "device_map": device_map or result.device,
            "gpus": torch.cuda.device_count() if device_map == "auto" else (1 if result.device != "cpu" else 0),
            **determinism.to_json(),
        }
        result.generation = session.calls
        step(f"done: {len(result.checks)} checks")
