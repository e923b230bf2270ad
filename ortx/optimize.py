"""`optimize`: the graph passes alone, for users who want a faster standard ONNX model and no OrtxEP.

load (a checked copy) -> run_passes(LEVELS[level]) -> serialize. At levels 0-2 (2 is the default) the result uses
only standard ONNX ops, keeps the input's IR version when onnxruntime reads it, and runs in plain onnxruntime; level 3
adds ai.ortx ops that only OrtxEP runs. `compare_with_onnxruntime` is the
`ortx optimize --check` comparison of the original and optimized models.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from ortx.model_io import ModelLoadError, ModelSource, clamp_ir_version, load, to_ort_bytes
from ortx.passes import LEVELS
from ortx.passes._report import PassReport, run_passes
from ortx.passes.infer_shapes import infer_shapes
from ortx.passes.validate_model import describe_structure, validate_model

logger = logging.getLogger(__name__)


def level_passes(level: int, input_shapes: Mapping[str, Sequence[int]] | None = None) -> tuple:
    """The passes of `level`, with infer_shapes told the fixed input shapes when there are any."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {sorted(LEVELS)}, not {level!r}")
    if not input_shapes:
        return LEVELS[level]
    fixed = functools.partial(infer_shapes, input_shapes=dict(input_shapes))
    fixed.__name__ = "infer_shapes"  # run_passes names reports after the pass
    passes = tuple(fixed if a_pass is infer_shapes else a_pass for a_pass in LEVELS[level])
    # Level 0 runs nothing, but fixing the shapes was asked for.
    return passes if infer_shapes in LEVELS[level] else (fixed,) + passes


def optimize(model: ModelSource, *, level: int = 2, check: bool = False,
             input_shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[onnx.ModelProto, list[PassReport]]:
    """Returns (optimized copy, one PassReport per pass); `check` validates the model after every pass;
    `input_shapes` ({input name: dims}) fixes dynamic input dims before shape inference."""
    passes = (validate_model,) + level_passes(level, input_shapes)
    ir_model = ir.serde.deserialize_model(_load_explained(model))
    reports = run_passes(ir_model, passes, check=check)
    return clamp_ir_version(ir.serde.serialize_model(ir_model)), reports


def _load_explained(source: ModelSource) -> onnx.ModelProto:
    """model_io.load, with onnx.checker's "not topologically sorted" replaced by the cause when it is a cycle or an
    input nothing defines (both name the node)."""
    try:
        return load(source)
    except ModelLoadError as error:
        try:
            if isinstance(source, onnx.ModelProto):
                raw = source
            elif isinstance(source, (bytes, bytearray, memoryview)):
                raw = onnx.load_from_string(bytes(source))
            else:
                raw = onnx.load(source, load_external_data=False)
            problem = describe_structure(raw.graph)
        except Exception:  # unreadable: the loader's own message is the best there is
            problem = None
        if problem is None:
            raise
        raise ModelLoadError(f"{error.args[0].split(' fails onnx.checker')[0]} is not a valid graph: {problem}") \
            from error


class CheckInputError(ValueError):
    """An input of the model cannot be generated (dynamic dims without a given shape, unsupported dtype)."""


@dataclasses.dataclass
class OutputComparison:
    name: str
    max_abs_error: float
    max_abs_reference: float
    cosine: float
    ok: bool


# The whole-model bar shared with tests/tolerances.py: max abs error <= 1e-3 x max|reference|, cosine >= 0.9999.
MAX_ABS_FRACTION = 1e-3
MIN_COSINE = 0.9999


def check_input_shape_names(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], source: str) -> None:
    """Raises CheckInputError when --input-shape names something that is not an input of `model` (read from
    `source`), listing the inputs there are."""
    inputs = [value.name for value in model.graph.input
              if value.name not in {tensor.name for tensor in model.graph.initializer}]
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise CheckInputError(f"--input-shape names {', '.join(map(repr, unknown))}, which "
                              f"{'is' if len(unknown) == 1 else 'are'} not an input of {source}; "
                              f"its inputs: {', '.join(inputs)}")


def random_feeds(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], *, seed: int = 0) -> dict:
    """Seeded non-zero inputs: floats ~ U[0.1, 1] with random signs, integers in [1, 10], booleans True."""
    rng = np.random.default_rng(seed)
    initializers = {tensor.name for tensor in model.graph.initializer}
    feeds = {}
    for graph_input in model.graph.input:
        if graph_input.name in initializers:
            continue
        tensor_type = graph_input.type.tensor_type
        if graph_input.name in shapes:
            shape = tuple(shapes[graph_input.name])
        else:
            dims = [dim.dim_value if dim.HasField("dim_value") else None for dim in tensor_type.shape.dim]
            if any(dim is None for dim in dims):
                raise CheckInputError(f"input '{graph_input.name}' has dynamic dims {_dims_text(tensor_type)}; give "
                                      f"--input-shape {graph_input.name}:" + "x".join(str(d) if d else "N" for d in dims))
            shape = tuple(dims)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            values = rng.uniform(0.1, 1.0, shape) * rng.choice([-1.0, 1.0], shape)
        elif np.issubdtype(dtype, np.integer):
            values = rng.integers(1, 11, shape)
        elif dtype == np.bool_:
            values = np.ones(shape, bool)
        else:
            raise CheckInputError(f"input '{graph_input.name}' has unsupported dtype {dtype}")
        feeds[graph_input.name] = np.asarray(values).astype(dtype)
    return feeds


def _dims_text(tensor_type) -> str:
    return "[" + ", ".join(str(dim.dim_value) if dim.HasField("dim_value") else (dim.dim_param or "?")
                           for dim in tensor_type.shape.dim) + "]"


def compare_with_onnxruntime(reference: ModelSource, candidate: ModelSource,
                             shapes: dict[str, tuple[int, ...]] | None = None, *,
                             seed: int = 0) -> list[OutputComparison]:
    """Runs both models in onnxruntime CPU on the same seeded inputs and compares every output."""
    import onnxruntime

    reference_model, candidate_model = load(reference), load(candidate)
    feeds = random_feeds(reference_model, shapes or {}, seed=seed)
    results = []
    sessions = [onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
                for model in (reference_model, candidate_model)]
    names = [output.name for output in sessions[0].get_outputs()]
    expected_outputs, actual_outputs = (session.run(names, feeds) for session in sessions)
    for name, expected, actual in zip(names, expected_outputs, actual_outputs):
        expected64, actual64 = np.asarray(expected, np.float64), np.asarray(actual, np.float64)
        scale = float(np.max(np.abs(expected64))) if expected64.size else 0.0
        error = float(np.max(np.abs(actual64 - expected64))) if expected64.size else 0.0
        norms = np.linalg.norm(expected64) * np.linalg.norm(actual64)
        cosine = 1.0 if norms == 0 else float(expected64.ravel() @ actual64.ravel() / norms)
        ok = expected64.shape == actual64.shape and error <= MAX_ABS_FRACTION * max(scale, 1e-12) \
            and cosine >= MIN_COSINE
        results.append(OutputComparison(name, error, scale, cosine, ok))
    return results
