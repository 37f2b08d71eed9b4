"""Model-file security verdicts side by side: hfdoctor, modelaudit and picklescan on one corpus.

    python bench/bench_model_files.py                       # the corpus tests/corpus/make_model_files.py builds
    python bench/bench_model_files.py --peers DIR           # also the peers' own published test files
    python bench/bench_model_files.py --peer-python PY      # a Python with modelaudit/picklescan installed

The corpus re-creates, with hfdoctor's own code, the techniques of the peers' test suites
(each sample names the file or advisory it reproduces). `--peers DIR` adds the peers' own
published test files from checkouts under DIR (picklescan/, modelaudit/, modelscan/), each
labelled by the peer's own naming (malicious*, GHSA-*, exploit*, safe*, benign*...) and
recorded with its path; they are read in place, never copied.

Two tables: "flagged" as an error (hfdoctor: a security finding of severity error;
modelaudit: an issue of severity critical; picklescan: a dangerous global), and as a
warning or worse (hfdoctor warning/error, modelaudit warning/critical). Then the samples on
which hfdoctor and a peer disagree, by the first measure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "corpus"))

from hfdoctor.lint.check import check_target  # noqa: E402
from hfdoctor.knowledge.upstream import Upstream  # noqa: E402

MALICIOUS_NAMES = re.compile(r"malicious|GHSA-|exploit|attack|evil|cloudpickle|dns_exfiltration|io_FileIO|"
                             r"logging_FileHandler|types_CodeType|urllib|keyerror|type-confusion|sys_module_override|"
                             r"magic_bypass|broken_model|unsafe_|path_traversal|decode_exec|nested_pickle|dill_func")
BENIGN_NAMES = re.compile(r"benign|safe_|int_array|object_array|not_a_pickle|bad_pytorch|^pytorch_model\.bin$|"
                          r"new_pytorch_model|password_protected|simple_nested")
PEER_FOLDERS = {"picklescan": ["tests/data", "tests/data2"],
                "modelaudit": ["tests/assets/exploits", "tests/assets/pickles", "tests/assets/samples/pickles",
                               "tests/assets/samples/keras", "tests/assets/samples/tensorflow",
                               "tests/assets/samples/archives", "tests/assets/samples/pytorch",
                               "tests/assets/scenarios/security_scenarios"],
                "modelscan": ["tests/data"]}
SKIPPED_SUFFIXES = (".py", ".json", ".md", ".txt", ".yaml", ".csv", ".j2", ".jinja", ".template")


@dataclass
class Entry:
    name: str
    path: Path  # the file
    label: str  # malicious | embedded | benign
    provenance: str


def corpus_entries(out: Path) -> list[Entry]:
    import make_model_files

    make_model_files.write(out)
    return [Entry(s["name"], out / s["name"] / s["file"], s["label"], s["provenance"])
            for s in json.loads((out / "MANIFEST.json").read_text())]


def peer_entries(peers: Path) -> list[Entry]:
    found = []
    for peer, folders in PEER_FOLDERS.items():
        for folder in folders:
            for path in sorted((peers / peer / folder).rglob("*")):
                if not path.is_file() or path.name.endswith(SKIPPED_SUFFIXES):
                    continue
                label = "malicious" if MALICIOUS_NAMES.search(path.name) or "exploits" in path.parts or \
                    "security_scenarios" in path.parts else "benign" if BENIGN_NAMES.search(path.name) else None
                if label is not None:
                    found.append(Entry(f"{peer}:{path.relative_to(peers / peer)}", path, label,
                                       f"{peer} {path.relative_to(peers / peer)}"))
    return found


def hfdoctor_severities(entries: list[Entry], work: Path) -> dict[str, set[str]]:
    """Each file checked as a repository of its own: the corpus writes one folder per sample;
    a peer's file is copied into a folder of its own (read in place, it would be judged with
    its neighbours)."""
    upstream = Upstream((), use_cache=False, use_hub=False)
    flags = {}
    for index, entry in enumerate(entries):
        target = entry.path.parent
        if target.name != entry.name:
            target = work / f"repo{index}"
            target.mkdir()
            (target / entry.path.name).write_bytes(entry.path.read_bytes())
        report = check_target(str(target), select=["SEC"], upstream=upstream)
        flags[entry.name] = {str(f.severity) for f in report.findings}
    return flags


def modelaudit_severities(entries: list[Entry], python: str) -> dict[str, set[str]] | None:
    """Sample -> the severities of modelaudit's issues on it, from one `modelaudit scan` of
    every file (JSON output; each issue's location starts with the file's path)."""
    paths = {str(e.path): e.name for e in entries}
    proc = subprocess.run([python, "-m", "modelaudit", "scan", *paths, "--format", "json", "--no-cache"],
                          capture_output=True, text=True, timeout=3600)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        return None  # not installed (or it failed): the table says so
    found: dict[str, set[str]] = {name: set() for name in paths.values()}
    for issue in report.get("issues", []):
        location = str(issue.get("location") or (issue.get("details") or {}).get("pickle_source") or "")
        path = max((p for p in paths if location.startswith(p)), key=len, default=None)
        if path is not None:
            found[paths[path]].add(str(issue.get("severity")))
    return found


def picklescan_flags(entries: list[Entry], python: str) -> dict[str, bool] | None:
    script = ("import json,sys,logging\nlogging.disable(logging.CRITICAL)\n"
              "from picklescan.scanner import scan_file_path\nout={}\n"
              "for p in json.load(sys.stdin):\n"
              "    try: out[p]=scan_file_path(p).issues_count>0\n"
              "    except Exception: out[p]=False\n"
              "print(json.dumps(out))\n")
    proc = subprocess.run([python, "-c", script], input=json.dumps([str(e.path) for e in entries]),
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return None
    by_path = json.loads(proc.stdout)
    return {e.name: by_path[str(e.path)] for e in entries}


def table(entries: list[Entry], results: dict[str, dict[str, bool] | None], title: str) -> None:
    labels = ["malicious", "embedded", "benign"]
    print(f"\n{title}\n{'scanner':12}" + "".join(f"{label + ' flagged':>22}" for label in labels))
    for scanner, flags in results.items():
        if flags is None:
            print(f"{scanner:12}  (not installed: pass --peer-python)")
            continue
        cells = []
        for label in labels:
            group = [e for e in entries if e.label == label]
            hit = sum(flags.get(e.name, False) for e in group)
            cells.append(f"{hit}/{len(group)}" + (f" ({100 * hit / len(group):.0f}%)" if group else ""))
        print(f"{scanner:12}" + "".join(f"{c:>22}" for c in cells))


def differences(entries: list[Entry], results: dict[str, dict[str, bool] | None]) -> None:
    ours = results["hfdoctor"]
    for scanner, flags in results.items():
        if scanner == "hfdoctor" or flags is None:
            continue
        differ = [e for e in entries if flags.get(e.name) != ours.get(e.name)]
        print(f"\nhfdoctor and {scanner} disagree on {len(differ)}:")
        for e in differ:
            print(f"  {e.label:9} hfdoctor={'flag' if ours[e.name] else '-':4} {scanner}="
                  f"{'flag' if flags[e.name] else '-':4} {e.name}  ({e.provenance})")
    missed = [e for e in entries if e.label != "benign" and not ours[e.name]]
    noisy = [e for e in entries if e.label == "benign" and ours[e.name]]
    print(f"\nhfdoctor misses {len(missed)}: " + ", ".join(e.name for e in missed))
    print(f"hfdoctor flags {len(noisy)} benign: " + ", ".join(e.name for e in noisy))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=Path, help="checkouts of picklescan/, modelaudit/, modelscan/ (their tests)")
    parser.add_argument("--peer-python", default=sys.executable, help="a Python with modelaudit and picklescan")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        entries = corpus_entries(work / "corpus")
        if args.peers:
            entries += peer_entries(args.peers)
        (work / "checks").mkdir()
        ours = hfdoctor_severities(entries, work / "checks")
        theirs = modelaudit_severities(entries, args.peer_python)
        picklescan = picklescan_flags(entries, args.peer_python)
        print(f"{len(entries)} samples ({sum(e.label == 'malicious' for e in entries)} malicious, "
              f"{sum(e.label == 'embedded' for e in entries)} payloads stored as data, "
              f"{sum(e.label == 'benign' for e in entries)} benign)")

        def flags(severities, loud):
            return None if severities is None else {k: bool(v & loud) for k, v in severities.items()}

        strict = {"hfdoctor": flags(ours, {"error"}), "modelaudit": flags(theirs, {"critical"}),
                  "picklescan": picklescan}
        loose = {"hfdoctor": flags(ours, {"error", "warning"}), "modelaudit": flags(theirs, {"critical", "warning"}),
                 "picklescan": picklescan}
        table(entries, strict, "flagged = hfdoctor error / modelaudit critical / picklescan dangerous global")
        table(entries, loose, "flagged = hfdoctor warning or error / modelaudit warning or critical")
        differences(entries, strict)


if __name__ == "__main__":
    main()
