"""Blocked (NCHWc) runs, the same runs without the fused expand + depthwise steps, or NCHW kernels per CPU segment,
whichever measured faster here (issue #4: a layout that pays off on one model or machine can cost on another; never
keep the slower one once it is measured).

1. compile_segment plans blocked runs from op types and shapes alone (ortx.ep.lowering.blocked_layout). Where the
   runs are short or end at dense convs that need NCHW, the reorders can cost more than the runs save: PP-OCR det's
   runs end at each of its 3x3 convs and ran 1.05-1.06x the NCHW program's time on the Zen 4 host
   (benchmarks/blocked_layout.py, 2 threads), while MobileNetV2-style, cls and rec gained 6-30%.
   Inside the runs, a 1x1 conv and the depthwise conv reading its output run as one fused step
   (conv_expand_depthwise_nchwc_*): on the Zen 4 host that won 2-15% (most with the vCPUs far apart), on an Emerald
   Rapids VM PP-OCR rec ran 1.04-1.07x the unfused runs' time (benchmarks/expand_depthwise.py).
2. A segment whose program holds blocked steps (a kernel with "nchwc" in its name) has a choice: "blocked" (the
   planner's program), "blocked_unfused" (only where the program has fused steps) and "nchw". Its signature is
   ortx.tune.engine_choice's (ops, attributes, shapes, thread count, precision). Records: template LAYOUT_TEMPLATE,
   schedule {"layout": one of LAYOUTS, "round": i}, one row per layout and round, one `created` per measurement.
3. Tuning "quick"/"full" without a record: the segment is also compiled the other ways and the programs are timed in
   rounds on seeded random inputs, alternating run by run (sparse_choice.time_rounds, sparse_choice.QUICK/FULL),
   and recorded. Another layout is chosen only when it was faster than "blocked" by more than MARGIN in every
   round of the latest measurement (of two such, the lower median); "cached" reads the records; without one, or
   with tuning "off", the blocked program stays.
Limits: a segment is timed alone (its neighbours' cache state is not there); segments with non-float inputs are
not measured (random integers could be out-of-range indices) and keep the blocked program.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time

import numpy as np

from ortx.tune.engine_choice import segment_signature
from ortx.tune.fingerprint import kernels_build
from ortx.tune.sparse_choice import FULL, QUICK, random_tensors, time_rounds

logger = logging.getLogger(__name__)

LAYOUT_TEMPLATE = f"layout-choice-2|kernels={kernels_build()}"  # a rebuild measures again
LAYOUTS = ("blocked", "blocked_unfused", "nchw")
MARGIN = 0.02


@dataclasses.dataclass(frozen=True)
class LayoutChoice:
    """The decision for one segment with blocked steps; rounds are () when nothing was measured or recorded."""

    first_node: str
    signature: str  # ortx.tune.engine_choice.segment_signature of the segment
    layout: str  # one of LAYOUTS
    blocked_ms: tuple[float, ...]
    nchw_ms: tuple[float, ...]
    source: str  # "measured", "records", "no records", "not measured: ..."
    unfused_ms: tuple[float, ...] = ()  # "blocked_unfused", where the blocked program has fused steps

    def describe(self) -> str:
        if not self.blocked_ms or not self.nchw_ms:
            return f"layout of the segment from {self.first_node}: blocked ({self.source})"
        rounds = lambda values: "/".join(f"{ms:.3f}" for ms in values)  # noqa: E731
        unfused = f" vs blocked unfused {rounds(self.unfused_ms)} ms" if self.unfused_ms else ""
        return (f"layout of the segment from {self.first_node}: blocked {rounds(self.blocked_ms)} ms{unfused} vs "
                f"NCHW {rounds(self.nchw_ms)} ms ({self.source}) -> {self.layout}")


def has_blocked_steps(program) -> bool:
    return any("nchwc" in step.kernel for step in program.steps)


def has_fused_steps(program) -> bool:
    """Steps that would be two unfused (conv_expand_depthwise_nchwc_*)."""
    return any("expand_depthwise" in step.kernel for step in program.steps)


def _chosen(rounds: dict[str, tuple[float, ...]]) -> str:
    """"blocked" unless another layout was faster by more than MARGIN in every round (of two, the lower median)."""
    blocked = rounds["blocked"]
    faster = [layout for layout, values in rounds.items() if layout != "blocked" and values
              and all(ms < reference * (1 - MARGIN) for reference, ms in zip(blocked, values))]
    return min(faster, key=lambda layout: float(np.median(rounds[layout])), default="blocked")


def _latest(records) -> dict[str, tuple[float, ...]]:
    """Per layout, its rounds' ms of the latest measurement holding "blocked" and "nchw" ({} if none)."""
    usable = [r for r in records if r.status == "ok" and r.schedule.get("layout") in LAYOUTS]
    for created in sorted({r.created for r in usable}, reverse=True):
        rows = sorted((r for r in usable if r.created == created), key=lambda r: r.schedule.get("round", 0))
        by_layout = {layout: tuple(r.median_ms for r in rows if r.schedule["layout"] == layout) for layout in LAYOUTS}
        if by_layout["blocked"] and by_layout["nchw"]:
            return by_layout
    return {}


