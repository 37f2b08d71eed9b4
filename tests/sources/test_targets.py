"""TARGET text -> a source (hfdoctor.sources.targets, .revisions): a revision is checked before
it reaches a path or a request, the offline cache is read only inside itself, `--cache`
writes only there, and what a user mistypes is said plainly, naming the target once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import TESTS, UPSTREAM
from hfdoctor.sources.base import SourceError
from hfdoctor.sources.revisions import check_revision, ref_name_problem

QWEN3 = UPSTREAM / "Qwen--Qwen3-8B"
AUDIT_RUN = TESTS / "audit_run.py"
PROPERTY = settings(max_examples=400, deadline=timedelta(seconds=2), database=None, derandomize=True)


def git_accepts(name: str) -> bool:
    done = subprocess.run(["git", "check-ref-format", "--allow-onelevel", name], capture_output=True)
    return done.returncode == 0


# --- the revision validator -----------------------------------------------------------------------------

revisions = st.one_of(
    st.text(alphabet="ab.-/_~^:?*[\\@{} \t\n", max_size=12),
    st.text(max_size=8),
    st.sampled_from(["main", "v1.0", "release/2024", "refs/pr/1", "refs/pr/x", "../x", "/etc", "a/../b", ".x",
                     "x.lock", "-rf", "@", "a@{1}", "a//b", "a/", "x.", "0" * 40, "f" * 64]),
)


@PROPERTY
@given(revisions)
def test_a_revision_is_accepted_only_when_it_stays_below_a_folder(revision):
    try:
        accepted = check_revision(revision)
    except SourceError as err:
        assert str(err).startswith("revision") or "not text" in str(err)
        return
    assert accepted == revision
    parts = revision.split("/")
    assert not revision.startswith(("/", "-")) and ".." not in parts and "." not in parts and "" not in parts
    assert os.path.normpath(os.path.join("/cache/refs", revision)).startswith("/cache/refs/")


@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(st.text(alphabet="ab.-/_~^:?*[\\@{} ", min_size=1, max_size=10).filter(lambda s: not s.startswith("-")))
def test_branch_names_are_judged_as_git_judges_them(name):
    assert (ref_name_problem(name) is None) == git_accepts(name), name


# --- the offline cache ----------------------------------------------------------------------------------


def audited_check(target: str, env: dict, log: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    full = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env}
    proc = subprocess.run([sys.executable, str(AUDIT_RUN), str(log), "--", "check", target, *args, "--format", "json"],
                          capture_output=True, text=True, env=full, timeout=240, cwd=log.parent)
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, events


@pytest.fixture
def offline_cache(tmp_path):
    """An empty HF cache, and beside it a complete model folder and a secret file."""
    cache = tmp_path / "hf-cache"
    (cache / "models--acme--m" / "refs").mkdir(parents=True)
    (cache / "models--acme--m" / "snapshots").mkdir()  # as in any cache that holds a snapshot
    shutil.copytree(QWEN3, tmp_path / "outside-model")
    (tmp_path / "secret").write_text("1234567890abcdef-secret-token\n")
    return cache


@pytest.mark.parametrize("revision", ["../../../outside-model", "../../../secret", "{tmp}/outside-model",
                                      "refs/../../../../outside-model"])
def test_an_offline_revision_never_reads_outside_the_cache(offline_cache, tmp_path, revision):
    revision = revision.format(tmp=tmp_path)
    proc, events = audited_check(f"acme/m@{revision}", {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(offline_cache)},
                                 tmp_path / "audit.log")
    assert proc.returncode == 2, proc.stdout[-2000:]
    error = json.loads(proc.stdout)["error"]
    assert "is not a commit id, a branch or tag name, or refs/pr/N" in error
    assert "secret-token" not in proc.stdout + proc.stderr
    for event in events:
        if event["event"] == "open-read" and Path(event["args"][0]).is_absolute():
            assert not Path(event["args"][0]).resolve().is_relative_to(tmp_path.resolve()), event
        assert event["event"] not in ("open-write", "os.mkdir") or event["args"][0] == os.devnull, event


def test_the_cache_is_not_an_oracle_for_what_exists_outside(offline_cache, tmp_path):
    """The same answer whether the path a revision names exists outside the cache or not."""
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(offline_cache)}
    answers = set()
    for name in ("outside-model", "no-such-folder"):
        proc = subprocess.run([sys.executable, "-m", "hfdoctor", "check", f"acme/m@../../../{name}", "--format",
                               "json"], capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
        answers.add((proc.returncode, json.loads(proc.stdout)["error"].replace(name, "NAME")))
    assert len(answers) == 1, answers


def test_a_ref_file_that_is_a_link_or_not_a_commit_is_not_followed(offline_cache, tmp_path):
    refs = offline_cache / "models--acme--m" / "refs"
    (refs / "main").symlink_to(tmp_path / "secret")
    (refs / "dev").write_text("../../../../outside-model\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(offline_cache)}
    for target in ("acme/m", "acme/m@dev"):
        proc = subprocess.run([sys.executable, "-m", "hfdoctor", "check", target, "--format", "json"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 2 and "secret-token" not in proc.stdout + proc.stderr
        assert "not in the local HF cache" in proc.stdout or "does not hold a commit id" in proc.stdout


def test_a_revision_given_with_the_option_is_checked_too(offline_cache, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(offline_cache)}
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", "check", "acme/m", "--revision", "../../../outside-model",
                           "--format", "json"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "is not a commit id" in json.loads(proc.stdout)["error"]


# --- what a user mistypes ----------------------------------------------------------------------------------


def test_a_mistyped_local_path_says_there_is_no_such_folder(tmp_path):
    """`mymodels/llama-ft` (no mymodels/ here) reads as ORG/NAME: offline it is not cached,
    online the Hub may be unreachable; either way the user learns no such folder exists."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", "check", "mymodels/llama-ft"], capture_output=True,
                          text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "no such folder here" in out, out
    assert out.count("mymodels/llama-ft") == 1, out  # named once


def test_an_unreachable_hub_names_the_target_once(tmp_path):
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"}
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", "check", "Qwen/Qwen3-8B", "--timeout", "5"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and "cannot reach the Hub" in out and "no such folder here" in out, out
    assert out.count("Qwen/Qwen3-8B") == 1, out


def test_a_missing_folder_names_the_target_once(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", "check", "./no/such/dir"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and "no such directory" in out and out.count("no/such/dir") == 1, out


# --- one GGUF file as TARGET ------------------------------------------------------------------------------


def test_check_takes_one_gguf_file_and_reads_only_it(tmp_path):
    """As `probe` does: the file alone is the repository (a Downloads folder beside it is not read)."""
    from gguf_util import write_gguf

    folder = tmp_path / "downloads"
    folder.mkdir()
    write_gguf(folder / "Qwen3-8B-Q4_K_M.gguf", QWEN3, (QWEN3 / "chat_template.jinja").read_text())
    (folder / "config.json").write_text("{not json")  # a neighbour: not part of the target
    (folder / "other.gguf").write_bytes(b"GGUF broken")
    log = tmp_path / "audit.log"
    proc, events = audited_check(str(folder / "Qwen3-8B-Q4_K_M.gguf"), {"HF_HUB_OFFLINE": "1"}, log)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["lineage"]["family"] == "qwen3"
    assert not [f for f in report["findings"] if f["file"] in ("config.json", "other.gguf")], report["findings"]
    read = {Path(e["args"][0]).name for e in events if e["event"] == "open-read" and str(e["args"][0]).startswith(
        str(folder))}
    assert read <= {"Qwen3-8B-Q4_K_M.gguf"}, read
