"""`hfdoctor fix`: minimal, exact, atomic.

The seed incident (../shared/seeds/000_*): a Qwen3 checkpoint without chat_template and
with a card naming meta-llama/Meta-Llama-3.1-8B. The repair is two edits and nothing
else. Every upstream folder whose tokenizer_config.json carries its family's pinned
template must come back byte for byte after its chat_template is cut out.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from conftest import UPSTREAM, check_json, rules_fired, run_cli
from hfdoctor.lint.edits import json_spans as jsonedit
from hfdoctor.bounded import jsontext
from hfdoctor.knowledge import registry
from hfdoctor.findings import Edit, Severity
from hfdoctor.lint.edits.apply import EditConflict, apply_edits
from hfdoctor.lint.edits.card_edits import card_set_base_model
from hfdoctor.lint.edits.template_edits import missing_template_fix
from hfdoctor.fix import run_fix
from hfdoctor.fix.plan import plan_fixes
from hfdoctor.fix.write import UnsafeWrite, writable_path, write_changes
from hfdoctor.report.text import Display
from hfdoctor.repo import ModelRepo
from hfdoctor.knowledge import upstream as upstream_mod
from hfdoctor.knowledge.upstream import Upstream, canonical_template
from hfdoctor.bounded import memo

QWEN3 = UPSTREAM / "Qwen--Qwen3-8B"
QWEN3_HYBRID = registry.family("qwen3").variant("hybrid")
OFFLINE_UPSTREAM = Upstream((UPSTREAM,), use_cache=False, use_hub=False)


def writable_copy(src: Path, dest: Path, skip: tuple[str, ...] = ()) -> Path:
    """A copy the test may write (the shared data is read-only, and so would be a copytree of it)."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(*skip), copy_function=shutil.copyfile)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def cut_member(path: Path, pointer: str) -> None:
    """Remove a JSON member textually: its bytes and its comma, nothing else."""
    data = path.read_bytes()
    start, end = jsonedit.member_removal_span(data, pointer)
    path.write_bytes(data[:start] + data[end:])


def make_seed_replica(dest: Path) -> Path:
    """Qwen3-8B with no chat template anywhere and a card that names Llama 3.1 as base."""
    repo = writable_copy(QWEN3, dest, skip=("chat_template.jinja",))
    cut_member(repo / "tokenizer_config.json", "/chat_template")
    card = (repo / "README.md").read_text(encoding="utf-8")
    assert "base_model:\n- Qwen/Qwen3-8B-Base\n" in card
    (repo / "README.md").write_text(card.replace("base_model:\n- Qwen/Qwen3-8B-Base\n",
                                                 "base_model: meta-llama/Meta-Llama-3.1-8B\n"), encoding="utf-8")
    return repo


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file's bytes, mtime and mode."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            st = path.stat()
            out[path.relative_to(root).as_posix()] = (path.read_bytes(), st.st_mtime_ns, stat.S_IMODE(st.st_mode))
    return out


def fix_in_process(target: Path, *, diff=False, unsafe=False, select=(), fmt="text", upstream=OFFLINE_UPSTREAM):
    out = io.StringIO()
    code = run_fix(str(target), diff=diff, unsafe_fixes=unsafe, select=list(select), ignore=[], upstream=upstream,
                   fail_on=Severity.ERROR, output_format=fmt, console=Console(file=out, width=300, highlight=False),
                   display=Display(verbose=True))  # whole messages: the tests read them
    return code, out.getvalue()


@pytest.fixture(autouse=True)
def fresh_template_lookups():
    """canonical templates are memoised per Upstream value; tests change HF_HUB_CACHE under it."""
    memo.clear()
    yield
    memo.clear()


@pytest.fixture
def replica(tmp_path) -> Path:
    return make_seed_replica(tmp_path / "friendli-broken-model")


# --- the seed incident ------------------------------------------------------------------------


def test_replica_lineage_is_qwen3_8b(replica):
    report, _ = check_json(replica)
    assert report["lineage"]["family"] == "qwen3"
    assert report["lineage"]["base_model"] == "Qwen/Qwen3-8B"
    assert {"missing-chat-template", "base-model-mismatch"} <= rules_fired(report)


