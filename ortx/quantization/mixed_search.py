"""The mixed-precision search: a precision per layer, minimising size or latency, within a measured error budget.

1. Options per layer: the precisions whose error alone (sensitivity.py) is within the budget; fp32 always (error
   0). Sorted by cost (bytes; for objective "latency", the median ms the option adds to the fp32 model, measured
   interleaved with it, then bytes), an option is kept only if it is strictly more accurate than every cheaper
   one kept: each layer gets a chain cheapest -> most accurate.
2. Start with every layer at its cheapest option. The upgrades (a layer one step up its chain) are ordered
   greedily by sensitivity-per-cost: (error drop) / (cost increase), recomputed for a layer after each of its
   steps, giving one sequence of moves; prefix k of the sequence is the assignment after k upgrades.
3. Errors do not add, so every assignment is judged by measuring the assembled model. The search looks for the
   shortest prefix within the budget by bisection over k (measure k = 0 first; the full sequence is every layer at
   its most accurate option), about log2(moves) + 2 measured models instead of one per move.
4. If even the full sequence measures over the budget (layers whose errors are exact alone but not together),
   the answer is every layer fp32, whose error is 0 by definition.
5. Objective latency: latencies do not add either (on PP-OCR cls, ten int8 layers that each cost ORT ~nothing
   alone made it 7x slower together), so the full sequence (every layer at its most accurate option, about fp32's
   speed) is measured too, every measured mix within the budget is timed against fp32, and the smallest of those
   within LATENCY_NOISE of the fastest is kept.
Limits: bisection assumes the measured error falls as upgrades are applied; where it does not, the answer still
holds the budget (it was measured) but a shorter prefix may have held it too. Latency costs come from one layer
changed at a time, so they are noisy where a layer's share of the run time is below the host's noise.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from typing import Callable

from ortx.quantization.precisions import PRECISIONS
from ortx.quantization.sensitivity import SensitivityRecord

OBJECTIVES = ("size", "latency")
# Two medians of the same model, interleaved in blocks on this shared 2-core host, differ by up to a few percent;
# a latency change below this share of the fp32 median is not told apart from noise.
LATENCY_NOISE = 0.03


@dataclasses.dataclass(frozen=True)
class Option:
    precision: str
    error: float
    bytes: int
    cost: tuple[float, float]


@dataclasses.dataclass
class SearchStep:
    upgrades: int          # prefix length of the upgrade sequence
    error: float           # measured on the assembled model
    within_budget: bool
    counts: dict[str, int]  # precision -> layers
    latency_ratio: float | None = None   # objective latency: median of the mix / median of fp32, interleaved


@dataclasses.dataclass
class SearchResult:
    assignment: dict[str, str]
    error: float
    steps: list[SearchStep]
    upgrades_available: int
    fell_back_to_fp32: bool


def _cost(record: SensitivityRecord, objective: str) -> tuple[float, float]:
    """size: (bytes, 0). latency: (ms added to the fp32 model's median, bytes), where fp32 adds 0 and a change
    within LATENCY_NOISE of the fp32 median counts as 0 (so bytes decide between equally fast options)."""
    if objective != "latency":
        return (float(record.bytes), 0.0)
    if record.precision == "fp32":
        return (0.0, float(record.bytes))
    if record.latency_ms is None or record.fp32_latency_ms is None:
        return (math.inf, float(record.bytes))
    added = record.latency_ms - record.fp32_latency_ms
    return (0.0 if abs(added) < LATENCY_NOISE * record.fp32_latency_ms else added, float(record.bytes))


def layer_options(records: list[SensitivityRecord], budget: float, objective: str) -> dict[str, list[Option]]:
    """Step 1: node -> its chain of options, cheapest first."""
    by_node: dict[str, list[Option]] = {}
    for record in records:
        if record.precision == "fp32" or record.error <= budget:
            error = 0.0 if record.precision == "fp32" else record.error
            by_node.setdefault(record.node, []).append(
                Option(record.precision, error, record.bytes, _cost(record, objective)))
    chains = {}
    for node, options in by_node.items():
        options.sort(key=lambda option: (option.cost, option.error, PRECISIONS.index(option.precision)))
        chain: list[Option] = []
        for option in options:
            if not chain or option.error < chain[-1].error:
                chain.append(option)
        chains[node] = chain
    return chains


def upgrade_sequence(chains: dict[str, list[Option]]) -> list[tuple[str, int]]:
    """Step 2: (node, chain index after the move) in greedy order of error drop per cost increase."""
    heap = []

    def push(node: str, index: int) -> None:
        chain = chains[node]
        if index + 1 < len(chain):
            drop = chain[index].error - chain[index + 1].error
            increase = max(chain[index + 1].cost[0] - chain[index].cost[0], 1e-9)
            heapq.heappush(heap, (-drop / increase, node, index + 1))

    for node in chains:
        push(node, 0)
    sequence = []
    while heap:
        _, node, index = heapq.heappop(heap)
        sequence.append((node, index))
        push(node, index)
    return sequence


def assignment_after(chains: dict[str, list[Option]], sequence: list[tuple[str, int]], upgrades: int
                     ) -> dict[str, str]:
    position = {node: 0 for node in chains}
    for node, index in sequence[:upgrades]:
        position[node] = index
    return {node: chains[node][index].precision for node, index in position.items()}


def _bytes(chains: dict[str, list[Option]], assignment: dict[str, str]) -> int:
    return sum(next(option.bytes for option in chains[node] if option.precision == precision)
               for node, precision in assignment.items())


def search(records: list[SensitivityRecord], budget: float, objective: str,
           measure: Callable[[dict[str, str]], float],
           measure_latency: Callable[[dict[str, str]], float] | None = None) -> SearchResult:
    """Steps 2-5; `measure(assignment)` returns the error of the assembled model, `measure_latency(assignment)`
    (objective latency) its median latency over fp32's."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    chains = layer_options(records, budget, objective)
    sequence = upgrade_sequence(chains)
    steps: list[SearchStep] = []
    measured: dict[int, float] = {}

    def evaluate(upgrades: int) -> float:
        if upgrades not in measured:
            assignment = assignment_after(chains, sequence, upgrades)
            measured[upgrades] = measure(assignment)
            counts = {precision: list(assignment.values()).count(precision) for precision in PRECISIONS
                      if precision in assignment.values()}
            steps.append(SearchStep(upgrades, measured[upgrades], measured[upgrades] <= budget, counts))
        return measured[upgrades]

    timed = objective == "latency" and measure_latency is not None
    if evaluate(0) > budget or timed:
        if evaluate(len(sequence)) > budget:
            return SearchResult({node: "fp32" for node in chains}, 0.0, steps, len(sequence), True)
    holding = 0
    if measured[0] > budget:
        failing, holding = 0, len(sequence)
        while holding - failing > 1:
            middle = (failing + holding) // 2
            if evaluate(middle) <= budget:
                holding = middle
            else:
                failing = middle
    if timed:   # step 5
        within = [step for step in steps if step.within_budget]
        for step in within:
            step.latency_ratio = measure_latency(assignment_after(chains, sequence, step.upgrades))
        fastest = min(step.latency_ratio for step in within)
        holding = min((step for step in within if step.latency_ratio <= fastest + LATENCY_NOISE),
                      key=lambda step: _bytes(chains, assignment_after(chains, sequence, step.upgrades))).upgrades
    return SearchResult(assignment_after(chains, sequence, holding), measured[holding], steps, len(sequence), False)
