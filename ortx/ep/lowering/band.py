"""MatMul by a constant whose nonzeros sit in one narrow run of rows per 16-column panel -> band_gemm_f32.

Before: MatMul(A, W) with W a constant [K, N] on the dense packed GEMM or CSR. After: band_gemm_f32 (kernels/
band_gemm.c) over each panel's run of rows only, all multiply-adds in full vectors. The case in mind is a mel
filterbank (MelWeightMatrix: filter n covers a contiguous run of frequency bins), issue #7's log-mel front end:
its 257 x 80 matrix keeps 240 of 5 x 257 panel rows.
Does not apply (the sparse/dense choice decides) when the panels' rows exceed MAX_BAND_FRACTION of the dense
multiply-adds (a pruned matrix with scattered nonzeros), to a batched or non-constant B, or under bf16 precision.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np

logger = logging.getLogger(__name__)

PANEL = 16  # kernels/band_gemm.h ORTX_BAND_PANEL
# The band kernel's vector multiply-adds with a broadcast A operand run at about half the packed GEMM's rate
# (single 257 x 80 products, benchmarks in the commit message), so it pays below ~1/2 of the dense work; 1/4
# keeps a margin.
MAX_BAND_FRACTION = 0.25


@dataclasses.dataclass(frozen=True)
class PanelBands:
    """Per 16-column panel of a K x N matrix: its rows first .. first + count - 1 hold all of its nonzeros."""
    depth: int  # K
    columns: int  # N
    panel: np.ndarray  # int64 [panels, 3]: first, count, offset (rows into values)
    values: np.ndarray  # float32 [sum of counts, PANEL]

    @property
    def fraction(self) -> float:
        return band_fraction(self.panel[:, :2], self.depth)


def _padded(weights: np.ndarray) -> np.ndarray:
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim != 2:
        raise ValueError(f"panel bands: expected a 2-D matrix, got shape {weights.shape}")
    depth, columns = weights.shape
    padded = np.zeros((depth, -(-columns // PANEL) * PANEL), np.float32)
    padded[:, :columns] = weights
    return padded


def panel_ranges(weights: np.ndarray) -> np.ndarray:
    """int64 [panels, 2]: per 16-column panel, the first row and the row count holding all of its nonzeros (0, 0
    for a panel without any)."""
    padded = _padded(weights)
    nonzero = np.any(padded.reshape(padded.shape[0], -1, PANEL) != 0, axis=2)  # [K, panels]
    ranges = np.zeros((nonzero.shape[1], 2), np.int64)
    for p in range(nonzero.shape[1]):
        rows = np.flatnonzero(nonzero[:, p])
        if rows.size:
            ranges[p] = rows[0], rows[-1] - rows[0] + 1
    return ranges


def band_fraction(ranges: np.ndarray, depth: int) -> float:
    """Band multiply-adds per dense multiply-add (16-lane panel rows over K x padded N)."""
    return int(ranges[:, 1].sum()) / max(depth * len(ranges), 1)


def panel_bands(weights: np.ndarray, ranges: np.ndarray | None = None) -> PanelBands:
    """The panel bands of a 2-D float matrix (`ranges`: its panel_ranges, when already computed)."""
    padded = _padded(weights)
    ranges = panel_ranges(weights) if ranges is None else ranges
    offsets = np.concatenate([[0], np.cumsum(ranges[:, 1])[:-1]]).astype(np.int64)
    blocks = [padded[first:first + count, p * PANEL:(p + 1) * PANEL] for p, (first, count) in enumerate(ranges)]
    values = np.concatenate(blocks) if int(ranges[:, 1].sum()) else np.zeros((0, PANEL), np.float32)
    return PanelBands(padded.shape[0], np.asarray(weights).shape[1], np.column_stack([ranges, offsets]),
                      np.ascontiguousarray(values, dtype=np.float32))


def emit_band_gemm(builder, node_name: str, M: int, bands: PanelBands, a, y) -> None:
    """Y[M, N] = A[M, K] @ W with A row-major (row stride K)."""
    # one spare row so a matrix without nonzeros still has an address
    values = builder.add_constant(np.concatenate([bands.values, np.zeros((1, PANEL), np.float32)]),
                                  label=f"{node_name}:band_values")
    panel = builder.add_constant(bands.panel.reshape(-1), label=f"{node_name}:band_panels")
    builder.emit("band_gemm_f32", [M, bands.columns, bands.depth, len(bands.panel)], [], [a, values, panel, y])


def try_band_matmul(node, builder, M: int, weights: np.ndarray, a, y) -> bool:
    """band_gemm_f32 for Y[M, N] = A[M, K] @ weights when its panel bands are narrow; False (nothing emitted)
    otherwise."""
    ranges = panel_ranges(weights)  # before any packing: most constant weights are not banded
    fraction = band_fraction(ranges, weights.shape[0])
    if fraction > MAX_BAND_FRACTION:
        logger.debug("ortx band: node %s stays on the GEMM: its panel bands cover %.0f%% of K x N (> %.0f%%)",
                     node.name, 100 * fraction, 100 * MAX_BAND_FRACTION)
        return False
    emit_band_gemm(builder, node.name, M, panel_bands(weights, ranges), a, y)
    return True
