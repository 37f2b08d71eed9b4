"""Model-file security verdicts on the corpus that re-creates the peers' test suites
(tests/corpus/make_model_files.py): every malicious sample is an error, every payload
stored as data is a warning, and no benign sample gets a warning or an error.

bench/bench_model_files.py prints the same verdicts side by side with modelaudit and
picklescan, and runs over the peers' own published test files when given a checkout.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from hfdoctor.lint.check import check_target
from hfdoctor.knowledge.upstream import Upstream
from conftest import TESTS

CORPUS = TESTS / "corpus"
OFFLINE = Upstream((), use_cache=False, use_hub=False)
LEVEL = {"info": 1, "warning": 2, "error": 3}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    import sys

    sys.path.insert(0, str(CORPUS))
    import make_model_files

    out = tmp_path_factory.mktemp("model-files")
    make_model_files.write(out)
    return out, json.loads((out / "MANIFEST.json").read_text())


def verdict(folder: Path) -> dict[str, str]:
    """rule -> the highest severity hfdoctor gives the sample repository."""
    report = check_target(str(folder), select=["SEC"], upstream=OFFLINE)
    assert not report.internal_errors, report.internal_errors
    worst: dict[str, str] = {}
    for f in report.findings:
        if LEVEL[str(f.severity)] > LEVEL.get(worst.get(f.rule, "info"), 0) or f.rule not in worst:
            worst[f.rule] = str(f.severity)
    return worst


def test_every_sample_gets_its_verdict(corpus):
    out, manifest = corpus
    wrong = []
    for sample in manifest:
        found = verdict(out / sample["name"])
        if sample["expect"] is None:
            loud = {rule: sev for rule, sev in found.items() if LEVEL[sev] >= LEVEL["warning"]}
            if loud:
                wrong.append((sample["name"], "benign, but", loud))
        else:
            rule, severity = sample["expect"]
            if LEVEL.get(found.get(rule, ""), 0) < LEVEL[severity]:
                wrong.append((sample["name"], f"expected {rule} {severity}", found))
    assert not wrong, wrong


def test_the_corpus_covers_every_class(corpus):
    """Malicious, data-only and benign samples of every kind issue 20 names, each with provenance."""
    _, manifest = corpus
    labels = {s["label"] for s in manifest}
    assert labels == {"malicious", "embedded", "benign"}
    assert all(s["provenance"] for s in manifest)
    files = {s["file"].rsplit(".", 1)[-1] for s in manifest}
    assert {"pkl", "bin", "pt", "ckpt", "dill", "joblib", "npy", "npz", "gz", "bz2", "xz", "zip", "tar", "7z", "keras",
            "h5", "onnx", "pb"} <= files
    names = {s["name"] for s in manifest}
    for trick in ("pickle-before-zip", "zip-bad-crc", "zip-name-mismatch", "pth-tar-legacy", "load-from-bytes",
                  "frame-split", "legacy-torch-later-stream", "training-args", "sklearn-forest", "builtins-len"):
        assert trick in names


def test_an_empty_state_dict_holds_no_tensor_and_a_real_one_does(tmp_path):
    """torch.save({}) (zip and legacy formats: PEFT's 443-byte adapter_model.bin) loads no storage;
    a state dict of one tensor loads one, and an OrderedDict of none is still empty."""
    torch = pytest.importorskip("torch")
    from hfdoctor.modelfiles.scan import scan_file

    cases = {"zip.bin": ({}, True), "legacy.bin": ({}, False), "ordered.bin": (collections.OrderedDict(), True),
             "tensor.bin": ({"lora_A.weight": torch.zeros(2, 3)}, True)}
    for name, (state, zip_format) in cases.items():
        torch.save(state, tmp_path / name, _use_new_zipfile_serialization=zip_format)
        scan = scan_file(tmp_path / name)
        assert scan.holds_no_tensor is (name != "tensor.bin"), (name, scan)
    (tmp_path / "cut.bin").write_bytes((tmp_path / "tensor.bin").read_bytes()[:600])
    assert scan_file(tmp_path / "cut.bin").truncated_zip and not scan_file(tmp_path / "tensor.bin").truncated_zip
