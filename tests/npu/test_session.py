"""ortx.InferenceSession with provider option devices "npu,cpu": nodes on the simulated NPU give outputs identical
to devices "cpu" (the CPU int8 kernels); forcing an op the NPU cannot run is an error naming node, device, reason."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

import ortx
from ortx.quantization import quantize
from tests import _models
from tests.ep.test_qdq import _qdq_conv_model


def _session(model, devices: str, placement: dict | None = None):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    provider_options = {"devices": devices, "tuning": "off"}
    if placement:
        provider_options["placement"] = placement
    return ortx.InferenceSession(model, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[provider_options, {}])


def _feeds(model):
    value = model.graph.input[0]
    shape = [dim.dim_value for dim in value.type.tensor_type.shape.dim]
    return {value.name: np.random.default_rng(3).uniform(-1, 1, shape).astype(np.float32)}


def _assert_same_as_cpu(model, placement):
    feeds = _feeds(model)
    expected = _session(model, "cpu").run(None, feeds)
    session = _session(model, "npu,cpu", placement)
    actual = session.run(None, feeds)
    for got, want in zip(actual, expected):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    return session


def test_forced_qconv_runs_on_the_npu_identically():
    model = _qdq_conv_model(activation="Relu")
    session = _assert_same_as_cpu(model, {"conv": "npu", "quantize_x": "npu"})
    assert session.assignment.by_device().get("npu", 0) >= 2


def test_resnet_style_int8_convs_on_the_npu_identically():
    fp32 = _models.resnet18_style(size=32)
    calibration = np.random.default_rng(0).uniform(-1, 1, (2, 3, 32, 32)).astype(np.float32)
    model = quantize(fp32, {fp32.graph.input[0].name: calibration})[0]
    convs = {node.name: "npu" for node in fp32.graph.node if node.op_type == "Conv"}
    session = _assert_same_as_cpu(model, convs)
    on_npu = [row for row in session.assignment if row.device == "npu"]
    assert sum(row.op_type == "Conv" for row in on_npu) == len(convs)


def test_forcing_a_float_conv_onto_the_npu_is_an_error():
    with pytest.raises(Exception, match=r"(?s)conv_3.*npu.*not an NPU op"):
        _session(_models.tiny_conv_relu(), "npu,cpu", {"conv_3": "npu"})
