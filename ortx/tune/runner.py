"""Measures schedule candidates: build, check against the reference, then time. A bad candidate is a result.

For each candidate (FunctionRunner; ortx.tune.step_threads has the segment runner built on the same pieces):
1. Build it. CompileError -> status "compile_error"; any other exception -> "error" (the message is the detail).
2. Run it once on the first copy of the inputs and compare with the reference outputs (the default schedule's, or
   the kernels' `_ref` through `_kernels.call(..., use_ref=True)`): a mismatch is "wrong_result" and is never
   timed. A first run longer than the timeout is "timeout".
3. Time it: `warmup_runs` uncounted, then up to `timed_runs`, cycling over `rotations` copies of the inputs (each
   run reads buffers the previous runs did not, so it measures memory traffic and not only a warm cache); the
   median is the result. Fewer than MIN_TIMED_RUNS inside the timeout is "timeout".
Limit: the timeout is checked between runs; one run that never returns is not interrupted (it runs in-process).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from ortx.tune.space import Schedule

MIN_TIMED_RUNS = 3


class CompileError(Exception):
    """A candidate that could not be built; the message is the compiler's."""


@dataclasses.dataclass(frozen=True)
class MeasureResult:
    schedule: Schedule
    status: str  # one of ortx.tune.records.STATUSES
    median_ms: float | None  # only for "ok"
    detail: str = ""
    runs: int = 0  # timed runs behind the median

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclasses.dataclass(frozen=True)
class TimingSettings:
    warmup_runs: int = 2
    timed_runs: int = 10
    rotations: int = 4  # copies of the inputs, cycled
    timeout_seconds: float = 10.0
    # "median" of the timed runs, or "min": on a shared host other processes only ever slow a run down, so the
    # fastest run is the steadier estimate of what the code costs (benchmarks/search_quality.py uses it).
    statistic: str = "median"

    def __post_init__(self):
        if self.statistic not in ("median", "min"):
            raise ValueError(f"TimingSettings.statistic {self.statistic!r} is not 'median' or 'min'")


def rotated_copies(arrays: Sequence[np.ndarray], rotations: int) -> list[list[np.ndarray]]:
    """`rotations` independent copies of `arrays` (the first is the arrays themselves)."""
    copies = [list(arrays)]
    for _ in range(max(rotations, 1) - 1):
        copies.append([np.array(array, copy=True) for array in arrays])
    return copies


def bitwise_mismatch(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> str | None:
    """None when every output has the reference's dtype, shape and bytes; else what differs first."""
    if len(outputs) != len(reference):
        return f"{len(outputs)} outputs, the reference has {len(reference)}"
    for index, (output, expected) in enumerate(zip(outputs, reference)):
        output, expected = np.asarray(output), np.asarray(expected)
        if output.dtype != expected.dtype or output.shape != expected.shape:
            return f"output {index}: {output.dtype}{list(output.shape)} vs {expected.dtype}{list(expected.shape)}"
        if output.tobytes() != expected.tobytes():
            differing = int(np.count_nonzero(output != expected)) if output.dtype.kind in "fiub" else -1
            largest = (float(np.nanmax(np.abs(output.astype(np.float64) - expected.astype(np.float64))))
                       if output.dtype.kind in "fiu" else float("nan"))
            return f"output {index}: {differing} elements differ from the reference, max abs diff {largest:.3g}"
    return None


def timed_samples(run_once: Callable[[int], object], settings: TimingSettings, deadline: float) -> list:
    """Runs `run_once(copy_index)` warmup_runs + timed_runs times, copies cycled from 1, stopping at `deadline`
    (time.perf_counter()); returns what the timed calls returned."""
    samples = []
    for index in range(settings.warmup_runs + settings.timed_runs):
        sample = run_once((index + 1) % max(settings.rotations, 1))
        if index >= settings.warmup_runs:
            samples.append(sample)
        if time.perf_counter() > deadline:
            break
    return samples


class FunctionRunner:
    """Measures candidates whose build gives a Python callable: `build(schedule)` -> `run(inputs) -> outputs`.

    `reference`: the outputs a correct candidate produces on `inputs`; `compare` says how they may differ (default:
    not at all). `invocations` counts calls, so tests can prove a search measured nothing."""

    def __init__(self, build: Callable[[Schedule], Callable], inputs: Sequence[np.ndarray],
                 reference: Sequence[np.ndarray], settings: TimingSettings = TimingSettings(),
                 compare: Callable = bitwise_mismatch):
        self.build = build
        self.copies = rotated_copies(inputs, settings.rotations)
        self.reference = list(reference)
        self.settings = settings
        self.compare = compare
        self.invocations = 0

    def __call__(self, schedules: Sequence[Schedule]) -> list[MeasureResult]:
        self.invocations += 1
        return [self.measure(schedule) for schedule in schedules]

    def measure(self, schedule: Schedule) -> MeasureResult:
        # Case 1: build.
        try:
            run = self.build(schedule)
        except CompileError as error:
            return MeasureResult(schedule, "compile_error", None, str(error))
        except Exception as error:  # a bad candidate is data: report it, never raise
            return MeasureResult(schedule, "error", None, f"build: {type(error).__name__}: {error}")
        try:
            # Case 2: check before timing.
            start = time.perf_counter()
            outputs = run(self.copies[0])
            if time.perf_counter() - start > self.settings.timeout_seconds:
                return MeasureResult(schedule, "timeout", None,
                                     f"first run took over {self.settings.timeout_seconds} s")
            problem = self.compare(outputs, self.reference)
            if problem is not None:
                return MeasureResult(schedule, "wrong_result", None, problem)

            # Case 3: time.
            def run_once(copy: int) -> float:
                begin = time.perf_counter()
                run(self.copies[copy])
                return time.perf_counter() - begin

            samples = timed_samples(run_once, self.settings, start + self.settings.timeout_seconds)
        except Exception as error:
            return MeasureResult(schedule, "error", None, f"run: {type(error).__name__}: {error}")
        if len(samples) < MIN_TIMED_RUNS:
            return MeasureResult(schedule, "timeout", None, f"{len(samples)} timed runs in "
                                 f"{self.settings.timeout_seconds} s (needs {MIN_TIMED_RUNS})")
        summary = min(samples) if self.settings.statistic == "min" else statistics.median(samples)
        return MeasureResult(schedule, "ok", 1e3 * summary, runs=len(samples))
