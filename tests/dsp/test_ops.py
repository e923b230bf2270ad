"""The DSP's op lowerings against ONNX Runtime CPU and onnx.reference on seeded random inputs.

Tolerances: tests/tolerances.py's float32 (1e-4 of the output's magnitude) covers our fp32 FFTs up to 16384
points (error ~ 2e-7 of max|X| against onnx.reference's float64 numpy.fft, see test_fft_kernels.py). ORT runs a
radix-2 FFT for powers of two (same bound) but a naive fp32 O(n^2) DFT for other lengths, whose error grows with n
(measured against float64: 1.6e-4 of max|X| at n=1000, 1.0e-3 at 4099, 2.9e-3 at 12000): against ORT those
lengths get float32's tolerance plus 4 n eps(float32) of max|X|.
"""
import threading

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from ortx.dsp import check
from tests.dsp._helpers import one_node_model, run_dsp, run_ort, run_reference
from tests.tolerances import assert_close


def assert_close_to_ort(actual, expected, naive_length):
    if naive_length is None or naive_length & (naive_length - 1) == 0:
        assert_close(actual, expected, what="vs ORT")
        return
    scale = float(np.max(np.abs(expected)))
    atol = 1e-5 + (1e-4 + 4 * naive_length * np.finfo(np.float32).eps) * scale
    np.testing.assert_allclose(actual, expected, rtol=0, atol=atol, err_msg=f"vs ORT's naive {naive_length}-point DFT")


def compare(node, feeds, constants, opset, *, against=("ort", "reference"), naive_length=None):
    """naive_length: the DFT length ORT transforms (its accuracy depends on it, see the module docstring)."""
    model = one_node_model(node, feeds, constants, opset)
    actual, _ = run_dsp(model, feeds, num_threads=2)
    if "ort" in against:
        assert_close_to_ort(actual[0], run_ort(model, feeds)[0], naive_length)
    if "reference" in against:
        assert_close(actual[0], run_reference(model, feeds)[0].astype(np.float32),
                     what=f"{node.op_type} vs onnx.reference")
    return actual[0]


RNG = np.random.default_rng(17)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("shape,axis,length", [((2, 1024, 1), 1, None), ((3, 4096, 2), 1, None),
                                               ((1, 16384, 1), 1, None), ((2, 1000, 2), 1, 1200),
                                               ((2, 6, 5, 2), 2, 7), ((2, 6, 5, 1), -3, 4), ((4, 97, 1), 1, None)])
@pytest.mark.parametrize("inverse,onesided", [(0, 0), (0, 1), (1, 0)])
def test_dft_matches_ort(opset, shape, axis, length, inverse, onesided):
    x = RNG.standard_normal(shape).astype(np.float32)
    constants = {} if length is None else {"n": np.array(length, np.int64)}
    inputs = ["x", "n" if length is not None else ""]
    attributes = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        constants["axis"] = np.array(axis, np.int64)
        inputs.append("axis")
    else:
        attributes["axis"] = axis
    naive_length = length or shape[axis]
    if onesided and shape[-1] == 2:  # rejected by onnx and ORT alike
        node = helper.make_node("DFT", inputs, ["y"], name="rfft_complex", **attributes)
        assert "needs real input" in declined(node, {"x": x}, constants, opset)
        return
    compare(helper.make_node("DFT", inputs, ["y"], **attributes), {"x": x}, constants, opset,
            naive_length=naive_length)


@pytest.mark.parametrize("length,n", [(5, None), (9, 16), (33, 64), (9, 17)])
def test_dft_irfft_matches_ort(length, n):
    x = RNG.standard_normal((2, length, 3, 2)).astype(np.float32)
    constants = {"axis": np.array(1, np.int64)}
    if n is not None:
        constants["n"] = np.array(n, np.int64)
    node = helper.make_node("DFT", ["x", "n" if n else "", "axis"], ["y"], inverse=1, onesided=1)
    compare(node, {"x": x}, constants, 20, naive_length=n or 2 * (length - 1))


