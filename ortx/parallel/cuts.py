"""Where to cut a topologically ordered graph into N stages: balanced first, then the fewest bytes crossing.

1. Position p (1 <= p < P, P nodes) cuts before node p. The tensors crossing it are those defined before p (a model
   input, or an output of nodes 0..p-1) and needed at or after p (by a node p.. or as a model output). Initializers
   and constants are never cut tensors: every stage holds the ones its nodes read.
2. A stage of nodes [a, b) costs the sum of its node costs plus the time to copy its input and output boundaries
   (bytes / COPY_BYTES_PER_SECOND): the pipeline's throughput is bounded by its slowest stage.
3. Dynamic programming over (stages, end position) finds the smallest achievable bottleneck B (the slowest stage).
4. A second pass keeps only stages costing at most B * (1 + balance_slack) and, among those splits, takes the one
   with the fewest bytes summed over its cuts.
Limits: only the graph's own node order is cut (another topological order of parallel branches could cross fewer
bytes); O(N * P^2) time in numpy, a fraction of a second for a few thousand nodes.
"""
from __future__ import annotations

import numpy as np

# A cut tensor is written once into a shared-memory ring and read once by the next stage; memcpy measured 20-35
# GB/s here in cache, about 10 GB/s from memory.
COPY_BYTES_PER_SECOND = 10e9


def crossing_bytes(definitions: np.ndarray, last_uses: np.ndarray, sizes: np.ndarray, positions: int) -> np.ndarray:
    """Bytes crossing each position 0..P: tensor t crosses p when definitions[t] < p <= last_uses[t] (model inputs
    are defined at -1, model outputs last used at P)."""
    delta = np.zeros(positions + 2, dtype=np.float64)
    for defined, used, size in zip(definitions, last_uses, sizes):
        start = max(int(defined) + 1, 0)
        if used >= start:
            delta[start] += size
            delta[int(used) + 1] -= size
    return np.cumsum(delta)[:positions + 1]


def choose_cuts(costs: np.ndarray, cut_bytes: np.ndarray, stages: int, *, balance_slack: float) -> list[int]:
    """The N-1 cut positions (increasing) for node `costs` (seconds, in order) and `cut_bytes` per position 0..P."""
    count = len(costs)
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    copy_seconds = cut_bytes / COPY_BYTES_PER_SECOND

    def stage_costs(end: int) -> np.ndarray:  # cost of stages [i, end) for every i < end
        starts = np.arange(end)
        return prefix[end] - prefix[starts] + copy_seconds[starts] + copy_seconds[end]

    # Step 3: best[k][j] = the smallest bottleneck covering nodes [0, j) with k + 1 stages.
    best = np.full((stages, count + 1), np.inf)
    best[0, 1:] = [stage_costs(end)[0] for end in range(1, count + 1)]
    for stage in range(1, stages):
        for end in range(stage + 1, count + 1):
            best[stage, end] = np.min(np.maximum(best[stage - 1, :end], stage_costs(end)))
    bound = best[stages - 1, count] * (1.0 + balance_slack) * (1.0 + 1e-12)
    # Step 4: fewest cut bytes with every stage within the bound.
    fewest = np.full((stages, count + 1), np.inf)
    previous = np.zeros((stages, count + 1), dtype=np.int64)
    for end in range(1, count + 1):
        if stage_costs(end)[0] <= bound:
            fewest[0, end] = 0.0
    for stage in range(1, stages):
        for end in range(stage + 1, count + 1):
            totals = fewest[stage - 1, :end] + cut_bytes[:end]
            totals[stage_costs(end) > bound] = np.inf
            start = int(np.argmin(totals))
            fewest[stage, end], previous[stage, end] = totals[start], start
    cuts, end = [], count
    for stage in range(stages - 1, 0, -1):
        end = int(previous[stage, end])
        cuts.append(end)
    return sorted(cuts)
