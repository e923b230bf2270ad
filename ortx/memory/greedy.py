"""Greedy offset assignment: visit buffers in a fixed order and put each at a free, aligned offset.

1. Order the buffers (ORDERS: by size as TFLite Micro does; by conflicts, the bytes of buffers they must avoid;
   by breadth, the steps with the most live bytes first, as Pisarchyk & Lee's "greedy by breadth").
2. For each buffer, collect the byte ranges of already placed buffers whose lifetimes intersect its own.
3. Place it in a gap between them: the lowest that fits (first fit) or the smallest that fits (best fit), else
   above the highest.
Limits: each order is a heuristic with no guarantee; `plan.plan_offsets` runs every combination and keeps the
best, and `exact.py` searches further on small problems.
"""
from __future__ import annotations

from ortx.memory.lifetimes import align, conflict_lists, live_bytes


def by_size(lifetimes, conflicts) -> list[int]:
    return sorted(range(len(lifetimes)), key=lambda i: (-lifetimes[i].nbytes, lifetimes[i].first, lifetimes[i].name))


def by_conflicts(lifetimes, conflicts) -> list[int]:
    """Largest (own bytes + bytes it conflicts with) first: the hardest buffers to fit go in while space is free."""
    weight = [lifetimes[i].nbytes + sum(lifetimes[j].nbytes for j in conflicts[i]) for i in range(len(lifetimes))]
    return sorted(range(len(lifetimes)), key=lambda i: (-weight[i], -lifetimes[i].nbytes, lifetimes[i].name))


def by_breadth(lifetimes, conflicts) -> list[int]:
    """Steps by live bytes, widest first; at each step its not yet ordered buffers, largest first."""
    live = live_bytes(lifetimes)
    at_step: dict[int, list[int]] = {}
    for i, item in enumerate(lifetimes):
        for step in range(item.first, item.last + 1):
            at_step.setdefault(step, []).append(i)
    order, seen = [], set()
    for step in sorted(at_step, key=lambda s: (-live[s], s)):
        for i in sorted(at_step[step], key=lambda i: (-lifetimes[i].nbytes, lifetimes[i].name)):
            if i not in seen:
                seen.add(i)
                order.append(i)
    return order


ORDERS = {"size": by_size, "conflicts": by_conflicts, "breadth": by_breadth}


def lowest_offset(size: int, ranges: list[tuple[int, int]], best_fit: bool = False) -> int:
    """An aligned offset where [offset, offset + size) meets none of `ranges` (each [start, end), both aligned)."""
    candidate, best, best_gap = 0, None, None
    for start, end in sorted(ranges):
        if candidate + size <= start:
            if not best_fit:
                return candidate
            gap = start - candidate
            if best_gap is None or gap < best_gap:
                best, best_gap = candidate, gap
        if end > candidate:
            candidate = end
    return candidate if best is None else best


def place(lifetimes, order: list[int], conflicts, *, best_fit: bool = False, placed: list[int] | None = None,
          sizes: list[int] | None = None) -> list[int]:
    """Offsets (indexed like `lifetimes`) from placing buffers in `order`, after those already at `placed`
    offsets (-1: not placed), which stay where they are."""
    sizes = sizes or [align(t.nbytes) for t in lifetimes]
    offsets = list(placed) if placed is not None else [-1] * len(lifetimes)
    for i in order:
        ranges = [(offsets[j], offsets[j] + sizes[j]) for j in conflicts[i] if offsets[j] >= 0]
        offsets[i] = lowest_offset(sizes[i], ranges, best_fit)
    return offsets


def greedy_candidates(lifetimes):
    """(algorithm name, order, offsets) for every order x fit combination."""
    conflicts = conflict_lists(lifetimes)
    for name, order_fn in ORDERS.items():
        order = order_fn(lifetimes, conflicts)
        for best_fit in (False, True):
            yield (f"greedy_by_{name}_{'best' if best_fit else 'first'}_fit", order,
                   place(lifetimes, order, conflicts, best_fit=best_fit))
