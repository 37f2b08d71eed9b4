"""git's own files read as data (hfdoctor.sources.gitfiles): the index and the ignore rules, exact on
what git writes, and linear and bounded on what an attacker writes.

Properties: an index of any paths, in versions 2, 3 and 4, reads back as exactly those paths
(and as git itself lists them); any bytes read as an index give a set or None; the indexed
RuleSet answers as matching every rule one by one would. Hostile cases: a version 4 index
whose paths grow with every entry, a flood of ignore patterns, and 20,000 small files each
with its own .gitignore, all within a small fraction of the check's budget.
"""

from __future__ import annotations

import os
import struct
import subprocess
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hfdoctor.sources import gitfiles
from conftest import TESTS

PROPERTY = settings(max_examples=200, deadline=timedelta(seconds=5), database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _varint(value: int) -> bytes:
    """git's offset varint (varint.c encode_varint)."""
    out = [value & 127]
    value >>= 7
    while value:
        value -= 1
        out.append(128 | (value & 127))
        value >>= 7
    return bytes(reversed(out))


def index_bytes(paths: list[bytes], version: int = 2) -> bytes:
    """An index as git writes it (sha1, no extensions, no trailing checksum check needed)."""
    out = [b"DIRC", struct.pack(">II", version, len(paths))]
    previous = b""
    for path in paths:
        stat_part = struct.pack(">10I", 0, 0, 0, 0, 0, 0, 0o100644, 0, 0, 1) + b"\x11" * 20
        entry = stat_part + struct.pack(">H", min(len(path), 0xFFF))
        if version == 4:
            common = len(os.path.commonprefix([previous, path]))
            entry += _varint(len(previous) - common) + path[common:] + b"\0"
        else:
            entry += path
            entry += b"\0" * (8 - len(entry) % 8)
        out.append(entry)
        previous = path
    return b"".join(out) + b"\0" * 20


def write_index(tmp_path: Path, data: bytes) -> Path:
    git_dir = tmp_path / ".git"
    git_dir.mkdir(exist_ok=True)
    (git_dir / "index").write_bytes(data)
    return git_dir


path_parts = st.text(alphabet="ab.-_ é\u4e2d", min_size=1, max_size=6)
index_paths = st.lists(st.lists(path_parts, min_size=1, max_size=4).map("/".join), max_size=30, unique=True)


@PROPERTY
@given(index_paths, st.sampled_from([2, 3, 4]))
def test_an_index_of_any_paths_reads_back_as_those_paths(tmp_path_factory, paths, version):
    encoded = sorted(p.encode() for p in paths)
    git_dir = write_index(tmp_path_factory.mktemp("index"), index_bytes(encoded, version))
    assert gitfiles.tracked_paths(git_dir) == set(paths)
    wanted = set(paths[::2])
    assert gitfiles.tracked_paths(git_dir, wanted) == wanted


@PROPERTY
@given(st.binary(max_size=400), st.sampled_from([2, 3, 4]), st.integers(0, 2**32 - 1))
def test_any_bytes_as_an_index_give_a_set_or_none(tmp_path_factory, body, version, count):
    git_dir = write_index(tmp_path_factory.mktemp("index"), b"DIRC" + struct.pack(">II", version, count) + body)
    found = gitfiles.tracked_paths(git_dir)
    assert found is None or (isinstance(found, set) and all(len(p.encode("utf-8", "surrogateescape"))
                                                            <= gitfiles.MAX_PATH_BYTES for p in found))


def test_git_own_version_4_index_is_read_as_git_lists_it(tmp_path):
    repo = tmp_path / "repo"
    names = [f"dir{i % 7}/sub{i % 3}/file-{i}.json" for i in range(300)] + ["README.md", "café/é.txt"]
    for name in names:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("x")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "update-index", "--index-version", "4"], check=True)
    listed = subprocess.run(["git", "-C", str(repo), "-c", "core.quotePath=false", "ls-files", "-z"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    assert gitfiles.tracked_paths(repo / ".git") == set(filter(None, listed)) == set(names)


def test_a_version_4_index_whose_paths_grow_is_refused_in_one_pass(tmp_path):
    """Each entry keeps all of the previous path and adds a byte: 2 MB of index expand to
    terabytes of paths. The reader stops at the first path longer than git allows."""
    entry = b"\0" * 60 + struct.pack(">H", 1) + b"\x00" + b"a\0"
    count = 2 * 1024 * 1024 // len(entry)
    git_dir = write_index(tmp_path, b"DIRC" + struct.pack(">II", 4, count) + entry * count)
    tracemalloc.start()
    started = time.process_time()
    assert gitfiles.tracked_paths(git_dir) is None
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 64 * 1024 * 1024 and time.process_time() - started < 10


def test_a_version_4_index_of_long_paths_is_bounded_in_all(tmp_path):
    """Paths each as long as git allows, one byte changed per entry: at most
    MAX_EXPANDED_BYTES are ever built."""
    first = b"\0" * 60 + struct.pack(">H", 0xFFF) + b"\x00" + b"a" * 4000 + b"\0"
    entry = b"\0" * 60 + struct.pack(">H", 0xFFF) + b"\x01" + b"b\0"
    count = 200_000
    git_dir = write_index(tmp_path, b"DIRC" + struct.pack(">II", 4, count) + first + entry * (count - 1))
    tracemalloc.start()
    assert gitfiles.tracked_paths(git_dir) is None
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 2 * gitfiles.MAX_EXPANDED_BYTES + (16 << 20)


# --- ignore rules ---------------------------------------------------------------------------------------

globs = st.one_of(
    st.text(alphabet="ab*?[]!/\\.-", min_size=1, max_size=10),
    st.sampled_from(["a", "b", "*.a", "*b", "a/b", "/a", "b/", "**/a", "a/**", "*", "!a", "!*.a", "a*", "*.a/"]),
)
paths = st.lists(st.sampled_from(["a", "b", "a.a", "ab", "ba", "x.b"]), min_size=1, max_size=4).map("/".join)


def naive_last(rules: list[gitfiles.PathRule], rel: str, is_dir: bool) -> bool | None:
    verdict = None
    for rule in rules:
        if rule.matches(rel, is_dir):
            verdict = rule.value
    return verdict


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from(["", "a/", "a/b/", "b/"]), st.lists(globs, max_size=6)), max_size=4),
       st.lists(paths, min_size=1, max_size=8), st.booleans())
