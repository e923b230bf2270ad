"""`ortx.InferenceSession`: onnxruntime's session API, with OrtxEP running the subgraphs it claims.

With OrtxEP in the provider list the model is prepared once (load, graph passes) and compiled per input-shape
signature: at creation when every input shape is static (or fixed by the `input_shapes` option), otherwise on the
first run with new shapes, keeping the most recent `max_specializations`. Without OrtxEP it is plain ONNX Runtime.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import threading

import numpy as np
import onnx
import onnxruntime

from ortx import pipeline
from ortx.artifact import is_artifact, read_artifact
from ortx.compile_artifact import ORT_DEVICE as ORT_LABEL
from ortx.ep.assignment import FUSED_FROM_KEY, Assignment, NodeAssignment
from ortx.ep.fallback import whole_model_session
from ortx.ep.options import ORTX_PROVIDER, parse_providers, sub_session_options, thread_count
from ortx.ep.precision import effective_precision, mark_fp32_nodes
from ortx.ep.trace import RunTrace

logger = logging.getLogger(__name__)

_ONNX_TYPE_NAMES = {
    onnx.TensorProto.FLOAT: "tensor(float)", onnx.TensorProto.DOUBLE: "tensor(double)",
    onnx.TensorProto.FLOAT16: "tensor(float16)", onnx.TensorProto.BFLOAT16: "tensor(bfloat16)",
    onnx.TensorProto.INT8: "tensor(int8)", onnx.TensorProto.UINT8: "tensor(uint8)",
    onnx.TensorProto.INT16: "tensor(int16)", onnx.TensorProto.UINT16: "tensor(uint16)",
    onnx.TensorProto.INT32: "tensor(int32)", onnx.TensorProto.UINT32: "tensor(uint32)",
    onnx.TensorProto.INT64: "tensor(int64)", onnx.TensorProto.UINT64: "tensor(uint64)",
    onnx.TensorProto.BOOL: "tensor(bool)", onnx.TensorProto.STRING: "tensor(string)",
}


_NUMPY_OF_TYPE_NAME = {
    "tensor(float)": np.dtype(np.float32), "tensor(double)": np.dtype(np.float64),
    "tensor(float16)": np.dtype(np.float16), "tensor(int8)": np.dtype(np.int8), "tensor(uint8)": np.dtype(np.uint8),
    "tensor(int16)": np.dtype(np.int16), "tensor(uint16)": np.dtype(np.uint16), "tensor(int32)": np.dtype(np.int32),
    "tensor(uint32)": np.dtype(np.uint32), "tensor(int64)": np.dtype(np.int64), "tensor(uint64)": np.dtype(np.uint64),
    "tensor(bool)": np.dtype(np.bool_),
}


@dataclasses.dataclass(frozen=True)
class NodeArg:
    """What onnxruntime.NodeArg tells: name, type string and shape (ints, dim names or None)."""

    name: str
    type: str
    shape: list


@dataclasses.dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict


def _node_arg(info: onnx.ValueInfoProto) -> NodeArg:
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        return NodeArg(info.name, kind or "unknown", [])
    tensor = info.type.tensor_type
    shape = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value"):
            shape.append(dim.dim_value if dim.dim_value >= 0 else None)  # ORT reports -1 dims as None
        else:
            shape.append(dim.dim_param or None)
    return NodeArg(info.name, _ONNX_TYPE_NAMES.get(tensor.elem_type, f"tensor({tensor.elem_type})"), shape)


class InferenceSession:
    """Drop-in for onnxruntime.InferenceSession; `assignment` tells which provider runs each node and why."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        if kwargs:
            raise TypeError(f"InferenceSession got unexpected arguments {sorted(kwargs)}")
        self._choice = parse_providers(providers, provider_options)
        self._devices = self._choice.ortx.device_settings() if self._choice.use_ortx else None
        self._sess_options = sess_options if sess_options is not None else onnxruntime.SessionOptions()
        self._num_threads = thread_count(sess_options)
        # The user's model, checked and with every node named: the session's interface, and what ORT runs when
        # OrtxEP does not. Only its interface is kept (names, types, metadata): the graph passes work on an onnx_ir
        # model that owns its weights (pipeline.proto_to_ir), so the proto is dropped before they run and every
        # weight is held once.
        # An ortx artifact (`ortx compile`) carries the graph after the passes, its placement and tuning records.
        self._artifact = read_artifact(path_or_bytes) if is_artifact(path_or_bytes) else None
        if self._devices is not None and self._artifact is not None:  # follow its placement where this machine can
            self._devices = dataclasses.replace(self._devices, preferred={
                node: device for node, device in self._artifact.placement.items()
                if device not in (ORT_LABEL, "(removed)")})
        proto = pipeline.load(self._artifact.model if self._artifact is not None else path_or_bytes)
        pipeline.name_nodes(proto)
        self._inputs = [_node_arg(info) for info in proto.graph.input
                        if info.name not in {t.name for t in proto.graph.initializer}]
        self._outputs = [_node_arg(info) for info in proto.graph.output]
        self._metadata = ModelMetadata(proto.producer_name, proto.graph.name, proto.domain, proto.doc_string,
                                       proto.graph.doc_string, proto.model_version,
                                       {entry.key: entry.value for entry in proto.metadata_props})
        self._nodes = [(node.name, node.op_type) for node in proto.graph.node]
        self._input_dtypes = [_NUMPY_OF_TYPE_NAME.get(arg.type) for arg in self._inputs]
        self._lock = threading.Lock()
        self._compiled: collections.OrderedDict = collections.OrderedDict()
        self._whole = None
        self._whole_reason = self._needs_whole_model_ort()
        if not self._choice.use_ortx or self._whole_reason:
            self._whole = whole_model_session(proto, self._sess_options, self._choice.ort_providers,
                                              self._choice.ort_provider_options)
            return
        model = pipeline.proto_to_ir(proto)
        del proto
        self._prepared = pipeline.prepare_model(model, passes=() if self._artifact is not None
                                                else pipeline.SESSION_PASSES)
        # the precision the kernels run: a bf16 session runs fp32 where bf16 would be slower (ortx.ep.precision)
        self._precision, self._precision_note = effective_precision(self._choice.ortx.precision,
                                                                    self._choice.ortx.bf16_compute)
        if self._precision_note:
            logger.info("OrtxEP: %s", self._precision_note)
        if self._choice.ortx.fp32_nodes:
            if self._choice.ortx.precision == "fp32":
                logger.warning("OrtxEP option fp32_nodes has no effect under precision 'fp32'")
            mark_fp32_nodes(self._prepared.model.graph, self._choice.ortx.fp32_nodes, FUSED_FROM_KEY)
        if self._artifact is not None and self._artifact.records is not None:
            self._merge_artifact_records()
        self._ort = pipeline.OrtSettings(sub_session_options(self._sess_options, shares_cores_with_ortx=True),
                                         self._choice.ort_providers, self._choice.ort_provider_options,
                                         sub_session_options(self._sess_options, shares_cores_with_ortx=False))
        # SessionOptions.enable_profiling: onnxruntime's profile file, OrtxEP's kernels included (ortx.ep.trace).
        self._trace = RunTrace(self._sess_options.profile_file_prefix) \
            if self._sess_options.enable_profiling else None
        fixed = self._static_input_shapes()
        if fixed is not None:
            self._compiled_for(fixed)

    # Construction helpers ----------------------------------------------------------------------------------
    def _merge_artifact_records(self) -> None:
        """The artifact's tuning records go into this machine's database (tuning "off": left alone); records
        measured on another machine are kept there under their fingerprint and never used here."""
        if self._choice.ortx.tuning == "off":
            return
        import os

        from ortx.tune.records import TuningDatabase

        database_path = self._choice.ortx.tuning_settings().database_path
        os.makedirs(os.path.dirname(database_path), exist_ok=True)
        with TuningDatabase(database_path) as database:
            database.import_document(self._artifact.records, source="the artifact's tuning records")

    def _needs_whole_model_ort(self) -> str:
        """Why ORT must run the whole model (non-tensor graph inputs or outputs), or ''."""
        if not self._choice.use_ortx:
            return ""
        for arg in self._inputs + self._outputs:
            if not arg.type.startswith("tensor(") or arg.type == "tensor(string)":
                # onnxruntime cannot wrap string arrays for IOBinding, nor non-tensors at all
                return f"graph input/output {arg.name!r} is a {arg.type}: ORT runs the whole model"
        return ""

    def _static_input_shapes(self) -> dict | None:
        shapes = dict(self._choice.ortx.input_shapes)
        for arg in self._inputs:
            if arg.name in shapes:
                if len(shapes[arg.name]) != len(arg.shape):
                    raise ValueError(f"OrtxEP option input_shapes: input {arg.name!r} has rank {len(arg.shape)}, "
                                     f"given {len(shapes[arg.name])} dims")
                continue
            if not all(isinstance(dim, int) for dim in arg.shape):
                return None
            shapes[arg.name] = tuple(arg.shape)
        unknown = set(self._choice.ortx.input_shapes) - {arg.name for arg in self._inputs}
        if unknown:
            raise ValueError(f"OrtxEP option input_shapes names unknown inputs {sorted(unknown)}; model inputs: "
                             f"{[arg.name for arg in self._inputs]}")
        return shapes

    def _compiled_for(self, shapes: dict):
        key = tuple(sorted((name, tuple(dims)) for name, dims in shapes.items()))
        compiled = self._compiled.get(key)
        if compiled is not None and len(self._compiled) == 1:
            return compiled  # the common case: one specialisation, nothing to reorder
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is not None:
                self._compiled.move_to_end(key)
                return compiled
            compiled = pipeline.compile_for_shapes(
                self._prepared, dict(shapes), self._ort, num_threads=self._num_threads,
                use_reference_kernels=self._choice.ortx.reference_kernels, jit=self._choice.ortx.jit_options(),
                tuning=self._choice.ortx.tuning_settings(), precision=self._precision, devices=self._devices)
            compiled.assignment.precision_note = self._precision_note
            self._compiled[key] = compiled
            while len(self._compiled) > self._choice.ortx.max_specializations:
                self._compiled.popitem(last=False)
            return compiled

    # onnxruntime API ---------------------------------------------------------------------------------------
    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return []

    def get_modelmeta(self):
        return dataclasses.replace(self._metadata, custom_metadata_map=dict(self._metadata.custom_metadata_map))

    def get_providers(self):
        return ([ORTX_PROVIDER] if self._choice.use_ortx else []) + list(self._choice.ort_providers)

    def get_provider_options(self):
        options = {}
        if self._choice.use_ortx:
            options[ORTX_PROVIDER] = {k: str(v) for k, v in dataclasses.asdict(self._choice.ortx).items()}
        for name, values in zip(self._choice.ort_providers, self._choice.ort_provider_options):
            options[name] = dict(values)
        return options

    def get_session_options(self):
        return self._sess_options

    @property
    def assignment(self):
        """Per original node: provider and reason; reflects the most recently compiled input shapes."""
        if not self._choice.use_ortx:
            raise RuntimeError("assignment: OrtxEP is not in this session's providers; ORT runs every node")
        if self._whole_reason:
            return Assignment([NodeAssignment(name, op_type, self._choice.ort_providers[0], self._whole_reason)
                               for name, op_type in self._nodes])
        with self._lock:
            if not self._compiled:
                raise RuntimeError("assignment: the model has dynamic input shapes and has not run yet; run it "
                                   "once or pass provider option input_shapes to compile at creation")
            return next(reversed(self._compiled.values())).assignment

    def run(self, output_names, input_feed, run_options=None):
        if self._whole is not None:
            return self._whole.run(output_names, input_feed, run_options)
        feeds = self._checked_feeds(input_feed)
        names = self._checked_output_names(output_names)
        compiled = self._compiled_for({name: array.shape for name, array in feeds.items()})
        trace = self._trace
        results = trace.run(compiled, feeds, run_options) if trace is not None else compiled.plan.run(feeds,
                                                                                                      run_options)
        return [_as_numpy(results[name]) for name in names]

    def segment_times(self, input_feed, *, runs: int = 10):
        """Median wall time per segment (ortx.ep.profile.SegmentTime: device, nodes, ms) over `runs` runs of
        these inputs: where the time goes across OrtxEP's CPU kernels, other devices and ORT."""
        from ortx.ep.profile import segment_times

        if self._whole is not None:
            raise RuntimeError("segment_times: ORT runs this whole model; there are no segments to time")
        feeds = self._checked_feeds(input_feed)
        compiled = self._compiled_for({name: array.shape for name, array in feeds.items()})
        return segment_times(compiled, feeds, runs=runs)

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        if self._whole is not None:
            return self._whole.run_with_ort_values(output_names, input_dict_ort_values, run_options)
        feeds = self._checked_feeds({name: value.numpy() for name, value in input_dict_ort_values.items()})
        names = self._checked_output_names(output_names)
        compiled = self._compiled_for({name: array.shape for name, array in feeds.items()})
        # Outputs are OrtValues that ORT allocated and owns; the kernels write into them directly.
        ort_values, views = {}, {}
        for name in compiled.plan.graph_outputs:
            spec = compiled.plan.tensors[name]
            if spec.static and name not in feeds:
                ort_values[name] = onnxruntime.OrtValue.ortvalue_from_shape_and_type(list(spec.shape), spec.dtype)
                views[name] = _view_of(ort_values[name], spec)
        trace = self._trace
        results = trace.run(compiled, feeds, run_options, outputs=views) if trace is not None else \
            compiled.plan.run(feeds, run_options, outputs=views)
        return [ort_values[name] if name in ort_values else _as_ort_value(results[name]) for name in names]

    def io_binding(self):
        if self._whole is not None:
            return self._whole.io_binding()
        raise NotImplementedError("ortx.InferenceSession.io_binding: OrtxEP sessions take numpy feeds through "
                                  "run() (inputs are not copied); IOBinding is available with plain ORT providers")

    def run_with_iobinding(self, iobinding, run_options=None):
        if self._whole is not None:
            return self._whole.run_with_iobinding(iobinding, run_options)
        raise NotImplementedError("ortx.InferenceSession.run_with_iobinding: see io_binding()")

    def end_profiling(self):
        """Writes the profile (onnxruntime's format and file name) and stops profiling; "" when it was not on."""
        if self._whole is not None:
            return self._whole.end_profiling()
        with self._lock:
            trace, self._trace = self._trace, None
        return trace.write() if trace is not None else ""

    def get_profiling_start_time_ns(self):
        if self._whole is not None:
            return self._whole.get_profiling_start_time_ns()
        trace = self._trace
        return trace.start_ns if trace is not None else 0

    # Validation --------------------------------------------------------------------------------------------
    def _checked_feeds(self, input_feed) -> dict[str, np.ndarray]:
        if not isinstance(input_feed, dict):
            raise TypeError(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        if len(input_feed) != len(self._inputs) or not all(arg.name in input_feed for arg in self._inputs):
            expected = [arg.name for arg in self._inputs]
            unknown = sorted(set(input_feed) - set(expected))
            if unknown:
                raise ValueError(f"unknown input name(s) {unknown}; the model's inputs are {expected}")
            missing = [name for name in expected if name not in input_feed]
            raise ValueError(f"missing input(s) {missing}; the model's inputs are {expected}")
        feeds = {}
        for arg, expected_dtype in zip(self._inputs, self._input_dtypes):
            array = np.asarray(input_feed[arg.name], order="C")  # ascontiguousarray would make 0-d arrays 1-d
            if array.dtype != expected_dtype:
                type_name = f"tensor({_numpy_type_name(array.dtype)})"
                if type_name != arg.type:
                    raise ValueError(f"input {arg.name!r}: got {type_name} ({array.dtype}), the model expects "
                                     f"{arg.type}")
            if array.ndim != len(arg.shape):
                raise ValueError(f"input {arg.name!r}: got rank {array.ndim} (shape {array.shape}), the model "
                                 f"expects rank {len(arg.shape)} (shape {arg.shape})")
            for axis, (size, dim) in enumerate(zip(array.shape, arg.shape)):
                if size != dim and isinstance(dim, int):
                    raise ValueError(f"input {arg.name!r}: got shape {array.shape}, the model expects {arg.shape} "
                                     f"(axis {axis} must be {dim})")
            feeds[arg.name] = array
        return feeds

    def _checked_output_names(self, output_names) -> list[str]:
        valid = [arg.name for arg in self._outputs]
        if not output_names:
            return valid
        unknown = [name for name in output_names if name not in valid]
        if unknown:
            raise ValueError(f"unknown output name(s) {unknown}; the model's outputs are {valid}")
        return list(output_names)


def _numpy_type_name(dtype: np.dtype) -> str:
    mapping = {"float32": "float", "float64": "double", "bool": "bool", "object": "string", "str": "string"}
    if dtype.kind == "U":
        return "string"
    return mapping.get(dtype.name, dtype.name)


def _view_of(ort_value, spec) -> np.ndarray:
    """A numpy array over an OrtValue's CPU buffer (the OrtValue owns the memory and must outlive the view)."""
    import ctypes

    buffer = (ctypes.c_char * spec.nbytes).from_address(ort_value.data_ptr())
    return np.frombuffer(buffer, dtype=spec.dtype).reshape(spec.shape)


def _as_ort_value(value):
    if isinstance(value, onnxruntime.OrtValue):
        return value
    return onnxruntime.OrtValue.ortvalue_from_numpy(np.asarray(value, order="C"))


def _as_numpy(value):
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy"):
        return value.numpy()
    return value