@dataclasses.dataclass
class LayoutPolicy:
    mode: str = "off"  # tuning mode (ortx.tune.engine_choice.MODES)
    database_path: str | None = None
    options: object = None  # ortx.config.Options for the fingerprint's compiler
    choices: list = dataclasses.field(default_factory=list)  # LayoutChoice per segment with blocked steps
    _fingerprint: object = dataclasses.field(default=None, repr=False)

    def choose(self, compile_with, nodes, inputs, outputs, num_threads: int, precision: str = "fp32"):
        """`compile_with(layout)` (one of LAYOUTS) -> CompiledProgram; returns the program to run (see the module).
        A recorded choice compiles only the layout it names."""
        if self.mode == "off":
            return compile_with("blocked")
        first, key = (nodes[0].name if nodes else ""), segment_signature(nodes, num_threads, precision)
        if not self.database_path or (self.mode == "cached" and not os.path.exists(self.database_path)):
            return self._unmeasured(compile_with("blocked"), first, key, "no records")
        from ortx.tune.fingerprint import current
        from ortx.tune.records import TuningDatabase, TuningRecord

        with TuningDatabase(self.database_path) as database:
            if self._fingerprint is None:
                self._fingerprint = current(self.options)
            fingerprint = database.add_fingerprint(self._fingerprint)
            rounds = _latest(database.records(key, fingerprint, LAYOUT_TEMPLATE))
            if rounds:
                return self._decided(compile_with, {}, first, key, rounds, "records")
            program = compile_with("blocked")
            if self.mode not in ("quick", "full") or not has_blocked_steps(program):
                return self._unmeasured(program, first, key, "no records")
            if not all(v.dtype is not None and np.dtype(v.dtype.numpy()).kind == "f" for v in inputs):
                return self._unmeasured(program, first, key, "not measured: non-float inputs")
            programs = {"blocked": program}
            if has_fused_steps(program):
                programs["blocked_unfused"] = compile_with("blocked_unfused")
            programs["nchw"] = compile_with("nchw")
            tensors, externals = random_tensors(inputs, outputs, np.random.default_rng(0))  # keeps them alive
            times = time_rounds(programs, externals, num_threads, *(QUICK if self.mode == "quick" else FULL))
            created = time.time()
            for layout, values in times.items():
                for index, ms in enumerate(values):
                    database.add(TuningRecord(key, fingerprint, LAYOUT_TEMPLATE, {"layout": layout, "round": index},
                                              "ok", ms, "", f"layout_choice:{self.mode}", created))
        rounds = {layout: tuple(times.get(layout, ())) for layout in LAYOUTS}
        return self._decided(compile_with, programs, first, key, rounds, "measured")

    def _unmeasured(self, program, first: str, key: str, source: str):
        """The blocked program, noted as a choice only when it has blocked steps."""
        if has_blocked_steps(program):
            self.choices.append(LayoutChoice(first, key, "blocked", (), (), source))
        return program

    def _decided(self, compile_with, programs: dict, first: str, key: str, rounds: dict, source: str):
        """The chosen layout's program: the one given, else compiled now."""
        choice = LayoutChoice(first, key, _chosen(rounds), rounds["blocked"], rounds["nchw"], source,
                              rounds["blocked_unfused"])
        self.choices.append(choice)
        logger.debug("ortx layout choice: %s", choice.describe())
        program = programs.get(choice.layout)
        return program if program is not None else compile_with(choice.layout)
