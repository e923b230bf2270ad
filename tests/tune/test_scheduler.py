"""ortx.tune.scheduler with fake measure functions over synthetic spaces whose best per task is known: trials go
where weight and headroom are, first rounds largest share first and default first, the time and trial budgets
stop it, records resume it, a seed fixes it."""
import math

import pytest

from ortx.tune.fingerprint import current
from ortx.tune.records import TuningDatabase
from ortx.tune.runner import MeasureResult
from ortx.tune.scheduler import schedule_tasks
from ortx.tune.search import EvolutionarySearch, Exhaustive, RandomSearch, Task
from ortx.tune.space import Schedule, Space

SPACE = Space("synthetic", {"tile_m": (1, 2, 4, 8, 16, 32, 64, 128), "tile_n": (1, 2, 4, 8, 16, 32, 64, 128),
                            "unroll": (1, 2, 4, 8)})
DEFAULT = Schedule.of({"tile_m": 8, "tile_n": 8, "unroll": 1})
KNOWN_BEST = Schedule.of({"tile_m": 32, "tile_n": 8, "unroll": 4})


def bowl_ms(schedule, best_ms: float = 1.0) -> float:
    """One minimum, best_ms at KNOWN_BEST: a bowl in log2 of each tile, a kink in unroll."""
    return best_ms * math.exp(0.3 * (math.log2(schedule["tile_m"]) - 5) ** 2
                              + 0.2 * (math.log2(schedule["tile_n"]) - 3) ** 2
                              + 0.5 * abs(math.log2(schedule["unroll"]) - 2))


class FakeMeasure:
    """Times from a cost per task signature; logs every call; advances `clock` by `seconds_per_trial`."""

    def __init__(self, costs, seconds_per_trial: float = 0.0):
        self.costs = costs
        self.calls: list[list[tuple[str, Schedule]]] = []
        self.now = 0.0
        self.seconds_per_trial = seconds_per_trial

    def clock(self) -> float:
        return self.now

    def __call__(self, pairs):
        self.calls.append([(task.signature, schedule) for task, schedule in pairs])
        self.now += self.seconds_per_trial * len(pairs)
        results = []
        for task, schedule in pairs:
            cost = self.costs[task.signature](schedule)
            results.append(MeasureResult(schedule, "ok", cost) if cost is not None else
                           MeasureResult(schedule, "wrong_result", None, "differs from the reference"))
        return results

    def trials(self, signature: str) -> int:
        return sum(1 for call in self.calls for name, _ in call if name == signature)


@pytest.fixture
def database(tmp_path):
    with TuningDatabase(tmp_path / "tuning.sqlite") as opened:
        yield opened


def three_tasks():
    """big: weight 8, 9x headroom over its default; small: the same space, weight 1; flat: weight 8, every
    schedule as fast as big's best (nothing to gain)."""
    tasks = [Task("big", SPACE, "test", weight=8, default=DEFAULT),
             Task("small", SPACE, "test", weight=1, default=DEFAULT),
             Task("flat", SPACE, "test", weight=8, default=DEFAULT)]
    costs = {"big": bowl_ms, "small": bowl_ms, "flat": lambda schedule: 1.0}
    return tasks, costs


def run(tasks, costs, database, *, seed=0, strategy=EvolutionarySearch, measure=None, **options):
    measure = measure or FakeMeasure(costs)
    report = schedule_tasks(tasks, [strategy(task.space, seed=seed) for task in tasks], measure, database,
                            current(), seed=seed, clock=measure.clock, **options)
    return report, measure


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_more_trials_go_to_the_task_with_more_weight_and_headroom(tmp_path, seed):
    tasks, costs = three_tasks()
    with TuningDatabase(tmp_path / f"{seed}.sqlite") as database:
        report, measure = run(tasks, costs, database, seed=seed, trials=96, batch=4)
    big, small, flat = report.tasks
    assert report.stopped == "trials" and sum(task.trials for task in report.tasks) == 96
    # >= 2x: the guided search finds big's known best within its first rounds, after which big's gradient is 0
    # and the optimistic term spreads trials (seed 1: 40, 20, 36)
    assert big.trials > flat.trials and big.trials >= 2 * small.trials, [t.trials for t in report.tasks]
    assert big.result.best.schedule == KNOWN_BEST and big.best_ms == 1.0
    assert big.default_ms == pytest.approx(bowl_ms(DEFAULT)) and flat.default_ms == 1.0
    assert big.gain_ms == pytest.approx(8 * (bowl_ms(DEFAULT) - 1.0)) and flat.gain_ms == 0.0
    assert [measure.trials(name) for name in ("big", "small", "flat")] == [t.result.measured for t in report.tasks]


