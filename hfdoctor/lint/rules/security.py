"""Rules about code that could run when the model is loaded: pickles, other model formats, remote code.

Nothing here unpickles, imports or runs anything from the checked repository; the files
are read by hfdoctor.modelfiles.
"""

from __future__ import annotations

from typing import Iterator

import dataclasses

from hfdoctor.knowledge import registry
from hfdoctor.compat import knowledge as kb
from hfdoctor.findings import Facet, FacetKind, Finding, Severity
from hfdoctor.modelfiles.result import PickleScan
from hfdoctor.modelfiles.scan import embedded_imports, scan_handle, scanned
from hfdoctor.modelfiles.allowlist import NESTED_LOADERS
from hfdoctor.repo import PICKLE_SUFFIXES, ModelRepo
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.sources import history
from hfdoctor.sources.base import Unreadable
from hfdoctor.weights.headers import lfs_pointer, repo_weights
from hfdoctor.repo.facts import fact


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


@fact
def model_file_scans(repo: ModelRepo) -> dict[str, PickleScan | str]:
    """rel -> the scan of every model file loaders may unpickle or run (or why it could not be
    read), once per repository (a fact); files of one content (hard links, one blob) scanned once."""
    view = repo_weights(repo)
    budget, source = repo.budget, repo.source
    scans: dict[str, PickleScan | str] = {}
    by_identity: dict[tuple, PickleScan] = {}
    timed_out = False
    for rel in repo.files:
        if not scanned(rel) or rel in view.pointers or rel in view.broken or lfs_pointer(source, rel) is not None:
            continue
        identity = source.identity(rel)
        if identity is not None and identity in by_identity:
            scans[rel] = _renamed(by_identity[identity], rel)
            continue
        if timed_out or budget.expired():
            if not timed_out:
                budget.skip_for_time(f"model-file scans ({rel} and the files after it)")
            timed_out = True  # not read at all: not proven safe (SEC006), never silently passed
            scans[rel] = PickleScan(rel, "not-pickle", unproven=[f"{rel}: not scanned, the time budget of this check "
                                                                 "ran out before it"])
            continue
        try:
            with source.open(rel) as handle:
                scan = scan_handle(handle, rel, budget)
        except (OSError, Unreadable) as err:
            scans[rel] = str(err) or "cannot be read"
            continue
        scans[rel] = scan
        if identity is not None:
            by_identity[identity] = scan
    return scans


def _renamed(scan: PickleScan, rel: str) -> PickleScan:
    """The scan of another name of the same content (a hard link), with this file's name."""
    return dataclasses.replace(scan, file=rel)


OLD_CODE = ("SEC001",)


def _pickle_scans(repo: ModelRepo) -> Iterator[tuple[str, PickleScan]]:
    """The scans of files that are (or hold) pickles: not those that could not be read, nor
    files that turned out to be neither a pickle nor a torch zip with nothing found in them."""
    for rel, scan in model_file_scans(repo).items():
        if isinstance(scan, str):
            continue
        if scan.kind == "not-pickle" and not scan.imports and not scan.problems and not scan.unproven:
            continue
        yield rel, scan


def _runs_code(scan: PickleScan) -> tuple[list, list, list, list]:
    """(dangerous, unlisted imports, attribute writes, nested loads of bytes built at load time)."""
    gadgets = [c for c in scan.calls if c.text.startswith("set attributes of ")]
    loads = [c for c in scan.calls if c.origin in NESTED_LOADERS]  # a nested load of bytes we could not read
    return scan.by_verdict("dangerous"), scan.by_verdict("unlisted"), gadgets, loads


