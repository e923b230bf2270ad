"""Double-buffered phases: a layer's work items (loads, compute, stores) -> commands separated by BARRIERs.

1. Item i's loads go to SRAM slot i % 2, its outputs to out buffer i % 2 (the compiler sized both).
2. Phase i holds loads(i) on the DMA engine, compute(i - 1) on the compute engine and stores(i - 2) on the DMA
   engine again, then a BARRIER: the DMA of tile i overlaps the MACs of tile i - 1, and the simulator checks that
   no two of them touch the same SRAM (kernels/npu_sim.c, hazards).
3. n items take n + 2 phases; the layer ends with a BARRIER, so layers do not overlap each other (a known limit:
   the first loads of a layer could overlap the last stores of the one before).
"""
from __future__ import annotations

import dataclasses

from ortx.npu.stream import Command, command


@dataclasses.dataclass
class WorkItem:
    loads: list[Command] = dataclasses.field(default_factory=list)
    compute: list[Command] = dataclasses.field(default_factory=list)
    stores: list[Command] = dataclasses.field(default_factory=list)


def double_buffered(items: list[WorkItem]) -> list[Command]:
    commands: list[Command] = []
    for phase in range(len(items) + 2):
        for index, part in ((phase, "loads"), (phase - 1, "compute"), (phase - 2, "stores")):
            if 0 <= index < len(items):
                commands += getattr(items[index], part)
        if commands and commands[-1].op != "BARRIER":
            commands.append(command("BARRIER"))
    return commands
