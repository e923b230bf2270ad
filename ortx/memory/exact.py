"""Branch and bound over placement orders: exact for small problems, a bounded local search for large ones.

Every packing can be pushed down until each buffer rests on a conflicting one or on 0; placing the buffers of
such a packing in order of offset, each at the lowest aligned offset free of the already placed ones, puts each at
or below where it was. So searching placement orders with lowest-offset placement finds an optimal plan.
1. Depth-first over orders; children are the unplaced buffers in the seed order (the best greedy order).
2. Prune a node whose arena so far already reaches the best found; stop at the aligned lower bound.
3. Two adjacent buffers that do not conflict give the same offsets in either order: only the seed-order one is
   explored.
Limits: the search stops after `node_limit` nodes (deterministic, unlike a time limit), so above ~12 buffers it
is a local search around the seed, and with `width` set only the first `width` unplaced buffers are branched on.
"""
from __future__ import annotations

from ortx.memory.greedy import lowest_offset
from ortx.memory.lifetimes import align, conflict_lists, lower_bound_bytes

NODE_LIMIT = 20_000


def branch_and_bound(lifetimes, seed_order: list[int], seed_arena: int, *, node_limit: int = NODE_LIMIT,
                     width: int | None = None) -> tuple[list[int] | None, int, bool]:
    """(offsets or None if nothing beat `seed_arena`, arena, proved_optimal)."""
    count = len(lifetimes)
    conflicts = conflict_lists(lifetimes)
    conflict_sets = [set(c) for c in conflicts]
    sizes = [align(t.nbytes) for t in lifetimes]
    bound = lower_bound_bytes(lifetimes, aligned=True)
    rank = {index: position for position, index in enumerate(seed_order)}
    offsets = [-1] * count
    best_offsets: list[int] | None = None
    best_arena = seed_arena
    nodes = 0
    exhausted = True

    def search(remaining: list[int], arena: int, previous: int) -> bool:
        """Returns True to stop the whole search (node limit, or the lower bound reached)."""
        nonlocal best_offsets, best_arena, nodes, exhausted
        if not remaining:
            if arena < best_arena:
                best_arena, best_offsets = arena, list(offsets)
            return best_arena <= bound
        children = remaining if width is None else remaining[:width]
        for child in children:
            if previous >= 0 and child not in conflict_sets[previous] and rank[child] < rank[previous]:
                continue  # Case 3: same offsets as the order with these two swapped
            nodes += 1
            if nodes > node_limit:
                exhausted = False
                return True
            ranges = [(offsets[j], offsets[j] + sizes[j]) for j in conflicts[child] if offsets[j] >= 0]
            offset = lowest_offset(sizes[child], ranges)
            top = max(arena, offset + sizes[child])
            if top >= best_arena:
                continue  # Case 2: cannot beat the best
            offsets[child] = offset
            stop = search([i for i in remaining if i != child], top, child)
            offsets[child] = -1
            if stop:
                return True
        return False

    search(list(seed_order), 0, -1)
    proved = (exhausted and width is None) or best_arena <= bound
    return best_offsets, best_arena, proved
