"""Whole-model tuning (`ortx tune MODEL --budget 10m`): every task of a model's claimed segments searched under
one time budget by the task scheduler, then, per segment, the schedule validated and OrtxEP measured against ORT.

1. Compile the model with tuning off (graph passes, OrtxEP's claim, JIT; ortx.pipeline), at the sessions'
   precision (and fp32_nodes), and time it end to end on seeded random inputs (the untuned time the estimates
   start from).
2. Tasks: per JIT'd claimed segment with float inputs and outputs, the per-step thread tasks
   (ortx.tune.step_threads; not on one thread), weighted by how many steps share a signature, with the default
   build's per-step medians as priors; a signature in several segments is one task (measured in the first
   segment holding it). Then the GEMM schedule tasks of the same segments' qualifying gemm_f32 steps
   (ortx.tune.gemm_tasks), weighted and given priors the same way.
3. Search: ortx.tune.scheduler over all tasks, Exhaustive per thread task (every thread count of a step timed in
   one call, under the same load), evolutionary per GEMM task (GEMM_TRIALS_PER_ROUND a round),
   TASKS_PER_ROUND tasks per round, within the budget left after a reserve for step 4 (estimated from step 1's
   compile time and the untuned end-to-end time, see _reserve_seconds); then the measured GEMM tasks' fastest
   schedules are validated against the prebuilt kernel (gemm_tasks, step 4).
4. Choose: compile again with tuning "quick"/"full" but no more search: tuned GEMMs go where their records beat
   the prebuilt kernel (gemm_steps), each segment's recorded thread counts are validated end to end against the
   default, each segment with blocked runs is timed against the same segment on NCHW kernels and, where it has
   fused expand + depthwise steps, against its runs unfused (ortx.tune.layout_choice), and the segment is measured
   against ORT running the same nodes (ortx.tune.engine_choice; a give-back is confirmed in fresh processes,
   ortx.tune.engine_confirm); all recorded, so later sessions (tuning "cached") apply them.
5. Whole model (ortx.tune.model_choice): the plan step 4 compiled (without earlier whole-model records) against ORT
   running every node, confirmed in fresh processes when ORT wins, recorded; sessions whose latest record says ORT
   is faster by more than its MARGIN give every segment back.
Limits: the reserve is an estimate, so the command can overrun a tight budget by its error; a step is timed
inside a build where the other tasks of its round also run their candidate (step_threads' limit), a GEMM alone
on its own operands (gemm_tasks' limit); conv steps other than conv2d_f32 of one image and one group have no
schedule task (gemm_steps' limits).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnx

from ortx import pipeline
from ortx.config import Options
from ortx.ep.assignment import FUSED_FROM_KEY
from ortx.ep.options import sub_session_options
from ortx.ep.precision import PRECISIONS, effective_precision, mark_fp32_nodes
from ortx.ep.runtime import ClaimedStep, ExecutionPlan
from ortx.measure import BLOCK, SETTLE_S, WARM_IN_S
from ortx.tune import engine_choice, engine_confirm, gemm_tasks, layout_choice, model_choice, step_threads
from ortx.tune.fingerprint import HardwareFingerprint, current
from ortx.tune.records import TuningDatabase
from ortx.tune.runner import MeasureResult, TimingSettings
from ortx.tune.scheduler import RoundReport, ScheduleReport, schedule_tasks
from ortx.tune.search import Exhaustive, Task
from ortx.tune.space import Schedule

MODES = ("quick", "full")
CONFIRM_START_S = 3.0  # a confirming process's interpreter start and imports (step 5)
TIMED_RUNS = {"quick": 10, "full": 30}  # per candidate, as sessions with tuning "quick"/"full" time them
# A round builds the segment once per thread count with this many steps changed: one C compile (~0.3 s for a
# 150-step PP-OCR segment) and one timing loop serve them all, and the largest steps still come first.
TASKS_PER_ROUND = 8
# GEMM schedules proposed per task and round: the evolutionary search's population grows by this many (each a
# ~0.4 s compile, cached), enough that a round's time is dominated by measurement rather than the round trip.
GEMM_TRIALS_PER_ROUND = 8


@dataclasses.dataclass(frozen=True)
class SegmentThreads:
    """A tuned segment's per-step thread counts after step 4."""

    position: int  # in the untuned plan
    first_node: str
    changed_steps: int  # steps the records put on fewer threads than the session's
    default_ms: float | None  # end-to-end validation medians (None: nothing to validate)
    tuned_ms: float | None
    applied: bool  # what "cached" sessions will do: validated faster than the default by more than MARGIN

    @property
    def describe(self) -> str:
        if self.changed_steps == 0:
            return "no step faster on fewer threads: default kept"
        if self.default_ms is None or self.tuned_ms is None:
            return f"{self.changed_steps} steps on fewer threads, not validated: default kept"
        verdict = "applied" if self.applied else f"not faster by {step_threads.MARGIN:.0%}: default kept"
        return (f"{self.changed_steps} steps on fewer threads, validated {self.default_ms:.3f} -> "
                f"{self.tuned_ms:.3f} ms: {verdict}")


