"""Identical initializers shared: one tensor per distinct (dtype, shape, bytes), every reader pointed at it.

Before: Conv(x, w1) ... Conv(y, w2) with w1, w2 byte-identical;  Reshape(a, s1), Reshape(b, s2) with s1 == s2
After:  both read w1 (and s1); w2 and s2 are gone.
Does not apply to: initializers that are graph inputs (overridable at run time) or graph outputs, and tensors over
`size_limit` elements. The work is onnx_ir's DeduplicateHashedInitializersPass (hash first, then full compare);
this wrapper measures what it removed. Sharing also lets common-subexpression elimination see equal inputs.
"""
from __future__ import annotations

import time

import onnx_ir as ir
import onnx_ir.passes.common

from ortx.passes._report import PassReport


def share_initializers(model: ir.Model, *, size_limit: int = 1 << 26) -> PassReport:
    start = time.perf_counter()
    before = {name: value for name, value in model.graph.initializers.items()}
    onnx_ir.passes.common.DeduplicateHashedInitializersPass(size_limit=size_limit)(model)
    removed = [value for name, value in before.items() if name not in model.graph.initializers]
    counts = {"initializers_shared": len(removed),
              "bytes_saved": sum(value.const_value.nbytes for value in removed if value.const_value is not None)}
    return PassReport(model, name="share_initializers", counts=counts, seconds=time.perf_counter() - start)
