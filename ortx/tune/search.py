"""Schedule search: exhaustive, random and cost-model-guided evolutionary search over a Space, with every
measurement (failures included) stored in the TuningDatabase under this machine's fingerprint.

`tune(tasks, strategies, measure, database, fingerprint, trials=...)`:
1. Resume: each task's records (signature, fingerprint, template) are read back and shown to its strategy as
   measured; a recorded schedule, ok or failed, is never measured again, and counts toward `trials`.
2. Rounds: every task that has trials left asks its strategy for the next `batch` unmeasured schedules; one
   `measure` call gets all of them (so a runner can measure one candidate of many tasks in one build, as the
   per-step thread runner does); each result becomes a row (a failure is a row with its status and detail).
3. Stops when every task used its trials or its strategy has nothing left, or after `budget_seconds` (checked
   between rounds).
Strategies (each deterministic given its seed):
- Exhaustive: every valid schedule in Space.enumerate order.
- RandomSearch: uniform valid samples, never one already measured.
- EvolutionarySearch (as Ansor, MetaSchedule and TVM's XGBoost tuner do): a cost model (boosted trees,
  ortx.tune.cost_model) predicts log(ms / Space.work) from Space.features; every round it is refitted on the
  task's ok measurements. With TransferData (other tasks' records) the prediction is stacked, as TVM's transfer
  tuner starts from the old model's margin: a prior model fitted once on the transfer rows, plus a residual model
  fitted each round on this task's measurements minus the prior's prediction of them (from `residual_rows` of
  them; before that the prior ranks alone). The task's own measurements then correct the prior where they disagree
  with it, however many transfer rows there are (one fit of both, the transfer weighted down, let thousands of
  transfer rows outvote the task's few dozen); then
  1. candidates: `pool` random samples, the neighbours of the `population` fastest measured schedules and the
     transfer's fastest schedules that are in this space;
  2. evolution against the model: `generations` times, the `survivors` best predicted and their neighbours are
     scored, never measured;
  3. the best predicted unmeasured candidates fill the batch, each slot with probability `epsilon` a random
     sample instead (exploration), skipping twins: a candidate whose features equal a measured or already chosen
     schedule's (the same loop nest, the same prediction).
  Without transfer it measures random samples until `initial` are ok.
The pieces are public so ortx.tune.scheduler can run rounds of chosen tasks: TaskProgress (one task's measured
set, best and best-so-far, resumed from records) and measure_round (one measure call, every result a row).
Limits: the model ranks by regression on log time (no ranking loss); a batch is the top of one ranking, so its
schedules can be close neighbours of each other.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from ortx.tune.cost_model import BoostedTreesCostModel, RidgeCostModel  # noqa: F401 (RidgeCostModel: re-export)
from ortx.tune.fingerprint import HardwareFingerprint
from ortx.tune.records import TuningDatabase, TuningRecord
from ortx.tune.runner import MeasureResult
from ortx.tune.space import Schedule, Space


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
    """One thing to tune: what it is (signature), where its choices live (space), what they parameterise."""

    signature: str  # the records key, e.g. a kernel name and its ints
    space: Space
    template: str  # hash or name of the code the schedule parameterises (records key too)
    # For the task scheduler (ortx.tune.scheduler); tune() ignores them.
    weight: float = 1.0  # calls per model run: the scheduler minimises the sum of weight x best ms over tasks
    default: Schedule | None = None  # the untuned schedule: measured in the task's first round, the gain's baseline
    prior_ms: float | None = None  # one call's untuned time measured beforehand (a profile): orders the first
    #                                rounds and stands in for the task's time until it has a measurement


@dataclasses.dataclass
class TaskResult:
    task: Task
    best: MeasureResult | None  # fastest "ok" measurement, recorded or new
    measured: int  # new measurements made by this call
    recorded: int  # schedules read back from the database (not measured again)
    failures: int  # non-ok results among measured and recorded
    best_so_far_ms: list[float]  # after each trial (recorded ones first), inf until the first "ok"


class Exhaustive:
    def __init__(self, space: Space):
        self._order = space.enumerate()

    def propose(self, count: int, measured: set[Schedule]) -> list[Schedule]:
        found = []
        for schedule in self._order:
            if schedule not in measured:
                found.append(schedule)
                if len(found) == count:
                    break
        return found

    def observe(self, result: MeasureResult) -> None:
        pass


class RandomSearch:
    def __init__(self, space: Space, seed: int = 0):
        self.space = space
        self.rng = np.random.default_rng(seed)

    def _unmeasured_sample(self, measured: set[Schedule], exclude: set[Schedule]) -> Schedule | None:
        for _ in range(64):
            schedule = self.space.sample(self.rng)
            if schedule is None:
                return None
            if schedule not in measured and schedule not in exclude:
                return schedule
        # Mostly measured already: take the first unmeasured one in enumeration order, if any is left.
        if self.space.size <= 1 << 16:
            return next((s for s in self.space.enumerate() if s not in measured and s not in exclude), None)
        return None

    def propose(self, count: int, measured: set[Schedule]) -> list[Schedule]:
        found: set[Schedule] = set()
        ordered = []
        while len(ordered) < count:
            schedule = self._unmeasured_sample(measured, found)
            if schedule is None:
                break
            found.add(schedule)
            ordered.append(schedule)
        return ordered

    def observe(self, result: MeasureResult) -> None:
        pass


CLIP_QUANTILE = 0.75  # log times above this quantile of a task's are cut to it before fitting (see clipped)


def clipped(log_ms: np.ndarray) -> np.ndarray:
    """Slow schedules (and runs a busy host slowed tenfold) cut to the CLIP_QUANTILE of the task's times: the
    search ranks the fast end, and a squared-error fit would spend its splits on the outliers' magnitudes."""
    return np.minimum(log_ms, np.quantile(log_ms, CLIP_QUANTILE)) if len(log_ms) >= 4 else log_ms


