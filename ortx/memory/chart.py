"""The offset-over-time chart of a memory plan: one rectangle per buffer, x = steps it is live, y = its bytes.

Overlapping rectangles would be a planner bug (the overlap invariant), so the chart shows packing quality at a
glance; the dashed line is the lower bound, the solid one the arena size.
"""
from __future__ import annotations


def _pyplot():
    try:
        import matplotlib.pyplot as pyplot
    except ImportError as error:
        raise ImportError("ortx.memory.plot needs matplotlib: pip install matplotlib") from error
    return pyplot


def plot(plan, *, ax=None, title: str | None = None):
    """Draws `plan` (a MemoryPlan, or anything with `.plan`/`.session_plan`, e.g. a SegmentMemory or
    MemoryReport) on `ax` (a new figure when None); returns the axes."""
    pyplot = _pyplot()
    from matplotlib.patches import Rectangle

    plan = getattr(plan, "plan", None) or getattr(plan, "session_plan", None) or plan
    if ax is None:
        _, ax = pyplot.subplots(figsize=(10, 4))
    colors = pyplot.rcParams["axes.prop_cycle"].by_key()["color"]
    last_step = max((t.last for t in plan.lifetimes), default=0)
    for index, item in enumerate(sorted(plan.lifetimes, key=lambda t: (t.first, t.name))):
        ax.add_patch(Rectangle((item.first, plan.offsets[item.name]), item.last - item.first + 1, item.nbytes,
                               facecolor=colors[index % len(colors)], edgecolor="black", linewidth=0.3, alpha=0.8))
    ax.axhline(plan.arena_bytes, color="black", linewidth=1, label=f"arena {plan.arena_bytes} B")
    ax.axhline(plan.lower_bound_bytes, color="black", linestyle="--", linewidth=1,
               label=f"lower bound {plan.lower_bound_bytes} B")
    ax.set_xlim(0, last_step + 1)
    ax.set_ylim(0, max(plan.arena_bytes, 1) * 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel("arena offset (bytes)")
    ax.set_title(title or f"{len(plan.lifetimes)} buffers, {plan.algorithm}")
    ax.legend(loc="upper right")
    return ax
