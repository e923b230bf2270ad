"""MatMuls that share their left input and have constant weights merged into one wider MatMul and a Split
(attention's Q, K and V projections), with their bias Adds merged the same way.

Before: q = Add(MatMul(x, Wq), bq); k = Add(MatMul(x, Wk), bk); v = Add(MatMul(x, Wv), bv)       (6 nodes)
After:  q, k, v = Split(Add(MatMul(x, [Wq|Wk|Wv]), [bq|bk|bv]), [Nq, Nk, Nv], axis=-1)         (3 nodes)
The biases are merged only when every MatMul of the group is read by exactly one Add of a constant [N_i] bias;
otherwise only the MatMuls are merged (n nodes -> 2). Does not apply when: fewer than two such MatMuls read the
same value; a weight is not a 2-D constant initializer or dtypes/K differ.
One wider GEMM reads x once instead of n times; the Split copies the outputs once.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir

from ortx.passes._report import PassReport, record_fused_from, remove_if_unused, unique_initializer_name
from ortx.passes.fuse_layer_normalization import default_opset

logger = logging.getLogger(__name__)


def _weight(node: ir.Node) -> np.ndarray | None:
    value = node.inputs[1]
    if value is None or value.const_value is None or value.is_graph_input() or value.producer() is not None:
        return None
    array = value.const_value.numpy()
    return array if array.ndim == 2 else None


def _bias_add(node: ir.Node, columns: int) -> tuple[ir.Node, np.ndarray] | None:
    """The single Add reading this MatMul's output with a constant [columns] bias, or None."""
    uses = node.outputs[0].uses()
    if len(uses) != 1 or node.outputs[0].is_graph_output() or uses[0].node.op_type != "Add":
        return None
    add = uses[0].node
    other = add.inputs[1 - uses[0].idx]
    if other is None or other.const_value is None or other.is_graph_input():
        return None
    bias = other.const_value.numpy()
    return (add, bias) if bias.shape == (columns,) else None


def _initializer(graph: ir.Graph, array: np.ndarray, base: str) -> ir.Value:
    name = unique_initializer_name(graph, base)
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name), shape=ir.Shape(array.shape),
                     type=ir.TensorType(ir.DataType.from_numpy(array.dtype)))
    graph.register_initializer(value)
    return value


def _merge(graph: ir.Graph, group: list[ir.Node], opset: int) -> int:
    """Rewrites one group; returns the number of nodes removed."""
    weights = [_weight(node) for node in group]
    biases = [_bias_add(node, weight.shape[1]) for node, weight in zip(group, weights)]
    with_bias = all(bias is not None for bias in biases)
    source = group[0].inputs[0]
    first = group[0]
    weight = _initializer(graph, np.concatenate(weights, axis=1), f"{first.name or 'matmul'}_merged_weight")
    product = ir.node("MatMul", [source, weight], name=f"{first.name}_merged")
    new_nodes = [product]
    result = product.outputs[0]
    if with_bias:
        bias = _initializer(graph, np.concatenate([b for _, b in biases]), f"{first.name or 'matmul'}_merged_bias")
        add = ir.node("Add", [result, bias], name=f"{first.name}_merged_bias")
        new_nodes.append(add)
        result = add.outputs[0]
    sizes = np.array([w.shape[1] for w in weights], np.int64)
    old_outputs = [add.outputs[0] for add, _ in biases] if with_bias else [node.outputs[0] for node in group]
    if opset >= 13:
        split = ir.node("Split", [result, _initializer(graph, sizes, "merged_split_sizes")], num_outputs=len(group),
                        attributes={"axis": -1}, name=f"{first.name}_split")
    else:
        split = ir.node("Split", [result], num_outputs=len(group), attributes={"axis": -1, "split": sizes.tolist()},
                        name=f"{first.name}_split")
    new_nodes.append(split)
    old_nodes = list(group) + ([add for add, _ in biases] if with_bias else [])
    old_constants = [node.inputs[1] for node in group]
    if with_bias:
        old_constants += [value for add, _ in biases for value in add.inputs if value is not None and value.is_initializer()]
    for old, new in zip(old_outputs, split.outputs):
        new.shape, new.type = old.shape, old.type
    record_fused_from(product, old_nodes)
    # The new nodes go next to the group's first MatMul: they read only x and initializers, and every reader of an
    # old output comes after its producer, so after that MatMul.
    ir.convenience.replace_nodes_and_values(graph, first, old_nodes, new_nodes, old_outputs, list(split.outputs))
    remove_if_unused(graph, old_constants)
    return len(old_nodes) - len(new_nodes)


def fuse_sibling_matmuls(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    graph = model.graph
    opset = default_opset(model)
    groups: dict[int, list[ir.Node]] = {}
    for node in graph:
        if node.op_type == "MatMul" and node.domain in ("", "ai.onnx") and node.inputs[0] is not None \
                and _weight(node) is not None:
            groups.setdefault(id(node.inputs[0]), []).append(node)
    counts = {"groups_merged": 0, "nodes_removed": 0}
    for group in groups.values():
        weights = [_weight(node) for node in group]
        if len(group) < 2 or len({(w.shape[0], w.dtype) for w in weights}) != 1:
            continue
        counts["nodes_removed"] += _merge(graph, group, opset)
        counts["groups_merged"] += 1
    return PassReport(model, name="fuse_sibling_matmuls", counts=counts, seconds=time.perf_counter() - start)
