"""int8 average-pool kernels (qavgpool_i8, qglobal_avgpool_i8; kernels/qpool.h): fast vs reference vs numpy.

Every case runs for each ISA this CPU has (portable, AVX2, AVX-512), with 1 and 2 threads. Integer sums are
exact, so fast, reference and ortx/quantization/integer.py's average_pool agree byte for byte: widths around the
8- and 16-lane vectors and the 8-lane requantization tails, pads with and without count_include_pad, strides 1-3,
uint8/int8 in and out, and saturation at both ends of both output types.
"""
from __future__ import annotations

import numpy as np
import pytest

from ortx import _kernels
from ortx.quantization.integer import INT_RANGES, average_multipliers, average_pool, round_shift_half_even


def _window_ints(shape, out_shape, kernel, strides, pads, count_include_pad):
    """kernels/pool_internal.h's 23 ints for a 2-D pool (pads: top, left, bottom, right)."""
    n, c, h, w = shape
    return [n * c, 1, h, w, 1, *out_shape, 1, *kernel, 1, *strides, 0, pads[0], pads[1], 0, pads[2], pads[3],
            1, 1, 1, count_include_pad]


def _quant_ints(x_dtype, y_dtype, zx, zy, base, length):
    return [int(x_dtype == "int8"), int(y_dtype == "int8"), zx, zy, *INT_RANGES[y_dtype], base, length]


def _random_case(rng):
    h, w = int(rng.integers(1, 24)), int(rng.choice([1, 7, 15, 16, 17, 31, 33, 64, 71]))
    kernel = (int(rng.integers(1, min(h, 4) + 1)), int(rng.integers(1, min(w, 5) + 1)))
    strides = (int(rng.integers(1, 3)), int(rng.integers(1, 4)))
    pads = (int(rng.integers(0, kernel[0])), int(rng.integers(0, kernel[1])), int(rng.integers(0, kernel[0])),
            int(rng.integers(0, kernel[1])))
    x_dtype, y_dtype = str(rng.choice(["uint8", "int8"])), str(rng.choice(["uint8", "int8"]))
    x_range, y_range = INT_RANGES[x_dtype], INT_RANGES[y_dtype]
    x = rng.integers(x_range[0], x_range[1] + 1, (int(rng.integers(1, 3)), int(rng.integers(1, 5)), h, w))
    return dict(x=x.astype(x_dtype), kernel=kernel, strides=strides, pads=pads, y_dtype=y_dtype,
                count_include_pad=int(rng.integers(0, 2)), x_zero=int(rng.integers(x_range[0], x_range[1] + 1)),
                y_zero=int(rng.integers(y_range[0], y_range[1] + 1)), x_scale=float(rng.uniform(0.005, 0.1)),
                y_scale=float(rng.uniform(0.005, 0.1)))


def _run_windowed(case, *, threads=1, use_ref=False):
    x, kernel, pads = case["x"], case["kernel"], case["pads"]
    expected = average_pool(x, case["x_scale"], case["x_zero"], case["y_scale"], case["y_zero"], case["y_dtype"],
                            kernel=kernel, strides=case["strides"], pads=pads,
                            count_include_pad=case["count_include_pad"])
    area = kernel[0] * kernel[1]
    ints = (_window_ints(x.shape, expected.shape[2:], kernel, case["strides"], pads, case["count_include_pad"])
            + _quant_ints(x.dtype.name, case["y_dtype"], case["x_zero"], case["y_zero"], 1, area))
    table = average_multipliers(case["x_scale"], case["y_scale"], range(1, area + 1))
    actual = np.full_like(expected, 77)
    _kernels.call("qavgpool_i8", ints, [], [x, table, actual], num_threads=threads, use_ref=use_ref)
    return actual, expected


