"""QuantizeLinear/DequantizeLinear round-trip properties of ortx.quantization.scales, and bit-exactness of the
numpy reference against onnxruntime's own QuantizeLinear/DequantizeLinear."""
import numpy as np
import onnx
import onnxruntime
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from ortx.quantization.scales import (MIN_SCALE, WEIGHT_LIMIT, activation_parameters, bias_parameters, dequantize,
                                      quantize, weight_parameters)

finite = st.floats(-1e4, 1e4, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(low=finite, high=finite, dtype=st.sampled_from(["int8", "uint8"]), seed=st.integers(0, 2 ** 16))
def test_round_trip_within_half_a_step(low, high, dtype, seed):
    low, high = min(low, high), max(low, high)
    parameters = activation_parameters(low, high, dtype)
    scale = float(parameters.scale)
    assert scale >= MIN_SCALE and np.isfinite(scale)
    values = np.random.default_rng(seed).uniform(min(low, 0), max(high, 0), 257).astype(np.float32)
    restored = dequantize(quantize(values, parameters), parameters)
    # half a step from rounding, plus float32 rounding of x / scale and of the product
    assert np.max(np.abs(restored - values)) <= scale * 0.5 + 1e-5 * max(abs(low), abs(high), 1.0)
    # zero is exactly representable (padding and ReLU zeros survive quantization)
    assert dequantize(quantize(np.zeros(1, np.float32), parameters), parameters)[0] == 0.0
    # every integer code survives dequantize -> quantize
    info = np.iinfo(parameters.dtype)
    codes = np.arange(info.min, info.max + 1).astype(parameters.dtype)
    np.testing.assert_array_equal(quantize(dequantize(codes, parameters), parameters), codes)


def test_saturation_and_empty_range():
    parameters = activation_parameters(-1.0, 1.0, "int8")
    np.testing.assert_array_equal(quantize(np.array([-100.0, 100.0], np.float32), parameters), [-128, 127])
    empty = activation_parameters(0.0, 0.0, "uint8")
    assert empty.floored and float(empty.scale) == np.float32(MIN_SCALE)
    assert dequantize(quantize(np.zeros(3, np.float32), empty), empty).tolist() == [0.0, 0.0, 0.0]
    constant = activation_parameters(2.5, 2.5, "uint8")  # widened to [0, 2.5]
    assert not constant.floored and float(constant.scale) == pytest.approx(2.5 / 255)
    with pytest.raises(ValueError, match="invalid range"):
        activation_parameters(float("nan"), 1.0, "int8")


def test_per_channel_weights_error_and_limits():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((6, 4, 3, 3)).astype(np.float32) * np.array([1e-3, 1, 10, 0, 5, 0.1],
                                                                             np.float32)[:, None, None, None]
    for axis in (0, 1):
        parameters = weight_parameters(weight, axis)
        assert parameters.scale.shape == (weight.shape[axis],) and np.all(parameters.scale >= MIN_SCALE)
        codes = quantize(weight, parameters, limits=(-WEIGHT_LIMIT, WEIGHT_LIMIT))
        assert codes.min() >= -WEIGHT_LIMIT and codes.max() <= WEIGHT_LIMIT and codes.dtype == np.int8
        shape = [1] * 4
        shape[axis] = -1
        error = np.abs(dequantize(codes, parameters) - weight)
        assert np.all(error <= parameters.scale.reshape(shape) * 0.5 * (1 + 1e-6))
    assert weight_parameters(weight, 0).floored  # channel 3 is all zeros
    bias = bias_parameters(np.array(0.02, np.float32), np.array([0.5, 0.25], np.float32))
    np.testing.assert_allclose(bias.scale, [0.01, 0.005]) and bias.zero_point.dtype == np.int32


def _qdq_model(parameters, shape):
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero_point"], ["q"], **(
                 {"axis": parameters.axis} if parameters.axis is not None else {})),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero_point"], ["y"], **(
                 {"axis": parameters.axis} if parameters.axis is not None else {}))]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("q", helper.np_dtype_to_tensor_dtype(
                                  parameters.zero_point.dtype), shape),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(parameters.scale, "scale"),
                               numpy_helper.from_array(parameters.zero_point, "zero_point")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_reference_is_bit_exact_with_onnxruntime(dtype):
    rng = np.random.default_rng(1)
    values = rng.uniform(-3, 5, (2, 3, 5, 7)).astype(np.float32)
    values.flat[:4] = [-100.0, 100.0, 0.0, 0.5 * 0.03]  # saturation both ways, zero, a tie
    for parameters in (activation_parameters(-2.0, 4.0, dtype), weight_parameters(values, 1)):
        session = _qdq_model(parameters, list(values.shape))
        codes, restored = session.run(None, {"x": values})
        np.testing.assert_array_equal(quantize(values, parameters), codes)
        np.testing.assert_array_equal(dequantize(codes, parameters), restored)