def test_the_indexed_rules_answer_as_every_rule_matched_in_turn(files, rels, is_dir):
    rules = [rule for base, lines in files for rule in gitfiles.ignore_rules("\n".join(lines), base)]
    indexed = gitfiles.RuleSet(rules)
    for rel in rels:
        assert indexed.last(rel, is_dir) == naive_last(rules, rel, is_dir), rel


def test_a_flood_of_ignore_patterns_over_many_files_is_unknown_within_bounds(tmp_path):
    """10,000 wildcard patterns over 20,000 files: 200 million matches. The reader gives up
    (unknown: the rule that asked says nothing) after its bounded count of matches."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".gitignore").write_text("".join(f"*x{i}y*\n" for i in range(10_000)))
    files = [f"d{i % 100}/f{i}.txt" for i in range(20_000)]  # listed: only ignore files are read
    started = time.process_time()
    assert gitfiles.committable(root, [".gitignore", *files]) is None
    assert time.process_time() - started < 20  # a hang detector: about 2 s on the test machine


def test_literal_and_suffix_patterns_over_many_files_are_answered(tmp_path):
    """The shape real ignore files have (names and `*.ext`), 9,000 of them over 20,000 files:
    dictionary lookups, answered exactly."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".gitignore").write_text("".join(f"name{i}\n*.e{i}\n" for i in range(4_500)) + "build/\n!keep.e7\n")
    files = [f"d{i % 100}/f{i}.txt" for i in range(20_000)] + ["d1/x.e7", "d1/keep.e7", "build/a", "d2/name9"]
    started = time.process_time()
    found = gitfiles.committable(root, [".gitignore", *files])
    assert time.process_time() - started < 20  # a hang detector: under a second on the test machine
    assert found == {".gitignore", "d1/keep.e7", *files[:20_000]}


