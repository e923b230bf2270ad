"""THE data path, one function per stage, read top to bottom.

prepare:   model = load(source) -> unique node names -> onnx_ir model owning its tensors (the proto can go)
           -> run_passes(model, SESSION_PASSES)
compile:   specialize(model, input shapes) -> OrtxEP's fusions (attention, Gelu, Conv epilogues) -> assign
           (capability) -> partition
           -> compile claimed segments (lowering + arena plan) / build ORT sub-sessions -> ExecutionPlan
The session, the CLI and the benchmarks all go through these two functions. Between stages (and passes) the memory
a stage freed goes back to the OS (ortx.memory.release), so it does not add to the next stage's peak.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time

import onnx
import onnx_ir as ir

from ortx.codegen.jit import jit_compile
from ortx.config import Options
from ortx.ep.assignment import FUSED_FROM_KEY, Assignment, NodeAssignment
from ortx.ep.capability import Decision, assign
from ortx.ep.compile_nodes import compile_segment
from ortx.ep.fallback import OrtSegment, segment_model
from ortx.ep.lowering._values import numpy_dtype, static_shape, NotStatic
from ortx.ep.macs import node_macs
from ortx.ep.devices.cpu import CPU as CPU_DEVICE
from ortx.ep.partition import CPU, ORT, Segment, partition
from ortx.ep.placement import place
from ortx.ep.render import partition_graph
from ortx.ep.runtime import ClaimedStep, DeviceStep, ExecutionPlan, OrtStep, TensorSpec
from ortx.ep.specialize import specialize
from ortx.memory.release import between_passes, release_freed_memory, return_free_pages
from ortx.model_io import constant_initializers, forget_removed_graph_io, load, own_tensors
from ortx.passes import SESSION_PASSES
from ortx.passes._report import PassReport, run_passes
from ortx.passes.fuse_attention import fuse_attention_extended
from ortx.passes.fuse_conv_epilogue import ORTX_DOMAIN, fuse_conv_epilogue
from ortx.passes.fuse_elementwise_chains import fuse_elementwise_chains
from ortx.passes.fuse_gelu import fuse_gelu_extended
from ortx.passes.fuse_matmul_epilogue import fuse_matmul_epilogue
from ortx.passes.fuse_multi_head_attention import fuse_multi_head_attention
from ortx.passes.fuse_qdq import INT8_DECLINED_KEY, fuse_qdq
from ortx.passes.fuse_silu import fuse_silu_extended
from ortx.passes.remove_redundant_qdq import remove_redundant_qdq

logger = logging.getLogger(__name__)

# A lowering that fails at compile time declines its node and the partition is redone; this bounds the rounds.
MAX_COMPILE_ROUNDS = 8


@dataclasses.dataclass
class PreparedModel:
    model: ir.Model
    original_nodes: list[tuple[str, str]]  # (name, op_type) of every node the user gave us
    reports: list[PassReport]


@dataclasses.dataclass
class OrtSettings:
    """How declined segments are run: the ORT providers after OrtxEP, their options, the session options."""

    sess_options: object  # for sub-sessions that share the cores with OrtxEP's segments
    providers: list[str]
    provider_options: list[dict]
    solo_sess_options: object = None  # for a plan with no claimed segment (ORT alone: its threads may spin)

    def options_for(self, any_claimed: bool):
        return self.sess_options if any_claimed or self.solo_sess_options is None else self.solo_sess_options


@dataclasses.dataclass
class CompiledModel:
    plan: ExecutionPlan
    assignment: Assignment
    reports: list[PassReport]
    compile_seconds: float
    model_signature: str | None = None  # ortx.tune.model_choice's, when tuning was on


def name_nodes(proto: onnx.ModelProto) -> None:
    """Gives every node a unique name, so assignment rows and ORT sub-models can refer to nodes by name."""
    seen: set[str] = set()
    for index, node in enumerate(proto.graph.node):
        name = node.name or f"{node.op_type}_{index}"
        while name in seen:
            name = f"{name}_{index}"
        node.name = name
        seen.add(name)


def ir_to_proto(model: ir.Model) -> onnx.ModelProto:
    return ir.serde.serialize_model(model)


def prepare(source, *, passes=SESSION_PASSES) -> PreparedModel:
    return prepare_model(proto_to_ir(load(source)), passes=passes)


def prepare_loaded(proto: onnx.ModelProto, *, passes=SESSION_PASSES) -> PreparedModel:
    """`prepare` for a model the caller already loaded (a private checked copy from `load`)."""
    return prepare_model(proto_to_ir(proto), passes=passes)


def proto_to_ir(proto: onnx.ModelProto) -> ir.Model:
    """The loaded model, every node named, as an onnx_ir model that owns its tensors (copied out of `proto` once):
    the caller can drop `proto`, and a weight a graph pass replaces is then freed, where a tensor that still read
    from the proto would keep all of its weights alive (ortx.model_io.own_tensors)."""
    name_nodes(proto)
    model = ir.serde.deserialize_model(proto)
    own_tensors(model)
    constant_initializers(model)
    return model


def prepare_model(model: ir.Model, *, passes=SESSION_PASSES) -> PreparedModel:
    """Runs the graph passes in place on `model` (from `proto_to_ir`, whose proto the caller may have dropped)."""
    return_free_pages()
    original_nodes = [(node.name, node.op_type) for node in model.graph]
    reports = run_passes(model, passes, after_each=between_passes(model)) if passes else []
    forget_removed_graph_io(model)  # the weights the passes replaced, which onnx_ir's graph would keep alive
    release_freed_memory(model)
    return PreparedModel(model, original_nodes, list(reports))


def _tensor_spec(value: ir.Value) -> TensorSpec:
    try:
        return TensorSpec(value.name, static_shape(value), numpy_dtype(value))
    except NotStatic:
        dtype = None
        if value.dtype is not None and isinstance(value.type, ir.TensorType):
            try:
                dtype = numpy_dtype(value)
            except (NotStatic, TypeError):
                dtype = None
        return TensorSpec(value.name, None, dtype)


@dataclasses.dataclass(frozen=True)
class DeviceSettings:
    """Which devices OrtxEP places nodes on (ortx.ep.devices, in order of preference) and the forced placements
    (provider options `devices` and `placement`)."""

    devices: tuple = (CPU_DEVICE,)
    forced: dict = dataclasses.field(default_factory=dict)  # node name -> device name
    preferred: dict = dataclasses.field(default_factory=dict)  # node name -> device, followed where possible
    #                                                             (a compiled artifact's placement, ortx.artifact)


def _compile_claimed(model: ir.Model, decisions: dict[str, Decision], num_threads: int,
                     jit: Options | None = None, tuning: "TuningSettings | None" = None, precision: str = "fp32",
                     devices: DeviceSettings | None = None, sparse_policy=None, layout_policy=None):
    """Places (ortx.ep.placement), partitions and lowers: CPU segments through compile_segment, other devices'
    through their backend's compile. A node whose CPU lowering raises is declined with the error, a segment another
    device fails to compile is kept off that device, and we try again. With `jit` (and jit.jit set), each CPU
    segment is then also compiled to C (ortx.codegen.jit), with the per-step thread counts `tuning` tunes or finds
    recorded (ortx.tune.step_threads). `layout_policy` (ortx.tune.layout_choice) keeps a CPU segment's blocked runs
    or compiles it on NCHW kernels. Returns (segments, CPU programs, device programs, placement)."""
    from ortx.tune.layout_choice import LayoutPolicy
    from ortx.tune.sparse_choice import check_segment

    layout_policy = layout_policy or LayoutPolicy()

    devices = devices or DeviceSettings()
    by_name = {device.name: device for device in devices.devices}
    excluded: dict[str, set[str]] = {}
    for _ in range(MAX_COMPILE_ROUNDS):
        placed = place(model.graph, decisions, list(devices.devices), forced=devices.forced, excluded=excluded,
                       fused_from_key=FUSED_FROM_KEY, preferred=devices.preferred)
        segments = partition(model.graph, placed.labels)
        programs, device_programs = {}, {}
        failed = False
        layout_policy.choices.clear()  # a retry after a compile error decides again
        for position, segment in enumerate(segments):
            if segment.device == ORT:
                continue
            try:
                if segment.device == CPU:
                    programs[position] = layout_policy.choose(
                        lambda layout: check_segment(
                            lambda policy: compile_segment(segment.nodes, segment.inputs, segment.outputs,
                                                           num_threads=num_threads, precision=precision,
                                                           sparse_policy=policy,
                                                           blocked=layout != "nchw" and BLOCKED_LAYOUT,
                                                           fuse_expand=EXPAND_DEPTHWISE and layout == "blocked",
                                                           pair_rows=PAIR_ROWS),
                            sparse_policy, segment.inputs, segment.outputs, num_threads),
                        segment.nodes, segment.inputs, segment.outputs, num_threads, precision)
                else:
                    device_programs[position] = by_name[segment.device].backend_module().compile(
                        segment.nodes, segment.inputs, segment.outputs, num_threads=num_threads)
            except Exception as error:  # a lowering bug must not take the session down: decline and retry
                _decline_after_error(segment, error, decisions, excluded, placed)
                failed = True
                break
        if not failed:
            if jit is not None and jit.jit:
                schedules = _step_threads(programs, segments, num_threads, jit, tuning)
                substitutes = _tuned_gemms(programs, num_threads, jit, tuning)
                programs = {position: jit_compile(program, jit, schedules.get(position), substitutes.get(position))
                            for position, program in programs.items()}
            return segments, programs, device_programs, placed
    raise RuntimeError("OrtxEP: too many compile errors; see the log")


def _decline_after_error(segment: Segment, error: Exception, decisions: dict[str, Decision],
                         excluded: dict[str, set[str]], placed) -> None:
    if segment.device == CPU:
        node_name = getattr(error, "node_name", None) or segment.nodes[0].name
        logger.warning("OrtxEP: declining node %s after a compile error: %s", node_name, error)
        old = decisions[node_name]
        decisions[node_name] = Decision(old.node, old.op_type, False, f"compile error: {error}")
        return
    forced = [node.name for node in segment.nodes if placed.reasons.get(node.name, "").startswith("forced")]
    if forced:
        raise RuntimeError(f"device {segment.device!r} failed to compile the segment holding node {forced[0]!r}, "
                           f"forced onto it by provider option placement: {error}") from error
    logger.warning("OrtxEP: device %s failed to compile a segment of %d nodes from %s; placing them elsewhere: %s",
                   segment.device, len(segment.nodes), segment.nodes[0].name, error)
    for node in segment.nodes:
        excluded.setdefault(node.name, set()).add(segment.device)


def _sparse_policy(jit: Options | None, tuning: "TuningSettings | None"):
    """Dense or sparse kernels per constant-weight layer (ortx.tune.sparse_choice): measured now for tuning
    "quick"/"full", recorded for "cached", else the prior."""
    from ortx.tune.sparse_choice import ForcedPolicy, SparseChoice, SparsePolicy

    if tuning is None:
        return SparsePolicy("off")
    if tuning.sparse == "off":
        return ForcedPolicy(SparseChoice("dense", source="option"))
    return SparsePolicy("quick" if tuning.sparse == "measure" else tuning.mode, tuning.database_path, jit)


def _layout_policy(jit: Options | None, tuning: "TuningSettings | None"):
    """Blocked runs (with or without fused expand + depthwise steps) or NCHW kernels per segment
    (ortx.tune.layout_choice): measured now for tuning "quick"/"full", recorded for "cached", else the blocked runs
    the planner found."""
    from ortx.tune.layout_choice import LayoutPolicy

    if tuning is None:
        return LayoutPolicy("off")
    return LayoutPolicy(tuning.mode, tuning.database_path, jit)


def _step_threads(programs: dict, segments: list[Segment], num_threads: int, jit: Options,
                  tuning: "TuningSettings | None") -> dict[int, tuple]:
    """Per claimed segment position, its per-step thread schedule: searched and recorded now (tuning "quick" or
    "full"), read from the records ("cached"), or none (the default: every step on the session's count)."""
    if tuning is None or tuning.mode == "off" or not programs:
        return {}
    if tuning.mode == "cached" and not os.path.exists(tuning.database_path):
        return {}  # nothing recorded yet; reading must not create files
    from ortx.codegen.jit import JitError
    from ortx.tune import step_threads
    from ortx.tune.fingerprint import current
    from ortx.tune.records import TuningDatabase
    from ortx.tune.runner import TimingSettings

    settings = TimingSettings(timed_runs=10 if tuning.mode == "quick" else 30)
    schedules = {}
    with TuningDatabase(tuning.database_path) as database:
        fingerprint = current(jit)
        for position, program in programs.items():
            if tuning.mode == "cached":
                schedule = step_threads.recorded_schedule(program, num_threads, database, fingerprint)
            else:
                specs = [_tensor_spec(value) for value in segments[position].inputs + segments[position].outputs]
                if not all(spec.static and spec.dtype.kind == "f" for spec in specs):
                    continue  # random integers could be out-of-range indices (step_threads' limits)
                shapes = [step_threads.TensorShape(spec.shape, spec.dtype) for spec in specs]
                inputs = shapes[:len(segments[position].inputs)]
                try:
                    tuned = step_threads.tune_segment(program, inputs, shapes[len(inputs):], num_threads=num_threads,
                                                      options=jit, database=database, fingerprint=fingerprint,
                                                      settings=settings, source=f"step_threads:{tuning.mode}",
                                                      search=tuning.search_step_threads)
                except JitError as error:
                    logger.warning("OrtxEP: per-step threads not tuned: %s", error)
                    continue
                schedule = tuned.step_threads
            if schedule is not None:
                schedules[position] = schedule
    return schedules


def _tuned_gemms(programs: dict, num_threads: int, jit: Options, tuning: "TuningSettings | None") -> dict:
    """Per claimed segment position, the gemm_f32 steps that call a tuned generated GEMM instead (tuned now for
    "quick"/"full" unless ortx tune's scheduler searches them, recorded for "cached"; ortx.tune.gemm_steps)."""
    if tuning is None:
        return {}
    from ortx.tune import gemm_steps

    return gemm_steps.segment_substitutes(programs, num_threads=num_threads, options=jit, mode=tuning.mode,
                                          database_path=tuning.database_path, search=tuning.search_step_threads)


@dataclasses.dataclass(frozen=True)
class TuningSettings:
    """How compile_for_shapes chooses between OrtxEP and ORT per segment (ortx.tune.engine_choice)."""

    mode: str  # one of ortx.tune.engine_choice.MODES
    database_path: str  # the SQLite tuning database
    search_step_threads: bool = True  # False: "quick"/"full" validate the recorded per-step thread counts without
    #                                   searching more (ortx tune's task scheduler searched them under a budget),
    #                                   and read tuned GEMM schedules from the records without searching either
    sparse: str = "auto"  # OrtxEP option "sparse" (ortx.tune.sparse_choice): "auto" follows `mode`, "measure"
    #                       times each candidate layer now (as "quick"), "off" keeps every layer dense
    model_records: bool = True  # apply the whole-model records (ortx.tune.model_choice); `ortx tune` measures the
    #                             plan without them


def compile_for_shapes(prepared: PreparedModel, input_shapes: dict[str, tuple[int, ...]], ort: OrtSettings, *,
                       num_threads: int, claim: bool = True, use_reference_kernels: bool = False,
                       jit: Options | None = None, tuning: TuningSettings | None = None,
                       precision: str = "fp32", devices: DeviceSettings | None = None) -> CompiledModel:
    """`jit`: compile claimed segments to C with these options (None: the step interpreter runs them).
    `devices`: the devices to place nodes on and forced placements (default: the CPU alone).
    `tuning`: give claimed segments that ORT runs faster (measured or recorded) back to ORT, and compile again.
    `precision`: ortx.ep.precision's option ("bf16": constant-weight GEMMs and convs run bf16 kernels)."""
    start = time.perf_counter()
    compiled, model, standard = _compile(prepared, input_shapes, ort, num_threads=num_threads, claim=claim,
                                         use_reference_kernels=use_reference_kernels, jit=jit, tuning=tuning,
                                         precision=precision, devices=devices)
    if claim and tuning is not None and tuning.mode != "off":
        choices = _choose_engines(compiled, model, standard, ort, tuning)
        signature = _model_signature(standard, num_threads, precision)
        whole = _whole_model_choice(signature, choices, tuning) if tuning.model_records else None
        if whole is not None and whole.engine == "ort":
            choices = [dataclasses.replace(choice, engine="ort", source=f"{choice.source}; {whole.describe}")
                       for choice in choices]
        given_back = {name: choice for choice in choices if choice.engine == "ort" for name in choice.original_nodes}
        if given_back:
            first_layouts = compiled.assignment.layout_choices  # also those of segments now given back
            compiled, _, _ = _compile(prepared, input_shapes, ort, num_threads=num_threads, claim=claim,
                                      use_reference_kernels=use_reference_kernels, jit=jit, given_back=given_back,
                                      tuning=tuning, precision=precision, devices=devices)
            compiled.assignment.layout_choices = tuple(dict.fromkeys(first_layouts
                                                                     + compiled.assignment.layout_choices))
        compiled.assignment.engine_choices = tuple(choices)
        compiled.assignment.model_choice = whole
        compiled.model_signature = signature
    return_free_pages()  # the lowering's temporaries (a collection here measured no lower peak)
    compiled.compile_seconds = time.perf_counter() - start
    return compiled


def _model_signature(standard: ir.Model, num_threads: int, precision: str) -> str:
    from ortx.tune import model_choice

    return model_choice.model_signature(standard, num_threads, precision)


def _whole_model_choice(signature: str, choices, tuning: TuningSettings):
    """ortx.tune.model_choice's recorded decision for the whole model (None: nothing recorded, nothing claimed,
    or a segment ORT cannot run)."""
    from ortx.tune import model_choice
    from ortx.tune.engine_choice import ORTX_ONLY_NOTE
    from ortx.tune.fingerprint import current
    from ortx.tune.records import TuningDatabase

    if not choices or any(ORTX_ONLY_NOTE in choice.source for choice in choices):
        return None
    if not os.path.exists(tuning.database_path):
        return None  # nothing recorded yet; reading must not create files
    with TuningDatabase(tuning.database_path) as database:
        times = model_choice.recorded(database, current(), signature)
    if times is None:
        return None
    return model_choice.ModelChoice(signature, "ort" if model_choice.goes_back(times) else "ortx", *times, "records")


def _choose_engines(compiled: CompiledModel, model: ir.Model, standard: ir.Model, ort: OrtSettings,
                    tuning: TuningSettings):
    from ortx.tune import engine_choice
    from ortx.tune.fingerprint import current
    from ortx.tune.records import TuningDatabase

    def choose(database):
        return engine_choice.choose_engines(compiled.plan, model, standard, mode=tuning.mode, database=database,
                                            fingerprint=current() if database is not None else None,
                                            ort_settings=ort, fused_from_key=FUSED_FROM_KEY)

    if tuning.mode == "cached" and not os.path.exists(tuning.database_path):
        return choose(None)  # nothing recorded yet; reading must not create files
    with TuningDatabase(tuning.database_path) as database:
        return choose(database)


def _compile(prepared: PreparedModel, input_shapes: dict[str, tuple[int, ...]], ort: OrtSettings, *,
             num_threads: int, claim: bool, use_reference_kernels: bool, jit: Options | None,
             given_back: dict | None = None, tuning: "TuningSettings | None" = None,
             precision: str = "fp32",
             devices: DeviceSettings | None = None) -> tuple[CompiledModel, ir.Model, ir.Model]:
    """(compiled model, the graph it was compiled from, that graph before ai.ortx fusions). `given_back`: user-graph
    node name -> the EngineChoice that sent it to ORT."""
    start = time.perf_counter()
    model = specialize(prepared.model, input_shapes)
    standard = model
    decisions = assign(model.graph)
    reports = []
    given_back = given_back or {}
    decisions = _decline_given_back(decisions, given_back)
    if claim:
        # Chains fuse only where every claimed node runs on the CPU (a chain would hide its nodes from placement),
        # and only when ELEMENTWISE_CHAINS is on (see there).
        cpu_only = devices is None or all(device is CPU_DEVICE for device in devices.devices)
        model, decisions, reports = _fuse_for_ortxep(model, decisions, frozenset(given_back),
                                                     chains=ELEMENTWISE_CHAINS and cpu_only)
        decisions = _decline_given_back(decisions, given_back)
    if not claim:
        decisions = {name: Decision(d.node, d.op_type, False, "OrtxEP not requested") for name, d in decisions.items()}
    release_freed_memory(model)  # what specialising and fusing dropped, before the weights are packed
    sparse_policy = _sparse_policy(jit, tuning)  # one for every compile below: it measures a layer once
    layout_policy = _layout_policy(jit, tuning)
    segments, programs, device_programs, placed = _compile_claimed(model, decisions, num_threads, jit, tuning,
                                                                   precision, devices if claim else None, sparse_policy,
                                                                   layout_policy)
    declined = _ortx_nodes_left_to_ort(segments)
    if declined and model is not standard:
        # a compile error declined a node OrtxEP's fusions made: plain ORT cannot run it, so compile the graph as it
        # was before those fusions (the error is in the log)
        logger.warning("OrtxEP: fused node %s (%s) could not be compiled; compiling without OrtxEP's fusions",
                       declined[0].name, declined[0].op_type)
        model, reports = standard, []
        decisions = _decline_given_back(assign(model.graph), given_back)
        segments, programs, device_programs, placed = _compile_claimed(model, decisions, num_threads, jit, tuning,
                                                                       precision, devices if claim else None,
                                                                       sparse_policy, layout_policy)
        declined = _ortx_nodes_left_to_ort(segments)
    if declined:
        raise RuntimeError(f"OrtxEP could not compile node {declined[0].name!r} ({ORTX_DOMAIN}::"
                           f"{declined[0].op_type}), which no other provider runs; see the log for the error")
    proto = None  # serialized only when a segment goes to ORT: it copies every weight
    steps = []
    sess_options = ort.options_for(any(segment.claimed for segment in segments))
    for position, segment in enumerate(segments):
        inputs = [value.name for value in segment.inputs]
        outputs = [value.name for value in segment.outputs]
        if segment.device == CPU:
            steps.append(ClaimedStep(programs[position], inputs, outputs, f"segment{position}.arena",
                                     tuple(node.name for node in segment.nodes)))
        elif segment.claimed:
            steps.append(DeviceStep(device_programs[position], inputs, outputs, segment.device,
                                    tuple(node.name for node in segment.nodes)))
        else:
            proto = proto if proto is not None else ir.serde.serialize_model(model)
            sub_model = segment_model(proto, [node.name for node in segment.nodes], inputs, outputs)
            steps.append(OrtStep(OrtSegment(sub_model, sess_options, ort.providers, ort.provider_options),
                                 inputs, outputs))
    tensors = {}
    for value in list(model.graph.inputs) + [v for node in model.graph for v in node.outputs]:
        tensors[value.name] = _tensor_spec(value)
    plan = ExecutionPlan(steps, tensors, [v.name for v in model.graph.inputs], [v.name for v in model.graph.outputs],
                         num_threads, use_reference_kernels)
    assignment = _assignment(prepared, model, segments, decisions, ort.providers[0] if ort.providers else "ORT",
                             _bf16_nodes(programs), _sparse_nodes(programs), placed)
    assignment.sparse_choices = tuple(getattr(sparse_policy, "decisions", {}).values()) + tuple(
        getattr(sparse_policy, "segment_checks", ()))
    assignment.layout_choices = tuple(layout_policy.choices)
    compiled = CompiledModel(plan, assignment, prepared.reports + reports, time.perf_counter() - start)
    return compiled, model, standard


def _ortx_nodes_left_to_ort(segments) -> list:
    """ai.ortx nodes in segments that would be handed to plain ORT (only a compile error declines one)."""
    return [node for segment in segments if segment.device == ORT for node in segment.nodes
            if node.domain == ORTX_DOMAIN]


def _decline_given_back(decisions: dict[str, Decision], given_back: dict) -> dict[str, Decision]:
    for name, choice in given_back.items():
        decision = decisions.get(name)
        if decision is not None and decision.claimed:
            decisions[name] = Decision(decision.node, decision.op_type, False,
                                       f"given back to ORT, faster here: {choice.describe}")
    return decisions


# fuse_elementwise_chains in OrtxEP's compile: on. Off until session 14, when whole models measured 1.04-1.12x
# slower with it at 1 thread (0f3f1d1); re-measured after the thread pool's per-thread segments (44275a8) it is a
# gain or neutral everywhere, the outputs bitwise the same (benchmarks/elementwise_chains.py on c23fcf0, medians of
# 20, ratio chains / unfused, 2 threads / 1 thread): PP-OCRv4 det 0.94 / 0.95, rec 0.99 / 0.99, det's neck chain at
# 96x160x160 0.55 / 0.58 and at 96x40x40 0.72 / 0.86; the BERT-like encoder has no chain (identical programs). In
# bf16 sessions (precision "bf16", 2 threads, in-process A/B) det 0.92, rec 0.97, MobileNetV2-style 0.99.
ELEMENTWISE_CHAINS = True

# Runs of 1x1 and depthwise convs (with the stem before them and elementwise ops between them) on blocked NCHWc
# tensors in OrtxEP's CPU segments (ortx.ep.lowering.blocked_layout): on since session 15. In-process A/B against
# the same sessions on NCHW kernels, 2 threads, this Zen 4 (benchmarks/blocked_layout.py): MobileNetV2-style 0.74-0.76,
# PP-OCR cls 0.78, rec 0.91-0.94, det 0.94-0.95; models without such runs compile the same steps.
BLOCKED_LAYOUT = True

# Inside those runs, a 1x1 conv whose output only a depthwise conv reads runs fused with it
# (conv_expand_depthwise_nchwc_f32, ortx.ep.lowering.blocked_layout's expand_depthwise_pairs): on since session 22,
# the outputs bitwise the same. In-process A/B, 2 threads, this Zen 4, with the vCPUs close / far apart
# (benchmarks/expand_depthwise.py on d406f8d): MobileNetV2-style 0.98 / 0.85, PP-OCR cls 0.93 / 0.87, rec 1.02 /
# 0.97, det 1.02 / 0.95 (an earlier two-session A/B on bba9f76's kernels: det 0.99 / 1.00, rec 1.00 / 0.99).
# On an Emerald Rapids VM (session 23) PP-OCR rec loses with it (1.04-1.10x): with tuning, ortx.tune.layout_choice
# measures each segment's blocked runs fused and unfused and keeps the faster here.
EXPAND_DEPTHWISE = True

# Which tensors of a bf16 session's blocked runs on AMX are kept as bf16 pair rows (blocked_layout.pair_rows_values'
# mode: "all", "exact", "off"; its docstring has the measurements). "all" since session 28.
PAIR_ROWS = "all"

# OrtxEP's own fusions (LEVEL_3_PASSES' additions, in their order): run after the standard passes, on a clone,
# after fuse_qdq (so QDQ compute patterns become int8 QConv before any float fusion sees them).
# remove_redundant_qdq first: an attention whose heads were requantized after each Reshape/Transpose (int8 QDQ
# models) then has the data-movement chains the attention fusions match.
# fuse_matmul_epilogue after fuse_attention_extended, whose MatMul patterns it would otherwise take.
ORTXEP_FUSIONS = (remove_redundant_qdq, fuse_gelu_extended, fuse_silu_extended, fuse_attention_extended,
                  fuse_multi_head_attention, fuse_matmul_epilogue)


def _fuse_for_ortxep(model: ir.Model, decisions: dict[str, Decision], excluded: frozenset[str] = frozenset(), *,
                     chains: bool = True):
    """Runs OrtxEP's fusions (int8 QDQ patterns, contrib Gelu/QuickGelu, ai.ortx attention, Conv epilogues, then
    elementwise chains unless `chains` is False) on a clone (weights are shared, not copied) and keeps the result only if OrtxEP claims every
    ai.ortx node they made: plain ORT cannot run ai.ortx ops, so a declined one, or one made from `excluded` nodes
    (given back to ORT), must never reach it. QDQ patterns, Conv epilogues and chains skip `excluded` nodes
    themselves."""
    before = {node.name for node in model.graph if node.domain == ORTX_DOMAIN}
    fused = model.clone()
    reports = [fuse_qdq(fused, excluded=excluded)]
    reports += [fusion(fused) for fusion in ORTXEP_FUSIONS]
    reports.append(fuse_conv_epilogue(fused, excluded=excluded))
    if chains:
        reports.append(fuse_elementwise_chains(fused, excluded=excluded))
    fused_decisions = assign(fused.graph)
    problems = []
    for node in fused.graph:
        if node.domain != ORTX_DOMAIN or node.name in before:
            continue
        decision = fused_decisions[node.name]
        if not decision.claimed:
            problems.append(f"{node.name} ({node.op_type}) declined: {decision.reason}")
        sources = set(node.metadata_props.get(FUSED_FROM_KEY, "").split(",")) & excluded
        if sources:
            problems.append(f"{node.name} ({node.op_type}) made from {sorted(sources)[0]}, which runs on ORT")
    if problems:
        logger.info("OrtxEP: its fusions dropped, %d problem(s), first: %s", len(problems), problems[0])
        return model, decisions, []
    return fused, fused_decisions, [report for report in reports if report.modified]


# fuse_qdq's ai.ortx ops, which run int8 kernels (the assignment's precision column).
INT8_FUSED_OPS = frozenset({"QConv", "QAveragePool"})
# The user's ops whose products a bf16 kernel computes (ortx.ep.precision); ops fused into them run in fp32.
BF16_OPS = frozenset({"Conv", "Gemm", "MatMul"})


def _bf16_nodes(programs: dict) -> frozenset[str]:
    """Nodes (as lowered: fused names) with a step running a bf16 kernel (ortx.ep.precision)."""
    return frozenset(step.product_node or step.node for program in programs.values()
                     for step in getattr(program, "steps", ()) if step.kernel.endswith("_bf16"))


def _sparse_nodes(programs: dict) -> frozenset[str]:
    """Nodes (as lowered: fused names) with a step running a sparse kernel (ortx.tune.sparse_choice)."""
    return frozenset(step.node for program in programs.values() for step in getattr(program, "steps", ())
                     if step.kernel.startswith("sparse_"))


def _assignment(prepared: PreparedModel, model: ir.Model, segments: list[Segment], decisions: dict[str, Decision],
                ort_provider: str, bf16_nodes: frozenset[str] = frozenset(),
                sparse_nodes: frozenset[str] = frozenset(), placed=None) -> Assignment:
    runs_on: dict[str, tuple] = {}
    claimed_macs = total_macs = 0
    choices = placed.reasons if placed is not None else {}
    for segment in segments:
        for node in segment.nodes:
            provider = "OrtxEP" if segment.claimed else ort_provider
            decision = decisions.get(node.name)
            reason = (node.metadata_props.get(INT8_DECLINED_KEY, "") or choices.get(node.name, "")) \
                if segment.claimed else (
                choices.get(node.name) or (decision.reason if decision and decision.reason else
                                           "given back to ORT: segment too small to be worth a boundary"))
            precision = ("int8" if node.op_type in INT8_FUSED_OPS and node.domain == ORTX_DOMAIN else
                         "bf16" if node.name in bf16_nodes else "fp32") if segment.claimed else ""
            sparse = segment.claimed and node.name in sparse_nodes
            device = segment.device if segment.claimed else ""
            runs_on[node.name] = (provider, reason, precision, sparse, device)
            fused = node.metadata_props.get(FUSED_FROM_KEY, "")
            for original in filter(None, fused.split(",")):
                if original != node.name:
                    runs_on.setdefault(original, (provider, f"fused into {node.name}", precision, sparse, device))
            macs = node_macs(node)
            total_macs += macs
            claimed_macs += macs if segment.claimed else 0
    rows = []
    for name, op_type in prepared.original_nodes:
        provider, reason, precision, sparse, device = runs_on.get(
            name, ("(removed)", "folded or removed by the graph passes", "", False, ""))
        if precision == "bf16" and op_type not in BF16_OPS:  # fused into a bf16 kernel's fp32 epilogue
            precision = "fp32"
        # the product itself runs sparse; ops fused into its epilogue are marked by their own row's reason
        rows.append(NodeAssignment(name, op_type, provider, reason, precision, sparse and op_type in BF16_OPS,
                                   device))
    assignment = Assignment(rows, claimed_macs=claimed_macs, total_macs=total_macs, segments=len(segments))
    assignment.graph = partition_graph(segments)
    if placed is not None:
        assignment.capability = placed.capability
    return assignment


def __getattr__(name: str):
    # ortx.pipeline.split / ortx.pipeline.run: pipeline parallelism (ortx.parallel), loaded on first use
    if name in ("split", "run"):
        import ortx.parallel

        return getattr(ortx.parallel, name)
    raise AttributeError(f"module 'ortx.pipeline' has no attribute {name!r}")
