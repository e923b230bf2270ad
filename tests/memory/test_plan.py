"""ortx.memory planners: exact offsets on hand cases, exactness of branch and bound against brute force, and the
overlap invariant plus lower_bound <= arena <= naive on random lifetimes."""
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortx.memory.exact import branch_and_bound
from ortx.memory.greedy import ORDERS, lowest_offset, place
from ortx.memory.lifetimes import (ALIGNMENT, Lifetime, OverlapError, align, check_no_overlap, conflict_lists,
                                   lower_bound_bytes)
from ortx.memory.plan import plan_offsets


def _greedy_by_size_arena(lifetimes) -> int:
    conflicts = conflict_lists(lifetimes)
    offsets = place(lifetimes, ORDERS["size"](lifetimes, conflicts), conflicts)
    return max(offset + align(t.nbytes) for offset, t in zip(offsets, lifetimes))


def _brute_force_arena(lifetimes) -> int:
    """The smallest arena over every placement order (each buffer at its lowest free offset)."""
    conflicts = conflict_lists(lifetimes)
    best = None
    for order in itertools.permutations(range(len(lifetimes))):
        offsets = place(lifetimes, list(order), conflicts)
        arena = max(offset + align(t.nbytes) for offset, t in zip(offsets, lifetimes))
        best = arena if best is None else min(best, arena)
    return best


def test_hand_case_exact_offsets():
    lifetimes = [Lifetime("a", 128, 0, 1), Lifetime("b", 64, 1, 2), Lifetime("c", 128, 2, 3)]
    plan = plan_offsets(lifetimes)
    # a and c do not meet, so c reuses a's place; b lives with both and goes above them.
    assert plan.offsets == {"a": 0, "c": 0, "b": 128}
    assert plan.arena_bytes == 192
    assert plan.lower_bound_bytes == 192
    check_no_overlap(plan.lifetimes, plan.offsets)


def test_hand_case_where_every_greedy_order_loses_and_branch_and_bound_reaches_the_lower_bound():
    lifetimes = [Lifetime("a", 64, 2, 3), Lifetime("b", 256, 4, 5), Lifetime("c", 128, 3, 4), Lifetime("d", 256, 1, 2)]
    # Greedy by size puts b and d at 0, then c at 256 and a above c (it meets d and c): 448 bytes.
    assert _greedy_by_size_arena(lifetimes) == 448
    plan = plan_offsets(lifetimes)
    assert plan.algorithm == "branch_and_bound"
    assert plan.offsets == {"a": 256, "b": 128, "c": 0, "d": 0}
    assert plan.arena_bytes == plan.lower_bound_bytes == 384
    assert plan.optimal
    assert dict(plan.candidates)["greedy_by_size_first_fit"] == 448
    check_no_overlap(plan.lifetimes, plan.offsets)


def test_best_fit_takes_the_smallest_gap():
    ranges = [(0, 64), (256, 320), (384, 512)]  # gaps: [64, 256) of 192 bytes and [320, 384) of 64
    assert lowest_offset(64, ranges) == 64
    assert lowest_offset(64, ranges, best_fit=True) == 320
    assert lowest_offset(128, ranges, best_fit=True) == 64
    assert lowest_offset(256, ranges, best_fit=True) == 512


def test_alignment_and_lower_bound():
    plan = plan_offsets([Lifetime("x", 10, 0, 0), Lifetime("y", 10, 0, 0)])
    assert all(offset % ALIGNMENT == 0 for offset in plan.offsets.values())
    assert plan.offsets == {"x": 0, "y": 64}
    assert plan.arena_bytes == 128
    assert plan.lower_bound_bytes == 20
    assert lower_bound_bytes([]) == 0
    assert plan_offsets([]).arena_bytes == 0


def test_plan_prints_as_a_table_sorted_by_offset():
    plan = plan_offsets([Lifetime("a", 128, 0, 1), Lifetime("b", 64, 1, 2), Lifetime("c", 128, 2, 3)])
    lines = str(plan).splitlines()
    assert lines[0].startswith("arena 192 B by greedy_by_size_first_fit (lower bound 192 B, ratio 1.000, optimal")
    assert [line.split()[-1] for line in lines[2:]] == ["a", "c", "b"]
    assert lines[4].split()[:3] == ["128", "64", "1-2"]


