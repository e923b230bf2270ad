"""Graph -> ordered segments, each run by OrtxEP (claimed) or by an ONNX Runtime sub-session.

1. Kahn's topological sort, choosing among ready nodes one of the same kind (claimed or not) as the segment being
   grown, so each segment is as large as the dependencies allow.
2. Segments are consecutive runs of that order, so the segment graph is acyclic by construction.
3. A segment's inputs are the values it reads that something outside it produces (graph inputs or earlier
   segments); its outputs are the values it produces that later segments or the graph outputs read.
Limits: the greedy choice is not guaranteed to give the fewest segments; a claimed run with no compute (a lone
Reshape between two ORT segments) is given back to ORT by `merge_trivial_segments`.
"""
from __future__ import annotations

import collections
import dataclasses

import onnx_ir as ir

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
    claimed: bool
    nodes: list[ir.Node]
    inputs: list[ir.Value] = dataclasses.field(default_factory=list)
    outputs: list[ir.Value] = dataclasses.field(default_factory=list)

    @property
    def provider(self) -> str:
        return "OrtxEP" if self.claimed else "ORT"


def _ordered(graph: ir.Graph, claimed: dict[str, bool]) -> list[ir.Node]:
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
    ready = {True: collections.deque(), False: collections.deque()}
    for node in nodes:
        if pending[id(node)] == 0:
            ready[claimed[node.name]].append(node)
    order: list[ir.Node] = []
    current = claimed[nodes[0].name] if nodes else False
    while ready[True] or ready[False]:
        if not ready[current]:
            current = not current
        node = ready[current].popleft()
        order.append(node)
        newly_ready = []
        for user in users[id(node)]:
            pending[id(user)] -= 1
            if pending[id(user)] == 0:
                newly_ready.append(user)
        for user in sorted(newly_ready, key=lambda n: index[id(n)]):
            ready[claimed[user.name]].append(user)
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


def partition(graph: ir.Graph, claimed: dict[str, bool]) -> list[Segment]:
    segments: list[Segment] = []
    for node in _ordered(graph, claimed):
        kind = claimed[node.name]
        if segments and segments[-1].claimed == kind:
            segments[-1].nodes.append(node)
        else:
            segments.append(Segment(kind, [node]))
    segments = merge_trivial_segments(segments)
    return _connect(graph, segments)


def merge_trivial_segments(segments: list[Segment]) -> list[Segment]:
    """Gives claimed segments that only alias memory back to ORT when an ORT segment borders them."""
    for segment in segments:
        if segment.claimed and len(segments) > 1 and all(node.op_type in _ALIAS_OPS for node in segment.nodes):
            segment.claimed = False
    merged: list[Segment] = []
    for segment in segments:
        if merged and merged[-1].claimed == segment.claimed:
            merged[-1].nodes.extend(segment.nodes)
        else:
            merged.append(segment)
    return merged
