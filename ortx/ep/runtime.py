"""Runs a compiled, shape-specialised model: claimed segments on ortx programs, segments placed on other devices
on their DeviceProgram, the rest on ORT sub-sessions.

Every run takes a RunContext from a pool: one arena holding the boundary tensors between segments and each
claimed segment's scratch, at offsets planned once (greedy by size over segment lifetimes). Concurrent runs get
different contexts, so `run` is thread safe with no lock held while kernels or ORT run; graph outputs are fresh
arrays owned by the caller.

Lanes and waves. The CPU's and ORT's steps run on the calling thread (the "cpu" lane); each other device has a lane
of its own, a worker thread. With one lane, steps run in order and a tensor lives from its producer's position to
its last reader's. With several, the steps are grouped into waves (a step's wave is one more than the latest wave
of the steps whose outputs it reads): the lanes run a wave's steps concurrently (each lane its own in order), and
the next wave starts when all have finished. Lifetimes are then counted in waves, so two tensors share arena bytes
only if no wave holds both: no step can write over a tensor another lane still reads.
A wave with steps of one lane only runs them on the calling thread: nothing else could run meanwhile, and handing
them to a worker costs a wake-up and a wait (measured ~30 us per run on a 4 x 1024-point DFT).
Limit: a barrier per wave, so a lane idles when its next step waits on a slower lane's step of the same wave.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import queue
import time

import numpy as np

from ortx._kernels import KernelError
from ortx.ep.fallback import OrtSegment
from ortx.ep.segment_builder import CompiledProgram
from ortx.memory.lifetimes import aligned_empty
from ortx.memory.plan import ALIGNMENT, Lifetime, MemoryPlan, plan_offsets


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...] | None  # None: unknown until run time (ORT allocates it)
    dtype: np.dtype | None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def static(self) -> bool:
        return self.shape is not None and self.dtype is not None and self.dtype != object


@dataclasses.dataclass
class ClaimedStep:
    program: CompiledProgram
    inputs: list[str]
    outputs: list[str]
    arena_name: str
    node_names: tuple[str, ...] = ()  # the segment's nodes (in the compiled graph), aliases without steps included


@dataclasses.dataclass
class OrtStep:
    segment: OrtSegment
    inputs: list[str]
    outputs: list[str]


MAIN_LANE = "cpu"  # the calling thread: OrtxEP's CPU kernels and ORT sub-sessions


@dataclasses.dataclass
class DeviceStep:
    """A segment placed on a device other than the CPU (ortx.ep.devices): its DeviceProgram on the device's lane."""

    program: object  # ortx.ep.devices.DeviceProgram
    inputs: list[str]
    outputs: list[str]
    device: str
    node_names: tuple[str, ...] = ()

    def run(self, values: dict) -> None:
        arrays = []
        for name in self.inputs:
            value = values[name]
            arrays.append(value if isinstance(value, np.ndarray) else value.numpy())
        self.program.run(arrays, [values[name] for name in self.outputs])


def lane_of(step) -> str:
    return step.device if isinstance(step, DeviceStep) else MAIN_LANE


def waves_of(steps: list) -> list[int]:
    """Per step, its wave: 0 when it reads only graph inputs, else one more than the latest of its producers."""
    produced_in: dict[str, int] = {}
    waves = []
    for position, step in enumerate(steps):
        wave = 1 + max((waves[produced_in[name]] for name in step.inputs if name in produced_in), default=-1)
        waves.append(wave)
        for name in step.outputs:
            produced_in.setdefault(name, position)
    return waves


class RunContext:
    """Per-run memory: the arena and numpy views of the boundary tensors planned in it.

    One is made at session creation and returned to the pool after every run, so a steady stream of runs
    allocates no arena; a new one is made only while more runs are in flight than contexts exist. Graph outputs
    are the exception by design: they are fresh arrays per run (or the caller's `outputs`), because the caller
    owns them after `run` returns.
    """

    def __init__(self, plan: MemoryPlan, boundary: dict[str, TensorSpec]):
        self.arena = aligned_empty(plan.arena_bytes + ALIGNMENT)
        self.offsets = plan.offsets
        self.views = {}
        for name, spec in boundary.items():
            offset = plan.offsets[name]
            self.views[name] = self.arena[offset:offset + spec.nbytes].view(spec.dtype).reshape(spec.shape)


