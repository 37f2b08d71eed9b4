"""What modelaudit flags and hfdoctor missed (issue 40, §7): Keras Lambda layers in .h5 and
.keras files, a TensorFlow PyFunc, ONNX external data that leads outside the model, and a
pickle whose frames disagree with its opcodes. Each is built here the way its writer
writes it (h5py for HDF5), and each was silent (or a warning, exit 0) before.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
import zipfile

import pytest

from conftest import TESTS
from test_real_loaders import check

sys.path.insert(0, str(TESTS / "corpus"))
import make_model_files as corpus  # noqa: E402

h5py = pytest.importorskip("h5py")

LAMBDA_CONFIG = corpus.keras_config([corpus.DENSE_LAYER, corpus.LAMBDA_LAYER])


def _rules(findings: list[dict]) -> set[tuple[str, str]]:
    return {(f["rule"], f["severity"]) for f in findings}


def _h5(path, config_text: str, before=None, **file_options) -> None:
    with h5py.File(path, "w", **file_options) as f:
        if before is not None:
            before(f)
        f.attrs["keras_version"] = "2.15.0"
        f.attrs["model_config"] = config_text
        f.create_group("model_weights").create_dataset("dense/kernel:0", data=[[0.5, 1.5]])


KERAS_H5 = {
    # every object's "class_name" after its "config": no `{"class_name"` anywhere in the text
    "keys-in-another-order": lambda path: _h5(path, json.dumps(corpus.class_name_last(LAMBDA_CONFIG))),
    # indented, as json.dump(indent=2) writes it: `{\n  "class_name"`
    "indented": lambda path: _h5(path, json.dumps(LAMBDA_CONFIG, indent=2)),
    # a harmless config stored earlier in the file (a dataset of its bytes) as a decoy
    "decoy-before-it": lambda path: _h5(path, json.dumps(corpus.class_name_last(LAMBDA_CONFIG)),
                                        before=lambda f: f.create_dataset("notes", data=list(json.dumps(
                                            corpus.keras_config([corpus.DENSE_LAYER])).encode()), dtype="u1")),
}


@pytest.mark.parametrize("name", sorted(KERAS_H5))
def test_keras_h5_lambda_is_read_where_keras_reads_it(tmp_path, capsys, name):
    KERAS_H5[name](tmp_path / "model.h5")
    code, findings = check(tmp_path, capsys)
    assert code == 1
    assert any(f["rule"] == "unsafe-model-file" and "Lambda" in f["message"] for f in findings), findings


def test_keras_h5_that_the_reader_cannot_follow_is_not_proven_safe(tmp_path, capsys):
    """Attributes in dense storage (HDF5 1.8's fractal heap, h5py with libver="latest" and
    many attributes): not read, so the model_config there is not proven safe."""
    def many(f):
        for i in range(20):
            f.attrs[f"note{i}"] = "x" * 100

    _h5(tmp_path / "model.h5", json.dumps(LAMBDA_CONFIG), before=many, libver="latest")
    code, findings = check(tmp_path, capsys)
    assert code == 1 and ("pickle-not-proven-safe", "error") in _rules(findings), findings


def test_keras_h5_without_lambda_and_weights_only_files_are_clean(tmp_path, capsys):
    _h5(tmp_path / "model.h5", json.dumps(corpus.keras_config([corpus.DENSE_LAYER]), indent=2))
    with h5py.File(tmp_path / "tf_model.h5", "w") as f:  # what save_weights writes: no model_config
        f.attrs["layer_names"] = [b"dense"]
        f.create_group("dense").create_dataset("kernel:0", data=[[0.5]])
    code, findings = check(tmp_path, capsys)
    assert code == 0 and not findings, findings


def test_keras_zip_config_past_what_is_read_is_not_proven_safe(tmp_path, capsys):
    """A .keras whose config.json (17 MB, padded with spaces) holds a Lambda layer: it was
    'a Keras config that is not JSON', a warning."""
    text = json.dumps(LAMBDA_CONFIG) + " " * (17 * 2**20)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("config.json", text)
        archive.writestr("metadata.json", '{"keras_version": "3.8.0"}')
    (tmp_path / "model.keras").write_bytes(buffer.getvalue())
    code, findings = check(tmp_path, capsys)
    assert code == 1 and ("pickle-not-proven-safe", "error") in _rules(findings), findings


def test_tensorflow_pyfunc_where_tensorflow_reads_it(tmp_path, capsys):
    """A NodeDef that names its op twice (protobuf keeps the last: PyFunc), a frozen GraphDef
    .pb, and a text SavedModel."""
    field = corpus.field
    node = field(1, b"bad") + field(2, b"Const") + field(2, b"PyFunc")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "saved_model.pb").write_bytes(field(1, 1) + field(2, field(2, field(1, node))))
    (tmp_path / "frozen_graph.pb").write_bytes(field(1, field(1, b"f") + field(2, b"EagerPyFunc")))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "saved_model.pbtxt").write_text('meta_graphs {\n  graph_def {\n    node {\n      name: "p"\n'
                                                       '      op: "PyFuncStateless"\n    }\n  }\n}\n')
    code, findings = check(tmp_path, capsys)
    flagged = {f["file"] for f in findings if f["rule"] == "unsafe-model-file" and f["severity"] == "error"}
    assert code == 1 and flagged == {"a/saved_model.pb", "frozen_graph.pb", "b/saved_model.pbtxt"}, findings


def test_onnx_external_data_that_leads_outside(tmp_path, capsys):
    """A sparse initializer's external data `../../etc/passwd`, and external data beside the
    model that is a symlink to a file outside the repository."""
    field = corpus.field
    outside = field(13, field(1, b"location") + field(2, b"../../etc/passwd")) + field(14, 1)
    sparse = field(1, field(1, 4) + field(2, 1) + field(8, b"values") + outside)
    graph = field(2, b"g") + field(15, sparse)
    (tmp_path / "sparse").mkdir()
    (tmp_path / "sparse" / "model.onnx").write_bytes(field(1, 8) + field(7, graph))
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "model.onnx").write_bytes(corpus.onnx_model("model.onnx_data"))
    secret = tmp_path.parent / f"{tmp_path.name}-secret.bin"
    secret.write_bytes(bytes(16))
    os.symlink(secret, tmp_path / "linked" / "model.onnx_data")
    code, findings = check(tmp_path, capsys)
    flagged = {f["file"] for f in findings if f["rule"] == "unsafe-model-file" and f["severity"] == "error"}
    assert code == 1 and flagged == {"sparse/model.onnx", "linked/model.onnx"}, findings


def test_a_frame_past_the_stop_hides_the_next_pickle(tmp_path, capsys):
    """pickle.load of a stream without peek (BytesIO) reads a frame whole and starts its
    second load after it, on the payload hfdoctor's reading took for data."""
    from test_real_loaders import payload

    marker = tmp_path / "marker"
    data = corpus.frame_past_stop(payload(marker))
    stream = io.BytesIO(data)
    assert pickle.load(stream) == 1
    pickle.load(stream)  # the real loader runs the payload
    assert marker.is_dir()
    os.rmdir(marker)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "model.pkl").write_bytes(data)
    code, findings = check(repo, capsys)
    assert code == 1 and ("pickle-not-proven-safe", "error") in _rules(findings), findings
    assert "FRAME" in next(f["message"] for f in findings if f["rule"] == "pickle-not-proven-safe")
