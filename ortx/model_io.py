"""Model input/output: load a private copy, hand ONNX Runtime an IR version it reads, save atomically.

1. `load(source)` accepts a path, serialized bytes or an onnx.ModelProto and always returns a new ModelProto that
   passed onnx.checker, so no later stage can mutate the caller's object or file. `load_ir` returns it as onnx_ir;
   `own_tensors` makes an onnx_ir model independent of the proto it came from, so the proto can be freed, and
   `forget_removed_graph_io` drops what onnx_ir's graph keeps of removed inputs (both hold a model's weights once).
   `constant_initializers` takes the initializers of an IR version 3 model off its graph inputs, where that IR
   version had to list them: ORT treats them as constants there (only from IR 4 may a feed override one), and so
   must folding and OrtxEP's kernels.
2. `clamp_ir_version` / `to_ort_bytes`: onnx writes the newest IR version it knows (14 for onnx 1.23); the installed
   onnxruntime may read only older ones. The newest version it accepts is probed once, by building tiny sessions.
3. `save(model, path)` writes a temp file in the target directory, fsyncs it and os.replace()s it into place, so a
   reader never sees half a model and a crash leaves the old file intact.
Limits: models whose serialized form exceeds protobuf's 2 GB limit need external data, which is not supported.
"""
from __future__ import annotations

import functools
import logging
import os
import tempfile
from typing import Union

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common
from google.protobuf.message import DecodeError

logger = logging.getLogger(__name__)

ModelSource = Union[str, os.PathLike, bytes, bytearray, memoryview, onnx.ModelProto, ir.Model]

# Protobuf refuses to serialize messages of 2 GB or more; such models need external data files.
PROTOBUF_LIMIT_BYTES = (1 << 31) - 1


class ModelLoadError(ValueError):
    """The source is missing, not an ONNX model, or fails onnx.checker; the message names the file and the cause."""


class ModelSaveError(ValueError):
    """The model cannot be saved where or how it was asked (would overwrite its input, too large)."""


def _describe(source: ModelSource) -> str:
    if isinstance(source, (str, os.PathLike)):
        return f"'{os.fspath(source)}'"
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"<{len(source)} bytes>"
    return f"<{type(source).__name__}>"