def test_dft_irfft_longer_input_follows_reference():
    # 20 bins for n = 17 (9 used): ORT 1.32 differs from numpy's irfft by 0.6 of max|x| here; numpy's is the spec's
    x = RNG.standard_normal((2, 20, 3, 2)).astype(np.float32)
    node = helper.make_node("DFT", ["x", "n", "axis"], ["y"], inverse=1, onesided=1)
    compare(node, {"x": x}, {"n": np.array(17, np.int64), "axis": np.array(1, np.int64)}, 20, against=("reference",))


@pytest.mark.parametrize("frame,step,channels,onesided,window", [(512, 160, 1, 1, "hann"), (400, 160, 1, 1, "hann"),
                                                                 (16, 7, 2, 0, "hann"), (15, 7, 1, 0, None),
                                                                 (64, 32, 2, 1, "hann")])
def test_stft_matches_ort(frame, step, channels, onesided, window):
    signal = RNG.standard_normal((2, 16000 if frame >= 400 else 300, channels)).astype(np.float32)
    constants = {"step": np.array(step, np.int64)}
    inputs = ["signal", "step"]
    if window:
        constants["window"] = np.hanning(frame).astype(np.float32)
        inputs.append("window")
    else:
        constants["frame"] = np.array(frame, np.int64)
        inputs += ["", "frame"]
    compare(helper.make_node("STFT", inputs, ["y"], onesided=onesided), {"signal": signal}, constants, 17,
            naive_length=frame)


def test_stft_with_runtime_window():
    signal = RNG.standard_normal((1, 2000, 1)).astype(np.float32)
    window = RNG.random(256).astype(np.float32)
    node = helper.make_node("STFT", ["signal", "step", "window"], ["y"], onesided=1)
    compare(node, {"signal": signal, "window": window}, {"step": np.array(100, np.int64)}, 17)


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")  # size 1 symmetric: NaN
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 10, 512])
def test_windows_match_ort(op, periodic, size):
    compare(helper.make_node(op, ["size"], ["y"], periodic=periodic), {}, {"size": np.array(size, np.int64)}, 17)


@pytest.mark.parametrize("bins,dft_length,rate,low,high", [(8, 64, 16000, 20.0, 7600.0), (80, 512, 16000, 0.0, 8000.0),
                                                            (40, 400, 8000, 125.0, 3800.0)])
def test_mel_weight_matrix_matches_ort(bins, dft_length, rate, low, high):
    constants = {"a": np.array(bins, np.int64), "b": np.array(dft_length, np.int64), "c": np.array(rate, np.int64),
                 "d": np.array(low, np.float32), "e": np.array(high, np.float32)}
    compare(helper.make_node("MelWeightMatrix", list("abcde"), ["y"]), {}, constants, 17)


@pytest.mark.parametrize("channels,filters,group,taps,pads", [(4, 4, 4, 9, (4, 4)), (3, 3, 3, 129, (64, 64)),
                                                              (1, 5, 1, 48, (0, 0)), (1, 1, 1, 1001, (0, 1000))])
