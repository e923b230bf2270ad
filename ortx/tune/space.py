"""Schedule spaces as literal data: each tunable thing names its choices and the values each may take.

A Space is {choice name: tuple of allowed values} plus an optional validity predicate; a Schedule is one value per
choice. Searches get from a space: every valid schedule in a fixed order (small spaces), seeded random samples,
neighbours (one choice changed) and crossovers (each choice from either parent) for evolution, and `features`,
the numbers a cost model learns from (per choice: a one-hot of the value's position and, for numbers, log2 of the
value). Limit: sampling a space whose predicate rejects almost everything gives up after MAX_SAMPLE_ATTEMPTS.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Mapping

import numpy as np

MAX_SAMPLE_ATTEMPTS = 1000  # per sample: draws rejected by the predicate before a space counts as exhausted


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One value per named choice, sorted by name, so equal schedules are equal and hash alike."""

    choices: tuple[tuple[str, object], ...]

    @classmethod
    def of(cls, values: Mapping[str, object]) -> "Schedule":
        return cls(tuple(sorted(values.items())))

    def __getitem__(self, name: str):
        for key, value in self.choices:
            if key == name:
                return value
        raise KeyError(name)

    def as_dict(self) -> dict:
        return dict(self.choices)

    def replace(self, **changes) -> "Schedule":
        return Schedule.of({**self.as_dict(), **changes})

    def __str__(self) -> str:
        return ", ".join(f"{name}={value}" for name, value in self.choices)


@dataclasses.dataclass(frozen=True, eq=False)
class Space:
    """`choices`: name -> tuple of allowed values (literal data); `valid`: None or a predicate over a Schedule."""

    name: str
    choices: Mapping[str, tuple]
    valid: Callable[[Schedule], bool] | None = None
    # A family's own cost-model features (e.g. ortx.tune.gemm_space's, which carry the problem and the hardware)
    # in place of the generic ones, and the work one schedule does (the model predicts log(ms / work), so
    # records of another problem of the same family, with its own work, can be learnt from).
    featurize: Callable[[Schedule], np.ndarray] | None = None
    work: float = 1.0

    def __post_init__(self):
        for choice, values in self.choices.items():
            if not isinstance(values, tuple) or not values:
                raise ValueError(f"space {self.name}: choice {choice!r} needs a non-empty tuple of values")
            if len(set(values)) != len(values):
                raise ValueError(f"space {self.name}: choice {choice!r} repeats a value in {values}")
        object.__setattr__(self, "choices", dict(sorted(self.choices.items())))

    @property
    def size(self) -> int:
        """Schedules before the predicate: an upper bound on how many are valid."""
        return math.prod(len(values) for values in self.choices.values())

    def contains(self, schedule: Schedule) -> bool:
        values = schedule.as_dict()
        if set(values) != set(self.choices):
            return False
        if any(values[name] not in allowed for name, allowed in self.choices.items()):
            return False
        return self.valid is None or bool(self.valid(schedule))

    def enumerate(self) -> Iterator[Schedule]:
        """Every valid schedule, the last choice (by name) varying fastest."""
        names = list(self.choices)
        for values in itertools.product(*self.choices.values()):
            schedule = Schedule(tuple(zip(names, values)))
            if self.valid is None or self.valid(schedule):
                yield schedule

    def sample(self, rng: np.random.Generator) -> Schedule | None:
        """A uniformly drawn valid schedule, or None when MAX_SAMPLE_ATTEMPTS draws were all invalid."""
        for _ in range(MAX_SAMPLE_ATTEMPTS):
            schedule = Schedule(tuple((name, values[rng.integers(len(values))])
                                      for name, values in self.choices.items()))
            if self.valid is None or self.valid(schedule):
                return schedule
        return None

    def neighbours(self, schedule: Schedule) -> list[Schedule]:
        """The valid schedules that differ from `schedule` in exactly one choice."""
        found = []
        for name, values in self.choices.items():
            for value in values:
                if value != schedule[name]:
                    candidate = schedule.replace(**{name: value})
                    if self.valid is None or self.valid(candidate):
                        found.append(candidate)
        return found

    def crossover(self, first: Schedule, second: Schedule, rng: np.random.Generator) -> Schedule | None:
        """Each choice from either parent (fair coin); None when the child is invalid."""
        child = Schedule(tuple((name, (first if rng.integers(2) else second)[name]) for name in self.choices))
        return child if self.valid is None or self.valid(child) else None

    def features(self, schedule: Schedule) -> np.ndarray:
        """Per choice: one-hot of the value's position, then log2(value) and its square when every allowed value
        is a positive number (tile sizes, thread counts), so a linear model can fit a bowl over them; or the
        space's own `featurize`."""
        if self.featurize is not None:
            return np.asarray(self.featurize(schedule), np.float64)
        parts = []
        for name, values in self.choices.items():
            one_hot = np.zeros(len(values))
            one_hot[values.index(schedule[name])] = 1.0
            parts.append(one_hot)
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values):
                logarithm = math.log2(schedule[name])
                parts.append(np.array([logarithm, logarithm * logarithm]))
        return np.concatenate(parts) if parts else np.zeros(0)
