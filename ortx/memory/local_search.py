"""Local search over placement orders for problems too large for branch and bound.

1. Start from the best greedy order (greedy.py) and its arena.
2. Moves: take the buffer at position j and place it earlier, at position i (i < j <= i + WINDOW); each move is
   evaluated by re-placing the buffers from position i on (first fit, lowest offset); those before i keep
   their offsets, since placement depends only on earlier buffers.
3. Take the first move that improves (arena, sum of buffer end offsets) and start over (the second key gets the
   search across plateaus where one repair alone does not lower the arena yet); stop when no move helps, the arena reaches the
   aligned lower bound, or `max_evaluations` orders were placed.
Why promotions: greedy orders go wrong at the top, when a big buffer is placed before a smaller one whose
lifetime would have packed under it; moving that one earlier is the repair. Deterministic: no randomness, and
the budget counts evaluations, not seconds.
"""
from __future__ import annotations

from ortx.memory.greedy import place
from ortx.memory.lifetimes import align, conflict_lists, lower_bound_bytes

WINDOW = 8
MAX_EVALUATIONS = 400


def _score(lifetimes, offsets) -> tuple[int, int]:
    ends = [offset + align(t.nbytes) for offset, t in zip(offsets, lifetimes)]
    return max(ends, default=0), sum(ends)


def improve_order(lifetimes, order: list[int], *, max_evaluations: int = MAX_EVALUATIONS,
                  window: int = WINDOW) -> tuple[list[int], list[int], int]:
    """(order, offsets, arena) no worse than `order`'s."""
    conflicts = conflict_lists(lifetimes)
    sizes = [align(t.nbytes) for t in lifetimes]
    offsets = place(lifetimes, order, conflicts, sizes=sizes)
    score = _score(lifetimes, offsets)
    bound = lower_bound_bytes(lifetimes, aligned=True)
    evaluations = 0
    improved = True
    while improved and score[0] > bound and evaluations < max_evaluations:
        improved = False
        for i in range(len(order)):
            prefix = [-1] * len(lifetimes)
            for index in order[:i]:
                prefix[index] = offsets[index]
            for j in range(i + 1, min(i + 1 + window, len(order))):
                candidate = order[:i] + [order[j]] + order[i:j] + order[j + 1:]
                candidate_offsets = place(lifetimes, candidate[i:], conflicts, placed=prefix, sizes=sizes)
                evaluations += 1
                candidate_score = _score(lifetimes, candidate_offsets)
                if candidate_score < score:
                    order, offsets, score, improved = candidate, candidate_offsets, candidate_score, True
                    break
                if evaluations >= max_evaluations:
                    break
            if improved or evaluations >= max_evaluations:
                break
    return order, offsets, score[0]
