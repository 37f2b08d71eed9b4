"""Small things a user meets first (issue 42, papercuts): the real version everywhere, -V, a header
row in `rules`, shell completion."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, UPSTREAM, run_cli

import hfdoctor

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_the_version_is_written_once_and_read_everywhere():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "hfdoctor/__init__.py"
    version = hfdoctor.__version__
    assert version != "0.1.0"
    for flag in ("--version", "-V"):
        assert run_cli(flag).stdout.strip() == f"hfdoctor {version}"
    folder = str(UPSTREAM / "Qwen--Qwen2.5-7B-Instruct")
    assert json.loads(run_cli("check", folder, "--format", "json").stdout)["hfdoctor"] == version
    sarif = json.loads(run_cli("check", folder, "--format", "sarif").stdout)
    assert sarif["runs"][0]["tool"]["driver"]["version"] == version


def test_rules_has_a_header_row():
    lines = run_cli("rules").stdout.splitlines()
    assert lines[0].split() == ["code", "name", "severity", "fix", "what", "it", "flags"]
    assert lines[1].startswith("CFG001 ")


def complete(script: str, *words: str) -> list[str]:
    """What the bash completion offers after `words` (the last one is being typed)."""
    call = " ".join(f"'{w}'" for w in words)
    program = (f'{script}\nCOMP_WORDS=({call}); COMP_CWORD={len(words) - 1}; _hfdoctor; '
               'printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completion_knows_commands_options_choices_and_rules():
    script = run_cli("completion", "bash").stdout
    assert subprocess.run(["bash", "-n"], input=script, text=True, timeout=60).returncode == 0
    assert complete(script, "hfdoctor", "c") == ["check", "completion"]
    assert "--write-baseline" in complete(script, "hfdoctor", "check", "--")
    assert complete(script, "hfdoctor", "check", "--format", "j") == ["json", "jsonl"]
    assert complete(script, "hfdoctor", "explain", "CMP") == ["CMP001", "CMP002", "CMP003"]
    assert "TPL001" in complete(script, "hfdoctor", "fix", "--ignore", "TPL00")
    assert complete(script, "hfdoctor", "hook", "") == ["install", "uninstall"]
    assert "--select" in complete(script, "hfdoctor", "hook", "install", "--s")
    assert complete(script, "hfdoctor", "completion", "") == ["bash", "zsh", "fish"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_load(shell):
    script = run_cli("completion", shell).stdout
    assert "check" in script and "--write-baseline" in script.replace("-l write-baseline", "--write-baseline")
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    check = ["zsh", "-n"] if shell == "zsh" else ["fish", "--no-execute"]
    assert subprocess.run(check, input=script, text=True, timeout=60).returncode == 0