def test_first_rounds_take_the_largest_share_first_and_start_with_the_default(database):
    """Priors (a profile) order the first rounds: weight x prior, largest first; the default is measured first."""
    tasks = [Task("a", SPACE, "test", weight=1, default=DEFAULT, prior_ms=2.0),
             Task("b", SPACE, "test", weight=4, default=DEFAULT, prior_ms=1.0),
             Task("c", SPACE, "test", weight=2, default=DEFAULT, prior_ms=3.0)]
    costs = {name: bowl_ms for name in "abc"}
    report, measure = run(tasks, costs, database, trials=12, batch=2)
    assert [call[0][0] for call in measure.calls[:3]] == ["c", "b", "a"]  # 6, 4, 2 ms of the model
    assert all(call[0][1] == DEFAULT for call in measure.calls[:3])
    assert [len(call) for call in measure.calls] == [2] * 6
    # The estimate: each prior scaled by best/default (the prior was profiled apart from the rounds).
    for task in report.tasks:
        prior = task.result.task.prior_ms
        assert task.untuned_ms == prior
        assert task.time_ms == pytest.approx(prior * task.best_ms / task.default_ms)
    assert report.untuned_ms == pytest.approx(1 * 2.0 + 4 * 1.0 + 2 * 3.0)
    assert report.estimated_ms == pytest.approx(sum(t.result.task.weight * t.time_ms for t in report.tasks))
    assert report.estimated_ms < report.untuned_ms


def test_stops_before_a_round_would_overrun_the_time_budget(database):
    tasks, costs = three_tasks()
    measure = FakeMeasure(costs, seconds_per_trial=1.0)  # a round of batch 2 takes 2 s of the fake clock
    report, _ = run(tasks, costs, database, measure=measure, budget_seconds=11.0, batch=2)
    assert report.stopped == "budget"
    assert len(report.rounds) == 5 and report.seconds == 10.0  # a sixth round would end at 12 s
    assert [r.elapsed_seconds for r in report.rounds] == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert all(r.budget_seconds == 11.0 and r.seconds == 2.0 for r in report.rounds)


def test_stops_before_the_next_round_when_asked(database):
    """A notebook's Stop button: should_stop is asked before every round; the round in flight is kept."""
    tasks, costs = three_tasks()
    asked = []
    report, measure = run(tasks, costs, database, batch=2, should_stop=lambda: asked.append(1) or len(asked) > 3)
    assert report.stopped == "requested"
    assert len(report.rounds) == 3 and len(measure.calls) == 3


def test_resumes_from_records_without_measuring_them_again(database):
    tasks, costs = three_tasks()
    first, first_measure = run(tasks, costs, database, trials=30, batch=3)
    measured = {(name, schedule) for call in first_measure.calls for name, schedule in call}
    second, second_measure = run(tasks, costs, database, trials=30, batch=3)
    again = [(name, schedule) for call in second_measure.calls for name, schedule in call]
    assert len(again) == 30 and not measured & set(again)
    assert [t.result.recorded for t in second.tasks] == [t.result.measured for t in first.tasks]
    for before, after in zip(first.tasks, second.tasks):
        assert after.best_ms <= before.best_ms and after.default_ms == before.default_ms
    assert len(database.records(template="test")) == 60


def test_exhaustive_tasks_end_done_with_every_schedule_measured_once(database):
    small = Space("small", {"threads": (1, 2, 4)})
    tasks = [Task(name, small, "test", weight=weight, default=Schedule.of({"threads": 4}))
             for name, weight in (("x", 1), ("y", 3))]
    costs = {"x": lambda s: 1.0 / s["threads"], "y": lambda s: float(s["threads"])}
    report, measure = run(tasks, costs, database, strategy=lambda space, seed: Exhaustive(space), batch=3,
                          tasks_per_round=2)
    assert report.stopped == "done" and all(task.done for task in report.tasks)
    assert len(measure.calls) == 1 and len(measure.calls[0]) == 6  # both tasks, all three counts, one call
    assert [t.result.best.schedule["threads"] for t in report.tasks] == [4, 1]
    assert [t.gain_ms for t in report.tasks] == [0.0, 3 * (4.0 - 1.0)]


def test_a_task_whose_candidates_all_fail_gets_rows_and_no_gain(database):
    tasks = [Task("broken", SPACE, "test", weight=5, default=DEFAULT), Task("fine", SPACE, "test", default=DEFAULT)]
    costs = {"broken": lambda schedule: None, "fine": bowl_ms}
    report, _ = run(tasks, costs, database, trials=20, batch=2, strategy=RandomSearch)
    broken, fine = report.tasks
    assert broken.result.best is None and broken.gain_ms is None and broken.result.failures == broken.trials > 0
    rows = database.records("broken", current().key, "test")
    assert len(rows) == broken.trials and {r.status for r in rows} == {"wrong_result"}
    assert fine.best_ms is not None


def test_the_same_seed_measures_the_same_schedules_in_the_same_order(tmp_path):
    tasks, costs = three_tasks()
    orders = []
    for attempt, seed in enumerate((4, 4, 5)):
        with TuningDatabase(tmp_path / f"{attempt}.sqlite") as database:
            _, measure = run(tasks, costs, database, seed=seed, trials=48, batch=4)
        orders.append(measure.calls)
    assert orders[0] == orders[1] and orders[0] != orders[2]


def test_round_reports_reach_the_callback_as_they_happen(database):
    tasks, costs = three_tasks()
    seen = []
    report, _ = run(tasks, costs, database, trials=16, batch=4, on_round=seen.append)
    assert seen == list(report.rounds) and [r.index for r in seen] == [0, 1, 2, 3]
    assert all(r.signatures == tuple(tasks[i].signature for i in r.tasks) for r in seen)
    assert seen[-1].estimated_ms == pytest.approx(report.estimated_ms)


def test_bad_batch_is_an_error_naming_it(database):
    tasks, costs = three_tasks()
    with pytest.raises(ValueError, match="batch"):
        run(tasks, costs, database, batch=0)
