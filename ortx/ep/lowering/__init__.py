"""What OrtxEP can run, as a literal table: (domain, op_type) -> (check, lower).

`check(node) -> str | None` returns the reason a node cannot be claimed (None: claimable); `lower(node, builder)`
emits kernel steps through a `SegmentBuilder` (ortx/ep/segment_builder.py). Each op family keeps its pair of
functions in its own module; this table is the only place they are gathered.
"""
from __future__ import annotations

from ortx.ep.lowering import attention, conv, elementwise, layout, pool, qdq, qpool, reduce

LOWERINGS = {
    **conv.LOWERINGS,
    **elementwise.LOWERINGS,
    **reduce.LOWERINGS,
    **pool.LOWERINGS,
    **layout.LOWERINGS,
    **attention.LOWERINGS,
    **qdq.LOWERINGS,
    **qpool.LOWERINGS,
}
