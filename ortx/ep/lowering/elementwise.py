"""Lowerings for the elementwise kernel family: unary, binary, comparison ops, Where, BatchNormalization, Cast.

Unary op -> one `unary_f32` step (op code and up to two float parameters, kernels/elementwise.h). Binary op ->
one `binary_<dtype>` step over collapsed broadcast axes (`broadcast_layout`); variadic Sum/Mean/Max/Min fold
left to right through workspaces, Mean then divides by the input count. BatchNormalization (inference, constant
statistics) -> `channel_affine_f32` with scale and shift folded here in float64. Cast between float32, int32,
int64 and bool -> `cast`. Equal/Less/Greater/LessOrEqual/GreaterOrEqual -> `compare_<dtype>` (bool output);
Where -> `where` with three-way broadcasting. onnxruntime's contrib activations Gelu, FastGelu (no bias) and
QuickGelu (com.microsoft, which level-3 fusions emit) are unary steps too. Only float32 is claimed for unary ops;
every other case gets a reason from `check`.
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import (NotStatic, attribute, constant_value, is_used, numpy_dtype, opset_version, present,
                                      static_shape, string_attribute)

FLOAT32 = np.dtype(np.float32)
FLOAT_LOWEST = float(np.finfo(np.float32).min)  # onnxruntime's Clip default bounds: numeric_limits lowest/max
FLOAT_MAX = float(np.finfo(np.float32).max)

# kernels/activation.h codes 1..7, kernels/elementwise.h codes 16.. (ORTX_UNARY_*).
UNARY_CODES = {
    "Relu": 1, "LeakyRelu": 2, "Clip": 3, "Sigmoid": 4, "HardSigmoid": 5, "HardSwish": 6, "Tanh": 7,
    "Exp": 16, "Log": 17, "Sqrt": 18, "Neg": 19, "Abs": 20, "Reciprocal": 21, "Erf": 22, "Floor": 23, "Ceil": 24,
    "Softplus": 25, "Elu": 26, "Selu": 27, "Gelu": 28, "Sign": 30, "Swish": 31,
}
GELU_TANH_CODE = 29
# onnxruntime's contrib activations (com.microsoft) that are one of our unary codes: Gelu is the erf form, FastGelu
# the tanh form (claimed without its optional bias input), QuickGelu is x * sigmoid(alpha x) (SiLU at alpha 1).
CONTRIB_DOMAIN = "com.microsoft"
CONTRIB_UNARY_CODES = {"Gelu": 28, "FastGelu": GELU_TANH_CODE, "QuickGelu": 31}
# The opset each standard unary op that is newer than opset 7 appeared in.
UNARY_OPSETS = {"Gelu": 20, "Swish": 24}
IDENTITY_CODE = 0
UNARY_CODE_SET = frozenset(UNARY_CODES.values()) | {GELU_TANH_CODE}

BINARY_CODES = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4, "Max": 5, "Min": 6}
# dtypes each binary op is claimed for (kernels: binary_f32, binary_i64, binary_i32; Pow is float-only).
BINARY_DTYPES = {
    "Add": ("float32", "int64", "int32"), "Sub": ("float32", "int64", "int32"),
    "Mul": ("float32", "int64", "int32"), "Div": ("float32", "int64", "int32"),
    "Pow": ("float32",), "Max": ("float32", "int64", "int32"), "Min": ("float32", "int64", "int32"),
}
BINARY_KERNELS = {"float32": "binary_f32", "int64": "binary_i64", "int32": "binary_i32"}
VARIADIC = {"Sum": "Add", "Mean": "Add", "Max": "Max", "Min": "Min"}

# ONNX TensorProto codes the cast kernel moves between.
CAST_CODES = {"float32": 1, "int32": 6, "int64": 7, "bool": 9}


def tensor_reason(node: ir.Node, value: ir.Value | None, dtypes: tuple[str, ...], what: str) -> str | None:
    """Why `value` cannot be used (missing, dynamic shape, dtype outside `dtypes`), or None."""
    if value is None:
        return f"{node.op_type}: {what} is missing"
    try:
        static_shape(value)
        dtype = numpy_dtype(value)
    except NotStatic as error:
        return f"{node.op_type}: {error}"
    if dtype.name not in dtypes:
        return f"{node.op_type}: {what} dtype {dtype.name} not supported (supported: {', '.join(dtypes)})"
    return None


def element_count(value: ir.Value) -> int:
    return int(np.prod(static_shape(value), dtype=np.int64))


# Unary -----------------------------------------------------------------------------------------------------------
def _clip_bounds(node: ir.Node) -> tuple[float, float] | str:
    """Clip's (min, max): attributes before opset 11, optional constant scalar inputs from 11 on."""
    if opset_version(node) < 11:
        low = float(attribute(node, "min", FLOAT_LOWEST))
        high = float(attribute(node, "max", FLOAT_MAX))
    else:
        bounds = []
        for index, default in ((1, FLOAT_LOWEST), (2, FLOAT_MAX)):
            value = present(node, index)
            if value is None or value.name == "":
                bounds.append(default)
                continue
            array = constant_value(value)
            if array is None:
                return f"Clip: input {index} ({'min' if index == 1 else 'max'}) must be a constant"
            if array.size != 1:
                return f"Clip: input {index} must be a scalar, got shape {array.shape}"
            bounds.append(float(array.reshape(-1)[0]))
        low, high = bounds
    if low > high:
        return f"Clip: min {low} > max {high} not supported"
    return low, high


