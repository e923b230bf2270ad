"""Attention-family kernel multi_head_attention_f32: fast vs `_ref` vs numpy (float64) over head layouts with
sizes off the 6x16 micro-tile and the row blocks, separate and packed Q/K/V, every runnable ISA; 1 and 2 threads
bitwise equal (each output row is computed the same way whatever the row-block split)."""
from __future__ import annotations

import numpy as np
import pytest

from ortx import _kernels
from tests.kernels.test_elementwise import isa, random_normal  # noqa: F401  (isa is a fixture)
from tests.tolerances import assert_close, assert_close_bf16

# (batch, heads, S, L, D, Dv): BERT-base-like heads, tails of every tile, one row, L != S, D != Dv
SHAPES = [(1, 4, 128, 128, 64, 64), (2, 3, 37, 53, 19, 23), (1, 2, 1, 7, 3, 5), (3, 1, 13, 1, 8, 8),
          (1, 12, 25, 25, 16, 16), (1, 2, 200, 31, 33, 17)]


def _reference(q, k, v, heads, scale, grid=None):
    batch, seq, key_width = q.shape
    length, value_width = k.shape[1], v.shape[2]
    depth, value_depth = key_width // heads, value_width // heads
    qh = q.astype(np.float64).reshape(batch, seq, heads, depth).transpose(0, 2, 1, 3)
    kh = k.astype(np.float64).reshape(batch, length, heads, depth).transpose(0, 2, 3, 1)
    vh = v.astype(np.float64).reshape(batch, length, heads, value_depth).transpose(0, 2, 1, 3)
    scores = scale * (qh @ kh)
    probabilities = np.exp(scores - scores.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    if grid is not None:  # QuantizeLinear then DequantizeLinear, in float32 as ONNX defines them
        step, low, high = grid[:3]
        quotient = probabilities.astype(np.float32) / np.float32(step)
        probabilities = np.rint(np.clip(quotient, low, high)).astype(np.float64) * np.float32(step)
    return (probabilities @ vh).transpose(0, 2, 1, 3).reshape(batch, seq, value_width).astype(np.float32)


def _run(buffers, offsets, shape, scale, threads, use_ref=False, grid=None, kernel="multi_head_attention_f32"):
    """buffers: (q, k, v), each [batch, rows, width]; offsets: where Q, K, V's columns start in them."""
    batch, heads, seq, length, depth, value_depth = shape
    sizes = np.zeros(3, np.int64)
    _kernels.call("multi_head_attention_sizes_f32", [*shape, threads], [], [sizes])
    workspace = np.full(int(sizes[0]) // 4, np.nan, np.float32)
    y = np.full((batch, seq, heads * value_depth), np.nan, np.float32)
    row_strides = [b.shape[2] for b in buffers]
    batch_strides = [b.shape[1] * b.shape[2] for b in buffers]
    quantize = [0, 0] if grid is None else [1 if grid[3] == "uint8" else 2, grid[4]]
    ints = [*shape, *offsets, *row_strides, heads * value_depth, *batch_strides, seq * heads * value_depth, threads,
            *quantize]
    _kernels.call(kernel, ints, [scale, 1.0 if grid is None else grid[0]], [*buffers, y, workspace], threads,
                  use_ref)
    return y


@pytest.mark.parametrize("shape", SHAPES)
def test_separate_q_k_v_match_numpy_and_reference(isa, shape):
    batch, heads, seq, length, depth, value_depth = shape
    rng = np.random.default_rng(sum(shape))
    q = random_normal(rng, (batch, seq, heads * depth))
    k = random_normal(rng, (batch, length, heads * depth))
    v = random_normal(rng, (batch, length, heads * value_depth))
    scale = 1.0 / np.sqrt(depth)
    expected = _reference(q, k, v, heads, scale)
    one = _run((q, k, v), [0, 0, 0], shape, scale, 1)
    assert_close(one, expected, what=f"{shape}")
    assert_close(_run((q, k, v), [0, 0, 0], shape, scale, 1, use_ref=True), expected, what="ref")
    for threads in (2, 3):
        np.testing.assert_array_equal(_run((q, k, v), [0, 0, 0], shape, scale, threads), one)


@pytest.mark.parametrize("shape", [shape for shape in SHAPES if shape[2] == shape[3]])
def test_packed_qkv_columns_read_in_place(isa, shape):
    batch, heads, seq, _, depth, value_depth = shape
    rng = np.random.default_rng(7 + sum(shape))
    key_width, value_width = heads * depth, heads * value_depth
    packed = random_normal(rng, (batch, seq, 2 * key_width + value_width))
    q, k, v = (np.ascontiguousarray(part) for part in np.split(packed, [key_width, 2 * key_width], axis=2))
    expected = _run((q, k, v), [0, 0, 0], shape, 0.5, 1)
    assert_close(expected, _reference(q, k, v, heads, 0.5))
    for threads in (1, 2):
        got = _run((packed, packed, packed), [0, key_width, 2 * key_width], shape, 0.5, threads)
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("shape, dtype, zero", [(SHAPES[0], "uint8", 0), (SHAPES[1], "int8", -128),
                                                (SHAPES[2], "uint8", 0), (SHAPES[1], "uint8", 7)])
def test_probabilities_on_an_int8_grid(isa, shape, dtype, zero):
    """An int8 QDQ model's attention: the Softmax output quantized (scale 1/255) and back."""
    batch, heads, seq, length, depth, value_depth = shape
    rng = np.random.default_rng(11 + sum(shape))
    q, k, v = (random_normal(rng, (batch, rows, heads * width))
               for rows, width in ((seq, depth), (length, depth), (length, value_depth)))
    low, high = (-128, 127) if dtype == "int8" else (0, 255)
    grid = (1.0 / 255, low - zero, high - zero, dtype, zero)
    one = _run((q, k, v), [0, 0, 0], shape, 0.25, 1, grid=grid)
    expected = _reference(q, k, v, heads, 0.25, grid=grid)
    # a probability within float rounding of a grid step's midpoint may round either way: one step, 1/255, of
    # weight on one value row moves an output by at most max|V| / 255
    assert np.max(np.abs(one - expected)) <= np.max(np.abs(v)) / 255 + 1e-5
    assert np.mean(np.abs(one - expected) > 1e-4) < 0.01
    assert np.max(np.abs(one - _run((q, k, v), [0, 0, 0], shape, 0.25, 1, use_ref=True, grid=grid))) <= \
        np.max(np.abs(v)) / 255 + 1e-5
    np.testing.assert_array_equal(_run((q, k, v), [0, 0, 0], shape, 0.25, 2, grid=grid), one)
    assert not np.allclose(one, _reference(q, k, v, heads, 0.25), atol=1e-4)  # the grid does change the output


@pytest.mark.parametrize("shape", SHAPES)
def test_bf16_attention_matches_fp32_and_its_reference(isa, shape):
    """multi_head_attention_bf16 (precision "bf16"): both products on bf16 operands, the softmax in fp32; within
    the bf16 tolerance of the float64 attention and of its reference kernel (which rounds the same operands), packed
    QKV read in place, 1-3 threads bitwise equal."""
    batch, heads, seq, length, depth, value_depth = shape
    rng = np.random.default_rng(23 + sum(shape))
    q = random_normal(rng, (batch, seq, heads * depth))
    k = random_normal(rng, (batch, length, heads * depth))
    v = random_normal(rng, (batch, length, heads * value_depth))
    scale = 1.0 / np.sqrt(depth)
    bf16 = "multi_head_attention_bf16"
    one = _run((q, k, v), [0, 0, 0], shape, scale, 1, kernel=bf16)
    assert_close_bf16(one, _reference(q, k, v, heads, scale), what=f"{shape}")
    assert_close_bf16(one, _run((q, k, v), [0, 0, 0], shape, scale, 1, use_ref=True, kernel=bf16), what="ref")
    for threads in (2, 3):
        np.testing.assert_array_equal(_run((q, k, v), [0, 0, 0], shape, scale, threads, kernel=bf16), one)
    if seq == length:
        packed = np.concatenate([q, k, v], axis=2)
        widths = [0, heads * depth, 2 * heads * depth]
        np.testing.assert_array_equal(_run((packed,) * 3, widths, shape, scale, 2, kernel=bf16), one)
    assert not np.array_equal(one, _run((q, k, v), [0, 0, 0], shape, scale, 1))  # the operands were rounded
