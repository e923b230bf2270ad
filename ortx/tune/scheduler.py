"""Task scheduler: spends a tuning budget over many tasks where the next round is expected to cut the weighted
end-to-end time most, as Ansor's gradient-based task scheduler does (Zheng et al., OSDI 2020, section 6).

The objective is E = other_ms + sum over tasks of weight_i x time_i: weight_i is the task's calls per model run,
time_i its estimated ms per call now: its prior_ms (an earlier profile of the untuned kernel) scaled by best/default
when its default schedule was measured (the default and the best are timed in the same rounds, under the same
load, the prior elsewhere: the ratio carries over, the absolute time may not), else its best, else its prior.
`schedule_tasks`:
1. Resume: each task's records (signature, fingerprint, template) are read back as measured (ortx.tune.search);
   a recorded schedule is never measured again.
2. First rounds: every task without a measurement gets one round before any task gets a second, largest expected
   share first (weight x prior_ms, a task without a prior counted at the others' median; ties in the given order). A task's first round starts with its
   `default` schedule when it has one, so every gain is against the untuned schedule measured under the same load.
3. Later rounds: per live task, the expected gain of one more round of `batch` trials is
       weight_i x batch x (ALPHA x backward_i + (1 - ALPHA) x forward_i)
   backward_i: best-so-far improvement per trial over its last WINDOW_ROUNDS x batch trials (what it just did);
   forward_i: time_i / trials_i, the optimistic guess that as many trials again would take the time to zero
   (Ansor's g/t term; Ansor's second bound, from similar tasks' FLOP/s, needs FLOP counts tasks do not carry).
   The `tasks_per_round` tasks with the largest gains are measured in one `measure` call (a runner may build
   several tasks' candidates together); with probability EPSILON each pick is a random live task instead (seeded).
4. Each round: the chosen tasks' strategies propose up to `batch` unmeasured schedules each; a task whose strategy
   has nothing left is done; every result, failures included, is a database row (search.measure_round).
5. Stop when no task is live, after `trials` new measurements, when the budget would be overrun (a round does
   not start when the elapsed time plus the mean round time so far exceeds `budget_seconds`), or when
   `should_stop()` says so before a round (a notebook's Stop button; the round in flight finishes and is recorded).
Reports per task: trials (new and recorded), best-so-far per trial, its default's time, the estimated
end-to-end gain weight x (untuned - time_i), untuned being prior_ms, else the default's time; per round, E.
Limits: a round's time is only predicted from earlier rounds, so the first one may overrun; a task with no ok
measurement and no prior counts as the median of the others' times; tasks are independent (no shared cost model).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from ortx.tune.fingerprint import HardwareFingerprint
from ortx.tune.records import TuningDatabase
from ortx.tune.runner import MeasureResult
from ortx.tune.search import Task, TaskProgress, TaskResult, measure_round
from ortx.tune.space import Schedule

ALPHA = 0.2  # Ansor's default weight of the backward (observed) gradient against the optimistic forward one
WINDOW_ROUNDS = 3  # Ansor's backward window, in rounds
EPSILON = 0.05  # Ansor's epsilon-greedy exploration


@dataclasses.dataclass(frozen=True)
class RoundReport:
    index: int  # 0-based
    elapsed_seconds: float  # since schedule_tasks started, after the round
    budget_seconds: float | None
    tasks: tuple[int, ...]  # indices of the tasks measured this round, largest expected gain first
    signatures: tuple[str, ...]  # theirs
    measured: int  # new trials this round
    task_trials: tuple[int, ...]  # per task in `tasks`: its trials so far (recorded + new)
    task_best_ms: tuple[float, ...]  # per task in `tasks`: its best ms so far (inf: no ok measurement)
    estimated_ms: float  # E after the round
    seconds: float  # this round's wall time: proposing, measuring, recording


@dataclasses.dataclass(frozen=True)
class ScheduledTask:
    result: TaskResult
    rounds: int  # rounds this call gave the task
    seconds: float  # wall time of the rounds it was measured in (shared rounds count for each of their tasks)
    default_ms: float | None  # its default schedule's measured time
    untuned_ms: float | None  # per call before tuning: prior_ms, else default_ms
    time_ms: float | None  # per call now, estimated (module docstring)
    done: bool  # its strategy had nothing left to propose

    @property
    def best_ms(self) -> float | None:
        return self.result.best.median_ms if self.result.best else None

    @property
    def trials(self) -> int:
        return self.result.measured + self.result.recorded

    @property
    def gain_ms(self) -> float | None:
        """Estimated end-to-end gain, weight x (untuned - time), or None without both; never below 0 (the untuned
        schedule stays available)."""
        if self.untuned_ms is None or self.time_ms is None:
            return None
        return self.result.task.weight * max(0.0, self.untuned_ms - self.time_ms)


@dataclasses.dataclass(frozen=True)
class ScheduleReport:
    tasks: tuple[ScheduledTask, ...]  # in the given order
    rounds: tuple[RoundReport, ...]
    seconds: float
    stopped: str  # "done" (no live task), "trials", "budget" or "requested" (should_stop)
    untuned_ms: float  # E with every task untuned (where nothing is known of that: as now)
    estimated_ms: float  # E at the end


class _Scheduled:
    """One task's scheduling state on top of its search progress."""

    def __init__(self, index: int, task: Task, strategy):
        self.index = index
        self.progress = TaskProgress(task, strategy)
        self.rounds = 0
        self.seconds = 0.0
        self.done = False

    @property
    def task(self) -> Task:
        return self.progress.task

    @property
    def trials(self) -> int:
        return len(self.progress.best_so_far)

    @property
    def best_ms(self) -> float | None:
        return self.progress.best.median_ms if self.progress.best else None

    def default_ms(self) -> float | None:
        default = self.task.default
        return self.progress.ok_ms.get(default) if default is not None else None

    def untuned_ms(self) -> float | None:
        return self.task.prior_ms if self.task.prior_ms is not None else self.default_ms()

    def time_ms(self) -> float | None:
        """Per call now, estimated (module docstring)."""
        best, default, prior = self.best_ms, self.default_ms(), self.task.prior_ms
        if best is not None and default is not None and prior is not None:
            return prior * best / default
        return best if best is not None else prior

    def propose(self, count: int) -> list[Schedule]:
        """Up to `count` unmeasured schedules: the default first while it is unmeasured, then the strategy's."""
        measured = self.progress.measured
        proposals = []
        default = self.task.default
        if count > 0 and default is not None and default not in measured and self.task.space.contains(default):
            proposals.append(default)
        if count > len(proposals):
            taken = set(proposals)
            proposals.extend(schedule for schedule in
                             self.progress.strategy.propose(count - len(proposals), measured | taken)
                             if schedule not in taken)
        return proposals[:count]

    def expected_gain(self, batch: int, fill_ms: float) -> float:
        """Step 3 of the module docstring: the weighted end-to-end ms one more round is expected to save."""
        history = self.progress.best_so_far
        now = self.time_ms()
        now = fill_ms if now is None else now
        window = WINDOW_ROUNDS * batch
        backward = 0.0
        if len(history) > window and math.isfinite(history[-1 - window]) and math.isfinite(history[-1]):
            backward = (history[-1 - window] - history[-1]) / window
        forward = now / max(self.trials, 1)
        return self.task.weight * batch * (ALPHA * backward + (1 - ALPHA) * forward)


