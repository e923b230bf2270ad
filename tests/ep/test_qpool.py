"""QDQ average pools through OrtxEP: fuse_qdq's QAveragePool (kernels/qpool.h's fixed-point arithmetic).

DQ -> AveragePool/GlobalAveragePool -> Q is compared with onnxruntime CPU running the same QDQ model: within 1 LSB
everywhere; ortx/quantization/integer.py's average_pool (numpy) gives the same bytes as OrtxEP. A value differs by
1 where ORT's fp32 chain (dequantize, fp32 sum, divide by the count, divide by sy) lands on the other side of a .5
boundary than the exact rational mean the fixed point rounds; with equal scales and an even divisor exact ties
(x.5) exist and both round them to even, but ORT's fp32 chain often misses the tie by an ulp either way.
Measured on 16x28x28 uint8 inputs (vs ORT's fused QLinearAveragePool / vs ORT with graph optimizations off):
scales 0.0317 -> 0.0213, 3x3 pads 1, 2x2, global: 0% / 0% differ; equal scales 0.02: 3x3 1.1% / 1.1%, 2x2
0.3% / 6.7%, global (49 taps, odd) 0%; 0.03 -> 0.02 (sum * 1.5 / d: many ties) 3x3 7.3% / 8.1%.
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
from ortx.quantization.integer import INT_RANGES, average_pool

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]
ELEMENT = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _options() -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    return options


def qdq_pool_model(shape, *, kind="AveragePool", x_dtype="uint8", y_dtype="uint8", x_scale=0.0317, y_scale=0.0213,
                   x_zero=128, y_zero=3, opset=19, **attributes):
    """xq (quantized input) -> DQ -> pool -> Q -> y."""
    initializers = [numpy_helper.from_array(np.array(x_scale, np.float32), "x_scale"),
                    numpy_helper.from_array(np.array(x_zero, x_dtype), "x_zero"),
                    numpy_helper.from_array(np.array(y_scale, np.float32), "y_scale"),
                    numpy_helper.from_array(np.array(y_zero, y_dtype), "y_zero")]
    nodes = [helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"], name="dequantize_x"),
             helper.make_node(kind, ["xd"], ["pooled"], name="pool", **attributes),
             helper.make_node("QuantizeLinear", ["pooled", "y_scale", "y_zero"], ["y"], name="quantize_y")]
    graph = helper.make_graph(nodes, "qdq_pool", [helper.make_tensor_value_info("xq", ELEMENT[x_dtype], shape)],
                              [helper.make_tensor_value_info("y", ELEMENT[y_dtype], None)], initializers)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _random_input(shape, dtype, seed):
    low, high = INT_RANGES[dtype]
    return np.random.default_rng(seed).integers(low, high + 1, shape).astype(dtype)


def _run_both(model, feeds, *, ort_fusions=True):
    """ort_fusions=False: ORT runs DQ, the fp32 pool and Q as written (no QLinearAveragePool)."""
    options = _options()
    if not ort_fusions:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    reference = onnxruntime.InferenceSession(to_ort_bytes(model), options, providers=["CPUExecutionProvider"])
    session = ortx.InferenceSession(model, _options(), providers=PROVIDERS, provider_options=[{"tuning": "off"}, {}])
    return session, session.run(None, feeds)[0], reference.run(None, feeds)[0]


CASES = [  # (shape, attributes): widths that are not multiples of 16 lanes, pads, strides, count_include_pad
    ((1, 5, 13, 37), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])),
    ((2, 3, 11, 19), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], count_include_pad=1)),
    ((1, 4, 16, 33), dict(kernel_shape=[2, 3], pads=[0, 1, 1, 2], strides=[2, 2])),
    ((1, 3, 9, 70), dict(kernel_shape=[3, 5], pads=[2, 0, 1, 4], strides=[1, 3], count_include_pad=1)),
    ((1, 2, 7, 7), dict(kernel_shape=[7, 7])),
]


DTYPES = [("uint8", "uint8"), ("int8", "int8"), ("uint8", "int8")]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_average_pool_within_one_lsb_of_ort_and_exact_with_numpy(case):
    shape, attributes = CASES[case]
    x_dtype, y_dtype = DTYPES[case % len(DTYPES)]
    zeros = {"uint8": 131, "int8": -5}
    model = qdq_pool_model(shape, x_dtype=x_dtype, y_dtype=y_dtype, x_zero=zeros[x_dtype], y_zero=zeros[y_dtype] - 9,
                           **attributes)
    x = _random_input(shape, x_dtype, case)
    session, actual, expected = _run_both(model, {"xq": x})
    difference = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
    assert difference.max() <= 1 and np.mean(difference == 0) >= 0.99, (difference.max(), np.mean(difference == 0))
    pads = attributes.get("pads", [0, 0, 0, 0])
    numpy_result = average_pool(x, 0.0317, zeros[x_dtype], 0.0213, zeros[y_dtype] - 9, y_dtype,
                                 kernel=attributes["kernel_shape"], strides=attributes.get("strides", (1, 1)),
                                 pads=(pads[0], pads[1], pads[2], pads[3]),
                                 count_include_pad=attributes.get("count_include_pad", 0))
    np.testing.assert_array_equal(actual, numpy_result)
    rows = {row.name: row for row in session.assignment}
    assert rows["pool"].provider == "OrtxEP" and rows["pool"].precision == "int8", str(session.assignment)
    assert "fused into pool_qpool" in rows["pool"].reason, str(session.assignment)


@pytest.mark.parametrize("x_dtype,y_dtype", [("uint8", "uint8"), ("int8", "int8")])
@pytest.mark.parametrize("shape", [(1, 64, 7, 7), (2, 19, 13, 11)])
def test_global_average_pool_within_one_lsb_of_ort(shape, x_dtype, y_dtype):
    model = qdq_pool_model(shape, kind="GlobalAveragePool", x_dtype=x_dtype, y_dtype=y_dtype,
                           x_zero=INT_RANGES[x_dtype][0] + 100, y_zero=INT_RANGES[y_dtype][0] + 90)
    x = _random_input(shape, x_dtype, 7)
    session, actual, expected = _run_both(model, {"xq": x})
    difference = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
    assert difference.max() <= 1 and np.mean(difference == 0) >= 0.99
    np.testing.assert_array_equal(actual, average_pool(x, 0.0317, INT_RANGES[x_dtype][0] + 100, 0.0213,
                                                       INT_RANGES[y_dtype][0] + 90, y_dtype))
    assert {row.name: row for row in session.assignment}["pool"].precision == "int8"


def test_differences_from_ort_are_near_ties_only():
    """Equal scales and 2x2 windows: exact ties every fourth value; every element that differs from ORT (without its
    QLinearAveragePool fusion: DQ, fp32 pool, Q) has an exact mean within 1e-5 of a .5 boundary."""
    shape, scale, zero = (1, 8, 20, 20), 0.02, 131
    model = qdq_pool_model(shape, x_scale=scale, y_scale=scale, x_zero=zero, y_zero=zero, kernel_shape=[2, 2],
                           strides=[2, 2])
    x = _random_input(shape, "uint8", 11)
    _, actual, expected = _run_both(model, {"xq": x}, ort_fusions=False)
    difference = actual.astype(np.int32) - expected.astype(np.int32)
    exact = (x.astype(np.float64) - zero).reshape(1, 8, 10, 2, 10, 2).mean(axis=(3, 5))
    near_tie = np.abs(exact - np.floor(exact) - 0.5) < 1e-5
    assert np.abs(difference).max() <= 1 and np.all(near_tie[difference != 0])
    assert np.any(difference != 0)  # ties do occur here, and ORT's fp32 chain does not always round them to even


@pytest.mark.parametrize("y_dtype,y_scale,bound", [("uint8", 0.001, 255), ("uint8", 0.001, 0), ("int8", 0.001, 127),
                                                    ("int8", 0.001, -128)])
def test_saturation(y_dtype, y_scale, bound):
    """A y_scale far below x_scale drives every output to the type's bound (the sign picks which)."""
    shape = (1, 3, 6, 21)
    x = np.full(shape, 250 if bound > 0 else 3, np.uint8)
    model = qdq_pool_model(shape, y_dtype=y_dtype, y_scale=y_scale, y_zero=0, kernel_shape=[2, 2], pads=[1, 1, 0, 0])
    _, actual, expected = _run_both(model, {"xq": x})
    assert np.all(actual == bound) and np.array_equal(actual, expected)


