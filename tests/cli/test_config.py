"""Configuration files end to end (CONTRACT 0.5 "Configuration"), on real upstream metadata.

Llama-3.1-8B-Instruct's published metadata has no model card: one warning (CARD002
card-metadata, on README.md) and a few info findings. Each test puts a `.hfdoctor.toml` or a
`pyproject.toml` beside or above a copy of it and runs the command line as a user would.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import UPSTREAM, run_cli

LLAMA = UPSTREAM / "meta-llama--Llama-3.1-8B-Instruct"
# A pickle that runs posix.system('true') when loaded (never loaded here: the scanner reads its opcodes).
PAYLOAD = b"\x80\x02cposix\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."


@pytest.fixture
def project(tmp_path):
    """tmp/project/model: a copy of the Llama metadata inside a user's project folder."""
    model = tmp_path / "project" / "model"
    shutil.copytree(LLAMA, model)
    return model


def check(*args, cwd=None):
    proc = run_cli("check", *args, cwd=cwd)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def report(*args) -> dict:
    return json.loads(check(*args, "--format", "json").stdout)


def codes(data: dict) -> dict[str, str]:
    return {f["code"]: f["severity"] for f in data["findings"]}


def test_pyproject_above_the_target_changes_the_outcome(project):
    assert check(str(project), "--fail-on", "warning").returncode == 1  # CARD002 is a warning
    (project.parent / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.hfdoctor]\nfail-on = "warning"\n'
                                                   'ignore = ["card-metadata"]\n')
    data = report(str(project))
    assert "CARD002" not in codes(data) and data["config"]["file"] == str(project.parent / "pyproject.toml")
    assert check(str(project)).returncode == 0
    dot = json.loads(run_cli("check", ".", "--format", "json", cwd=project).stdout)  # "." finds it too
    assert dot["config"]["file"] == str(project.parent / "pyproject.toml") and "CARD002" not in codes(dot)
    # a pyproject.toml without [tool.hfdoctor] is passed over, as ruff does
    (project / "pyproject.toml").write_text('[project]\nname = "model"\n')
    assert "CARD002" not in codes(report(str(project)))


def test_the_repository_own_file_and_command_line_options_win(project):
    (project / ".hfdoctor.toml").write_text('fail-on = "warning"\n')
    proc = check(str(project))
    assert proc.returncode == 1 and "CARD002" in proc.stdout
    assert report(str(project))["config"] == {"file": ".hfdoctor.toml", "fail_on": "warning", "trusted": False}
    assert check(str(project), "--fail-on", "error").returncode == 0  # the command line wins
    assert check(str(project), "--isolated").returncode == 0  # no file at all
    (project / ".hfdoctor.toml").write_text('select = ["TPL"]\nfail-on = "warning"\n')
    assert "CARD002" not in codes(report(str(project)))
    assert "CARD002" in codes(report(str(project), "--select", "CARD"))  # --select replaces the file's selection


def test_per_file_ignores_and_severity_overrides(project):
    (project / ".hfdoctor.toml").write_text('[per-file-ignores]\n"README.md" = ["card-metadata"]\n')
    assert "CARD002" not in codes(report(str(project)))
    (project / ".hfdoctor.toml").write_text('[per-file-ignores]\n"*.json" = ["card-metadata"]\n')
    assert "CARD002" in codes(report(str(project)))  # another file's findings stay
    (project / ".hfdoctor.toml").write_text('[severity]\nCARD = "info"\ncard-metadata = "error"\n')
    data = report(str(project))
    card = next(f for f in data["findings"] if f["code"] == "CARD002")
    assert card["severity"] == "error" and card["severity_reason"] == "set to error by .hfdoctor.toml"  # last wins
    assert check(str(project)).returncode == 1


@pytest.mark.parametrize("text, says", [
    ('ignre = ["CARD002"]\n', "ignre: unknown key (did you mean 'ignore'?)"),
    ('select = "TPL"\n', "select: must be a list of strings"),
    ('select = ["NOPE9"]\n', "select: no rule matches 'NOPE9'"),
    ('[severity]\nCARD002 = "loud"\n', "severity.CARD002: must be one of error, warning, info"),
    ('engines = ["vllm", "tensorrt"]\n', "engines: unknown engine 'tensorrt'"),
    ('upstream = ["../elsewhere"]\n', "upstream: '../elsewhere' leaves the repository"),
    ("select = [\n", "not valid TOML"),
])
def test_a_file_hfdoctor_cannot_use_is_exit_2_naming_the_key(project, text, says):
    (project / ".hfdoctor.toml").write_text(text)
    proc = check(str(project))
    assert proc.returncode == 2 and ".hfdoctor.toml" in proc.stdout and says in proc.stdout, proc.stdout
    assert check(str(project), "--isolated").returncode == 0