@rule("SEC001", "unsafe-pickle", Severity.ERROR, fix=FixAvailability.NONE)
def unsafe_pickle(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A pickle that loaders run imports what rebuilding tensors does not need (nested, compressed and archived pickles too).

    Why: unpickling calls whatever the pickle names. torch.load(weights_only=False),
    pickle.load, joblib, numpy.load(allow_pickle=True) and older transformers versions run
    it while "loading the model", so a weight file can run shell commands, write files or
    open connections. hfdoctor reads every file loaders unpickle (`*.bin`, `*.pt`,
    `*.pth`, `*.ckpt`, `*.pkl`, `*.pickle`, `*.joblib`, `*.dill`, object `*.npy`/`*.npz`),
    compressed (`.gz`, `.bz2`, `.xz`, joblib's compressors) or inside archives (torch
    zips, `.zip`, `.tar`, `.pth.tar`, `.7z`), told apart by content, never by name alone.
    It walks the pickle opcodes without unpickling, runs the pickle machine on symbolic
    values to resolve every import and call, and judges imports against an allowlist (as
    fickling and torch's weights_only loader do), never a denylist alone: anything that is
    not one of torch's tensor/storage rebuilders, dtypes, OrderedDict or numpy arrays, and
    not a known training-state class (SEC004), is an error. The message names the imports
    and the call chain loading would run (e.g.
    `numpy.size(numpy.size, 'eval')('__import__("os").system("id")')`). The container
    tricks count as what the loader runs: a pickle in front of a torch zip (torch.load
    unpickles the front), zip members read from their local headers whatever the central
    directory's name, the CRC or the encryption flag say (torch ignores all three), every
    member of a legacy torch tar, and the bytes `torch.storage._load_from_bytes` loads
    (scanned as a file of their own).

    Until 0.4 this code also covered the findings that are now SEC004 to SEC009;
    `--select SEC001` and `--ignore SEC001` still take them all.

    Example: pytorch_model.bin whose data.pkl imports posix.system; a .pkl importing
    `mlflow.pyfunc.load_model`; a model.7z holding such a pickle (picklescan's and
    modelaudit's test files, re-created in tests/corpus/make_model_files.py).

    Fix: none automatic; do not load the file. Convert trusted weights to safetensors,
    which holds data only.
    """
    for rel, scan in _pickle_scans(repo):
        dangerous, unlisted, gadgets, loads = _runs_code(scan)
        if dangerous or gadgets or loads:
            yield self.finding(
                repo,
                f"{rel} runs code when loaded: its pickle imports {_names(dangerous + unlisted)}"
                + (" and writes attributes of an imported object" if gadgets else "")
                + (" and unpickles bytes it builds at load time" if loads and not dangerous else "")
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


@rule("SEC004", "pickle-training-state", Severity.INFO, fix=FixAvailability.NONE, aliases=OLD_CODE)
def pickle_training_state(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A pickle holds only known training-state classes beyond tensors (TrainingArguments, TRL configs, torch.nn layers).

    Why: these classes (transformers' TrainingArguments and accelerate's state in
    training_args.bin, TRL configs, scikit-learn estimators, torch.nn layers) run no code
    when rebuilt, but they make torch.load(weights_only=True) refuse the file, and
    weights_only=False trusts it completely. These decisions are data, each with where
    the class was seen (upstream_templates/pickle_classes.json). A pickle that also
    imports anything else is SEC001.

    Example: training_args.bin as transformers' Trainer writes it (torch.save of a
    transformers.training_args.TrainingArguments); a torch.nn.Linear saved whole.

    Fix: none automatic; prefer safetensors for anything a loader needs.
    """
    for rel, scan in _pickle_scans(repo):
        dangerous, unlisted, gadgets, loads = _runs_code(scan)
        known = scan.by_verdict("known")
        if known and not (dangerous or unlisted or gadgets or loads):
            yield self.finding(
                repo,
                f"{rel} pickles training state beyond tensors ({_names(known)}): these classes run no code when "
                "rebuilt, but torch.load(weights_only=True) refuses the file and weights_only=False trusts it "
                "completely. Prefer safetensors for anything a loader needs.",
                file=rel, severity=Severity.INFO,
            )


@rule("SEC005", "embedded-pickle", Severity.WARNING, fix=FixAvailability.NONE, aliases=OLD_CODE)
def embedded_pickle(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A file stores a pickle as data (raw bytes, base64 or hex in a string) that imports what it must not.

    Why: loading the file does not run the stored pickle, but code that unpickles that
    field does (a multistage payload: a pickle holding a pickle is followed a few levels
    deep). Up to two such fields are reported per file.

    Example: model.pkl holding {"weights": [1, 2], "hidden": <a pickle that calls
    builtins.print>}, or the same payload base64- or hex-encoded (modelaudit's
    nested_pickle_raw/base64/hex/multistage test files).

    Fix: none automatic; remove the field, or treat it as hostile.
    """
    for rel, scan in _pickle_scans(repo):
        for where, imports in embedded_imports(scan)[:2]:
            yield self.finding(
                repo,
                f"{rel} stores a pickle as data (in {where}) that imports {_names(imports)}: loading {rel} does not "
                "run it, but code that unpickles that field does. Remove it, or treat the field as hostile.",
                file=rel, severity=Severity.WARNING,
            )


@rule("SEC006", "pickle-not-proven-safe", Severity.ERROR, fix=FixAvailability.NONE, aliases=OLD_CODE)
def pickle_not_proven_safe(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A bound stopped the scan of a file where a pickle is or may be: it is not proven safe.

    Why: what was not read may run anything when loaded. A bound is anything that stopped
    the scan before the end of what the loader reads: a bound proper (over the 64 MB / 2
    million opcodes hfdoctor reads of one file, past the check's time or read budget,
    archives or nested loads more than 4 deep, a decompression bomb, more than 256 MB
    decompressed in memory, a Keras config past its walk), content hfdoctor cannot read
    (a 7z folder or zip member it cannot decompress, a damaged archive, an HDF5 layout its
    reader does not follow), a read that failed part way, or malformed data its readers
    did not expect. Only bytes the loader itself refuses end a scan without this verdict
    (SEC007). A pickle FRAME that runs past its STOP counts too: a loader that reads
    frames whole starts the next pickle elsewhere. A file that already runs code is SEC001.

    Example: huge.pkl whose BINBYTES8 opcode claims 96 MB that the file holds; a torch zip
    of 12 pickles of 16 MB each (a zip bomb of pickles, stopped at the 64 MB budget); a 7z
    whose header lists 2 million folders.

    Fix: none automatic; do not load it unless you trust its author; prefer safetensors.
    """
    for rel, scan in _pickle_scans(repo):
        dangerous, _, gadgets, loads = _runs_code(scan)
        if scan.unproven and not (dangerous or gadgets or loads):
            yield self.finding(
                repo, f"{rel} is not proven safe: {scan.unproven[0]}"
                + (f" (and {len(scan.unproven) - 1} more places)" if len(scan.unproven) > 1 else "")
                + ". What was not scanned may hold a pickle that loading runs. Do not load it unless you trust its "
                "author; prefer safetensors.",
                file=rel,
            )


@rule("SEC007", "pickle-unscannable", Severity.WARNING, fix=FixAvailability.NONE, aliases=OLD_CODE)
def pickle_unscannable(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A file loaders unpickle cannot be read, or its pickle is damaged, so it could not be fully scanned.

    Why: hfdoctor reads pickle opcodes as the unpicklers do (_pickle.c and pickle.py:
    numbers up to a NUL, C octal, strict UTF-8 names), so bytes it refuses stop loading
    there too, after what was scanned: a warning. A pickle that already imports code is
    SEC001; a scan that stopped for any other reason is SEC006.

    Example: a pytorch_model.bin the user may not read (Permission denied); a .pkl cut off
    in the middle of an opcode.

    Fix: none automatic; re-download or re-save the file, then check it again.
    """
    for rel, scan in model_file_scans(repo).items():
        if isinstance(scan, str):
            yield self.finding(repo, f"{rel} cannot be read to scan it: {scan}", file=rel, severity=Severity.WARNING)
    for rel, scan in _pickle_scans(repo):
        dangerous, unlisted, gadgets, loads = _runs_code(scan)
        if scan.problems and not scan.unproven and not (dangerous or gadgets or unlisted or loads):
            yield self.finding(
                repo, f"{rel} could not be fully scanned ({scan.problems[0]}): imports after that point are unknown.",
                file=rel, severity=Severity.WARNING,
            )


@rule("SEC008", "not-a-pickle", Severity.INFO, fix=FixAvailability.NONE, aliases=OLD_CODE)
def not_a_pickle(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """A file named like a pickle (`*.bin`, `*.pt`, `*.pkl`...) is neither a pickle nor a torch zip archive.

    Why: torch.load cannot read it, so nothing in it runs either; it is not scanned. It
    is often another format under a pickle's name, or random data.

    Example: random.bin holding bytes 7 to 199 repeated (tests/modelfiles/test_security.py).

    Fix: none automatic; rename the file to its real format, or remove it.
    """
    for rel, scan in model_file_scans(repo).items():
        if isinstance(scan, str) or scan.kind != "not-pickle" or scan.imports or scan.problems or scan.unproven:
            continue
        if rel.endswith(PICKLE_SUFFIXES):
            yield self.finding(
                repo, f"{rel} is neither a pickle nor a torch zip archive: not scanned (torch.load cannot read it).",
                file=rel, severity=Severity.INFO,
            )


# What one pushed blob of an earlier commit may cost to read (the scanner reads 64 MB of a file).
PUSHED_BLOB_LIMIT = 64 * 1024 * 1024


@rule("SEC009", "unsafe-pickle-in-history", Severity.ERROR, fix=FixAvailability.NONE, aliases=OLD_CODE)
def unsafe_pickle_in_history(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """An earlier commit of a push adds a pickle that imports code, though a later commit removes or replaces it.

    Why: the push still carries the blob, and anyone can load it by revision. Judged when
    hfdoctor checks a push (the pre-push hook, `--git-since`): each blob the push sends is
    scanned once, as at the tip. A git-lfs pointer is judged by the object it names when
    that object is in the repository's LFS store, since git-lfs uploads it with the push. A
    pickle of an earlier commit that hfdoctor could not prove safe (a bound stopped its scan, or it is
    over the 64 MB hfdoctor reads of such a blob) is an error here too, as pickle-not-proven-safe is at
    the tip, and so is a push past the million objects judged; one whose bytes the loader itself refuses
    is a warning, as pickle-unscannable is.

    Example: commit A adds model.pkl importing os.system, commit B replaces it with a
    clean file, and both are pushed (tests/sources/test_pushed_history.py).

    Fix: none automatic; rewrite the history before pushing (git rebase -i, or git
    filter-repo).
    """
    source = repo.source
    for blob in getattr(source, "pushed", ()):
        if not scanned(blob.path):
            continue
        adds = (f"commit {blob.commit[:12]} of this push adds {blob.path}" if blob.commit else
                f"this push carries {blob.path} (blob {blob.sha[:12]}, from a merge or an earlier commit)")
        rewrite = ("A later commit removes or replaces it, but the push still carries it and anyone can load it by "
                   "revision. Rewrite the history before pushing (git rebase -i, or git filter-repo).")
        try:
            handle = source.open_pushed(blob, PUSHED_BLOB_LIMIT)
        except Unreadable as err:
            yield self.finding(repo, f"{adds}, which is not proven safe: it {err}. {rewrite}", file=blob.path)
            continue
        if handle is None:
            continue  # an LFS pointer whose object is not here: git-lfs uploads nothing of it
        with handle:
            scan = scan_handle(handle, blob.path, repo.budget)
        dangerous, unlisted = scan.by_verdict("dangerous"), scan.by_verdict("unlisted")
        if dangerous or unlisted:
            yield self.finding(
                repo, f"{adds}, whose pickle imports {_names(dangerous + unlisted)}"
                + _chain(scan, dangerous + unlisted) + f". {rewrite}", file=blob.path,
            )
        elif scan.unproven:
            yield self.finding(repo, f"{adds}, which is not proven safe: {scan.unproven[0]}. {rewrite}", file=blob.path)
        elif scan.problems and scan.kind != "not-pickle":  # bytes the loader refuses too: SEC007's warning at the tip
            yield self.finding(repo, f"{adds}, which could not be fully scanned ({scan.problems[0]}): imports after "
                               f"that point are unknown. {rewrite}", file=blob.path, severity=Severity.WARNING)
    if getattr(source, "pushed_unjudged", False):  # set when `pushed` was listed, above
        yield self.finding(repo, f"this push sends more than the {history.MAX_PUSHED_OBJECTS:,} objects hfdoctor "
                                 "judges: the rest were never read, so it is not proven safe. Push it in parts.")


@rule("SEC003", "unsafe-model-file", Severity.ERROR, fix=FixAvailability.NONE)
def unsafe_model_file(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """Another model format runs code or reaches outside the repository on load: Keras Lambda layers or module references, ONNX external data outside the repo, TF SavedModel PyFunc.

    Why: pickle is not the only format that executes. A Keras model (`.keras`, `.h5`)
    with a `Lambda` layer carries marshalled Python bytecode that keras.models.load_model
    runs (Keras 2; Keras 3 with safe_mode=False), and a config object whose `module` is
    not Keras's own makes the loader import and call that module's function
    (`builtins.exec`). An ONNX tensor whose external data `location` is absolute or
    climbs out of the model's directory makes onnx read any file of the machine into the
    model (CVE-2022-25882 and later path traversals). A TensorFlow SavedModel with a
    PyFunc/EagerPyFunc op calls Python in the loading process. An archive member named
    `../x` is written outside the folder by whoever extracts the archive (warning: no
    model loader extracts).

    Example: model.keras whose config.json holds {"class_name": "Lambda", ...}; model.onnx
    whose initializer's external data is "../../../../etc/passwd".

    Fix: none automatic; re-export the model without the Lambda layer (a registered
    custom layer), with external data beside the model, or without py_function.
    """
    entries = None
    for rel, scan in model_file_scans(repo).items():
        if isinstance(scan, str):
            continue
        if scan.reaches:
            entries = entries if entries is not None else repo.source.entries()
            for path, detail in _leaving_links(rel, scan.reaches, entries)[:4]:
                yield self.finding(repo, f"{rel} runs or reaches code on load: its tensor data is read from {path!r}, "
                                         f"which {detail} (onnx opens it on load).", file=rel)
        for severity, message in list(dict.fromkeys(scan.unsafe))[:4]:
            yield self.finding(
                repo, f"{rel} {'runs or reaches code on load' if severity == 'error' else 'is an archive'}: {message}.",
                file=rel, severity=Severity.ERROR if severity == "error" else Severity.WARNING,
            )


def _leaving_links(rel: str, paths: list[str], entries: dict) -> list[tuple[str, str]]:
    """(path, what it is) of each path, relative to the folder of `rel`, that passes through
    a symlink leading outside the repository (the source lists such a link, never follows it)."""
    import posixpath

    folder = posixpath.dirname(rel)
    found = []
    for path in paths:
        parts = posixpath.normpath(posixpath.join(folder, path.replace("\\", "/"))).split("/")
        for end in range(1, len(parts) + 1):
            entry = entries.get("/".join(parts[:end]))
            if entry is not None and entry.kind == "outside":
                found.append((path, entry.detail or "is a link leading outside the repository"))
                break
    return found


def _auto_map_refs(auto_map: dict) -> list[tuple[str, str]]:
    """(auto class, 'module.Class' or 'org/repo--module.Class') pairs of an auto_map."""
    refs = []
    for auto_class, value in auto_map.items():
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, str) and ref:
                refs.append((str(auto_class), ref))
    return refs


@rule("SEC002", "remote-code", Severity.WARNING, fix=FixAvailability.NONE)
def remote_code(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """config.json or tokenizer_config.json has an `auto_map`: loading needs trust_remote_code.

    Why: `auto_map` points transformers at Python files (modeling_*.py, tokenization_*.py)
    in this repository or another one. Loading with trust_remote_code=True imports and runs
    them with the user's rights, and they change whenever the repository does (pin a
    revision). When transformers has a native implementation of the model type, the
    remote code is not needed at all.

    Example: "auto_map": {"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}.

    Severity: warning; info when transformers has a native implementation of the
    model_type (the usual load never runs the code; the message says since which release),
    and info when the model type is a family its maker publishes only as remote code
    (ChatGLM, Qwen 1, InternLM/InternLM2, MiMo, the first phi-1.5 releases; for an adapter
    with no config.json, the family its tokenizer's code names), or one no transformers
    release knows at all (an architecture of its own): there is no other way to load it, by
    its authors' design.

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
        since = kb.transformers_since(model_type) if rel == "config.json" and isinstance(model_type, str) else None
        if since is None and isinstance(model_type, str) and model_type in registry.architectures():
            since = "the installed release"
        native = (f" transformers has a native {model_type} implementation (since {since}): load without "
                  "trust_remote_code." if since else "")
        facets = (Facet(FacetKind.AVOIDABLE, f"transformers loads {model_type} natively since {since}, without "
                                             "this code"),) if since else ()
        only_remote = registry.remote_code_family(model_type) if rel == "config.json" and not since else None
        if only_remote is None and rel == "tokenizer_config.json" and not since:
            only_remote = (registry.remote_code_family((repo.config or {}).get("model_type"))
                           or _family_of_code(refs))
        if only_remote is not None:  # the family exists only as its maker's remote code
            facets = (Facet(FacetKind.UPSTREAM_DESIGN, f"{only_remote.display} upstream "
                                                       f"({only_remote.remote_code_repo} is published only as remote "
                                                       f"code: transformers has no native "
                                                       f"{model_type or 'implementation'})"),)
        elif isinstance(model_type, str) and model_type and not kb.transformers_since(model_type) \
                and model_type not in registry.architectures():
            # An architecture of its own: its code, its tokenizer's too (Baichuan2), is the only way to load it.
            facets = (Facet(FacetKind.UPSTREAM_DESIGN, f"model_type {model_type!r} exists only as this code: "
                                                       "transformers has no implementation of it"),)
        auto_class, ref = refs[0]
        yield self.finding(
            repo,
            f"{rel} auto_map sends {auto_class} to {ref}"
            + (f" (and {len(refs) - 1} more)" if len(refs) > 1 else "")
            + f": loading needs trust_remote_code=True, which runs {', '.join(files)} on the user's machine."
            + native,
            file=rel, pointer="/auto_map", facets=facets,
        )


def _family_of_code(refs: list[tuple[str, str]]):
    """The remote-code family a tokenizer's auto_map module names (tokenization_chatglm: ChatGLM)."""
    for _, ref in refs:
        module = ref.rpartition("--")[2].rsplit(".", 1)[0]
        if module.startswith("tokenization_"):
            found = registry.remote_code_family(module.removeprefix("tokenization_"))
            if found is not None:
                return found
    return None


# SEC004-SEC009 were part of SEC001 until 0.4.
RULES: list[Rule] = [unsafe_pickle, remote_code, unsafe_model_file, pickle_training_state, embedded_pickle,
                     pickle_not_proven_safe, pickle_unscannable, not_a_pickle, unsafe_pickle_in_history]