@dataclasses.dataclass(frozen=True)
class TransferData:
    """Measurements of other tasks for a guided search to start from: their feature rows (computed for their own
    problems), log(ms / work) each (clipped per task), and their schedules, fastest first (candidate seeds where
    the space has them)."""

    features: np.ndarray
    targets: np.ndarray
    schedules: tuple[Schedule, ...] = ()


class EvolutionarySearch(RandomSearch):
    """Cost-model-guided evolutionary search (see the module docstring)."""

    def __init__(self, space: Space, seed: int = 0, *, initial: int = 8, population: int = 8, pool: int = 256,
                 survivors: int = 32, generations: int = 2, epsilon: float = 0.05, model=None,
                 transfer: TransferData | None = None, transfer_seeds: int = 8, residual_rows: int = 8,
                 residual_model=None):
        super().__init__(space, seed)
        self.initial = initial
        self.population = population
        self.pool = pool
        self.survivors = survivors
        self.generations = generations
        self.epsilon = epsilon
        self.model = model or BoostedTreesCostModel()  # the task's own model, or with transfer the prior
        self.transfer = transfer if transfer is not None and len(transfer.targets) else None
        self.transfer_seeds = transfer_seeds
        self.residual_rows = residual_rows
        self.residual_model = residual_model or BoostedTreesCostModel(depth=3)
        self._prior_fitted = False
        self._residual: Callable[[np.ndarray], np.ndarray] | None = None
        self._ok: dict[Schedule, float] = {}
        self._features: dict[Schedule, np.ndarray] = {}

    def observe(self, result: MeasureResult) -> None:
        if result.ok:
            previous = self._ok.get(result.schedule, math.inf)
            self._ok[result.schedule] = min(previous, result.median_ms)

    def _featurised(self, schedules: Sequence[Schedule]) -> np.ndarray:
        for schedule in schedules:
            if schedule not in self._features:
                self._features[schedule] = self.space.features(schedule)
        return np.stack([self._features[schedule] for schedule in schedules])

    def _fit(self) -> bool:
        """Fits the model on this task's ok measurements, or with transfer the residual model over the prior (see
        the module docstring); False when there is too little to learn from (random samples instead)."""
        own = list(self._ok)
        targets = clipped(np.log(np.array([self._ok[s] for s in own]) / self.space.work)) if own else None
        if self.transfer is None:
            if len(own) < self.initial:
                return False
            self.model.fit(self._featurised(own), targets)
            return True
        if not self._prior_fitted:
            self.model.fit(self.transfer.features, self.transfer.targets)
            self._prior_fitted = True
        self._residual = None
        if len(own) >= self.residual_rows:
            features = self._featurised(own)
            self.residual_model.fit(features, targets - self.model.predict(features))
            self._residual = self.residual_model.predict
        return True

    def _predict(self, features: np.ndarray) -> np.ndarray:
        predicted = self.model.predict(features)
        return predicted if self._residual is None else predicted + self._residual(features)

    def _ranked(self, measured: set[Schedule]) -> list[Schedule]:
        """Candidates, best predicted first: random samples, the measured elite's neighbours and the transfer seeds,
        then `generations` rounds of the predicted best `survivors` replaced by the best of them and their
        neighbours (evolution against the model, never measuring)."""
        elite = sorted(self._ok, key=self._ok.__getitem__)[: self.population]
        pool: dict[Schedule, None] = {}
        for member in elite:
            pool.update(dict.fromkeys(self.space.neighbours(member)))
        if self.transfer is not None:
            seeds = [s for s in self.transfer.schedules if self.space.contains(s)][: self.transfer_seeds]
            pool.update(dict.fromkeys(seeds))
        for _ in range(self.pool):
            sample = self.space.sample(self.rng)
            if sample is not None:
                pool[sample] = None
        candidates = [schedule for schedule in pool if schedule not in measured]
        if not candidates:
            return []
        scores = dict(zip(candidates, self._predict(self._featurised(candidates))))
        for _ in range(self.generations):
            best = sorted(scores, key=scores.__getitem__)[: self.survivors]
            children = {child: None for parent in best for child in self.space.neighbours(parent)
                        if child not in scores and child not in measured}
            if not children:
                break
            scores.update(zip(children, self._predict(self._featurised(list(children)))))
        return sorted(scores, key=scores.__getitem__)

    def _twin_key(self, schedule: Schedule) -> bytes:
        return self._featurised([schedule])[0].tobytes()

    def propose(self, count: int, measured: set[Schedule]) -> list[Schedule]:
        chosen: list[Schedule] = []
        ranked = self._ranked(measured) if self._fit() else []
        # Twins: schedules whose features are equal (say an M block larger than the task's rows, clipped to them)
        # run the same loop nest and get the same prediction; a batch would spend its trials on one of them.
        twins = {self._twin_key(schedule) for schedule in measured} if ranked else set()
        for schedule in ranked:
            if len(chosen) == count:
                break
            if self.rng.random() < self.epsilon:  # exploration: a random sample in this slot
                picked = super().propose(1, measured | set(chosen))
                if picked:
                    chosen.append(picked[0])
                    twins.add(self._twin_key(picked[0]))
                    continue
            key = self._twin_key(schedule)
            if schedule not in chosen and key not in twins:
                chosen.append(schedule)
                twins.add(key)
        if len(chosen) < count:
            chosen += super().propose(count - len(chosen), measured | set(chosen))
        return chosen