@dataclasses.dataclass(frozen=True)
class ModelTuning:
    schedule: ScheduleReport  # the search (step 3): per task trials, best, estimated gain
    task_segments: tuple[tuple[int, ...], ...]  # per task, the plan positions of the segments holding it
    segment_threads: tuple[SegmentThreads, ...]  # per tuned segment (step 4)
    engine_choices: tuple  # ortx.tune.engine_choice.EngineChoice per claimed segment (step 4)
    untuned_ms: float  # step 1's end-to-end median
    compile_seconds: float  # step 1
    search_seconds: float  # steps 2-3
    choose_seconds: float  # step 4
    search_budget_seconds: float | None  # what step 3 was given
    notes: tuple[str, ...]  # segments without tasks, and why
    signatures: frozenset[str]  # every record signature of this model (engine, layout, segment and step records)
    layout_choices: tuple = ()  # ortx.tune.layout_choice.LayoutChoice per segment with blocked runs (step 4)
    model_choice: object = None  # ortx.tune.model_choice.ModelChoice: the tuned plan against ORT whole (step 5)


def _ort_settings(num_threads: int) -> pipeline.OrtSettings:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = num_threads
    return pipeline.OrtSettings(sub_session_options(options, shares_cores_with_ortx=True), ["CPUExecutionProvider"],
                                [{}], sub_session_options(options, shares_cores_with_ortx=False))


