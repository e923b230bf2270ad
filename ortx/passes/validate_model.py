"""Input validation run before any other pass: problems that would otherwise surface as an onnxruntime error far
from their cause, each reported with the node that has it.

1. describe_structure(graph proto), for models onnx.checker rejects: a cycle (names the nodes on it) or a node
   input nothing defines (names the node and the value). optimize() calls it when loading fails, to replace the
   checker's "not topologically sorted" with the actual cause.
2. validate_model(model), which optimize() runs before the level's passes (not in DEFAULT_PASSES: a session may
   register custom-op libraries with onnxruntime, which this check cannot see): a node in a domain neither onnxruntime nor OrtxEP
   implements and that no model-local function defines; a default-domain opset onnxruntime cannot run (below 7,
   ORT's documented minimum, or above what this onnxruntime build loads, found once by a probe session).
Limits: subgraphs (If/Loop bodies) are checked by onnx.checker only; an op missing from an ORT build for a
supported opset is not detected here (ORT names that node itself when the session is created).
"""
from __future__ import annotations

import functools
import time

import onnx
import onnx_ir as ir
from onnx import helper

from ortx.passes._report import PassReport

# Domains with kernels in onnxruntime's CPU provider, plus our own (run by OrtxEP).
KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc", "ai.onnx.preview.training",
                 "ai.ortx")
# onnxruntime only guarantees support for models stamped with opset 7 or above (it warns below that).
ORT_MIN_OPSET = 7


class InvalidModelError(ValueError):
    """The model cannot be optimized or run; `node` names the offending node when there is one."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node


def _label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}#{index}"


def describe_structure(graph: onnx.GraphProto) -> InvalidModelError | None:
    """A cycle or an undefined node input in `graph`, as an error naming the node(s); None when there is neither."""
    producers = {output: index for index, node in enumerate(graph.node) for output in node.output if output}
    defined = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in defined and name not in producers:
                return InvalidModelError(f"node '{_label(node, index)}' ({node.op_type}) reads '{name}', which no "
                                         f"node, graph input or initializer defines", _label(node, index))
    # Depth-first search over producer edges; a grey node met again closes a cycle.
    state: dict[int, int] = {}  # 1 = on the current path, 2 = done
    path: list[int] = []

    def visit(start: int) -> list[int] | None:
        stack = [(start, iter(graph.node[start].input))]
        state[start] = 1
        path.append(start)
        while stack:
            index, inputs = stack[-1]
            for name in inputs:
                producer = producers.get(name)
                if producer is None or name in defined or state.get(producer) == 2:
                    continue
                if state.get(producer) == 1:
                    return path[path.index(producer):]
                state[producer] = 1
                path.append(producer)
                stack.append((producer, iter(graph.node[producer].input)))
                break
            else:
                stack.pop()
                state[path.pop()] = 2
        return None

    for index in range(len(graph.node)):
        if index not in state:
            cycle = visit(index)
            if cycle:
                names = [_label(graph.node[i], i) for i in reversed(cycle)]
                return InvalidModelError(f"nodes {' -> '.join(repr(n) for n in names + names[:1])} form a cycle",
                                         names[0])
    return None


@functools.lru_cache(maxsize=None)
def ort_max_opset() -> int:
    """The highest default-domain opset this onnxruntime build loads (probed once with an Identity model)."""
    import onnxruntime

    supported = ORT_MIN_OPSET
    for opset in range(ORT_MIN_OPSET, onnx.defs.onnx_opset_version() + 1):
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe",
                                  [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        try:
            onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception:  # onnxruntime refuses the opset: the previous one is the maximum
            break
        supported = opset
    return supported


def validate_model(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    functions = {(key[0], key[1]) for key in model.functions}  # keys are (domain, name, overload)
    for node in model.graph:
        if node.domain not in KNOWN_DOMAINS and (node.domain, node.op_type) not in functions:
            raise InvalidModelError(f"node '{node.name}' ({node.op_type}) is in domain '{node.domain}', which "
                                    f"neither onnxruntime nor OrtxEP implements", node.name)
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if opset is not None and not ORT_MIN_OPSET <= opset <= ort_max_opset():
        first = next((node for node in model.graph if node.domain in ("", "ai.onnx")), None)
        raise InvalidModelError(
            f"the model imports default-domain opset {opset}; onnxruntime {_ort_version()} runs opsets "
            f"{ORT_MIN_OPSET}..{ort_max_opset()}" + (f" (first node: '{first.name}' {first.op_type})" if first else ""),
            first.name if first else None)
    return PassReport(model, name="validate_model", counts={}, seconds=time.perf_counter() - start)


def _ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__
