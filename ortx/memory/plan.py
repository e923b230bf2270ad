"""Static arena offsets from buffer lifetimes: greedy by size, as TFLite Micro's planner does.

1. Sort buffers by size, largest first (ties: earliest first use).
2. Place each at the lowest 64-byte-aligned offset where it overlaps no already placed buffer whose lifetime
   intersects its own.
3. The arena size is the highest end offset.
Limits: greedy, not optimal; the lower bound (most bytes live at one step) is reported beside it so the gap is
visible. The full planner (in-place reuse, other heuristics, an exact solver) is issue #6.
"""
from __future__ import annotations

import dataclasses

ALIGNMENT = 64


@dataclasses.dataclass(frozen=True)
class Lifetime:
    """A buffer live over steps [first, last] inclusive."""

    name: str
    nbytes: int
    first: int
    last: int


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[str, int]
    arena_bytes: int
    lower_bound_bytes: int
    naive_bytes: int
    lifetimes: tuple[Lifetime, ...]

    def __str__(self) -> str:
        lines = [f"arena {self.arena_bytes} B (lower bound {self.lower_bound_bytes} B, naive {self.naive_bytes} B)"]
        for item in sorted(self.lifetimes, key=lambda t: self.offsets[t.name]):
            lines.append(f"  {self.offsets[item.name]:>12} +{item.nbytes:<10} steps {item.first}-{item.last}  {item.name}")
        return "\n".join(lines)


def _align(nbytes: int) -> int:
    return (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def lower_bound_bytes(lifetimes: list[Lifetime]) -> int:
    if not lifetimes:
        return 0
    last_step = max(t.last for t in lifetimes)
    live = [0] * (last_step + 2)
    for t in lifetimes:
        live[t.first] += t.nbytes
        live[t.last + 1] -= t.nbytes
    peak = running = 0
    for delta in live:
        running += delta
        peak = max(peak, running)
    return peak


def plan_offsets(lifetimes: list[Lifetime]) -> MemoryPlan:
    placed: list[tuple[int, int, Lifetime]] = []  # (offset, end, lifetime)
    offsets: dict[str, int] = {}
    for item in sorted(lifetimes, key=lambda t: (-t.nbytes, t.first, t.name)):
        conflicts = sorted(
            (offset, end) for offset, end, other in placed if other.first <= item.last and item.first <= other.last
        )
        candidate = 0
        size = _align(max(item.nbytes, 1))
        for offset, end in conflicts:
            if candidate + size <= offset:
                break
            candidate = max(candidate, _align(end))
        offsets[item.name] = candidate
        placed.append((candidate, candidate + size, item))
    arena = max((end for _, end, _ in placed), default=0)
    return MemoryPlan(
        offsets=offsets,
        arena_bytes=arena,
        lower_bound_bytes=lower_bound_bytes(lifetimes),
        naive_bytes=sum(_align(t.nbytes) for t in lifetimes),
        lifetimes=tuple(lifetimes),
    )
