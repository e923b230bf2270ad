"""Per-layer pruning sensitivity: each prunable layer pruned alone, the model's output compared with the dense one.

1. The dense model (after the -O2 passes, as `prune` sees it) is run by ONNX Runtime on the given feeds.
2. For each Conv/Gemm/MatMul weight that prune_weights would prune, a copy with only that layer pruned at the
   target sparsity and structure is run on the same feeds.
3. A layer's score is the lowest output cosine (over the model's outputs and the feeds) and the largest relative
   error; layers are listed most sensitive first, the data for a per-layer `exclude` or sparsity choice.
Limits: unstructured and N:M only (a channel space spans several layers); cost is one ORT session per layer.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir
import onnxruntime

from ortx.model_io import to_ort_bytes
from ortx.passes.prune_weights import prunable_weights, prune_weights


@dataclasses.dataclass(frozen=True)
class LayerSensitivity:
    node: str
    op_type: str
    parameters: int
    cosine: float  # lowest output cosine against the dense model
    relative_error: float  # largest ||pruned - dense|| / ||dense|| over outputs


def _outputs(model_bytes: bytes, feeds: list[dict], threads: int) -> list[list[np.ndarray]]:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    return [session.run(None, feed) for feed in feeds]


def _compare(dense: list[list[np.ndarray]], pruned: list[list[np.ndarray]]) -> tuple[float, float]:
    cosine, error = 1.0, 0.0
    for dense_outputs, pruned_outputs in zip(dense, pruned):
        for reference, value in zip(dense_outputs, pruned_outputs):
            reference = reference.astype(np.float64).ravel()
            value = value.astype(np.float64).ravel()
            norm = np.linalg.norm(reference)
            denominator = norm * np.linalg.norm(value)
            cosine = min(cosine, float(reference @ value / denominator) if denominator > 0 else
                         float(np.array_equal(reference, value)))
            error = max(error, float(np.linalg.norm(value - reference) / norm) if norm > 0 else 0.0)
    return cosine, error


def layer_sensitivity(model: ir.Model, feeds: list[dict], *, sparsity: float, structure: str = "unstructured",
                      min_elements: int = 1024, threads: int = 2, on_layer=None) -> list[LayerSensitivity]:
    """`model` is not changed (each layer is pruned on a copy); `on_layer(index, total, name)` reports progress."""
    if not feeds:
        raise ValueError("layer_sensitivity needs at least one input sample")
    dense = _outputs(to_ort_bytes(model), feeds, threads)
    layers = [(node.name, node.op_type, weight.const_value.size) for node, weight, _ in prunable_weights(model.graph)
              if weight.const_value.size >= min_elements]
    names = {name for name, _, _ in layers}
    results = []
    for index, (name, op_type, parameters) in enumerate(layers):
        if on_layer is not None:
            on_layer(index, len(layers), name)
        copy = model.clone()
        report = prune_weights(copy, sparsity=sparsity, structure=structure, min_elements=min_elements,
                               exclude=frozenset(names - {name}))
        if not report.modified:
            continue  # already at the target (or the structure does not fit it): nothing to measure
        cosine, error = _compare(dense, _outputs(to_ort_bytes(copy), feeds, threads))
        results.append(LayerSensitivity(name, op_type, parameters, cosine, error))
    return sorted(results, key=lambda layer: layer.cosine)
