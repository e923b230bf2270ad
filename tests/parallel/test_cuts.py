"""ortx.parallel.cuts: crossing bytes and the balanced, fewest-bytes cut choice on hand cases."""
from __future__ import annotations

import numpy as np
import pytest

from ortx.parallel.cuts import COPY_BYTES_PER_SECOND, choose_cuts, crossing_bytes


def test_crossing_bytes_counts_each_tensor_between_its_definition_and_last_use():
    # t0: model input read by nodes 0 and 2; t1: node 0's output read by node 1; t2: node 2's output, a model output
    definitions = np.array([-1, 0, 2])
    last_uses = np.array([2, 1, 3])
    sizes = np.array([100.0, 10.0, 1.0])
    # position 0: t0; 1: t0 + t1; 2: t0 (t1 died at node 1); 3: t2 (the model output)
    assert crossing_bytes(definitions, last_uses, sizes, 3).tolist() == [100.0, 110.0, 100.0, 1.0]


def test_equal_costs_cut_in_the_middle():
    cuts = choose_cuts(np.ones(4) * 1e-3, np.zeros(5), 2, balance_slack=0.0)
    assert cuts == [2]


def test_three_stages_balance_the_slowest_stage():
    # costs 4 1 1 1 1 4 (ms): the best bottleneck is 4 ms with stages [4] [1 1 1 1] [4]
    costs = np.array([4, 1, 1, 1, 1, 4]) * 1e-3
    assert choose_cuts(costs, np.zeros(7), 3, balance_slack=0.0) == [1, 5]


def test_slack_trades_balance_for_fewer_bytes():
    costs = np.array([1.0, 1.0, 1.0, 1.0, 1.0]) * 1e-3
    cut_bytes = np.zeros(6)
    cut_bytes[2] = 1e6  # the balanced cut (2|3 vs 3|2) at position 2 or 3: position 2 crosses a megabyte
    cut_bytes[3] = 1e6
    cut_bytes[1] = cut_bytes[4] = 10.0
    # No slack: a 3-node stage is the bottleneck either way, and the cheap positions make a 4-node stage.
    assert choose_cuts(costs, cut_bytes, 2, balance_slack=0.0) in ([2], [3])
    # 40% slack allows the 4|1 split (4 ms vs the best 3 ms + 0.1 ms copy), which crosses 10 bytes.
    assert choose_cuts(costs, cut_bytes, 2, balance_slack=0.4) in ([1], [4])


def test_copy_time_counts_in_a_stage_cost():
    # One huge tensor crosses position 1: copying it costs more than the compute a balanced cut saves.
    costs = np.array([1e-3, 1e-3, 1e-3])
    cut_bytes = np.array([0.0, 1e-2 * COPY_BYTES_PER_SECOND, 0.0, 0.0])
    assert choose_cuts(costs, cut_bytes, 2, balance_slack=0.0) == [2]


@pytest.mark.parametrize("stages", [1, 2, 5])
def test_cuts_are_increasing_and_inside(stages):
    rng = np.random.default_rng(stages)
    costs = rng.uniform(1e-4, 1e-3, 20)
    cuts = choose_cuts(costs, rng.uniform(0, 1e5, 21), stages, balance_slack=0.05)
    assert len(cuts) == stages - 1
    assert cuts == sorted(set(cuts)) and all(0 < cut < 20 for cut in cuts)