class ExecutionPlan:
    """Ordered steps over named tensors, with the arena plan shared by every RunContext."""

    def __init__(self, steps: list, tensors: dict[str, TensorSpec], graph_inputs: list[str], graph_outputs: list[str],
                 num_threads: int, use_reference_kernels: bool = False):
        self.steps = steps
        self.tensors = tensors
        self.graph_inputs = graph_inputs
        self.graph_outputs = graph_outputs
        self.num_threads = num_threads
        self.use_reference_kernels = use_reference_kernels
        self.boundary = self._boundary_tensors()
        self._positions = {id(step): position for position, step in enumerate(steps)}
        lanes = {lane_of(step) for step in steps}
        # Time in the lifetimes: the step's position with one lane, its wave with several (see the module doc).
        self.times = list(range(len(steps))) if lanes <= {MAIN_LANE} else waves_of(steps)
        self.waves = None if lanes <= {MAIN_LANE} else self._wave_groups()
        self._workers = {lane: concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"ortx-{lane}")
                         for lane in sorted(lanes - {MAIN_LANE})}
        self.memory_plan = plan_offsets(self._lifetimes())
        self.whole_ort = self._whole_ort_segment()
        self._pool: queue.SimpleQueue[RunContext] = queue.SimpleQueue()
        # The first arena is allocated now, at session creation; concurrent runs add more on demand.
        self._pool.put(RunContext(self.memory_plan, self.boundary))

    def _whole_ort_segment(self) -> OrtSegment | None:
        """The ORT sub-session when it is the plan's only step and reads graph inputs only and writes every graph
        output: `run` then calls its `run` directly. The general path's arena, output arrays and IOBinding cost
        0.05-0.07 ms a run (ResNet-18-style and MobileNetV2-style given back whole, 2 threads: 1-2.3% over ORT)."""
        if len(self.steps) != 1 or not isinstance(self.steps[0], OrtStep):
            return None
        step = self.steps[0]
        if set(step.inputs) <= set(self.graph_inputs) and list(step.outputs) == list(self.graph_outputs):
            return step.segment
        return None

    def _boundary_tensors(self) -> dict[str, TensorSpec]:
        outside = set(self.graph_inputs) | set(self.graph_outputs)
        names = {name for step in self.steps for name in step.outputs}
        return {name: self.tensors[name] for name in sorted(names - outside) if self.tensors[name].static}

    def _wave_groups(self) -> list[list[tuple[str, list]]]:
        """Per wave, (lane, its steps in order) with the main lane last (it runs on the calling thread)."""
        groups: list[dict[str, list]] = [dict() for _ in range(max(self.times) + 1)]
        for step, wave in zip(self.steps, self.times):
            groups[wave].setdefault(lane_of(step), []).append(step)
        return [sorted(group.items(), key=lambda item: item[0] == MAIN_LANE) for group in groups]

    def _lifetimes(self) -> list[Lifetime]:
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for time, step in zip(self.times, self.steps):
            for name in step.outputs:
                first.setdefault(name, time)
            for name in step.inputs:
                last[name] = max(last.get(name, time), time)
        lifetimes = [Lifetime(name, spec.nbytes, first[name], max(last.get(name, first[name]), first[name]))
                     for name, spec in self.boundary.items()]
        for time, step in zip(self.times, self.steps):
            if isinstance(step, ClaimedStep):
                lifetimes.append(Lifetime(step.arena_name, step.program.arena_bytes, time, time))
        return lifetimes

    def _context(self) -> RunContext:
        try:
            return self._pool.get_nowait()
        except queue.Empty:
            return RunContext(self.memory_plan, self.boundary)

    def run(self, feeds: dict[str, np.ndarray], run_options=None, step_seconds: dict | None = None,
            outputs: dict[str, np.ndarray] | None = None, segment_seconds: dict | None = None) -> dict:
        """`outputs` optionally gives the arrays to write graph outputs into (shapes and dtypes as planned).
        `step_seconds` accumulates seconds per kernel step's node name (JIT'd CPU segments), `segment_seconds` the
        wall time per plan step index (a whole segment: CPU, device or ORT)."""
        if self.whole_ort is not None and outputs is None and segment_seconds is None:
            return dict(zip(self.graph_outputs, self.whole_ort.run_direct(feeds, self.graph_outputs, run_options)))
        context = self._context()
        try:
            values: dict = dict(feeds)
            values.update(context.views)
            fresh = {name: np.empty(self.tensors[name].shape, self.tensors[name].dtype)
                     for name in self.graph_outputs
                     if self.tensors[name].static and name not in values and name not in (outputs or {})}
            values.update(fresh)
            values.update(outputs or {})
            if self.waves is None:
                self._run_steps(self.steps, context, values, run_options, step_seconds, segment_seconds)
            else:
                self._run_waves(context, values, run_options, step_seconds, segment_seconds)
            return {name: values[name] for name in self.graph_outputs}
        finally:
            self._pool.put(context)

    def _run_steps(self, steps: list, context: RunContext, values: dict, run_options, step_seconds,
                   segment_seconds=None) -> None:
        for step in steps:
            if segment_seconds is None:
                self._run_step(step, context, values, run_options, step_seconds)
                continue
            start = time.perf_counter()
            self._run_step(step, context, values, run_options, step_seconds)
            position = self._positions[id(step)]
            segment_seconds[position] = segment_seconds.get(position, 0.0) + time.perf_counter() - start

    def _run_step(self, step, context: RunContext, values: dict, run_options, step_seconds) -> None:
        if isinstance(step, ClaimedStep):
            self._run_claimed(step, context, values, step_seconds)
        elif isinstance(step, DeviceStep):
            step.run(values)
        else:
            preallocated = {name: values[name] for name in step.outputs
                            if name in values and isinstance(values[name], np.ndarray)}
            step.segment.run(values, preallocated, run_options)

    def _run_waves(self, context: RunContext, values: dict, run_options, step_seconds, segment_seconds) -> None:
        """Each wave: other lanes' steps to their worker threads, the main lane's here, then wait for all (even
        after an error: the context goes back to the pool only when no worker still writes into its arena)."""
        for group in self.waves:
            futures = []
            try:
                for lane, steps in group:
                    if lane == MAIN_LANE or len(group) == 1:  # alone in its wave: the caller would only wait
                        #                                         for the worker, so it runs the steps itself
                        self._run_steps(steps, context, values, run_options, step_seconds, segment_seconds)
                    else:
                        futures.append(self._workers[lane].submit(self._run_steps, steps, context, values,
                                                                  run_options, None, segment_seconds))
            finally:
                errors = [future.exception() for future in futures]
            for error in errors:
                if error is not None:
                    raise error

    def _run_claimed(self, step: ClaimedStep, context: RunContext, values: dict, step_seconds) -> None:
        addresses = []
        for name in step.inputs:
            value = values[name]
            if not isinstance(value, np.ndarray):
                value = values[name] = value.numpy()
            addresses.append(value.__array_interface__["data"][0])
        addresses.extend(values[name].__array_interface__["data"][0] for name in step.outputs)
        arena = context.arena[context.offsets[step.arena_name]:]
        timings = None
        if step_seconds is not None:
            timings = np.zeros(step.program.program.num_steps, dtype=np.float64)
        externals = np.array(addresses, dtype=np.uint64)
        native = step.program.native
        try:
            if native is not None:  # the JIT'd segment: the same kernel calls with the arguments compiled in
                step.program.program.run_native(native.address, native.kernel_table(self.use_reference_kernels),
                                                arena, externals, self.num_threads, timings)
            else:
                step.program.program.run(arena, externals, self.num_threads, self.use_reference_kernels, timings)
        except KernelError as error:  # a fallible step (Gather's runtime indices) found bad data
            raise step.program.step_error(error) from None
        if timings is not None:
            for node, seconds in zip(step.program.step_nodes, timings):
                step_seconds[node] = step_seconds.get(node, 0.0) + float(seconds)
