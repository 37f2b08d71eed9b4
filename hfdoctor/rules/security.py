"""Rules about code that could run when the model is loaded: pickles and remote code.

Nothing here unpickles, imports or runs anything from the checked repository.
"""

from __future__ import annotations

from typing import Iterator

from hfdoctor import registry
from hfdoctor.findings import Finding, Severity
from hfdoctor.pickles import scan_pickle
from hfdoctor.repo import PICKLE_SUFFIXES, ModelRepo
from hfdoctor.sources.base import Unreadable
from hfdoctor.rules.base import Rule, rule
from hfdoctor.weights.headers import repo_weights


def _names(imports, limit: int = 4) -> str:
    shown = [imp.dotted + (f" (in {imp.member})" if imp.member else "") for imp in imports[:limit]]
    return ", ".join(shown) + (f" and {len(imports) - limit} more" if len(imports) > limit else "")


def _chain(scan, imports, gadgets=(), limit: int = 2) -> str:
    """The calls loading makes with these imports (and attribute writes), as text: what the payload does."""
    origins = {imp.dotted for imp in imports}
    calls = [c.text for c in scan.calls if c in gadgets or c.origin in origins or any(o in c.text for o in origins)]
    if not calls:
        return ""
    # A later call usually contains the earlier ones: show the longest chains.
    shown = [c for c in calls if not any(c != other and c in other for other in calls)][-limit:]
    return "; loading does " + " then ".join(f"`{c}`" for c in shown)


