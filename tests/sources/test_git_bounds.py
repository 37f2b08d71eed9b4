"""What a commit's blobs may cost to hold: the prefixes read of plain blobs are kept for the reads that
follow (a header in several steps), but not those of every blob (5.6 MB of .git held 1.16 GB that way)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hfdoctor.sources import git as git_source


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main",
                           *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_the_prefixes_kept_are_bounded_and_still_serve_the_next_read(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    for i in range(12):  # 2 MB each, a few KB in git
        (repo / f"shard-{i:02d}.bin").write_bytes(bytes([i]) * (2 << 20))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "shards")
    monkeypatch.setattr(git_source, "MAX_KEPT_PREFIX_BYTES", 3 << 20)
    source = git_source.GitSource(repo, "HEAD")
    calls = []
    original = subprocess.Popen

    def counted(*args, **kwargs):
        if "cat-file" in args[0] and "blob" in args[0]:
            calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", counted)
    for i in range(12):
        name = f"shard-{i:02d}.bin"
        assert source.read_range(name, 0, 8) == bytes([i]) * 8
        assert source.read_range(name, 100, 8) == bytes([i]) * 8  # the kept prefix: no second git
        kept = sum(len(prefix) for prefix in source._prefixes.values())
        assert kept <= 3 << 20, kept
    assert len(calls) == 12