def unary_parameters(node: ir.Node) -> tuple[int, float, float] | str:
    """(kernel op code, p0, p1), or the reason the node's attributes are not supported."""
    op = node.op_type
    if node.domain == CONTRIB_DOMAIN:
        alpha = float(attribute(node, "alpha", 1.702)) if op == "QuickGelu" else 0.0  # ORT's QuickGelu default
        return CONTRIB_UNARY_CODES[op], alpha, 0.0
    code = UNARY_CODES[op]
    if op == "Swish":
        return code, float(attribute(node, "alpha", 1.0)), 0.0
    if op == "LeakyRelu":
        return code, float(attribute(node, "alpha", 0.01)), 0.0
    if op == "HardSigmoid":
        return code, float(attribute(node, "alpha", 0.2)), float(attribute(node, "beta", 0.5))
    if op == "Elu":
        return code, float(attribute(node, "alpha", 1.0)), 0.0
    if op == "Selu":
        return (code, float(attribute(node, "alpha", 1.67326319217681884765625)),
                float(attribute(node, "gamma", 1.05070102214813232421875)))
    if op == "Gelu":
        approximate = string_attribute(node, "approximate", "none")
        if approximate not in ("none", "tanh"):
            return f"Gelu: approximate {approximate!r} not supported"
        return (code if approximate == "none" else GELU_TANH_CODE), 0.0, 0.0
    if op == "Clip":
        bounds = _clip_bounds(node)
        if isinstance(bounds, str):
            return bounds
        return code, bounds[0], bounds[1]
    return code, 0.0, 0.0


def check_unary(node: ir.Node) -> str | None:
    if node.domain != CONTRIB_DOMAIN and opset_version(node) < UNARY_OPSETS.get(node.op_type, 0):
        return f"{node.op_type}: needs opset {UNARY_OPSETS[node.op_type]}"
    if node.domain == CONTRIB_DOMAIN and any(value is not None and value.name for value in node.inputs[1:]):
        return f"{node.op_type}: the bias input is not supported"
    reason = tensor_reason(node, present(node, 0), ("float32",), "input 0")
    reason = reason or tensor_reason(node, node.outputs[0], ("float32",), "output 0")
    if reason:
        return reason
    parameters = unary_parameters(node)
    return parameters if isinstance(parameters, str) else None


def channel_operand(shape, out_shape) -> bool:
    """Whether an operand of `shape` is a per-channel vector broadcast over the pixels of a 4-D `out_shape` ([N or
    1, C, 1, 1] against [N, C, H, W]): blocked, it is [N or 1][blocks][1][16], broadcast along the pixels."""
    return (len(shape) == 4 and shape[0] in (1, out_shape[0]) and shape[1] == out_shape[1]
            and tuple(shape[2:]) == (1, 1))


# A blocked per-channel operand repeats every 16 lanes along the pixels: as [N, blocks, 1, 16] it made the chain
# kernel's rows 16 elements long (an offset computed per 16 floats: PP-OCR det's RSE neck chains, run blocked, took
# 20% of its time). It is stored tiled over up to this many pixels instead, so the rows are that many pixels long.
BLOCKED_ROW_PIXELS = 64