def _recorded_results(database: TuningDatabase, task: Task, fingerprint: HardwareFingerprint) -> list[MeasureResult]:
    results = []
    for record in database.records(task.signature, fingerprint.key, task.template):
        schedule = Schedule.of(record.schedule)
        if task.space.contains(schedule):
            results.append(MeasureResult(schedule, record.status, record.median_ms, record.detail))
    return results


class TaskProgress:
    """One task's state across rounds: what was measured (recorded or new), the best, best-so-far per trial."""

    def __init__(self, task: Task, strategy):
        self.task = task
        self.strategy = strategy
        self.measured: set[Schedule] = set()
        self.best: MeasureResult | None = None
        self.ok_ms: dict[Schedule, float] = {}  # every ok schedule's fastest time
        self.new = self.recorded = self.failures = 0
        self.best_so_far: list[float] = []

    def resume(self, database: TuningDatabase, fingerprint: HardwareFingerprint) -> None:
        """Shows the task's records (this fingerprint and template) to the strategy as measured."""
        for result in _recorded_results(database, self.task, fingerprint):
            self.observe(result, recorded=True)

    def observe(self, result: MeasureResult, *, recorded: bool) -> None:
        first_time = result.schedule not in self.measured
        self.measured.add(result.schedule)
        self.strategy.observe(result)
        if result.ok:
            self.ok_ms[result.schedule] = min(self.ok_ms.get(result.schedule, math.inf), result.median_ms)
            if self.best is None or result.median_ms < self.best.median_ms:
                self.best = result
        if first_time:
            self.recorded += recorded
            self.new += not recorded
            self.failures += not result.ok
            self.best_so_far.append(self.best.median_ms if self.best else math.inf)

    def result(self) -> TaskResult:
        return TaskResult(self.task, self.best, self.new, self.recorded, self.failures, self.best_so_far)


