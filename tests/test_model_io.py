import os

import numpy as np
import onnx
import onnxruntime
import pytest

from ortx import model_io
from tests import _models


def test_load_path_bytes_proto_returns_copies_and_leaves_file_untouched(tmp_path):
    proto = _models.tiny_conv_relu()
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    original_bytes = path.read_bytes()
    for source in (str(path), path, original_bytes, proto):
        model = model_io.load(source)
        assert model is not proto
        model.graph.node[0].name = "mutated"
    assert proto.graph.node[0].name != "mutated"
    assert path.read_bytes() == original_bytes


def test_clear_errors(tmp_path):
    with pytest.raises(model_io.ModelLoadError, match="does not exist"):
        model_io.load(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf \xff\xfe")
    with pytest.raises(model_io.ModelLoadError, match="junk.onnx.*is not an ONNX model"):
        model_io.load(junk)
    broken = _models.tiny_conv_relu()
    broken.graph.node[0].input[0] = "nowhere"
    with pytest.raises(model_io.ModelLoadError, match="fails onnx.checker.*nowhere"):
        model_io.load(broken)


def test_ir_clamp_is_accepted_by_onnxruntime():
    limit = model_io.ort_max_ir_version()
    assert 7 <= limit
    proto = _models.tiny_conv_relu()
    proto.ir_version = limit + 1  # what a newer onnx would write
    clamped = model_io.clamp_ir_version(proto)
    assert clamped.ir_version == limit and proto.ir_version == limit + 1
    session = onnxruntime.InferenceSession(model_io.to_ort_bytes(proto), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).uniform(0.1, 1, (1, 3, 8, 8)).astype(np.float32)
    assert session.run(None, {"X": x})[0].shape == (1, 4, 8, 8)
    older = _models.tiny_conv_relu()
    assert model_io.clamp_ir_version(older).ir_version == 10  # already readable: unchanged


def test_save_is_atomic_and_refuses_to_overwrite_input(tmp_path, monkeypatch):
    proto = _models.tiny_conv_relu()
    source = tmp_path / "in.onnx"
    source.write_bytes(proto.SerializeToString())
    with pytest.raises(model_io.ModelSaveError, match="refusing to overwrite"):
        model_io.save(proto, str(source), protect=str(source))
    target = tmp_path / "out.onnx"
    target.write_bytes(b"previous")

    # A crash while writing leaves the previous file and no temp files behind.
    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        model_io.save(proto, target)
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "out.onnx"]
    monkeypatch.undo()
    model_io.save(proto, target)
    assert onnx.load(str(target)) == proto
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "out.onnx"]