def test_seed_incident_is_repaired_with_exactly_two_edits(replica):
    before = snapshot(replica)
    proc = run_cli("fix", str(replica), "--upstream", str(UPSTREAM))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    after = snapshot(replica)

    assert set(after) == set(before), "no file created or removed"
    changed = {rel for rel in before if after[rel][0] != before[rel][0]}
    assert changed == {"tokenizer_config.json", "README.md"}
    for rel in changed:
        assert after[rel][2] == before[rel][2], "file mode kept"

    # tokenizer_config.json: the exact upstream template, every other key and value unchanged,
    # and (since upstream was saved by transformers) the very bytes of the upstream file.
    old = json.loads(before["tokenizer_config.json"][0])
    new = json.loads(after["tokenizer_config.json"][0])
    upstream_template = (QWEN3 / "chat_template.jinja").read_text(encoding="utf-8")
    assert new.pop("chat_template") == upstream_template
    assert new == old and list(new) == list(old)
    assert after["tokenizer_config.json"][0] == (QWEN3 / "tokenizer_config.json").read_bytes()

    # README.md: one line.
    old_lines = before["README.md"][0].decode().splitlines(keepends=True)
    new_lines = after["README.md"][0].decode().splitlines(keepends=True)
    assert len(old_lines) == len(new_lines)
    differing = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
    assert differing == [("base_model: meta-llama/Meta-Llama-3.1-8B\n", "base_model: Qwen/Qwen3-8B\n")]

    assert "fixed CARD001" in proc.stdout and "fixed TPL001" in proc.stdout

    # A second run changes nothing, and check no longer reports either rule.
    again = run_cli("fix", str(replica), "--upstream", str(UPSTREAM))
    assert again.returncode == 0 and "nothing to fix" in again.stdout
    assert snapshot(replica) == after
    report, proc = check_json(replica, "--upstream", str(UPSTREAM))
    assert not {"missing-chat-template", "base-model-mismatch"} & rules_fired(report)
    assert report["lineage"]["base_model"] == "Qwen/Qwen3-8B"


