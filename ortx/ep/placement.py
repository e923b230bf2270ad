"""Which device runs each node: capability per device, forced placements, then cost-based placement.

1. Capability: for every node and every selected device, None (it can run the node) or the reason it cannot. The
   CPU's answer is OrtxEP's capability decision (ortx.ep.capability); another device must see static shapes and
   then asks its backend's `check`.
2. Forced: provider option `placement` ("NODE:DEVICE,..."); a device that cannot run the node, or is not selected,
   is an error naming the node, the device and the reason.
3. Cost (list scheduling, in the spirit of HEFT): in graph order (topological), each node goes to the capable device
   where it would finish first: ready = the latest of its inputs' arrival (producer's finish + bytes / bandwidth of
   the slower side + a hand-off latency when the devices differ; graph inputs and outputs are in host memory, the
   CPU's side; initializers are loaded at compile time and cost nothing per run), start = max(ready, device free),
   finish = start + the device's `estimate_seconds`. Independent branches thus spread over idle devices
   (horizontal), a chain stays on the device where it is fastest once transfers are paid (vertical).
4. Cut refinement: a node moves to a neighbour's device when that lowers its estimate plus the transfer cost of its
   edges; repeated until nothing moves, so a vertical cut settles where the fewest bytes cross.
5. Nodes no selected device runs go to ONNX Runtime (label ORT), on the CPU lane.
Limits: per-node estimates (no fusion effects); the CPU and ORT share one lane (the main thread); greedy, so not
optimal. With devices "cpu" alone and nothing forced, steps 3-4 are skipped: the labels are the CPU's decisions.
"""
from __future__ import annotations

import dataclasses
import logging

import onnx_ir as ir

from ortx.ep.assignment import nodes_by_user_name
from ortx.ep.capability import Decision, _static_reason
from ortx.ep.devices import Device
from ortx.ep.devices import cpu as cpu_device
from ortx.ep.lowering._values import NotStatic, size_bytes
from ortx.ep.partition import CPU, ORT, node_inputs

logger = logging.getLogger(__name__)

# Hand-off between two devices: a worker thread's wake-up and a wave barrier (ortx.ep.runtime), a few tens of us.
CROSSING_SECONDS = 20e-6
MAX_REFINEMENT_ROUNDS = 8


@dataclasses.dataclass(frozen=True)
class Placement:
    labels: dict[str, str]  # node name -> device name or ORT
    capability: dict[str, dict[str, str]]  # node name -> {device name: "" (can run it) or the reason it cannot}
    reasons: dict[str, str]  # node name -> why it went where it did (only when there was a choice or a force)
    estimated_seconds: float = 0.0  # the schedule's makespan estimate (0 for the CPU-only shortcut)


def parse_placement(value) -> dict[str, str]:
    """'conv1:npu,stft:dsp' or {'conv1': 'npu'} -> {node: device}."""
    if isinstance(value, dict):
        return {str(node): str(device).strip().lower() for node, device in value.items()}
    forced = {}
    for item in str(value).split(","):
        if not item.strip():
            continue
        node, separator, device = item.strip().rpartition(":")
        if not separator or not node or not device:
            raise ValueError(f"{item!r} is not NODE:DEVICE")
        forced[node] = device.strip().lower()
    return forced


def _capability(graph: ir.Graph, decisions: dict[str, Decision], devices: list[Device]) -> dict[str, dict[str, str]]:
    table: dict[str, dict[str, str]] = {}
    for node in graph:
        row = {}
        for device in devices:
            if device.name == CPU:
                decision = decisions[node.name]
                row[CPU] = "" if decision.claimed else (decision.reason or "declined")
                continue
            reason = _static_reason(node)
            if reason is None:
                try:
                    reason = device.backend_module().check(node)
                except NotStatic as error:
                    reason = str(error)
            row[device.name] = reason or ""
        table[node.name] = row
    return table


def _forced_nodes(graph: ir.Graph, forced: dict[str, str], fused_from_key: str, *,
                  strict: bool = True) -> dict[str, str]:
    """User node name -> graph node name (a node the passes fused is found through the fused node's sources);
    a name not found is an error when `strict`, else left out."""
    holders = nodes_by_user_name(graph, fused_from_key)
    found = {}
    for name in forced:
        if name in holders:  # the node of that name, else the one the passes fused it into
            found[name] = next((node.name for node in holders[name] if node.name == name), holders[name][0].name)
        elif strict:
            raise ValueError(f"OrtxEP option placement: node {name!r} is not in the graph after the graph passes "
                             f"(removed or renamed); its nodes: {sorted(node.name for node in graph)[:20]}")
    return found