def _end_to_end_ms(plan: ExecutionPlan, feeds: dict, settings: TimingSettings) -> float:
    for _ in range(settings.warmup_runs):
        plan.run(feeds)
    times = []
    for _ in range(settings.timed_runs):
        start = time.perf_counter()
        plan.run(feeds)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _reserve_seconds(compile_seconds: float, untuned_ms: float, settings: TimingSettings, mode: str,
                     segments: int) -> float:
    """Step 4's time, estimated: compiling twice (again, and once more when a segment goes back to ORT) plus one
    C build for a validated schedule, and the runs it makes of the whole model's worth of segments: the
    validation's default and tuned builds, then OrtxEP and ORT per segment (engine_choice's runs, blocks and
    warm-ups), each of the `segments` blocks' idle and warm-in; and the layout choice's runs of up to three layouts
    (layout_choice: a segment without blocked runs makes none, so this over-reserves for those); and step 5's
    compile of the whole model for ORT and its runs of both engines (not its confirming processes, which run only
    where the budget leaves time for them)."""
    validation_runs = 2 * (settings.warmup_runs + step_threads.VALIDATION_RUNS_FACTOR * settings.timed_runs)
    engine_runs = engine_choice.QUICK_RUNS if mode == "quick" else engine_choice.FULL_RUNS
    choice_runs = 2 * (2 + 2 * engine_runs)  # per engine: warm-ups and timed runs (warm-ins: the time term below)
    rounds, runs = layout_choice.QUICK if mode == "quick" else layout_choice.FULL
    layout_runs = len(layout_choice.LAYOUTS) * (1 + rounds * runs)
    blocks = 2 * segments * -(-engine_runs // BLOCK)
    model_runs = 2 * (2 + model_choice.RUNS[mode])  # step 5: both engines' warm-ups and timed runs
    blocks += 2 * -(-model_choice.RUNS[mode] // BLOCK)
    return (4 * compile_seconds + (validation_runs + choice_runs + layout_runs + model_runs) * untuned_ms / 1e3
            + blocks * (SETTLE_S + WARM_IN_S))


class _SegmentTasks:
    """Step 2: the thread and GEMM tasks of every tunable segment, merged by signature, and who measures each."""

    def __init__(self, plan: ExecutionPlan, num_threads: int, jit: Options, settings: TimingSettings, seed: int):
        self.notes: list[str] = []
        self.runners: dict[str, step_threads.SegmentStepRunner] = {}  # signature -> the runner measuring it
        self.programs: dict[int, object] = {}  # plan position -> the tuned segment's CompiledProgram
        self.segments: dict[str, list[int]] = {}
        self.signatures: set[str] = set()
        weights: dict[str, int] = {}
        times: dict[str, float] = {}  # signature -> weight x prior, summed over segments
        template: dict[str, Task] = {}
        self.gemms = gemm_tasks.GemmTasks(num_threads, jit, settings, seed)
        for position, step in enumerate(plan.steps):
            if not isinstance(step, ClaimedStep):
                continue
            label = f"segment {position} (from {step.node_names[0] if step.node_names else step.arena_name})"
            if step.program.native is None:
                self.notes.append(f"{label}: not JIT-compiled, no per-step schedule to tune")
                continue
            specs = [plan.tensors[name] for name in step.inputs + step.outputs]
            if not all(spec.static and spec.dtype is not None and spec.dtype.kind == "f" for spec in specs):
                self.notes.append(f"{label}: a non-float or dynamic input/output (random values could be "
                                  "out-of-range indices): not tuned")
                continue
            shapes = [step_threads.TensorShape(spec.shape, spec.dtype) for spec in specs]
            memory = step_threads.NativeRun(step.program, shapes[:len(step.inputs)], shapes[len(step.inputs):],
                                            num_threads, settings.rotations)
            runner = step_threads.SegmentStepRunner(step.program, memory, jit, settings)
            step_ms = runner.profile_steps()
            self.gemms.add(position, step.program, step_ms)
            if num_threads == 1:
                self.notes.append(f"{label}: one thread, so no per-step thread count to choose")
                continue
            self.programs[position] = step.program
            self.signatures.add(step_threads.segment_signature(step.program, num_threads))
            for task in runner.tasks(step_ms):
                self.runners.setdefault(task.signature, runner)
                self.segments.setdefault(task.signature, []).append(position)
                weights[task.signature] = weights.get(task.signature, 0) + int(task.weight)
                times[task.signature] = times.get(task.signature, 0.0) + task.weight * task.prior_ms
                template.setdefault(task.signature, task)
        self.tasks = [dataclasses.replace(template[signature], weight=float(weights[signature]),
                                          prior_ms=times[signature] / weights[signature]) for signature in template]
        self.thread_tasks = len(self.tasks)
        self.tasks += self.gemms.tasks
        self.segments.update(self.gemms.segments)
        self.signatures.update(self.runners)
        self.signatures.update(self.gemms.segments)

    def strategies(self, database: TuningDatabase, fingerprint: HardwareFingerprint) -> list:
        threads, gemms = self.tasks[:self.thread_tasks], self.tasks[self.thread_tasks:]
        return [Exhaustive(task.space) for task in threads] + self.gemms.strategies(gemms, database, fingerprint)

    def measure(self, pairs: list[tuple[Task, Schedule]], database: TuningDatabase,
                fingerprint: HardwareFingerprint) -> list[MeasureResult]:
        """GEMM tasks' pairs through their GemmRunners; every segment's runner measures its thread tasks' pairs (one
        build per candidate index, timed together)."""
        results: list[MeasureResult | None] = [None] * len(pairs)
        gemm_indices = [index for index, (task, _) in enumerate(pairs) if self.gemms.owns(task)]
        if gemm_indices:
            gemm_results = self.gemms.measure([pairs[index] for index in gemm_indices], database, fingerprint)
            for index, result in zip(gemm_indices, gemm_results, strict=True):
                results[index] = result
        groups: dict[int, tuple[step_threads.SegmentStepRunner, list[int]]] = {}
        for index, (task, _) in enumerate(pairs):
            if results[index] is not None:
                continue
            runner = self.runners[task.signature]
            groups.setdefault(id(runner), (runner, []))[1].append(index)
        for runner, indices in groups.values():
            for index, result in zip(indices, runner([pairs[index] for index in indices]), strict=True):
                results[index] = result
        return results


def tune_model(proto: onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]], *, num_threads: int, mode: str,
               database_path: str, jit: Options, budget_seconds: float | None = None, trials: int | None = None,
               seed: int = 0,
               started: float | None = None, on_round: Callable[[RoundReport], None] | None = None,
               on_phase: Callable[[str], None] | None = None,
               should_stop: Callable[[], bool] | None = None, precision: str = "fp32",
               fp32_nodes: tuple[str, ...] = (), bf16_compute: str = "auto") -> ModelTuning:
    """Steps 1-4 of the module docstring for `proto` (a loaded model, every input's shape in `input_shapes`).
    `precision` and `fp32_nodes`: the OrtxEP options of the sessions the records are for (ortx.ep.precision); a bf16
    session's kernels, steps and segments have their own signatures, so its records are its own; where a bf16
    session would run fp32 kernels (ortx.ep.precision.effective_precision, `bf16_compute`), the fp32 ones are tuned.
    `budget_seconds` counts from `started` (time.perf_counter(); default: now), `trials` bounds the search's new
    measurements (None: no bound); `on_round` sees each search round,
    `on_phase` a line when a step begins; `should_stop()` true ends the search early (step 4 still validates
    what was found, so the records a later session reads are complete)."""
    if mode not in MODES:
        raise ValueError(f"tune_model: mode {mode!r} is not one of {', '.join(MODES)}")
    if precision not in PRECISIONS:
        raise ValueError(f"tune_model: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if fp32_nodes and precision == "fp32":
        raise ValueError("fp32_nodes keeps layers fp32 in a bf16 session: give precision bf16")
    started = time.perf_counter() if started is None else started
    say = on_phase or (lambda line: None)
    precision, precision_note = effective_precision(precision, bf16_compute)
    if precision_note:
        say(precision_note)
    settings = TimingSettings(timed_runs=TIMED_RUNS[mode])
    ort = _ort_settings(num_threads)

    say("compiling with tuning off")
    prepared = pipeline.prepare_loaded(proto)
    if fp32_nodes:
        mark_fp32_nodes(prepared.model.graph, list(fp32_nodes), FUSED_FROM_KEY)
    untuned = pipeline.compile_for_shapes(prepared, input_shapes, ort, num_threads=num_threads, jit=jit, tuning=None,
                                          precision=precision)
    compile_seconds = time.perf_counter() - started
    from ortx.optimize import random_feeds

    untuned_ms = _end_to_end_ms(untuned.plan, random_feeds(proto, input_shapes), settings)

    search_start = time.perf_counter()
    say(f"untuned end to end {untuned_ms:.3f} ms; profiling the claimed segments' steps")
    segment_tasks = _SegmentTasks(untuned.plan, num_threads, jit, settings, seed)
    tasks = segment_tasks.tasks
    other_ms = max(0.0, untuned_ms - sum(task.weight * task.prior_ms for task in tasks))
    search_budget = None
    if budget_seconds is not None:
        segments = sum(isinstance(step, ClaimedStep) for step in untuned.plan.steps)
        reserve = (_reserve_seconds(compile_seconds, untuned_ms, settings, mode, segments)
                   + gemm_tasks.VALIDATION_SECONDS * (len(tasks) - segment_tasks.thread_tasks))
        search_budget = max(0.0, budget_seconds - (time.perf_counter() - started) - reserve)
    say(f"searching {len(tasks)} tasks" + (f" for at most {search_budget:.1f} s" if search_budget is not None else ""))
    batch = max([len(task.space.choices["threads"]) for task in tasks[:segment_tasks.thread_tasks]]
                + [GEMM_TRIALS_PER_ROUND] * (len(tasks) > segment_tasks.thread_tasks), default=1)
    fingerprint = current(jit)
    with TuningDatabase(database_path) as database:
        report = schedule_tasks(tasks, segment_tasks.strategies(database, fingerprint),
                                lambda pairs: segment_tasks.measure(pairs, database, fingerprint), database,
                                fingerprint, budget_seconds=search_budget, trials=trials, batch=batch,
                                tasks_per_round=TASKS_PER_ROUND, seed=seed, other_ms=other_ms,
                                source=f"scheduler:{mode}", on_round=on_round, should_stop=should_stop)
        segment_tasks.gemms.validate(database, fingerprint)
    search_seconds = time.perf_counter() - search_start

    choose_start = time.perf_counter()
    say("validating the chosen schedules and measuring each segment against ONNX Runtime")
    tuning = pipeline.TuningSettings(mode, database_path, search_step_threads=False, model_records=False)
    tuned = pipeline.compile_for_shapes(prepared, input_shapes, ort, num_threads=num_threads, jit=jit, tuning=tuning,
                                        precision=precision)
    choices = tuple(tuned.assignment.engine_choices)
    threads = []
    with TuningDatabase(database_path) as database:
        for position, program in segment_tasks.programs.items():
            chosen, default_ms, tuned_ms = step_threads.recorded_validation(program, num_threads, database,
                                                                            current(jit))
            changed = sum(count is not None for count in chosen) if chosen else 0
            applied = chosen is not None and step_threads.recorded_schedule(program, num_threads, database,
                                                                            current(jit)) is not None
            first = untuned.plan.steps[position].node_names
            threads.append(SegmentThreads(position, first[0] if first else f"segment {position}", changed,
                                          default_ms, tuned_ms, applied))
    layouts = tuple(tuned.assignment.layout_choices)
    say("measuring the tuned model against ONNX Runtime running all of it")
    deadline = started + budget_seconds if budget_seconds is not None else None
    whole = _whole_model_check(proto, prepared, input_shapes, ort, tuned, num_threads=num_threads, jit=jit,
                               mode=mode, database_path=database_path, precision=precision, fp32_nodes=fp32_nodes,
                               deadline=deadline, compile_seconds=compile_seconds)
    signatures = frozenset(segment_tasks.signatures | {choice.signature for choice in choices + layouts}
                           | ({whole.signature} if whole is not None else set()))
    return ModelTuning(report, tuple(tuple(segment_tasks.segments[task.signature]) for task in tasks),
                       tuple(threads), choices,
                       untuned_ms, compile_seconds, search_seconds, time.perf_counter() - choose_start,
                       search_budget, tuple(segment_tasks.notes), signatures, layouts, whole)


def _whole_model_check(proto: onnx.ModelProto, prepared, input_shapes, ort, tuned, *, num_threads: int, jit: Options,
                       mode: str, database_path: str, precision: str, fp32_nodes: tuple[str, ...],
                       deadline: float | None, compile_seconds: float):
    """Step 5 (ortx.tune.model_choice): the tuned plan against ORT running the whole model, confirmed in fresh
    processes when ORT wins, recorded; None when OrtxEP claims nothing. A confirmation runs only while `deadline`
    (time.perf_counter(); None: no bound) leaves time for it (a new interpreter, two compiles, the runs); a win
    for ORT that could not be confirmed is reported and not recorded, so sessions keep OrtxEP."""
    choices = tuned.assignment.engine_choices
    signature = tuned.model_signature
    if signature is None or not choices:
        return None
    if any(engine_choice.ORTX_ONLY_NOTE in choice.source for choice in choices):
        return model_choice.ModelChoice(signature, "ortx", None, None, "a segment ORT cannot run: not measured")
    if all(choice.engine == "ort" for choice in choices):
        return model_choice.ModelChoice(signature, "ort", None, None, "every segment already given back to ORT")
    from ortx.optimize import random_feeds

    whole_ort = pipeline.compile_for_shapes(prepared, input_shapes, ort, num_threads=num_threads, claim=False,
                                            jit=jit, tuning=None, precision=precision)
    runs = model_choice.RUNS[mode]
    start = time.perf_counter()
    measurements = [(model_choice.measure_plans(tuned.plan, whole_ort.plan, random_feeds(proto, input_shapes), runs),
                     f"model_choice:{mode}")]
    confirm_seconds = CONFIRM_START_S + 2 * compile_seconds + (time.perf_counter() - start)
    while (model_choice.goes_back(model_choice.choose(measurements, signature).times)
           and len(measurements) <= model_choice.CONFIRM_PROCESSES):
        if deadline is not None and time.perf_counter() + confirm_seconds > deadline:
            first = model_choice.choose(measurements, signature)
            return dataclasses.replace(first, engine="ortx",
                                       source=f"{first.source}; ORT faster, not confirmed within the budget: not "
                                              "recorded")
        again = engine_confirm.measure_model_in_fresh_process(
            proto, input_shapes, threads=num_threads, runs=runs, precision=precision, database_path=database_path,
            fp32_nodes=fp32_nodes)
        if again is None:
            break
        measurements.append((again, "model_choice:confirm"))
    result = model_choice.choose(measurements, signature)
    with TuningDatabase(database_path) as database:
        model_choice.record(database, current(jit), signature, result.times, measurements[-1][1])
    return result