def test_diff_writes_nothing_and_prints_a_patch_that_applies(replica, tmp_path):
    before = snapshot(replica)
    proc = run_cli("fix", str(replica), "--diff", "--upstream", str(UPSTREAM))
    assert snapshot(replica) == before, "--diff must not write (not even mtimes)"
    # exit 0: the diff fixes every error; the summary ends with one line, not a whole report
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("nothing at or above error would be left"), proc.stderr
    assert "lineage:" not in proc.stderr and "left after" not in proc.stderr
    patch = proc.stdout
    assert patch.startswith("--- a/README.md\n+++ b/README.md\n")
    assert "-base_model: meta-llama/Meta-Llama-3.1-8B\n+base_model: Qwen/Qwen3-8B\n" in patch
    assert "+++ b/tokenizer_config.json\n" in patch and '+  "chat_template": "{%- if tools %}' in patch
    assert "would fix" in proc.stderr  # the summary goes to stderr, so stdout is only the patch

    # Applying the printed patch gives exactly what `fix` writes.
    patched = make_seed_replica(tmp_path / "patched")
    applied = subprocess.run(["git", "apply", "-p1", "-"], input=patch, text=True, cwd=patched, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    fixed = make_seed_replica(tmp_path / "fixed")
    assert fix_in_process(fixed)[0] == 0
    assert {k: v[0] for k, v in snapshot(patched).items()} == {k: v[0] for k, v in snapshot(fixed).items()}


def test_json_summary(replica):
    proc = run_cli("fix", str(replica), "--format", "json", "--upstream", str(UPSTREAM))
    assert proc.returncode == 0
    out = json.loads(proc.stdout)
    assert out["summary"]["error"] == 0 and out["lineage"]["base_model"] == "Qwen/Qwen3-8B"
    assert not {"TPL001", "CARD001"} & {f["code"] for f in out["findings"]}
    assert {f["code"] for f in out["fixes"]["applied"]} == {"TPL001", "CARD001"}
    assert out["fixes"]["files"] == ["README.md", "tokenizer_config.json"] and out["fixes"]["written"] is True

    dry = make_seed_replica(replica.parent / "dry")
    proc = run_cli("fix", str(dry), "--format", "json", "--diff", "--upstream", str(UPSTREAM))
    out = json.loads(proc.stdout)
    assert out["fixes"]["written"] is False and len(out["fixes"]["planned"]) == 2
    assert out["diff"].startswith("--- a/README.md")
    assert out["summary"]["error"] == 0  # what would be left once the diff is applied


def test_check_never_writes(replica):
    before = snapshot(replica)
    check_json(replica, "--upstream", str(UPSTREAM))
    assert snapshot(replica) == before


def test_fix_works_offline_with_nothing_but_hfdoctor(replica, tmp_path):
    """Issue 11: no Hub, no cache, no --upstream: the shipped canonical template is written,
    byte-equal to upstream's, plus the card line, and nothing else."""
    env = {"HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HFDOCTOR_UPSTREAM": "", "HF_HUB_OFFLINE": "1"}
    before = snapshot(replica)
    report = json.loads(run_cli("check", str(replica), "--format", "json", env=env).stdout)
    tpl = next(f for f in report["findings"] if f["code"] == "TPL001")
    assert tpl["fix"] == {"applicability": "safe", "title": "insert the upstream Qwen/Qwen3-8B template"}
    proc = run_cli("fix", str(replica), env=env)
    assert proc.returncode == 0 and "fixed TPL001" in proc.stdout and "fixed CARD001" in proc.stdout, proc.stdout
    upstream_text = json.loads((QWEN3 / "tokenizer_config.json").read_bytes())["chat_template"]
    assert json.loads((replica / "tokenizer_config.json").read_bytes())["chat_template"] == upstream_text
    after = snapshot(replica)
    assert {k for k in after if after[k] != before.get(k)} == {"tokenizer_config.json", "README.md"}
    # An --upstream folder (or HFDOCTOR_UPSTREAM) overrides the shipped text: a newer revision.
    lookup = canonical_template(Upstream((UPSTREAM,), use_cache=False, use_hub=False), QWEN3_HYBRID)
    assert lookup.pinned and str(UPSTREAM) in lookup.source


# --- every pinned upstream template round-trips ------------------------------------------------


def pinned_template_folders() -> list[str]:
    """Upstream folders whose tokenizer_config.json chat_template is a registry pin."""
    pins = {v.template.sha256 for _, v in registry.all_variants() if v.template}
    found = []
    for folder in sorted(UPSTREAM.iterdir()):
        path = folder / "tokenizer_config.json"
        if path.is_file():
            template = json.loads(path.read_bytes()).get("chat_template")
            if isinstance(template, str) and hashlib.sha256(template.encode()).hexdigest() in pins:
                found.append(folder.name)
    return found


# Real reasons a folder cannot come back byte for byte:
NOT_BYTE_EXACT = {
    # chat_template was appended by hand after an otherwise sorted key list; the fixer
    # puts a new key in its sorted place (where save_pretrained writes it).
    "mistralai--Mistral-7B-Instruct-v0.2": "hand-appended out of sorted order",
}


def test_pinned_folders_are_the_expected_ones():
    # DeepSeek-R1's tokenizer_config.json carries the January template; the pin is the
    # February one (its chat_template.jinja), so those folders are not in this list.
    expected = {"Qwen--Qwen3-8B", "Qwen--Qwen2.5-Coder-32B-Instruct", "meta-llama--Llama-3.1-8B-Instruct",
                "mistralai--Mistral-7B-Instruct-v0.3", "microsoft--phi-4", "google--gemma-2b-it"}
    assert expected <= set(pinned_template_folders())


@pytest.mark.parametrize("folder", pinned_template_folders())
def test_cut_template_is_restored_byte_for_byte(folder, tmp_path):
    original = (UPSTREAM / folder / "tokenizer_config.json").read_bytes()
    repo = writable_copy(UPSTREAM / folder, tmp_path / folder, skip=("chat_template.jinja", "*.safetensors"))
    cut_member(repo / "tokenizer_config.json", "/chat_template")
    code, out = fix_in_process(repo, select=["TPL001"])
    assert code == 0, out
    restored = (repo / "tokenizer_config.json").read_bytes()
    if folder in NOT_BYTE_EXACT:
        assert json.loads(restored) == json.loads(original)
        keys = list(json.loads(restored))
        assert keys == sorted(keys), "inserted in sorted place"
    else:
        assert restored == original
    assert fix_in_process(repo, select=["TPL001"])[1].count("nothing to fix") == 1


@pytest.mark.parametrize("folder", ["HuggingFaceTB--SmolLM3-3B", "openai--gpt-oss-20b"])
def test_jinja_upstream_template_is_recreated_as_jinja(folder, tmp_path):
    """Families whose upstream keeps the template in chat_template.jinja get it there."""
    original = (UPSTREAM / folder / "chat_template.jinja").read_bytes()
    repo = writable_copy(UPSTREAM / folder, tmp_path / folder, skip=("chat_template.jinja", "history"))
    before = snapshot(repo)
    code, out = fix_in_process(repo, select=["TPL001"])
    assert code == 0, out
    assert (repo / "chat_template.jinja").read_bytes() == original
    after = snapshot(repo)
    assert {k: v for k, v in after.items() if k != "chat_template.jinja"} == before


def test_template_goes_to_jinja_where_the_repo_keeps_jinja_templates(tmp_path):
    repo_dir = make_seed_replica(tmp_path / "r")
    (repo_dir / "additional_chat_templates").mkdir()
    (repo_dir / "additional_chat_templates" / "tool_use.jinja").write_text("{{ messages }}")
    repo = ModelRepo(repo_dir, upstream=OFFLINE_UPSTREAM)
    fix, note = missing_template_fix(repo, QWEN3_HYBRID)
    assert note == "Fix: insert the upstream Qwen/Qwen3-8B template as chat_template.jinja."
    (edit,) = fix.edits
    assert edit == Edit("chat_template.jinja", 0, 0, (QWEN3 / "chat_template.jinja").read_text(), create=True)
    # Without tokenizer_config.json too.
    (repo_dir / "tokenizer_config.json").unlink()
    shutil.rmtree(repo_dir / "additional_chat_templates")
    fix, _ = missing_template_fix(ModelRepo(repo_dir, upstream=OFFLINE_UPSTREAM), QWEN3_HYBRID)
    assert fix.edits[0].file == "chat_template.jinja" and fix.edits[0].create


def test_template_fix_note_when_not_found(tmp_path, monkeypatch):
    """A variant whose template does not ship (a broken install) and is found nowhere else."""
    monkeypatch.setattr(upstream_mod, "_shipped_manifest", lambda: {})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    repo = ModelRepo(make_seed_replica(tmp_path / "r"), upstream=Upstream((), use_cache=True, use_hub=False))
    fix, note = missing_template_fix(repo, QWEN3_HYBRID)
    assert fix is None and "--upstream DIR" in note and "HFDOCTOR_UPSTREAM" in note and "Qwen--Qwen3-8B" in note


# --- the other fixes ------------------------------------------------------------------------------


def test_eos_int_becomes_a_list_with_the_end_of_turn_id(tmp_path):
    repo = writable_copy(QWEN3, tmp_path / "q", skip=("README.md",))
    gen = repo / "generation_config.json"
    original = gen.read_bytes()
    start, end = jsontext.locate(original, "/eos_token_id")
    gen.write_bytes(original[:start] + b"151643" + original[end:])  # <|endoftext|> only, as a number
    proc = run_cli("fix", str(repo))
    assert proc.returncode == 0, proc.stdout
    assert "fixed TOK004" in proc.stdout
    data = gen.read_bytes()
    assert json.loads(data)["eos_token_id"] == [151643, 151645]
    # Laid out like the file (4-space indentation, one id per line), nothing else touched.
    expected = original[:start] + b"[\n        151643,\n        151645\n    ]" + original[end:]
    assert data == expected
    assert "nothing to fix" in run_cli("fix", str(repo)).stdout


def test_eos_list_gets_the_end_of_turn_id_appended(tmp_path):
    repo = writable_copy(UPSTREAM / "meta-llama--Llama-3.1-8B-Instruct", tmp_path / "l", skip=("original",))
    gen = repo / "generation_config.json"
    original = gen.read_bytes()
    items = jsontext.array_items(original, jsontext.locate(original, "/eos_token_id")[0])
    gen.write_bytes(original[: items[-2][1]] + original[items[-1][1] :])  # drop 128009 <|eot_id|>
    code, out = fix_in_process(repo, select=["TOK004"])
    assert code == 0, out
    assert gen.read_bytes() == original


def test_template_conflict_is_fixed_only_with_unsafe_fixes(tmp_path):
    repo = writable_copy(QWEN3, tmp_path / "q")
    config = repo / "tokenizer_config.json"
    original = config.read_bytes()
    stale = json.loads(original)["chat_template"].replace("<tool_call>", "<tools>")
    splice = jsonedit.set_value(original, "/chat_template", stale, jsonedit.detect_style(original))
    config.write_bytes(splice.apply(original))
    edited = config.read_bytes()

    code, out = fix_in_process(repo, select=["TPL002"])
    assert code == 0  # a warning, below the default --fail-on error
    assert "nothing to fix" in out and "1 more fix(es) available with --unsafe-fixes" in out
    assert config.read_bytes() == edited

    code, out = fix_in_process(repo, select=["TPL002"], unsafe=True)
    assert code == 0 and "fixed TPL002" in out
    assert config.read_bytes() == original  # the copy now equals chat_template.jinja, which transformers uses


def test_card_edits_change_only_the_base_model_lines(tmp_path):
    cases = {
        "scalar": ("base_model: meta-llama/Llama-3.1-8B\n", "base_model: Qwen/Qwen3-8B\n"),
        "quoted + comment": ("base_model: 'meta-llama/Llama-3.1-8B'  # the base\n",
                             "base_model: 'Qwen/Qwen3-8B'  # the base\n"),
        "flow list": ("base_model: [meta-llama/Llama-3.1-8B]\n", "base_model: [Qwen/Qwen3-8B]\n"),
        "block list": ("base_model:\n- meta-llama/Llama-3.1-8B\n- x/y\n", "base_model:\n- Qwen/Qwen3-8B\n"),
        "indented block list": ("base_model:\n  - meta-llama/Llama-3.1-8B\n", "base_model:\n  - Qwen/Qwen3-8B\n"),
        "null": ("base_model:\n", "base_model: Qwen/Qwen3-8B\n"),
        "absent": ("", "base_model: Qwen/Qwen3-8B\n"),
    }
    for name, (old, new) in cases.items():
        head, tail = "---\nlicense: apache-2.0\n", "tags:\n- chat\n---\n# Card\n\nbase_model: in the body is prose\n"
        if name == "absent":
            head, tail = "---\nlicense: apache-2.0\ntags:\n- chat\n", "---\n# Card\n"
        text = head + old + tail
        path = tmp_path / name / "README.md"
        path.parent.mkdir()
        path.write_bytes(text.encode())
        edit = card_set_base_model(ModelRepo(path.parent), "Qwen/Qwen3-8B")
        assert edit is not None, name
        assert apply_edits(text.encode(), [edit]).decode() == head + new + tail, name


def test_card_edit_keeps_crlf_and_declines_what_it_cannot_edit_line_wise(tmp_path):
    def edit_of(text: str):
        path = tmp_path / "README.md"
        path.write_bytes(text.encode())
        edit = card_set_base_model(ModelRepo(tmp_path), "Qwen/Qwen3-8B")
        return None if edit is None else apply_edits(text.encode(), [edit]).decode()

    assert edit_of("---\r\nlicense: mit\r\n---\r\nbody\r\n") == "---\r\nlicense: mit\r\nbase_model: Qwen/Qwen3-8B\r\n---\r\nbody\r\n"
    assert edit_of("# no front matter\n") == "---\nbase_model: Qwen/Qwen3-8B\n---\n# no front matter\n"
    assert edit_of("---\nbase_model: Qwen/Qwen3-8B\n---\n") is None  # already right
    assert edit_of("---\nbase_model: |\n  meta-llama/x\n---\n") is None  # block scalar
    assert edit_of("---\nbase_model:\n  name: x\n---\n") is None  # a mapping


# --- edits and writes ---------------------------------------------------------------------------


def test_apply_edits_back_to_front_and_rejects_overlaps():
    data = b"0123456789"
    assert apply_edits(data, [Edit("f", 1, 2, "a"), Edit("f", 5, 5, "XY"), Edit("f", 8, 10, "")]) == b"0a234XY567"
    with pytest.raises(EditConflict):
        apply_edits(data, [Edit("f", 1, 4, "a"), Edit("f", 3, 5, "b")])
    with pytest.raises(EditConflict):
        apply_edits(data, [Edit("f", 2, 2, "a"), Edit("f", 2, 2, "b")])  # order unknown
    with pytest.raises(EditConflict):
        apply_edits(data, [Edit("f", 9, 12, "a")])


def test_refuses_symlinks_that_leave_the_repository(replica, tmp_path):
    outside = tmp_path / "elsewhere.md"
    outside.write_bytes((replica / "README.md").read_bytes())
    (replica / "README.md").unlink()
    (replica / "README.md").symlink_to(outside)
    code, out = fix_in_process(replica)
    assert code == 1  # the link is left: the card behind it is never read, so never edited
    assert "symlink-outside-repo" in out and "outside the repository" in out
    assert outside.read_bytes().count(b"meta-llama/Meta-Llama-3.1-8B") == 1
    assert (replica / "README.md").is_symlink()
    assert "chat_template" in json.loads((replica / "tokenizer_config.json").read_bytes())  # the rest is fixed
    with pytest.raises(UnsafeWrite):
        writable_path(replica, "README.md")
    for bad in ("model.safetensors", "../x.json", "/etc/passwd", "sub/pytorch_model.bin"):
        with pytest.raises(UnsafeWrite):
            writable_path(replica, bad)


def test_writes_through_a_symlink_inside_the_repository(replica):
    (replica / "docs").mkdir()
    (replica / "README.md").rename(replica / "docs" / "card.md")
    (replica / "README.md").symlink_to(Path("docs") / "card.md")
    assert fix_in_process(replica)[0] == 0
    assert (replica / "README.md").is_symlink()
    assert b"base_model: Qwen/Qwen3-8B\n" in (replica / "docs" / "card.md").read_bytes()


def test_keeps_file_modes(replica):
    (replica / "tokenizer_config.json").chmod(0o640)
    (replica / "README.md").chmod(0o600)
    assert fix_in_process(replica)[0] == 0
    assert stat.S_IMODE((replica / "tokenizer_config.json").stat().st_mode) == 0o640
    assert stat.S_IMODE((replica / "README.md").stat().st_mode) == 0o600


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.name.endswith(".hfdoctor.tmp")]


