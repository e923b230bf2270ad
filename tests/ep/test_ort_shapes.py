"""Nodes whose output size ONNX Runtime computes otherwise than onnx's shape inference (ortx.passes._ort_shapes):
ceil_mode pools whose last window would start in the end padding, pools with auto_pad SAME and dilations, and
ConvTranspose with auto_pad SAME and output_padding. Sessions must use ORT's size whether OrtxEP or ORT runs the
node: an opset-13 model had bound an 8x8 buffer to ORT's 7x7 MaxPool output and failed at run time. Float32
tolerance (tests/tolerances.py)."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ortx
from ortx.model_io import to_ort_bytes
from tests.tolerances import assert_close

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]
POOL = dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)  # 13 pixels -> 7 (onnx: 8)


def _model(nodes, outputs, channels=20):
    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array(rng.standard_normal((channels, 8, 1, 1)).astype(np.float32), "w1"),
               numpy_helper.from_array(rng.standard_normal((channels, channels, 1, 1)).astype(np.float32), "w2"),
               numpy_helper.from_array(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32), "wt")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 13, 13])],
                              outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 9
    return model


def _run_both(model):
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 8, 13, 13)).astype(np.float32)}
    expected = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"]).run(None, feeds)
    session = ortx.InferenceSession(model, providers=PROVIDERS)
    return expected, session.run(None, feeds), session


@pytest.mark.parametrize("op_type,attributes,size", [
    ("MaxPool", POOL, 7), ("AveragePool", POOL, 7),
    # SAME pads from the undilated kernel (1), the size from the dilated one (3): 13 + 1 - 3 + 1
    ("MaxPool", dict(kernel_shape=[2, 2], dilations=[2, 2], auto_pad="SAME_LOWER"), 12),
    ("MaxPool", dict(kernel_shape=[2, 2], dilations=[2, 2], strides=[3, 3], auto_pad="SAME_UPPER"), 4),
    # SAME pads to 13 * 2 whatever output_padding (onnx: 27)
    ("ConvTranspose", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER", output_padding=[1, 1]), 26),
])
def test_node_between_convs_runs_with_onnxruntimes_size(op_type, attributes, size):
    inputs = ["a", "wt"] if op_type == "ConvTranspose" else ["a"]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]), helper.make_node(op_type, inputs, ["p"], **attributes),
             helper.make_node("Conv", ["p", "w2"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20, None, None])])
    (expected,), (actual,), _ = _run_both(model)
    assert expected.shape == actual.shape == (1, 20, size, size)
    assert_close(actual, expected)


def test_pool_on_onnxruntime_between_ortx_segments():
    """The MaxPool's Indices output is used, so ORT runs it (OrtxEP declines Indices) into buffers ortx binds."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("MaxPool", ["a"], ["p", "indices"], **POOL),
             helper.make_node("Conv", ["p", "w2"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20, None, None]),
                           helper.make_tensor_value_info("indices", TensorProto.INT64, [1, 20, None, None])])
    (expected_y, expected_indices), (y, indices), _ = _run_both(model)
    assert y.shape == indices.shape == (1, 20, 7, 7)
    assert_close(y, expected_y)
    np.testing.assert_array_equal(indices, expected_indices)