def _parse(data: bytes, what: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(bytes(data))
    except DecodeError as error:
        raise ModelLoadError(f"{what} is not an ONNX model (protobuf decode failed: {error})") from error
    # Arbitrary bytes sometimes decode as a protobuf message with unknown fields; a real model has an IR version
    # and a graph.
    if model.ir_version == 0 or not model.HasField("graph"):
        raise ModelLoadError(f"{what} is not an ONNX model (no ir_version or graph after decoding)")
    return model


def _existing_file(path: str, what: str) -> None:
    if not os.path.exists(path):
        raise ModelLoadError(f"model file {what} does not exist")
    if os.path.isdir(path):
        raise ModelLoadError(f"model path {what} is a directory, not an .onnx file")


def _read(source: ModelSource) -> onnx.ModelProto:
    what = _describe(source)
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        return model
    if isinstance(source, ir.Model):
        return ir.serde.serialize_model(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _parse(source, what)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        _existing_file(path, what)
        with open(path, "rb") as handle:
            model = _parse(handle.read(), f"file {what}")
        helper = onnx.external_data_helper
        if not any(helper.uses_external_data(tensor) for tensor in helper._get_all_tensors(model)):
            return model  # its size is the file's, which protobuf could parse
        # Tensors stored in external data files are resolved relative to the model's directory.
        try:
            helper.load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
        except (OSError, ValueError, onnx.checker.ValidationError) as error:  # onnx checks the data file's path
            raise ModelLoadError(f"file {what}: cannot load external tensor data: {error}") from error
        if model.ByteSize() > PROTOBUF_LIMIT_BYTES:
            raise ModelLoadError(f"{what} is larger than 2 GB with its external data; models past protobuf's "
                                 "limit are not supported")
        return model
    raise TypeError(f"load() takes a path, bytes, onnx.ModelProto or onnx_ir.Model, not {type(source).__name__}")


def load(source: ModelSource) -> onnx.ModelProto:
    """A checked copy of the model; the caller's object and file are never modified.

    onnx.checker runs on the serialized model (the file itself, the given bytes, or one serialization of a given
    model) before the copy is parsed: checking a parsed ModelProto would serialize it again while the checker holds
    its own C++ copy. Sizes come from serialized lengths where there are some: ModelProto.ByteSize() serializes."""
    if isinstance(source, (str, os.PathLike)):
        checked = os.fspath(source)  # the checker resolves external data files relative to the model's directory
        _existing_file(checked, _describe(source))
    elif isinstance(source, (bytes, bytearray, memoryview)):
        checked = bytes(source)
        if len(checked) > PROTOBUF_LIMIT_BYTES:
            raise ModelLoadError(f"{_describe(source)} is larger than 2 GB; external data models are not supported")
    else:
        copy = _read(source)
        if copy.ByteSize() > PROTOBUF_LIMIT_BYTES:
            raise ModelLoadError(f"{_describe(source)} is larger than 2 GB; external data models are not supported")
        checked = copy.SerializeToString()
        del copy
    try:
        onnx.checker.check_model(checked)
    except onnx.checker.ValidationError as error:
        _read(source)  # a source that does not decode at all is reported as such
        complaint = " ".join(str(error).split()) or repr(error)
        raise ModelLoadError(f"{_describe(source)} fails onnx.checker: {complaint}") from error
    if isinstance(checked, str):
        return _read(source)
    return _parse(checked, _describe(source))


def load_ir(source: ModelSource) -> ir.Model:
    """`load`, returned as an onnx_ir model for the passes (which work in place on it)."""
    return ir.serde.deserialize_model(load(source))


def own_tensors(model: ir.Model) -> int:
    """Copies into numpy every tensor of `model` that still reads from the protobuf it was deserialized from
    (initializers and tensor attributes, in subgraphs and functions too); returns the number of bytes copied.

    A parsed ModelProto lives in one protobuf (upb) arena that is freed only when nothing references any part of
    it, so a single onnx_ir TensorProtoTensor left over keeps every weight of the file alive. Once the model owns
    its tensors the caller can drop the proto, and a weight that a pass replaces (a Conv folded with its
    BatchNormalization) is freed on its own."""
    copied = 0

    def owned(tensor):
        nonlocal copied
        if isinstance(tensor, ir.serde.TensorProtoTensor):
            array = tensor.numpy()  # one copy of the proto's bytes
            copied += array.nbytes
            return ir.Tensor(array, dtype=tensor.dtype, name=tensor.name, doc_string=tensor.doc_string or None,
                             metadata_props=dict(tensor.metadata_props))
        if isinstance(tensor, ir.StringTensor) and not isinstance(tensor.raw, (np.ndarray, list)):
            strings = [bytes(item) for item in tensor.raw]  # tensor.raw is the proto's repeated string_data
            copied += sum(len(item) for item in strings)
            return ir.StringTensor(strings, shape=tensor.shape, name=tensor.name,
                                   doc_string=tensor.doc_string or None, metadata_props=dict(tensor.metadata_props))
        return None

    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = owned(value.const_value)
            if tensor is not None:
                value.const_value = tensor
    for graph_like in [model.graph, *model.functions.values()]:
        for node in ir.traversal.RecursiveGraphIterator(graph_like):
            for name, attribute in list(node.attributes.items()):
                if not isinstance(attribute, ir.Attr):
                    continue
                if attribute.type == ir.AttributeType.TENSOR:
                    tensor = owned(attribute.value)
                    if tensor is not None:
                        node.attributes[name] = ir.AttrTensor(name, tensor, doc_string=attribute.doc_string)
                elif attribute.type == ir.AttributeType.TENSORS:
                    tensors = [owned(item) for item in attribute.value]
                    if any(tensor is not None for tensor in tensors):
                        node.attributes[name] = ir.AttrTensors(
                            name, [new if new is not None else old for new, old in zip(tensors, attribute.value)],
                            doc_string=attribute.doc_string)
    return copied


def forget_removed_graph_io(model: ir.Model) -> int:
    """Drops the values that onnx_ir still holds for graph inputs and outputs that were removed; returns how many.

    onnx_ir (1.1) counts each graph input and output in a Counter and leaves a removed value's key at zero, so the
    graph keeps alive every value that was ever one of its inputs, with its tensor. Its ShapeInferencePass hands
    initializers to onnx as temporary graph inputs, so every weight a later pass replaced (a Conv's weight folded
    with its BatchNormalization) stayed alive through the graph."""
    dropped = 0
    for graph in model.graphs():
        for values in (graph.inputs, graph.outputs):
            counter = getattr(values, "_ref_counter", None)
            if counter is None:
                continue
            for value in [value for value, count in counter.items() if count <= 0]:
                del counter[value]
                dropped += 1
    return dropped


def constant_initializers(model: ir.Model) -> int:
    """An IR < 4 model's initializers, listed among its graph inputs as that IR version required, taken off them and
    the IR version raised to 4, where an initializer not listed as an input is a constant (their meaning in ORT
    for IR < 4 too); returns how many. Models of IR >= 4 are left alone: there a listed initializer is a default a
    feed may override."""
    if model.ir_version >= 4:
        return 0
    listed = sum(1 for value in model.graph.inputs if value.name in model.graph.initializers)
    onnx_ir.passes.common.RemoveInitializersFromInputsPass()(model)
    forget_removed_graph_io(model)
    model.ir_version = 4
    return listed


def _probe_model(ir_version: int) -> bytes:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])], "ir_probe",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    model.ir_version = ir_version
    return model.SerializeToString()


