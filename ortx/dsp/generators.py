"""HannWindow, HammingWindow, BlackmanWindow and MelWeightMatrix: outputs that depend only on constant scalars,
so the DSP computes them once at compile time (float64, then the output_datatype) and each run copies them out.

Formulas as the ONNX spec (and onnx.reference, which ORT matches) define them, with N = size when periodic, else
size - 1: Hann sin^2(pi t / N); Hamming 25/46 - 21/46 cos(2 pi t / N); Blackman 0.42 - 0.5 cos(2 pi t / N)
+ 0.08 cos(4 pi t / N). MelWeightMatrix: triangles between num_mel_bins + 2 points spaced evenly on
mel(f) = 2595 log10(1 + f / 700), each edge rounded down to a bin as floor((dft_length + 1) f / sample_rate).
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from ortx.dsp._common import DspError, Step, attribute, constant_scalar, describe, expect_output


def _output_dtype(node: ir.Node) -> np.dtype:
    code = int(attribute(node, "output_datatype", onnx.TensorProto.FLOAT))
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code))
    except (KeyError, TypeError) as error:
        raise DspError(f"{describe(node)}: output_datatype {code} is not a numpy type") from error


def window(node: ir.Node) -> np.ndarray:
    size = int(constant_scalar(node, 0, "size"))
    if size < 0:
        raise DspError(f"{describe(node)}: size must be >= 0, got {size}")
    periodic = int(attribute(node, "periodic", 1))
    denominator = size if periodic else size - 1
    t = np.arange(size, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        phase = 2.0 * np.pi * t / denominator  # a symmetric window of size 1 divides by zero, as the spec does
        if node.op_type == "HannWindow":
            values = np.sin(phase / 2.0) ** 2
        elif node.op_type == "HammingWindow":
            values = 25.0 / 46.0 - 21.0 / 46.0 * np.cos(phase)
        else:
            values = 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2.0 * phase)
    return values.astype(_output_dtype(node))


def mel_weight_matrix(node: ir.Node) -> np.ndarray:
    num_mel_bins = int(constant_scalar(node, 0, "num_mel_bins"))
    dft_length = int(constant_scalar(node, 1, "dft_length"))
    sample_rate = int(constant_scalar(node, 2, "sample_rate"))
    lower = float(constant_scalar(node, 3, "lower_edge_hertz"))
    upper = float(constant_scalar(node, 4, "upper_edge_hertz"))
    if num_mel_bins <= 0 or dft_length <= 0 or sample_rate <= 0:
        raise DspError(f"{describe(node)}: num_mel_bins, dft_length and sample_rate must be > 0, got "
                       f"{num_mel_bins}, {dft_length}, {sample_rate}")
    if not 0.0 <= lower < upper:
        raise DspError(f"{describe(node)}: need 0 <= lower_edge_hertz < upper_edge_hertz, got {lower}, {upper}")
    spectrogram_bins = dft_length // 2 + 1
    low_mel, high_mel = (2595.0 * np.log10(1.0 + f / 700.0) for f in (lower, upper))
    points = np.arange(num_mel_bins + 2) * ((high_mel - low_mel) / (num_mel_bins + 2)) + low_mel
    edges = ((dft_length + 1) * (700.0 * (10.0 ** (points / 2595.0) - 1.0)) // sample_rate).astype(np.int64)
    if edges[-1] >= spectrogram_bins:
        raise DspError(f"{describe(node)}: upper_edge_hertz {upper} maps to bin {edges[-1]}, past the "
                       f"{spectrogram_bins} bins of dft_length {dft_length}")
    weights = np.zeros((spectrogram_bins, num_mel_bins))
    for band in range(num_mel_bins):
        left, center, right = edges[band], edges[band + 1], edges[band + 2]
        if center == left:
            weights[center, band] = 1.0
        else:
            weights[left:center + 1, band] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            weights[center:right, band] = (right - np.arange(center, right)) / (right - center)
    return weights.astype(_output_dtype(node))


def lower_generator(node: ir.Node) -> Step:
    values = mel_weight_matrix(node) if node.op_type == "MelWeightMatrix" else window(node)
    expect_output(node, values.shape)

    def run(reads, writes, num_threads):
        np.copyto(writes[0], values.reshape(writes[0].shape))

    return Step(node.name, (), (node.outputs[0].name,), run, float(values.size) / 16.0)
