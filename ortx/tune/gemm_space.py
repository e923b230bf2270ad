"""Tuning generated GEMMs (ortx.codegen.gemm): the schedule space per ISA as literal data, and its search.

1. Space: CHOICES[isa] lists every value each choice may take; the predicate keeps schedules whose register tile
   fits the ISA's vector registers (accumulators + B vectors + one broadcast) and whose task grid has at least one
   tile per task. Block sizes are counted in tiles (mc_tiles x mr rows, nc_tiles x nr columns), so every
   combination is a valid blocking.
2. Task: one per (problem, thread count, ISA); the records key is the problem's signature, `|threads=..|isa=..`,
   and the template hash of templates/gemm*.c.
3. Runner: ortx.tune.runner.FunctionRunner on seeded random operands: each candidate is rendered and built
   (JitError -> "compile_error"), run once and compared with numpy's float64 product (`close_to_reference`, the
   fp32 tolerance of tests/tolerances.py: kernels with another KC sum in another order, so not bitwise), then
   timed over rotating operand copies.
4. tune_gemm: the prebuilt gemm_f32 on the same operands is measured once as the baseline (its own records
   template, PREBUILT_TEMPLATE), then the default schedule (so the best is never worse than it), then the chosen
   strategy (evolutionary by default: guided_search, boosted trees with transfer) proposes the rest; every
   result is a record.
   Then the baseline, the default and the `validate` fastest schedules are measured once more, in one call,
   and recorded too: a schedule's time is the fastest of its records, because a shared host's noise only ever
   slows a run down, and one unlucky measurement should not decide between close candidates.
5. recorded_schedule answers from this machine's records only, and only with a schedule faster than the
   prebuilt kernel's record by more than MARGIN (what a session may put in gemm_f32's place). When step 4's
   validation records exist, only they decide (the prebuilt kernel and the candidates timed in the same calls):
   the fastest of a schedule's many search records is biased low on a noisy host (the winner's curse; measured
   on a host at load 7: 96x25600x12 searched at 1.00 ms against the prebuilt's 4.9 ms, validated at 5.9 against
   5.4), and a session must not swap in a kernel that only looked faster.
The guided search (guided_search) learns from ortx.tune.gemm_features' hardware-aware features and starts from
this machine's records of other GEMM shapes (transfer). Limit: timings are as noisy as the host.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from ortx import _kernels
from ortx.codegen import gemm
from ortx.codegen.jit import JitError
from ortx.config import Options
from ortx.tune import gemm_features
from ortx.tune.conv_problems import PrebuiltConv, conv_operands
from ortx.tune.fingerprint import HardwareFingerprint, kernels_build
from ortx.tune.records import TuningDatabase, TuningRecord
from ortx.tune.runner import CompileError, FunctionRunner, MeasureResult, TimingSettings
from ortx.tune.search import EvolutionarySearch, Exhaustive, RandomSearch, Task, TaskResult, tune
from ortx.tune.space import Schedule, Space

# The space per ISA, as data. mc_tiles/nc_tiles count register tiles per A/B block (mc = mc_tiles * mr).
_COMMON = {
    "kc": (128, 192, 256, 384, 512),
    "mc_tiles": (8, 16, 24, 48, 96),
    "nc_tiles": (4, 8, 16, 32, 64),
    "loop_order": ("jr_ir", "ir_jr"),
    "unroll": (1, 2, 4, 8),
    "prefetch": (0, 4, 8, 16),
    "pack_a": (False, True),
    "pack_b": (True, False),
    "tasks_m": (1, 2, 4, 8),
    "tasks_n": (1, 2, 4, 8),
}
CHOICES = {
    "avx512": {"mr": (4, 6, 8, 10, 12, 14), "nr": (16, 32, 48, 64), **_COMMON},
    "avx2": {"mr": (2, 3, 4, 6, 8, 12), "nr": (8, 16, 24, 32), **_COMMON},
    "portable": {"mr": (2, 4, 6, 8), "nr": (4, 8, 12, 16), **_COMMON},
    "neon": {"mr": (4, 6, 8, 12), "nr": (8, 12, 16, 24), **_COMMON},
}
# The untuned generated schedule per ISA: BLIS-like tiles, A read in place, 2 column tasks per thread.
DEFAULTS = {
    "avx512": dict(mr=6, nr=32, kc=256, mc_tiles=24, nc_tiles=32),
    "avx2": dict(mr=6, nr=16, kc=256, mc_tiles=24, nc_tiles=64),
    "portable": dict(mr=4, nr=8, kc=256, mc_tiles=24, nc_tiles=64),
    "neon": dict(mr=8, nr=12, kc=256, mc_tiles=24, nc_tiles=64),
}
# fp32 comparison with the reference: tests/tolerances.py's float32 entry (1e-4 relative to max|reference| plus
# 1e-5 absolute), because a kernel with another KC or tile adds the same products in another order.
RTOL, ATOL = 1e-4, 1e-5
MARGIN = 0.02  # a generated kernel replaces the prebuilt one only when faster by more than this (as step_threads)
PREBUILT_TEMPLATE = f"gemm_f32:prebuilt|kernels={kernels_build()}"  # the prebuilt kernel's time, schedule PREBUILT
PREBUILT = Schedule.of({"kernel": "gemm_f32"})


def to_gemm_schedule(schedule: Schedule) -> gemm.GemmSchedule:
    values = schedule.as_dict()
    return gemm.GemmSchedule(isa=values["isa"], mr=values["mr"], nr=values["nr"], kc=values["kc"],
                             mc=values["mc_tiles"] * values["mr"], nc=values["nc_tiles"] * values["nr"],
                             loop_order=values["loop_order"], unroll=values["unroll"], prefetch=values["prefetch"],
                             pack_a=values["pack_a"], pack_b=values["pack_b"], tasks_m=values["tasks_m"],
                             tasks_n=values["tasks_n"])


def _fits(problem: gemm.GemmProblem, schedule: Schedule, max_workspace_floats: int | None) -> bool:
    values = schedule.as_dict()
    isa, mr, nr = values["isa"], values["mr"], values["nr"]
    vectors = nr // gemm.VECTOR_WIDTH[isa]
    if mr * vectors + vectors + 1 > gemm.VECTOR_REGISTERS[isa]:
        return False
    if not values["pack_b"] and problem.b_strides[1] != 1 and not problem.b_packed:
        return False
    if problem.conv and not values["pack_a"] and (mr, values["kc"]) != (gemm.PREPACKED_MR, gemm.PREPACKED_KC):
        return False  # the conv's packed weights are read in place only in their own panels
    if max_workspace_floats is not None:
        if gemm.workspace_floats(problem, to_gemm_schedule(schedule)) > max_workspace_floats:
            return False
    row_tiles, column_tiles = -(-problem.m // mr), -(-problem.n // nr)
    return values["tasks_m"] <= row_tiles and values["tasks_n"] <= column_tiles


def gemm_space(problem: gemm.GemmProblem, isa: str, max_workspace_floats: int | None = None, *,
               num_threads: int = 1) -> Space:
    """CHOICES[isa] for `problem`: a prepacked B fixes kc and pack_b and keeps the tile widths its panels allow (a
    conv's B, packed through its source into the same panels, keeps those widths and pack_b);
    `max_workspace_floats` drops schedules needing more workspace (a segment step's buffer is already planned).
    Its cost-model features are gemm_features' (problem, `num_threads` and this machine's caches); work in GFLOP."""
    if isa not in CHOICES:
        raise gemm.GemmError(f"no GEMM schedule space for isa {isa!r} (have {sorted(CHOICES)})")
    choices = {"isa": (isa,), **CHOICES[isa]}
    if problem.b_packed:
        choices.update(kc=(gemm.PREPACKED_KC,), pack_b=(False,),
                       nr=tuple(nr for nr in choices["nr"] if nr % gemm.PREPACKED_NR == 0))
    if problem.conv:
        choices.update(pack_b=(True,), nr=tuple(nr for nr in choices["nr"] if nr % gemm.PREPACKED_NR == 0))
    return Space(f"gemm_{isa}", choices, valid=lambda schedule: _fits(problem, schedule, max_workspace_floats),
                 featurize=gemm_features.featurizer(problem, num_threads), work=problem.flops / 1e9)


def default_schedule(problem: gemm.GemmProblem, isa: str, num_threads: int,
                     max_workspace_floats: int | None = None) -> Schedule:
    """DEFAULTS[isa] with A read in place, B packed unless it is row-major and only one row panel reads it, and
    the larger of M and N split into 2 tasks per thread (fewer when the problem has fewer tiles); in the space.
    A conv: the prebuilt conv's tile where it fits (6 rows, 16-column panels, KC 256, its weights in place), with
    B blocks narrowed until they fit `max_workspace_floats` (a direct-path conv2d_f32 planned no B blocks)."""
    values = {"isa": isa, **DEFAULTS[isa], "loop_order": "jr_ir", "unroll": 4, "prefetch": 0, "pack_a": False}
    values["pack_b"] = not (problem.m <= values["mr"] and problem.b_strides[1] == 1)
    if problem.b_packed:  # read where the lowering packed it, at its depth, in whole panels
        values.update(kc=gemm.PREPACKED_KC, pack_b=False, nr=max(values["nr"], gemm.PREPACKED_NR))
        vectors = values["nr"] // gemm.VECTOR_WIDTH[isa]  # a wider tile has room for fewer rows
        values["mr"] = max(mr for mr in CHOICES[isa]["mr"]
                           if mr <= values["mr"] and mr * vectors + vectors + 1 <= gemm.VECTOR_REGISTERS[isa])
    if problem.conv:
        values.update(kc=gemm.PREPACKED_KC, pack_b=True, nr=max(values["nr"], gemm.PREPACKED_NR))
        vectors = values["nr"] // gemm.VECTOR_WIDTH[isa]
        values["mr"] = max(mr for mr in CHOICES[isa]["mr"]
                           if mr <= gemm.PREPACKED_MR and mr * vectors + vectors + 1 <= gemm.VECTOR_REGISTERS[isa])
        values["pack_a"] = values["mr"] != gemm.PREPACKED_MR
    wanted = min(2 * max(num_threads, 1), 8)
    row_tiles, column_tiles = -(-problem.m // values["mr"]), -(-problem.n // values["nr"])
    split_rows = row_tiles > column_tiles
    tiles = row_tiles if split_rows else column_tiles
    tasks = max(count for count in _COMMON["tasks_m"] if count <= max(min(wanted, tiles), 1))
    values["tasks_m"], values["tasks_n"] = (tasks, 1) if split_rows else (1, tasks)
    if problem.conv and max_workspace_floats is not None:
        for nc_tiles in sorted((count for count in _COMMON["nc_tiles"] if count <= values["nc_tiles"]), reverse=True):
            values["nc_tiles"] = nc_tiles
            if gemm.workspace_floats(problem, to_gemm_schedule(Schedule.of(values))) <= max_workspace_floats:
                break
    return Schedule.of(values)


def task_for(problem: gemm.GemmProblem, num_threads: int, isa: str, max_workspace_floats: int | None = None) -> Task:
    return Task(f"{problem.signature}|threads={num_threads}|isa={isa}",
                gemm_space(problem, isa, max_workspace_floats, num_threads=num_threads), gemm.template_hash(),
                default=default_schedule(problem, isa, num_threads, max_workspace_floats))


def close_to_reference(outputs, reference) -> str | None:
    """None when every output is within RTOL/ATOL of the float64 reference (scaled by its largest magnitude)."""
    for index, (output, expected) in enumerate(zip(outputs, reference, strict=True)):
        output, expected = np.asarray(output, np.float64), np.asarray(expected, np.float64)
        if output.shape != expected.shape:
            return f"output {index}: shape {output.shape}, reference {expected.shape}"
        allowed = ATOL + RTOL * float(np.max(np.abs(expected))) + RTOL * np.abs(expected)
        error = np.abs(output - expected)
        if not np.all(error <= allowed):  # NaN fails too
            return f"output {index}: max abs error {float(np.nanmax(error)):.3g} above the fp32 tolerance"
    return None


def operands(problem: gemm.GemmProblem, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Seeded random non-zero operands (a, b[, bias][, residual]) as flat buffers (a prepacked B packed by
    gemm_pack_f32) and the float64 reference result; a conv's are conv_problems.conv_operands'."""
    if problem.conv:
        return conv_operands(problem, seed)
    def element_indexes(rows: int, cols: int, strides: tuple[int, int]) -> np.ndarray:
        return np.arange(rows)[:, None] * strides[0] + np.arange(cols)[None, :] * strides[1]

    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.0, 1.0, problem.extent("a")).astype(np.float32)
    dense_a = a[element_indexes(problem.m, problem.k, problem.a_strides)]
    if problem.b_packed:
        dense_b = rng.uniform(-1.0, 1.0, (problem.k, problem.n)).astype(np.float32)
        b = np.empty(problem.extent("b"), np.float32)
        _kernels.call("gemm_pack_f32", [problem.n, problem.k, 1, problem.n, 1], [1.0], [dense_b, b])
    else:
        b = rng.uniform(-1.0, 1.0, problem.extent("b")).astype(np.float32)
        dense_b = b[element_indexes(problem.k, problem.n, problem.b_strides)]
    arrays = [a, b]
    value = problem.alpha * (dense_a.astype(np.float64) @ dense_b.astype(np.float64))
    if problem.bias:
        bias = rng.uniform(-1.0, 1.0, problem.m if problem.bias == 1 else problem.n).astype(np.float32)
        arrays.append(bias)
        value = value + (bias[:, None] if problem.bias == 1 else bias[None, :])
    if problem.residual_row_stride:
        residual = rng.uniform(-1.0, 1.0, problem.extent("residual")).astype(np.float32)
        arrays.append(residual)
        value = value + problem.residual_scale * residual[element_indexes(problem.m, problem.n,
                                                                          (problem.residual_row_stride, 1))]
    return arrays, gemm.apply_activation(problem, value)