def test_a_failing_rename_leaves_every_file_old(replica, monkeypatch):
    before = snapshot(replica)
    plan = plan_fixes(replica, upstream=OFFLINE_UPSTREAM)
    assert sorted(plan.changed) == ["README.md", "tokenizer_config.json"]
    real_replace = os.replace
    calls = []

    def replace_then_fail(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_then_fail)
    with pytest.raises(OSError):
        write_changes(plan.root, plan.changed, plan.original)
    monkeypatch.setattr(os, "replace", real_replace)
    assert {k: v[0] for k, v in snapshot(replica).items()} == {k: v[0] for k, v in before.items()}
    assert temp_files(replica) == []

    # Through the command: exit 2, nothing written, and a later run succeeds.
    monkeypatch.setattr(os, "replace", replace_then_fail)
    calls.clear()
    code, out = fix_in_process(replica)
    monkeypatch.setattr(os, "replace", real_replace)
    assert code == 2 and "nothing written" in out
    assert {k: v[0] for k, v in snapshot(replica).items()} == {k: v[0] for k, v in before.items()}
    assert fix_in_process(replica)[0] == 0


def test_a_read_only_directory_is_an_error_not_a_traceback(replica, monkeypatch):
    before = snapshot(replica)
    if os.geteuid() == 0:  # root writes anywhere: refuse as the directory refuses anyone else
        def refuse(*args, dir=None, **kwargs):
            raise PermissionError(13, "Permission denied", os.path.join(dir, ".README.md.x.hfdoctor.tmp"))

        monkeypatch.setattr(tempfile, "mkstemp", refuse)
    replica.chmod(0o555)
    try:
        code, out = fix_in_process(replica)
    finally:
        replica.chmod(0o755)
    assert code == 2
    assert "error: nothing written: cannot write README.md: Permission denied" in out
    assert "left (nothing was written):" in out and "fixed CARD001" not in out
    assert snapshot(replica) == before


