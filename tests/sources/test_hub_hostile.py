"""A hostile Hub endpoint (HF_ENDPOINT names mirrors): `check ORG/NAME --cache` writes nothing outside
the cache, whatever the server names, and reads the server's listing within hfdoctor's bounds.

huggingface_hub's own download names the cached blob after the HEAD reply's ETag and folders after
X-Repo-Commit: an absolute ETag wrote a file anywhere the user can write (a `.pth` in site-packages
runs at the next Python start), and a 404 carrying `X-Repo-Commit: /abs` made folders and empty files
anywhere. The command line runs under the audit hook (tests/audit_run.py), which records every file
opened for writing and every folder made, in a child process whose peak memory it records too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TESTS, UPSTREAM
from hub_server import FakeHub, HubRepo, folder_files

AUDIT_RUN = TESTS / "audit_run.py"
WRITES = ("open-write", "os.mkdir", "os.rename", "os.symlink", "os.link", "os.remove", "os.rmdir", "os.truncate",
          "os.chmod", "shutil.copyfile", "shutil.move")
GB = 1 << 30


@pytest.fixture
def hub():
    server = FakeHub().start()
    yield server
    server.stop()


def qwen(**hostile) -> HubRepo:
    return HubRepo(folder_files(UPSTREAM / "Qwen--Qwen3-8B"), **hostile)


def audited(hub: FakeHub, tmp_path: Path, *args: str, cache: Path | None = None) -> tuple[subprocess.CompletedProcess, list]:
    log = tmp_path / "audit.log"
    log.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    env.update({"HF_ENDPOINT": hub.endpoint, "HF_HUB_CACHE": str(cache or tmp_path / "cache"),
                "HF_HOME": str(tmp_path / "hf-home"), "PYTHONDONTWRITEBYTECODE": "1"})
    proc = subprocess.run([sys.executable, str(AUDIT_RUN), str(log), "--", "check", *args, "--format", "json"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=240)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, events


def writes_outside(events: list, allowed: Path) -> list:
    """Every write-like event whose path is not below `allowed` (nor /dev/null); making the folders
    above `allowed` (the cache's own path) is allowed."""
    allowed = allowed.resolve()
    outside = []
    for event in events:
        kind, args = event["event"], event["args"]
        if kind not in WRITES or not args:
            continue
        written = args[1:2] if kind in ("os.symlink", "os.link") else args[:2] if kind == "os.rename" else args[:1]
        for path in (a for a in written if isinstance(a, str)):
            real = Path(os.path.realpath(path))
            if path == os.devnull or real.is_relative_to(allowed) or kind == "os.mkdir" and allowed.is_relative_to(real):
                continue
            outside.append(event)
    return outside


def peak(events: list) -> int:
    return max((e["bytes"] for e in events if e["event"] == "peak-rss"), default=0)


@pytest.mark.parametrize("etag", ["ABS", "../../../../escaped-etag"])
def test_an_etag_naming_a_path_writes_nothing_outside_the_cache(hub, tmp_path, etag):
    victim = tmp_path / "site-packages" / "evil.pth"
    victim.parent.mkdir()
    hub.repos["acme/etag"] = qwen(etag=str(victim) if etag == "ABS" else etag)
    cache = tmp_path / "deep" / "er" / "cache"
    proc, events = audited(hub, tmp_path, "acme/etag", "--cache", cache=cache)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not victim.exists() and not list(tmp_path.rglob("escaped-etag"))
    assert writes_outside(events, cache) == []
    # What was cached is named by hfdoctor (the bytes' own blob ids), and an offline check reads it.
    folder = cache / "models--acme--etag"
    blobs = sorted(p.name for p in (folder / "blobs").iterdir())
    assert blobs and all(len(name) in (40, 64) and set(name) <= set("0123456789abcdef") for name in blobs)
    offline = subprocess.run([sys.executable, "-m", "hfdoctor", "check", "acme/etag", "--format", "json"],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)})
    assert offline.returncode in (0, 1) and json.loads(offline.stdout)["revision"]["from"].startswith("local HF cache")


