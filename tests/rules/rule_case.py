"""Rule cases as data: read a case file, build the case's folder, compare its findings.

A case file (tests/rules/<CODE>.yml) holds the cases of one rule, as sqlfluff's
std_rule_cases do: each case names a base folder of real, published data, a patch that
breaks (or keeps) one thing, and the findings of that one rule the patched folder must
give. tests/rules/README.md describes the format.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from conftest import ROOT, UPSTREAM

CASE_KEYS = {"name", "why", "base", "patch", "expect"}
EXPECT_KEYS = {"code", "count", "severity", "file", "line", "pointer", "pointer_prefix", "fix", "fix_title",
               "message_contains", "severity_reason"}
REQUIRED_EXPECT_KEYS = ("severity", "file", "fix")  # and pointer or pointer_prefix
PATCH_VERBS = {"set", "remove", "replace", "keep_before", "append", "write", "write_hex", "copy_from", "delete",
               "truncate"}


@dataclass(frozen=True)
class RuleCase:
    code: str
    name: str
    base: dict[str, str]
    patch: tuple[dict[str, Any], ...]
    expect: tuple[dict[str, Any], ...]
    source: Path  # the case file

    @property
    def id(self) -> str:
        return f"{self.code}-{self.name}"


def base_folder(base: dict[str, str]) -> Path:
    """Where a base lives: {upstream: Qwen/Qwen3-8B} is ../shared/upstream/Qwen--Qwen3-8B (its
    provenance is that folder's rows of MANIFEST.tsv there); {fixture: fixtures/seed-incident} is
    a folder of this repository; {community: SLUG} is tests/corpus/community/SLUG/folder.json,
    which names where each of its files was published (write_base writes the folder out)."""
    if set(base) == {"upstream"}:
        folder = UPSTREAM / base["upstream"].replace("/", "--")
    elif set(base) == {"fixture"} and base["fixture"].startswith("fixtures/"):
        folder = ROOT / base["fixture"]
    elif set(base) == {"community"}:
        folder = ROOT / "tests" / "corpus" / "community" / base["community"]
    else:
        raise ValueError(f"a base is {{upstream: org/name}}, {{fixture: fixtures/...}} or {{community: SLUG}}: {base}")
    if not folder.is_dir():
        raise ValueError(f"base folder {folder} does not exist")
    return folder


def write_base(base: dict[str, str], dest_parent: Path) -> Path:
    """A private copy of the base under dest_parent, named as the base is."""
    if "community" in base:
        if str(ROOT / "tests" / "corpus") not in sys.path:
            sys.path.insert(0, str(ROOT / "tests" / "corpus"))
        import community_load

        return community_load.materialise_one(base["community"], dest_parent)
    source = base_folder(base)
    return Path(shutil.copytree(source, dest_parent / source.name, symlinks=True))


def load_cases(folder: Path) -> list[RuleCase]:
    cases: list[RuleCase] = []
    for path in sorted(folder.glob("*.yml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        code = data["rule"]
        assert path.stem == code, f"{path.name}: the file is named after its rule, {code}"
        names = [case["name"] for case in data["cases"]]
        assert len(names) == len(set(names)), f"{path.name}: case names repeat"
        for case in data["cases"]:
            unknown = set(case) - CASE_KEYS
            assert not unknown, f"{path.name} {case['name']}: unknown keys {unknown}"
            for entry in case.get("expect") or ():
                check_expectation(entry, f"{path.name} {case['name']}")
            for op in case.get("patch") or ():
                assert "file" in op and len(set(op) & PATCH_VERBS) == 1, f"{path.name} {case['name']}: patch op {op}"
            base_folder(case["base"])
            cases.append(RuleCase(code=code, name=case["name"], base=case["base"],
                                  patch=tuple(case.get("patch") or ()), expect=tuple(case.get("expect") or ()),
                                  source=path))
    return cases


def check_expectation(entry: dict[str, Any], where: str) -> None:
    unknown = set(entry) - EXPECT_KEYS
    assert not unknown, f"{where}: unknown expectation keys {unknown}"
    missing = [k for k in REQUIRED_EXPECT_KEYS if k not in entry]
    assert not missing, f"{where}: every expected finding states {', '.join(REQUIRED_EXPECT_KEYS)}; missing {missing}"
    assert ("pointer" in entry) != ("pointer_prefix" in entry), f"{where}: state pointer (or pointer_prefix)"
    assert entry["fix"] in (None, "safe", "unsafe"), f"{where}: fix is null, safe or unsafe"


# --- materialising a case -------------------------------------------------------------------------

def materialise(case: RuleCase, shared_base: Path, dest_parent: Path) -> Path:
    """The case's folder: `shared_base` (a private copy of the base) hard-linked into
    dest_parent under the base's own folder name, then patched. A patch never writes into
    a linked file: it replaces the file (so the shared copy stays as it was)."""
    dest = dest_parent / shared_base.name
    shutil.copytree(shared_base, dest, copy_function=link_or_copy, symlinks=True)
    for op in case.patch:
        apply(op, dest)
    return dest


def link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def replace_file(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def apply(op: dict[str, Any], folder: Path) -> None:
    path = folder / op["file"]
    if "delete" in op:
        assert path.is_file(), f"delete: {op['file']} is not in the base"
        path.unlink()
    elif "write" in op:
        replace_file(path, op["write"].encode("utf-8"))
    elif "write_hex" in op:  # a small binary file (a safetensors header), its bytes in hex
        replace_file(path, bytes.fromhex(op["write_hex"]))
    elif "copy_from" in op:
        assert "community" not in op["copy_from"], "copy_from reads a folder: upstream or fixture"
        replace_file(path, (base_folder(op["copy_from"]) / op["file"]).read_bytes())
    elif "truncate" in op:  # keep that fraction of the bytes
        data = path.read_bytes()
        replace_file(path, data[: int(len(data) * op["truncate"])])
    elif "replace" in op:
        text = path.read_text(encoding="utf-8")
        assert op["replace"] in text, f"replace: {op['replace']!r} is not in {op['file']}"
        count = op.get("count", -1)
        replace_file(path, text.replace(op["replace"], op["with"], count).encode("utf-8"))
    elif "keep_before" in op:  # cut the file at the first occurrence of the text
        text = path.read_text(encoding="utf-8")
        assert op["keep_before"] in text, f"keep_before: {op['keep_before']!r} is not in {op['file']}"
        replace_file(path, text[: text.index(op["keep_before"])].encode("utf-8"))
    elif "append" in op:
        replace_file(path, (path.read_text(encoding="utf-8") + op["append"]).encode("utf-8"))
    else:
        data = json.loads(path.read_text(encoding="utf-8"))
        if "set" in op:
            # `to_text_of: FILE`: the text of another file of the case as it is by then (a
            # chat_template.jinja edited above, copied into tokenizer_config.json: no conflict).
            value = (folder / op["to_text_of"]).read_text(encoding="utf-8") if "to_text_of" in op else op["to"]
            data = set_pointer(data, op["set"], value)
        else:
            data = remove_pointer(data, op["remove"])
        replace_file(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def pointer_parts(pointer: str) -> list[str]:
    assert pointer.startswith("/"), f"a JSON pointer starts with /: {pointer!r}"
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def _parent(data: Any, parts: list[str]) -> Any:
    for part in parts[:-1]:
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def set_pointer(data: Any, pointer: str, value: Any) -> Any:
    parts = pointer_parts(pointer)
    parent = _parent(data, parts)
    if isinstance(parent, list):
        if parts[-1] == "-":
            parent.append(value)
        else:
            parent[int(parts[-1])] = value
    else:
        parent[parts[-1]] = value
    return data


def remove_pointer(data: Any, pointer: str) -> Any:
    parts = pointer_parts(pointer)
    parent = _parent(data, parts)
    key = int(parts[-1]) if isinstance(parent, list) else parts[-1]
    del parent[key]
    return data


# --- comparing ------------------------------------------------------------------------------------

def matches(finding: dict[str, Any], entry: dict[str, Any], code: str) -> bool:
    fix = finding["fix"]
    wanted = {
        "code": entry.get("code", code),
        **{k: entry[k] for k in ("severity", "file", "line", "pointer", "severity_reason") if k in entry},
    }
    if any(finding[k] != v for k, v in wanted.items()):
        return False
    if "pointer_prefix" in entry and not (finding["pointer"] or "").startswith(entry["pointer_prefix"]):
        return False
    if (fix["applicability"] if fix else None) != entry["fix"]:
        return False
    if "fix_title" in entry and (fix is None or fix["title"] != entry["fix_title"]):
        return False
    needles = entry.get("message_contains", [])
    return all(n in finding["message"] for n in ([needles] if isinstance(needles, str) else needles))


def mismatches(findings: list[dict[str, Any]], case: RuleCase) -> list[str]:
    """What is wrong, in words (empty: the findings are what the case expects). Each expected
    entry matches exactly `count` findings (default 1); every finding matches some entry."""
    problems = []
    for entry in case.expect:
        hits = sum(matches(f, entry, case.code) for f in findings)
        if hits != entry.get("count", 1):
            problems.append(f"expected {entry.get('count', 1)} finding(s) like {entry}, found {hits}")
    for f in findings:
        if not any(matches(f, entry, case.code) for entry in case.expect):
            problems.append(f"unexpected finding {f}")
    return problems
