"""A directory is read as regular files only, bounded, never blocking, never outside itself.

Each special file below is a case a pre-push hook met in the wild: it must end as a
finding naming the file, quickly, and nothing outside the repository is read (the
outside targets here are FIFOs: opening one would block the check until the test's
timeout, so a passing test proves they were never opened).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import UPSTREAM
from hfdoctor.repo import ModelRepo
from hfdoctor.sources.base import DEFAULT_READ_LIMIT, Unreadable
from hfdoctor.sources.local import LocalSource
from hfdoctor.knowledge.upstream import Upstream

QWEN3 = UPSTREAM / "Qwen--Qwen3-8B"
OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)


def check_cli(folder, timeout: float = 60) -> tuple[dict, subprocess.CompletedProcess]:
    """`hfdoctor check --format json` in a subprocess with a hard timeout (a hang fails the test)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HFDOCTOR_UPSTREAM": str(UPSTREAM)}
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", "check", str(folder), "--format", "json"],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout), proc


@pytest.fixture
def qwen(tmp_path):
    folder = tmp_path / "repo"
    shutil.copytree(QWEN3, folder)
    return folder


def findings_for(report: dict, file: str) -> list[dict]:
    return [f for f in report["findings"] if f["file"] == file]


def test_a_fifo_named_like_metadata_is_a_finding_not_a_hang(qwen):
    (qwen / "generation_config.json").unlink()
    os.mkfifo(qwen / "generation_config.json")
    report, proc = check_cli(qwen)
    found = findings_for(report, "generation_config.json")
    assert [f["rule"] for f in found] == ["file-unreadable"] and "FIFO" in found[0]["message"]
    assert proc.returncode == 1


@pytest.mark.parametrize("name,target", [
    ("config.json", "/dev/zero"),
    ("tokenizer.json", "/dev/urandom"),
    ("README.md", "/etc/passwd"),
])
def test_a_link_leaving_the_repository_is_reported_and_never_read(qwen, name, target):
    (qwen / name).unlink()
    os.symlink(target, qwen / name)
    report, proc = check_cli(qwen)
    found = findings_for(report, name)
    assert [f["rule"] for f in found] == ["symlink-outside-repo"], found
    assert target in found[0]["message"] and found[0]["severity"] == "error"
    assert "root:" not in proc.stdout  # /etc/passwd's content appears nowhere
    assert proc.returncode == 1


def test_outside_targets_are_never_opened(qwen, tmp_path):
    """The targets are FIFOs: had hfdoctor opened one, the check would block until the timeout."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("README.md", "tokenizer_config.json", "model.safetensors", "pytorch_model.bin"):
        os.mkfifo(outside / name)
        if (qwen / name).exists():
            (qwen / name).unlink()
        os.symlink(outside / name, qwen / name)
    report, proc = check_cli(qwen, timeout=60)
    rules = {f["file"]: f["rule"] for f in report["findings"] if f["rule"] == "symlink-outside-repo"}
    assert rules == {name: "symlink-outside-repo" for name in
                     ("README.md", "tokenizer_config.json", "model.safetensors", "pytorch_model.bin")}


def test_links_inside_the_repository_are_followed(qwen):
    (qwen / "docs").mkdir()
    (qwen / "README.md").rename(qwen / "docs" / "card.md")
    os.symlink("docs/card.md", qwen / "README.md")
    repo = ModelRepo(qwen, upstream=OFFLINE)
    assert repo.card is not None and repo.card.metadata and not repo.outside_links


def test_a_link_to_a_fifo_inside_the_repository_is_not_opened(qwen):
    os.mkfifo(qwen / "pipe")
    (qwen / "config.json").unlink()
    os.symlink("pipe", qwen / "config.json")
    report, _ = check_cli(qwen)
    found = findings_for(report, "config.json")
    assert found and found[0]["rule"] == "file-unreadable" and "FIFO" in found[0]["message"]


def test_metadata_above_the_read_limit_is_refused_before_reading(qwen):
    """A sparse 65 MB tokenizer_config.json: refused from its size, no byte read."""
    with open(qwen / "tokenizer_config.json", "r+b") as f:
        f.truncate(DEFAULT_READ_LIMIT + 1)
    source = LocalSource(qwen)
    with pytest.raises(Unreadable, match="more than the"):
        source.read("tokenizer_config.json")
    report, _ = check_cli(qwen)
    found = findings_for(report, "tokenizer_config.json")
    assert found[0]["rule"] == "file-unreadable" and "67,108,865 bytes" in found[0]["message"]


def test_a_cache_snapshot_reads_through_its_blobs(tmp_path):
    """huggingface_hub's layout: snapshots/REV/file -> ../../blobs/HASH."""
    model = tmp_path / "models--Qwen--Qwen3-8B"
    blobs, snapshot = model / "blobs", model / "snapshots" / "b968826"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for path in sorted(QWEN3.iterdir()):
        shutil.copy(path, blobs / path.name)
        os.symlink(os.path.relpath(blobs / path.name, snapshot), snapshot / path.name)
    repo = ModelRepo(snapshot, upstream=OFFLINE)
    assert not repo.outside_links and repo.config["model_type"] == "qwen3" and repo.chat_template is not None


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json", "chat_template.jinja"])
def test_a_metadata_file_that_is_a_directory_is_a_finding(qwen, name):
    """A folder where the file should be (an unpacked archive, a bad copy): file-unreadable
    names it, as it does a FIFO, instead of the check finding nothing."""
    path = qwen / name
    path.unlink()
    path.mkdir()
    (path / "inside.txt").write_text("x")
    report, proc = check_cli(qwen)
    messages = [f["message"] for f in findings_for(report, name) if f["rule"] == "file-unreadable"]
    assert messages == [f"{name} is a directory, not a file"], report["findings"]
    assert proc.returncode == 1