def _fill_ms(states: Sequence[_Scheduled]) -> float:
    """The time assumed for a task with neither a measurement nor a prior: the median of the others' (else 1)."""
    known = [time_ms for state in states if (time_ms := state.time_ms()) is not None]
    return statistics.median(known) if known else 1.0


def _estimate(states: Sequence[_Scheduled], other_ms: float, fill_ms: float, *, untuned: bool = False) -> float:
    total = other_ms
    for state in states:
        value = state.untuned_ms() if untuned else None
        if value is None:
            value = state.time_ms()
        total += state.task.weight * (fill_ms if value is None else value)
    return total


def _pick(live: list[_Scheduled], count: int, batch: int, fill_ms: float, rng: np.random.Generator) -> list[_Scheduled]:
    """Steps 2 and 3: tasks without a trial first (largest weight x prior first), then by expected gain."""
    fresh = sorted((state for state in live if state.trials == 0),
                   key=lambda state: (-state.task.weight * (state.task.prior_ms if state.task.prior_ms is not None
                                                            else fill_ms), state.index))
    picks = fresh[:count]
    rest = [state for state in live if state.trials > 0]
    gains = {state.index: state.expected_gain(batch, fill_ms) for state in rest}
    while len(picks) < count and rest:
        if rng.random() < EPSILON:
            choice = rest[int(rng.integers(len(rest)))]
        else:
            choice = max(rest, key=lambda state: (gains[state.index], -state.index))
        picks.append(choice)
        rest.remove(choice)
    return picks


