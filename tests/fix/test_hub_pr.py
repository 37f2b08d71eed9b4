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


# --- a hostile repository: what the Hub renders and what the terminal shows stays data -----------

# Where a repository controls text: its card (a finding's message and the diff's context lines),
# a token string (a finding left alone) and a template's file name (a finding's file).
HOSTILE = ("\n::error::x \x1b[31mred\x1b]8;;http://evil\x07link\x1b]8;;\x07 \rover \u202eevil [/] [link=http://x]l[/link]"
           " www.example.com.pkl <img src=x onerror=alert(1)> ``tick`` @someone [a](http://x) <https://x.example>")
TEMPLATE_NAME = ("additional_chat_templates/\n::error::x\x1b[31m [link=https:x]www.example.com.pkl "
                 "<img src=x onerror=alert(1)> `tick` @someone.jinja")
# Lines right after the card's front matter: context lines of the base_model fix's hunk. A line of
# four backticks closes a ``` fence (indented by the diff's one space), and ` ::error::x` is a
# workflow command to GitHub's runner.
CONTEXT = "````\n::error::ctx <img src=x onerror=alert(1)> www.example.com.pkl\n"


def hostile_files() -> dict[str, bytes]:
    files = {rel: data if isinstance(data, bytes) else data.read_bytes() for rel, data in folder_files(SEED).items()}
    card = files["README.md"].decode()
    card = card.replace("base_model: meta-llama/Meta-Llama-3.1-8B",
                        "base_model: " + json.dumps("meta-llama/Meta-Llama-3.1-8B" + HOSTILE))
    card = card.replace("---\n\n# broken-model", "---\n" + CONTEXT + "\n# broken-model")
    files["README.md"] = (card + "\n" + HOSTILE + "\n").encode()
    config = json.loads(files["tokenizer_config.json"])
    config["eos_token"] = "<|im_end|>" + HOSTILE
    files["tokenizer_config.json"] = json.dumps(config).encode()
    files[TEMPLATE_NAME] = b"{{ broken {% if %}"
    return files


@pytest.fixture
def hostile_hub(hub):
    hub.repos["acme/hostile"] = HubRepo(hostile_files())
    return hub


def test_a_hostile_repository_opens_an_inert_pull_request(hostile_hub):
    from inert_checks import MARKDOWN, RAW, assert_inert, assert_markdown_inert

    proc = cli("fix", "acme/hostile", "--pr")
    assert proc.returncode in (0, 1), proc.stderr
    assert_inert(proc.stdout)
    assert_inert(proc.stderr)
    [pr] = hostile_hub.repos["acme/hostile"].discussions
    description = pr["description"]
    assert not RAW & set(description + pr["title"])
    # Outside text only in code spans (no link, autolink, image or HTML), and no mention.
    codes = assert_markdown_inert(description)
    tokens = MARKDOWN.parse(description)
    texts = [child.content for t in tokens for child in t.children or [] if child.type == "text"]
    assert not any("@" in text or "[" in text for text in texts), texts
    # The hostile text reached it, shown visibly: the template's file name, the card's base_model, the token.
    assert any("\\x1b[31m [link=https:x]www.example.com.pkl <img src=x onerror=alert(1)> `tick`" in c for c in codes)
    assert any("Meta-Llama-3.1-8B\\n::error::x \\x1b[31mred" in c for c in codes)
    assert sum("<|im_end|>\\n::error::x" in c for c in codes) >= 1
    # One fenced diff that no line of the repository closed: the card's ```` line and its
    # ::error:: context line are inside it.
    [fence] = [t for t in tokens if t.type == "fence"]
    assert fence.info == "diff" and "\n+base_model: \"Qwen/Qwen3-8B\"\n" in fence.content
    assert fence.content.endswith("\n ---\n ````\n ::error::ctx <img src=x onerror=alert(1)> www.example.com.pkl\n")


def test_a_hostile_repository_prints_inert_lines(hostile_hub):
    from inert_checks import assert_inert

    dry = cli("fix", "acme/hostile", "--pr", "--dry-run", token=None)
    assert dry.returncode in (0, 1), dry.stderr
    assert_inert(dry.stdout)
    assert_inert(dry.stderr)
    assert "\\x1b[31m [link=https:x]www.example.com.pkl" in dry.stdout and "./ ::error::ctx" in dry.stdout
    # A failure line names the target as given, and the Hub's reply: both inert.
    failed = cli("fix", "acme/nope\x1b[31m\n::error::x", "--pr", "--dry-run", token=None)
    assert failed.returncode == 2 and "acme/nope\\x1b[31m\\n::error::x" in failed.stderr
    assert_inert(failed.stdout)
    assert_inert(failed.stderr)
    as_json = cli("fix", "acme/hostile", "--pr", "--dry-run", "--format", "json", token=None)
    assert json.loads(as_json.stdout)["target"] == "acme/hostile"


def test_the_diff_is_byte_exact_and_under_github_actions_runs_no_command(hostile_hub, tmp_path, monkeypatch):
    from inert_checks import runner_commands

    plain = cli("fix", "acme/hostile", "--diff", token=None)
    assert plain.returncode in (0, 1), plain.stderr
    assert plain.stdout.startswith("--- a/README.md") and "\n ::error::ctx <img" in plain.stdout
    assert "error" in runner_commands(plain.stdout)  # what the wrapping is for
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    wrapped = cli("fix", "acme/hostile", "--diff", token=None)
    first, _, rest = wrapped.stdout.partition("\n")
    token = first.removeprefix("::stop-commands::")
    assert first != token and len(token) >= 32
    assert rest == plain.stdout + f"::{token}::\n" and token.lower() not in plain.stdout.lower()
    assert runner_commands(wrapped.stdout) == ["stop-commands"]
    assert runner_commands(wrapped.stderr) == []
    # Both apply with git apply and give what `fix --pr` would commit.
    for name, patch in (("plain", plain.stdout), ("wrapped", wrapped.stdout)):
        folder = tmp_path / name
        for rel, data in hostile_files().items():
            if rel.endswith(".md") or rel.endswith(".json"):
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_bytes(data)
        applied = subprocess.run(["git", "apply", "-p1", "-"], input=patch.encode(), cwd=folder, capture_output=True)
        assert applied.returncode == 0, applied.stderr
        card = (folder / "README.md").read_bytes()
        assert b'base_model: "Qwen/Qwen3-8B"\n---\n````\n::error::ctx' in card
