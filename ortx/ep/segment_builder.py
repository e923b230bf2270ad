"""Builds one compiled segment: lowerings emit kernel steps here, then arena offsets are planned.

Buffers are graph tensors (arena), segment inputs/outputs (external, bound per run), constants (initializers and
packed weights) and workspaces. An arena buffer lives from the first to the last step that names it, so the
planner needs nothing but the emitted steps. A fallible kernel (one that can fail on runtime data, e.g. gather
with an index out of range) gets the segment's status record appended as its last buffer: one arena buffer shared
by the segment's fallible steps, live from the first to the last (the runner reads it right after each). In `finish()`, an output may take the bytes of an input that dies at
its step (ortx.memory.inplace: elementwise kernels, exact aliasing only); the merged buffers are planned as one.
A tensor of a blocked run (ortx.ep.lowering.blocked_layout) has a second buffer in the blocked layout; reorders
between the two are emitted where a step first needs the form it lacks (blocked_buffer, and buffer() after
produce_blocked).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from ortx import _kernels
from ortx.ep.lowering._values import constant_value, size_bytes, static_shape
from ortx.ep.lowering.blocked_layout import blocked_nbytes
from ortx.ep.precision import PRECISION_KEY, PRECISIONS
from ortx.memory.inplace import InPlaceReuse, find_in_place
from ortx.memory.plan import Lifetime, MemoryPlan, plan_offsets


@dataclasses.dataclass(frozen=True)
class BufferRef:
    index: int


@dataclasses.dataclass
class _Buffer:
    kind: int  # _kernels buffer kinds: 0 arena, 1 constant, 2 external
    value: int  # arena: offset (after planning); constant: index; external: index
    nbytes: int
    label: str
    workspace: bool = False  # kernel scratch (builder.workspace), not a graph tensor


ARENA, CONSTANT, EXTERNAL = 0, 1, 2


class SegmentBuilder:
    """The lowering context for one segment; `finish()` turns it into a runnable `CompiledProgram`."""

    def __init__(self, inputs: list[ir.Value], outputs: list[ir.Value], *, num_threads: int = 1,
                 in_place: bool = True, precision: str = "fp32", sparse_policy=None):
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
        self.num_threads = num_threads
        self.precision = precision  # ortx.ep.precision: what the GEMM/conv lowerings emit (see precision_of)
        # ortx.tune.sparse_choice: dense or sparse kernels per constant-weight layer (None: the prior alone)
        self.sparse_policy = sparse_policy
        self.in_place = in_place
        self._buffers: list[_Buffer] = []
        self._by_value: dict[str, BufferRef] = {}
        self._constants: list[np.ndarray] = []
        self._output_names = {value.name for value in outputs}
        self._steps: list[tuple[int, np.ndarray, np.ndarray, list[int]]] = []
        self._step_nodes: list[str] = []
        self._product_nodes: list[str] = []
        self._status: BufferRef | None = None
        self.current_node = ""
        # ortx.ep.lowering.blocked_layout: the nodes lowered on blocked (NCHWc) tensors, and per tensor its blocked
        # buffer; tensors produced blocked whose NCHW form no step has asked for yet
        self.blocked_nodes: frozenset[ir.Node] = frozenset()
        # blocked_layout.expand_depthwise_pairs: depthwise node -> the 1x1 conv lowered with it in one step
        self.expand_of: dict[ir.Node, ir.Node] = {}
        # blocked_layout.depthwise_bf16x3_pairs: bf16x3 1x1 node -> the depthwise conv lowered with it in one step
        self.depthwise_of: dict[ir.Node, ir.Node] = {}
        self._blocked: dict[str, BufferRef] = {}
        self._plain_pending: dict[str, ir.Value] = {}
        # blocked_layout.pair_rows_values: tensors kept as bf16 pair rows (kernels/pair_rows.h) and their buffers
        self.pair_rows: frozenset[str] = frozenset()
        self._pair_rows: dict[str, BufferRef] = {}
        # ortx.ep.lowering.layout.concat_in_place: tensors written straight into their Concat's output (part name ->
        # (output name, byte offset, output bytes)), and per such arena buffer its (parent buffer index, offset)
        self.concat_slices: dict[str, tuple[str, int, int]] = {}
        # the outputs of Concats on blocked tensors (blocked_layout.blocked_concat), whose concat_slices inputs
        # produce_blocked places inside the output's blocked buffer
        self.blocked_concats: frozenset[str] = frozenset()
        self._concat_parents: set[int] = set()
        self._slice_of: dict[int, tuple[int, int]] = {}
        for index, value in enumerate(list(inputs) + list(outputs)):
            if value.name not in self._by_value:
                self._by_value[value.name] = self._new(EXTERNAL, index, size_bytes(value), value.name)

    def precision_of(self, node: ir.Node) -> str:
        """The precision `node`'s kernels run: the session's, or fp32 for a node provider option fp32_nodes marked
        (ortx.ep.precision.mark_fp32_nodes)."""
        return "fp32" if node.metadata_props.get(PRECISION_KEY) == "fp32" else self.precision

    def _new(self, kind: int, value: int, nbytes: int, label: str, *, workspace: bool = False) -> BufferRef:
        self._buffers.append(_Buffer(kind, value, nbytes, label, workspace))
        return BufferRef(len(self._buffers) - 1)

    # Buffers -----------------------------------------------------------------------------------------------
    def buffer(self, value: ir.Value) -> BufferRef:
        """The storage of a graph tensor: external, constant (initializer/Constant) or a new arena buffer."""
        ref = self._by_value.get(value.name)
        if ref is not None:
            return ref
        if value.name in self.pair_rows:
            raise ValueError(f"tensor {value.name!r} is kept in pair rows: no NCHW form of it is made")
        if value.name in self._plain_pending:  # produced blocked: reorder to NCHW once, before this first reader
            del self._plain_pending[value.name]
            ref = self._by_value[value.name] = self._arena_tensor(value)
            self._emit_reorder("reorder_from_nchwc_f32", value, self._blocked[value.name], ref)
            return ref
        array = constant_value(value)
        ref = self.add_constant(array, label=value.name) if array is not None else self._arena_tensor(value)
        self._by_value[value.name] = ref
        return ref

    def _arena_tensor(self, value: ir.Value) -> BufferRef:
        """A new arena buffer for a graph tensor: a slice of its Concat's output when concat_slices names it and the
        Concat runs NCHW (a blocked Concat copies this tensor's blocked form into its own blocked output)."""
        ref = self._new(ARENA, -1, size_bytes(value), value.name)
        part = self.concat_slices.get(value.name)
        if part is not None and part[0] not in self.blocked_concats:
            parent_name, offset, parent_bytes = part
            parent = self._by_value.get(parent_name)
            if parent is None:
                parent = self._by_value[parent_name] = self._new(ARENA, -1, parent_bytes, parent_name)
            self._slice_of[ref.index] = (parent.index, offset)
        return ref

    def is_slice_of(self, part: BufferRef, whole: BufferRef, offset: int) -> bool:
        """Whether `part`'s bytes are those of `whole` from `offset` on (a Concat then copies nothing)."""
        return self._slice_of.get(part.index) == (whole.index, offset)

    def blocked_buffer(self, value: ir.Value) -> BufferRef:
        """A 4-D float32 tensor in the blocked layout: its producer's blocked output, or a reorder of its NCHW form
        (once per tensor; the first blocked reader emits it)."""
        ref = self._blocked.get(value.name)
        if ref is None and value.name in self.pair_rows:
            raise ValueError(f"tensor {value.name!r} is kept in pair rows: no blocked fp32 form of it is made")
        if ref is None:
            ref = self._blocked[value.name] = self._new(ARENA, -1, blocked_nbytes(static_shape(value)),
                                                        f"{value.name}:nchwc")
            self._emit_reorder("reorder_to_nchwc_f32", value, self.buffer(value), ref)
        return ref

    def produce_blocked(self, value: ir.Value) -> BufferRef:
        """The blocked buffer a blocked node writes `value` into; its NCHW form is made only when asked for. An
        input of a blocked Concat that concat_slices places inside the Concat's output is a slice of the output's
        blocked buffer (whole blocks: the same bytes at the same offset as in NCHW)."""
        ref = self._blocked.get(value.name)
        if ref is None or ref.index not in self._concat_parents:  # (a blocked Concat's output made by its inputs)
            ref = self._blocked[value.name] = self._new(ARENA, -1, blocked_nbytes(static_shape(value)),
                                                        f"{value.name}:nchwc")
            part = self.concat_slices.get(value.name)
            if part is not None and part[0] in self.blocked_concats:
                parent_name, offset, parent_bytes = part
                parent = self._blocked.get(parent_name)
                if parent is None:
                    parent = self._blocked[parent_name] = self._new(ARENA, -1, parent_bytes, f"{parent_name}:nchwc")
                    self._concat_parents.add(parent.index)
                self._slice_of[ref.index] = (parent.index, offset)
        self._plain_pending[value.name] = value
        return ref

    def pair_rows_buffer(self, value: ir.Value) -> BufferRef:
        """The pair-rows buffer of a tensor in `pair_rows` (its producer and every reader use it; no other form of
        it is ever made)."""
        if value.name not in self.pair_rows:
            raise ValueError(f"tensor {value.name!r} is not kept in pair rows")
        ref = self._pair_rows.get(value.name)
        if ref is None:
            batch, channels, height, width = static_shape(value)
            nbytes = 2 * batch * -(-channels // 32) * 32 * height * width  # [N][C/32][H*W][32] bf16
            ref = self._pair_rows[value.name] = self._new(ARENA, -1, nbytes, f"{value.name}:pair_rows")
        return ref

    def finish_blocked(self, value: ir.Value) -> None:
        """After the producing step: a segment output gets its NCHW form now (no later step reads it)."""
        if value.name in self._output_names:
            del self._plain_pending[value.name]
            self._emit_reorder("reorder_from_nchwc_f32", value, self._blocked[value.name], self._by_value[value.name])

    def _emit_reorder(self, kernel: str, value: ir.Value, source: BufferRef, target: BufferRef) -> None:
        batch, channels, height, width = static_shape(value)
        self.emit(kernel, [batch, channels, height * width], [], [source, target])

    def add_constant(self, array: np.ndarray, *, label: str = "constant") -> BufferRef:
        """A read-only buffer kept alive by the program (initializers, packed weights, tables)."""
        array = np.asarray(array, order="C")
        self._constants.append(array)
        return self._new(CONSTANT, len(self._constants) - 1, array.nbytes, label)

    def workspace(self, nbytes: int, *, label: str = "workspace") -> BufferRef:
        """Arena scratch memory that lives only across the steps that name it."""
        return self._new(ARENA, -1, int(nbytes), f"{self.current_node}:{label}", workspace=True)

    def alias(self, output: ir.Value, source: ir.Value) -> None:
        """Lets `output` share `source`'s bytes (Reshape-like ops); copies when `output` is bound externally."""
        if output.name in self._output_names or output.name in self._by_value:
            self.emit("copy_bytes", [size_bytes(output)], [], [self.buffer(source), self.buffer(output)])
        else:
            self._by_value[output.name] = self.buffer(source)

    # Steps -------------------------------------------------------------------------------------------------
    def emit(self, kernel: str, ints, floats, buffers: list[BufferRef], product_node: str | None = None) -> None:
        """`product_node`: the node whose products the step's kernel computes in its precision, where that is not
        the current node (a fused step placed at a later node's turn); the assignment's precision column."""
        kernel_id = _kernels.KERNEL_IDS.get(kernel)
        if kernel_id is None:
            raise KeyError(f"node {self.current_node!r}: no kernel named {kernel!r} in ortx._kernels")
        if kernel in _kernels.FALLIBLE_KERNELS:
            if self._status is None:
                self._status = self._new(ARENA, -1, 8 * _kernels.STATUS_WORDS, "status")
            buffers = list(buffers) + [self._status]
        self._steps.append((
            kernel_id,
            np.asarray(ints, dtype=np.int64).reshape(-1),
            np.asarray(floats, dtype=np.float32).reshape(-1),
            [ref.index for ref in buffers],
        ))
        self._step_nodes.append(self.current_node)
        self._product_nodes.append(product_node or self.current_node)

    # Result ------------------------------------------------------------------------------------------------
    def lifetimes(self) -> list[Lifetime]:
        """One lifetime per arena buffer named by a step (before in-place merging), named by buffer index."""
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for step, (_, _, _, buffer_ids) in enumerate(self._steps):
            for index in buffer_ids:
                first.setdefault(index, step)
                last[index] = step
        return [
            Lifetime(str(index), self._buffers[index].nbytes, first[index], last[index])
            for index in sorted(first)
            if self._buffers[index].kind == ARENA
        ]

    def _in_place(self) -> tuple[dict[int, int], list[InPlaceReuse]]:
        if not self.in_place:
            return {}, []
        steps = [(_kernels.KERNEL_NAMES[kernel_id], ints, buffers) for kernel_id, ints, _, buffers in self._steps]
        sliced = set(self._slice_of) | {parent for parent, _ in self._slice_of.values()}  # placed by their Concat
        return find_in_place(steps, lambda i: self._buffers[i].kind == ARENA and i not in sliced,
                             lambda i: self._buffers[i].nbytes, self._step_nodes)

    def _planned_lifetimes(self, buffer_lifetimes: list[Lifetime], merged: dict[int, int]) -> list[Lifetime]:
        """Buffer lifetimes with every in-place group folded into its representative's (same size) and every
        Concat slice into its Concat output's (the larger)."""
        groups: dict[str, Lifetime] = {}
        for item in buffer_lifetimes:
            index = merged.get(int(item.name), int(item.name))
            name = str(index)
            old = groups.get(name)
            # a group is as large as its representative, which no step may name (a Concat output made only by its
            # slices): its slices lie inside those bytes, past a slice's own size
            nbytes = max(item.nbytes, self._buffers[index].nbytes, old.nbytes if old is not None else 0)
            groups[name] = Lifetime(name, nbytes, item.first if old is None else min(old.first, item.first),
                                    item.last if old is None else max(old.last, item.last))
        return [dataclasses.replace(item, name=name) for name, item in groups.items()]

    def finish(self) -> "CompiledProgram":
        buffer_lifetimes = self.lifetimes()
        merged, reuses = self._in_place()
        slices = {child: parent for child, (parent, _) in self._slice_of.items()}
        merged.update(slices)
        plan = plan_offsets(self._planned_lifetimes(buffer_lifetimes, merged))
        for item in buffer_lifetimes:
            index = int(item.name)
            offset = self._slice_of[index][1] if index in self._slice_of else 0
            self._buffers[index].value = plan.offsets[str(merged.get(index, index))] + offset
        tensors = tuple(TensorPlacement(self._buffers[int(t.name)].label, self._buffers[int(t.name)].value, t.nbytes,
                                        t.first, t.last, self._buffers[int(t.name)].workspace,
                                        self._buffers[self._slice_of[int(t.name)][0]].label
                                        if int(t.name) in self._slice_of else "")
                        for t in buffer_lifetimes)
        in_place = tuple(InPlaceListing(r.step, r.kernel, r.node, self._buffers[r.input_buffer].label,
                                        self._buffers[r.output_buffer].label, r.nbytes) for r in reuses)
        ints, floats, buffer_ids = [], [], []
        int_offsets, float_offsets, buffer_offsets = [0], [0], [0]
        for _, step_ints, step_floats, step_buffers in self._steps:
            ints.append(step_ints)
            floats.append(step_floats)
            buffer_ids.extend(step_buffers)
            int_offsets.append(int_offsets[-1] + len(step_ints))
            float_offsets.append(float_offsets[-1] + len(step_floats))
            buffer_offsets.append(len(buffer_ids))
        program = _kernels.Program(
            [step[0] for step in self._steps],
            int_offsets,
            float_offsets,
            buffer_offsets,
            np.concatenate(ints) if ints else np.zeros(0, np.int64),
            np.concatenate(floats) if floats else np.zeros(0, np.float32),
            buffer_ids,
            [b.kind for b in self._buffers],
            [b.value for b in self._buffers],
            self._constants,
        )
        listing = tuple(
            StepListing(_kernels.KERNEL_NAMES[kernel_id], tuple(int(v) for v in step_ints), step_floats.copy(),
                        tuple((self._buffers[i].kind, self._buffers[i].value) for i in step_buffers), node,
                        product_node)
            for (kernel_id, step_ints, step_floats, step_buffers), node, product_node
            in zip(self._steps, self._step_nodes, self._product_nodes)
        )
        constants = tuple(
            ConstantListing(self._buffers[i].label, str(self._constants[b.value].dtype),
                            tuple(self._constants[b.value].shape))
            for i, b in enumerate(self._buffers) if b.kind == CONSTANT
        )
        return CompiledProgram(program, plan, tuple(self._step_nodes), sum(c.nbytes for c in self._constants),
                               listing, constants, tensors=tensors, in_place=in_place,
                               buffer_lifetimes=tuple(self._planned_lifetimes(buffer_lifetimes, slices)))


@dataclasses.dataclass(frozen=True, eq=False)
class StepListing:
    """One step as data, for code generation: buffers are (kind, value) pairs as in the program's buffer table."""

    kernel: str
    ints: tuple[int, ...]
    floats: np.ndarray  # float32, kept as an array so rendering sees the exact bits
    buffers: tuple[tuple[int, int], ...]
    node: str
    product_node: str = ""  # whose products the kernel computes (SegmentBuilder.emit)


@dataclasses.dataclass(frozen=True)
class TensorPlacement:
    """Where an arena buffer (graph tensor or workspace) lives: offset in the segment's arena, steps it is live."""

    label: str
    offset: int
    nbytes: int
    first: int
    last: int
    workspace: bool = False  # a kernel's scratch rather than a graph tensor
    within: str = ""  # a Concat input planned inside its output (concat_in_place): that output's label


@dataclasses.dataclass(frozen=True)
class InPlaceListing:
    """Step `step` writes `output` over `input`, which dies there (ortx.memory.inplace)."""

    step: int
    kernel: str
    node: str
    input: str
    output: str
    nbytes: int


@dataclasses.dataclass(frozen=True)
class ConstantListing:
    label: str
    dtype: str
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class CompiledProgram:
    """`native` is the JIT'd form of the same steps (ortx.codegen.jit.NativeSegment) when one was built."""

    program: "_kernels.Program"
    plan: MemoryPlan
    step_nodes: tuple[str, ...]
    constant_bytes: int
    steps: tuple[StepListing, ...] = ()
    constants: tuple[ConstantListing, ...] = ()  # in constant-index order
    native: object = None
    tensors: tuple[TensorPlacement, ...] = ()  # every arena buffer, in buffer order
    in_place: tuple[InPlaceListing, ...] = ()
    # before in-place merging (Concat slices folded into their output's): the plan's input without reuse
    buffer_lifetimes: tuple[Lifetime, ...] = ()

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes

    def step_error(self, error: "_kernels.KernelError") -> Exception:
        """The error onnxruntime raises for the same fault (InvalidArgument, its message text), naming the node."""
        from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

        step = self.steps[error.step] if error.step is not None and error.step < len(self.steps) else None
        if step is None or error.code not in _STEP_FAULTS:
            return RuntimeError(f"OrtxEP: {error}")
        op_type, fault = _STEP_FAULTS[error.code]
        return InvalidArgument(
            f"Non-zero status code returned while running {op_type} node. Name:'{step.node}' Status Message: "
            + fault.format(value=error.value, position=error.position, low=-error.bound, high=error.bound - 1)
            + f" (OrtxEP kernel {step.kernel}, step {error.step})")


# Status codes of fallible kernels (ortx_kernels.h) -> (op type, onnxruntime's message for the same fault).
_STEP_FAULTS = {
    _kernels.STATUS_INDEX_OUT_OF_RANGE: (
        "Gather", "indices element out of data bounds, idx={value} must be within the inclusive range "
                  "[{low},{high}] (at flat position {position} of the indices)"),
}
