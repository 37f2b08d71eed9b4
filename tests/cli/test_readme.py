"""README's first command block, run as written on a fresh copy of the repository (the files
git tracks, plus new ones it does not ignore), with the Hub unreachable: it installs hfdoctor
into a new virtual environment, checks the seed incident (exit 1, as the README says), then
fixes a copy and checks it clean (exit 0) without touching the tracked fixture."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.xdist_group("readme")


def fresh_copy(dest: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    for rel in filter(None, (name.decode("utf-8", "surrogateescape") for name in listed)):
        source = ROOT / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    return dest


def first_block() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", readme, re.DOTALL).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_quick_start_works_on_a_fresh_copy(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the repository's files")
    clone = fresh_copy(tmp_path / "hfdoctor")
    seed = {p.relative_to(clone): p.read_bytes() for p in (clone / "fixtures" / "seed-incident").rglob("*")
            if p.is_file()}
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8",
           "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9", "TMPDIR": str(tmp_path)}
    for key in ("PIP_CONFIG_FILE", "PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        if key in os.environ:
            env[key] = os.environ[key]
    (tmp_path / "home").mkdir()
    install_and_check, fix_and_check = first_block()
    # The README's copy goes to a new `mktemp -d` folder, under this test's TMPDIR.
    first = subprocess.run(["bash", "-c", install_and_check], cwd=clone, env=env, capture_output=True, text=True,
                           timeout=600)
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]
    assert "missing-chat-template" in first.stdout and "base-model-mismatch" in first.stdout
    second = subprocess.run(["bash", "-c", ". .venv/bin/activate && " + fix_and_check], cwd=clone, env=env,
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "0 error(s), 0 warning(s)" in second.stdout
    after = {p.relative_to(clone): p.read_bytes() for p in (clone / "fixtures" / "seed-incident").rglob("*")
             if p.is_file()}
    assert after == seed  # the example fixes a copy, never the tracked fixture