@rule("SEC001", "unsafe-pickle", Severity.ERROR)
def unsafe_pickle(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A pickle-based file (`*.bin`, `*.pt`, `*.pth`, `*.ckpt`, `*.pkl`) imports what rebuilding tensors does not need.

    Why: unpickling calls whatever the pickle names. torch.load(weights_only=False),
    pickle.load, joblib and older transformers versions run it while "loading the model",
    so a weight file can run shell commands, write files or open connections. hfdoctor
    walks the pickle opcodes (raw pickles, and the `data.pkl` of torch zip archives)
    without unpickling, runs the pickle machine on symbolic values to resolve every
    import (GLOBAL, INST, STACK_GLOBAL, through the memo) and every call, and judges
    imports against an allowlist, as fickling and torch's weights_only loader do, never
    a denylist alone (payloads reach eval through `numpy.__builtins__`, read files with
    `pandas.read_csv`, run code through mlflow or timm loaders):

    - error: anything that is not one of torch's tensor/storage rebuilders, dtypes,
      OrderedDict or numpy arrays, and not a known training-state class; the message
      names the imports and the call chain loading would run (e.g.
      `numpy.size(numpy.size, 'eval')('__import__("os").system("id")')`). Imports that
      are known to run code (os, subprocess, builtins.eval, socket, ...), attribute paths
      (`numpy` + `core._internal.sys.modules`), dunders (`__builtins__`), imports whose
      name cannot be determined, and writes to attributes of an imported object are
      called out as running code;
    - warning: only known training-state classes (transformers' TrainingArguments and its
      enums, TRL configs, argparse.Namespace, torch.nn layer classes), which run no code
      when rebuilt but make torch.load(weights_only=True) refuse the file; and a pickle
      that cannot be fully parsed, or whose pickles hold more than 64 MB in all (the
      scan's bound per file): what follows was not seen.

    Example: pytorch_model.bin whose data.pkl imports posix.system; a .pkl importing
    `mlflow.pyfunc.load_model` (error); training_args.bin holding a pickled
    transformers.TrainingArguments (warning).

    Fix: none automatic; do not load a file with an error here. Convert trusted weights
    to safetensors, which holds data only.
    """
    view = repo_weights(repo)
    for rel in repo.weight_files:
        if not rel.endswith(PICKLE_SUFFIXES) or rel in view.pointers or rel in view.broken:
            continue
        try:
            with repo.source.open(rel) as handle:
                scan = scan_pickle(handle, rel)
        except (OSError, Unreadable) as err:
            yield self.finding(repo, f"{rel} cannot be read to scan it: {err}", file=rel, severity=Severity.WARNING)
            continue
        if scan.kind == "not-pickle":
            yield self.finding(
                repo, f"{rel} is neither a pickle nor a torch zip archive: not scanned (torch.load cannot read it).",
                file=rel, severity=Severity.INFO,
            )
            continue
        dangerous, unlisted, known = (scan.by_verdict(v) for v in ("dangerous", "unlisted", "known"))
        gadgets = [c for c in scan.calls if c.text.startswith("set attributes of ")]
        if dangerous or gadgets:
            yield self.finding(
                repo,
                f"{rel} runs code when loaded: its pickle imports {_names(dangerous + unlisted)}"
                + (" and writes attributes of an imported object" if gadgets else "")
                + _chain(scan, dangerous + unlisted, gadgets)
                + ". torch.load(weights_only=False), pickle.load and older transformers execute this. "
                "Do not load it; use safetensors weights.",
                file=rel,
            )
        elif unlisted:
            yield self.finding(
                repo,
                f"{rel} imports {_names(unlisted)}, which rebuilding tensors never needs" + _chain(scan, unlisted)
                + ". Loading it (torch.load(weights_only=False), pickle.load, joblib) imports and calls that code, "
                "whatever it does. Do not load it unless you trust its author; prefer safetensors.",
                file=rel,
            )
        elif known:
            yield self.finding(
                repo,
                f"{rel} pickles training state beyond tensors ({_names(known)}): these classes run no code when "
                "rebuilt, but torch.load(weights_only=True) refuses the file and weights_only=False trusts it "
                "completely. Prefer safetensors for anything a loader needs.",
                file=rel, severity=Severity.WARNING,
            )
        if scan.problems and not (dangerous or gadgets or unlisted):
            yield self.finding(
                repo, f"{rel} could not be fully scanned ({scan.problems[0]}): imports after that point are unknown.",
                file=rel, severity=Severity.WARNING,
            )


def _auto_map_refs(auto_map: dict) -> list[tuple[str, str]]:
    """(auto class, 'module.Class' or 'org/repo--module.Class') pairs of an auto_map."""
    refs = []
    for auto_class, value in auto_map.items():
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, str) and ref:
                refs.append((str(auto_class), ref))
    return refs


@rule("SEC002", "remote-code", Severity.WARNING)
def remote_code(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """config.json or tokenizer_config.json has an `auto_map`: loading needs trust_remote_code.

    Why: `auto_map` points transformers at Python files (modeling_*.py, tokenization_*.py)
    in this repository or another one. Loading with trust_remote_code=True imports and runs
    them with the user's rights, and they change whenever the repository does (pin a
    revision). When transformers has a native implementation of the model type, the
    remote code is not needed at all.

    Example: "auto_map": {"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}.

    Fix: none automatic; read the code before trusting it, pin `revision=`, or load the
    native transformers class (without trust_remote_code) when there is one.
    """
    present = set(repo.files)
    for rel, data in (("config.json", repo.config), ("tokenizer_config.json", repo.tokenizer_config)):
        auto_map = (data or {}).get("auto_map")
        if not isinstance(auto_map, dict):
            continue
        refs = _auto_map_refs(auto_map)
        if not refs:
            continue
        files = []
        for _, ref in refs:
            repo_id, _, local = ref.rpartition("--")
            module = local.rsplit(".", 1)[0].replace(".", "/") + ".py"
            if repo_id:
                files.append(f"{module} from {repo_id}")
            else:
                files.append(module + ("" if module in present else " (not in this checkout)"))
        files = list(dict.fromkeys(files))
        model_type = (repo.config or {}).get("model_type")
        native = (
            f" transformers has a native {model_type} implementation: load without trust_remote_code."
            if rel == "config.json" and isinstance(model_type, str) and model_type in registry.architectures()
            else ""
        )
        auto_class, ref = refs[0]
        yield self.finding(
            repo,
            f"{rel} auto_map sends {auto_class} to {ref}"
            + (f" (and {len(refs) - 1} more)" if len(refs) > 1 else "")
            + f": loading needs trust_remote_code=True, which runs {', '.join(files)} on the user's machine."
            + native,
            file=rel, pointer="/auto_map",
        )


RULES: list[Rule] = [unsafe_pickle, remote_code]
