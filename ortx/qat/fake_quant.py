"""Fake quantization with a straight-through estimator: ONNX QuantizeLinear -> DequantizeLinear in float32.

    y = (clamp(round_half_even(x / s) + z, q_min, q_max) - z) * s

with x / s a true division, as ONNX and ortx.quantization.scales.quantize define it (torch's own
fake_quantize_per_tensor_affine multiplies by 1/s, which rounds differently next to ties), so a fake-quantized
tensor is bitwise the numpy reference's dequantize(quantize(x)).
Gradients: the straight-through estimator (Bengio et al. 2013, arXiv:1308.3432) passes dy/dx = 1 where
q_min <= round(x / s) + z <= q_max and 0 where the value saturates. A learned scale gets LSQ's gradient (Esser et
al. 2020, arXiv:1902.08153): dy/ds = round(x / s) - x / s inside the range, q_min - z below, q_max - z above,
times g = 1 / sqrt(elements x (q_max - z)). Zero points are never learned.

ActivationQuantizer (per tensor, asymmetric int8 or uint8, parameters from ortx's activation_parameters over the
observed range), WeightQuantizer (per output channel, symmetric int8 in [-127, 127], scale max|w| / 127) and
quantize_bias (int32 at input scale x weight scale) follow ortx PTQ's rules (ortx/quantization/scales.py).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ortx.quantization.scales import INT_LIMITS, MIN_SCALE, WEIGHT_LIMIT, activation_parameters

MODES = ("observe", "quantize", "export")  # observe: float pass-through recording ranges; export: ONNX markers
MARKER_DOMAIN = "ortx.qat"                 # export() replaces these marker nodes by ortx's Q/DQ
MARKER_OP = "ActivationQuantizer"


class _FakeQuantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, scale, zero_point, q_min, q_max, learn_scale):
        exact = values / scale
        shifted = torch.round(exact) + zero_point
        quantized = torch.clamp(shifted, q_min, q_max)
        ctx.save_for_backward(exact, shifted, zero_point)
        ctx.limits, ctx.learn_scale, ctx.scale_shape = (q_min, q_max), learn_scale, scale.shape
        return (quantized - zero_point) * scale

    @staticmethod
    def backward(ctx, grad_output):
        exact, shifted, zero_point = ctx.saved_tensors
        q_min, q_max = ctx.limits
        below, above = shifted < q_min, shifted > q_max
        inside = ~(below | above)
        grad_values = grad_output * inside
        grad_scale = None
        if ctx.learn_scale:
            slope = torch.where(inside, torch.round(exact) - exact,
                                torch.where(below, q_min - zero_point, q_max - zero_point))
            positive_levels = max(float(q_max - zero_point.max()), 1.0)
            gradient_scale = 1.0 / math.sqrt(exact.numel() * positive_levels)
            grad_scale = (grad_output * slope).sum() * gradient_scale
            grad_scale = grad_scale.reshape(ctx.scale_shape)
        return grad_values, grad_scale, None, None, None, None


def fake_quantize(values: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, q_min: int, q_max: int,
                  *, learn_scale: bool = False) -> torch.Tensor:
    """QuantizeLinear -> DequantizeLinear with the straight-through estimator; `scale` and `zero_point` broadcast
    against `values` (per channel: shaped [C, 1, 1, ...]); gradients reach `scale` only when `learn_scale`."""
    zero_point = zero_point.to(values.dtype)
    return _FakeQuantize.apply(values, scale, zero_point, q_min, q_max, learn_scale)


class ActivationQuantizer(torch.nn.Module):
    """Per-tensor asymmetric fake quantization of one activation (shared by every compute module reading it).

    Calibration (mode "observe") records the running min/max over float passes; `freeze_observation` turns the
    range into (scale, zero_point) by ortx's activation_parameters, so an uncalibrated fine-tune starts from the
    parameters ortx PTQ's MinMax method gives. With `learn_scale` the scale is a Parameter trained by LSQ."""

    def __init__(self, dtype: str = "uint8", *, learn_scale: bool = False, name: str = ""):
        super().__init__()
        if dtype not in ("int8", "uint8"):
            raise ValueError(f"activation dtype must be 'int8' or 'uint8', not {dtype!r}")
        self.dtype, self.learn_scale, self.name = dtype, learn_scale, name
        self.q_min, self.q_max = INT_LIMITS[dtype]
        self.mode = "observe"
        self.export_parameters: tuple[float, int] | None = None  # set by export(): torch.export traces buffers
        self.register_buffer("observed_min", torch.tensor(math.inf))
        self.register_buffer("observed_max", torch.tensor(-math.inf))
        self.register_buffer("zero_point", torch.tensor(0.0))
        self.register_buffer("calibrated", torch.tensor(False))
        if learn_scale:
            self.scale = torch.nn.Parameter(torch.tensor(1.0))
        else:
            self.register_buffer("scale", torch.tensor(1.0))

    def extra_repr(self) -> str:
        return f"{self.dtype}, mode={self.mode}, learn_scale={self.learn_scale}"

    def freeze_observation(self) -> None:
        low, high = float(self.observed_min), float(self.observed_max)
        if not (math.isfinite(low) and math.isfinite(high)):
            raise RuntimeError(f"activation quantizer '{self.name}' saw no values during calibration; run "
                               "ortx.qat.calibrate with samples that reach it")
        parameters = activation_parameters(low, high, self.dtype)
        with torch.no_grad():
            self.scale.copy_(torch.tensor(float(parameters.scale)))
            self.zero_point.copy_(torch.tensor(float(parameters.zero_point)))
            self.calibrated.fill_(True)

    def freeze_for_export(self) -> None:
        """Fixes (scale, zero_point) as Python numbers for the export markers (mode "export")."""
        if not bool(self.calibrated):
            raise RuntimeError(f"activation quantizer '{self.name}' is not calibrated: run ortx.qat.calibrate first")
        self.export_parameters = (float(self.effective_scale().detach()), int(self.zero_point))

    def effective_scale(self) -> torch.Tensor:
        """The scale in use: a learned scale is floored at MIN_SCALE, as ortx never writes a smaller one."""
        return self.scale.clamp_min(MIN_SCALE) if self.learn_scale else self.scale

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        if self.mode == "observe":
            with torch.no_grad():
                if not bool(torch.isfinite(values).all()):
                    raise ValueError(f"activation quantizer '{self.name}' saw non-finite values during calibration")
                if values.numel():
                    self.observed_min.copy_(torch.minimum(self.observed_min, values.min()))
                    self.observed_max.copy_(torch.maximum(self.observed_max, values.max()))
            return values
        if self.mode == "export":
            if self.export_parameters is None:
                raise RuntimeError(f"activation quantizer '{self.name}': call freeze_for_export before exporting")
            scale, zero_point = self.export_parameters
            return torch.onnx.ops.symbolic(
                f"{MARKER_DOMAIN}::{MARKER_OP}", (values,),
                {"scale": scale, "zero_point": zero_point, "signed": int(self.dtype == "int8")},
                dtype=values.dtype, shape=values.shape, version=1)
        if not bool(self.calibrated):
            raise RuntimeError(f"activation quantizer '{self.name}' is not calibrated: run ortx.qat.calibrate first")
        return fake_quantize(values, self.effective_scale(), self.zero_point, self.q_min, self.q_max,
                             learn_scale=self.learn_scale)