def _apply_forced(graph, forced, devices, capability, fused_from_key) -> dict[str, str]:
    selected = {device.name for device in devices}
    labels = {}
    for user_name, node_name in _forced_nodes(graph, forced, fused_from_key).items():
        device = forced[user_name]
        if device not in selected:
            raise ValueError(f"OrtxEP option placement: node {user_name!r} is forced onto device {device!r}, which "
                             f"is not among the selected devices ({', '.join(sorted(selected))}; provider option "
                             f"devices)")
        reason = capability[node_name][device]
        if reason:
            op_type = next(node.op_type for node in graph if node.name == node_name)
            raise ValueError(f"OrtxEP option placement: node {user_name!r} ({op_type}) cannot run on device "
                             f"{device!r}: {reason}")
        labels[node_name] = device
    return labels


def _bytes(value: ir.Value) -> int:
    try:
        return size_bytes(value)
    except (NotStatic, TypeError):
        return 0


class _CostModel:
    """Estimates (cached per node and device) and transfer times between labels."""

    def __init__(self, devices: list[Device]):
        self.devices = {device.name: device for device in devices}
        self._estimates: dict[tuple[str, str], float] = {}

    def estimate(self, node: ir.Node, label: str) -> float:
        key = (node.name, label)
        if key not in self._estimates:
            if label in (ORT, CPU) or label not in self.devices:
                seconds = cpu_device.estimate_seconds(node)
            else:
                seconds = float(self.devices[label].backend_module().estimate_seconds(node))
            self._estimates[key] = seconds
        return self._estimates[key]

    def _bandwidth(self, label: str) -> float:
        device = self.devices.get(label)
        return device.bandwidth_bytes_per_second if device is not None else cpu_device.CPU.bandwidth_bytes_per_second

    def transfer(self, nbytes: int, source: str, target: str) -> float:
        if source == target or {source, target} <= {CPU, ORT}:  # the same memory, the same lane
            return 0.0
        return CROSSING_SECONDS + nbytes / min(self._bandwidth(source), self._bandwidth(target))


def _lane(label: str) -> str:
    return CPU if label in (CPU, ORT) else label


def _schedule(nodes: list[ir.Node], candidates: dict[str, list[str]], forced: dict[str, str], costs: _CostModel):
    """Step 3: list scheduling to the earliest finish. Returns (labels, reasons, makespan)."""
    finish: dict[str, float] = {}
    label_of_value: dict[int, str] = {}
    free: dict[str, float] = {}
    labels, reasons = {}, {}
    for node in nodes:
        options = [forced[node.name]] if node.name in forced else candidates[node.name] or [ORT]
        best = None
        for label in options:
            ready = 0.0
            for value in node_inputs(node):
                producer = value.producer()
                if value.is_graph_input():  # in host memory; initializers are loaded at compile time, not per run
                    ready = max(ready, costs.transfer(_bytes(value), CPU, label))
                elif producer is not None and producer.name in finish:
                    arrival = finish[producer.name] + costs.transfer(_bytes(value), label_of_value[id(value)], label)
                    ready = max(ready, arrival)
            start = max(ready, free.get(_lane(label), 0.0))
            end = start + costs.estimate(node, label)
            end += sum(costs.transfer(_bytes(value), label, CPU) for value in node.outputs if value.is_graph_output())
            if best is None or end < best[0] - 1e-12:
                best = (end, label)
        end, label = best
        labels[node.name] = label
        finish[node.name] = end
        free[_lane(label)] = end
        for value in node.outputs:
            label_of_value[id(value)] = label
        if node.name in forced:
            reasons[node.name] = f"forced onto {label} (provider option placement)"
        elif len(options) > 1:
            reasons[node.name] = f"{label}: earliest estimated finish of {', '.join(options)}"
        elif label != ORT:
            reasons[node.name] = f"{label}: the only selected device that runs it"
    return labels, reasons, max(finish.values(), default=0.0)


