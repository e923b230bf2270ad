"""DFT (opsets 17 and 20) and STFT (opset 17) lowered to the dft_f32 / stft_f32 kernels (kernels/fft.c).

DFT cases, as the ONNX spec and ORT define them:
    Case 1: forward, full spectrum (real or complex input).
    Case 2: forward, onesided (RFFT): bins 0..n/2 of real input (complex input is an error, as in onnx and ORT).
    Case 3: inverse, full (complex or real input), scaled by 1/n.
    Case 4: inverse, onesided (IRFFT): complex one-sided input -> real signal [..., n, 1]; the Hermitian spectrum
            is rebuilt, then Case 3 runs and the real part is kept.
dft_length pads or truncates the transformed axis; its default is the axis length (2 (L - 1) for Case 4).
"""
from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from ortx import _kernels
from ortx.dsp._common import (DspError, Step, attribute, constant_scalar, describe, expect_output, float32_input,
                              present)
from ortx.ep.lowering._values import opset_version


def _transform_points(rows: int, n: int) -> float:
    return float(rows) * n * max(math.log2(max(n, 2)), 1.0)


def _dft_axis(node: ir.Node, rank: int) -> int:
    if opset_version(node) >= 20:
        axis = constant_scalar(node, 2, "axis", required=False)
        axis = -2 if axis is None else int(axis)
    else:
        axis = int(attribute(node, "axis", 1))
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise DspError(f"{describe(node)}: axis {axis} is outside [-{rank}, -2] and [0, {rank - 2}] for input rank "
                       f"{rank} (the last axis holds real/imaginary parts)")
    return axis % rank


def lower_dft(node: ir.Node) -> Step:
    shape = float32_input(node, 0, "input")
    if len(shape) < 2 or shape[-1] not in (1, 2):
        raise DspError(f"{describe(node)}: input {node.inputs[0].name!r} has shape {shape}; the last dimension must "
                       f"be 1 (real) or 2 (complex)")
    axis = _dft_axis(node, len(shape))
    inverse, onesided = bool(attribute(node, "inverse", 0)), bool(attribute(node, "onesided", 0))
    irfft = inverse and onesided
    if irfft and shape[-1] != 2:
        raise DspError(f"{describe(node)}: inverse one-sided DFT (IRFFT) needs complex input (last dimension 2), "
                       f"input has shape {shape}")
    length = shape[axis]
    n = constant_scalar(node, 1, "dft_length", required=False)
    n = (2 * (length - 1) if irfft else length) if n is None else int(n)
    if n <= 0:
        raise DspError(f"{describe(node)}: dft_length must be > 0, got {n}")
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:-1])
    complex_input = int(shape[-1] == 2)
    if onesided and not inverse and complex_input:
        raise DspError(f"{describe(node)}: one-sided forward DFT needs real input (last dimension 1), input has "
                       f"shape {shape}")
    if irfft:
        expect_output(node, shape[:axis] + (n,) + shape[axis + 1:-1] + (1,))
        return _irfft_step(node, n, length, outer, inner)
    bins = n // 2 + 1 if onesided and not inverse else n
    expect_output(node, shape[:axis] + (bins,) + shape[axis + 1:-1] + (2,))
    ints = np.array([n, length, outer, inner, complex_input, bins, int(inverse)], np.int64)
    floats = np.array([1.0 / n if inverse else 1.0], np.float32)

    def run(reads, writes, num_threads):
        _kernels.call("dft_f32", ints, floats, [reads[0], writes[0]], num_threads)

    return Step(node.name, (node.inputs[0].name,), (node.outputs[0].name,), run,
                _transform_points(outer * inner, n))


def _irfft_step(node: ir.Node, n: int, length: int, outer: int, inner: int) -> Step:
    half = n // 2 + 1
    used = min(length, half)
    full = np.zeros((outer, n, inner, 2), np.float32)
    result = np.empty((outer, n, inner, 2), np.float32)
    ints = np.array([n, n, outer, inner, 1, n, 1], np.int64)
    floats = np.array([1.0 / n], np.float32)

    def run(reads, writes, num_threads):
        spectrum = reads[0].reshape(outer, length, inner, 2)
        full[:, :used] = spectrum[:, :used]
        full[:, used:half] = 0.0
        # X[n - k] = conj X[k] for k = 1 .. n - half; the imaginary parts of X[0] (and X[n/2]) drop out of the
        # real part kept below, as numpy's irfft ignores them
        mirrored = full[:, n - half:0:-1] if n - half > 0 else full[:, :0]
        full[:, half:, :, 0] = mirrored[..., 0]
        full[:, half:, :, 1] = -mirrored[..., 1]
        _kernels.call("dft_f32", ints, floats, [full, result], num_threads)
        writes[0].reshape(outer, n, inner)[...] = result[..., 0]

    return Step(node.name, (node.inputs[0].name,), (node.outputs[0].name,), run, _transform_points(outer * inner, n))


def lower_stft(node: ir.Node) -> Step:
    shape = float32_input(node, 0, "signal")
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise DspError(f"{describe(node)}: signal {node.inputs[0].name!r} has shape {shape}; expected [batch, "
                       f"signal_length, 1 (real) or 2 (complex)]")
    batch, signal_length, channels = shape
    frame_step = int(constant_scalar(node, 1, "frame_step"))
    if frame_step <= 0:
        raise DspError(f"{describe(node)}: frame_step must be > 0, got {frame_step}")
    window = present(node, 2)
    window_length = None
    if window is not None:
        window_shape = float32_input(node, 2, "window")
        if len(window_shape) != 1:
            raise DspError(f"{describe(node)}: window {window.name!r} must be 1-D, has shape {window_shape}")
        window_length = window_shape[0]
    frame_length = constant_scalar(node, 3, "frame_length", required=False)
    if frame_length is None:
        frame_length = window_length if window_length is not None else signal_length
    frame_length = int(frame_length)
    if window_length is not None and window_length != frame_length:
        raise DspError(f"{describe(node)}: window {window.name!r} has {window_length} points but frame_length is "
                       f"{frame_length}")
    if frame_length <= 0 or frame_length > signal_length:
        raise DspError(f"{describe(node)}: frame_length {frame_length} must be in [1, signal_length "
                       f"{signal_length}]")
    frames = (signal_length - frame_length) // frame_step + 1
    bins = frame_length // 2 + 1 if attribute(node, "onesided", 1) else frame_length
    expect_output(node, (batch, frames, bins, 2))
    ints = np.array([batch, signal_length, int(channels == 2), frame_step, frame_length, frames, bins,
                     int(window is not None)], np.int64)
    no_window = np.ones(1, np.float32)
    reads = (node.inputs[0].name,) + ((window.name,) if window is not None else ())

    def run(reads, writes, num_threads):
        window_array = reads[1] if len(reads) > 1 else no_window
        _kernels.call("stft_f32", ints, (), [reads[0], window_array, writes[0]], num_threads)

    return Step(node.name, reads, (node.outputs[0].name,), run, _transform_points(batch * frames, frame_length))