def _run_kernel(kernel, problem: gemm.GemmProblem, num_threads: int):
    output = np.zeros((problem.m, problem.c_row_stride), np.float32)

    def run(inputs):
        rest = iter(inputs[2:])  # operands() order: bias when the problem has one, then the residual
        bias = next(rest) if problem.bias else None
        residual = next(rest) if problem.residual_row_stride else None
        kernel(inputs[0], inputs[1], output, bias, residual, num_threads=num_threads)
        return [output[:, : problem.n]]
    return run


class GemmRunner(FunctionRunner):
    """FunctionRunner over one problem: candidates are schedules of its space, outputs C's [m, n] view."""

    def __init__(self, problem: gemm.GemmProblem, num_threads: int, options: Options,
                 settings: TimingSettings = TimingSettings(), seed: int = 0):
        inputs, reference = operands(problem, seed)
        self.problem = problem
        self.num_threads = num_threads
        self.options = options
        super().__init__(self._build, inputs, [reference], settings, compare=close_to_reference)

    def _build(self, schedule: Schedule):
        if schedule == PREBUILT:
            prebuilt = PrebuiltConv(self.problem) if self.problem.conv else PrebuiltGemm(self.problem)
            return _run_kernel(prebuilt, self.problem, self.num_threads)
        try:
            kernel = gemm.build_gemm(self.problem, to_gemm_schedule(schedule), self.options)
        except JitError as error:
            raise CompileError(str(error)) from error
        return _run_kernel(kernel, self.problem, self.num_threads)


