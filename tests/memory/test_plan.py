import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortx.memory.plan import ALIGNMENT, Lifetime, lower_bound_bytes, plan_offsets


def _assert_no_overlap(plan):
    items = list(plan.lifetimes)
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            if a.first <= b.last and b.first <= a.last:
                a0, b0 = plan.offsets[a.name], plan.offsets[b.name]
                assert a0 + a.nbytes <= b0 or b0 + b.nbytes <= a0, f"{a} and {b} overlap"


def test_hand_case_exact_offsets():
    lifetimes = [Lifetime("a", 128, 0, 1), Lifetime("b", 64, 1, 2), Lifetime("c", 128, 2, 3)]
    plan = plan_offsets(lifetimes)
    # a and c do not meet, so c reuses a's place; b lives with both and goes above them.
    assert plan.offsets == {"a": 0, "c": 0, "b": 128}
    assert plan.arena_bytes == 192
    assert plan.lower_bound_bytes == 192


def test_alignment_and_lower_bound():
    plan = plan_offsets([Lifetime("x", 10, 0, 0), Lifetime("y", 10, 0, 0)])
    assert all(offset % ALIGNMENT == 0 for offset in plan.offsets.values())
    assert plan.lower_bound_bytes == 20
    assert lower_bound_bytes([]) == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 30), st.integers(0, 10)), min_size=1, max_size=40))
def test_random_lifetimes_never_overlap_and_peak_at_most_sum(items):
    lifetimes = [Lifetime(f"t{i}", size, first, first + length) for i, (size, first, length) in enumerate(items)]
    plan = plan_offsets(lifetimes)
    _assert_no_overlap(plan)
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.naive_bytes