def test_twenty_thousand_ignore_files_are_unknown_without_reading_past_the_bound(tmp_path):
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    files = [f"d{i}/.gitignore" for i in range(20_000)]
    for rel in files[:6_000]:  # more lines than MAX_RULES already
        (root / rel).parent.mkdir(parents=True)
        (root / rel).write_text("*.tmp\nbuild/\n")
    started = time.process_time()
    assert gitfiles.committable(root, files) is None
    assert time.process_time() - started < 20


def test_ignore_files_of_many_folders_are_each_applied_below_their_folder(tmp_path):
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    files = []
    for i in range(2_000):
        (root / f"d{i}").mkdir(parents=True)
        (root / f"d{i}" / ".gitignore").write_text(f"*.tmp\nonly{i}\n")
        files += [f"d{i}/.gitignore", f"d{i}/a.tmp", f"d{i}/only{i}", f"d{i}/only{i + 1}"]
    found = gitfiles.committable(root, files)
    own = {f"d{i}/only{i}" for i in range(2_000)}  # each folder's own name, ignored below it only
    assert found == {f for f in files if not f.endswith(".tmp") and f not in own}


def test_git_files_reached_through_a_link_that_leaves_are_not_read(tmp_path):
    """.git/info a link to another folder: its `exclude` is not read (nor is .git/config's
    directory followed anywhere else)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "exclude").write_text("*.json\n")
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "info").symlink_to(outside)
    assert gitfiles.committable(root, ["config.json"]) == {"config.json"}


@pytest.mark.parametrize("name", ["index", "config"])
def test_git_files_that_are_links_are_not_read(tmp_path, name):
    outside = tmp_path / "secret"
    outside.write_bytes(b"DIRC" + struct.pack(">II", 2, 0) if name == "index" else b"[filter \"lfs\"]\nclean = x\n")
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / name).symlink_to(outside)
    if name == "index":
        assert gitfiles.tracked_paths(root / ".git") is None
    else:
        assert gitfiles._read_limited(root / ".git" / "config", 1 << 20, root) is None


def test_check_of_a_work_tree_with_a_hostile_index_and_ignore_flood(tmp_path):
    """The whole command on a work tree holding both: a version 4 index whose paths grow and
    10,000 wildcard ignore patterns over 5,000 files. Under the audit hook: exit 0 or 1,
    nothing read outside the repository, nothing written, within 1 GB."""
    import json
    import shutil
    import sys

    from conftest import UPSTREAM

    repo = tmp_path / "repo"
    shutil.copytree(UPSTREAM / "Qwen--Qwen3-8B", repo)
    entry = b"\0" * 60 + struct.pack(">H", 1) + b"\x00" + b"a\0"
    count = 2 * 1024 * 1024 // len(entry)
    write_index(repo, b"DIRC" + struct.pack(">II", 4, count) + entry * count)
    (repo / ".gitignore").write_text("".join(f"*x{i}y*\n" for i in range(10_000)))
    for i in range(5_000):
        (repo / f"d{i % 50}").mkdir(exist_ok=True)
        (repo / f"d{i % 50}" / f"f{i}.txt").write_bytes(b"x")
    log = tmp_path / "audit.log"
    audit_run = TESTS / "audit_run.py"
    script = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
              "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(p.stdout)")
    proc = subprocess.run([sys.executable, "-c", script, sys.executable, str(audit_run), str(log), "--", "check",
                           str(repo), "--format", "json"], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    first, _, body = proc.stdout.partition("\n")
    code, peak_kb = map(int, first.split())
    assert code in (0, 1) and peak_kb < 1024 * 1024, (code, peak_kb, proc.stderr[-2000:])
    assert not json.loads(body).get("internal_errors")
    for line in log.read_text().splitlines():
        event = json.loads(line)
        assert event["event"] != "open-write" or event["args"][0] == os.devnull, event
        if event["event"] == "open-read" and str(event["args"][0]).startswith(str(tmp_path)):
            assert Path(event["args"][0]).resolve().is_relative_to(repo.resolve()), event
