"""Hub repositories, read through the real huggingface_hub client against a Hub on 127.0.0.1.

tests/hub_server.py serves repos built from ../shared/upstream and the seed incident (with
its full-size sparse Llama shards): model info, resolve with HTTP ranges, LFS redirects to
a second "CDN" server, the Hub's error codes, and a repo that never answers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, UPSTREAM
from hub_server import TOKEN, FakeHub, HubRepo, folder_files
from hfdoctor.sources.hub import HubLimits, HubSource
from hfdoctor.lint.check import Options, check_target
from hfdoctor.bounded import memo

SEED_SCRIPT = ROOT / "fixtures" / "make_seed_incident.py"


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> Path:
    """The seed incident with its sparse Llama-3.1-8B shards (16 GB of holes)."""
    out = tmp_path_factory.mktemp("seed") / "seed-incident"
    subprocess.run([sys.executable, str(SEED_SCRIPT), "--with-weights", "--out", str(out)], check=True,
                   capture_output=True)
    return out


@pytest.fixture(scope="module")
def payload_bin(tmp_path_factory) -> Path:
    """A torch archive of 48 MB whose data.pkl imports posix.system (never run)."""
    import torch

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch /nonexistent/ran",))

    path = tmp_path_factory.mktemp("payload") / "pytorch_model.bin"
    torch.save({"w": torch.zeros(12 * 1024 * 1024), "evil": Evil()}, path)
    return path


@pytest.fixture
def hub(seed, payload_bin, monkeypatch):
    repos = {
        "acme/seed-incident": HubRepo(folder_files(seed)),
        "Qwen/Qwen3-8B": HubRepo(folder_files(UPSTREAM / "Qwen--Qwen3-8B")),
        "acme/pickled": HubRepo({**folder_files(UPSTREAM / "Qwen--Qwen3-8B"), "pytorch_model.bin": payload_bin}),
        "acme/gated": HubRepo(folder_files(UPSTREAM / "Qwen--Qwen3-8B"), gated=True),
    }
    server = FakeHub(repos).start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield server
    server.stop()


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", *args], capture_output=True, text=True, env=full,
                          timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def keys(report) -> set[tuple[str, str | None]]:
    return {(f.rule, f.file) for f in report.findings}


def test_the_seed_incident_from_the_hub_gets_what_it_gets_on_disk(hub, seed):
    on_disk = check_target(str(seed), Options(upstream_dirs=(str(UPSTREAM),)))
    from_hub = check_target("acme/seed-incident", Options(upstream_dirs=(str(UPSTREAM),)))
    assert keys(from_hub) == keys(on_disk)
    rules = {rule for rule, _ in keys(from_hub)}
    assert {"weights-config-mismatch", "embedding-vocab-mismatch", "missing-chat-template",
            "base-model-mismatch"} <= rules
    # Metadata and headers only: the 16 GB of shards are never downloaded. Counted by the
    # server (every body byte it sent, the listing included) and by hfdoctor (file bytes).
    assert hub.sent["acme/seed-incident"] < 13.5e6, hub.sent
    assert 0 < from_hub.sections["source"]["downloaded_bytes"] <= hub.sent["acme/seed-incident"]
    assert from_hub.sections["revision"] == {"requested": "main", "commit": hub.repos["acme/seed-incident"].commit}


def test_unused_files_are_not_downloaded(hub):
    check_target("Qwen/Qwen3-8B")
    fetched = [r for r in hub.requests if "/resolve/" in r]
    assert not [r for r in fetched if r.endswith(("vocab.json", "merges.txt", "configuration.json"))]
    assert any(r.endswith("tokenizer.json") for r in fetched)


def test_a_pickle_payload_on_the_hub_is_found_by_ranged_reads(hub, payload_bin):
    proc = cli("check", "acme/pickled", "--format", "json", "--select", "unsafe-pickle")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    (finding,) = report["findings"]
    assert finding["rule"] == "unsafe-pickle" and finding["severity"] == "error" and ".system" in finding["message"]
    # The zip directory and data.pkl, not the 48 MB of tensor data.
    assert 0 < hub.sent_files[("acme/pickled", "pytorch_model.bin")] < 1_000_000, hub.sent_files


def test_a_repo_changed_on_the_hub_is_checked_at_its_new_commit(hub):
    first = check_target("Qwen/Qwen3-8B")
    assert "missing-chat-template" not in {f.rule for f in first.findings}
    files = folder_files(UPSTREAM / "Qwen--Qwen3-8B")
    config = json.loads(files["tokenizer_config.json"])
    config.pop("chat_template")
    files["tokenizer_config.json"] = json.dumps(config).encode()
    del files["chat_template.jinja"]
    new = hub.push("Qwen/Qwen3-8B", files)
    second = check_target("Qwen/Qwen3-8B")
    assert second.sections["revision"]["commit"] == new != first.sections["revision"]["commit"]
    assert "missing-chat-template" in {f.rule for f in second.findings}
    # An older commit is still reachable by name.
    again = check_target(f"Qwen/Qwen3-8B@{first.sections['revision']['commit']}")
    assert "missing-chat-template" not in {f.rule for f in again.findings}


def test_missing_gated_and_unknown_revisions_are_exit_2_with_their_reason(hub):
    proc = cli("check", "acme/nope")
    assert proc.returncode == 2 and "no such repository" in proc.stdout + proc.stderr
    proc = cli("check", "acme/gated")
    assert proc.returncode == 2 and "gated" in proc.stdout + proc.stderr and "HF_TOKEN" in proc.stdout + proc.stderr
    assert cli("check", "acme/gated", "--select", "TPL001", env={"HF_TOKEN": TOKEN}).returncode == 0
    proc = cli("check", "Qwen/Qwen3-8B", "--revision", "v9")
    assert proc.returncode == 2 and "no revision 'v9'" in proc.stdout + proc.stderr


def test_a_hub_that_never_answers_is_exit_2_within_the_deadline(hub):
    proc = cli("check", "slow/hang", "--timeout", "3", "--format", "json", timeout=90)
    assert proc.returncode == 2
    assert "did not answer within 3 s" in json.loads(proc.stdout)["error"]


def test_check_writes_nothing_and_caches_only_when_asked(hub, tmp_path, monkeypatch):
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    env = {"HF_HUB_CACHE": str(cache)}
    assert cli("check", "Qwen/Qwen3-8B", env=env).returncode in (0, 1)
    assert list(cache.iterdir()) == []
    # Offline with an empty cache: said plainly.
    proc = cli("check", "Qwen/Qwen3-8B", env={**env, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2 and "not in the local HF cache" in proc.stdout + proc.stderr
    # --cache stores the files rules read (and records the absent ones): offline works then.
    assert cli("check", "Qwen/Qwen3-8B", "--cache", env=env).returncode in (0, 1)
    proc = cli("check", "Qwen/Qwen3-8B", "--format", "json", env={**env, "HF_HUB_OFFLINE": "1"})
    report = json.loads(proc.stdout)
    assert report["revision"]["commit"] == hub.repos["Qwen/Qwen3-8B"].commit
    assert report["revision"]["from"].startswith("local HF cache")


def test_a_partial_cache_is_refused_offline(hub, tmp_path):
    """A snapshot holding only config.json (a failed download) would give a bogus result."""
    cache = tmp_path / "hf-cache"
    commit = hub.repos["Qwen/Qwen3-8B"].commit
    snapshot = cache / "models--Qwen--Qwen3-8B" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    shutil.copy(UPSTREAM / "Qwen--Qwen3-8B" / "config.json", snapshot)
    (cache / "models--Qwen--Qwen3-8B" / "refs").mkdir()
    (cache / "models--Qwen--Qwen3-8B" / "refs" / "main").write_text(commit)
    proc = cli("check", "Qwen/Qwen3-8B", env={"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2 and "incomplete" in proc.stdout + proc.stderr
    assert "tokenizer_config.json" in proc.stdout + proc.stderr


def test_a_mistyped_local_path_is_not_sent_to_the_hub(hub, tmp_path):
    (tmp_path / "checkpoints").mkdir()
    proc = subprocess.run([sys.executable, "-m", "hfdoctor", "check", "checkpoints/x"], capture_output=True,
                          text=True, cwd=tmp_path, env={**os.environ, "HF_ENDPOINT": hub.endpoint}, timeout=60)
    assert proc.returncode == 2 and "no such directory" in proc.stdout + proc.stderr
    assert hub.requests == []


def test_the_reachability_probe_dials_the_endpoint_port(hub, monkeypatch):
    from hfdoctor.knowledge import upstream

    memo.clear()
    assert upstream.hub_reachable()  # the fake Hub is on a random port, not 443
    memo.clear()


def test_byte_budget_is_enforced(hub):
    source = HubSource("Qwen/Qwen3-8B", limits=HubLimits(total_bytes=1_000_000))
    from hfdoctor.sources.base import Unreadable

    with pytest.raises(Unreadable, match="spent"):
        source.read("tokenizer.json")


# --- many targets ---------------------------------------------------------------------------


def test_many_targets_stream_jsonl_with_a_summary(hub, tmp_path, seed):
    targets = tmp_path / "targets.txt"
    targets.write_text(f"# a catalog\nQwen/Qwen3-8B\nacme/seed-incident\n\nacme/nope\n{seed}\n")
    proc = cli("check", "--from", str(targets), "--jobs", "2", "--format", "jsonl", "--select", "TPL001,CARD,WGT")
    assert proc.returncode == 2  # one target could not be checked
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sorted(line["target"] for line in lines) == sorted(["Qwen/Qwen3-8B", "acme/seed-incident", "acme/nope", str(seed)])
    assert next(line for line in lines if line["target"] == "acme/nope")["error"]
    assert "missing-chat-template" in proc.stderr and "4 target(s)" in proc.stderr  # the summary table


def test_json_for_several_targets_is_a_list_in_input_order(hub, seed):
    proc = cli("check", str(seed), "Qwen/Qwen3-8B", "--format", "json", "--jobs", "2", "--select", "TPL001")
    reports = json.loads(proc.stdout)
    assert [r["target"] for r in reports] == [str(seed), "Qwen/Qwen3-8B"] and proc.returncode == 1


# --- the commit being pushed ----------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def model_git_repo(tmp_path) -> Path:
    """Qwen3-8B's files committed as the Hub holds them: tokenizer.json (11 MB) as a git-lfs
    pointer whose object is in .git/lfs/objects, which is what `git lfs` would commit."""
    import hashlib

    repo = tmp_path / "model"
    shutil.copytree(UPSTREAM / "Qwen--Qwen3-8B", repo)
    (repo / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
                                         "tokenizer.json filter=lfs diff=lfs merge=lfs -text\n")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    data = (repo / "tokenizer.json").read_bytes()
    oid = hashlib.sha256(data).hexdigest()
    store = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4]
    store.mkdir(parents=True, exist_ok=True)  # a global `git lfs install` has the clean filter store it already
    (store / oid).write_bytes(data)
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n"
    blob = subprocess.run(["git", "-C", str(repo), "hash-object", "-w", "--stdin"], input=pointer.encode(),
                          capture_output=True, check=True).stdout.decode().strip()
    git(repo, "update-index", "--cacheinfo", f"100644,{blob},tokenizer.json")
    git(repo, "commit", "-qm", "upstream")
    git(repo, "config", "filter.lfs.clean", "git-lfs clean -- %f")
    return repo


def remove_template(repo: Path) -> None:
    config = json.loads((repo / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    (repo / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (repo / "chat_template.jinja").unlink()


def run_pre_push(repo: Path) -> subprocess.CompletedProcess:
    if shutil.which("git-lfs") is None:  # the repository routes files through git-lfs: the hook needs it
        pytest.skip("git-lfs is not installed (apt-get install git-lfs)")
    subprocess.run([sys.executable, "-m", "hfdoctor", "hook", "install", "--repo", str(repo)], check=True,
                   capture_output=True)
    sha = git(repo, "rev-parse", "HEAD").strip()
    stdin = f"refs/heads/main {sha} refs/heads/main {'0' * 40}\n"
    # A real remote: once the check passes, the hook hands over to git-lfs (the repository routes
    # tokenizer.json through it), which uploads to the remote git names.
    remote = repo.parent / "remote.git"
    if not remote.exists():
        git(repo.parent, "init", "-q", "--bare", str(remote))
        git(repo, "remote", "add", "origin", str(remote))
    return subprocess.run([str(repo / ".git" / "hooks" / "pre-push"), "origin", str(remote)],
                          input=stdin, capture_output=True, text=True, cwd=repo, timeout=120)


def test_a_pushed_commit_without_template_is_blocked_though_the_working_tree_is_fixed(model_git_repo):
    remove_template(model_git_repo)
    git(model_git_repo, "commit", "-qam", "drop the template")
    shutil.copy(UPSTREAM / "Qwen--Qwen3-8B" / "tokenizer_config.json", model_git_repo)  # fixed, not committed
    proc = run_pre_push(model_git_repo)
    assert proc.returncode == 1 and "missing-chat-template" in proc.stdout, proc.stdout + proc.stderr


def test_a_good_commit_passes_though_the_working_tree_is_broken(model_git_repo):
    remove_template(model_git_repo)  # broken, not committed
    proc = run_pre_push(model_git_repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_git_rev_reads_lfs_objects_and_reports_pointers(model_git_repo, tmp_path):
    """A weight file committed as an LFS pointer: read from .git/lfs/objects when there,
    reported as a pointer when not."""
    import hashlib

    from weights_util import write_sparse_safetensors

    weights = tmp_path / "model.safetensors"
    write_sparse_safetensors(weights, {"model.embed_tokens.weight": (151936, 64)})
    data = weights.read_bytes()
    oid = hashlib.sha256(data).hexdigest()
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n"
    (model_git_repo / "model.safetensors").write_text(pointer)
    git(model_git_repo, "add", "model.safetensors")
    git(model_git_repo, "commit", "-qm", "weights")
    found = check_target(str(model_git_repo), Options(git_rev="HEAD", select=("lfs-pointer", "weights-unreadable")))
    assert [f.rule for f in found.findings] == ["lfs-pointer"]
    store = model_git_repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4]
    store.mkdir(parents=True)
    shutil.copy(weights, store / oid)
    found = check_target(str(model_git_repo), Options(git_rev="HEAD", select=("lfs-pointer", "weights-unreadable")))
    assert found.findings == [] and found.sections["revision"]["commit"] == git(model_git_repo, "rev-parse", "HEAD").strip()


# --- a hostile Hub: revisions that climb, encoded bodies ----------------------------------------------------


def test_cache_never_writes_a_ref_outside_the_cache(hub, tmp_path):
    """A Hub that answers for the revision `../../../../escaped` (a list of targets can name
    anything): the revision is refused before any request, so no ref file is written above
    the cache, nor anything else."""
    commit = hub.repos["Qwen/Qwen3-8B"].commit
    hub.repos["Qwen/Qwen3-8B"].refs["../../../../escaped"] = commit
    cache = tmp_path / "deep" / "hf-cache"
    cache.mkdir(parents=True)
    proc = cli("check", "Qwen/Qwen3-8B@../../../../escaped", "--cache", "--format", "json",
               env={"HF_HUB_CACHE": str(cache)})
    assert proc.returncode == 2 and "is not a commit id" in json.loads(proc.stdout)["error"]
    assert not (tmp_path / "escaped").exists() and list(cache.iterdir()) == [] and hub.requests == []


def test_cache_of_a_pull_request_revision_is_found_offline(hub, tmp_path):
    """refs/pr/N is a revision too: --cache records it below refs/, where an offline check finds it."""
    commit = hub.repos["Qwen/Qwen3-8B"].commit
    hub.repos["Qwen/Qwen3-8B"].refs["refs/pr/1"] = commit
    env = {"HF_HUB_CACHE": str(tmp_path / "cache")}
    assert cli("check", "Qwen/Qwen3-8B@refs/pr/1", "--cache", env=env).returncode in (0, 1)
    assert (tmp_path / "cache" / "models--Qwen--Qwen3-8B" / "refs" / "refs" / "pr" / "1").read_text() == commit
    proc = cli("check", "Qwen/Qwen3-8B@refs/pr/1", "--format", "json", env={**env, "HF_HUB_OFFLINE": "1"})
    assert json.loads(proc.stdout)["revision"]["commit"] == commit


def test_an_encoded_body_is_never_decompressed(hub, monkeypatch):
    """A Hub (or a mirror at HF_ENDPOINT) that sends tokenizer.json as a gzip bomb with
    Content-Encoding: the client would inflate it without a bound; hfdoctor asks for the
    bytes as stored, and an encoded answer is a file it did not read."""
    import gzip

    import hub_server
    from hfdoctor.sources.base import Unreadable

    bomb = gzip.compress(b" " * (256 * 1024 * 1024), compresslevel=9)  # 256 MB in about 250 KB

    def encoded(self, repo_id, repo, path, headers, head):
        if path != "tokenizer.json":
            return original(self, repo_id, repo, path, headers, head)
        self._send(200, b"" if head else bomb, {**headers, "Content-Encoding": "gzip"}, repo_id, head, path)

    original = hub_server._Handler._content
    monkeypatch.setattr(hub_server._Handler, "_content", encoded)
    source = HubSource("Qwen/Qwen3-8B")
    with pytest.raises(Unreadable, match="encoded"):
        source.read("tokenizer.json")
    assert source.bytes_read() <= len(bomb)
    assert source.read("config.json").startswith(b"{")


def test_a_bz2_bomb_served_by_the_hub_stays_within_a_gigabyte(hub, tmp_path):
    """796 bytes of bzip2 that expand to 1 GiB, served as model.pkl.bz2: the scanner's own
    output cap (hfdoctor.modelfiles.containers) bounds it; the check answers, with a finding,
    within 1 GB of memory. (The transport never inflates anything: see above.)"""
    import bz2

    compressor = bz2.BZ2Compressor(9)
    parts = [compressor.compress(b"\x80\x02" + b"\0" * (1 << 20))]
    parts += [compressor.compress(b"\0" * (1 << 20)) for _ in range(1023)]
    bomb = b"".join(parts) + compressor.flush()
    hub.repos["acme/bomb"] = HubRepo({**folder_files(UPSTREAM / "Qwen--Qwen3-8B"), "model.pkl.bz2": bomb})
    script = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
              "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(p.stdout)")
    proc = subprocess.run([sys.executable, "-c", script, sys.executable, "-m", "hfdoctor", "check", "acme/bomb",
                           "--select", "unsafe-pickle", "--format", "json"], capture_output=True, text=True,
                          env={**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0"}, timeout=120)
    first, _, body = proc.stdout.partition("\n")
    code, peak_kb = map(int, first.split())
    assert code in (0, 1) and peak_kb < 1024 * 1024, (code, peak_kb)
    assert [f["file"] for f in json.loads(body)["findings"]] == ["model.pkl.bz2"]
    assert hub.sent_files.get(("acme/bomb", "model.pkl.bz2"), 0) <= 2 * len(bomb)  # a header window, then the file


@pytest.mark.parametrize("commit,name", [("../../../escaped", "config.json"), (None, "../../escaped.json"),
                                         (None, "/etc/passwd"), (None, "a//b.json")])
def test_a_hub_answer_that_names_paths_outside_is_refused(hub, tmp_path, commit, name):
    """A hostile endpoint's listing: its commit id joins a cache folder (--cache) and its file
    names join folders (fix --pr's scratch copy); neither is taken unless it is one."""
    files = {**folder_files(UPSTREAM / "Qwen--Qwen3-8B"), name: b"{}"}
    hub.repos["acme/odd"] = HubRepo(files, commits=[commit] if commit else [])
    proc = cli("check", "acme/odd", "--cache", "--format", "json", env={"HF_HUB_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "answered a commit id that is not one" in proc.stdout or "no repository can hold" in proc.stdout
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "cache").exists()
