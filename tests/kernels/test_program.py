"""The program object's handling of constants: kernels read them on cache-line boundaries."""
import numpy as np

from ortx import _kernels


def _misaligned(values: np.ndarray, offset: int) -> np.ndarray:
    raw = np.empty(values.nbytes + 128, dtype=np.uint8)
    start = (-raw.__array_interface__["data"][0] % 64) + offset
    view = raw[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    view[...] = values
    return view


def _empty_program(constants):
    return _kernels.Program([], [0], [0], [0], [], [], [], [], [], list(constants))


def test_misaligned_constants_are_moved_to_cache_line_boundaries_with_their_values():
    rng = np.random.default_rng(7)
    weights = rng.standard_normal((5, 33)).astype(np.float32)
    bf16 = rng.integers(0, 2**16, size=(3, 17), dtype=np.uint16)
    inputs = [_misaligned(weights, 4), _misaligned(bf16, 32), _misaligned(weights, 0)]
    assert [a.__array_interface__["data"][0] % 64 for a in inputs] == [4, 32, 0]
    program = _empty_program(inputs)
    assert [address % 64 for address in program.constant_addresses] == [0, 0, 0]
    # the aligned one is used in place, the others are copies
    assert program.constant_addresses[2] == inputs[2].__array_interface__["data"][0]
    assert program.constant_addresses[0] != inputs[0].__array_interface__["data"][0]


def test_cache_line_aligned_keeps_values_dtype_and_shape():
    rng = np.random.default_rng(8)
    for dtype, offset in ((np.float32, 4), (np.uint16, 2), (np.int8, 1), (np.int64, 16)):
        values = (rng.standard_normal((4, 9, 3)) * 50).astype(dtype)
        source = _misaligned(values, offset)
        aligned = _kernels._cache_line_aligned(source)
        assert aligned.__array_interface__["data"][0] % 64 == 0
        assert aligned.dtype == values.dtype and aligned.shape == values.shape
        np.testing.assert_array_equal(aligned, values)
    already = _misaligned(np.arange(10, dtype=np.float32), 0)
    assert _kernels._cache_line_aligned(already) is already
