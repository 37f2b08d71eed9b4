"""`hfdoctor fix ORG/NAME --pr`: the patch opened as a Hub pull request through huggingface_hub's
real client, against the Hub the tests start on 127.0.0.1 (tests/hub_server.py): exact bytes,
a clean check of refs/pr/1, no duplicate, no stale parent, exit 2 without a token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, UPSTREAM
from hub_server import TOKEN, FakeHub, HubRepo, folder_files

SEED = ROOT / "fixtures" / "seed-incident"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    repos = {
        "acme/seed-incident": HubRepo(folder_files(SEED)),
        "Qwen/Qwen3-8B": HubRepo(folder_files(UPSTREAM / "Qwen--Qwen3-8B")),
        "acme/read-only": HubRepo(folder_files(SEED), read_only=True),
    }
    server = FakeHub(repos).start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored login
    yield server
    server.stop()


def cli(*args: str, token: str | None = TOKEN, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    if token is not None:
        env["HF_TOKEN"] = token
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert TOKEN not in proc.stdout + proc.stderr  # never printed
    return proc


def local_fix(tmp_path: Path) -> dict[str, bytes]:
    """What `fix` writes on a directory copy of the same files: the PR must carry exactly this."""
    import shutil

    folder = tmp_path / "local"
    shutil.copytree(SEED, folder)
    before = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    subprocess.run([sys.executable, "-m", "hfdoctor", "fix", str(folder)], capture_output=True, check=False)
    after = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    return {rel: data for rel, data in after.items() if before.get(rel) != data}


def test_one_pull_request_with_the_exact_bytes(hub, tmp_path):
    proc = cli("fix", "acme/seed-incident", "--pr")
    assert proc.returncode in (0, 1), proc.stderr
    repo = hub.repos["acme/seed-incident"]
    assert [d["num"] for d in repo.discussions] == [1]
    pr = repo.discussions[0]
    assert f"{hub.endpoint}/acme/seed-incident/discussions/1" in proc.stdout
    assert pr["title"].startswith("hfdoctor: fix ") and "missing-chat-template" in pr["title"]
    assert "base-model-mismatch" in pr["title"]
    # The description: each finding, the diff, and what was left alone.
    assert "## What it fixes" in pr["description"] and "```diff" in pr["description"]
    assert "TPL001 missing-chat-template" in pr["description"]
    # Exactly the files and bytes `fix` writes on a local copy; every other file as it was.
    expected = local_fix(tmp_path)
    files = repo.history[repo.refs["refs/pr/1"]]
    assert pr["files"] == sorted(expected)
    assert {rel: files[rel] for rel in expected} == expected
    untouched = folder_files(SEED)
    assert all(files[rel] == data for rel, data in untouched.items() if rel not in expected)
    assert repo.commit == repo.commits[0]  # main is untouched


def test_the_pull_request_revision_checks_clean_and_a_second_run_opens_nothing(hub):
    assert cli("fix", "acme/seed-incident", "--pr").returncode in (0, 1)
    report = json.loads(cli("check", "acme/seed-incident@refs/pr/1", "--format", "json").stdout)
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    assert report["revision"]["requested"] == "refs/pr/1"
    again = cli("fix", "acme/seed-incident", "--pr")
    assert again.returncode in (0, 1) and "already open" in again.stdout
    assert len(hub.repos["acme/seed-incident"].discussions) == 1


def test_a_commit_that_lands_meanwhile_is_never_a_stale_parent(hub, monkeypatch):
    """The repository moves on between the check and the commit: the patch is planned again
    on the new head (the Hub would refuse a stale parent with 412)."""
    from hfdoctor.fix import hub_pr

    repo = hub.repos["acme/seed-incident"]
    first_head = repo.commit
    real_plan = hub_pr.plan_on_hub
    calls = []

    def plan_then_push(*args, **kwargs):
        planned = real_plan(*args, **kwargs)
        calls.append(planned[0].commit)
        if len(calls) == 1:  # someone edits the card right after our first check
            files = dict(repo.files)
            files["README.md"] = files["README.md"].replace(b"# ", b"# Edited. ", 1)
            hub.push("acme/seed-incident", files)
        return planned

    monkeypatch.setattr(hub_pr, "plan_on_hub", plan_then_push)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    outcome = hub_pr.open_pull_request("acme/seed-incident", token=TOKEN)
    assert outcome.status == "opened" and len(calls) == 2 and calls[0] == first_head
    assert outcome.commit == repo.commit != first_head
    files = repo.history[repo.refs["refs/pr/1"]]
    assert b"# Edited. " in files["README.md"]  # the patch sits on the new head, not the old one


def test_no_token_read_only_and_dry_run(hub):
    proc = cli("fix", "acme/seed-incident", "--pr", token=None)
    assert proc.returncode == 2 and "HF_TOKEN" in proc.stderr
    denied = cli("fix", "acme/read-only", "--pr")
    assert denied.returncode == 2 and "403" in denied.stderr
    dry = cli("fix", "acme/seed-incident", "--pr", "--dry-run", token=None)
    assert dry.returncode in (0, 1) and "would open" in dry.stdout and "```diff" in dry.stdout
    diff = cli("fix", "acme/seed-incident", "--diff", token=None)
    assert diff.stdout.startswith("--- a/") and "+++ b/README.md" in diff.stdout
    assert all(not repo.discussions for repo in hub.repos.values())


def test_a_catalog_gives_one_line_per_repository(hub, tmp_path):
    catalog = tmp_path / "catalog.txt"
    catalog.write_text("acme/seed-incident\nQwen/Qwen3-8B\nacme/missing\n")
    proc = cli("fix", "--pr", "--from", str(catalog), "--jobs", "2", "--dry-run", token=None)
    assert proc.returncode == 2  # acme/missing cannot be read
    lines = proc.stdout.strip().splitlines()
    assert any(line.startswith("acme/seed-incident@") and "would open" in line for line in lines)
    assert any(line.startswith("Qwen/Qwen3-8B@") and "nothing to fix" in line for line in lines)
    assert "acme/missing" in proc.stderr


def test_a_listed_name_that_leaves_the_folder_is_never_written(tmp_path):
    """A Hub listing is remote data: `../x` must not become a file outside the scratch folder."""
    from hfdoctor.fix.hub_pr import snapshot
    from hfdoctor.sources.base import Entry

    class Listing:
        def entries(self):
            return {rel: Entry(rel, "file", size=3) for rel in ("../escaped.json", "/abs.json", "ok.json")}

        def read(self, rel, limit):
            return b"{}\n"

    into = tmp_path / "scratch" / "repo"
    into.mkdir(parents=True)
    snapshot(Listing(), into)
    assert sorted(p.name for p in tmp_path.rglob("*.json")) == ["ok.json"]
