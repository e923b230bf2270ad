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
- EvolutionarySearch (as Ansor and MetaSchedule do): random samples until `initial` ok measurements, then each
  proposal is the candidate with the lowest time predicted by a ridge regression on Space.features -> log(ms),
  refitted on every measurement so far; candidates are the neighbours of the best `population` schedules,
  crossovers of pairs of them and random samples; with probability `epsilon` a random sample instead (exploration).
The pieces are public so ortx.tune.scheduler can run rounds of chosen tasks: TaskProgress (one task's measured
set, best and best-so-far, resumed from records) and measure_round (one measure call, every result a row).
Limit: the cost model learns from one task's schedule features only (no transfer across shapes).
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import numpy as np

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


class RidgeCostModel:
    """Predicted log(ms) = standardised features . weights + bias, fitted by ridge regression (closed form)."""

    def __init__(self, regularisation: float = 1.0):
        self.regularisation = regularisation
        self._fit = None

    def fit(self, features: np.ndarray, log_ms: np.ndarray) -> None:
        mean = features.mean(axis=0)
        scale = features.std(axis=0)
        scale[scale == 0] = 1.0
        standard = (features - mean) / scale
        bias = float(log_ms.mean())
        gram = standard.T @ standard + self.regularisation * np.eye(standard.shape[1])
        weights = np.linalg.solve(gram, standard.T @ (log_ms - bias))
        self._fit = (mean, scale, weights, bias)

    def predict(self, features: np.ndarray) -> np.ndarray:
        mean, scale, weights, bias = self._fit
        return ((features - mean) / scale) @ weights + bias


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


class EvolutionarySearch(RandomSearch):
    def __init__(self, space: Space, seed: int = 0, *, initial: int = 8, population: int = 8, crossovers: int = 32,
                 random_candidates: int = 32, epsilon: float = 0.05, model: RidgeCostModel | None = None):
        super().__init__(space, seed)
        self.initial = initial
        self.population = population
        self.crossovers = crossovers
        self.random_candidates = random_candidates
        self.epsilon = epsilon
        self.model = model or RidgeCostModel()
        self._ok: dict[Schedule, float] = {}

    def observe(self, result: MeasureResult) -> None:
        if result.ok:
            previous = self._ok.get(result.schedule, math.inf)
            self._ok[result.schedule] = min(previous, result.median_ms)

    def _candidates(self, measured: set[Schedule], exclude: set[Schedule]) -> list[Schedule]:
        elite = sorted(self._ok, key=self._ok.__getitem__)[: self.population]
        pool: dict[Schedule, None] = {}
        for member in elite:
            pool.update(dict.fromkeys(self.space.neighbours(member)))
        for _ in range(self.crossovers if len(elite) > 1 else 0):
            first, second = self.rng.choice(len(elite), size=2, replace=False)
            child = self.space.crossover(elite[first], elite[second], self.rng)
            if child is not None:
                pool[child] = None
        for _ in range(self.random_candidates):
            sample = self.space.sample(self.rng)
            if sample is not None:
                pool[sample] = None
        return [schedule for schedule in pool if schedule not in measured and schedule not in exclude]

    def propose(self, count: int, measured: set[Schedule]) -> list[Schedule]:
        chosen: list[Schedule] = []
        while len(chosen) < count:
            explore = len(self._ok) < self.initial or self.rng.random() < self.epsilon
            candidates = [] if explore else self._candidates(measured, set(chosen))
            if candidates:
                schedules = list(self._ok)
                self.model.fit(np.stack([self.space.features(s) for s in schedules]),
                               np.log(np.array([self._ok[s] for s in schedules])))
                predicted = self.model.predict(np.stack([self.space.features(s) for s in candidates]))
                pick = candidates[int(np.argmin(predicted))]
            else:
                picked = super().propose(1, measured | set(chosen))
                if not picked:
                    break
                pick = picked[0]
            chosen.append(pick)
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
