"""The baseline: findings a repository has accepted, so that a check fails only on new ones.

`check --write-baseline FILE` writes every finding of the targets checked; `check --baseline
FILE` (or the configuration's `baseline`) leaves out the findings found in it. A finding is
known by its target, its file, its code and a fingerprint of the code, file, JSON pointer and
message with every number and run of spaces made alike: not by its line, so a finding moved
by an edit above it is still the same finding, and a count, so that a second finding of the
same kind in the same place is new. The file is JSON, sorted, with no date or version in it:
written twice over the same findings, it is the same bytes.

Targets are named relative to the baseline's folder (a directory), or by their Hub id. A
baseline named by a repository's own configuration is read inside the repository (through its
source) and cannot accept the PROTECTED rules' findings (hfdoctor.lint.configured).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path, PurePosixPath

from hfdoctor.bounded import patterns
from hfdoctor.bounded.parsing import ParseError, load_json
from hfdoctor.config import ConfigError, RepositoryConfigError, read_file
from hfdoctor.findings import Finding, Report, TargetError
from hfdoctor.lint.configured import is_protected
from hfdoctor.sources.base import Source, Unreadable
from hfdoctor.sources.targets import REPO_ID

FORMAT = 1
MAX_BASELINE_BYTES = 64 * 1024 * 1024
Key = tuple[str, str, str, str]  # target, file, code, fingerprint

# Messages quote repository text: RE2 (hfdoctor.bounded.patterns).
_NUMBER = patterns.compile(r"\d+")
_SPACE = patterns.compile(r"\s+")


def fingerprint(finding: Finding) -> str:
    """The same for the same finding after an edit that moves it (lines) or changes a count in its message."""
    message = _SPACE.sub(" ", _NUMBER.sub("#", finding.message)).strip()
    text = "\0".join((finding.code, finding.file or "", finding.pointer or "", message))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def target_key(target: str, baseline: str) -> str:
    """How the baseline at path `baseline` names `target`: relative to its folder, or a Hub id."""
    if os.path.exists(target):
        folder = os.path.dirname(os.path.abspath(baseline))
        return PurePosixPath(Path(os.path.relpath(os.path.realpath(target), os.path.realpath(folder)))).as_posix()
    match = REPO_ID.match(target)
    return match.group("repo") if match else target


def inside_key(path_in_repository: str) -> str:
    """How a baseline inside the repository names the repository: the way back to its root."""
    depth = len(PurePosixPath(path_in_repository).parts) - 1
    return "/".join([".."] * depth) or "."


def parse(data: bytes, origin: str) -> Counter:
    """The accepted findings of a baseline file, counted by key; ConfigError when it is not one."""
    try:
        document = load_json(data.decode("utf-8"), data)
    except (UnicodeDecodeError, ParseError, ValueError) as err:
        raise ConfigError(f"{origin}: not a baseline (JSON): {str(err)[:200]}") from None
    entries = document.get("findings") if isinstance(document, dict) else None
    if not isinstance(entries, list) or document.get("version") != FORMAT:
        raise ConfigError(f"{origin}: not a baseline written by `hfdoctor check --write-baseline` (version {FORMAT})")
    accepted: Counter = Counter()
    for entry in entries:
        fields = [entry.get(k) if isinstance(entry, dict) else None for k in ("target", "file", "code", "fingerprint")]
        if not all(isinstance(v, str) for v in fields):
            raise ConfigError(f"{origin}: an entry without target, file, code and fingerprint strings")
        accepted[tuple(fields)] += 1
    return accepted


def read_local(path: str) -> Counter:
    if not os.path.exists(path):
        raise ConfigError(f"baseline {path}: no such file (write it with `hfdoctor check --write-baseline {path}`)")
    return parse(read_file(Path(path), limit=MAX_BASELINE_BYTES), path)


def read_inside(source: Source, rel: str) -> Counter:
    """A baseline the repository's own configuration names, read from the repository."""
    try:
        return parse(source.read(rel, limit=MAX_BASELINE_BYTES), rel)
    except Unreadable as err:
        raise RepositoryConfigError(f"baseline {rel} of the repository {err}") from None
    except ConfigError as err:
        raise RepositoryConfigError(str(err)) from None


def apply(report: Report, accepted: Counter, target: str, trusted: bool) -> int:
    """Leave out of the report the findings the baseline accepts; how many were left out."""
    kept: list[Finding] = []
    left_out = 0
    remaining = Counter(accepted)
    for finding in report.findings:
        key = (target, finding.file or "", finding.code, fingerprint(finding))
        if remaining[key] > 0 and (trusted or not is_protected(finding.code)):
            remaining[key] -= 1
            left_out += 1
            continue
        kept.append(finding)
    report.findings = kept
    return left_out


def write(results: list[Report | TargetError], path: str, targets: list[str]) -> int:
    """Write every finding of `results` (checked from `targets`) as the baseline at `path`;
    how many findings it holds. Atomic: a reader sees the old file or the new one."""
    entries = []
    for target, result in zip(targets, results):
        if isinstance(result, TargetError):
            continue
        key = target_key(target, path)
        for f in result.findings:
            entries.append({"target": key, "file": f.file or "", "code": f.code, "rule": f.rule,
                            "fingerprint": fingerprint(f), "message": f.message})
    entries.sort(key=lambda e: (e["target"], e["file"], e["code"], e["fingerprint"], e["message"]))
    # ASCII: a message with an undecodable name (a lone surrogate) is still valid JSON.
    text = json.dumps({"version": FORMAT, "findings": entries}, indent=2) + "\n"
    tmp = f"{path}.hfdoctor-tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    with open(tmp, "x", encoding="ascii") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return len(entries)
