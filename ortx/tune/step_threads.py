"""The per-step thread count of a JIT'd segment: the first real tuning knob. Small steps often run faster on one
thread than paying the thread pool's wake-up and split.

1. Space: THREAD_COUNTS (literal) up to the session's count, plus that count. Each distinct step signature
   (kernel name, its ints, the session's count) is one search Task; steps with equal signatures share it.
2. SegmentStepRunner: build k of one call holds the k-th candidate of every task: the segment rendered with those
   counts (other steps on the session's count), JIT-compiled (cached by content), run once and checked bit for bit
   against the default schedule's outputs; then all builds are timed in one loop, run after run in turn, over
   rotating input copies with the runtime's step_seconds; a task's time is the median over its steps and runs. A
   build that fails to compile, differs from the default or times out fails every candidate in it.
3. tune_segment: Exhaustive search per task (the space has 2-4 values, all measured in one call, so every count
   of a step is timed under the same machine load), records stored per signature; then the
   chosen schedule (per step, the recorded count faster than the session's by more than MARGIN) is validated
   end to end against the default (interleaved medians) and that comparison is recorded under the segment's
   signature: sessions with tuning "cached" (`recorded_schedule`) apply a schedule only if it was validated faster
   by more than MARGIN.
4. For `ortx tune`'s task scheduler (ortx.tune.tune_model): `profile_steps` times each step of the default build,
   and `tasks(step_ms)` gives each task its weight (steps sharing the signature), default (the session's count)
   and prior (their mean ms); `tune_segment(search=False)` then only validates what the scheduler recorded.
Limits: a step is timed inside one build with its neighbours at their candidate counts, so a pool woken after a
one-thread neighbour is seen only by the end-to-end validation; segments with non-float inputs are not tuned
(random integers could be out-of-range indices).
"""
from __future__ import annotations

import dataclasses
import hashlib
import statistics
import time
from importlib import resources

import numpy as np

from ortx.codegen.jit import JitError, build_or_raise
from ortx.codegen.render import render
from ortx.config import Options
from ortx.ep.segment_builder import CompiledProgram
from ortx.memory.plan import ALIGNMENT
from ortx.tune.fingerprint import HardwareFingerprint, kernels_build
from ortx.tune.records import TuningDatabase, TuningRecord
from ortx.tune.runner import (MIN_TIMED_RUNS, MeasureResult, TimingSettings, bitwise_mismatch, rotated_copies,
                              timed_samples)
from ortx.tune.search import Exhaustive, Task, tune
from ortx.tune.space import Schedule, Space

THREAD_COUNTS = (1, 2, 4, 8, 16, 32, 64)
MARGIN = 0.02  # a step leaves the session's count, and a segment its default, only when faster by more than this
VALIDATION_RUNS_FACTOR = 3  # the end-to-end check decides for the whole segment: more runs than a candidate gets
TEMPLATE = "step-threads:" + hashlib.sha256(
    resources.files("ortx.codegen").joinpath("templates/segment.c").read_bytes()).hexdigest()[:16] \
    + f"|kernels={kernels_build()}"  # the steps call the prebuilt kernels: a rebuild measures again


def thread_space(num_threads: int) -> Space:
    counts = tuple(sorted(set(THREAD_COUNTS) | {num_threads}))
    return Space("step_threads", {"threads": counts}, valid=lambda schedule: schedule["threads"] <= num_threads)


def step_signature(kernel: str, ints, num_threads: int) -> str:
    return f"{kernel}|{','.join(str(v) for v in ints)}|session_threads={num_threads}"


def segment_signature(compiled: CompiledProgram, num_threads: int) -> str:
    digest = hashlib.sha256()
    for step in compiled.steps:
        digest.update(step_signature(step.kernel, step.ints, num_threads).encode() + b"\n")
    return f"segment:{digest.hexdigest()[:24]}|session_threads={num_threads}"


@dataclasses.dataclass(frozen=True)
class TensorShape:
    shape: tuple[int, ...]
    dtype: np.dtype