def test_a_failure_while_staging_leaves_nothing_behind(replica, monkeypatch):
    before = snapshot(replica)

    def no_fsync(fd):
        raise KeyboardInterrupt  # the user pressed ^C while the data was being synced

    plan = plan_fixes(replica, upstream=OFFLINE_UPSTREAM)
    monkeypatch.setattr(os, "fsync", no_fsync)
    with pytest.raises(KeyboardInterrupt):
        write_changes(plan.root, plan.changed, plan.original)
    assert snapshot(replica) == before and temp_files(replica) == []


def test_killed_between_renames_every_file_is_old_or_new(replica):
    """SIGKILL in the middle of writing (no cleanup can run): each file is whole."""
    old = {k: v[0] for k, v in snapshot(replica).items()}
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from hfdoctor.fix import plan as fix_plan, write as fix_write
        from hfdoctor.knowledge.upstream import Upstream
        real_replace, calls = os.replace, []
        def replace(src, dst):
            calls.append(dst)
            if len(calls) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            real_replace(src, dst)
        os.replace = replace
        plan = fix_plan.plan_fixes({str(replica)!r}, upstream=Upstream((Path({str(UPSTREAM)!r}),), use_cache=False, use_hub=False))
        assert not plan.internal_errors and len(plan.changed) == 2, plan
        fix_write.write_changes(plan.root, plan.changed, plan.original)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    now = {k: v[0] for k, v in snapshot(replica).items() if not k.endswith(".hfdoctor.tmp")}
    assert set(now) == set(old)
    fixed = make_seed_replica(replica.parent / "reference")
    assert fix_in_process(fixed)[0] == 0
    new = {k: v[0] for k, v in snapshot(fixed).items()}
    assert all(now[rel] in (old[rel], new[rel]) for rel in now)
    assert now["README.md"] == new["README.md"] and now["tokenizer_config.json"] == old["tokenizer_config.json"]
    # The interrupted repo is finished by the next run.
    for tmp in temp_files(replica):
        tmp.unlink()
    assert fix_in_process(replica)[0] == 0
    assert {k: v[0] for k, v in snapshot(replica).items()} == new


