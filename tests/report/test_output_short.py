"""Text output is short (CONTRACT "What users see": Text output is short), on real upstream data.

Info findings are hidden by default and counted in the summary line, which names --show-info;
--quiet prints the summary line alone; a terminal wraps to its width and a pipe gets whole
lines; --format github annotates warnings and errors unless --show-info; json, jsonl and
SARIF keep every finding.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys

from conftest import ROOT, run_cli, upstream_dir

QWEN3 = upstream_dir("Qwen--Qwen3-8B")
SEED = ROOT / "fixtures" / "seed-incident"


def findings(target) -> list[dict]:
    return json.loads(run_cli("check", str(target), "--format", "json").stdout)["findings"]


def shows(out: str, f: dict) -> bool:
    """The finding has its line: code, rule and its message, whole or cut at about 160 characters (` …`)."""
    head = f"{f['code']} {f['rule']} "
    for line in out.splitlines():
        if head in line:
            shown = line.split(head, 1)[1].removesuffix("  [fix: safe]").removesuffix("  [fix: unsafe]")
            if shown == f["message"] or shown.endswith(" …") and f["message"].startswith(shown[:-2]):
                return True
    return False


def test_a_clean_upstream_folder_prints_a_few_lines():
    infos = findings(QWEN3)
    assert infos and all(f["severity"] == "info" for f in infos)  # the upstream Qwen3-8B: info findings only
    proc = run_cli("check", str(QWEN3))
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) <= 5, proc.stdout  # lineage, compat and why unknown, summary
    assert lines[-1] == f"0 error(s), 0 warning(s), and {len(infos)} info: --show-info; 0 fixable with `hfdoctor fix`"
    assert not any(f["code"] in proc.stdout for f in infos) and "template:" not in proc.stdout

    shown = run_cli("check", str(QWEN3), "--show-info").stdout
    whole = run_cli("check", str(QWEN3), "--show-info", "--verbose").stdout
    for f in infos:
        where = f"{f['file']}:{f['line']}" if f["line"] else f["file"]
        assert f"{where}: info {f['code']} {f['rule']} " in shown and shows(shown, f)
        assert f"{where}: info {f['code']} {f['rule']} {f['message']}" in whole
    assert "  template: source=chat_template.jinja" in shown and f"{len(infos)} info;" in shown

    quiet = run_cli("check", str(QWEN3), "--quiet").stdout
    assert quiet == f"{QWEN3}: 0 error(s), 0 warning(s), and {len(infos)} info: --show-info; 0 fixable with " \
                    "`hfdoctor fix`\n"


def test_warnings_and_errors_are_always_shown():
    loud = [f for f in findings(SEED) if f["severity"] != "info"]
    out = run_cli("check", str(SEED)).stdout
    assert loud and all(shows(out, f) for f in loud)
    quiet = run_cli("check", str(SEED), str(QWEN3), "-q", "--jobs", "1").stdout.splitlines()
    assert quiet[0].startswith(f"{SEED}: 2 error(s)") and quiet[1].startswith(f"{QWEN3}: 0 error(s)")
    assert quiet[2:] == ["", "2 target(s): 2 checked, 0 could not be checked"]


def test_github_annotates_info_only_when_asked_and_machine_formats_keep_it():
    every = findings(QWEN3)
    assert run_cli("check", str(QWEN3), "--format", "github").stdout.strip() == ""
    notices = run_cli("check", str(QWEN3), "--format", "github", "--show-info").stdout.splitlines()
    assert len(notices) == len(every) and all(line.startswith("::notice ") for line in notices)
    jsonl = json.loads(run_cli("check", str(QWEN3), "--format", "jsonl").stdout)
    sarif = json.loads(run_cli("check", str(QWEN3), "--format", "sarif").stdout)
    assert len(jsonl["findings"]) == len(sarif["runs"][0]["results"]) == len(every)


def test_fix_reports_what_is_left_as_check_shows_it(copy_upstream):
    folder = copy_upstream("Qwen--Qwen3-8B")
    proc = run_cli("fix", str(folder))
    assert "nothing to fix" in proc.stdout and "info: --show-info" in proc.stdout and "TPL012" not in proc.stdout
    assert "TPL012" in run_cli("fix", str(folder), "--show-info").stdout


def test_a_pipe_gets_whole_lines_and_a_terminal_wraps_to_its_width():
    env = {**os.environ, "COLUMNS": "80", "HF_HUB_OFFLINE": "1"}
    env.pop("FORCE_COLOR", None)
    piped = subprocess.run([sys.executable, "-m", "hfdoctor", "check", str(SEED), "--verbose"], capture_output=True,
                           text=True, env=env, timeout=120).stdout
    card = next(line for line in piped.splitlines() if "CARD001" in line)
    assert len(card) > 200 and card.endswith("[fix: safe]")  # one finding, one line

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "hfdoctor", "check", str(SEED), "--verbose"], stdout=follower,
                            stderr=subprocess.DEVNULL, env={**env, "NO_COLOR": "1"})
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) == 1
    shown = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode()).replace("\r\n", "\n")
    lines = [line for line in shown.split("\n") if line]
    assert all(len(line.rstrip()) <= 80 for line in lines), lines
    assert "".join(shown.split()) == "".join(piped.split()) and len(lines) > len(piped.splitlines())  # wrapped
