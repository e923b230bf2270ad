"""Buffer lifetimes over a step order, and the facts every planner needs about them.

A lifetime is a buffer live over steps [first, last] inclusive. Two buffers conflict when their lifetimes
intersect; conflicting buffers must not share bytes. The lower bound of any plan is the most bytes live at one
step (`lower_bound_bytes`); `check_no_overlap` is the invariant every plan and every test asserts.
"""
from __future__ import annotations

import dataclasses

import numpy as np

ALIGNMENT = 64  # bytes: one cache line, and the widest vector load (AVX-512) the kernels issue


@dataclasses.dataclass(frozen=True)
class Lifetime:
    """A buffer live over steps [first, last] inclusive."""

    name: str
    nbytes: int
    first: int
    last: int

    def conflicts(self, other: "Lifetime") -> bool:
        return self.first <= other.last and other.first <= self.last


def align(nbytes: int) -> int:
    """The bytes a buffer occupies in the arena: its size rounded up to ALIGNMENT (at least one line)."""
    return (max(int(nbytes), 1) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def aligned_empty(nbytes: int) -> np.ndarray:
    """Uninitialised uint8 bytes starting on an ALIGNMENT boundary, as every arena and kernel buffer expects (numpy
    alone gives 16: the sparse row kernel ran 2x slower on such an arena, ortx.tune.sparse_choice)."""
    raw = np.empty(max(int(nbytes), 1) + ALIGNMENT, dtype=np.uint8)
    start = -raw.__array_interface__["data"][0] % ALIGNMENT
    return raw[start:start + max(int(nbytes), 1)]


def live_bytes(lifetimes, *, aligned: bool = False) -> list[int]:
    """Bytes live at each step 0..last."""
    if not lifetimes:
        return []
    last_step = max(t.last for t in lifetimes)
    delta = [0] * (last_step + 2)
    for t in lifetimes:
        size = align(t.nbytes) if aligned else t.nbytes
        delta[t.first] += size
        delta[t.last + 1] -= size
    live, running = [], 0
    for change in delta[:-1]:
        running += change
        live.append(running)
    return live


def lower_bound_bytes(lifetimes, *, aligned: bool = False) -> int:
    """The most bytes live at one step: no plan's arena can be smaller."""
    return max(live_bytes(lifetimes, aligned=aligned), default=0)


def conflict_lists(lifetimes) -> list[list[int]]:
    """For each lifetime, the indices of the others it conflicts with (sweep over start steps)."""
    order = sorted(range(len(lifetimes)), key=lambda i: lifetimes[i].first)
    result: list[list[int]] = [[] for _ in lifetimes]
    active: list[int] = []
    for index in order:
        item = lifetimes[index]
        active = [j for j in active if lifetimes[j].last >= item.first]
        for j in active:
            result[index].append(j)
            result[j].append(index)
        active.append(index)
    return result


class OverlapError(AssertionError):
    """Two buffers live at the same step share bytes: the plan would corrupt a value."""


def check_no_overlap(lifetimes, offsets: dict[str, int]) -> None:
    """Raises OverlapError naming the first two conflicting buffers whose byte ranges intersect."""
    items = list(lifetimes)
    for index, others in enumerate(conflict_lists(items)):
        a = items[index]
        start_a = offsets[a.name]
        for j in others:
            if j <= index:
                continue
            b = items[j]
            start_b = offsets[b.name]
            if start_a < start_b + b.nbytes and start_b < start_a + a.nbytes:
                raise OverlapError(f"{a} at {start_a} and {b} at {start_b} overlap")