def _row_pixels(pixels: int) -> int:
    """The largest divisor of `pixels` that is at most BLOCKED_ROW_PIXELS."""
    return max(d for d in range(1, min(pixels, BLOCKED_ROW_PIXELS) + 1) if pixels % d == 0)


def blocked_operands(node: ir.Node, builder, indices) -> tuple[list, list, object, tuple[int, ...]]:
    """For a node of a blocked run (ortx.ep.lowering.blocked_layout): the buffers and shapes of inputs `indices` and
    of the output as views of the blocked tensors, [N, blocks, H*W / P, P * 16] with P = _row_pixels(H * W), pad
    lanes included (each element is computed on its own, so pad lanes only ever meet pad lanes). An operand is
    output-shaped (its blocked buffer), per-channel ([N or 1, C, 1, 1]: [N or 1, blocks, 1, P * 16], tiled over P
    pixels: a constant once when compiled, a computed one, such as a squeeze-and-excitation scale, by a
    strided_copy of its blocked form into a workspace before the node's step) or a single element (its buffer as
    stored, broadcast)."""
    out = node.outputs[0]
    batch, channels, height, width = static_shape(out)
    out_shape = static_shape(out)
    blocks, pixels = -(-channels // 16), _row_pixels(height * width)
    refs, shapes = [], []
    for index in indices:
        value = node.inputs[index]
        shape = static_shape(value)
        if shape == out_shape:
            refs.append(builder.blocked_buffer(value))
            shapes.append((shape[0], blocks, height * width // pixels, pixels * 16))
            continue
        if not channel_operand(shape, out_shape):
            refs.append(builder.buffer(value))
            shapes.append((1, 1, 1, 1))
            continue
        count, constant = shape[0], constant_value(value)
        if constant is not None:
            vector = np.zeros((count, blocks * 16), np.float32)
            vector[:, :channels] = np.asarray(constant, np.float32).reshape(count, channels)
            tiled = np.tile(vector.reshape(count, blocks, 1, 16), (1, 1, pixels, 1))
            refs.append(builder.add_constant(tiled, label=f"{value.name}:blocked_rows"))
        else:
            tiled = builder.workspace(4 * count * blocks * pixels * 16, label=f"{value.name}:blocked_rows")
            builder.emit("strided_copy", [4, 4, count, blocks, pixels, 16, blocks * 16, 16, 0, 1, 0], [],
                         [builder.blocked_buffer(value), tiled])
            refs.append(tiled)
        shapes.append((count, blocks, 1, pixels * 16))
    return refs, shapes, builder.produce_blocked(out), (batch, blocks, height * width // pixels, pixels * 16)


def lower_unary(node: ir.Node, builder) -> None:
    code, p0, p1 = unary_parameters(node)
    if node in builder.blocked_nodes:
        (x,), _, y, out_shape = blocked_operands(node, builder, [0])
        builder.emit("unary_f32", [code, int(np.prod(out_shape))], [p0, p1], [x, y])
        builder.finish_blocked(node.outputs[0])
        return
    count = element_count(node.outputs[0])
    if count:
        builder.emit("unary_f32", [code, count], [p0, p1],
                     [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


# Binary ----------------------------------------------------------------------------------------------------------
def broadcast_layout(a_shape, b_shape, out_shape) -> tuple[list[int], list[int], list[int]]:
    """(dims, a_strides, b_strides) of a binary_*/compare_* step: numpy broadcasting with axes collapsed.

    Size-1 output axes are dropped and neighbouring axes along which each operand is either present or broadcast
    in the same way are merged, so [N,C,H,W] op [1,C,1,1] becomes dims [N, C, H*W] with b strides [0, 1, 0] and
    the innermost strides are always 0 or 1.
    """
    dims, (a_strides, b_strides) = broadcast_layout_many([a_shape, b_shape], out_shape)
    return dims, a_strides, b_strides


def broadcast_layout_many(shapes, out_shape) -> tuple[list[int], list[list[int]]]:
    """`broadcast_layout` for any number of operands (Where has three): dims and one stride list per operand."""
    rank = len(out_shape)
    full = [(1,) * (rank - len(shape)) + tuple(shape) for shape in shapes]
    dims: list[int] = []
    flags: list[tuple[bool, ...]] = []
    for axis, size in enumerate(out_shape):
        if size == 1:
            continue
        flag = tuple(shape[axis] == 1 for shape in full)
        if dims and flags[-1] == flag:
            dims[-1] *= size
        else:
            dims.append(size)
            flags.append(flag)
    if not dims:
        dims, flags = [1], [(False,) * len(shapes)]

    def strides(which: int) -> list[int]:
        result, step = [], 1
        for size, flag in zip(reversed(dims), reversed(flags)):
            result.append(0 if flag[which] else step)
            step *= 1 if flag[which] else size
        return result[::-1]

    return dims, [strides(which) for which in range(len(shapes))]


def _emit_binary(builder, op: str, a_ref, a_shape, b_ref, b_shape, out_ref, out_shape, dtype: str) -> None:
    if int(np.prod(out_shape, dtype=np.int64)) == 0:
        return
    dims, a_strides, b_strides = broadcast_layout(a_shape, b_shape, out_shape)
    builder.emit(BINARY_KERNELS[dtype], [BINARY_CODES[op], len(dims), *dims, *a_strides, *b_strides], [],
                 [a_ref, b_ref, out_ref])


def check_binary(node: ir.Node) -> str | None:
    dtypes = BINARY_DTYPES[node.op_type]
    reason = tensor_reason(node, present(node, 0), dtypes, "input 0")
    if reason:
        return reason
    dtype = numpy_dtype(node.inputs[0]).name
    exponent = present(node, 1)
    if node.op_type == "Pow" and exponent is not None and exponent.dtype is not None \
            and numpy_dtype(exponent).name != "float32":
        if constant_value(exponent) is None:
            return f"Pow: exponent dtype {numpy_dtype(exponent).name} is supported only as a constant"
        return tensor_reason(node, node.outputs[0], (dtype,), "output 0")
    reason = tensor_reason(node, exponent, (dtype,), "input 1")
    return reason or tensor_reason(node, node.outputs[0], (dtype,), "output 0")


def lower_binary(node: ir.Node, builder) -> None:
    a, b, out = node.inputs[0], node.inputs[1], node.outputs[0]
    if node in builder.blocked_nodes:  # Add/Sub/Mul/Div only (blocked_layout's roles)
        (a_ref, b_ref), (a_shape, b_shape), out_ref, out_shape = blocked_operands(node, builder, [0, 1])
        _emit_binary(builder, node.op_type, a_ref, a_shape, b_ref, b_shape, out_ref, out_shape, "float32")
        builder.finish_blocked(out)
        return
    exponent = constant_value(b) if node.op_type == "Pow" else None
    if exponent is not None and exponent.size == 1 and float(exponent.reshape(-1)[0]) == 2.0 \
            and static_shape(out) == static_shape(a):
        # Pow(x, 2) == x * x exactly (both correctly rounded), at the cost of a multiply instead of powf.
        a_ref, shape = builder.buffer(a), static_shape(a)
        _emit_binary(builder, "Mul", a_ref, shape, a_ref, shape, builder.buffer(out), shape, "float32")
        return
    b_ref = builder.buffer(b)
    if node.op_type == "Pow" and numpy_dtype(b).name != "float32":
        b_ref = builder.add_constant(constant_value(b).astype(np.float32), label=f"{b.name}:float32")
    _emit_binary(builder, node.op_type, builder.buffer(a), static_shape(a), b_ref, static_shape(b),
                 builder.buffer(out), static_shape(out), numpy_dtype(out).name)


def check_variadic(node: ir.Node) -> str | None:
    dtypes = ("float32",) if node.op_type in ("Sum", "Mean") else BINARY_DTYPES[node.op_type]
    if not node.inputs:
        return f"{node.op_type}: no inputs"
    reason = tensor_reason(node, node.inputs[0], dtypes, "input 0")
    if reason:
        return reason
    dtype = numpy_dtype(node.inputs[0]).name
    for index, value in enumerate(node.inputs):
        reason = tensor_reason(node, value, (dtype,), f"input {index}")
        if reason:
            return reason
    return tensor_reason(node, node.outputs[0], (dtype,), "output 0")


def lower_variadic(node: ir.Node, builder) -> None:
    """Folds inputs left to right; intermediates have their own broadcast shapes, so they live in workspaces."""
    out = node.outputs[0]
    out_ref, out_shape, dtype = builder.buffer(out), static_shape(out), numpy_dtype(out)
    if element_count(out) == 0:
        return
    if len(node.inputs) == 1:
        code = CAST_CODES[dtype.name]
        builder.emit("cast", [code, code, element_count(out)], [], [builder.buffer(node.inputs[0]), out_ref])
        return
    op = VARIADIC[node.op_type]
    accumulated_ref, accumulated_shape = builder.buffer(node.inputs[0]), static_shape(node.inputs[0])
    for index, value in enumerate(node.inputs[1:], start=1):
        shape = np.broadcast_shapes(accumulated_shape, static_shape(value))
        last = index == len(node.inputs) - 1
        target = out_ref if last else builder.workspace(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize,
                                                        label=f"partial{index}")
        _emit_binary(builder, op, accumulated_ref, accumulated_shape, builder.buffer(value), static_shape(value),
                     target, shape, dtype.name)
        accumulated_ref, accumulated_shape = target, shape
    if node.op_type == "Mean":
        count = builder.add_constant(np.array([len(node.inputs)], np.float32), label=f"{node.name}:count")
        _emit_binary(builder, "Div", out_ref, out_shape, count, (1,), out_ref, out_shape, "float32")


# Elementwise chains (ai.ortx ElementwiseChain, ortx.passes.fuse_elementwise_chains) ------------------------------
CHAIN_MAX_INPUTS = 8  # kernels/elementwise.h ORTX_CHAIN_MAX_INPUTS / ORTX_CHAIN_MAX_TEMPS
CHAIN_MAX_TEMPS = 8
CHAIN_ATTRIBUTES = ("kinds", "codes", "operands", "params")


def _chain_program(node: ir.Node) -> list[tuple[int, int, int, int, float, float]] | str:
    """Per op (kind, code, operand a, operand b, p0, p1), checked: operands name inputs or earlier results."""
    values = {name: list(attribute(node, name, [])) for name in CHAIN_ATTRIBUTES}
    count = len(values["kinds"])
    if count == 0 or len(values["codes"]) != count or len(values["operands"]) != 2 * count \
            or len(values["params"]) != 2 * count:
        return f"ElementwiseChain: attributes {', '.join(CHAIN_ATTRIBUTES)} must describe the same ops"
    program = []
    for op in range(count):
        kind, code = int(values["kinds"][op]), int(values["codes"][op])
        a, b = (int(v) for v in values["operands"][2 * op:2 * op + 2])
        known = len(node.inputs) + op  # inputs, then the results of the ops before this one
        if kind not in (0, 1) or not 0 <= a < known or (kind == 1 and not 0 <= b < known):
            return f"ElementwiseChain: op {op} reads an operand that is neither an input nor an earlier result"
        if (kind == 1 and code not in BINARY_CODES.values()) or (kind == 0 and code not in UNARY_CODE_SET):
            return f"ElementwiseChain: op {op} has unknown {'binary' if kind else 'unary'} code {code}"
        program.append((kind, code, a, b if kind == 1 else -1, float(values["params"][2 * op]),
                        float(values["params"][2 * op + 1])))
    return program


def _chain_temps(program, inputs: int) -> tuple[list[int], int]:
    """(per op the kernel index of its destination, the number of temp slots): -1 (the output) for the last op,
    else a temp slot reused once every reader of its earlier value has run (elementwise row functions read and
    write the same position, so an op may write over an operand it reads last)."""
    last_use = {}
    for op, (kind, _, a, b, _, _) in enumerate(program):
        for operand in (a, b) if kind == 1 else (a,):
            last_use[operand] = op
    free: list[int] = []
    slots: dict[int, int] = {}  # result index (inputs + op) -> temp slot
    destinations = []
    used = 0
    for op, (kind, _, a, b, _, _) in enumerate(program):
        for operand in {a, b} if kind == 1 else {a}:
            if operand >= inputs and last_use[operand] == op:
                free.append(slots[operand])
        if op == len(program) - 1:
            destinations.append(-1)
            break
        if free:
            slot = min(free)
            free.remove(slot)
        else:
            slot, used = used, used + 1
        slots[inputs + op] = slot
        destinations.append(inputs + slot)
    return destinations, used


def check_elementwise_chain(node: ir.Node) -> str | None:
    if not 1 <= len(node.inputs) <= CHAIN_MAX_INPUTS:
        return f"ElementwiseChain: {len(node.inputs)} inputs (1 to {CHAIN_MAX_INPUTS} supported)"
    for index, value in enumerate(node.inputs):
        reason = tensor_reason(node, value, ("float32",), f"input {index}")
        if reason:
            return reason
    reason = tensor_reason(node, node.outputs[0], ("float32",), "output 0")
    if reason:
        return reason
    out_shape = static_shape(node.outputs[0])
    for index, value in enumerate(node.inputs):
        try:
            if np.broadcast_shapes(static_shape(value), out_shape) != tuple(out_shape):
                raise ValueError
        except ValueError:
            return f"ElementwiseChain: input {index} shape {static_shape(value)} does not broadcast to {out_shape}"
    program = _chain_program(node)
    if isinstance(program, str):
        return program
    _, temps = _chain_temps(program, len(node.inputs))
    if temps > CHAIN_MAX_TEMPS:
        return f"ElementwiseChain: needs {temps} temporaries (at most {CHAIN_MAX_TEMPS})"
    return None


def lower_elementwise_chain(node: ir.Node, builder) -> None:
    out = node.outputs[0]
    if element_count(out) == 0:
        return
    program = _chain_program(node)
    inputs = len(node.inputs)
    destinations, temps = _chain_temps(program, inputs)
    if node in builder.blocked_nodes:
        refs, shapes, out_ref, out_shape = blocked_operands(node, builder, range(inputs))
    else:
        refs = [builder.buffer(value) for value in node.inputs]
        shapes = [static_shape(value) for value in node.inputs]
        out_ref, out_shape = builder.buffer(out), static_shape(out)
    dims, strides = broadcast_layout_many(shapes, out_shape)
    ints = [inputs, len(program), temps, len(dims), *dims]
    for operand_strides in strides:
        ints += operand_strides
    # Result r (= inputs + op) of the attributes lives in its op's destination slot in the kernel's numbering.
    where = {inputs + op: destination for op, destination in enumerate(destinations)}
    floats = []
    for op, (kind, code, a, b, p0, p1) in enumerate(program):
        ints += [kind, code, destinations[op], where.get(a, a), where.get(b, b) if b >= 0 else -1]
        floats += [p0, p1]
    builder.emit("elementwise_chain_f32", ints, floats, [*refs, out_ref])
    if node in builder.blocked_nodes:
        builder.finish_blocked(out)


# Comparisons and Where ---------------------------------------------------------------------------------------------
COMPARE_CODES = {"Equal": 0, "Less": 1, "Greater": 2, "LessOrEqual": 3, "GreaterOrEqual": 4}
COMPARE_KERNELS = {"float32": "compare_f32", "int64": "compare_i64", "int32": "compare_i32"}


def check_compare(node: ir.Node) -> str | None:
    reason = tensor_reason(node, present(node, 0), tuple(COMPARE_KERNELS), "input 0")
    if reason:
        return reason
    dtype = numpy_dtype(node.inputs[0]).name
    reason = tensor_reason(node, present(node, 1), (dtype,), "input 1")
    return reason or tensor_reason(node, node.outputs[0], ("bool",), "output 0")


def lower_compare(node: ir.Node, builder) -> None:
    a, b, out = node.inputs[0], node.inputs[1], node.outputs[0]
    if element_count(out) == 0:
        return
    dims, a_strides, b_strides = broadcast_layout(static_shape(a), static_shape(b), static_shape(out))
    builder.emit(COMPARE_KERNELS[numpy_dtype(a).name],
                 [COMPARE_CODES[node.op_type], len(dims), *dims, *a_strides, *b_strides], [],
                 [builder.buffer(a), builder.buffer(b), builder.buffer(out)])


WHERE_DTYPES = ("float32", "int64", "int32", "bool")


def check_where(node: ir.Node) -> str | None:
    reason = tensor_reason(node, present(node, 0), ("bool",), "input 0 (condition)")
    reason = reason or tensor_reason(node, present(node, 1), WHERE_DTYPES, "input 1")
    if reason:
        return reason
    dtype = numpy_dtype(node.inputs[1]).name
    reason = tensor_reason(node, present(node, 2), (dtype,), "input 2")
    return reason or tensor_reason(node, node.outputs[0], (dtype,), "output 0")


def lower_where(node: ir.Node, builder) -> None:
    out = node.outputs[0]
    if element_count(out) == 0:
        return
    dims, strides = broadcast_layout_many([static_shape(value) for value in node.inputs[:3]], static_shape(out))
    builder.emit("where", [numpy_dtype(out).itemsize, len(dims), *dims, *strides[0], *strides[1], *strides[2]], [],
                 [*(builder.buffer(value) for value in node.inputs[:3]), builder.buffer(out)])


# BatchNormalization ----------------------------------------------------------------------------------------------
def check_batch_normalization(node: ir.Node) -> str | None:
    opset = opset_version(node)
    if opset < 7:
        return "BatchNormalization: opset < 7 not supported"
    if int(attribute(node, "training_mode", 0)) != 0:
        return "BatchNormalization: training_mode=1 not supported (inference only)"
    if opset < 9 and int(attribute(node, "spatial", 1)) != 1:
        return "BatchNormalization: spatial=0 not supported"
    if any(is_used(output) for output in node.outputs[1:]):
        return "BatchNormalization: only output 0 is supported (running statistics outputs are used)"
    reason = tensor_reason(node, present(node, 0), ("float32",), "input 0")
    reason = reason or tensor_reason(node, node.outputs[0], ("float32",), "output 0")
    if reason:
        return reason
    shape = static_shape(node.inputs[0])
    if len(shape) < 2:
        return f"BatchNormalization: input rank {len(shape)} < 2"
    for index, what in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
        value = present(node, index)
        array = constant_value(value) if value is not None else None
        if array is None:
            return f"BatchNormalization: input {index} ({what}) must be a constant"
        if array.size != shape[1]:
            return f"BatchNormalization: input {index} ({what}) has {array.size} values for {shape[1]} channels"
    return None


def lower_batch_normalization(node: ir.Node, builder) -> None:
    """y = x * scale / sqrt(var + eps) + (B - mean * scale / sqrt(var + eps)), folded per channel in float64."""
    scale, bias, mean, variance = (constant_value(node.inputs[i]).astype(np.float64).reshape(-1) for i in (1, 2, 3, 4))
    epsilon = float(attribute(node, "epsilon", 1e-5))
    multiplier = scale / np.sqrt(variance + epsilon)
    shift = bias - mean * multiplier
    shape = static_shape(node.inputs[0])
    inner = int(np.prod(shape[2:], dtype=np.int64))
    if shape[0] * shape[1] * inner == 0:
        return
    builder.emit("channel_affine_f32", [shape[0], shape[1], inner], [], [
        builder.buffer(node.inputs[0]),
        builder.add_constant(multiplier.astype(np.float32), label=f"{node.name}:scale"),
        builder.add_constant(shift.astype(np.float32), label=f"{node.name}:shift"),
        builder.buffer(node.outputs[0]),
    ])


# Cast ------------------------------------------------------------------------------------------------------------
def check_cast(node: ir.Node) -> str | None:
    to = int(attribute(node, "to", 0))
    names = {code: name for name, code in CAST_CODES.items()}
    if to not in names:
        return f"Cast: target type {to} not supported (supported: float32, int32, int64, bool)"
    reason = tensor_reason(node, present(node, 0), tuple(CAST_CODES), "input 0")
    return reason or tensor_reason(node, node.outputs[0], (names[to],), "output 0")


def lower_cast(node: ir.Node, builder) -> None:
    count = element_count(node.outputs[0])
    if count:
        builder.emit("cast", [CAST_CODES[numpy_dtype(node.inputs[0]).name], int(attribute(node, "to", 0)), count],
                     [], [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


LOWERINGS = {
    **{("", op): (check_unary, lower_unary) for op in UNARY_CODES},
    **{(CONTRIB_DOMAIN, op): (check_unary, lower_unary) for op in CONTRIB_UNARY_CODES},
    **{("", op): (check_binary, lower_binary) for op in ("Add", "Sub", "Mul", "Div", "Pow")},
    **{("", op): (check_variadic, lower_variadic) for op in VARIADIC},
    ("", "BatchNormalization"): (check_batch_normalization, lower_batch_normalization),
    ("", "Cast"): (check_cast, lower_cast),
    **{("", op): (check_compare, lower_compare) for op in COMPARE_CODES},
    ("", "Where"): (check_where, lower_where),
    ("ai.ortx", "ElementwiseChain"): (check_elementwise_chain, lower_elementwise_chain),
}