def _edge_cost(node: ir.Node, label: str, labels: dict[str, str], costs: _CostModel) -> float:
    """Transfer time of `node`'s edges if it ran on `label`, its neighbours staying where they are."""
    total = 0.0
    for value in node_inputs(node):
        producer = value.producer()
        if value.is_graph_input():
            total += costs.transfer(_bytes(value), CPU, label)
        elif producer is not None and producer.name in labels:
            total += costs.transfer(_bytes(value), labels[producer.name], label)
    for value in node.outputs:
        if value.is_graph_output():
            total += costs.transfer(_bytes(value), label, CPU)
        for user, _ in value.uses():
            if user.name in labels:
                total += costs.transfer(_bytes(value), label, labels[user.name])
    return total


def _refine(nodes: list[ir.Node], labels: dict[str, str], candidates: dict[str, list[str]], forced: dict[str, str],
            costs: _CostModel, reasons: dict[str, str]) -> None:
    """Step 4: move a node to a neighbour's device when its estimate plus edge transfers get cheaper."""
    for _ in range(MAX_REFINEMENT_ROUNDS):
        moved = False
        for node in nodes:
            if node.name in forced or len(candidates[node.name]) < 2:
                continue
            neighbours = {labels[v.producer().name] for v in node_inputs(node)
                          if v.producer() is not None and v.producer().name in labels}
            neighbours |= {labels[user.name] for value in node.outputs for user, _ in value.uses()
                           if user.name in labels}
            current = labels[node.name]
            cost = costs.estimate(node, current) + _edge_cost(node, current, labels, costs)
            for label in sorted(neighbours & set(candidates[node.name]) - {current}):
                other = costs.estimate(node, label) + _edge_cost(node, label, labels, costs)
                if other < cost - 1e-12:
                    labels[node.name], cost, moved = label, other, True
                    reasons[node.name] = f"{label}: fewer bytes cross (moved from {current} at the cut)"
        if not moved:
            return


def place(graph: ir.Graph, decisions: dict[str, Decision], devices: list[Device], *,
          forced: dict[str, str] | None = None, excluded: dict[str, set[str]] | None = None,
          fused_from_key: str = "ortx.fused_from", preferred: dict[str, str] | None = None) -> Placement:
    """`decisions`: the CPU's capability decisions; `excluded`: node -> devices it must not go to (compile errors).
    `preferred`: node -> device from a compiled artifact (ortx.artifact): followed where that device is selected
    and can run the node, else the node is placed as any other. Raises ValueError for a forced placement that
    cannot hold."""
    forced = forced or {}
    excluded = excluded or {}
    names = [device.name for device in devices]
    if names == [CPU] and not forced:  # the default: exactly OrtxEP's decisions, no estimates needed
        labels = {name: CPU if decision.claimed else ORT for name, decision in decisions.items()}
        capability = {name: {CPU: "" if d.claimed else (d.reason or "declined")} for name, d in decisions.items()}
        return Placement(labels, capability, {})
    capability = _capability(graph, decisions, devices)
    for name, devices_out in excluded.items():
        for device in devices_out:
            if not capability[name].get(device):
                capability[name][device] = "compile error on this device"
    forced_labels = _apply_forced(graph, forced, devices, capability, fused_from_key)
    candidates = {name: [device for device in names if not row[device]] for name, row in capability.items()}
    followed = {}
    for user_name, node_name in _forced_nodes(graph, preferred or {}, fused_from_key, strict=False).items():
        device = (preferred or {})[user_name]
        if node_name not in forced_labels and device in candidates.get(node_name, ()):
            candidates[node_name] = [device]
            followed[node_name] = device
    nodes = list(graph)
    costs = _CostModel(devices)
    labels, reasons, makespan = _schedule(nodes, candidates, forced_labels, costs)
    _refine(nodes, labels, candidates, forced_labels, costs, reasons)
    for name, device in followed.items():
        if labels.get(name) == device:
            reasons[name] = f"on {device} as the compiled artifact placed it"
    for name, label in labels.items():
        if label == ORT and name not in reasons:
            reasons[name] = "; ".join(f"{device}: {row}" for device, row in capability[name].items())
    logger.debug("placement over %s: estimated makespan %.3g s", ", ".join(names), makespan)
    return Placement(labels, capability, reasons, makespan)
