"""Channel pruning: removes a share of the output channels of Convs and the matching inputs of their consumers.

Before: Conv(x, W[64,...]) -> BN -> Relu -> Conv(_, V[128, 64, 3, 3])
After:  Conv(x, W[k,...]) -> BN (k channels) -> Relu -> Conv(_, V[128, k, 3, 3]), the k channels with the largest
        filter L1 norms kept (in their original order)
Algorithm:
1. Every dense Conv (group 1) with a constant weight opens a channel space for its output. Walking the graph in
   order, a value joins its input's space through channel-wise ops (activations, BatchNormalization, pooling,
   Mul/Add/Sub/Div by a per-channel or scalar constant, depthwise Convs, Flatten of a [N, C, 1, 1] value); an
   elementwise op on two spaces (a residual Add) unites them, so both branches keep the same channels.
2. A space's readers slice their weights' input axis: dense Convs (axis 1), Gemm/MatMul after a Flatten (K).
   Any other consumer (Concat, Reshape, Transpose, a grouped Conv that is not depthwise, a graph output, ...) or a
   join with a value of no space (a graph input) makes the space unprunable, with a note naming the node.
3. Per prunable space, channel importance is the sum over its producing Convs of each filter's L1 norm divided by
   that Conv's mean filter norm; the `ratio` least important channels go (at least one channel stays, and the kept
   count is rounded up to a multiple of `multiple`).
4. Constants are sliced, depthwise Convs' `group` set to the kept count, and the channel dim of every value in the
   space rewritten, so the graph stays valid standard ONNX without a new shape inference.
5. The producing Convs are marked (node metadata PRUNED_KEY), so a second run leaves their spaces alone.
Limits: channels are axis 1 (NCHW, or [N, C] after Flatten); spaces through Concat/Split/Reshape are left alone.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import onnx_ir as ir

from ortx.passes._report import PassReport

_CHANNEL_WISE = {"Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu",
                 "Softplus", "Mish", "Gelu", "Identity", "Dropout", "GlobalAveragePool", "GlobalMaxPool", "MaxPool",
                 "AveragePool"}
PRUNED_KEY = "ortx.channels_pruned"  # node metadata on producing Convs: the ratio they were pruned at
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Max", "Min"}


@dataclasses.dataclass
class _Space:
    channels: int
    producers: list = dataclasses.field(default_factory=list)  # dense Convs whose output opened/joined the space
    values: list = dataclasses.field(default_factory=list)  # values carrying these channels on axis 1
    slices: list = dataclasses.field(default_factory=list)  # (value holding a constant, axis) to slice
    depthwise: list = dataclasses.field(default_factory=list)  # depthwise Conv nodes whose group follows
    blocked: str = ""  # why the space cannot be pruned ("" when it can)


def _constant(value: ir.Value | None) -> np.ndarray | None:
    if value is None or value.const_value is None or value.is_graph_input():
        return None
    return value.const_value.numpy()


def _int_attribute(node: ir.Node, name: str, default: int) -> int:
    attribute = node.attributes.get(name)
    return attribute.as_int() if attribute is not None else default


def _channel_axis_of_constant(array: np.ndarray, channels: int, rank: int) -> int | None:
    """The axis of a constant operand that indexes channels when broadcast against a [N, C, ...] value of `rank`,
    -1 for a scalar-like constant that needs no slicing, None when it broadcasts along anything else."""
    if array.size == 1:
        return -1
    shape = (1,) * (rank - array.ndim) + tuple(array.shape)
    if len(shape) != rank or shape[1] != channels or any(size != 1 for axis, size in enumerate(shape) if axis != 1):
        return None
    return array.ndim - (rank - 1)


class _Spaces:
    """Union-find over channel spaces, keyed by value."""

    def __init__(self):
        self.parent: dict[int, int] = {}
        self.spaces: dict[int, _Space] = {}
        self.of_value: dict[int, int] = {}

    def find(self, key: int) -> int:
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def open(self, value: ir.Value, channels: int) -> _Space:
        key = len(self.parent)
        self.parent[key] = key
        self.spaces[key] = _Space(channels)
        self.add(value, key)
        return self.spaces[key]

    def add(self, value: ir.Value, key: int) -> None:
        root = self.find(key)
        self.of_value[id(value)] = root
        self.spaces[root].values.append(value)

    def space_key(self, value: ir.Value | None) -> int | None:
        if value is None or id(value) not in self.of_value:
            return None
        return self.find(self.of_value[id(value)])

    def unite(self, first: int, second: int) -> int:
        first, second = self.find(first), self.find(second)
        if first == second:
            return first
        a, b = self.spaces[first], self.spaces.pop(second)
        if a.channels != b.channels:
            a.blocked = a.blocked or f"joins spaces of {a.channels} and {b.channels} channels"
        for name in ("producers", "values", "slices", "depthwise"):
            getattr(a, name).extend(getattr(b, name))
        a.blocked = a.blocked or b.blocked
        self.parent[second] = first
        return first

    def block(self, key: int, reason: str) -> None:
        space = self.spaces[self.find(key)]
        space.blocked = space.blocked or reason


def _rank(value: ir.Value) -> int | None:
    return len(value.shape) if value.shape is not None else None


def _visit(node: ir.Node, spaces: _Spaces) -> None:
    """Step 1 and 2 for one node: its outputs join, open or block spaces; its weights become slices."""
    keys = [spaces.space_key(value) for value in node.inputs]
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
    if op == "Conv":
        weight = _constant(node.inputs[1]) if len(node.inputs) > 1 else None
        group = _int_attribute(node, "group", 1)
        if keys[0] is not None:
            space = spaces.spaces[keys[0]]
            if weight is not None and group == 1:  # a reader: slice the weight's input axis
                space.slices.append((node.inputs[1], 1))
            elif weight is not None and group == space.channels and weight.shape[0] == group and weight.shape[1] == 1:
                space.depthwise.append(node)  # depthwise: output channels are the input channels
                space.slices.append((node.inputs[1], 0))
                if len(node.inputs) > 2 and node.inputs[2] is not None:
                    space.slices.append((node.inputs[2], 0))
                space.values.append(node.outputs[0])
                spaces.of_value[id(node.outputs[0])] = keys[0]
                return
            else:
                spaces.block(keys[0], f"read by {node.name} (Conv, group {group}, non-constant or grouped weight)")
        if weight is not None and group == 1:
            space = spaces.open(node.outputs[0], weight.shape[0])
            space.producers.append(node)
            space.slices.append((node.inputs[1], 0))
            if len(node.inputs) > 2 and node.inputs[2] is not None:
                space.slices.append((node.inputs[2], 0))
        return
    if op in _CHANNEL_WISE or op == "BatchNormalization":
        if keys[0] is None:
            return
        if op == "PRelu" or op == "BatchNormalization":
            for parameter in node.inputs[1:]:
                array = _constant(parameter)
                axis = (0 if op == "BatchNormalization" and array is not None and array.ndim == 1 else
                        _channel_axis_of_constant(array, spaces.spaces[keys[0]].channels, _rank(node.inputs[0]) or 4)
                        if array is not None else None)
                if axis is None:
                    spaces.block(keys[0], f"{node.name} ({node.op_type}) has a non-constant or non-channel parameter")
                elif axis >= 0:
                    spaces.spaces[keys[0]].slices.append((parameter, axis))
        for other in keys[1:]:
            if other is not None:
                spaces.block(other, f"{node.name} ({node.op_type}) reads it as a parameter")
        spaces.add(node.outputs[0], keys[0])
        for extra in node.outputs[1:]:
            if extra is not None and extra.uses():
                spaces.block(keys[0], f"{node.name} ({node.op_type}) has a second output in use")
        return
    if op in _ELEMENTWISE and len(node.inputs) == 2:
        present = [key for key in keys if key is not None]
        if not present:
            return
        key = present[0]
        for key_other in present[1:]:
            key = spaces.unite(key, key_other)
        for operand, operand_key in zip(node.inputs, keys):
            if operand_key is not None:
                continue
            array = _constant(operand)
            rank = _rank(node.outputs[0]) or _rank(node.inputs[0]) or 4
            axis = _channel_axis_of_constant(array, spaces.spaces[key].channels, rank) if array is not None else None
            if axis is None:
                spaces.block(key, f"{node.name} ({node.op_type}) joins it with {operand.name!r}, which is not a "
                                  "per-channel constant or another pruned space")
            elif axis >= 0:
                spaces.spaces[key].slices.append((operand, axis))
        spaces.add(node.outputs[0], key)
        return
    if op == "Flatten" and keys[0] is not None:
        shape = node.inputs[0].shape
        if (_int_attribute(node, "axis", 1) == 1 and shape is not None and len(shape) >= 2
                and all(dim == 1 for dim in list(shape)[2:])):
            spaces.add(node.outputs[0], keys[0])
            return
    if op in ("Gemm", "MatMul") and keys[0] is not None:
        weight = _constant(node.inputs[1])
        if weight is not None and weight.ndim == 2 and _rank(node.inputs[0]) == 2:
            trans_b = op == "Gemm" and _int_attribute(node, "transB", 0)
            if op == "Gemm" and _int_attribute(node, "transA", 0):
                spaces.block(keys[0], f"read by {node.name} (Gemm with transA)")
            else:
                spaces.spaces[keys[0]].slices.append((node.inputs[1], 1 if trans_b else 0))
            for key in keys[1:]:
                if key is not None:
                    spaces.block(key, f"{node.name} ({node.op_type}) reads it as a weight")
            return
    for key in keys:
        if key is not None:
            spaces.block(key, f"read by {node.name} ({node.op_type}), which channel pruning does not rewrite")


def _kept_channels(space: _Space, ratio: float, multiple: int) -> np.ndarray:
    importance = np.zeros(space.channels, dtype=np.float64)
    for conv in space.producers:
        weight = np.abs(conv.inputs[1].const_value.numpy().astype(np.float64)).reshape(space.channels, -1).sum(1)
        importance += weight / max(float(weight.mean()), np.finfo(np.float64).tiny)
    keep = space.channels - int(round(ratio * space.channels))
    keep = min(space.channels, max(1, int(math.ceil(keep / multiple)) * multiple))
    return np.sort(np.argsort(-importance, kind="stable")[:keep])


def prune_channels(model: ir.Model, *, ratio: float, multiple: int = 1,
                   exclude: frozenset[str] = frozenset()) -> PassReport:
    """`ratio`: share of each prunable space's channels removed; `exclude`: Conv names whose spaces stay whole."""
    start = time.perf_counter()
    if not 0.0 <= ratio < 1.0 or not math.isfinite(ratio):
        raise ValueError(f"channel prune ratio must be in [0, 1), got {ratio!r}")
    if multiple < 1:
        raise ValueError(f"channel multiple must be >= 1, got {multiple!r}")
    spaces = _Spaces()
    for node in model.graph:
        _visit(node, spaces)
    outputs = {id(value) for value in model.graph.outputs}
    notes: list[str] = []
    removed_channels = pruned_spaces = removed_parameters = 0
    for key, space in list(spaces.spaces.items()):
        if spaces.find(key) != key or not space.producers:
            continue
        first = space.producers[0].name
        if any(id(value) in outputs for value in space.values):
            space.blocked = space.blocked or "a graph output carries its channels"
        if any(PRUNED_KEY in conv.metadata_props for conv in space.producers):
            notes.append(f"channels of {first} (Conv) already pruned "
                         f"(ratio {space.producers[0].metadata_props.get(PRUNED_KEY)})")
            continue
        if any(conv.name in exclude for conv in space.producers):
            space.blocked = space.blocked or "excluded"
        if space.blocked:
            notes.append(f"channels of {first} (Conv) not pruned: {space.blocked}")
            continue
        kept = _kept_channels(space, ratio, multiple)
        if len(kept) == space.channels:
            continue
        sliced = set()
        for value, axis in space.slices:
            if (id(value), axis) in sliced:
                continue  # a constant shared by two members of the space is sliced once per axis
            sliced.add((id(value), axis))
            array = value.const_value.numpy()
            smaller = np.ascontiguousarray(np.take(array, kept, axis=axis))
            removed_parameters += array.size - smaller.size
            value.const_value = ir.Tensor(smaller, name=value.name)
            value.shape = ir.Shape(smaller.shape)
        for conv in space.depthwise:
            conv.attributes["group"] = ir.AttrInt64("group", len(kept))
        for value in {id(v): v for v in space.values}.values():
            if value.shape is not None:
                dims = list(value.shape)
                dims[1] = len(kept)
                value.shape = ir.Shape(dims)
        for conv in space.producers:
            conv.metadata_props[PRUNED_KEY] = f"{ratio:g}"
        removed_channels += space.channels - len(kept)
        pruned_spaces += 1
    counts = {"channels_removed": removed_channels, "spaces_pruned": pruned_spaces,
              "parameters_removed": removed_parameters}
    return PassReport(model, name="prune_channels", counts=counts, notes=notes, seconds=time.perf_counter() - start)
