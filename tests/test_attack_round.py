"""An attacker's pass over the pre-push hook, the stderr console and the JSON writer: each test is
an input that broke them (a hang, a write outside the hooks directory, a workflow command, JSON
that strict parsers refuse)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hfdoctor.cli import hook
from hfdoctor.report import inert

GIT = shutil.which("git")


def cap_memory() -> None:
    """A failing test must not take the machine's memory with it: 2 GiB of address space."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def git(repo: Path, *args: str) -> None:
    subprocess.run([GIT, "-C", str(repo), *args], check=True, capture_output=True, timeout=30)


def no_lfs_path(tmp_path: Path) -> str:
    """A PATH holding what the hook calls (git, the shell's tools), but no git-lfs and no hfdoctor."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("git", "sh", "mktemp", "cat", "rm", "grep", "head"):
        found = shutil.which(name)
        if found:
            (tools / name).symlink_to(found)
    return str(tools)


@pytest.mark.skipif(GIT is None or not os.path.exists("/dev/zero"), reason="needs git and /dev/zero")
def test_the_hook_does_not_hang_on_a_gitattributes_that_links_to_dev_zero(tmp_path):
    """Without git-lfs on PATH the hook looks for `filter=lfs` in .gitattributes. A cloned repository
    can hold .gitattributes as a symlink to /dev/zero (or to a FIFO, /dev/tty): grep then never ends,
    and neither does the push. Git itself ignores a symlinked .gitattributes."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitattributes").symlink_to("/dev/zero")
    script = tmp_path / "pre-push"
    script.write_text(hook.hook_script("error"))
    env = {"PATH": no_lfs_path(tmp_path), "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    done = subprocess.run(["/bin/sh", str(script), "origin", "https://example.invalid/x"], cwd=repo, env=env,
                          input=b"", capture_output=True, timeout=20)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(GIT is None, reason="needs git")
def test_hook_install_does_not_write_through_a_planted_temporary_file(tmp_path):
    """core.hooksPath often names a folder the repository tracks (.githooks, .husky): a repository can
    ship `.pre-push.hfdoctor.tmp` there as a symlink, and `hook install` wrote its script through it."""
    repo = tmp_path / "repo"
    (repo / ".githooks").mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "config", "core.hooksPath", ".githooks")
    victim = tmp_path / "victim"
    victim.write_text("the user's own file\n")
    (repo / ".githooks" / ".pre-push.hfdoctor.tmp").symlink_to(victim)
    path, _ = hook.install_pre_push(repo)
    assert victim.read_text() == "the user's own file\n"
    assert hook.MARKER in path.read_text() and not path.is_symlink()


def test_a_failure_message_on_stderr_is_one_line_whatever_its_length(tmp_path):
    """fail() prints a target given on the command line (or by --from FILE). Rich wrapped stderr at 80
    columns when it was no terminal (a CI log), so a long name put `::error::...` at the start of a
    line: a workflow command to GitHub's runner, which reads stderr as well."""
    target = "missing/" + "x" * 60 + " ::error::pwned"
    done = subprocess.run([sys.executable, "-m", "hfdoctor", "fix", target], cwd=tmp_path, capture_output=True,
                          timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 2
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and not any(inert.is_workflow_command(line) for line in lines), lines


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_json_output_has_no_nan_or_infinity(number):
    """Python's json reads NaN and Infinity from a repository's config.json, and wrote them back as
    `NaN`/`Infinity`, which are not JSON: strict parsers refuse the whole report."""

    def strict(constant: str):
        raise ValueError(f"not JSON: {constant}")

    text = inert.dumps({"value": number, "list": [number], "nested": {"x": number}})
    json.loads(text, parse_constant=strict)


LEGACY = "model card says ##[add-mask]hunter2 and ##[stop-commands]tok"


def runner_would_parse(line: str) -> bool:
    """GitHub's runner (ActionCommandManager.TryProcessCommand): the `::` form at the start of the
    line, else the legacy `##[name]` form ANYWHERE in it (ActionCommand.TryParse: IndexOf)."""
    return line.lstrip().startswith("::") or "##[" in line


def test_a_legacy_command_in_the_middle_of_a_line_is_no_command():
    """`##[add-mask]x` or `##[stop-commands]t` mid-line is a command to the runner: the text output,
    the JSON (and SARIF) output and Markdown code spans printed it as is."""
    from hfdoctor.report.text import line

    shown = [line("README.md: ", LEGACY).plain, inert.visible(LEGACY), inert.code_span(LEGACY),
             inert.code_fence(LEGACY)]
    shown += inert.dumps({"message": LEGACY}, indent=2).splitlines()
    shown += inert.dumps({"message": LEGACY}, ensure_ascii=True).splitlines()
    for text in shown:
        for one in text.split("\n"):
            assert not runner_would_parse(one), one
            assert not (one.startswith("::") or "##[" in one) or inert.is_workflow_command(one)
    assert json.loads(inert.dumps({"message": LEGACY}))["message"] == LEGACY  # the same value
    assert inert.is_workflow_command("x ##[add-mask]y")


@pytest.mark.parametrize("parts", [("a ##", "[add-mask]x"), ("a #", "#[add-mask]x"), ("##", "[add-mask]"),
                                   ("#", "#", "[error]x"), ("", "##", "", "[error]")])
def test_a_legacy_command_split_between_parts_of_a_text_line_is_no_command(parts):
    from hfdoctor.report.text import line

    plain = line(*parts).plain
    assert not runner_would_parse(plain), plain


@pytest.mark.skipif(GIT is None or not os.path.exists("/dev/zero"), reason="needs git and /dev/zero")
def test_hook_install_does_not_read_a_chained_hook_that_links_to_dev_zero(tmp_path):
    """In a hooks folder the repository tracks, `pre-push.hfdoctor-chained` can be a symlink to
    /dev/zero: comparing it with the pre-push hook read it whole (memory without end)."""
    repo = tmp_path / "repo"
    (repo / ".githooks").mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "config", "core.hooksPath", ".githooks")
    (repo / ".githooks" / "pre-push").write_text("#!/bin/sh\nexit 0\n")
    (repo / ".githooks" / hook.CHAINED_NAME).symlink_to("/dev/zero")
    done = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from hfdoctor.cli import hook\n"
                           "try:\n    hook.install_pre_push(Path(sys.argv[1]))\nexcept hook.HookError as err:\n"
                           "    print(err)", str(repo)], capture_output=True, timeout=30, preexec_fn=cap_memory)
    assert done.returncode == 0 and b"already holds another hook" in done.stdout, done


def test_a_safetensors_shape_of_huge_dimensions_is_a_finding_not_a_crash(tmp_path):
    """Each dimension fits in u64, their product has thousands of digits: formatting it raised
    ValueError (Python's 4,300-digit limit) in every rule that reads the weights' headers (exit 2)."""
    import struct

    header = json.dumps({"w": {"dtype": "F32", "shape": [2**63] * 600, "data_offsets": [0, 4]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    done = subprocess.run([sys.executable, "-m", "hfdoctor", "check", "--format", "json", str(tmp_path)],
                          capture_output=True, timeout=120)
    report = json.loads(done.stdout)
    assert not report.get("internal_errors"), report.get("internal_errors")
    assert any(f["file"] == "model.safetensors" and f["severity"] == "error" for f in report["findings"])
