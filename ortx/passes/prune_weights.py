"""Magnitude pruning of constant weights: the smallest-|w| entries become zero; the graph is unchanged.

Before: Conv(x, W) / Gemm(x, W) / MatMul(x, W) with W dense
After:  the same nodes, W with `sparsity` of its entries zero (OrtxEP's sparse kernels turn the zeros into speed)
Modes:
  Case 1, "unstructured", scope "layer": each weight loses its own smallest `sparsity` share.
  Case 2, "unstructured", scope "global": one magnitude threshold over all prunable weights, so layers with many
          small weights lose more of them.
  Case 3, "N:M" (e.g. "2:4"): in every run of M consecutive weights along the reduction axis (a Conv's
          in-channels x kernel window, Gemm/MatMul's K) the M-N smallest become zero.
Does not apply to: weights that are not float constant initializers (or are graph inputs), weights with fewer than
`min_elements` entries (stems and tiny layers hurt accuracy most and gain least), `exclude`d nodes, and for N:M a
reduction length that M does not divide. Each skip is a note naming the node. Zeros already present count toward the
target, so a second run at the same sparsity zeroes nothing (idempotent).
"""
from __future__ import annotations

import math
import re
import time

import numpy as np
import onnx_ir as ir

from ortx.passes._report import PassReport

_FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE, ir.DataType.BFLOAT16)
_N_OF_M = re.compile(r"(\d+):(\d+)")
STRUCTURES = ("unstructured", "N:M (e.g. 2:4)")


def parse_structure(structure: str) -> tuple[int, int] | None:
    """None for "unstructured", (N, M) for "N:M"; anything else is a ValueError naming the option."""
    if structure == "unstructured":
        return None
    match = _N_OF_M.fullmatch(structure.strip())
    if not match or not 0 < int(match.group(1)) < int(match.group(2)):
        raise ValueError(f"prune structure {structure!r}: expected 'unstructured' or N:M with 0 < N < M, like 2:4")
    return int(match.group(1)), int(match.group(2))


def prunable_weights(graph: ir.Graph) -> list[tuple[ir.Node, ir.Value, int]]:
    """(node, weight value, reduction axis) for each Conv/Gemm/MatMul reading a float constant weight; a weight
    read by several nodes is listed once, with its first reader."""
    found, seen = [], set()
    for node in graph:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Conv", "Gemm", "MatMul") or len(node.inputs) < 2:
            continue
        weight = node.inputs[1]
        if weight is None or weight.const_value is None or weight.is_graph_input() or id(weight) in seen:
            continue
        if weight.const_value.dtype not in _FLOAT_TYPES:
            continue
        rank = len(weight.const_value.shape)
        if node.op_type == "Conv":
            axis = 1  # [O, I/g, kh, kw] flattened to [O, I/g*kh*kw]
        elif node.op_type == "Gemm":
            if rank != 2:
                continue
            trans_b = node.attributes.get("transB")
            axis = 1 if trans_b is not None and trans_b.as_int() else 0
        else:
            if rank != 2:
                continue  # batched MatMul weights: left dense
            axis = 0
        seen.add(id(weight))
        found.append((node, weight, axis))
    return found


def _as_reduction_rows(array: np.ndarray, op_type: str, axis: int) -> np.ndarray:
    """A 2-D view [outputs, reduction] of the weight (a copy for Gemm/MatMul [K, N])."""
    if op_type == "Conv":
        return array.reshape(array.shape[0], -1)
    return array if axis == 1 else array.T


def _n_of_m_mask(rows: np.ndarray, keep: int, group: int) -> np.ndarray:
    grouped = np.abs(rows).reshape(rows.shape[0], -1, group)
    order = np.argsort(grouped, axis=2, kind="stable")
    mask = np.ones_like(grouped, dtype=bool)
    np.put_along_axis(mask, order[:, :, :group - keep], False, axis=2)
    return mask.reshape(rows.shape)


