"""What a pass did (`PassReport`) and the one way passes are run in sequence (`run_passes`).

run_passes:
1. Calls each pass in order on the same onnx_ir model (passes work in place), timing it and recording the node
   count before and after.
2. With check=True, validates the model after each pass: every node input must be defined earlier in the graph
   (naming the first node that reads an undefined value), then onnx.checker on the serialized model.
3. Any failure, raised by the pass or found by the check, becomes a PassError naming the failing pass, the passes
   that ran before it, and the node when one is known.
Limits: the structural check covers the main graph; subgraphs (If/Loop bodies) are covered by onnx.checker only.
"""
from __future__ import annotations

import dataclasses
import logging
import re
import time
from typing import Callable, Sequence

import onnx
import onnx_ir as ir
from onnxscript.rewriter import RewriteRule, RewriteRuleClassBase, RewriteRuleSet

logger = logging.getLogger(__name__)

Pass = Callable[[ir.Model], "PassReport"]

# Node metadata key naming the original nodes a fused node replaced (comma-separated), so a session can report
# per original node; nested fusions list the innermost originals.
FUSED_FROM_KEY = "ortx.fused_from"


def record_fused_from(new_node: ir.Node, replaced: Sequence[ir.Node]) -> None:
    """Sets new_node's FUSED_FROM_KEY to the original names behind `replaced`, expanding earlier fusions."""
    names: list[str] = []
    for node in replaced:
        earlier = node.metadata_props.get(FUSED_FROM_KEY)
        for name in (earlier.split(",") if earlier else [node.name or f"<{node.op_type}>"]):
            if name not in names:
                names.append(name)
    new_node.metadata_props[FUSED_FROM_KEY] = ",".join(names)


def apply_fusions(model: ir.Model, fusions: Sequence[RewriteRuleClassBase], *, commute: bool = False) -> int:
    """Applies rule instances (not `cls.rule()`, so the instances keep their notes) in one sweep; returns the
    number of rewrites. commute=True also tries Add/Mul patterns with their operands swapped.

    A rule whose pattern needs an op type the model does not have cannot match, so it is dropped before the
    commuted variants are built (2^k copies for k Add/Mul nodes: Gelu's tanh form has 64, and building them
    took most of a small model's session creation)."""
    rules = [RewriteRule(fusion.pattern, fusion.rewrite, fusion.check, name=fusion.name,
                         remove_nodes=fusion.remove_nodes, graph_pre_visitor=fusion.setup,
                         graph_post_visitor=fusion.cleanup) for fusion in fusions]
    present = _op_types(model)
    rules = [rule for rule in rules if _required_op_types(rule) <= present]
    if not rules:
        return 0
    return RewriteRuleSet(rules, commute=commute).apply_to_model(model)


def _op_types(model: ir.Model) -> set[str]:
    """Every op type in the model: main graph, subgraphs (the rule set rewrites those too) and functions."""
    types = {node.op_type for node in ir.traversal.RecursiveGraphIterator(model.graph)}
    for function in model.functions.values():
        types.update(node.op_type for node in ir.traversal.RecursiveGraphIterator(function))
    return types


def _required_op_types(rule: RewriteRule) -> set[str]:
    """Op types every match of `rule` contains: the pattern's nodes reached from its outputs through node inputs,
    never through an OrValue (each alternative is optional). Empty (keep the rule) if onnxscript's pattern is
    not readable as expected."""
    pattern = getattr(rule, "_target_pattern", None)
    required: set[str] = set()
    seen: set[int] = set()
    pending = list(getattr(pattern, "outputs", ()))
    while pending:
        value = pending.pop()
        producer = getattr(value, "producer", None)
        node = producer() if callable(producer) else None
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        identifier = node.op_identifier()
        if identifier is not None:
            required.add(identifier[1])
        pending.extend(value for value in node.inputs if value is not None)
    return required


def remove_if_unused(graph: ir.Graph, values: Sequence[ir.Value]) -> int:
    """Deletes those of `values` that are initializers nothing reads any more; returns the bytes freed."""
    freed = 0
    for value in values:
        if value.name in graph.initializers and graph.initializers[value.name] is value and not value.uses() \
                and not value.is_graph_output() and not value.is_graph_input():
            del graph.initializers[value.name]
            freed += value.const_value.nbytes if value.const_value is not None else 0
    return freed


def unique_initializer_name(graph: ir.Graph, base: str) -> str:
    """`base`, or `base_1`, `base_2`, ... whichever is not yet an initializer or value name in `graph`."""
    taken = set(graph.initializers) | {value.name for value in graph.inputs}
    taken.update(output.name for node in graph for output in node.outputs)
    candidate, suffix = base, 0
    while candidate in taken:
        suffix += 1
        candidate = f"{base}_{suffix}"
    return candidate


