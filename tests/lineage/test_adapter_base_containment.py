"""An adapter's base model is read from the local Hugging Face cache (or an --upstream folder) only
inside it: a link there that leads outside is not followed, the cache's refs/main is read bounded and
used only when it holds a commit id, and a base named like a path names no folder at all.

Before, the outside file's content (its vocab_size) appeared in the report, and a refs/main linked to
/dev/zero was read without end. The command line runs under the audit hook (tests/audit_run.py),
which records every file opened.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TESTS

AUDIT_RUN = TESTS / "audit_run.py"
FOLDERS = TESTS / "corpus" / "adapters" / "folders"
MISTRAL_CKPT = FOLDERS / "syGOAT__Mistral-v0.2-Translator-bf16__checkpoint-500"
COMMIT = "a" * 40
SECRET_VOCAB = 987654  # only the outside file holds this number


def adapter(tmp_path: Path, base: str) -> Path:
    folder = tmp_path / "adapter"
    shutil.copytree(MISTRAL_CKPT, folder)
    config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder


def secret(tmp_path: Path) -> Path:
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "config.json").write_text(json.dumps({"model_type": "mistral", "vocab_size": SECRET_VOCAB,
                                                     "eos_token_id": 31337}))
    return outside / "config.json"


def cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def audited_check(tmp_path: Path, folder: Path, cache: Path, *args: str) -> tuple[subprocess.CompletedProcess, list]:
    log = tmp_path / "audit.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("HFDOCTOR_UPSTREAM", None)
    proc = subprocess.run([sys.executable, str(AUDIT_RUN), str(log), "--", "check", str(folder), *args,
                           "--format", "json"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=240,
                          preexec_fn=cap_memory)
    assert proc.returncode in (0, 1), (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, events


def reads_of(events: list, path: Path) -> list:
    return [e for e in events if e["event"] == "open-read" and Path(str(e["args"][0])).resolve() == path.resolve()]


def cache_with(tmp_path: Path, repo_id: str, link_to: Path | None = None, ref: bytes | Path = COMMIT.encode()) -> Path:
    cache = tmp_path / "cache"
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    (folder / "snapshots" / COMMIT).mkdir(parents=True)
    (folder / "refs").mkdir()
    if isinstance(ref, Path):
        (folder / "refs" / "main").symlink_to(ref)
    else:
        (folder / "refs" / "main").write_bytes(ref)
    if link_to is not None:
        (folder / "snapshots" / COMMIT / "config.json").symlink_to(link_to)
    return cache


def test_a_cache_link_leading_outside_is_not_followed(tmp_path):
    outside = secret(tmp_path)
    cache = cache_with(tmp_path, "acme/base", link_to=outside)
    proc, events = audited_check(tmp_path, adapter(tmp_path, "acme/base"), cache)
    assert str(SECRET_VOCAB) not in proc.stdout and "31337" not in proc.stdout
    assert reads_of(events, outside) == []


def test_a_link_into_the_models_own_blobs_is_followed(tmp_path):
    """What huggingface_hub writes: the snapshot's file links into the model folder's blobs/."""
    from hfdoctor.knowledge.upstream import Upstream, read_file

    cache = cache_with(tmp_path, "acme/base")
    blobs = cache / "models--acme--base" / "blobs"
    blobs.mkdir()
    (blobs / "b").write_text('{"vocab_size": 32000}')
    (cache / "models--acme--base" / "snapshots" / COMMIT / "config.json").symlink_to("../../blobs/b")
    os.environ["HF_HUB_CACHE"], before = str(cache), os.environ.get("HF_HUB_CACHE")
    try:
        found = read_file(Upstream((), use_cache=True, use_hub=False), "acme/base", "config.json")
    finally:
        os.environ.pop("HF_HUB_CACHE") if before is None else os.environ.__setitem__("HF_HUB_CACHE", before)
    assert found is not None and json.loads(found[1]) == {"vocab_size": 32000}


@pytest.mark.parametrize("ref", ["climbs", "dev-zero"])
def test_refs_main_is_read_bounded_and_only_as_a_commit_id(tmp_path, ref):
    """refs/main holding `../../../secret` joined the snapshot path outside the cache; a refs/main
    linked to /dev/zero was read without end."""
    if ref == "dev-zero" and not os.path.exists("/dev/zero"):
        pytest.skip("needs /dev/zero")
    outside = secret(tmp_path)
    climb = b"../../../secret" if ref == "climbs" else Path("/dev/zero")
    cache = cache_with(tmp_path, "acme/base", ref=climb)
    proc, events = audited_check(tmp_path, adapter(tmp_path, "acme/base"), cache)
    assert str(SECRET_VOCAB) not in proc.stdout
    assert reads_of(events, outside) == []


@pytest.mark.parametrize("name", ["..", ".", "acme/..", "../x", "acme/x/y"])
def test_a_name_that_is_no_repo_id_names_no_upstream_folder(tmp_path, name):
    """An upstream folder holds `<org>--<name>/` folders: the name `..` made DIR/../config.json."""
    from hfdoctor.knowledge.upstream import Upstream, read_file

    upstream = tmp_path / "upstream" / "inner"
    upstream.mkdir(parents=True)
    (tmp_path / "upstream" / "config.json").write_text('{"vocab_size": 1}')
    (tmp_path / "config.json").write_text('{"vocab_size": 2}')
    assert read_file(Upstream((upstream,), use_cache=False, use_hub=False), name, "config.json") is None


def test_an_upstream_folder_link_leading_outside_is_not_followed(tmp_path):
    outside = secret(tmp_path)
    upstream = tmp_path / "upstream"
    (upstream / "acme--base").mkdir(parents=True)
    (upstream / "acme--base" / "config.json").symlink_to(outside)
    proc, events = audited_check(tmp_path, adapter(tmp_path, "acme/base"), tmp_path / "cache", "--upstream",
                                 str(upstream))
    assert str(SECRET_VOCAB) not in proc.stdout
    assert reads_of(events, outside) == []