class NativeRun:
    """A segment's memory for measurement: an aligned arena and `rotations` copies of its inputs and outputs."""

    def __init__(self, compiled: CompiledProgram, inputs: list[TensorShape], outputs: list[TensorShape],
                 num_threads: int, rotations: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        arrays = [rng.uniform(-1.0, 1.0, spec.shape).astype(spec.dtype) for spec in inputs]
        self.compiled = compiled
        self.num_threads = num_threads
        self.input_copies = rotated_copies(arrays, rotations)
        self.output_copies = [[np.zeros(spec.shape, spec.dtype) for spec in outputs] for _ in self.input_copies]
        raw = np.empty(compiled.arena_bytes + 2 * ALIGNMENT, dtype=np.uint8)
        start = -raw.__array_interface__["data"][0] % ALIGNMENT
        self.arena = raw[start:start + compiled.arena_bytes + ALIGNMENT]
        self.externals = [np.array([a.__array_interface__["data"][0] for a in ins + outs], dtype=np.uint64)
                          for ins, outs in zip(self.input_copies, self.output_copies)]

    def run(self, native, copy: int, step_seconds: np.ndarray | None = None) -> list[np.ndarray]:
        self.compiled.program.run_native(native.address, native.kernel_table(False), self.arena,
                                         self.externals[copy], self.num_threads, step_seconds)
        return self.output_copies[copy]


class SegmentStepRunner:
    """Measures per-step thread candidates of one segment (module docstring, step 2); never raises for one."""

    def __init__(self, compiled: CompiledProgram, memory: NativeRun, options: Options, settings: TimingSettings):
        self.compiled = compiled
        self.memory = memory
        self.options = options
        self.settings = settings
        self.num_threads = memory.num_threads
        self.signatures = [step_signature(step.kernel, step.ints, self.num_threads) for step in compiled.steps]
        self.default = build_or_raise(render(compiled), options)
        self.reference = [np.array(output, copy=True) for output in memory.run(self.default, 0)]
        self.invocations = 0

    def tasks(self, step_ms: list[float] | None = None) -> list[Task]:
        """One Task per distinct step signature. With `step_ms` (profile_steps), each carries what the task
        scheduler needs: its weight (the steps sharing the signature), its default (the session's count) and its
        prior (those steps' mean time)."""
        space = thread_space(self.num_threads)
        if step_ms is None:
            return [Task(signature, space, TEMPLATE) for signature in dict.fromkeys(self.signatures)]
        times: dict[str, list[float]] = {}
        for signature, milliseconds in zip(self.signatures, step_ms, strict=True):
            times.setdefault(signature, []).append(milliseconds)
        default = Schedule.of({"threads": self.num_threads})
        return [Task(signature, space, TEMPLATE, weight=len(values), default=default,
                     prior_ms=statistics.fmean(values)) for signature, values in times.items()]

    def profile_steps(self) -> list[float]:
        """Per step, its median ms in the default build over the settings' timed runs (after warm-up)."""
        seconds = []

        def run_once(copy: int) -> None:
            timings = np.zeros(self.compiled.program.num_steps, dtype=np.float64)
            self.memory.run(self.default, copy, timings)
            seconds.append(timings)

        timed_samples(run_once, self.settings, time.perf_counter() + self.settings.timeout_seconds)
        timed = seconds[self.settings.warmup_runs:] or seconds
        return [1e3 * float(value) for value in np.median(np.stack(timed), axis=0)]

    def __call__(self, pairs: list[tuple[Task, Schedule]]) -> list[MeasureResult]:
        """Build k holds every task's k-th candidate; all builds are timed in one interleaved loop, so the counts a
        step is compared at see the same machine load."""
        self.invocations += 1
        builds: list[dict[str, int]] = []
        placement = []
        for task, schedule in pairs:
            index = sum(1 for build in builds if task.signature in build)
            if index == len(builds):
                builds.append({})
            builds[index][task.signature] = schedule["threads"]
            placement.append(index)
        outcomes = self._measure([tuple(None if counts.get(signature, self.num_threads) == self.num_threads
                                        else counts[signature] for signature in self.signatures)
                                  for counts in builds])
        results = []
        for (task, schedule), index in zip(pairs, placement):
            status, detail, timings = outcomes[index]
            if status != "ok":
                size = len(builds[index])
                results.append(MeasureResult(schedule, status, None, f"{detail} (build of {size} candidates)"))
                continue
            samples = [1e3 * float(run[step]) for run in timings
                       for step, signature in enumerate(self.signatures) if signature == task.signature]
            results.append(MeasureResult(schedule, "ok", statistics.median(samples), runs=len(timings)))
        return results

    def _checked(self, step_threads) -> tuple[str, str, object]:
        """(status, detail, native): built and checked against the default schedule's outputs, or why not."""
        try:
            native = build_or_raise(render(self.compiled, step_threads), self.options)
        except JitError as error:
            return "compile_error", str(error), None
        except Exception as error:  # a bad candidate is data
            return "error", f"build: {type(error).__name__}: {error}", None
        try:
            start = time.perf_counter()
            problem = bitwise_mismatch(self.memory.run(native, 0), self.reference)
        except Exception as error:
            return "error", f"run: {type(error).__name__}: {error}", None
        if problem is not None:
            return "wrong_result", f"differs from the default schedule: {problem}", None
        if time.perf_counter() - start > self.settings.timeout_seconds:
            return "timeout", f"first run took over {self.settings.timeout_seconds} s", None
        return "ok", "", native

    def _measure(self, schedules: list[tuple]) -> list[tuple[str, str, list[np.ndarray]]]:
        checked = [self._checked(step_threads) for step_threads in schedules]
        natives = [(index, native) for index, (status, _, native) in enumerate(checked) if status == "ok"]
        timings: dict[int, list[np.ndarray]] = {index: [] for index, _ in natives}

        def run_once(copy: int) -> None:
            for index, native in natives:
                seconds = np.zeros(self.compiled.program.num_steps, dtype=np.float64)
                self.memory.run(native, copy, seconds)
                timings[index].append(seconds)

        try:
            deadline = time.perf_counter() + self.settings.timeout_seconds * max(len(natives), 1)
            timed = len(timed_samples(run_once, self.settings, deadline))
        except Exception as error:
            return [(status, detail, []) if status != "ok" else ("error", f"run: {type(error).__name__}: {error}", [])
                    for status, detail, _ in checked]
        outcomes = []
        for index, (status, detail, _) in enumerate(checked):
            if status != "ok":
                outcomes.append((status, detail, []))
            elif timed < MIN_TIMED_RUNS:
                outcomes.append(("timeout", f"{timed} timed runs in {self.settings.timeout_seconds} s per build", []))
            else:
                outcomes.append(("ok", "", timings[index][-timed:]))
        return outcomes


@dataclasses.dataclass(frozen=True)
class SegmentTuning:
    step_threads: tuple[int | None, ...] | None  # applied schedule (None: the default)
    default_ms: float | None  # end-to-end validation medians (None when no schedule was worth validating)
    tuned_ms: float | None
    tasks: int
    measured: int  # new measurements (one build measures one candidate of many tasks)
    recorded: int  # read back, not measured again
    builds: int  # runner invocations
    seconds: float


def _chosen_from_records(signatures: list[str], num_threads: int, database: TuningDatabase,
                         fingerprint: HardwareFingerprint) -> tuple[int | None, ...] | None:
    best: dict[str, int | None] = {}
    for signature in dict.fromkeys(signatures):
        medians: dict[int, float] = {}
        for record in database.records(signature, fingerprint.key, TEMPLATE):
            if record.status == "ok":
                count = record.schedule.get("threads")
                medians[count] = min(medians.get(count, float("inf")), record.median_ms)
        default = medians.get(num_threads)
        fastest = min(medians, key=medians.__getitem__, default=None)
        best[signature] = (fastest if default is not None and fastest != num_threads
                           and medians[fastest] < default * (1 - MARGIN) else None)
    chosen = tuple(best[signature] for signature in signatures)
    return None if all(count is None for count in chosen) else chosen


def _validated(database: TuningDatabase, signature: str, fingerprint: HardwareFingerprint,
               chosen: tuple) -> tuple[float, float] | None:
    """(default ms, chosen ms) from the segment's end-to-end validation records, if both exist."""
    medians = {}
    for record in database.records(signature, fingerprint.key, TEMPLATE):
        if record.status == "ok":
            key = tuple(record.schedule.get("step_threads") or ()) or None
            medians[key] = min(medians.get(key, float("inf")), record.median_ms)
    if None in medians and chosen in medians:
        return medians[None], medians[chosen]
    return None


def recorded_validation(compiled: CompiledProgram, num_threads: int, database: TuningDatabase,
                        fingerprint: HardwareFingerprint) -> tuple[tuple | None, float | None, float | None]:
    """(the per-step schedule the step records choose, or None; its end-to-end validation: default ms, tuned ms,
    None when not validated). recorded_schedule applies it only when tuned < default x (1 - MARGIN)."""
    signatures = [step_signature(step.kernel, step.ints, num_threads) for step in compiled.steps]
    chosen = _chosen_from_records(signatures, num_threads, database, fingerprint)
    if chosen is None:
        return None, None, None
    validated = _validated(database, segment_signature(compiled, num_threads), fingerprint, chosen)
    return (chosen, *validated) if validated is not None else (chosen, None, None)


def recorded_schedule(compiled: CompiledProgram, num_threads: int, database: TuningDatabase,
                      fingerprint: HardwareFingerprint) -> tuple[int | None, ...] | None:
    """The per-step schedule the records say to apply (module docstring, step 3), or None for the default."""
    chosen, default_ms, tuned_ms = recorded_validation(compiled, num_threads, database, fingerprint)
    return chosen if tuned_ms is not None and tuned_ms < default_ms * (1 - MARGIN) else None


def _interleaved_medians(memory: NativeRun, natives: list, settings: TimingSettings) -> list[float]:
    for native in natives:
        for copy in range(settings.warmup_runs):
            memory.run(native, copy % len(memory.externals))
    times: list[list[float]] = [[] for _ in natives]
    for index in range(VALIDATION_RUNS_FACTOR * settings.timed_runs):
        for native, samples in zip(natives, times):
            start = time.perf_counter()
            memory.run(native, (index + 1) % len(memory.externals))
            samples.append(time.perf_counter() - start)
    return [1e3 * statistics.median(samples) for samples in times]


def tune_segment(compiled: CompiledProgram, inputs: list[TensorShape], outputs: list[TensorShape], *,
                 num_threads: int, options: Options, database: TuningDatabase, fingerprint: HardwareFingerprint,
                 settings: TimingSettings = TimingSettings(), source: str = "step_threads",
                 search: bool = True) -> SegmentTuning:
    """Searches every step's thread count (already-recorded ones are not measured again), validates the chosen
    schedule against the default end to end, records both, and returns what sessions will apply. `search` False:
    measures no step, validates what the records choose (ortx tune's task scheduler searched them under its
    budget). Raises JitError when even the default schedule cannot be built (then there is nothing to tune)."""
    start = time.perf_counter()
    memory = NativeRun(compiled, inputs, outputs, num_threads, settings.rotations)
    runner = SegmentStepRunner(compiled, memory, options, settings)
    tasks = runner.tasks()
    space_size = len(tasks[0].space.choices["threads"]) if tasks else 0
    results = tune(tasks, [Exhaustive(task.space) for task in tasks], runner, database, fingerprint,
                   trials=space_size if search else 0, batch=space_size, source=source)
    chosen = _chosen_from_records(runner.signatures, num_threads, database, fingerprint)
    default_ms = tuned_ms = None
    if chosen is not None:
        signature = segment_signature(compiled, num_threads)
        validated = _validated(database, signature, fingerprint, chosen)
        if validated is None:
            tuned = build_or_raise(render(compiled, chosen), options)
            if bitwise_mismatch(memory.run(tuned, 0), runner.reference) is not None:
                database.add(TuningRecord(signature, fingerprint.key, TEMPLATE, {"step_threads": list(chosen)},
                                          "wrong_result", None, "differs from the default schedule", source=source))
                chosen = None
            else:
                validated = tuple(_interleaved_medians(memory, [runner.default, tuned], settings))
                for schedule, median in ((None, validated[0]), (chosen, validated[1])):
                    database.add(TuningRecord(signature, fingerprint.key, TEMPLATE,
                                              {"step_threads": list(schedule) if schedule else None}, "ok", median,
                                              source=f"{source}:validation"))
        if validated is not None:
            default_ms, tuned_ms = validated
            chosen = chosen if tuned_ms < default_ms * (1 - MARGIN) else None
    return SegmentTuning(chosen, default_ms, tuned_ms, len(tasks), sum(r.measured for r in results),
                         sum(r.recorded for r in results), runner.invocations, time.perf_counter() - start)