class PrebuiltGemm:
    """The prebuilt gemm_f32 (kernels/gemm.c) on a problem, called like a GemmKernel: the baseline."""

    def __init__(self, problem: gemm.GemmProblem):
        if problem.c_row_stride != problem.n:
            raise gemm.GemmError("the prebuilt gemm_f32 writes C rows of exactly n floats")
        self.problem = problem
        self._sizes = {}

    def __call__(self, a, b, c, bias=None, residual=None, *, num_threads: int = 1):
        problem = self.problem
        if num_threads not in self._sizes:
            sizes = np.zeros(3, np.int64)
            _kernels.call("gemm_sizes_f32", [problem.m, problem.n, problem.k, num_threads, 0, int(problem.b_packed)], [],
                          [sizes])
            self._sizes[num_threads] = np.empty(int(sizes[0]) // 4 + 1, np.float32)
        ints = [problem.m, problem.n, problem.k, 1, 0, *problem.a_strides, int(problem.b_packed), *problem.b_strides,
                problem.bias, int(problem.residual_row_stride > 0), problem.residual_row_stride, 1, 0,
                problem.activation, num_threads, 0, 0]
        _kernels.call("gemm_f32", ints, [problem.alpha, problem.residual_scale, *problem.params],
                      [a, b, c, self._sizes[num_threads], bias if bias is not None else c,
                       residual if residual is not None else c], num_threads)
        return c


class _DefaultFirst:
    """Proposes `first` (unless measured already), then whatever `strategy` proposes; shows it every result."""

    def __init__(self, first: Schedule, strategy):
        self.first = first
        self.strategy = strategy

    def propose(self, count: int, measured: set[Schedule]) -> list[Schedule]:
        head = [] if self.first in measured else [self.first]
        if count <= len(head):
            return head[:count]
        return head + self.strategy.propose(count - len(head), measured | set(head))

    def observe(self, result: MeasureResult) -> None:
        self.strategy.observe(result)


STRATEGIES = {"evolutionary": EvolutionarySearch, "random": RandomSearch, "exhaustive": Exhaustive}


def guided_search(task: Task, database: TuningDatabase, fingerprint: HardwareFingerprint, *,
                  seed: int = 0) -> EvolutionarySearch:
    """The cost-model-guided search for a task_for task, its model seeded with this machine's records of other
    GEMM shapes (gemm_features.transfer_data) when there are enough."""
    return EvolutionarySearch(task.space, seed, transfer=gemm_features.transfer_data(database, task, fingerprint))


@dataclasses.dataclass(frozen=True)
class GemmTuning:
    task: Task
    best: MeasureResult | None  # the schedule with the fastest record (recorded or new, validation included)
    default: MeasureResult | None  # the default schedule's fastest record
    prebuilt: MeasureResult | None  # the prebuilt gemm_f32's fastest record
    result: TaskResult
    seconds: float


def _fastest(database: TuningDatabase, signature: str, fingerprint: HardwareFingerprint, template: str,
             schedule: Schedule) -> MeasureResult | None:
    times = [r.median_ms for r in database.records(signature, fingerprint.key, template)
             if r.status == "ok" and Schedule.of(r.schedule) == schedule]
    return MeasureResult(schedule, "ok", min(times)) if times else None


def tune_gemm(problem: gemm.GemmProblem, *, num_threads: int, database: TuningDatabase,
              fingerprint: HardwareFingerprint, options: Options, trials: int, isa: str | None = None,
              strategy: str = "evolutionary", seed: int = 0, settings: TimingSettings = TimingSettings(),
              budget_seconds: float | None = None, max_workspace_floats: int | None = None,
              validate: int = 3) -> GemmTuning:
    """Measures the prebuilt baseline (once) and up to `trials` schedules (the default first; recorded ones are not
    measured again), then validates (module docstring, step 4) when this call measured anything."""
    start = time.perf_counter()
    isa = isa or gemm.runnable_isas()[-1]
    task = task_for(problem, num_threads, isa, max_workspace_floats)
    if strategy not in STRATEGIES:
        raise ValueError(f"tune_gemm: strategy {strategy!r} is not one of {sorted(STRATEGIES)}")
    if strategy == "evolutionary":
        search = guided_search(task, database, fingerprint, seed=seed)
    else:
        search = Exhaustive(task.space) if strategy == "exhaustive" else STRATEGIES[strategy](task.space, seed)
    default = task.default
    runner = GemmRunner(problem, num_threads, options, settings, seed)
    measure_prebuilt(task, runner, database, fingerprint)
    (result,) = tune([task], [_DefaultFirst(default, search)],
                     lambda pairs: runner([schedule for _, schedule in pairs]), database, fingerprint,
                     trials=trials, budget_seconds=budget_seconds, source=f"gemm:{strategy}")
    if result.measured and validate > 0:
        validate_fastest(task, default, validate, runner, database, fingerprint)
    fastest = _fastest_per_schedule(task, database, fingerprint)
    best = next((MeasureResult(schedule, "ok", ms) for schedule, ms in fastest.items()), None)
    return GemmTuning(task, best, _fastest(database, task.signature, fingerprint, task.template, default),
                      _fastest(database, task.signature, fingerprint, PREBUILT_TEMPLATE, PREBUILT), result,
                      time.perf_counter() - start)


def _fastest_per_schedule(task: Task, database: TuningDatabase, fingerprint: HardwareFingerprint) -> dict:
    """Schedule of the task's space -> its fastest "ok" record on this machine, fastest first."""
    fastest: dict[Schedule, float] = {}
    for record in database.records(task.signature, fingerprint.key, task.template):
        schedule = Schedule.of(record.schedule)
        if record.status == "ok" and task.space.contains(schedule):
            fastest[schedule] = min(fastest.get(schedule, math.inf), record.median_ms)
    return dict(sorted(fastest.items(), key=lambda item: item[1]))


def measure_prebuilt(task: Task, runner: GemmRunner, database: TuningDatabase,
                     fingerprint: HardwareFingerprint) -> None:
    """Step 4's baseline: the prebuilt gemm_f32 on the runner's operands, recorded under the task's signature
    (PREBUILT_TEMPLATE), unless recorded already or the prebuilt kernel cannot write C's row stride."""
    if runner.problem.c_row_stride != runner.problem.n:
        return
    baseline = Task(task.signature, Space("gemm_f32", {"kernel": ("gemm_f32",)}), PREBUILT_TEMPLATE)
    tune([baseline], [Exhaustive(baseline.space)], lambda pairs: runner([schedule for _, schedule in pairs]),
         database, fingerprint, trials=1, source="gemm:prebuilt")


def validate_fastest(task: Task, default: Schedule, count: int, runner: GemmRunner, database: TuningDatabase,
                     fingerprint: HardwareFingerprint) -> None:
    """Step 4's validation: the prebuilt kernel, the default and the `count` fastest recorded schedules measured
    once more in one call, every result recorded."""
    fastest = _fastest_per_schedule(task, database, fingerprint)
    chosen = list(fastest)[:count]
    candidates = [(PREBUILT_TEMPLATE, PREBUILT)] if runner.problem.c_row_stride == runner.problem.n else []
    candidates += [(task.template, schedule) for schedule in dict.fromkeys([default, *chosen]) if schedule in fastest]
    for (template, schedule), result in zip(candidates, runner([schedule for _, schedule in candidates])):
        database.add(TuningRecord(task.signature, fingerprint.key, template, schedule.as_dict(), result.status,
                                  result.median_ms, result.detail, source="gemm:validation"))


def recorded_schedule(problem: gemm.GemmProblem, num_threads: int, database: TuningDatabase,
                      fingerprint: HardwareFingerprint, isa: str | None = None,
                      max_workspace_floats: int | None = None) -> gemm.GemmSchedule | None:
    """The fastest schedule recorded for this problem, thread count and ISA on this machine that fits the
    workspace, when it beat the prebuilt kernel's recorded time by more than MARGIN; else None."""
    task = task_for(problem, num_threads, isa or gemm.runnable_isas()[-1], max_workspace_floats)
    validated = _validation_times(task, database, fingerprint)
    if validated is not None:  # step 5: the validation calls decide
        prebuilt_ms, fastest = validated
    else:
        prebuilt = _fastest(database, task.signature, fingerprint, PREBUILT_TEMPLATE, PREBUILT)
        if prebuilt is None:
            return None
        prebuilt_ms, fastest = prebuilt.median_ms, _fastest_per_schedule(task, database, fingerprint)
    best = next(iter(fastest.items()), None)
    if best is None or best[1] >= prebuilt_ms * (1 - MARGIN):
        return None
    return to_gemm_schedule(best[0])


def _validation_times(task: Task, database: TuningDatabase,
                      fingerprint: HardwareFingerprint) -> tuple[float, dict[Schedule, float]] | None:
    """(the prebuilt kernel's fastest validation record, schedule -> its fastest validation record, fastest first)
    when the task has validation records of both; else None."""
    def validation(template: str):
        return [record for record in database.records(task.signature, fingerprint.key, template)
                if record.status == "ok" and record.source == "gemm:validation"]

    prebuilt = [record.median_ms for record in validation(PREBUILT_TEMPLATE)]
    fastest: dict[Schedule, float] = {}
    for record in validation(task.template):
        schedule = Schedule.of(record.schedule)
        if task.space.contains(schedule):
            fastest[schedule] = min(fastest.get(schedule, math.inf), record.median_ms)
    if not prebuilt or not fastest:
        return None
    return min(prebuilt), dict(sorted(fastest.items(), key=lambda item: item[1]))
