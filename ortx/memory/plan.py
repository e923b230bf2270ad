"""Static arena offsets from buffer lifetimes: several planners run, the smallest arena is kept.

1. Greedy placement (greedy.py) for each order (size as TFLite Micro, conflicts, breadth) x (first, best fit).
2. Up to EXACT_MAX_BUFFERS buffers: branch and bound (exact.py) seeded with the best greedy order, exact within
   its node limit. Above: local search (local_search.py) moving buffers earlier in that order, and the same
   branch and bound branching on only the first LOCAL_WIDTH unplaced buffers for LOCAL_NODES nodes (up to
   LOCAL_MAX_BUFFERS: the search recurses once per buffer).
3. The plan with the smallest arena wins (ties: the earlier planner); every candidate's arena is kept for reports.
Offsets are multiples of ALIGNMENT and each buffer takes its size rounded up to ALIGNMENT. The lower bound (most
raw bytes live at one step) is reported beside the arena; the plan prints as a table (`str(plan)`).
Limits: the step order is given (compile_segment picks it first, with schedule.memory_order), and lifetimes are
whole steps. The search budgets
shrink with the buffer count (LOCAL_WORK placements in all) so planning stays well under a second.
"""
from __future__ import annotations

import dataclasses

from ortx.memory.exact import NODE_LIMIT, branch_and_bound
from ortx.memory.greedy import greedy_candidates
from ortx.memory.lifetimes import ALIGNMENT, Lifetime, align, check_no_overlap, lower_bound_bytes
from ortx.memory.local_search import MAX_EVALUATIONS, improve_order

__all__ = ["ALIGNMENT", "Lifetime", "MemoryPlan", "lower_bound_bytes", "plan_offsets", "naive_bytes"]

EXACT_MAX_BUFFERS = 12  # full branch and bound up to here; n! orders above it are out of reach anyway
LOCAL_WIDTH = 2
LOCAL_NODES = 4_000
LOCAL_MAX_BUFFERS = 400  # below Python's default recursion limit of 1000 with room for the caller's frames
LOCAL_WORK = 50_000  # whole-order placements' worth of work for the local search: 400 orders of 125 buffers


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[str, int]
    arena_bytes: int
    lower_bound_bytes: int
    naive_bytes: int
    lifetimes: tuple[Lifetime, ...]
    algorithm: str = "greedy_by_size_first_fit"
    candidates: tuple[tuple[str, int], ...] = ()  # (planner, arena bytes) for every planner tried
    optimal: bool = False  # the search proved no smaller arena exists (or the arena equals the lower bound)

    @property
    def ratio_to_lower_bound(self) -> float:
        return self.arena_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0

    def table(self) -> str:
        lines = [f"arena {self.arena_bytes} B by {self.algorithm} (lower bound {self.lower_bound_bytes} B, "
                 f"ratio {self.ratio_to_lower_bound:.3f}{', optimal' if self.optimal else ''}; naive "
                 f"{self.naive_bytes} B)",
                 f"  {'offset':>12} {'bytes':>10} {'steps':>11}  buffer"]
        for item in sorted(self.lifetimes, key=lambda t: (self.offsets[t.name], t.first, t.name)):
            lines.append(f"  {self.offsets[item.name]:>12} {item.nbytes:>10} {item.first:>5}-{item.last:<5}  "
                         f"{item.name}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def naive_bytes(lifetimes) -> int:
    """One aligned buffer per lifetime, no reuse."""
    return sum(align(t.nbytes) for t in lifetimes)


def plan_offsets(lifetimes, *, node_limit: int | None = None) -> MemoryPlan:
    lifetimes = list(lifetimes)
    names = [t.name for t in lifetimes]
    if len(set(names)) != len(names):
        raise ValueError("plan_offsets: buffer names must be unique")
    candidates = []
    best = None  # (arena, algorithm, offsets, order)
    for algorithm, order, offsets in greedy_candidates(lifetimes):
        arena = max((offset + align(t.nbytes) for offset, t in zip(offsets, lifetimes)), default=0)
        candidates.append((algorithm, arena))
        if best is None or arena < best[0]:
            best = (arena, algorithm, offsets, order)
    optimal = False
    if lifetimes and len(lifetimes) <= EXACT_MAX_BUFFERS:
        found, arena, optimal = branch_and_bound(lifetimes, best[3], best[0],
                                                 node_limit=node_limit or NODE_LIMIT)
        candidates.append(("branch_and_bound", arena))
        if found is not None:
            best = (arena, "branch_and_bound", found, best[3])
    elif lifetimes:
        seed_arena, seed_order = best[0], best[3]
        budget = max(10, min(MAX_EVALUATIONS, LOCAL_WORK // len(lifetimes)))
        order, offsets, arena = improve_order(lifetimes, seed_order, max_evaluations=budget)
        candidates.append(("local_search", arena))
        if arena < best[0]:
            best = (arena, "local_search", offsets, order)
        if len(lifetimes) <= LOCAL_MAX_BUFFERS:
            found, arena, _ = branch_and_bound(lifetimes, seed_order, seed_arena,
                                               node_limit=node_limit or LOCAL_NODES, width=LOCAL_WIDTH)
            candidates.append(("branch_and_bound_local", arena))
            if found is not None and arena < best[0]:
                best = (arena, "branch_and_bound_local", found, seed_order)
    arena, algorithm, offsets, _ = best if best else (0, "none", [], [])
    offsets_by_name = {t.name: offset for t, offset in zip(lifetimes, offsets)}
    check_no_overlap(lifetimes, offsets_by_name)
    lower = lower_bound_bytes(lifetimes)
    return MemoryPlan(
        offsets=offsets_by_name,
        arena_bytes=arena,
        lower_bound_bytes=lower,
        naive_bytes=naive_bytes(lifetimes),
        lifetimes=tuple(lifetimes),
        algorithm=algorithm,
        candidates=tuple(candidates),
        optimal=optimal or arena <= lower_bound_bytes(lifetimes, aligned=True),
    )
