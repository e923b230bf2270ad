"""The search on made-up sensitivities and a made-up measure: chains drop dominated options, the upgrade order
follows error drop per byte, bisection returns the shortest measured prefix within the budget, all-fp32 when even
the most accurate mix fails, and latency costs within noise count as free."""
import pytest

from ortx.quantization.mixed_search import LATENCY_NOISE, assignment_after, layer_options, search, upgrade_sequence
from ortx.quantization.sensitivity import SensitivityRecord


def _records(table):
    """table: node -> {precision: (error, bytes)}."""
    return [SensitivityRecord(node, "Conv", precision, error, size)
            for node, options in table.items() for precision, (error, size) in options.items()]


TABLE = {
    "a": {"fp32": (0.0, 1000), "fp16": (0.001, 500), "bf16": (0.004, 500), "int8": (0.01, 260), "int4": (0.2, 140)},
    "b": {"fp32": (0.0, 4000), "fp16": (0.0, 2000), "int8": (0.002, 1010), "int4": (0.03, 520)},
    "c": {"fp32": (0.0, 400), "fp16": (0.002, 200), "int8": (0.003, 300), "int4": (0.05, 60)},
}


def test_chains_keep_only_cheaper_or_more_accurate_options():
    chains = layer_options(_records(TABLE), budget=0.1, objective="size")
    # a: int4 over budget; bf16 dominated by fp16. b: fp16 is exact, so fp32 is never worth its bytes.
    # c: int8 costs more than fp16 and is less accurate.
    assert {node: [option.precision for option in chain] for node, chain in chains.items()} == {
        "a": ["int8", "fp16", "fp32"], "b": ["int4", "int8", "fp16"], "c": ["int4", "fp16", "fp32"]}
    sequence = upgrade_sequence(chains)
    # first move: b int4 -> int8 drops 0.028 for 490 bytes (5.7e-5 per byte), c int4 -> fp16 0.048 for 140 (3.4e-4)
    assert sequence[0] == ("c", 1)
    assert assignment_after(chains, sequence, 0) == {"a": "int8", "b": "int4", "c": "int4"}
    assert set(assignment_after(chains, sequence, len(sequence)).values()) <= {"fp16", "fp32"}


def test_bisection_finds_the_shortest_prefix_within_budget():
    records = _records(TABLE)
    chains = layer_options(records, 0.05, "size")
    sequence = upgrade_sequence(chains)
    errors = {"int4": 0.04, "int8": 0.01, "fp16": 0.001, "fp32": 0.0}
    measured = []

    def measure(assignment):   # errors add here, so the cheapest-alone mix exceeds the budget
        measured.append(dict(assignment))
        return sum(errors[precision] for precision in assignment.values())

    result = search(records, 0.03, "size", measure)
    assert result.error <= 0.03 and not result.fell_back_to_fp32
    shortest = min(k for k in range(len(sequence) + 1)
                   if sum(errors[p] for p in assignment_after(chains, sequence, k).values()) <= 0.03)
    assert result.assignment == assignment_after(chains, sequence, shortest)
    assert len(measured) <= len(sequence).bit_length() + 2 and not result.steps[0].within_budget


def test_all_fp32_when_even_the_most_accurate_mix_fails():
    records = _records(TABLE)
    result = search(records, 0.01, "size", lambda assignment: 0.0 if set(assignment.values()) == {"fp32"} else 1.0)
    assert result.fell_back_to_fp32 and set(result.assignment.values()) == {"fp32"} and result.error == 0.0


def test_latency_costs_within_noise_are_free_and_bytes_decide():
    records = [SensitivityRecord("a", "Conv", "fp32", 0.0, 1000),
               SensitivityRecord("a", "Conv", "fp16", 0.001, 500, 10.0 * (1 + LATENCY_NOISE / 2), 10.0),
               SensitivityRecord("a", "Conv", "int8", 0.01, 260, 13.0, 10.0),
               SensitivityRecord("a", "Conv", "int4", 0.02, 140, 9.0, 10.0)]
    chains = layer_options(records, 0.1, "latency")
    # int4 saves 1 ms; fp16 is as fast as fp32 (within noise) and smaller, so it sorts before fp32; int8 adds 3 ms,
    # more than fp16 and fp32 cost, while less accurate than both: dropped
    assert [option.precision for option in chains["a"]] == ["int4", "fp16", "fp32"]
    with pytest.raises(ValueError, match="objective must be one of size, latency"):
        search(records, 0.1, "speed", lambda assignment: 0.0)


def test_latency_objective_keeps_the_fastest_measured_mix_within_budget():
    records = [SensitivityRecord(node, "Conv", precision, error, size, fp32_ms * factor, fp32_ms)
               for node in ("a", "b") for precision, error, size, factor, fp32_ms in
               (("fp32", 0.0, 1000, 1.0, 10.0), ("fp16", 0.001, 500, 1.0, 10.0), ("int8", 0.01, 260, 0.8, 10.0))]
    timed = []

    def latency(assignment):   # each int8 layer is faster alone, together they are slower than fp32
        timed.append(dict(assignment))
        return 1.5 if list(assignment.values()).count("int8") == 2 else 1.0

    result = search(records, 0.05, "latency", lambda assignment: 0.001 * len(assignment), latency)
    assert set(result.assignment.values()) <= {"fp16", "fp32"} and len(timed) == 2
    assert [step.latency_ratio for step in result.steps] == [1.5, 1.0]


def test_latency_objective_takes_the_smallest_of_equally_fast_mixes():
    records = [SensitivityRecord(node, "Conv", precision, error, size, 10.0, 10.0)
               for node in ("a", "b") for precision, error, size in
               (("fp32", 0.0, 1000), ("fp16", 0.001, 500), ("int8", 0.01, 260))]
    # the mixes with fewer upgrades are smaller; all run within noise of each other
    ratios = iter([1.0 + LATENCY_NOISE / 2, 1.0, 1.0 + LATENCY_NOISE / 3, 1.0])
    result = search(records, 0.05, "latency", lambda assignment: 0.001, lambda assignment: next(ratios, 1.0))
    assert result.assignment == {"a": "int8", "b": "int8"}
