"""Fake quantization equals ortx's numpy QuantizeLinear -> DequantizeLinear reference bit for bit; the
straight-through estimator passes gradients inside the range and zeroes them where values saturate; LSQ's scale
gradient; calibration gives ortx PTQ's MinMax parameters."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ortx.qat.fake_quant import ActivationQuantizer, fake_quantize, quantize_bias, quantize_weight  # noqa: E402
from ortx.quantization.scales import (INT_LIMITS, WEIGHT_LIMIT, activation_parameters, bias_parameters,  # noqa: E402
                                      dequantize, quantize, weight_parameters)


def _values(seed, shape=(4, 3, 5, 5), spread=3.0):
    return np.random.default_rng(seed).normal(0.0, spread, shape).astype(np.float32)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_activation_forward_is_the_qdq_reference(dtype, seed):
    values = _values(seed)
    parameters = activation_parameters(-2.0, 3.5, dtype)  # values beyond the range saturate
    scale = float(parameters.scale)
    q_min, q_max = INT_LIMITS[dtype]
    result = fake_quantize(torch.from_numpy(values), torch.tensor(scale),
                           torch.tensor(float(parameters.zero_point)), q_min, q_max)
    expected = dequantize(quantize(values, parameters), parameters)
    np.testing.assert_array_equal(result.numpy(), expected)


def test_ties_round_half_to_even():
    scale = 2.0 ** -4  # x / scale is exact, so k + 0.5 is a true tie
    values = (np.arange(-6, 6, dtype=np.float32) + np.float32(0.5)) * np.float32(scale)
    result = fake_quantize(torch.from_numpy(values), torch.tensor(scale), torch.tensor(0.0), -128, 127)
    np.testing.assert_array_equal(result.numpy() / scale, [-6, -4, -4, -2, -2, 0, 0, 2, 2, 4, 4, 6])


@pytest.mark.parametrize("seed", [0, 1])
def test_weight_forward_is_the_per_channel_reference(seed):
    weight = _values(seed, (6, 3, 3, 3), spread=0.2)
    weight[2] = 0.0  # an all-zero channel: scale floored, values stay 0
    result, scales = quantize_weight(torch.from_numpy(weight))
    parameters = weight_parameters(weight, 0)
    np.testing.assert_array_equal(scales.numpy(), parameters.scale)
    expected = dequantize(quantize(weight, parameters, limits=(-WEIGHT_LIMIT, WEIGHT_LIMIT)), parameters)
    np.testing.assert_array_equal(result.numpy(), expected)


def test_bias_is_on_the_int32_grid_of_input_and_weight_scales():
    bias = np.array([0.3, -1.25, 0.0, 2.0], np.float32)
    input_scale, weight_scales = np.float32(0.02), np.array([0.001, 0.003, 0.002, 0.0005], np.float32)
    result = quantize_bias(torch.from_numpy(bias), torch.tensor(input_scale), torch.from_numpy(weight_scales))
    parameters = bias_parameters(input_scale, weight_scales)
    steps = np.rint(bias.astype(np.float64) / parameters.scale.astype(np.float64))  # as insert_qdq writes it
    np.testing.assert_array_equal(result.numpy(), (steps.astype(np.float32) * parameters.scale))


def test_bias_int32_cannot_hold_stays_float():
    bias = torch.tensor([1e4, 0.5])
    result = quantize_bias(bias, torch.tensor(1e-6), torch.tensor([1e-6, 1e-6]))
    assert torch.equal(result, bias)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_straight_through_gradient_inside_the_range_only(dtype):
    parameters = activation_parameters(-1.0, 2.0, dtype)
    scale, zero_point = float(parameters.scale), float(parameters.zero_point)
    q_min, q_max = INT_LIMITS[dtype]
    values = torch.tensor([-5.0, -1.0 - 2 * scale, -0.5, 0.0, 0.7, 1.99, 2.0 + 2 * scale, 9.0], requires_grad=True)
    output = fake_quantize(values, torch.tensor(scale), torch.tensor(zero_point), q_min, q_max)
    upstream = torch.arange(1.0, 9.0)
    output.backward(upstream)
    inside = torch.tensor([False, False, True, True, True, True, False, False])
    np.testing.assert_array_equal(values.grad.numpy(), torch.where(inside, upstream, 0.0).numpy())


def test_learned_scale_gets_lsq_gradient():
    q_min, q_max, zero_point = 0, 255, 10.0
    scale = torch.tensor(0.05, requires_grad=True)
    values = torch.tensor([-1.0, 0.123, 3.0, 20.0])  # below, inside, inside, above
    output = fake_quantize(values, scale, torch.tensor(zero_point), q_min, q_max, learn_scale=True)
    output.sum().backward()
    exact = values / 0.05
    slope = torch.tensor([q_min - zero_point, float(torch.round(exact[1]) - exact[1]),
                          float(torch.round(exact[2]) - exact[2]), q_max - zero_point])
    expected = slope.sum() / np.sqrt(values.numel() * (q_max - zero_point))
    assert float(scale.grad) == pytest.approx(float(expected), rel=1e-6)
    assert values.grad is None  # inputs without requires_grad get none


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_quantizer_calibrates_to_ortx_minmax_parameters(dtype):
    quantizer = ActivationQuantizer(dtype, name="probe")
    batches = [torch.from_numpy(_values(seed)) for seed in range(3)]
    for batch in batches:
        assert torch.equal(quantizer(batch), batch)  # observing is a float pass-through
    quantizer.freeze_observation()
    low = min(float(batch.min()) for batch in batches)
    high = max(float(batch.max()) for batch in batches)
    expected = activation_parameters(low, high, dtype)
    assert float(quantizer.scale) == float(expected.scale)
    assert int(quantizer.zero_point) == int(expected.zero_point)
    quantizer.mode = "quantize"
    np.testing.assert_array_equal(quantizer(batches[0]).numpy(),
                                  dequantize(quantize(batches[0].numpy(), expected), expected))


def test_uncalibrated_quantizer_refuses_to_quantize():
    quantizer = ActivationQuantizer("uint8", name="probe")
    with pytest.raises(RuntimeError, match="saw no values during calibration"):
        quantizer.freeze_observation()
    with pytest.raises(ValueError, match="'probe' saw non-finite values"):
        quantizer(torch.tensor([1.0, float("nan")]))
    quantizer.mode = "quantize"
    with pytest.raises(RuntimeError, match="'probe' is not calibrated"):
        quantizer(torch.ones(2))