def test_a_file_changed_since_planning_is_not_overwritten(replica):
    plan = plan_fixes(replica, upstream=OFFLINE_UPSTREAM)
    (replica / "README.md").write_text("edited meanwhile\n")
    with pytest.raises(OSError, match="changed on disk"):
        write_changes(plan.root, plan.changed, plan.original)
    assert (replica / "README.md").read_text() == "edited meanwhile\n"


def test_what_a_fix_reveals_is_fixed_in_the_next_pass_of_the_same_run(tmp_path):
    """check shows TPL001 and CARD001 as fixable; the eos problem (TOK004) exists only once a
    template does. One run fixes the first two in pass 1 and TOK004 in pass 2, saying which pass
    revealed it; --diff shows that whole result; a second run finds nothing to fix."""
    repo = make_seed_replica(tmp_path / "r")
    gen = repo / "generation_config.json"
    data = gen.read_bytes()
    start, end = jsontext.locate(data, "/eos_token_id")
    gen.write_bytes(data[:start] + b"151643" + data[end:])
    report, _ = check_json(repo)
    shown = {f["code"] for f in report["findings"] if f["fix"] and f["fix"]["applicability"] == "safe"}
    assert shown == {"TPL001", "CARD001"}

    preview = run_cli("fix", str(repo), "--diff")
    assert preview.returncode == 0, preview.stderr
    assert "+++ b/generation_config.json" in preview.stdout and "(2 passes)" in preview.stderr
    assert "would fix TOK004 eos-not-end-of-turn generation_config.json" in preview.stderr

    code, out = fix_in_process(repo)
    assert code == 0, out
    lines = out.splitlines()
    assert lines.index("  pass 1:") < lines.index("  pass 2:")
    fixed = {line.split()[1]: i for i, line in enumerate(lines) if line.startswith("  fixed")}
    assert set(fixed) == shown | {"TOK004"} and fixed["TOK004"] > lines.index("  pass 2:"), out
    assert "(revealed by pass 1)" in lines[fixed["TOK004"]]
    assert json.loads(gen.read_bytes())["eos_token_id"] == [151643, 151645]
    before = snapshot(repo)
    code, out = fix_in_process(repo)
    assert code == 0 and "nothing to fix" in out
    assert snapshot(repo) == before


