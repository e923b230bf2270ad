"""The partition as a picture: SVG text from a small layered layout of our own (no graphviz binary).

1. Layer of a node = 1 + the deepest layer among its producers (graph inputs and constants are not drawn).
2. Within a layer, nodes sit in segment order, then graph order; boxes are coloured by device (ORT grey).
3. Edges run from a producer's bottom to a consumer's top; an edge that crosses devices is drawn red and labelled
   with the bytes that cross.
Limits: no crossing minimisation; a model of a few hundred nodes gives a tall, narrow picture.
"""
from __future__ import annotations

import dataclasses
from xml.sax.saxutils import escape

from ortx.ep.lowering._values import NotStatic, size_bytes
from ortx.ep.partition import ORT, Segment, node_inputs
from ortx.passes._report import FUSED_FROM_KEY

COLOURS = {"cpu": "#9ecae1", "npu": "#a1d99b", "dsp": "#fdae6b", ORT: "#d9d9d9"}
OTHER_COLOURS = ("#bcbddc", "#fdd0a2", "#c7e9c0", "#fcbba1")
BOX_WIDTH, BOX_HEIGHT, COLUMN_GAP, ROW_GAP, MARGIN = 170, 34, 20, 44, 20


@dataclasses.dataclass(frozen=True)
class PartitionGraph:
    nodes: tuple[tuple[str, str, str, int], ...]  # (node, op_type, device label or ORT, segment index), graph order
    edges: tuple[tuple[str, str, int], ...]  # (producer, consumer, bytes of the tensor)
    fused_from: tuple[tuple[str, str], ...] = ()  # (fused node, the user's nodes it replaced, comma-separated)


def _label(node) -> str:
    """The op type shown for a node; an elementwise chain shows the ops it fused (Mul+Add+Relu)."""
    if node.domain == "ai.ortx" and node.op_type == "ElementwiseChain" and "op_types" in node.attributes:
        return "+".join(node.attributes["op_types"].value)
    return node.op_type


def partition_graph(segments: list[Segment]) -> PartitionGraph:
    nodes, edges, fused_from = [], [], []
    placed = {node.name for segment in segments for node in segment.nodes}
    for index, segment in enumerate(segments):
        for node in segment.nodes:
            nodes.append((node.name, _label(node), segment.device, index))
            if node.metadata_props.get(FUSED_FROM_KEY):
                fused_from.append((node.name, node.metadata_props[FUSED_FROM_KEY]))
            for value in node_inputs(node):
                producer = value.producer()
                if producer is None or producer.name not in placed:
                    continue
                try:
                    nbytes = size_bytes(value)
                except (NotStatic, TypeError):
                    nbytes = 0
                edges.append((producer.name, node.name, nbytes))
    return PartitionGraph(tuple(nodes), tuple(edges), tuple(fused_from))


def _layers(graph: PartitionGraph) -> dict[str, int]:
    producers: dict[str, list[str]] = {name: [] for name, *_ in graph.nodes}
    for source, target, _ in graph.edges:
        producers[target].append(source)
    layer: dict[str, int] = {}
    remaining = [name for name, *_ in graph.nodes]
    while remaining:  # segments are in a topological order, but nodes inside one may be listed after their users
        pending = []
        for name in remaining:
            if all(source in layer for source in producers[name]):
                layer[name] = 1 + max((layer[source] for source in producers[name]), default=-1)
            else:
                pending.append(name)
        if len(pending) == len(remaining):
            raise ValueError(f"partition graph has a cycle through {pending[:3]}")
        remaining = pending
    return layer


def _colour(label: str, labels: list[str]) -> str:
    if label in COLOURS:
        return COLOURS[label]
    others = [other for other in labels if other not in COLOURS]
    return OTHER_COLOURS[others.index(label) % len(OTHER_COLOURS)]


def _human_bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if count < 1024 or unit == "MiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count} B"


def render_svg(graph: PartitionGraph) -> str:
    layer = _layers(graph)
    rows: dict[int, list[tuple[str, str, str, int]]] = {}
    for order, entry in enumerate(graph.nodes):
        rows.setdefault(layer[entry[0]], []).append((entry[3], order) + entry[:3])
    labels = sorted({label for _, _, label, _ in graph.nodes}, key=lambda label: (label == ORT, label))
    legend_height = 30
    position = {}
    for depth, entries in rows.items():
        for column, (_, _, name, _, _) in enumerate(sorted(entries)):
            position[name] = (MARGIN + column * (BOX_WIDTH + COLUMN_GAP),
                              MARGIN + legend_height + depth * (BOX_HEIGHT + ROW_GAP))
    width = 2 * MARGIN + max((len(entries) for entries in rows.values()), default=1) * (BOX_WIDTH + COLUMN_GAP)
    height = 2 * MARGIN + legend_height + max(len(rows), 1) * (BOX_HEIGHT + ROW_GAP)
    label_of = {name: label for name, _, label, _ in graph.nodes}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>']
    for index, label in enumerate(labels):
        x = MARGIN + index * 110
        parts.append(f'<rect x="{x}" y="{MARGIN - 6}" width="14" height="14" fill="{_colour(label, labels)}" '
                     f'stroke="#555"/><text x="{x + 20}" y="{MARGIN + 5}">{escape(label)}</text>')
    for source, target, nbytes in graph.edges:
        (x1, y1), (x2, y2) = position[source], position[target]
        crossing = label_of[source] != label_of[target]
        stroke = 'stroke="#d62728" stroke-width="2"' if crossing else 'stroke="#777" stroke-width="1"'
        parts.append(f'<line x1="{x1 + BOX_WIDTH // 2}" y1="{y1 + BOX_HEIGHT}" x2="{x2 + BOX_WIDTH // 2}" '
                     f'y2="{y2}" {stroke}/>')
        if crossing:
            parts.append(f'<text x="{(x1 + x2) // 2 + BOX_WIDTH // 2 + 4}" y="{(y1 + BOX_HEIGHT + y2) // 2}" '
                         f'fill="#d62728">{_human_bytes(nbytes)}</text>')
    for name, op_type, label, segment in graph.nodes:
        x, y = position[name]
        title = escape(f"{name} ({op_type}) on {label}, segment {segment}")
        parts.append(f'<g><title>{title}</title><rect x="{x}" y="{y}" width="{BOX_WIDTH}" height="{BOX_HEIGHT}" '
                     f'rx="4" fill="{_colour(label, labels)}" stroke="#333"/>'
                     f'<text x="{x + 6}" y="{y + 14}" font-weight="bold">{escape(op_type[:24])}</text>'
                     f'<text x="{x + 6}" y="{y + 28}">{escape(name[:26])}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts)
