"""1-D Conv as the DSP runs it: an FIR filter, or a Conv1d whose weights are a windowed DFT basis (an STFT).

    Case 1: depthwise FIR: x [N, C, L], weight [C, 1, K], group = C, stride 1.
    Case 2: filter bank on one channel: x [N, 1, L], weight [M, 1, K], group 1, stride 1.
    Case 3: Conv1d-as-STFT (e.g. silero-vad's front end): x [N, 1, L], weight [2 B, 1, K] with B = K / 2 + 1 rows
            w[t] cos(2 pi k t / K) then B rows s w[t] sin(2 pi k t / K) (s = +1 or -1), any stride: run as
            stft_f32 with that window and hop, real parts to channels 0..B-1 and -s x imaginary parts to B..2B-1.
Cases 1-2 run direct below ORTX_FIR_FFT_MIN_TAPS taps, FFT overlap-save from there (kernels/fft.c fir_f32).
Not claimed: dilations != 1, auto_pad other than NOTSET/VALID, non-constant weights, filters shorter than
ORTX_FIR_MIN_TAPS (the CPU's convolution is the better home for those).
"""
from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from ortx import _kernels
from ortx.dsp._common import DspError, Step, attribute, describe, expect_output, float32_input, present
from ortx.ep.lowering._values import constant_value

ORTX_FIR_MIN_TAPS = 8
# Direct costs K multiply-adds per output (vectorised axpys); overlap-save ~ 2 x 5 log2(4K) flops per output.
# Measured at 1 thread on 4 x 16000 points (host load ~6, so +-30%): direct / overlap-save 0.42 / 0.82 ms at 64
# taps, 1.43 / 1.25 at 96, 1.84 / 1.29 at 128, 4.6 / 1.3 at 256.
ORTX_FIR_FFT_MIN_TAPS = 96