def schedule_tasks(tasks: Sequence[Task], strategies: Sequence, measure: Callable[[list[tuple[Task, Schedule]]],
                   list[MeasureResult]], database: TuningDatabase, fingerprint: HardwareFingerprint, *,
                   budget_seconds: float | None = None, trials: int | None = None, batch: int = 1,
                   tasks_per_round: int = 1, seed: int = 0, other_ms: float = 0.0, source: str = "scheduler",
                   on_round: Callable[[RoundReport], None] | None = None,
                   clock: Callable[[], float] = time.perf_counter,
                   should_stop: Callable[[], bool] | None = None) -> ScheduleReport:
    """`strategies[i]` searches `tasks[i]`; `measure` gets (task, schedule) pairs and returns one result each.
    `budget_seconds` / `trials` (new measurements): where to stop, None for no bound; `other_ms`: model time no
    task covers (added to the estimates); `on_round` sees each RoundReport as it happens; `clock` (seconds) is
    time.perf_counter except in tests."""
    if batch < 1 or tasks_per_round < 1:
        raise ValueError(f"schedule_tasks: batch ({batch}) and tasks_per_round ({tasks_per_round}) must be >= 1")
    start = clock()
    rng = np.random.default_rng(seed)
    database.add_fingerprint(fingerprint)
    states = [_Scheduled(index, task, strategy)
              for index, (task, strategy) in enumerate(zip(tasks, strategies, strict=True))]
    for state in states:
        state.progress.resume(database, fingerprint)
    rounds: list[RoundReport] = []
    new_trials = 0
    stopped = "done"
    while True:
        live = [state for state in states if not state.done]
        if not live:
            break
        if trials is not None and new_trials >= trials:
            stopped = "trials"
            break
        if should_stop is not None and should_stop():
            stopped = "requested"
            break
        elapsed = clock() - start
        mean_round = statistics.fmean(r.seconds for r in rounds) if rounds else 0.0
        if budget_seconds is not None and elapsed + mean_round > budget_seconds:
            stopped = "budget"
            break
        round_start = clock()
        fill_ms = _fill_ms(states)
        pairs, chosen = [], []
        for state in _pick(live, tasks_per_round, batch, fill_ms, rng):
            count = batch if trials is None else min(batch, trials - new_trials - len(pairs))
            proposals = state.propose(count)
            if not proposals:
                state.done = count > 0  # nothing left to propose (a trial limit is not the task's end)
                continue
            chosen.append(state)
            pairs.extend((state.progress, schedule) for schedule in proposals)
        if not pairs:
            continue  # every pick was exhausted: they are done now, pick again
        measure_round(pairs, measure, database, fingerprint, source)
        seconds = clock() - round_start
        new_trials += len(pairs)
        for state in chosen:
            state.rounds += 1
            state.seconds += seconds
        report = RoundReport(len(rounds), clock() - start, budget_seconds, tuple(state.index for state in chosen),
                             tuple(state.task.signature for state in chosen), len(pairs), tuple(state.trials for state in chosen),
                             tuple(state.best_ms if state.best_ms is not None else math.inf for state in chosen),
                             _estimate(states, other_ms, _fill_ms(states)), clock() - round_start)
        rounds.append(report)
        if on_round is not None:
            on_round(report)
    fill_ms = _fill_ms(states)
    scheduled = tuple(ScheduledTask(state.progress.result(), state.rounds, state.seconds, state.default_ms(),
                                    state.untuned_ms(), state.time_ms(), state.done) for state in states)
    return ScheduleReport(scheduled, tuple(rounds), clock() - start, stopped,
                          _estimate(states, other_ms, fill_ms, untuned=True), _estimate(states, other_ms, fill_ms))
