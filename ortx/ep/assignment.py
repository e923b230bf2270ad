"""`sess.assignment`: for every node of the user's graph, who runs it and, when OrtxEP declined it, why."""
from __future__ import annotations

import dataclasses

FUSED_FROM_KEY = "ortx.fused_from"


def nodes_by_user_name(graph, fused_from_key: str = FUSED_FROM_KEY) -> dict[str, list]:
    """The user's node names -> the nodes of the graph after the graph passes that hold them: a node by its own
    name, and by the names of the nodes fused into it (its fused_from), in graph order. Options that name nodes
    (placement, fp32_nodes) resolve through it."""
    holders: dict[str, list] = {}
    for node in graph:
        holders.setdefault(node.name, []).append(node)
        for original in filter(None, node.metadata_props.get(fused_from_key, "").split(",")):
            if original != node.name:
                holders.setdefault(original, []).append(node)
    return holders


@dataclasses.dataclass(frozen=True)
class NodeAssignment:
    name: str
    op_type: str
    provider: str  # "OrtxEP", an ORT provider name, or "(removed)" for nodes the graph passes folded away
    reason: str = ""
    precision: str = ""  # OrtxEP's nodes: "bf16" when a bf16 kernel runs it (ortx.ep.precision), "int8" when an
    #                      int8 kernel does (ortx.passes.fuse_qdq), else "fp32"
    sparse: bool = False  # OrtxEP runs the product with sparse (CSR) weights (ortx.tune.sparse_choice)
    device: str = ""  # OrtxEP's nodes: the device that runs it ("cpu", "npu", "dsp"; ortx.ep.devices); "" for ORT's


class Assignment(tuple):
    """A tuple of NodeAssignment rows that prints as a table and counts claimed work."""

    claimed_macs: int
    total_macs: int

    def __new__(cls, rows, *, claimed_macs: int = 0, total_macs: int = 0, segments: int = 0):
        self = super().__new__(cls, rows)
        self.claimed_macs = claimed_macs
        self.total_macs = total_macs
        self.segments = segments
        self.engine_choices = ()  # ortx.tune.engine_choice.EngineChoice per claimed segment, when tuning is on
        self.sparse_choices = ()  # ortx.tune.sparse_choice.SparseDecision per layer with enough zeros to consider
        self.layout_choices = ()  # ortx.tune.layout_choice.LayoutChoice per CPU segment with blocked runs
        self.model_choice = None  # ortx.tune.model_choice.ModelChoice from the records, when there is one
        self.graph = None  # ortx.ep.render.PartitionGraph of the compiled graph: nodes, devices, edges with bytes
        self.capability = {}  # compiled node -> {device: "" (can run it) or the reason it cannot}
        self.precision_note = ""  # why the kernels' precision is not the one asked for (effective_precision)
        return self

    def by_device(self) -> dict[str, int]:
        """Nodes per device; ORT's under "ORT"."""
        counts: dict[str, int] = {}
        for row in self:
            if row.provider != "(removed)":
                label = row.device or "ORT"
                counts[label] = counts.get(label, 0) + 1
        return counts

    def to_svg(self) -> str:
        """The partition as SVG text: nodes in layers, coloured by device, edges that cross devices labelled with
        their bytes (ortx.ep.render; no graphviz needed)."""
        if self.graph is None:
            raise RuntimeError("to_svg: this assignment has no partition graph (ORT ran the whole model)")
        from ortx.ep.render import render_svg

        return render_svg(self.graph)

    @property
    def claimed_mac_share(self) -> float:
        return 1.0 if self.total_macs == 0 else self.claimed_macs / self.total_macs

    def by_provider(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self:
            counts[row.provider] = counts.get(row.provider, 0) + 1
        return counts

    def precision_counts(self) -> dict[str, int]:
        """OrtxEP's nodes per kernel precision ("fp32", "bf16", "int8")."""
        counts: dict[str, int] = {}
        for row in self:
            if row.precision:
                counts[row.precision] = counts.get(row.precision, 0) + 1
        return counts

    def sparse_nodes(self) -> tuple[str, ...]:
        """Names of the nodes whose product runs on sparse (CSR) weights."""
        return tuple(row.name for row in self if row.sparse)

    def __str__(self) -> str:
        headers = ("node", "op", "provider", "device", "reason")
        rows = [(row.name, row.op_type, row.provider + (f" ({row.precision})" if row.precision in ("bf16", "int8")
                                                         else "") + (" (sparse)" if row.sparse else ""),
                 row.device or "-", row.reason)
                for row in self]
        widths = [max([len(headers[i])] + [len(r[i]) for r in rows]) for i in range(4)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(headers[:4], widths)) + "  " + headers[4]]
        lines += ["  ".join(value.ljust(w) for value, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
        summary = ", ".join(f"{provider}: {count}" for provider, count in sorted(self.by_provider().items()))
        precisions = self.precision_counts()
        in_bf16 = "".join(f"; {precisions[kind]} of OrtxEP's nodes run {kind} kernels" for kind in ("bf16", "int8")
                          if precisions.get(kind))
        devices = self.by_device()
        if set(devices) - {"cpu", "ORT"}:
            summary += "; devices " + ", ".join(f"{device}: {count}" for device, count in sorted(devices.items()))
        lines.append(f"{len(self)} nodes ({summary}); {self.segments} segments; "
                     f"OrtxEP claims {100 * self.claimed_mac_share:.1f}% of {self.total_macs / 1e6:.1f} M MACs"
                     f"{in_bf16}" + (f"; {len(self.sparse_nodes())} run sparse (CSR) kernels"
                                     if self.sparse_nodes() else ""))
        if self.precision_note:
            lines.append(self.precision_note)
        for decision in self.sparse_choices:
            lines.append(f"sparse choice {decision.describe()}")
        for choice in self.layout_choices:
            lines.append(choice.describe())
        for choice in self.engine_choices:
            lines.append(f"segment from {choice.first_node} ({len(choice.nodes)} nodes): {choice.describe} -> "
                         f"{'OrtxEP' if choice.engine == 'ortx' else 'ORT'}")
        if self.model_choice is not None:
            lines.append(self.model_choice.describe)
        return "\n".join(lines)
