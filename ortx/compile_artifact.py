"""`ortx compile MODEL -o MODEL.ortx`: the graph passes, the partition and the tuning records in one artifact.

1. optimize(level 2, the input shapes given): the standard-ONNX graph any runtime loads (ortx.artifact's model.onnx).
2. That graph is compiled as a session would compile it (no passes again, the devices asked for) to learn where each
   node runs; the placement is stored by node name with the reason.
3. A records file (from `ortx tune --export`) may be embedded: sessions that load the artifact merge it into their
   tuning database, where records measured on another machine are kept but not used.
Limits: the placement needs static input shapes (from the model or `input_shapes`); without them none is stored and
the loading session assigns devices per shape as for a plain model.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os

import onnx

from ortx.artifact import Artifact, ArtifactError, write_artifact
from ortx.ep.options import parse_providers
from ortx.ep.precision import effective_precision

ORT_DEVICE = "ort"  # the placement label of nodes ONNX Runtime runs


@dataclasses.dataclass(frozen=True)
class ArtifactReport:
    output: str
    nodes: int
    placement_counts: dict  # device label -> nodes
    claimed_mac_share: float | None  # None: no placement (dynamic shapes)
    records: int
    seconds: float


def _source_bytes(source) -> bytes:
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as stream:
            return stream.read()
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    return source.SerializeToString()


def _records_count(records: bytes, what: str) -> int:
    try:
        document = json.loads(records)
        if "ortx_tuning_records" in document:
            return len(document["records"])
    except (ValueError, KeyError, TypeError):
        pass
    raise ArtifactError(f"{what} is not an ortx tuning record file (write one with `ortx tune MODEL --export FILE`)")


def _static_shapes(model: onnx.ModelProto, input_shapes: dict) -> dict | None:
    initializers = {tensor.name for tensor in model.graph.initializer}
    shapes = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if value.name in input_shapes:
            shapes[value.name] = tuple(input_shapes[value.name])
            continue
        dims = value.type.tensor_type.shape.dim
        if not all(dim.HasField("dim_value") for dim in dims):
            return None
        shapes[value.name] = tuple(dim.dim_value for dim in dims)
    return shapes


def compile_artifact(source, output: str | os.PathLike, *, provider_options: dict | None = None,
                     input_shapes: dict | None = None, num_threads: int = 2,
                     records_path: str | os.PathLike | None = None) -> ArtifactReport:
    """`provider_options`: OrtxEP's options (e.g. {"devices": "npu,cpu"}) the placement is computed with."""
    import time

    import onnxruntime

    from ortx import pipeline
    from ortx.model_io import to_ort_bytes
    from ortx.optimize import optimize
    from ortx.tune.fingerprint import current

    start = time.perf_counter()
    input_shapes = dict(input_shapes or {})
    records = None
    if records_path is not None:
        with open(records_path, "rb") as stream:
            records = stream.read()
        record_count = _records_count(records, f"records file {str(records_path)!r}")
    else:
        record_count = 0
    choice = parse_providers(["OrtxEP", "CPUExecutionProvider"], [dict(provider_options or {}), {}])
    optimized, _ = optimize(source, level=2, input_shapes=input_shapes)
    model_bytes = to_ort_bytes(optimized)
    shapes = _static_shapes(optimized, input_shapes)
    placement: dict[str, str] = {}
    reasons: dict[str, str] = {}
    share = None
    if shapes is not None:
        prepared = pipeline.prepare_loaded(onnx.load_from_string(model_bytes), passes=())
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = num_threads
        ort = pipeline.OrtSettings(options, ["CPUExecutionProvider"], [{}])
        compiled = pipeline.compile_for_shapes(prepared, shapes, ort, num_threads=num_threads,
                                               jit=None, tuning=None,
                                               precision=effective_precision(choice.ortx.precision,
                                                                             choice.ortx.bf16_compute)[0],
                                               devices=choice.ortx.device_settings())
        for row in compiled.assignment:
            placement[row.name] = device_label(row)
            reasons[row.name] = row.reason
        share = compiled.assignment.claimed_mac_share
    manifest = {
        "ortx_version": _ortx_version(),
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source_sha256": hashlib.sha256(_source_bytes(source)).hexdigest(),
        "provider_options": {key: str(value) for key, value in (provider_options or {}).items()},
        "input_shapes": {name: list(dims) for name, dims in (shapes or input_shapes).items()},
        "compiled_on": json.loads(current().to_json()),
    }
    write_artifact(output, model=model_bytes, placement=placement, placement_reasons=reasons, manifest=manifest,
                   records=records, protect=source if isinstance(source, (str, os.PathLike)) else None)
    counts: dict[str, int] = {}
    for device in placement.values():
        counts[device] = counts.get(device, 0) + 1
    return ArtifactReport(os.fspath(output), len(optimized.graph.node), counts, share, record_count,
                          time.perf_counter() - start)


def device_label(row) -> str:
    """The placement label of an assignment row: its device for OrtxEP's nodes, "ort" for ORT's."""
    if row.provider == "OrtxEP":
        return getattr(row, "device", "") or "cpu"
    return ORT_DEVICE if row.provider != "(removed)" else "(removed)"


def _ortx_version() -> str:
    import ortx

    return ortx.__version__


__all__ = ["Artifact", "ArtifactError", "ArtifactReport", "compile_artifact", "device_label"]