def measure_round(pairs: Sequence[tuple[TaskProgress, Schedule]], measure: Callable[[list[tuple[Task, Schedule]]],
                  list[MeasureResult]], database: TuningDatabase, fingerprint: HardwareFingerprint,
                  source: str) -> list[MeasureResult]:
    """One `measure` call for all pairs; each result is stored as a row and observed by its task."""
    results = measure([(progress.task, schedule) for progress, schedule in pairs])
    if len(results) != len(pairs):
        raise RuntimeError(f"measure returned {len(results)} results for {len(pairs)} candidates")
    for (progress, schedule), result in zip(pairs, results):
        if result.schedule != schedule:
            raise RuntimeError(f"measure answered {result.schedule} for {schedule}")
        database.add(TuningRecord(progress.task.signature, fingerprint.key, progress.task.template,
                                  schedule.as_dict(), result.status, result.median_ms, result.detail, source=source))
        progress.observe(result, recorded=False)
    return results


def tune(tasks: Sequence[Task], strategies: Sequence, measure: Callable[[list[tuple[Task, Schedule]]],
         list[MeasureResult]], database: TuningDatabase, fingerprint: HardwareFingerprint, *, trials: int,
         batch: int = 1, budget_seconds: float | None = None, source: str = "search") -> list[TaskResult]:
    """`strategies[i]` searches `tasks[i]`; `measure` gets (task, schedule) pairs and returns one result each."""
    start = time.perf_counter()
    database.add_fingerprint(fingerprint)
    states = [TaskProgress(task, strategy) for task, strategy in zip(tasks, strategies, strict=True)]
    for state in states:
        state.resume(database, fingerprint)
    while budget_seconds is None or time.perf_counter() - start < budget_seconds:
        pairs = []
        for state in states:
            left = min(batch, trials - len(state.measured))
            if left > 0:
                pairs.extend((state, schedule) for schedule in state.strategy.propose(left, state.measured))
        if not pairs:
            break
        measure_round(pairs, measure, database, fingerprint, source)
    return [state.result() for state in states]


def search(task: Task, strategy, runner: Callable[[list[Schedule]], list[MeasureResult]],
           database: TuningDatabase, fingerprint: HardwareFingerprint, *, trials: int, batch: int = 1,
           budget_seconds: float | None = None, source: str = "search") -> TaskResult:
    """One task: `runner` takes schedules (e.g. a FunctionRunner)."""
    (result,) = tune([task], [strategy], lambda pairs: runner([schedule for _, schedule in pairs]), database,
                     fingerprint, trials=trials, batch=batch, budget_seconds=budget_seconds, source=source)
    return result
