"""Execution order for a lower peak: of the steps ready to run, run first the one that adds the fewest live bytes.

1. A step reads and writes values; values map to buffers (an alias such as Reshape writes a value held in the
   buffer of the value it reads). A buffer is live from the first step that writes one of its values to the last
   step that reads one (a buffer nobody reads dies at its writer); a buffer nothing writes (a segment input, a
   constant) is live from step 0. Only buffers with a size count: external and constant ones are given none.
2. List scheduling: a step is ready when every value it reads that some step writes has been written. Take the
   ready step with the smallest (bytes of the new buffers it writes - bytes of the buffers it is the last reader
   of); ties go to the step earlier in the given order, so an order that cannot be improved is kept as it is.
3. The new order is kept only when its peak (`peak_bytes`: the most bytes live at one step, the lower bound of any
   arena over that order) is strictly below the given order's.
Limits: greedy with no lookahead (a branch that frees its big buffer only at its end is not preferred over one
that frees nothing); kernel workspaces and in-place reuse are not modelled; the given order must be topological
and only orders of its steps are considered. Legal by construction: a step runs only after every writer of what
it reads, and values are written once.
"""
from __future__ import annotations

import dataclasses

from ortx.memory.lifetimes import Lifetime, lower_bound_bytes


@dataclasses.dataclass(frozen=True)
class Step:
    reads: tuple[str, ...]
    writes: tuple[str, ...]


def buffer_lifetimes(steps: list[Step], order: list[int], sizes: dict[str, int],
                     buffer_of: dict[str, str] | None = None) -> list[Lifetime]:
    """The lifetime of every sized buffer when `steps` run in `order` (indices into `steps`)."""
    buffer_of = buffer_of or {}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for position, index in enumerate(order):
        for value in steps[index].reads:
            buffer = buffer_of.get(value, value)
            first.setdefault(buffer, 0)  # read before any write: there from the start
            last[buffer] = position
        for value in steps[index].writes:
            buffer = buffer_of.get(value, value)
            first.setdefault(buffer, position)
            last[buffer] = max(last.get(buffer, position), position)
    return [Lifetime(buffer, sizes[buffer], first[buffer], last[buffer])
            for buffer in first if sizes.get(buffer, 0) > 0]


def peak_bytes(steps: list[Step], order: list[int], sizes: dict[str, int],
               buffer_of: dict[str, str] | None = None) -> int:
    return lower_bound_bytes(buffer_lifetimes(steps, order, sizes, buffer_of))


def memory_order(steps: list[Step], sizes: dict[str, int], buffer_of: dict[str, str] | None = None) -> list[int]:
    """A topological order of `steps` (indices) with a lower peak than the given one, or the given one."""
    buffer_of = buffer_of or {}
    given = list(range(len(steps)))
    writer = {value: index for index, step in enumerate(steps) for value in step.writes}
    waiting = [len({writer[v] for v in step.reads if v in writer and writer[v] != index})
               for index, step in enumerate(steps)]
    dependents: dict[int, list[int]] = {}
    for index, step in enumerate(steps):
        for producer in {writer[v] for v in step.reads if v in writer and writer[v] != index}:
            dependents.setdefault(producer, []).append(index)
    readers_left: dict[str, int] = {}
    for step in steps:
        for buffer in {buffer_of.get(v, v) for v in step.reads}:
            readers_left[buffer] = readers_left.get(buffer, 0) + 1
    written: set[str] = set()

    def added_bytes(index: int) -> int:
        step = steps[index]
        new = {buffer_of.get(v, v) for v in step.writes} - written
        freed = {b for b in {buffer_of.get(v, v) for v in step.reads} if readers_left[b] == 1}
        return sum(sizes.get(b, 0) for b in new) - sum(sizes.get(b, 0) for b in freed)

    ready = [index for index in given if waiting[index] == 0]
    order: list[int] = []
    while ready:
        index = min(ready, key=lambda i: (added_bytes(i), i))
        ready.remove(index)
        order.append(index)
        for buffer in {buffer_of.get(v, v) for v in steps[index].reads}:
            readers_left[buffer] -= 1
        written.update(buffer_of.get(v, v) for v in steps[index].writes)
        for dependent in dependents.get(index, ()):
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append(dependent)
    if len(order) != len(steps):
        raise ValueError("memory_order: the steps have a cycle (a step reads what a later step writes)")
    if peak_bytes(steps, order, sizes, buffer_of) < peak_bytes(steps, given, sizes, buffer_of):
        return order
    return given
