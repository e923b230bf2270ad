"""Fuses chains of elementwise ops into one ai.ortx ElementwiseChain node (OrtxEP only): one pass over memory.

Before: Mul(x, s) -> Add(x, _) -> Add(_, r)      (every member's output of one shape, used only inside the chain)
After:  ai.ortx::ElementwiseChain(x, s, r) with op_types [Mul, Add, Add], kinds [1, 1, 1], codes (the elementwise
        kernels' op codes), operands [0, 1,  0, 3,  4, 2] (indices into [inputs..., results of earlier ops...],
        -1 for a unary op's second) and params (two floats per op: LeakyRelu alpha, Clip bounds, ...).
Unfused, each op reads and writes a whole tensor (PP-OCRv4 det's neck: x + x * se + up at 96x160x160, three
passes of ~10 MB); fused, the chain reads its inputs once and writes once. Not in DEFAULT_PASSES: plain onnxruntime
cannot run ai.ortx ops, so OrtxEP runs this when it compiles (after fuse_conv_epilogue, which takes a Conv's own
residual Add and activation first).

Algorithm:
1. A member is a node OrtxEP claims on its own (the elementwise lowering's check): a unary op of the unary kernel
   (onnxruntime's contrib Gelu/FastGelu/QuickGelu included), or Add/Sub/Mul/Div/Max/Min with two inputs, float32,
   with a static output shape.
2. Nodes are visited from the graph's end. An unassigned member starts a chain as its root; the producer of a
   chain member's input joins when it is a member, not excluded, with the root's output shape, its output is not
   a graph output, and every consumer of its output is already in the chain (so no path leaves the chain and comes
   back: only the root's output is read outside, and fusing cannot make a cycle).
3. A chain of at least two ops, at most MAX_OPS ops and MAX_INPUTS distinct outside inputs, becomes one node; its
   program lists the members in graph order.
Limits: an intermediate of a smaller (broadcast) shape, such as a squeeze-excite's per-channel scale, stays a node of
its own; main graph only; Pow is left out (its exponent rules are the binary lowering's).
"""
from __future__ import annotations

import logging
import time

import onnx_ir as ir

from ortx.passes._report import PassReport, record_fused_from

logger = logging.getLogger(__name__)

ORTX_DOMAIN = "ai.ortx"
ELEMENTWISE_CHAIN = "ElementwiseChain"
BINARY_OPS = ("Add", "Sub", "Mul", "Div", "Max", "Min")
# kernels/elementwise.h ORTX_CHAIN_MAX_INPUTS; the op count bounds a step's ints and the program's temps.
MAX_INPUTS = 8
MAX_OPS = 16
UNARY, BINARY = 0, 1


def _member_code(node: ir.Node) -> tuple[int, int, float, float] | None:
    """(kind, kernel op code, p0, p1) when `node` may join a chain, else None."""
    from ortx.ep.lowering import elementwise  # the lowering's own checks: fuse only what it claims node by node
    from ortx.ep.lowering._values import NotStatic, numpy_dtype, static_shape

    contrib = node.domain == elementwise.CONTRIB_DOMAIN and node.op_type in elementwise.CONTRIB_UNARY_CODES
    if (node.domain not in ("", "ai.onnx") and not contrib) or len(node.outputs) != 1:
        return None
    try:
        output = node.outputs[0]
        static_shape(output)
        if numpy_dtype(output).name != "float32":
            return None
        if node.op_type in BINARY_OPS and len(node.inputs) == 2:
            checker = elementwise.check_variadic if node.op_type in ("Max", "Min") else elementwise.check_binary
            if checker(node) is not None:
                return None
            return BINARY, elementwise.BINARY_CODES[node.op_type], 0.0, 0.0
        if (contrib or node.op_type in elementwise.UNARY_CODES) and elementwise.check_unary(node) is None:
            code, p0, p1 = elementwise.unary_parameters(node)
            return UNARY, code, p0, p1
    except NotStatic:
        return None
    return None


