"""Common-subexpression elimination: a node computing what an earlier node already computed is dropped.

Before: a = Relu(x); b = Relu(x); y = Add(a, b)      (same op, domain, attributes and input values)
After:  a = Relu(x); y = Add(a, a)
Does not apply to: random ops, If/Loop/Scan (graph attributes), nodes with tensor attributes over `size_limit`
elements; inputs must be the same values, so run share_initializers first to make equal weights the same value.
The work is onnx_ir's CommonSubexpressionEliminationPass (one topological sweep, so duplicates of duplicates go in
the same sweep), repeated while it reports a change; this wrapper counts the nodes removed.
"""
from __future__ import annotations

import time

import onnx_ir as ir
import onnx_ir.passes.common

from ortx.passes._report import PassReport

# A second sweep finds nothing in practice; the bound only guards against a library change that loops.
MAX_ROUNDS = 16


def eliminate_common_subexpressions(model: ir.Model, *, size_limit: int = 1 << 10) -> PassReport:
    start = time.perf_counter()
    nodes_before = len(model.graph)
    cse = onnx_ir.passes.common.CommonSubexpressionEliminationPass(size_limit=size_limit)
    for _ in range(MAX_ROUNDS):
        if not cse(model).modified:
            break
    # The library keeps a graph output's name by inserting an Identity when the survivor is also a graph output.
    counts = {"nodes_removed": nodes_before - len(model.graph)}
    return PassReport(model, name="eliminate_common_subexpressions", counts=counts,
                      seconds=time.perf_counter() - start)
