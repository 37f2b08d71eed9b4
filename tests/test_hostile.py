"""Hostile repositories (tests/hostile.py): `hfdoctor check` answers, writes nothing, goes
nowhere, and runs nothing from the repository.

Each repository is checked by the real command line in a child process under a Python
audit hook (tests/audit_run.py) that records every file opened for writing, every
directory made or file removed, every connection and every program started, in that
process and in the workers it forks. A repository whose code ran leaves a marker file.
The subprocess timeout is a hang detector, not a speed test: the budget that bounds a
check is 30 s, and the time each case takes is printed by bench/bench_hostile.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hostile
from conftest import ROOT

AUDIT_RUN = Path(__file__).resolve().parent / "audit_run.py"
# Programs hfdoctor may start, and what must then be on their command line.
GIT_HARDENING = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "protocol.allow=never")
# A hang detector only (the check's own budget is 30 s; nothing here is a speed assertion).
HANG_S = 240
# Cases that exist to exhaust a budget run with a small one, so that the suite stays fast.
SMALL_BUDGET = {"slow_additional_templates", "gguf_named_templates", "hard_links", "git_big_blobs"}


def audited_check(case: hostile.Case, name: str, log: Path) -> tuple[subprocess.CompletedProcess, list[dict]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    if name in SMALL_BUDGET:
        env["HFDOCTOR_BUDGET_SECONDS"] = "8"
    cmd = [sys.executable, str(AUDIT_RUN), str(log), "--", "check", str(case.target), *case.args, "--format", "json"]
    proc = subprocess.run(cmd, cwd=case.cwd or log.parent, capture_output=True, text=True, env=env, timeout=HANG_S)
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, events


def _repo_dirs(case: hostile.Case) -> list[Path]:
    """The repositories a case checks (its target, and any further targets among its args)."""
    first = (case.cwd / case.target).resolve() if case.cwd else case.target.resolve()
    return [first, *(Path(a).resolve() for a in case.args if os.path.isabs(a) and Path(a).is_dir())]


@pytest.fixture
def case_root(tmp_path):
    yield tmp_path / "case"
    if (tmp_path / "case").exists():
        hostile.remove_tree(tmp_path / "case")  # pytest's own cleanup recurses (nested_directories)


@pytest.mark.parametrize("name", sorted(hostile.BUILDERS))
def test_hostile_repository(tmp_path, case_root, name):
    case = hostile.build(name, case_root)
    log = tmp_path / "audit.log"
    proc, events = audited_check(case, name, log)
    assert proc.returncode in (0, 1), (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    reports = json.loads(proc.stdout)  # valid JSON, and valid UTF-8 (text=True decoded it strictly)
    report = reports[0] if isinstance(reports, list) else reports
    assert not report.get("internal_errors"), report.get("internal_errors")
    if case.marker is not None:
        assert not case.marker.exists(), f"{name}: code from the repository ran"
    if case.expect:
        fired = {f["rule"] for r in (reports if isinstance(reports, list) else [reports]) for f in r["findings"]}
        assert fired & set(case.expect), (case.expect, sorted(fired))
    repos = _repo_dirs(case)
    outside = case_root.resolve()
    # The one place check may write: the user's cache of layouts transformers built (keyed by a config hash,
    # never inside the repository; tests/conftest.py points HFDOCTOR_CACHE_DIR at a temporary folder).
    layouts_cache = Path(os.environ["HFDOCTOR_CACHE_DIR"]).resolve() / "layouts"
    for event in events:
        kind, args = event["event"], event["args"]
        paths = [Path(str(a)) for a in args[:2] if isinstance(a, str) and os.path.isabs(a)]
        if kind in ("open-write", "os.rename", "os.remove", "os.mkdir") and paths and all(
                p.resolve().is_relative_to(layouts_cache) or p.resolve() == layouts_cache for p in paths):
            continue
        assert kind not in ("socket.connect", "socket.getaddrinfo", "socket.sendto", "http.client.connect",
                            "urllib.Request"), event
        assert kind not in ("os.remove", "os.rename", "os.rmdir", "os.symlink", "os.link", "os.truncate",
                            "shutil.rmtree", "shutil.move", "shutil.copyfile", "os.chmod"), event
        if kind == "open-write":
            assert args[0] == os.devnull, event  # a child's stderr sent to /dev/null writes nothing
        if kind == "os.mkdir":  # makedirs(exist_ok) probes what exists: allowed only when nothing is made
            assert Path(args[0]).exists() and Path(args[0]).stat().st_mtime < log.stat().st_mtime + 1, event
        if kind in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn", "os.system"):
            program, argv = args[0], args[1]
            assert os.path.isabs(str(program)), event
            assert not any(Path(str(program)).resolve().is_relative_to(repo) for repo in repos), event
            if os.path.basename(str(program)) == "git" and "--global" not in argv:
                assert all(flag in argv for flag in GIT_HARDENING), event
        if kind == "open-read":
            path = Path(str(args[0]))
            if path.is_absolute() and path.resolve().is_relative_to(outside):
                # inside the case folder only the repository itself may be read (never the
                # secret an LFS oid points at, nor a symlink's target)
                assert any(path.resolve().is_relative_to(repo) for repo in repos), event


def test_every_hostile_class_has_a_repository():
    """The classes of issue 20, each built (a name here that has no builder fails)."""
    wanted = {"node_modules_in_repo", "git_fsmonitor", "git_fsmonitor_git_rev", "lfs_oid_traversal",
              "gitattributes_backtracking", "adapter_regex", "card_front_matter", "long_tensor_names",
              "empty_thinking_template", "many_findings", "slow_additional_templates", "gguf_named_templates",
              "huge_headers", "hard_links", "many_quantized_modules", "gpt2_many_layers", "git_big_blobs",
              "deep_json", "deep_yaml", "yaml_alias_bomb", "huge_integers", "lone_surrogates", "non_utf8_name",
              "tokenizers_panic", "wrong_types", "quantization_group_sizes", "unterminated_bracket_gitattributes",
              "nested_directories", "unreadable_files", "detr_backbone", "null_config"}
    assert wanted <= set(hostile.BUILDERS)


def test_files_the_user_cannot_read_are_findings(tmp_path, monkeypatch):
    """Permission denied (simulated: the tests run as root, who may read anything) on a file
    and on a directory: file-unreadable and check-incomplete, never a crash."""
    from hfdoctor.lint.check import check_target
    from hfdoctor.knowledge.upstream import Upstream

    case = hostile.build("unreadable_files", tmp_path / "case")
    real_open, real_scandir = os.open, os.scandir

    def refusing_open(path, flags, *args, **kwargs):
        if str(path).endswith(("tokenizer.json", "pytorch_model.bin")):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    def refusing_scandir(path="."):
        if str(path).endswith("secret"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "open", refusing_open)
    monkeypatch.setattr(os, "scandir", refusing_scandir)
    report = check_target(str(case.target), upstream=Upstream((), use_cache=False, use_hub=False))
    assert not report.internal_errors, report.internal_errors
    by_rule = {f.rule: f for f in report.findings}
    assert "tokenizer.json cannot be read: Permission denied" in by_rule["file-unreadable"].message
    assert "secret/" in by_rule["check-incomplete"].message and "cannot be listed" in by_rule["check-incomplete"].message
    assert "pytorch_model.bin cannot be read to scan it" in by_rule["pickle-unscannable"].message


def test_node_modules_are_taken_only_from_outside_the_repository(tmp_path, monkeypatch):
    """@huggingface/jinja is used from where the user installed it, never from the checked
    repository or the working directory, even when HFDOCTOR_NODE_MODULES points there."""
    from hfdoctor.chat import engines

    repo = tmp_path / "repo"
    inside = repo / "node_modules"
    (inside / "@huggingface" / "jinja").mkdir(parents=True)
    (inside / "@huggingface" / "jinja" / "package.json").write_text("{}")
    monkeypatch.setenv("HFDOCTOR_NODE_MODULES", str(inside))
    assert engines.node_modules(repo) is None
    monkeypatch.chdir(repo)
    monkeypatch.setenv("HFDOCTOR_NODE_MODULES", "node_modules")  # relative (the working directory's): refused
    assert engines.node_modules(None) is None
    installed = ROOT / ".node" / "node_modules"
    if (installed / "@huggingface" / "jinja").is_dir():
        monkeypatch.setenv("HFDOCTOR_NODE_MODULES", str(installed))
        assert engines.node_modules(repo) == installed.resolve()