def _grow(root: ir.Node, codes: dict, assigned: set, excluded: frozenset[str]) -> list[ir.Node]:
    """Step 2: the members that join `root`'s chain (root included), unordered."""
    shape = tuple(root.outputs[0].shape)
    chain = {id(root): root}
    changed = True
    while changed and len(chain) < MAX_OPS:
        changed = False
        for member in list(chain.values()):
            for value in member.inputs:
                producer = value.producer() if value is not None else None
                if producer is None or id(producer) in chain or id(producer) in assigned \
                        or codes.get(id(producer)) is None or producer.name in excluded:
                    continue
                output = producer.outputs[0]
                if output.is_graph_output() or tuple(output.shape) != shape:
                    continue
                if any(id(user) not in chain for user, _ in output.uses()):
                    continue
                chain[id(producer)] = producer
                changed = True
                if len(chain) == MAX_OPS:
                    break
    return list(chain.values())


def _replace(graph: ir.Graph, members: list[ir.Node], codes: dict) -> ir.Node | None:
    """Step 3: the ElementwiseChain node in place of `members` (graph order), or None past MAX_INPUTS."""
    def operands_of(member: ir.Node) -> list[ir.Value]:
        return list(member.inputs[:2 if codes[id(member)][0] == BINARY else 1])

    results = {id(member.outputs[0]) for member in members}
    inputs: list[ir.Value] = []
    for member in members:
        for value in operands_of(member):
            if id(value) not in results and all(value is not known for known in inputs):
                inputs.append(value)
    if len(inputs) > MAX_INPUTS:
        return None
    index_of = {id(value): index for index, value in enumerate(inputs)}
    index_of.update({id(member.outputs[0]): len(inputs) + position for position, member in enumerate(members)})
    operands: list[int] = []
    for member in members:
        operands += [index_of[id(value)] for value in operands_of(member)]
        if codes[id(member)][0] == UNARY:
            operands.append(-1)
    root = members[-1]
    output = root.outputs[0]
    attributes = {
        "op_types": [member.op_type for member in members],
        "kinds": [codes[id(member)][0] for member in members],
        "codes": [codes[id(member)][1] for member in members],
        "operands": operands,
        "params": [float(parameter) for member in members for parameter in codes[id(member)][2:]],
    }
    new_output = ir.Value(name=output.name, shape=output.shape, type=output.type)
    chain = ir.Node(ORTX_DOMAIN, ELEMENTWISE_CHAIN, inputs, ir.convenience.convert_attributes(attributes),
                    outputs=[new_output], name=f"{root.name}_chain")
    ir.convenience.replace_nodes_and_values(graph, root, members, [chain], [output], [new_output])
    record_fused_from(chain, members)
    return chain


def fuse_elementwise_chains(model: ir.Model, *, excluded: frozenset[str] = frozenset()) -> PassReport:
    """`excluded`: node names that must stay standard ONNX (they run on ORT): a chain never takes one."""
    start = time.perf_counter()
    graph = model.graph
    nodes = list(graph)
    order = {id(node): index for index, node in enumerate(nodes)}
    codes = {id(node): _member_code(node) for node in nodes}
    assigned: set[int] = set()
    chains = fused = 0
    notes: list[str] = []
    for node in reversed(nodes):
        if id(node) in assigned or codes[id(node)] is None or node.name in excluded:
            continue
        members = sorted(_grow(node, codes, assigned, excluded), key=lambda member: order[id(member)])
        assigned.update(id(member) for member in members)
        if len(members) < 2:
            continue
        if _replace(graph, members, codes) is None:
            notes.append(f"{node.name}: a chain of {len(members)} ops reads more than {MAX_INPUTS} tensors")
            continue
        chains += 1
        fused += len(members)
    if chains:
        model.opset_imports.setdefault(ORTX_DOMAIN, 1)
        graph.opset_imports.setdefault(ORTX_DOMAIN, 1)
    for note in notes:
        logger.debug("fuse_elementwise_chains: %s", note)
    return PassReport(model=model, name="fuse_elementwise_chains",
                      counts={"chains_fused": chains, "nodes_fused": fused}, notes=notes,
                      seconds=time.perf_counter() - start)
