"""GEMM schedule tasks of a model for `ortx tune`'s task scheduler: every gemm_f32 or conv2d_f32 step a session would
put a tuned generated kernel in place of (ortx.tune.gemm_steps) becomes a search Task over its schedule space.

1. Collect: per JIT'd segment, its qualifying steps (gemm_steps.gemm_steps) with their profiled ms; equal problems
   (the same signature: shape, strides, epilogue, thread count, ISA, workspace the lowering planned) are one
   task, weighted by how many steps share it, its prior the mean of their profiled times.
2. Strategy: gemm_space's evolutionary search (ridge cost model), seeded; the scheduler measures the task's
   default schedule first.
3. Measure: one GemmRunner per task (seeded operands, the fp32 reference check, rotating copies), built on first
   use; the prebuilt gemm_f32 is measured and recorded before the task's first candidate (the baseline a session
   needs a schedule to beat by gemm_space.MARGIN). A round's candidates are first compiled COMPILE_JOBS at a time
   into the JIT cache (nothing is timed meanwhile), so the runner's own build is a cache hit.
4. Validate (after the search): per task measured in this call, the prebuilt kernel, the default and the 3
   fastest recorded schedules once more, in one call (gemm_space.validate_fastest).
Sessions then read the result through gemm_space.recorded_schedule, as tuning "cached" always does.
Limits: a GEMM is timed alone on its own operands, not inside its segment (its neighbours' cache footprint is not
seen); steps gemm_steps skips (batched, prepacked A, a strided residual, under 1M multiply-adds) have no task.
"""
from __future__ import annotations

import concurrent.futures
import statistics

from ortx.codegen import gemm
from ortx.codegen.jit import JitError
from ortx.config import Options
from ortx.ep.segment_builder import CompiledProgram
from ortx.tune import gemm_space, gemm_steps
from ortx.tune.fingerprint import HardwareFingerprint
from ortx.tune.records import TuningDatabase
from ortx.tune.runner import MeasureResult, TimingSettings
from ortx.tune.search import EvolutionarySearch, Task
from ortx.tune.space import Schedule

VALIDATE_FASTEST = 3  # as gemm_space.tune_gemm's default
# Per task, step 4's share of the command's reserve: five timings of already-built kernels (~0.1 s each for the
# models' GEMMs with TimingSettings' runs), plus a margin for a loaded host.
VALIDATION_SECONDS = 1.0
COMPILE_JOBS = 2  # concurrent C compiles of a round's candidates (the machines this runs on have 2+ cores)


class GemmTasks:
    """Steps 1, 3 and 4 of the module docstring over the segments `add` was given."""

    def __init__(self, num_threads: int, options: Options, settings: TimingSettings, seed: int = 0):
        self.num_threads = num_threads
        self.options = options
        self.settings = settings
        self.seed = seed
        self.isa = gemm.runnable_isas()[-1]
        self._problems: dict[str, gemm.GemmProblem] = {}
        self._template: dict[str, Task] = {}
        self._times: dict[str, list[float]] = {}
        self.segments: dict[str, list[int]] = {}  # signature -> plan positions of the segments holding it
        self._runners: dict[str, gemm_space.GemmRunner] = {}
        self._measured: set[str] = set()

    def add(self, position: int, program: CompiledProgram, step_ms: list[float]) -> None:
        """Step 1 for one segment (at `position` in the plan) with its steps' profiled ms."""
        for index, (problem, workspace) in gemm_steps.gemm_steps(program).items():
            task = gemm_space.task_for(problem, self.num_threads, self.isa, workspace)
            self._problems.setdefault(task.signature, problem)
            self._template.setdefault(task.signature, task)
            self._times.setdefault(task.signature, []).append(step_ms[index])
            self.segments.setdefault(task.signature, []).append(position)

    @property
    def tasks(self) -> list[Task]:
        return [Task(signature, task.space, task.template, weight=float(len(self._times[signature])),
                     default=task.default, prior_ms=statistics.fmean(self._times[signature]))
                for signature, task in self._template.items()]

    def strategies(self, tasks: list[Task], database: TuningDatabase,
                   fingerprint: HardwareFingerprint) -> list[EvolutionarySearch]:
        """Guided searches whose cost models start from this machine's records of other GEMM shapes."""
        return [gemm_space.guided_search(task, database, fingerprint, seed=self.seed) for task in tasks]

    def owns(self, task: Task) -> bool:
        return task.signature in self._problems

    def _runner(self, task: Task, database: TuningDatabase, fingerprint: HardwareFingerprint) -> gemm_space.GemmRunner:
        runner = self._runners.get(task.signature)
        if runner is None:
            runner = gemm_space.GemmRunner(self._problems[task.signature], self.num_threads, self.options,
                                           self.settings, self.seed)
            gemm_space.measure_prebuilt(task, runner, database, fingerprint)
            self._runners[task.signature] = runner
        return runner

    def _compile_ahead(self, pairs: list[tuple[Task, Schedule]]) -> None:
        """Builds the candidates into the JIT cache in parallel; a failure is left for the runner to record."""
        def build(pair: tuple[Task, Schedule]) -> None:
            try:
                gemm.build_gemm(self._problems[pair[0].signature], gemm_space.to_gemm_schedule(pair[1]), self.options)
            except (gemm.GemmError, JitError):
                pass

        with concurrent.futures.ThreadPoolExecutor(COMPILE_JOBS) as pool:
            list(pool.map(build, pairs))

    def measure(self, pairs: list[tuple[Task, Schedule]], database: TuningDatabase,
                fingerprint: HardwareFingerprint) -> list[MeasureResult]:
        """Step 3: each task's candidates in one runner call; results in the order of `pairs`."""
        self._compile_ahead(pairs)
        results: list[MeasureResult | None] = [None] * len(pairs)
        groups: dict[str, list[int]] = {}
        for index, (task, _) in enumerate(pairs):
            groups.setdefault(task.signature, []).append(index)
        for signature, indices in groups.items():
            task = pairs[indices[0]][0]
            runner = self._runner(task, database, fingerprint)
            self._measured.add(signature)
            for index, result in zip(indices, runner([pairs[index][1] for index in indices]), strict=True):
                results[index] = result
        return results

    def validate(self, database: TuningDatabase, fingerprint: HardwareFingerprint) -> None:
        """Step 4 for every task measured through `measure`."""
        for signature in sorted(self._measured):
            task = self._template[signature]
            gemm_space.validate_fastest(task, task.default, VALIDATE_FASTEST, self._runners[signature], database,
                                        fingerprint)
