"""QDQ models through OrtxEP: fuse_qdq's QConv and the standalone QuantizeLinear/DequantizeLinear steps.

Quantized outputs are compared with onnxruntime CPU running the same QDQ model (which fuses it into its own int8
kernels): equal within 1 LSB, and equal on at least 99% of the elements (ortx/quantization/integer.py explains why
they may differ at all). Whole models (ortx.quantize of the ResNet-18-style network) are judged by cosine.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ortx
from ortx.model_io import to_ort_bytes
from ortx.passes.fuse_qdq import fuse_qdq
from ortx.quantization import quantize
from tests import _models
from tests.tolerances import cosine

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]


def _options(threads: int = 2) -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return options


def _qdq_conv_model(*, x_dtype=TensorProto.UINT8, zx=128, w_zero=0, activation="Relu", channels=(13, 21), size=(17, 23),
                    stride=1, quantized_output=True, seed=0):
    """x float -> Q -> DQ -> Conv(DQ(w int8 per channel), DQ(bias int32)) -> [activation] -> [Q]."""
    rng = np.random.default_rng(seed)
    cin, cout = channels
    x_scale, y_scale = np.float32(0.02), np.float32(0.05)
    w_scale = rng.uniform(0.002, 0.01, cout).astype(np.float32)
    weights = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
    bias = rng.integers(-2000, 2000, cout).astype(np.int32)
    np_x = np.uint8 if x_dtype == TensorProto.UINT8 else np.int8
    initializers = [
        numpy_helper.from_array(np.array(x_scale), "x_scale"), numpy_helper.from_array(np.array(zx, np_x), "x_zero"),
        numpy_helper.from_array(weights, "w_q"), numpy_helper.from_array(w_scale, "w_scale"),
        numpy_helper.from_array(np.full(cout, w_zero, np.int8), "w_zero"),
        numpy_helper.from_array(bias, "b_q"), numpy_helper.from_array((x_scale * w_scale).astype(np.float32), "b_scale"),
        numpy_helper.from_array(np.array(y_scale), "y_scale"), numpy_helper.from_array(np.array(3, np.uint8), "y_zero"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"], name="quantize_x"),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"], name="dequantize_x"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["wd"], name="dequantize_w", axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale"], ["bd"], name="dequantize_b", axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["conv"], name="conv", pads=[1, 1, 1, 1],
                         strides=[stride, stride]),
    ]
    last = "conv"
    if activation:
        nodes.append(helper.make_node(activation, [last], ["act"], name="act"))
        last = "act"
    out_size = [(extent - 1) // stride + 1 for extent in size]  # 3x3, pads 1
    output = helper.make_tensor_value_info("y", TensorProto.UINT8 if quantized_output else TensorProto.FLOAT,
                                           [1, cout, *out_size])
    if quantized_output:
        nodes.append(helper.make_node("QuantizeLinear", [last, "y_scale", "y_zero"], ["y"], name="quantize_y"))
    else:
        nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [1, cin, *size])],
                              [output], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _run_both(model, feeds):
    reference = onnxruntime.InferenceSession(to_ort_bytes(model), _options(), providers=["CPUExecutionProvider"])
    session = ortx.InferenceSession(model, _options(), providers=PROVIDERS)
    return session, session.run(None, feeds)[0], reference.run(None, feeds)[0]


@pytest.mark.parametrize("x_dtype,zx", [(TensorProto.UINT8, 128), (TensorProto.UINT8, 0), (TensorProto.INT8, -7)])
@pytest.mark.parametrize("activation,stride", [("Relu", 1), ("", 2)])
def test_qdq_conv_within_one_lsb_of_ort(x_dtype, zx, activation, stride):
    model = _qdq_conv_model(x_dtype=x_dtype, zx=zx, activation=activation, stride=stride)
    feeds = {"x": np.random.default_rng(1).uniform(-2, 2, (1, 13, 17, 23)).astype(np.float32)}
    session, actual, expected = _run_both(model, feeds)
    difference = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
    assert difference.max() <= 1 and np.mean(difference == 0) >= 0.99
    rows = {row.name: row for row in session.assignment}
    assert rows["conv"].provider == "OrtxEP" and "qconv" in rows["conv"].reason, str(session.assignment)
    assert rows["conv"].precision == "int8", rows["conv"]
    assert all(row.provider == "OrtxEP" for row in session.assignment), str(session.assignment)


def test_asymmetric_weights_decline_the_int8_pattern_and_run_as_float():
    model = _qdq_conv_model(w_zero=3)
    ir_model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model))
    report = fuse_qdq(ir_model)
    assert report.counts == {"qconv_fused": 0, "qpool_fused": 0, "dequantize_folded": 2}
    assert any("asymmetric" in note for note in report.notes), report.notes
    feeds = {"x": np.random.default_rng(2).uniform(-2, 2, (1, 13, 17, 23)).astype(np.float32)}
    session, actual, expected = _run_both(model, feeds)
    assert np.abs(actual.astype(np.int32) - expected.astype(np.int32)).max() <= 1
    assert session.assignment.claimed_mac_share == 1.0, str(session.assignment)
    row = next(row for row in session.assignment if row.name == "conv")
    assert row.precision == "fp32" and "int8 declined" in row.reason and "asymmetric" in row.reason, row


def test_fuse_qdq_leaves_nodes_given_back_to_ort_alone():
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(_qdq_conv_model()))
    report = fuse_qdq(model, excluded=frozenset({"act"}))
    assert report.counts == {"qconv_fused": 0, "qpool_fused": 0, "dequantize_folded": 2}
    assert any("act runs on ORT" in note for note in report.notes), report.notes
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(_qdq_conv_model()))
    report = fuse_qdq(model, excluded=frozenset({"conv", "dequantize_w", "dequantize_b"}))
    assert report.counts == {"qconv_fused": 0, "qpool_fused": 0, "dequantize_folded": 0}


def test_fuse_qdq_counts_and_idempotence():
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(_qdq_conv_model(quantized_output=False)))
    first = fuse_qdq(model)
    assert first.counts == {"qconv_fused": 1, "qpool_fused": 0, "dequantize_folded": 0}
    assert [node.op_type for node in model.graph] == ["QuantizeLinear", "QConv"]
    assert not fuse_qdq(model).modified


@pytest.fixture(scope="module")
def quantized_resnet():
    model = _models.resnet18_style(size=48)
    samples = np.random.default_rng(0).uniform(-1, 1, (4, 3, 48, 48)).astype(np.float32)
    return {dtype: quantize(model, {"input": samples}, method="minmax", activation_dtype=dtype)[0]
            for dtype in ("uint8", "int8")}


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_quantized_resnet_runs_int8_everywhere(quantized_resnet, dtype):
    model = quantized_resnet[dtype]
    feeds = {"input": np.random.default_rng(3).uniform(-1, 1, (1, 3, 48, 48)).astype(np.float32)}
    session, actual, expected = _run_both(model, feeds)
    assert cosine(actual, expected) >= 0.999
    assert session.assignment.claimed_mac_share == 1.0 and session.assignment.segments == 1, str(session.assignment)
    convs = [row for row in session.assignment if row.op_type in ("Conv", "Gemm")]
    assert convs and all("qconv" in row.reason for row in convs), str(session.assignment)