@dataclasses.dataclass
class PassReport(ir.passes.PassResult):
    """One pass's account of itself; `modified` is derived from `counts` (any non-zero count), never assumed.

    counts hold only changes (`nodes_folded`, `bytes_saved`, ...) so that a pass that changed nothing reports
    none; the node totals before/after are recorded separately by run_passes.
    """

    name: str = ""
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    nodes_before: int | None = None
    nodes_after: int | None = None
    modified: bool = dataclasses.field(init=False, default=False)

    def __post_init__(self) -> None:
        self.modified = any(value != 0 for value in self.counts.values())

    def to_dict(self) -> dict:
        """JSON-ready summary (the model itself is left out)."""
        return {"name": self.name, "modified": self.modified, "counts": dict(self.counts), "notes": list(self.notes),
                "seconds": self.seconds, "nodes_before": self.nodes_before, "nodes_after": self.nodes_after}


class PassError(RuntimeError):
    """A pass raised or left an invalid model; names the pass, the passes before it and the node when known."""

    def __init__(self, pass_name: str, previous: Sequence[str], node: str | None, detail: str):
        self.pass_name = pass_name
        self.previous = list(previous)
        self.node = node
        self.detail = detail
        after = f" (after {', '.join(self.previous)})" if self.previous else " (first pass)"
        at_node = f" at node '{node}'" if node else ""
        super().__init__(f"pass '{pass_name}'{after} failed{at_node}: {detail}")


def pass_name(a_pass: Pass) -> str:
    return getattr(a_pass, "__name__", None) or type(a_pass).__name__


def find_undefined_input(graph: ir.Graph) -> tuple[str, str] | None:
    """(node name, value name) of the first node reading a value not defined before it, or None."""
    defined = {id(value) for value in graph.inputs}
    defined.update(id(value) for value in graph.initializers.values())
    for node in graph:
        for value in node.inputs:
            if value is None:
                continue
            if id(value) not in defined:
                return node.name or f"<{node.op_type}>", value.name or "<unnamed>"
        defined.update(id(output) for output in node.outputs)
    for output in graph.outputs:
        if id(output) not in defined:
            return "<graph outputs>", output.name or "<unnamed>"
    return None


# The checker names nodes as "node: name: <name> OpType: <op>" or "Node (<name>)".
_CHECKER_NODE = re.compile(r"(?:name:\s*(\S+)\s+OpType)|(?:Node\s*\(([^)]+)\))")


def check_model(model: ir.Model) -> None:
    """Raises ValueError naming the node when the model is structurally wrong or fails onnx.checker."""
    undefined = find_undefined_input(model.graph)
    if undefined is not None:
        node, value = undefined
        error = ValueError(f"node '{node}' reads '{value}', which is not defined before it")
        error.node = node  # type: ignore[attr-defined]
        raise error
    try:
        onnx.checker.check_model(ir.serde.serialize_model(model))
    except onnx.checker.ValidationError as checker_error:
        message = " ".join(str(checker_error).split())
        match = _CHECKER_NODE.search(message)
        error = ValueError(f"onnx.checker: {message}")
        error.node = (match.group(1) or match.group(2)) if match else None  # type: ignore[attr-defined]
        raise error from checker_error


def run_passes(model: ir.Model, passes: Sequence[Pass], *, check: bool = False,
               after_each: Callable[[], object] | None = None) -> list[PassReport]:
    """Runs `passes` in order, in place on `model`; returns one PassReport per pass. `after_each` is called after
    every pass (the session returns the memory a pass freed before the next allocates)."""
    reports: list[PassReport] = []
    done: list[str] = []
    for a_pass in passes:
        name = pass_name(a_pass)
        nodes_before = len(model.graph)
        start = time.perf_counter()
        try:
            report = a_pass(model)
        except Exception as error:
            node = getattr(error, "node", None)
            raise PassError(name, done, getattr(node, "name", node), f"{type(error).__name__}: {error}") from error
        seconds = time.perf_counter() - start
        if not isinstance(report, PassReport):
            raise PassError(name, done, None, f"returned {type(report).__name__}, expected PassReport")
        report.name = report.name or name
        report.seconds = report.seconds or seconds
        report.nodes_before = nodes_before
        report.nodes_after = len(model.graph)
        if check:
            try:
                check_model(model)
            except ValueError as error:
                raise PassError(name, done, getattr(error, "node", None), str(error)) from error
        logger.debug("%s: %s in %.3f s", name, report.counts, report.seconds)
        reports.append(report)
        done.append(name)
        if after_each is not None:
            after_each()
    return reports
