"""Seeded random attribute sets of windowed ops (MaxPool, AveragePool, LpPool, Conv, ConvTranspose: kernel, strides,
dilations, explicit or auto pads, ceil_mode, count_include_pad, output_padding; opsets 13-22) between two 1x1
convs, through ortx.InferenceSession against ONNX Runtime. Why: shapes where onnx's inference and ORT differ
(ortx.passes._ort_shapes) and a SAME conv whose kernel is under its stride had failed or computed wrong values, and
single-node conformance cases did not reach them. Float32 tolerance (tests/tolerances.py). Each case draws until
ORT accepts the set (negative SAME padding, attributes an opset lacks), so every case compares."""
from __future__ import annotations

import random

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ortx
from ortx.model_io import to_ort_bytes
from tests.tolerances import assert_close

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]
CASES = 48


def _attributes(rng: random.Random, op_type: str) -> dict:
    attributes = {"strides": [rng.choice([1, 2, 3])] * 2,
                  "kernel_shape": [3, 3] if op_type in ("Conv", "ConvTranspose") else [rng.choice([2, 3])] * 2}
    if op_type != "LpPool" and rng.random() < 0.5:
        attributes["dilations"] = [rng.choice([1, 2])] * 2
    auto_pad = rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
    if auto_pad == "NOTSET":
        attributes["pads"] = [rng.choice([0, 1, 2]) for _ in range(4)]
    else:
        attributes["auto_pad"] = auto_pad
    if op_type in ("MaxPool", "AveragePool") and rng.random() < 0.5:
        attributes["ceil_mode"] = 1
    if op_type == "AveragePool" and rng.random() < 0.5:
        attributes["count_include_pad"] = 1
    if op_type == "ConvTranspose" and rng.random() < 0.4:
        attributes["output_padding"] = [1, 1]
    return attributes


def _model(op_type: str, attributes: dict, size: int, opset: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    initializers = [numpy_helper.from_array(rng.standard_normal((8, 4, 1, 1)).astype(np.float32), "w1")]
    inputs = ["a"]
    if op_type in ("Conv", "ConvTranspose"):
        shape = (8, 6, 3, 3) if op_type == "ConvTranspose" else (6, 8, 3, 3)
        initializers.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), "w"))
        inputs.append("w")
    channels = 6 if op_type in ("Conv", "ConvTranspose") else 8
    initializers.append(numpy_helper.from_array(rng.standard_normal((5, channels, 1, 1)).astype(np.float32), "w2"))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]), helper.make_node(op_type, inputs, ["b"], **attributes),
             helper.make_node("Conv", ["b", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, "h", "w"])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model.SerializeToString()


def _accepted_case(case: int):
    """(model, feeds, ORT's output, description) of the case's first attribute draw ORT runs."""
    rng = random.Random(case)
    for attempt in range(50):
        op_type = rng.choice(["MaxPool", "AveragePool", "LpPool", "Conv", "ConvTranspose"])
        attributes = _attributes(rng, op_type)
        size, opset = rng.choice([5, 7, 8, 13]), rng.choice([13, 18, 19, 22])
        model = _model(op_type, attributes, size, opset, case)
        feeds = {"x": np.random.default_rng(case).standard_normal((1, 4, size, size)).astype(np.float32)}
        try:
            session = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
            expected = session.run(None, feeds)[0]
        except Exception:  # noqa: BLE001 - a set ORT rejects: draw again
            continue
        return model, feeds, expected, f"{op_type} {attributes} opset {opset} on {size}x{size}"
    raise AssertionError(f"case {case}: no attribute set ORT accepts in 50 draws")


@pytest.mark.parametrize("case", range(CASES))
def test_windowed_op_matches_onnxruntime(case):
    model, feeds, expected, description = _accepted_case(case)
    actual = ortx.InferenceSession(model, providers=PROVIDERS).run(None, feeds)[0]
    assert_close(actual, expected, what=description)