def test_a_404_naming_an_absolute_commit_makes_no_folder_outside_the_cache(hub, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    hub.repos["acme/commit"] = qwen(missing_commit=str(elsewhere))
    cache = tmp_path / "cache"
    proc, events = audited(hub, tmp_path, "acme/commit", "--cache", cache=cache)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not elsewhere.exists()
    assert writes_outside(events, cache) == []
    commit = hub.repos["acme/commit"].commit
    # chat_template.json is not in Qwen3-8B: recorded as absent below the listing's commit
    assert (cache / "models--acme--commit" / ".no_exist" / commit / "chat_template.json").is_file()


def test_cache_never_writes_through_a_link_planted_in_the_cache(hub, tmp_path):
    """A cache folder whose snapshots/ is a link elsewhere (left by another tool, or planted): nothing
    is written through it."""
    hub.repos["acme/linked"] = qwen()
    cache = tmp_path / "cache"
    folder = cache / "models--acme--linked"
    folder.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (folder / "snapshots").symlink_to(target)
    proc, _ = audited(hub, tmp_path, "acme/linked", "--cache", cache=cache)
    assert proc.returncode == 2 and "is a symbolic link" in json.loads(proc.stdout)["error"]
    assert list(target.iterdir()) == []


def huge_listing(commit: str, files: int, entry: bytes = b'{"rfilename":"f%07d.json","size":2}') -> bytes:
    siblings = b",".join(entry % i for i in range(files)) if b"%" in entry else b",".join([entry] * files)
    return b'{"id":"acme/huge","sha":"%s","siblings":[%s]}' % (commit.encode(), siblings)


@pytest.mark.parametrize("files,entry,words", [
    (2_500_000, b'{"rfilename":"f%07d.json","size":2}', "larger than the 64 MB"),  # 100 MB
    (250_000, b'{"rfilename":"f%07d.json","size":2}', "more than the 200,000"),
    (1_000_000, b"{}", "more than 800,000 objects"),  # 3 MB; 64 MB of them took 1.5 GB
])
def test_a_huge_listing_is_refused_within_the_bounds(hub, tmp_path, files, entry, words):
    repo = qwen()
    repo.info_body = huge_listing(repo.commit, files, entry)
    hub.repos["acme/huge"] = repo
    proc, events = audited(hub, tmp_path, "acme/huge")
    assert proc.returncode == 2 and words in json.loads(proc.stdout)["error"], proc.stdout[-2000:]
    assert 0 < peak(events) < GB, peak(events)
    assert writes_outside(events, tmp_path / "cache") == []


def test_header_windows_of_many_shards_are_not_all_kept(hub):
    """4,000 weight shards: each header window (256 KB) was kept for the whole check (1 GB)."""
    from hfdoctor.sources.hub import HEAD_WINDOW, HEAD_WINDOWS_KEPT, HubSource

    shards = {f"model-{i:05d}.safetensors": b"\0" * (HEAD_WINDOW + 8) for i in range(40)}
    hub.repos["acme/shards"] = HubRepo({**folder_files(UPSTREAM / "Qwen--Qwen3-8B"), **shards})
    source = HubSource("acme/shards", hub_endpoint=hub.endpoint)
    for name in shards:
        assert source.read_range(name, 0, 8) == b"\0" * 8
        assert source.read_range(name, 8, 16) == b"\0" * 16  # the same window serves the next read
    assert len(source._head) == HEAD_WINDOWS_KEPT
    assert source.requests == 1 + len(shards)  # the listing, then one window per shard


def test_a_repo_id_that_is_a_path_is_never_asked_for(hub):
    from hfdoctor.sources.base import SourceError
    from hfdoctor.sources.hub import HubSource

    for bad in ("../../api/models/x", "acme/x?blobs=false", "acme/x/../y", "/abs", "acme--x/y"):
        with pytest.raises(SourceError, match="not a Hub repo id"):
            HubSource(bad, hub_endpoint=hub.endpoint)
    assert hub.requests == []


def test_the_webhook_runner_reads_a_revision_through_the_same_bounded_listing(hub):
    """The webhook runner resolves a pushed revision to its commit with the listing check reads: a mirror's
    listing of 250,000 files is refused at once (HfApi.model_info read it whole)."""
    from hfdoctor.webhook.hub import HubCalls, HubRefused

    repo = qwen()
    repo.info_body = huge_listing(repo.commit, 250_000)
    hub.repos["acme/huge"] = repo
    calls = HubCalls(token="hf_test", endpoint=hub.endpoint, backoff_s=0.01)
    with pytest.raises(HubRefused, match="more than the 200,000"):
        calls.commit_of("acme/huge", "main", timeout=30)
    hub.repos["acme/fine"] = qwen()
    assert calls.commit_of("acme/fine", "main", timeout=30) == hub.repos["acme/fine"].commit
