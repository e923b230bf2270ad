"""ortx.tune.space: literal spaces, the validity predicate, enumeration, seeded sampling, neighbours, features."""
import numpy as np
import pytest

from ortx.tune.space import Schedule, Space

SPACE = Space("tiles", {"tile_m": (1, 2, 4, 8), "tile_n": (4, 8), "order": ("mn", "nm")},
              valid=lambda s: s["tile_m"] * s["tile_n"] <= 16)


def test_enumerate_yields_every_valid_schedule_once():
    schedules = list(SPACE.enumerate())
    assert SPACE.size == 16
    assert len(schedules) == len(set(schedules)) == 10  # (4, 8), (8, 4), (8, 8) exceed 16, in both orders
    assert all(SPACE.contains(s) and s["tile_m"] * s["tile_n"] <= 16 for s in schedules)
    assert not SPACE.contains(Schedule.of({"tile_m": 8, "tile_n": 8, "order": "mn"}))
    assert not SPACE.contains(Schedule.of({"tile_m": 3, "tile_n": 4, "order": "mn"}))
    assert not SPACE.contains(Schedule.of({"tile_m": 1, "tile_n": 4}))


def test_sampling_is_valid_and_deterministic_with_a_seed():
    first = [SPACE.sample(np.random.default_rng(7)) for _ in range(3)]
    again = [SPACE.sample(np.random.default_rng(7)) for _ in range(3)]
    assert first == again
    rng = np.random.default_rng(0)
    samples = {SPACE.sample(rng) for _ in range(200)}
    assert samples == set(SPACE.enumerate())
    assert Space("none", {"a": (1, 2)}, valid=lambda s: False).sample(rng) is None


def test_neighbours_change_exactly_one_choice_and_stay_valid():
    schedule = Schedule.of({"tile_m": 2, "tile_n": 8, "order": "mn"})
    neighbours = SPACE.neighbours(schedule)
    assert {str(n) for n in neighbours} == {"order=mn, tile_m=1, tile_n=8", "order=nm, tile_m=2, tile_n=8",
                                            "order=mn, tile_m=2, tile_n=4"}
    for neighbour in neighbours:
        assert sum(neighbour[name] != schedule[name] for name in SPACE.choices) == 1


def test_features_have_one_width_and_log_terms_for_numbers():
    widths = {SPACE.features(s).shape for s in SPACE.enumerate()}
    assert widths == {(2 + 4 + 2 + 2 + 2,)}  # order one-hot; tile_m one-hot + log2, log2^2; tile_n the same
    features = SPACE.features(Schedule.of({"tile_m": 4, "tile_n": 4, "order": "nm"}))
    np.testing.assert_array_equal(features, [0, 1, 0, 0, 1, 0, 2, 4, 1, 0, 2, 4])


def test_a_choice_needs_a_non_empty_tuple_without_repeats():
    with pytest.raises(ValueError, match="non-empty tuple"):
        Space("bad", {"a": [1, 2]})
    with pytest.raises(ValueError, match="repeats"):
        Space("bad", {"a": (1, 1)})