@functools.lru_cache(maxsize=1)
def ort_max_ir_version() -> int:
    """The newest IR version the installed onnxruntime accepts, found by building tiny sessions (cached)."""
    import onnxruntime

    # Start above what onnx writes in case onnxruntime is newer than onnx; IR 7 (onnx 1.6) is the floor every
    # onnxruntime still reads.
    for version in range(onnx.IR_VERSION + 3, 6, -1):
        try:
            onnxruntime.InferenceSession(_probe_model(version), providers=["CPUExecutionProvider"])
        except Exception:  # onnxruntime raises its own Fail/InvalidGraph types; any failure means "not readable"
            continue
        logger.debug("onnxruntime %s reads IR versions up to %d", onnxruntime.__version__, version)
        return version
    raise RuntimeError(f"onnxruntime {onnxruntime.__version__} accepted no IR version between 7 and "
                       f"{onnx.IR_VERSION + 3}")


def clamp_ir_version(model: onnx.ModelProto | ir.Model) -> onnx.ModelProto:
    """A copy whose ir_version the installed onnxruntime reads (lowered only when it is newer than ORT's limit)."""
    result = _read(model)
    limit = ort_max_ir_version()
    if result.ir_version > limit:
        logger.debug("lowering ir_version %d -> %d for onnxruntime", result.ir_version, limit)
        result.ir_version = limit
    return result


def to_ort_bytes(model: onnx.ModelProto | ir.Model) -> bytes:
    """Serialized bytes for onnxruntime.InferenceSession; everything the project hands ORT goes through here."""
    result = clamp_ir_version(model)
    if result.ByteSize() > PROTOBUF_LIMIT_BYTES:
        raise ModelSaveError("model is larger than 2 GB; external data models are not supported")
    return result.SerializeToString()


def _same_file(first: str, second: str) -> bool:
    if os.path.exists(first) and os.path.exists(second):
        return os.path.samefile(first, second)
    return os.path.realpath(first) == os.path.realpath(second)


def save(model: onnx.ModelProto | ir.Model, path: str | os.PathLike, *,
         protect: str | os.PathLike | None = None) -> None:
    """Writes atomically (temp file in the same directory, fsync, os.replace); refuses to write over `protect`."""
    path = os.fspath(path)
    if protect is not None and _same_file(path, os.fspath(protect)):
        raise ModelSaveError(f"refusing to overwrite the input model '{os.fspath(protect)}'; choose another output")
    proto = ir.serde.serialize_model(model) if isinstance(model, ir.Model) else model
    if proto.ByteSize() > PROTOBUF_LIMIT_BYTES:
        raise ModelSaveError(f"cannot save '{path}': model is larger than 2 GB and external data is not supported")
    data = proto.SerializeToString()
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ModelSaveError(f"cannot save '{path}': directory '{directory}' does not exist")
    write_bytes_atomically(path, data, suffix=".onnx.tmp")
    logger.debug("saved %d bytes to %s", len(data), path)


def write_bytes_atomically(path: str | os.PathLike, data: bytes, *, suffix: str = ".tmp") -> None:
    """A temp file in the same directory, fsync, os.replace: readers see the old file or the new one, never part."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    handle, temp_path = tempfile.mkstemp(prefix=".ortx-", suffix=suffix, dir=directory)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        # mkstemp creates the file 0600; give it the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp_path, 0o666 & ~umask)
        os.replace(temp_path, path)
    except BaseException:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
        raise