def _smallest_mask(magnitudes: np.ndarray, count: int) -> np.ndarray:
    """False at the `count` smallest entries (zeros among them first; ties at the cut broken arbitrarily)."""
    mask = np.ones(magnitudes.size, dtype=bool)
    if count >= magnitudes.size:
        mask[:] = False
    elif count > 0:  # selection, not a sort: O(n)
        mask[np.argpartition(magnitudes, count - 1, axis=None)[:count]] = False
    return mask.reshape(magnitudes.shape)


def prune_weights(model: ir.Model, *, sparsity: float, structure: str = "unstructured", scope: str = "layer",
                  min_elements: int = 1024, exclude: frozenset[str] = frozenset()) -> PassReport:
    start = time.perf_counter()
    if not 0.0 <= sparsity < 1.0 or not math.isfinite(sparsity):
        raise ValueError(f"prune sparsity must be in [0, 1), got {sparsity!r}")
    if scope not in ("layer", "global"):
        raise ValueError(f"prune scope must be 'layer' or 'global', got {scope!r}")
    n_of_m = parse_structure(structure)
    notes: list[str] = []
    candidates = []
    for node, weight, axis in prunable_weights(model.graph):
        array = weight.const_value.numpy()
        if node.name in exclude:
            notes.append(f"{node.name} ({node.op_type}): excluded")
        elif array.size < min_elements:
            notes.append(f"{node.name} ({node.op_type}): weight {weight.name!r} has {array.size} entries, under "
                         f"min_elements={min_elements}")
        elif n_of_m is not None and _as_reduction_rows(array, node.op_type, axis).shape[1] % n_of_m[1]:
            length = _as_reduction_rows(array, node.op_type, axis).shape[1]
            notes.append(f"{node.name} ({node.op_type}): reduction length {length} is not a multiple of "
                         f"{n_of_m[1]} ({structure})")
        else:
            candidates.append((node, weight, axis, array))
    global_masks = None
    if n_of_m is None and scope == "global" and candidates:  # Case 2: one ranking of every candidate's entries
        magnitudes = np.concatenate([np.abs(array.astype(np.float32)).ravel() for *_, array in candidates])
        flat_mask = _smallest_mask(magnitudes, int(math.ceil(sparsity * magnitudes.size)))
        bounds = np.cumsum([0] + [array.size for *_, array in candidates])
        global_masks = [flat_mask[low:high].reshape(array.shape)
                        for low, high, (*_, array) in zip(bounds[:-1], bounds[1:], candidates)]
    zeroed = layers = 0
    for position, (node, weight, axis, array) in enumerate(candidates):
        magnitudes = np.abs(array)
        if n_of_m is not None:  # Case 3
            rows = _as_reduction_rows(array, node.op_type, axis)
            mask_rows = _n_of_m_mask(rows, *n_of_m)
            mask = (mask_rows.reshape(array.shape) if node.op_type == "Conv" or axis == 1
                    else np.ascontiguousarray(mask_rows.T))
        elif global_masks is not None:  # Case 2
            mask = global_masks[position]
        else:  # Case 1
            mask = _smallest_mask(magnitudes, int(math.ceil(sparsity * array.size)))
        newly = int(np.count_nonzero((~mask) & (array != 0)))
        if newly:
            pruned = np.where(mask, array, np.zeros((), array.dtype)).astype(array.dtype)
            weight.const_value = ir.Tensor(pruned, name=weight.name)
            zeroed += newly
            layers += 1
    counts = {"weights_zeroed": zeroed, "layers_pruned": layers}
    return PassReport(model, name="prune_weights", counts=counts, notes=notes, seconds=time.perf_counter() - start)


def weight_sparsity(model: ir.Model) -> dict[str, float]:
    """Per prunable node, the share of its weight's entries that are zero."""
    return {node.name: float(np.count_nonzero(weight.const_value.numpy() == 0)) / weight.const_value.size
            for node, weight, _ in prunable_weights(model.graph)}
