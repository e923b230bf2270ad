"""In-place reuse: a step's output takes the bytes of an input that dies at that step, instead of new bytes.

Before: y = unary(x), x not read after this step -> x and y are two arena buffers live together at the step.
After:  y is planned as the same buffer as x (one lifetime from x's first use to y's last), no copy.
1. MAY_RUN_IN_PLACE lists, per kernel, the (input, output) buffer positions the kernel may alias exactly: the
   elementwise kernels read x[i] before writing y[i] at the same index, from one thread, so y == x is safe.
   A binary kernel's operand qualifies only when it is not broadcast (its strides are the output's).
2. A pair is merged when both buffers are arena buffers (never graph inputs/outputs, which are external, nor
   constants) of equal size, the output is first written at this step and named nowhere else in it, and the
   input's buffer (with everything already merged into it) is last used at this step.
Limits: exact aliasing only (never partial overlap); FusedConv/gemm residuals are not reused, because those kernels
may write partial sums to y before reading the residual; no rule reorders steps to make an input die sooner.
"""
from __future__ import annotations

import dataclasses

import numpy as np


def _contiguous(dims, strides) -> bool:
    expected, step = [], 1
    for size in reversed(dims):
        expected.append(step)
        step *= size
    return list(strides) == expected[::-1]


def _binary_pairs(ints) -> list[tuple[int, int]]:
    """binary_*: ints = [op, rank, dims[rank], a_strides[rank], b_strides[rank]]; buffers = [a, b, y]."""
    rank = int(ints[1])
    dims, a_strides, b_strides = ints[2:2 + rank], ints[2 + rank:2 + 2 * rank], ints[2 + 2 * rank:2 + 3 * rank]
    pairs = []
    if _contiguous(dims, a_strides):
        pairs.append((0, 2))
    if _contiguous(dims, b_strides):
        pairs.append((1, 2))
    return pairs


def _chain_pairs(ints) -> list[tuple[int, int]]:
    """elementwise_chain_f32: ints = [inputs, ops, temps, rank, dims[rank], strides[inputs][rank], ...];
    buffers = [inputs..., y]. Each chunk's ops read the inputs at the chunk's positions and only the last op
    writes y there, so y may be any input that is not broadcast."""
    inputs, rank = int(ints[0]), int(ints[3])
    dims = ints[4:4 + rank]
    return [(k, inputs) for k in range(inputs)
            if _contiguous(dims, ints[4 + rank + k * rank:4 + rank + (k + 1) * rank])]


# kernel name -> function(ints) -> [(input position, output position)] that may share bytes exactly.
MAY_RUN_IN_PLACE = {
    "unary_f32": lambda ints: [(0, 1)],
    "channel_affine_f32": lambda ints: [(0, 3)],
    "binary_f32": _binary_pairs,
    "binary_i64": _binary_pairs,
    "binary_i32": _binary_pairs,
    "elementwise_chain_f32": _chain_pairs,
}


@dataclasses.dataclass(frozen=True)
class InPlaceReuse:
    step: int
    kernel: str
    node: str
    input_buffer: int
    output_buffer: int
    nbytes: int


def find_in_place(steps, is_arena, nbytes, node_names) -> tuple[dict[int, int], list[InPlaceReuse]]:
    """`steps`: [(kernel name, ints, buffer indices)] in order. Returns (buffer -> representative buffer for every
    merged buffer, the reuses made)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for position, (_, _, buffers) in enumerate(steps):
        for index in buffers:
            first.setdefault(index, position)
            last[index] = position
    representative: dict[int, int] = {}
    group_last: dict[int, int] = {}  # representative -> last step any member is used

    def find(index: int) -> int:
        while index in representative:
            index = representative[index]
        return index

    reuses: list[InPlaceReuse] = []
    for position, (kernel, ints, buffers) in enumerate(steps):
        rule = MAY_RUN_IN_PLACE.get(kernel)
        if rule is None:
            continue
        for input_position, output_position in rule(np.asarray(ints)):
            source, target = buffers[input_position], buffers[output_position]
            root = find(source)
            if not (is_arena(source) and is_arena(target)) or source == target or target in representative:
                continue
            if nbytes(source) != nbytes(target) or first[target] != position:
                continue
            if sum(1 for index in buffers if index == target) != 1:
                continue
            if group_last.get(root, last[source]) != position:
                continue  # Case: the input (or a buffer merged into it) is still read later
            representative[target] = root
            group_last[root] = last[target]
            reuses.append(InPlaceReuse(position, kernel, node_names[position], source, target, nbytes(target)))
            break
    return {index: find(index) for index in representative}, reuses
