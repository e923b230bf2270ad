"""Memory planning for compiled segments: lifetimes, in-place reuse, offset planners, reports and a chart.

`report(model, input_shapes)` and `plot(plan)` are imported lazily: the planners are used by the segment builder,
which the report itself compiles through, and matplotlib is optional.
"""


def report(model, input_shapes, *, num_threads: int = 1):
    """The MemoryReport of `model` at `input_shapes` (see ortx.memory.summary)."""
    from ortx.memory.summary import report as build

    return build(model, input_shapes, num_threads=num_threads)


def plot(plan, *, ax=None, title: str | None = None):
    """Offset-over-time rectangles of a MemoryPlan (see ortx.memory.chart); needs matplotlib."""
    from ortx.memory.chart import plot as draw

    return draw(plan, ax=ax, title=title)