def test_fix_fixes_what_check_shows_on_gemma_and_what_that_reveals(copy_upstream):
    """gemma-2b-it: check shows one fixable finding (TOK004); fixing it makes config.json's eos
    disagree with generation_config.json (CFG004, info), which the second pass fixes."""
    repo = copy_upstream("google--gemma-2b-it")
    for path in repo.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    report, _ = check_json(repo)
    shown = [f["code"] for f in report["findings"] if f["fix"] and f["fix"]["applicability"] == "safe"]
    assert shown == ["TOK004"]
    out = json.loads(run_cli("fix", str(repo), "--format", "json").stdout)
    assert [(f["code"], f["pass"]) for f in out["fixes"]["applied"]] == [("TOK004", 1), ("CFG004", 2)]
    assert out["fixes"]["passes"] == 2 and [f["code"] for f in out["fixes"]["revealed"]] == ["CFG004"]
    assert out["fixes"]["unfinished"] == []
    config, generation = (json.loads((repo / name).read_text()) for name in ("config.json", "generation_config.json"))
    assert config["eos_token_id"] == generation["eos_token_id"] == [1, 107]
    assert not [f for f in out["findings"] if f["fix"]]


def test_template_fix_diff_shows_the_template_as_text(copy_upstream, tmp_path):
    """The unsafe copy of chat_template.jinja into tokenizer_config.json: the JSON edit is one
    escaped line; the diff also shows the template's own lines, commented, and still applies."""
    repo = copy_upstream("openai--gpt-oss-20b")
    for path in repo.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    proc = run_cli("fix", str(repo), "--diff", "--unsafe-fixes", "--select", "consumer-incompatible")
    assert proc.returncode == 0, proc.stderr
    patch = proc.stdout
    assert patch.startswith("# tokenizer_config.json /chat_template as text")
    template = (repo / "chat_template.jinja").read_text()
    first_lines = [line for line in template.splitlines() if line.strip()][:3]
    assert all(f"# +{line}\n" in patch for line in first_lines)
    assert '+  "chat_template": "' in patch  # the exact JSON edit
    applied = subprocess.run(["git", "apply", "-p1", "-"], input=patch, text=True, cwd=repo, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    assert json.loads((repo / "tokenizer_config.json").read_text())["chat_template"] == template


@pytest.mark.parametrize("old_end,new_end", [("", ""), ("", "\n"), ("\n", ""), ("\n", "\n")])
def test_diff_marks_a_missing_final_newline_and_applies(tmp_path, old_end, new_end):
    """Every line of the diff ends with a newline (the summary never runs into it), a file
    without one is marked "\\ No newline at end of file", and git apply gives the new text."""
    from hfdoctor.report.diff import unified_diff

    old = '{\n  "a": 1,\n  "b": 2\n}' + old_end
    new = '{\n  "a": 1,\n  "b": 3\n}' + new_end
    (tmp_path / "x.json").write_text(old)
    patch = unified_diff({"x.json": old.encode()}, {"x.json": new.encode()})
    assert patch.endswith("\n") and (("\\ No newline at end of file\n" in patch) == (not old_end or not new_end))
    applied = subprocess.run(["git", "apply", "-p1", "-"], input=patch, text=True, cwd=tmp_path, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    assert (tmp_path / "x.json").read_text() == new


def test_template_found_in_the_local_hf_cache(tmp_path, monkeypatch):
    """Offline, no --upstream: a snapshot in the Hugging Face cache is enough."""
    cache = tmp_path / "hub"
    snapshot_dir = cache / "models--Qwen--Qwen3-8B" / "snapshots" / "0123abcd"
    snapshot_dir.mkdir(parents=True)
    shutil.copyfile(QWEN3 / "tokenizer_config.json", snapshot_dir / "tokenizer_config.json")
    (cache / "models--Qwen--Qwen3-8B" / "refs").mkdir()
    (cache / "models--Qwen--Qwen3-8B" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    repo = make_seed_replica(tmp_path / "r")
    code, out = fix_in_process(repo, select=["TPL001"], upstream=Upstream((), use_cache=True, use_hub=False))
    assert code == 0, out
    assert (repo / "tokenizer_config.json").read_bytes() == (QWEN3 / "tokenizer_config.json").read_bytes()


# --- the template text diff reads untrusted JSON ------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(old=st.one_of(st.none(), st.binary(max_size=200), JSON_VALUES.map(lambda v: json.dumps(v).encode())),
       new=st.one_of(st.binary(max_size=200), JSON_VALUES.map(lambda v: json.dumps(v).encode())))
def test_text_diffs_takes_any_bytes(old, new):
    """Any two versions of a JSON file (invalid, deep, lone surrogates): only `# ` comment lines
    (never a line git apply would read as a patch), or nothing; never an exception."""
    from hfdoctor.report.diff import text_diffs

    for line in text_diffs("x.json", old, new):
        assert line.startswith("# ") and line.endswith("\n") and "\n" not in line[:-1]
        line.encode("utf-8")  # printable: no lone surrogate from a "\ud800" escape


def test_text_diffs_show_a_changed_template_line_by_line():
    from hfdoctor.report.diff import text_diffs

    old = json.dumps({"chat_template": "{% for m in messages %}\n{{ m.content }}\n{% endfor %}"}).encode()
    new = json.dumps({"chat_template": "{% for m in messages %}\n{{ m.content | trim }}\n{% endfor %}"}).encode()
    lines = text_diffs("tokenizer_config.json", old, new)
    assert lines[0].startswith("# tokenizer_config.json /chat_template as text")
    assert "# -{{ m.content }}\n" in lines and "# +{{ m.content | trim }}\n" in lines
    assert text_diffs("t.json", b'{"eos_token": "a"}', b'{"eos_token": "b"}') == []  # one-line strings: the JSON diff says it
    surrogate = text_diffs("t.json", b'{"t": "a\\nb"}', b'{"t": "a\\n\\ud800"}')
    assert "# +\ufffd\n" in surrogate
