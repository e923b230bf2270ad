"""The DSP device (issue #7): signal ops on ortx's own planned FFT (kernels/fft.c, compiled by ortx.dsp).

The DSP stands for a signal processor beside the CPU; here it is emulated by the host's cores, run on its own lane
(a worker thread of the executor), so the main thread is free while transforms run. Memory is the host's (no copy
in or out), so the bandwidth a crossing tensor pays is the host's memcpy rate. The cost model is calibrated by
measurement: seconds per FFT point (n log2 n units, ortx.dsp's Step.points) from timing a 16 x 1024 real DFT once,
on first use, plus a per-step overhead.
"""
from __future__ import annotations

import functools
import time

import numpy as np
import onnx_ir as ir

from ortx.ep.devices.cpu import HOST_BANDWIDTH_BYTES_PER_SECOND, _memory_bytes, _peak_ops_per_second
from ortx.ep.devices.device import Device, OpSupport

# Per step: the Python dispatch of one kernel call and the lane's queue handoff, measured ~10-20 us.
STEP_OVERHEAD_SECONDS = 15e-6

_SIGNAL = "static shapes; float32; scalar inputs (dft_length, axis, frame_step, frame_length, sizes) constant"
DSP_OPS = (
    OpSupport("", "DFT", ("float32",), f"opsets 17 and 20; any length (mixed radix 4/2/3/5, generic radix <= 31, "
                                       f"Bluestein above); inverse, onesided, IRFFT; {_SIGNAL}"),
    OpSupport("", "STFT", ("float32",), f"opset 17; real or complex signal; window constant or computed; {_SIGNAL}"),
    OpSupport("", "HannWindow", ("float32", "float64", "float16"), "size constant (computed at compile time)"),
    OpSupport("", "HammingWindow", ("float32", "float64", "float16"), "size constant (computed at compile time)"),
    OpSupport("", "BlackmanWindow", ("float32", "float64", "float16"), "size constant (computed at compile time)"),
    OpSupport("", "MelWeightMatrix", ("float32", "float64", "float16"), "all inputs constant (computed at compile "
                                                                          "time)"),
    OpSupport("", "Conv", ("float32",), "1-D FIR: depthwise or filter bank on one channel, >= 8 taps, stride 1, "
                                        "constant weights (direct below 96 taps, FFT overlap-save above); or any "
                                        "stride when the weights are a windowed DFT basis (Conv1d-as-STFT)"),
)

DSP = Device(
    name="dsp",
    kind="dsp",
    description="signal processor (emulated on the host's cores on its own worker thread): DFT/STFT/windows/mel/"
                "FIR on ortx's planned FFT",
    ops=DSP_OPS,
    memory_bytes=_memory_bytes(),
    bandwidth_bytes_per_second=HOST_BANDWIDTH_BYTES_PER_SECOND,
    peak_ops_per_second={"float32": _peak_ops_per_second()["float32"]},
    compiler="ortx.dsp.compile_nodes (one kernels/fft.c step per node; plans cached per length)",
    backend="ortx.ep.devices.dsp",
)


@functools.lru_cache(maxsize=None)
def seconds_per_point() -> float:
    """Measured once: best of 5 timings of 16 real 1024-point DFTs, divided by their 16 x 1024 x 10 points."""
    from ortx import _kernels

    rows, n = 16, 1024
    x = np.random.default_rng(0).standard_normal((rows, n)).astype(np.float32)
    y = np.empty((rows, n // 2 + 1, 2), np.float32)
    ints = np.array([n, n, rows, 1, 0, n // 2 + 1, 0], np.int64)
    floats = np.ones(1, np.float32)
    _kernels.call("dft_f32", ints, floats, [x, y], 1)  # builds the plan
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        _kernels.call("dft_f32", ints, floats, [x, y], 1)
        best = min(best, time.perf_counter() - start)
    return best / (rows * n * 10)


# Backend --------------------------------------------------------------------------------------------------------
# ortx.dsp is imported on first use, so listing devices imports no DSP compiler.
def check(node: ir.Node) -> str | None:
    from ortx.dsp import check as dsp_check

    return dsp_check(node)


def estimate_seconds(node: ir.Node) -> float:
    """Calibrated estimate; a node the DSP cannot run costs infinity (placement never picks it)."""
    from ortx.dsp.program import lower

    try:
        step = lower(node)
    except ValueError:
        return float("inf")
    return STEP_OVERHEAD_SECONDS + step.points * seconds_per_point()


def compile(nodes: list[ir.Node], inputs: list[ir.Value], outputs: list[ir.Value], *,  # noqa: A001 (the interface)
            num_threads: int):
    """A DspProgram (ortx.dsp.program): run(inputs, outputs) serialised by a lock, stats() counts runs."""
    from ortx.dsp import compile_nodes

    return compile_nodes(nodes, inputs, outputs, num_threads=num_threads)