def _conv_geometry(node: ir.Node) -> tuple:
    shape = float32_input(node, 0, "X")
    if len(shape) != 3:
        raise DspError(f"{describe(node)}: input X has rank {len(shape)}; the DSP runs 1-D convolutions (rank 3)")
    weight = constant_value(present(node, 1))
    if weight is None:
        raise DspError(f"{describe(node)}: weight W is not a constant")
    if weight.dtype != np.float32 or weight.ndim != 3 or weight.shape[1] != 1:
        raise DspError(f"{describe(node)}: weight W has shape {weight.shape} ({weight.dtype}); the DSP takes "
                       f"float32 [M, 1, K] filters (one input channel per filter)")
    if any(int(d) != 1 for d in attribute(node, "dilations", [1])):
        raise DspError(f"{describe(node)}: dilations {attribute(node, 'dilations')} (the DSP's FIR needs 1)")
    auto_pad = attribute(node, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad not in ("NOTSET", "VALID"):
        raise DspError(f"{describe(node)}: auto_pad {auto_pad} (the DSP takes NOTSET or VALID)")
    pads = [0, 0] if auto_pad == "VALID" else [int(p) for p in attribute(node, "pads", [0, 0])]
    stride = int(attribute(node, "strides", [1])[0])
    group = int(attribute(node, "group", 1))
    batch, channels, length = shape
    filters, _, taps = weight.shape
    if not ((group == channels == filters) or (channels == 1 and group == 1)):
        raise DspError(f"{describe(node)}: {channels} input channels, {filters} filters, group {group}: the DSP "
                       f"runs depthwise filters (group = channels = filters) or filter banks on one channel")
    bias = present(node, 2)
    if bias is not None and float32_input(node, 2, "B") != (filters,):
        raise DspError(f"{describe(node)}: bias B must have shape ({filters},)")
    return batch, channels, length, weight, pads, stride, bias


def dft_basis_window(weight: np.ndarray) -> tuple[np.ndarray, float] | None:
    """(window, sign of the sine rows) when weight[:, 0, :] is a windowed real DFT basis (Case 3), else None."""
    filters, _, taps = weight.shape
    bins = taps // 2 + 1
    if filters != 2 * bins:
        return None
    rows = weight[:, 0, :].astype(np.float64)
    window = rows[0]
    scale = float(np.max(np.abs(rows)))
    if scale == 0.0:
        return None
    angle = 2.0 * np.pi * np.outer(np.arange(bins), np.arange(taps)) / taps
    cosines, sines = window * np.cos(angle), window * np.sin(angle)
    # the sine rows' sign: from the largest one
    sign = 1.0 if float(np.sum(rows[bins:] * sines)) >= 0.0 else -1.0
    tolerance = 1e-4 * scale  # float32 weights written from float64 bases agree to ~1e-7 of their magnitude
    if np.max(np.abs(rows[:bins] - cosines)) > tolerance or np.max(np.abs(rows[bins:] - sign * sines)) > tolerance:
        return None
    return window.astype(np.float32), sign


def lower_conv(node: ir.Node) -> Step:
    batch, channels, length, weight, pads, stride, bias = _conv_geometry(node)
    filters, _, taps = weight.shape
    basis = dft_basis_window(weight) if channels == 1 else None
    if basis is not None:
        return _stft_conv_step(node, batch, length, weight, pads, stride, basis)
    if stride != 1:
        raise DspError(f"{describe(node)}: stride {stride} and the weights are not a windowed DFT basis; the DSP's "
                       f"FIR filters run at stride 1")
    if taps < ORTX_FIR_MIN_TAPS:
        raise DspError(f"{describe(node)}: {taps}-tap filter; the DSP takes FIR filters of >= {ORTX_FIR_MIN_TAPS} "
                       f"taps (shorter ones run better as CPU convolutions)")
    output_length = length + pads[0] + pads[1] - taps + 1
    if output_length <= 0:
        raise DspError(f"{describe(node)}: output length {output_length} <= 0 (input {length}, pads {pads}, "
                       f"{taps} taps)")
    expect_output(node, (batch, filters, output_length))
    method = 1 if taps >= ORTX_FIR_FFT_MIN_TAPS else 0
    rows = batch * filters
    ints = np.array([batch, filters, length, taps, output_length, pads[0], int(bias is not None), method,
                     int(channels == 1 and filters > 1)], np.int64)
    taps_array = np.ascontiguousarray(weight[:, 0, :])
    zero_bias = np.zeros(1, np.float32)
    reads = (node.inputs[0].name,) + ((bias.name,) if bias is not None else ())

    def run(reads, writes, num_threads):
        bias_array = reads[1] if len(reads) > 1 else zero_bias
        _kernels.call("fir_f32", ints, (), [reads[0], taps_array, bias_array, writes[0]], num_threads)

    points = rows * output_length * (10.0 * math.log2(4 * taps) * 4 / 3 if method else taps / 2.0)
    return Step(node.name, reads, (node.outputs[0].name,), run, points)


def _stft_conv_step(node, batch, length, weight, pads, stride, basis) -> Step:
    window, sign = basis
    taps = weight.shape[2]
    bins = taps // 2 + 1
    padded_length = length + pads[0] + pads[1]
    frames = (padded_length - taps) // stride + 1
    if frames <= 0:
        raise DspError(f"{describe(node)}: input length {length} with pads {pads} is shorter than the {taps}-tap "
                       f"kernel")
    expect_output(node, (batch, 2 * bins, frames))
    signal = np.zeros((batch, padded_length), np.float32)
    spectrum = np.empty((batch, frames, bins, 2), np.float32)
    ints = np.array([batch, padded_length, 0, stride, taps, frames, bins, 1], np.int64)
    bias = present(node, 2)
    reads = (node.inputs[0].name,) + ((bias.name,) if bias is not None else ())

    def run(reads, writes, num_threads):
        signal[:, pads[0]:pads[0] + length] = reads[0].reshape(batch, length)
        _kernels.call("stft_f32", ints, (), [signal, window, spectrum], num_threads)
        out = writes[0]
        out[:, :bins, :] = spectrum[..., 0].transpose(0, 2, 1)
        np.multiply(spectrum[..., 1].transpose(0, 2, 1), -sign, out=out[:, bins:, :])
        if len(reads) > 1:
            out += reads[1].reshape(1, -1, 1)

    return Step(node.name, reads, (node.outputs[0].name,), run, float(batch * frames) * taps * math.log2(taps))