def weight_scale(weight: torch.Tensor) -> torch.Tensor:
    """Per output channel (axis 0): max|w_c| / 127 floored at MIN_SCALE, as ortx's weight_parameters."""
    max_abs = weight.detach().abs().reshape(weight.shape[0], -1).amax(dim=1)
    return torch.clamp_min(max_abs / np.float32(WEIGHT_LIMIT), MIN_SCALE)


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(fake-quantized weight, per-channel scale): symmetric int8 in [-127, 127] along axis 0."""
    scale = weight_scale(weight)
    shape = (-1,) + (1,) * (weight.dim() - 1)
    zero_point = torch.zeros((), dtype=weight.dtype)
    return fake_quantize(weight, scale.reshape(shape), zero_point, -WEIGHT_LIMIT, WEIGHT_LIMIT), scale


def quantize_bias(bias: torch.Tensor, input_scale: torch.Tensor, weight_scales: torch.Tensor) -> torch.Tensor:
    """The bias on its int32 grid (scale = input scale x weight scale, in float32; the division in float64 as
    ortx's insert_qdq does), straight-through; the float bias when int32 cannot hold it, as insert_qdq keeps it."""
    scale = input_scale.detach().to(torch.float32) * weight_scales.to(torch.float32)
    steps = torch.round(bias.detach().double() / scale.double())
    low, high = INT_LIMITS["int32"]
    if not bool(torch.all((steps >= low) & (steps <= high))):
        return bias
    quantized = steps.to(torch.float32) * scale
    return bias + (quantized - bias).detach()
