"""`prune`: a pruned copy of a model, as standard ONNX, with the pass reports and per-layer sparsity.

1. load (never the caller's file) and the -O2 passes: BatchNormalization is folded into Conv first, so the weights
   pruned are the ones deployed, and every value has a shape for channel pruning.
2. prune_weights (structure "unstructured" or "N:M") or prune_channels (structure "channel").
3. The result with its IR version clamped for ORT, per-layer zero shares and parameter counts before and after.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import onnx
import onnx_ir as ir

from ortx.model_io import clamp_ir_version
from ortx.passes._report import PassReport, run_passes
from ortx.passes.prune_channels import prune_channels
from ortx.passes.prune_weights import parse_structure, prune_weights, prunable_weights

CHANNEL = "channel"


@dataclasses.dataclass
class PruneResult:
    model: onnx.ModelProto
    reports: list[PassReport]
    layer_sparsity: dict[str, float]  # prunable node -> share of its weight that is zero
    parameters_before: int  # entries of the prunable weights
    parameters_after: int
    zeros_after: int


def _prunable_totals(model: ir.Model) -> tuple[int, int, dict[str, float]]:
    sizes = zeros = 0
    shares = {}
    for node, weight, _ in prunable_weights(model.graph):
        array = weight.const_value.numpy()
        sizes += array.size
        zeros += int(np.count_nonzero(array == 0))
        shares[node.name] = float(np.count_nonzero(array == 0)) / array.size
    return sizes, zeros, shares


def pruning_pass(*, sparsity: float, structure: str = "unstructured", scope: str = "layer", min_elements: int = 1024,
                 exclude: frozenset[str] = frozenset(), channel_multiple: int = 1):
    """The configured pass (a function of the model), checked now so a bad option fails before any work."""
    if structure == CHANNEL:
        if not 0.0 <= sparsity < 1.0:
            raise ValueError(f"prune sparsity must be in [0, 1), got {sparsity!r}")
        configured = functools.partial(prune_channels, ratio=sparsity, multiple=channel_multiple, exclude=exclude)
        configured.__name__ = "prune_channels"
    else:
        parse_structure(structure)
        if not 0.0 <= sparsity < 1.0:
            raise ValueError(f"prune sparsity must be in [0, 1), got {sparsity!r}")
        if scope not in ("layer", "global"):
            raise ValueError(f"prune scope must be 'layer' or 'global', got {scope!r}")
        configured = functools.partial(prune_weights, sparsity=sparsity, structure=structure, scope=scope,
                                       min_elements=min_elements, exclude=exclude)
        configured.__name__ = "prune_weights"
    return configured


def prune(source, *, sparsity: float, structure: str = "unstructured", scope: str = "layer",
          min_elements: int = 1024, exclude=(), channel_multiple: int = 1, input_shapes=None,
          check: bool = False) -> PruneResult:
    from ortx.optimize import _load_explained, level_passes
    from ortx.passes.validate_model import validate_model

    prune_pass = pruning_pass(sparsity=sparsity, structure=structure, scope=scope, min_elements=min_elements,
                              exclude=frozenset(exclude), channel_multiple=channel_multiple)
    model = ir.serde.deserialize_model(_load_explained(source))
    reports = run_passes(model, (validate_model,) + level_passes(2, input_shapes), check=check)
    before, _, _ = _prunable_totals(model)
    reports += run_passes(model, (prune_pass,), check=check)
    after, zeros, shares = _prunable_totals(model)
    return PruneResult(clamp_ir_version(ir.serde.serialize_model(model)), reports, shares, before, after, zeros)