def test_overlap_check_names_the_two_buffers():
    lifetimes = [Lifetime("a", 128, 0, 1), Lifetime("b", 64, 1, 2)]
    with pytest.raises(OverlapError, match="name='a'.*name='b'"):
        check_no_overlap(lifetimes, {"a": 0, "b": 64})
    check_no_overlap(lifetimes, {"a": 0, "b": 128})
    check_no_overlap([Lifetime("a", 128, 0, 1), Lifetime("c", 128, 2, 3)], {"a": 0, "c": 0})


def test_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="unique"):
        plan_offsets([Lifetime("a", 1, 0, 0), Lifetime("a", 1, 1, 1)])


_LIFETIMES = st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 30), st.integers(0, 10)), min_size=1,
                      max_size=40)


@settings(max_examples=80, deadline=None)
@given(_LIFETIMES)
def test_random_lifetimes_never_overlap_and_lie_between_lower_bound_and_naive(items):
    lifetimes = [Lifetime(f"t{i}", size, first, first + length) for i, (size, first, length) in enumerate(items)]
    plan = plan_offsets(lifetimes)
    check_no_overlap(plan.lifetimes, plan.offsets)
    assert all(offset % ALIGNMENT == 0 for offset in plan.offsets.values())
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.naive_bytes
    # best of: never worse than any single planner, in particular greedy by size
    assert plan.arena_bytes == min(arena for _, arena in plan.candidates)
    assert plan.arena_bytes <= _greedy_by_size_arena(lifetimes)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(0, 6), st.integers(0, 3)), min_size=1, max_size=6))
def test_branch_and_bound_matches_brute_force_on_small_problems(items):
    lifetimes = [Lifetime(f"t{i}", 64 * size, first, first + length) for i, (size, first, length) in
                 enumerate(items)]
    plan = plan_offsets(lifetimes)
    assert plan.optimal
    assert plan.arena_bytes == _brute_force_arena(lifetimes)
    check_no_overlap(plan.lifetimes, plan.offsets)


def test_branch_and_bound_node_limit_is_reported_as_not_proved():
    lifetimes = [Lifetime(f"t{i}", 64 * (1 + (i * 7) % 5), i % 4, i % 4 + 2) for i in range(10)]
    seed = list(range(10))
    _, arena, proved = branch_and_bound(lifetimes, seed, 10 ** 9, node_limit=3)
    assert not proved
    assert arena == 10 ** 9  # three nodes never reach a leaf: nothing beat the seed


def test_local_search_repairs_every_copy_of_the_hand_case_above_the_exact_size_limit():
    base = [("a", 64, 2, 3), ("b", 256, 4, 5), ("c", 128, 3, 4), ("d", 256, 1, 2)]
    # four time-disjoint copies: 16 buffers, too many for full branch and bound; every greedy order loses
    lifetimes = [Lifetime(f"{name}{copy}", size, first + 10 * copy, last + 10 * copy)
                 for copy in range(4) for name, size, first, last in base]
    plan = plan_offsets(lifetimes)
    assert dict(plan.candidates)["greedy_by_size_first_fit"] == 448
    assert plan.algorithm == "local_search"
    assert plan.arena_bytes == plan.lower_bound_bytes == 384
    assert {plan.offsets[f"c{copy}"] for copy in range(4)} == {0}
    check_no_overlap(plan.lifetimes, plan.offsets)


def test_large_problem_plans_without_deep_recursion():
    # 1500 buffers: past the local branch and bound's recursion cap, the local search budget shrinks
    lifetimes = [Lifetime(f"t{i}", 64 * (1 + (i * 37) % 97), i // 2, i // 2 + (i * 13) % 9) for i in range(1500)]
    plan = plan_offsets(lifetimes)
    check_no_overlap(plan.lifetimes, plan.offsets)
    assert "branch_and_bound_local" not in dict(plan.candidates)
    assert plan.lower_bound_bytes <= plan.arena_bytes <= 1.05 * plan.lower_bound_bytes