def test_fir_conv_matches_ort(channels, filters, group, taps, pads):
    x = RNG.standard_normal((2, channels, 4000)).astype(np.float32)
    constants = {"w": (RNG.standard_normal((filters, 1, taps)) / np.sqrt(taps)).astype(np.float32),
                 "b": RNG.standard_normal(filters).astype(np.float32)}
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, pads=list(pads), kernel_shape=[taps])
    compare(node, {"x": x}, constants, 17, against=("ort",))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_conv_as_stft_matches_ort(sign):
    taps, stride = 256, 128
    window = np.hanning(taps + 1)[:-1]
    angle = 2 * np.pi * np.outer(np.arange(taps // 2 + 1), np.arange(taps)) / taps
    basis = np.concatenate([window * np.cos(angle), sign * window * np.sin(angle)])[:, None, :].astype(np.float32)
    x = RNG.standard_normal((2, 1, 4160)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride], pads=[64, 64])
    compare(node, {"x": x}, {"w": basis}, 17, against=("ort",))


def declined(node, feeds, constants, opset=17):
    """check() on a node onnx's strict shape inference may itself reject: the inputs' declared shapes suffice."""
    graph = ir.serde.deserialize_model(one_node_model(node, feeds, constants, opset)).graph
    return check(list(graph)[0])


def test_bad_inputs_are_declined_with_the_node_and_input_named():
    x = np.zeros((2, 16, 3), np.float32)
    reason = declined(helper.make_node("DFT", ["x"], ["y"], name="dft_bad_shape"), {"x": x}, {})
    assert "dft_bad_shape" in reason and "last dimension must be 1 (real) or 2 (complex)" in reason
    x = np.zeros((2, 16, 1), np.float32)
    reason = declined(helper.make_node("DFT", ["x", "n"], ["y"], name="dft_zero"), {"x": x},
                      {"n": np.array(0, np.int64)})
    assert "dft_zero" in reason and "dft_length must be > 0" in reason
    reason = declined(helper.make_node("DFT", ["x"], ["y"], name="irfft_real", inverse=1, onesided=1), {"x": x}, {})
    assert "irfft_real" in reason and "complex input" in reason
    reason = declined(helper.make_node("DFT", ["x"], ["y"], name="dft_axis", axis=2), {"x": x}, {})
    assert "dft_axis" in reason and "axis 2" in reason
    reason = declined(helper.make_node("DFT", ["x", "n"], ["y"], name="dft_runtime_length"),
                      {"x": x, "n": np.array(8, np.int64)}, {})
    assert "dft_runtime_length" in reason and "dft_length" in reason and "not a constant" in reason
    reason = declined(helper.make_node("STFT", ["s", "step", "w", "fl"], ["y"], name="stft_window"), {"s": x},
                      {"step": np.array(4, np.int64), "w": np.ones(8, np.float32), "fl": np.array(6, np.int64)})
    assert "stft_window" in reason and "frame_length is 6" in reason
    reason = declined(helper.make_node("Conv", ["x", "w"], ["y"], name="short_fir", group=3),
                      {"x": np.zeros((1, 3, 50), np.float32)}, {"w": np.ones((3, 1, 3), np.float32)})
    assert "short_fir" in reason and "3-tap" in reason
    reason = declined(helper.make_node("DFT", ["x"], ["y"], name="rfft_complex", onesided=1),
                      {"x": np.zeros((2, 16, 2), np.float32)}, {})
    assert "rfft_complex" in reason and "needs real input" in reason


def test_strided_conv_that_is_not_a_dft_basis_is_declined():
    weight = RNG.standard_normal((258, 1, 256)).astype(np.float32)
    reason = declined(helper.make_node("Conv", ["x", "w"], ["y"], name="strided_random", strides=[128]),
                      {"x": np.zeros((1, 1, 1024), np.float32)}, {"w": weight})
    assert "strided_random" in reason and "stride 128" in reason and "not a windowed DFT basis" in reason


def test_stft_inferred_shape_disagreeing_with_the_op_is_declined():
    # onnx's shape inference reads a missing onesided as 0 when the window is not a constant; the spec says 1
    signal = np.zeros((1, 2000, 1), np.float32)
    model = one_node_model(helper.make_node("STFT", ["s", "step", "w"], ["y"], name="stft_default"),
                           {"s": signal, "w": np.ones(256, np.float32)}, {"step": np.array(100, np.int64)}, 17)
    from ortx.ep.compile_nodes import infer_shapes
    reason = check(list(infer_shapes(model).graph)[0])
    assert "stft_default" in reason and "(1, 18, 256, 2)" in reason and "(1, 18, 129, 2)" in reason


def test_non_power_of_two_lengths_are_not_bad_input():
    x = RNG.standard_normal((1, 4099, 1)).astype(np.float32)
    compare(helper.make_node("DFT", ["x"], ["y"]), {"x": x}, {}, 17, naive_length=4099)


def test_program_runs_from_worker_threads():
    x = RNG.standard_normal((4, 2048, 1)).astype(np.float32)
    model = one_node_model(helper.make_node("DFT", ["x"], ["y"], onesided=1), {"x": x}, {}, 17)
    expected, program = run_dsp(model, {"x": x})
    results, errors = [], []

    def worker(seed):
        try:
            feed = np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)
            out = np.zeros_like(expected[0])
            for _ in range(5):
                program.run([feed], [out])
            results.append((feed, out.copy()))
        except Exception as error:  # reported below, with the thread's error
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 4
    for feed, out in results:
        expected_out = np.fft.rfft(feed[..., 0], axis=1)
        assert_close(out, np.stack([expected_out.real, expected_out.imag], -1).astype(np.float32))
    assert program.stats()["runs"] == 21