def test_config_option_names_the_file_and_a_bad_one_is_a_usage_error(project, tmp_path):
    (project / ".hfdoctor.toml").write_text('fail-on = "warning"\n')
    mine = tmp_path / "mine.toml"
    mine.write_text('ignore = ["CARD"]\n')
    data = report(str(project), "--config", str(mine))
    assert "CARD002" not in codes(data) and data["config"]["file"] == str(mine)
    assert check(str(project), "--config", str(mine)).returncode == 0  # the repository's fail-on is not read
    mine.write_text('fail_on = "warning"\n')
    proc = check(str(project), "--config", str(mine))
    assert proc.returncode == 2 and "unknown key (did you mean 'fail-on'?)" in proc.stderr and proc.stdout == ""
    assert check(str(project), "--config", str(tmp_path / "none.toml")).returncode == 2


def test_a_repository_cannot_switch_off_what_protects_whoever_loads_it(project):
    """A downloaded repository whose own file ignores, re-grades and per-file-ignores its unsafe
    pickle still shows it as an error; the same file in the user's project silences it."""
    (project / "optimizer.pkl").write_bytes(PAYLOAD)
    hiding = 'ignore = ["SEC", "CARD"]\n[per-file-ignores]\n"*.pkl" = ["SEC001"]\n[severity]\nSEC001 = "info"\n'
    (project / ".hfdoctor.toml").write_text(hiding)
    data = report(str(project))
    assert codes(data).get("SEC001") == "error" and "CARD002" not in codes(data)
    assert check(str(project)).returncode == 1
    (project / ".hfdoctor.toml").unlink()
    (project.parent / ".hfdoctor.toml").write_text(hiding)  # the user's own project: honoured
    assert "SEC001" not in codes(report(str(project))) and check(str(project)).returncode == 0


def test_a_repository_cannot_hide_what_its_budget_left_unchecked(project):
    """40 templates: the 8 after the first 32 are not analysed (template-backdoor never reads them), which
    check-incomplete says; the repository's own file cannot ignore that, the user's configuration can."""
    extra = project / "additional_chat_templates"
    extra.mkdir()
    for i in range(40):
        (extra / f"t{i}.jinja").write_text("{% for m in messages %}{{ m['content'] }} v" + str(i) + "{% endfor %}")
    hiding = 'ignore = ["CFG007", "check-incomplete"]\n[severity]\nCFG007 = "info"\n'
    (project / ".hfdoctor.toml").write_text(hiding)
    assert codes(report(str(project))).get("CFG007") == "warning"
    (project / ".hfdoctor.toml").unlink()
    (project.parent / ".hfdoctor.toml").write_text(hiding)  # the user's own project: honoured
    assert "CFG007" not in codes(report(str(project)))


def test_engines_the_file_names_decide_what_is_targeted(copy_upstream):
    """SmolLM3-3B's template is only in chat_template.jinja, which TGI does not read (CMP001), and
    minijinja, TGI's engine, cannot compile it (TPL015): info, as nothing in the repository says
    it is served with TGI, until its configuration says so."""
    folder = copy_upstream("HuggingFaceTB--SmolLM3-3B")
    quiet = report(str(folder), "--select", "CMP001,TPL015")
    assert {(f["code"], f["severity"]) for f in quiet["findings"]} == {("CMP001", "info"), ("TPL015", "info")}
    (folder / ".hfdoctor.toml").write_text('engines = ["transformers-5", "tgi"]\n')
    loud = report(str(folder), "--select", "CMP001,TPL015")
    by_engine = {(f["code"], f["severity"]) for f in loud["findings"] if "tgi" in f["message"].rsplit("[", 1)[-1]}
    assert by_engine == {("CMP001", "warning"), ("TPL015", "warning")}, loud["findings"]
    assert all("the configuration (.hfdoctor.toml) names it" in f["severity_reason"]
               for f in loud["findings"] if f["severity"] == "warning")


