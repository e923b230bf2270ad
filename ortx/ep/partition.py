"""Graph -> ordered segments, each run by one device (a name from ortx.ep.devices; "cpu" is OrtxEP's own kernels)
or by an ONNX Runtime sub-session (label ORT).

1. Kahn's topological sort, choosing among ready nodes one with the same label (device or ORT) as the segment being
   grown, so each segment is as large as the dependencies allow; when none is ready, the label of the earliest ready
   node (in graph order) starts the next segment.
2. Segments are consecutive runs of that order, so the segment graph is acyclic by construction.
3. A segment's inputs are the values it reads that something outside it produces (graph inputs or earlier
   segments); its outputs are the values it produces that later segments or the graph outputs read.
Limits: the greedy choice is not guaranteed to give the fewest segments; a CPU run with no compute (a lone
Reshape between two ORT segments) is given back to ORT by `merge_trivial_segments`.
`partition(graph, claimed)` also takes the older {node: bool} map (True: "cpu", False: ORT).
"""
from __future__ import annotations

import collections
import dataclasses

import onnx_ir as ir

ORT = "ORT"  # the label of nodes an ONNX Runtime sub-session runs
CPU = "cpu"  # OrtxEP's own kernels on the host (ortx.ep.devices.cpu)

# Ops that move no data; a claimed segment made only of these is not worth a boundary crossing.
_ALIAS_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}


def _subgraph_nodes(node: ir.Node):
    """Every node inside `node`'s subgraph attributes (If/Loop/Scan bodies), recursively."""
    for attribute in node.attributes.values():
        if attribute.type == ir.AttributeType.GRAPH:
            graphs = [attribute.value]
        elif attribute.type == ir.AttributeType.GRAPHS:
            graphs = list(attribute.value)
        else:
            continue
        for graph in graphs:
            for inner in graph:
                yield inner
                yield from _subgraph_nodes(inner)


def node_inputs(node: ir.Node) -> list[ir.Value]:
    """Explicit inputs plus the outer-scope values its subgraphs capture (they are inputs too, for ordering)."""
    values = [value for value in node.inputs if value is not None]
    seen = {id(value) for value in values}
    inner_outputs = set()
    inner_nodes = list(_subgraph_nodes(node))
    for inner in inner_nodes:
        inner_outputs.update(id(value) for value in inner.outputs)
    for inner in inner_nodes:
        for value in inner.inputs:
            if value is None or id(value) in seen or id(value) in inner_outputs:
                continue
            owner = value.graph
            if owner is not None and owner is node.graph:
                values.append(value)
                seen.add(id(value))
    return values


@dataclasses.dataclass
class Segment:
    device: str  # a device name, or ORT
    nodes: list[ir.Node]
    inputs: list[ir.Value] = dataclasses.field(default_factory=list)
    outputs: list[ir.Value] = dataclasses.field(default_factory=list)

    @property
    def claimed(self) -> bool:
        """OrtxEP runs it (on the CPU or another device)."""
        return self.device != ORT

    @property
    def provider(self) -> str:
        return "OrtxEP" if self.claimed else "ORT"


def labels_of(claimed: dict) -> dict[str, str]:
    """{node: bool} (claimed by OrtxEP's CPU kernels or not) or {node: label} -> {node: label}."""
    return {name: (CPU if value else ORT) if isinstance(value, bool) else value for name, value in claimed.items()}


def _ordered(graph: ir.Graph, label: dict[str, str]) -> list[ir.Node]:
    nodes = list(graph)
    index = {id(node): position for position, node in enumerate(nodes)}
    pending = {id(node): 0 for node in nodes}
    users: dict[int, list[ir.Node]] = collections.defaultdict(list)
    for node in nodes:
        producers = {id(v.producer()) for v in node_inputs(node) if v.producer() is not None}
        producers.discard(id(node))
        for producer_id in producers:
            if producer_id in pending:
                pending[id(node)] += 1
                users[producer_id].append(node)
    ready: dict[str, collections.deque] = {kind: collections.deque() for kind in label.values()}
    for node in nodes:
        if pending[id(node)] == 0:
            ready[label[node.name]].append(node)
    order: list[ir.Node] = []
    current = label[nodes[0].name] if nodes else ORT
    while len(order) < len(nodes):
        if not ready[current]:
            waiting = [queue[0] for queue in ready.values() if queue]
            if not waiting:
                break
            current = label[min(waiting, key=lambda n: index[id(n)]).name]
        node = ready[current].popleft()
        order.append(node)
        newly_ready = []
        for user in users[id(node)]:
            pending[id(user)] -= 1
            if pending[id(user)] == 0:
                newly_ready.append(user)
        for user in sorted(newly_ready, key=lambda n: index[id(n)]):
            ready[label[user.name]].append(user)
    if len(order) != len(nodes):
        stuck = [node.name for node in nodes if pending[id(node)] > 0][:5]
        raise ValueError(f"the graph has a cycle through nodes {stuck}")
    return order


def _connect(graph: ir.Graph, segments: list[Segment]) -> list[Segment]:
    segment_of_node: dict[int, int] = {}
    produced_in: dict[str, int] = {}
    for position, segment in enumerate(segments):
        for node in segment.nodes:
            segment_of_node[id(node)] = position
            for inner in _subgraph_nodes(node):  # a captured value's use is inside the subgraph
                segment_of_node[id(inner)] = position
            for value in node.outputs:
                produced_in[value.name] = position
    graph_outputs = {value.name for value in graph.outputs}
    for position, segment in enumerate(segments):
        seen: set[str] = set()
        for node in segment.nodes:
            for value in node_inputs(node):
                if value.name in seen or value.const_value is not None:
                    continue
                if value.is_graph_input() or produced_in.get(value.name, position) != position:
                    segment.inputs.append(value)
                    seen.add(value.name)
        for node in segment.nodes:
            for value in node.outputs:
                read_later = any(segment_of_node.get(id(user), position) != position for user, _ in value.uses())
                if value.name in graph_outputs or read_later:
                    segment.outputs.append(value)
    return segments


def partition(graph: ir.Graph, claimed: dict) -> list[Segment]:
    """`claimed`: node name -> device label (or bool, see `labels_of`)."""
    label = labels_of(claimed)
    segments: list[Segment] = []
    for node in _ordered(graph, label):
        kind = label[node.name]
        if segments and segments[-1].device == kind:
            segments[-1].nodes.append(node)
        else:
            segments.append(Segment(kind, [node]))
    segments = merge_trivial_segments(segments)
    return _connect(graph, segments)


def merge_trivial_segments(segments: list[Segment]) -> list[Segment]:
    """Gives CPU segments that only alias memory back to ORT when there is more than one segment."""
    for segment in segments:
        if segment.device == CPU and len(segments) > 1 and all(node.op_type in _ALIAS_OPS for node in segment.nodes):
            segment.device = ORT
    merged: list[Segment] = []
    for segment in segments:
        if merged and merged[-1].device == segment.device:
            merged[-1].nodes.extend(segment.nodes)
        else:
            merged.append(segment)
    return merged
