"""`optimize`: the graph passes alone, for users who want a faster standard ONNX model and no OrtxEP.

load (a checked copy) -> run_passes(DEFAULT_PASSES) -> serialize. The result uses only standard ONNX ops, keeps
the input's IR version when onnxruntime reads it, and runs in plain onnxruntime.
"""
from __future__ import annotations

import logging

import onnx
import onnx_ir as ir

from ortx.model_io import ModelSource, clamp_ir_version, load
from ortx.passes import DEFAULT_PASSES
from ortx.passes._report import PassReport, run_passes

logger = logging.getLogger(__name__)

# level -> passes. 0 returns a checked copy; 1 only cleans up (no arithmetic changes); 2 adds the BN fold, which
# changes weights within float rounding.
LEVELS = {
    0: (),
    1: DEFAULT_PASSES[:2],
    2: DEFAULT_PASSES,
}


def optimize(model: ModelSource, *, level: int = 2, check: bool = False) -> tuple[onnx.ModelProto, list[PassReport]]:
    """Returns (optimized copy, one PassReport per pass); `check` validates the model after every pass."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {sorted(LEVELS)}, not {level!r}")
    ir_model = ir.serde.deserialize_model(load(model))
    reports = run_passes(ir_model, LEVELS[level], check=check)
    return clamp_ir_version(ir.serde.serialize_model(ir_model)), reports