def test_fix_reads_the_configuration_and_takes_several_targets(copy_upstream):
    """Two copies of Qwen3-8B whose generation_config.json stops on <|endoftext|> only (TOK004,
    safe fix): the one whose configuration ignores TOK004 is left as it is."""
    from conftest import read_json, write_json

    folders = [copy_upstream("Qwen--Qwen3-8B", name) for name in ("a", "b")]
    for folder in folders:
        config = read_json(folder / "generation_config.json")
        config["eos_token_id"] = 151643
        write_json(folder / "generation_config.json", config)
    (folders[1] / ".hfdoctor.toml").write_text('ignore = ["TOK004"]\n')
    before = (folders[1] / "generation_config.json").read_bytes()
    proc = run_cli("fix", *map(str, folders), "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert read_json(folders[0] / "generation_config.json")["eos_token_id"] != 151643
    assert (folders[1] / "generation_config.json").read_bytes() == before


def test_a_hub_repository_is_read_with_its_own_file_at_the_revision(monkeypatch, tmp_path):
    """A Hub repository has no pyproject: its .hfdoctor.toml, read at the revision checked,
    applies; it cannot name a directory on this machine."""
    from hub_server import FakeHub, HubRepo, folder_files

    from hfdoctor.config import Options
    from hfdoctor.findings import TargetError
    from hfdoctor.lint.check import check_target

    files = folder_files(LLAMA)
    repos = {"acme/plain": HubRepo(dict(files)),
             "acme/configured": HubRepo({**files, ".hfdoctor.toml":
                                         b'select = ["CARD"]\nignore = ["card-metadata"]\nfail-on = "info"\n'}),
             "acme/reaching": HubRepo({**files, ".hfdoctor.toml": b'upstream = ["/etc"]\n'})}
    server = FakeHub(repos).start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)  # no configuration file above the current directory
    try:
        options = Options(select=("CARD",))
        plain = check_target("acme/plain", options)
        configured = check_target("acme/configured", Options())  # the file's select: CARD only
        reaching = check_target("acme/reaching", options)
        isolated = check_target("acme/configured", Options(select=("CARD",), isolated=True))
    finally:
        server.stop()
    assert {f.code for f in plain.findings} == {"CARD002"} and "config" not in plain.sections
    assert configured.findings == [] and configured.sections["config"] == {
        "file": ".hfdoctor.toml", "fail_on": "info", "trusted": False}
    assert isinstance(reaching, TargetError) and "cannot name a directory on this machine" in reaching.message
    assert {f.code for f in isolated.findings} == {"CARD002"}


@pytest.mark.parametrize("make, says", [
    (lambda p: os.mkfifo(p), "not a regular file"),
    (lambda p: p.symlink_to("/etc/passwd"), "outside the repository"),
    (lambda p: p.write_bytes(b"# " + b"x" * (2 << 20)), "more than the"),
    (lambda p: p.write_text("a = " + "[" * 50_000 + "]" * 50_000 + "\n"), "not valid TOML"),
    (lambda p: p.write_bytes(b'select = ["\xff"]\n'), "not UTF-8"),
])
def test_a_hostile_configuration_file_is_exit_2_never_a_hang_or_a_read_outside(project, make, says):
    make(project / ".hfdoctor.toml")
    proc = check(str(project))
    assert proc.returncode == 2 and ".hfdoctor.toml" in proc.stdout and says in proc.stdout, proc.stdout


def test_a_configuration_of_many_entries_costs_each_selector_once_not_each_finding(tmp_path, monkeypatch):
    """A repository's own 1 MB .hfdoctor.toml (1,000 per-file-ignores globs of 90 selectors each) beside
    2,000 findings ran past 300 s: every finding matched every glob and every selector. Selectors are
    resolved to rule codes once; what is counted here is how often a rule is matched against a selector."""
    import hostile
    from hfdoctor.lint import configured
    from hfdoctor.lint.check import check_target
    from hfdoctor.knowledge.upstream import Upstream

    repo = hostile.build("many_findings", tmp_path / "case").target
    lines = ["[per-file-ignores]"]
    for i in range(60):  # (what the attack was, scaled down so that the old way fails within seconds)
        selectors = ", ".join(['"CFG001"'] * 20)
        lines.append(f'"{"*" * (i + 1)}tokenizer_config.json" = [{selectors}]')
    spellings = [f"{c}{f}{g}00{n}" for c in "cC" for f in "fF" for g in "gG" for n in range(1, 8)]  # distinct keys
    lines += ["[severity]", *(f'"{key}" = "{("info", "warning", "error")[i % 3]}"' for i, key in enumerate(spellings))]
    (repo / ".hfdoctor.toml").write_text("\n".join(lines) + "\n")
    calls = []
    real = configured.matches
    monkeypatch.setattr(configured, "matches", lambda rule, selector: calls.append(1) or real(rule, selector))
    if hasattr(configured, "_codes_of_selector"):
        configured._codes_of_selector.cache_clear()  # a cold cache: every selector resolved here
    result = check_target(str(repo), upstream=Upstream((), use_cache=False, use_hub=False))
    assert sum(f.code == "TOK002" for f in result.findings) == 2000  # nothing ignored that was not named
    assert len(calls) < 5_000, len(calls)
