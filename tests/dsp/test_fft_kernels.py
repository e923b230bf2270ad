"""kernels/fft.c against numpy.fft and against its own O(n^2) oracles.

Tolerance: an FFT's fp32 error grows like sqrt(log2 n) x eps x max|X| (rounding is a random walk over log2 n
stages); we allow 8 x sqrt(log2 n + 1) x eps(float32) x max|X|, measured worst 1.5 of that unit over 37 lengths.
"""
import numpy as np
import pytest

from ortx import _kernels

EPSILON = float(np.finfo(np.float32).eps)


def fft_tolerance(n, reference):
    return 8.0 * np.sqrt(np.log2(max(n, 2)) + 1.0) * EPSILON * float(np.max(np.abs(reference)))


def dft(x, n, *, inverse=False, onesided=False, axis_inner=1, use_ref=False, threads=1):
    """x: [outer, length, inner, 1 or 2] float32 -> complex [outer, bins, inner]."""
    outer, length, inner, channels = x.shape
    bins = n // 2 + 1 if onesided else n
    y = np.zeros((outer, bins, inner, 2), np.float32)
    _kernels.call("dft_f32", [n, length, outer, inner, int(channels == 2), bins, int(inverse)],
                  [1.0 / n if inverse else 1.0], [x, y], threads, use_ref)
    return y[..., 0] + 1j * y[..., 1]


def as_complex(x):
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(np.complex128)


# powers of two and 4, mixed 2/3/5, primes (generic radix <= 31; Bluestein above), odd, the 1024..16384
LENGTHS = [1, 2, 3, 4, 5, 7, 8, 12, 15, 17, 30, 31, 37, 49, 60, 97, 100, 127, 210, 243, 625, 1000, 1021, 1024,
           2048, 4096, 4099, 8192, 12000, 16000, 16383, 16384]


ISAS = [isa for isa in ("portable", "avx2", "avx512") if _kernels.ISA_NAMES.index(isa) <=
        _kernels.ISA_NAMES.index(_kernels.cpu_isa())]


@pytest.fixture(params=ISAS)
def isa(request):
    """Every instruction set this CPU has (the stages have a portable and an AVX2 build, fft_stages.h)."""
    best = _kernels.cpu_isa()
    _kernels.force_isa(request.param)
    yield request.param
    _kernels.force_isa(best)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("complex_input", [False, True])
def test_forward_and_inverse_match_numpy(n, complex_input, isa):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((3, n, 1, 2 if complex_input else 1)).astype(np.float32)
    signal = as_complex(x)[:, :, 0]
    for inverse in (False, True):
        expected = np.fft.ifft(signal, axis=1) if inverse else np.fft.fft(signal, axis=1)
        actual = dft(x, n, inverse=inverse)[:, :, 0]
        error = np.max(np.abs(actual - expected))
        assert error <= fft_tolerance(n, expected), f"n={n} inverse={inverse}: {error}"


@pytest.mark.parametrize("n", [6, 16, 17, 64, 100, 101])
def test_fast_matches_reference_kernel(n, isa):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, n, 3, 2)).astype(np.float32)
    fast, ref = dft(x, n), dft(x, n, use_ref=True)
    assert np.max(np.abs(fast - ref)) <= fft_tolerance(n, ref)


@pytest.mark.parametrize("n,length", [(16, 10), (7, 10), (1024, 1000), (509, 600)])
def test_real_onesided_pads_and_truncates(n, length):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, length, 3, 1)).astype(np.float32)
    expected = np.fft.rfft(x[..., 0], n, axis=1)
    actual = dft(x, n, onesided=True)
    assert np.max(np.abs(actual - expected)) <= fft_tolerance(n, expected)


def test_strided_axis_and_threads_give_identical_results():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 2048, 5, 1)).astype(np.float32)
    one, two = dft(x, 2048, threads=1), dft(x, 2048, threads=2)
    np.testing.assert_array_equal(one, two)
    expected = np.fft.fft(x[..., 0], axis=1)
    assert np.max(np.abs(one - expected)) <= fft_tolerance(2048, expected)


def stft(signal, window, step, onesided, use_ref=False):
    batch, length, channels = signal.shape
    frame = window.shape[0]
    frames = (length - frame) // step + 1
    bins = frame // 2 + 1 if onesided else frame
    y = np.zeros((batch, frames, bins, 2), np.float32)
    _kernels.call("stft_f32", [batch, length, int(channels == 2), step, frame, frames, bins, 1], [],
                  [signal, window, y], 2, use_ref)
    return y


@pytest.mark.parametrize("frame,step,channels,onesided", [(512, 160, 1, 1), (400, 160, 1, 0), (15, 7, 2, 0),
                                                          (64, 64, 2, 1)])
def test_stft_matches_numpy_and_reference(frame, step, channels, onesided):
    rng = np.random.default_rng(frame)
    signal = rng.standard_normal((2, 3000, channels)).astype(np.float32)
    window = np.hanning(frame).astype(np.float32)
    actual = stft(signal, window, step, onesided)
    frames = actual.shape[1]
    index = np.arange(frames)[:, None] * step + np.arange(frame)[None, :]
    expected = np.fft.fft(as_complex(signal)[:, index] * window, axis=-1)[..., :actual.shape[2]]
    assert np.max(np.abs(actual[..., 0] + 1j * actual[..., 1] - expected)) <= fft_tolerance(frame, expected)
    ref = stft(signal, window, step, onesided, use_ref=True)
    assert np.max(np.abs(actual - ref)) <= fft_tolerance(frame, ref)


@pytest.mark.parametrize("taps,method,pads", [(9, 0, (4, 4)), (33, 0, (0, 0)), (64, 1, (10, 53)),
                                              (301, 1, (0, 0)), (1000, 1, (500, 499))])
@pytest.mark.parametrize("shared", [0, 1])
def test_fir_direct_and_overlap_save_match_reference(taps, method, pads, shared):
    rng = np.random.default_rng(taps)
    batch, channels, length = 2, 3, 5000
    x = rng.standard_normal((batch, 1 if shared else channels, length)).astype(np.float32)
    weight = rng.standard_normal((channels, taps)).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    output_length = length + pads[0] + pads[1] - taps + 1
    ints = [batch, channels, length, taps, output_length, pads[0], 1, method, shared]
    fast = np.zeros((batch, channels, output_length), np.float32)
    ref = np.zeros_like(fast)
    _kernels.call("fir_f32", ints, [], [x, weight, bias, fast], 2)
    _kernels.call("fir_f32", ints, [], [x, weight, bias, ref], 1, True)
    # direct: float sums of `taps` products; overlap-save: FFT rounding on values of magnitude ~sqrt(taps)
    tolerance = 1e-5 * np.sqrt(taps) * np.max(np.abs(ref)) * (8 if method else 1)
    assert np.max(np.abs(fast - ref)) <= tolerance