def test_windowed_fast_and_reference_match_numpy_on_random_shapes(isa):
    rng = np.random.default_rng(5)
    for _ in range(40):
        case = _random_case(rng)
        for threads, use_ref in ((1, True), (1, False), (2, False)):
            actual, expected = _run_windowed(case, threads=threads, use_ref=use_ref)
            np.testing.assert_array_equal(actual, expected, err_msg=f"{isa} ref={use_ref} threads={threads} "
                                          f"{ {k: v for k, v in case.items() if k != 'x'} } {case['x'].shape}")


@pytest.mark.parametrize("spatial", [1, 49, 63, 64, 65, 200, 3136])
def test_global_fast_and_reference_match_numpy(isa, spatial):
    rng = np.random.default_rng(spatial)
    for x_dtype, y_dtype in (("uint8", "uint8"), ("int8", "int8"), ("int8", "uint8")):
        x_range = INT_RANGES[x_dtype]
        x = rng.integers(x_range[0], x_range[1] + 1, (2, 5, 1, spatial)).astype(x_dtype)
        zx, zy = int(rng.integers(*x_range)), int(rng.integers(*INT_RANGES[y_dtype]))
        expected = average_pool(x, 0.04, zx, 0.013, zy, y_dtype)
        ints = [10, spatial] + _quant_ints(x_dtype, y_dtype, zx, zy, spatial, 1)
        for threads, use_ref in ((1, True), (2, False)):
            actual = np.full_like(expected, 77)
            _kernels.call("qglobal_avgpool_i8", ints, [], [x, average_multipliers(0.04, 0.013, [spatial]), actual],
                          num_threads=threads, use_ref=use_ref)
            np.testing.assert_array_equal(actual, expected, err_msg=f"{isa} {x_dtype}->{y_dtype} ref={use_ref}")


@pytest.mark.parametrize("y_dtype", ["uint8", "int8"])
def test_saturation_at_both_bounds(isa, y_dtype):
    """x_scale / y_scale = 40: means of +-100 steps land far outside the output range on both sides."""
    x = np.concatenate([np.full((1, 1, 5, 19), 250, np.uint8), np.full((1, 1, 5, 19), 3, np.uint8)], axis=1)
    case = dict(x=x, kernel=(2, 3), strides=(1, 1), pads=(1, 1, 0, 1), y_dtype=y_dtype, count_include_pad=0,
                x_zero=128, y_zero=0, x_scale=0.04, y_scale=0.001)
    actual, expected = _run_windowed(case)
    low, high = INT_RANGES[y_dtype]
    np.testing.assert_array_equal(actual, expected)
    assert np.all(actual[0, 0] == high) and np.all(actual[0, 1] == low)


def test_fixed_point_rounds_half_to_even_and_tracks_the_exact_ratio():
    # equal scales, divisor 4: acc / 4 exactly, so ties round to even (2.5 -> 2, 3.5 -> 4, -2.5 -> -2)
    table = average_multipliers(0.02, 0.02, [4])
    assert table[0, 0] == 1 << 30 and table[0, 1] == 32
    values = round_shift_half_even(np.array([10, 14, -10, -14, 9, 11]), table[0, 0], table[0, 1])
    np.testing.assert_array_equal(values, [2, 4, -2, -4, 2, 3])
    # every divisor's m0 * 2^-shift is within 2^-31 (relative) of sx / (sy * d)
    divisors = np.arange(1, 1000)
    table = average_multipliers(0.0371, 0.0123, divisors)
    ratio = float(np.float32(0.0371)) / (float(np.float32(0.0123)) * divisors)
    approximation = table[:, 0].astype(np.float64) * np.exp2(-table[:, 1].astype(np.float64))
    assert np.all(np.abs(approximation / ratio - 1) <= 2.0 ** -31)
    assert np.all((table[:, 0] >= 1 << 30) & (table[:, 1] >= 1) & (table[:, 1] <= 62))


def test_out_of_range_ratios_are_refused():
    with pytest.raises(ValueError, match="fixed-point range"):
        average_multipliers(1e6, 1e-6, [1])
    with pytest.raises(ValueError, match="divisor"):
        average_multipliers(0.1, 0.1, [0])