def test_fuse_qdq_counts_idempotence_and_a_pattern_that_must_not_fire():
    model = ir.serde.deserialize_model(qdq_pool_model((1, 2, 8, 8), kernel_shape=[2, 2]))
    report = fuse_qdq(model)
    assert report.counts == {"qconv_fused": 0, "qpool_fused": 1, "dequantize_folded": 0}
    assert [node.op_type for node in model.graph] == ["QAveragePool"]
    assert not fuse_qdq(model).modified
    # the pool's output read by something else than Q (a graph output here): stays float
    proto = qdq_pool_model((1, 2, 8, 8), kernel_shape=[2, 2])
    proto.graph.output.append(helper.make_tensor_value_info("pooled", TensorProto.FLOAT, None))
    model = ir.serde.deserialize_model(proto)
    report = fuse_qdq(model)
    assert report.counts["qpool_fused"] == 0 and "pool" in report.notes[0], report.notes


def test_ceil_mode_and_dilations_run_int8_on_the_cpu():
    """ORT without its fusions: onnxruntime 1.32 fuses the dilated pool into a QLinearAveragePool that rejects the
    dilations attribute (INVALID_GRAPH)."""
    for attributes in (dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, pads=[1, 1, 1, 1]),
                       dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 1, 1])):
        shape = (1, 3, 12, 21)
        model = qdq_pool_model(shape, **attributes)
        x = _random_input(shape, "uint8", 4)
        session, actual, expected = _run_both(model, {"xq": x}, ort_fusions=False)
        assert np.abs(actual.astype(np.int32) - expected.astype(np.int32)).max() <= 1, attributes
        assert {row.name: row for row in session.assignment}["pool"].precision == "int8", attributes


def test_dilations_before_opset_19_are_declined_with_a_reason():
    model = ir.serde.deserialize_model(qdq_pool_model((1, 2, 8, 8), opset=18, kernel_shape=[2, 2]))
    model.graph.node(1).attributes["dilations"] = ir.AttrInt64s("dilations", [2, 2])
    report = fuse_qdq(model)
    assert report.counts["qpool_fused"] == 0 and "dilations before opset 19" in report.notes[0], report.notes
