"""Calibration data: where the samples come from and the checks that make a bad set fail with the input named.

Sources: an .npz whose arrays are named after the model inputs and stacked on the batch axis (sample i is
`array[i:i+1]`), a folder of such files (sorted by name), a dict of such stacked arrays, or any iterable of feed
dicts ({input name: array}). Every sample is checked against the model's inputs before it is run: the names
(missing and unknown ones listed), dtype (no silent casts), rank and every fixed dim, and finiteness of float
values; an empty set is an error. Files are read one at a time, so a folder larger than memory works.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Iterator, Mapping

import numpy as np
import onnx


class CalibrationDataError(ValueError):
    """The calibration data does not fit the model; the message names the source, the sample and the input."""


@dataclasses.dataclass(frozen=True)
class ModelInput:
    name: str
    dtype: np.dtype
    shape: tuple  # int for fixed dims, a str (dim_param) or None for dynamic ones

    def describe_shape(self) -> str:
        return "(" + ", ".join(str(dim) if dim is not None else "?" for dim in self.shape) + ")"


def model_inputs(model: onnx.ModelProto) -> list[ModelInput]:
    initializers = {tensor.name for tensor in model.graph.initializer}
    inputs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        # exporters sometimes write dim_value -1 (or 0) for a dynamic dim: only positive values are fixed
        shape = tuple(dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else (dim.dim_param or None)
                      for dim in tensor_type.shape.dim)
        inputs.append(ModelInput(value.name, dtype, shape))
    return inputs


def check_sample(feed: object, inputs: list[ModelInput], where: str) -> dict[str, np.ndarray]:
    """The feed as {name: ndarray} when it fits `inputs`; otherwise CalibrationDataError naming `where`."""
    if not isinstance(feed, Mapping):
        raise CalibrationDataError(f"{where}: a sample must be a dict {{input name: array}}, not "
                                   f"{type(feed).__name__}")
    expected = [model_input.name for model_input in inputs]
    missing = [name for name in expected if name not in feed]
    unknown = [str(name) for name in feed if name not in expected]
    if missing or unknown:
        parts = ([f"missing input(s) {', '.join(map(repr, missing))}"] if missing else []) + \
                ([f"unknown name(s) {', '.join(map(repr, unknown))}"] if unknown else [])
        raise CalibrationDataError(f"{where}: {'; '.join(parts)}; the model's inputs are {', '.join(expected)}")
    checked = {}
    for model_input in inputs:
        array = np.asarray(feed[model_input.name])
        if array.dtype != model_input.dtype:
            raise CalibrationDataError(f"{where}: input '{model_input.name}' has dtype {array.dtype}, the model "
                                       f"expects {model_input.dtype}")
        fits = array.ndim == len(model_input.shape) and all(
            not isinstance(dim, int) or dim == size for dim, size in zip(model_input.shape, array.shape))
        if not fits:
            raise CalibrationDataError(f"{where}: input '{model_input.name}' has shape {tuple(array.shape)}, the "
                                       f"model expects {model_input.describe_shape()}")
        if np.issubdtype(array.dtype, np.floating) and not np.all(np.isfinite(array)):
            raise CalibrationDataError(f"{where}: input '{model_input.name}' has NaN or infinite values")
        checked[model_input.name] = array
    return checked


def _stacked_samples(arrays: Mapping[str, np.ndarray], where: str) -> tuple[int, Iterator[dict]]:
    """(sample count, iterator over array[i:i+1] feeds) of arrays stacked on axis 0."""
    lengths = {}
    for name, array in arrays.items():
        array = np.asarray(array)
        if array.ndim == 0:
            raise CalibrationDataError(f"{where}: array '{name}' is a scalar; arrays are stacked on the batch axis")
        lengths[name] = array.shape[0]
    if len(set(lengths.values())) > 1:
        raise CalibrationDataError(f"{where}: arrays hold different sample counts on the batch axis: "
                                   + ", ".join(f"'{name}' {count}" for name, count in lengths.items()))
    count = next(iter(lengths.values()), 0)
    return count, ({name: np.asarray(array)[index:index + 1] for name, array in arrays.items()}
                   for index in range(count))


def _npz_arrays(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise CalibrationDataError(f"'{path}' is a single .npy array; use an .npz whose arrays are named "
                                           "after the model inputs")
            return {name: data[name] for name in data.files}
    except (OSError, ValueError) as error:
        if isinstance(error, CalibrationDataError):
            raise
        raise CalibrationDataError(f"cannot read calibration file '{path}': {error}") from error


class CalibrationSet:
    """Validated samples, read lazily; `len()` is known for files and dicts of arrays, None for iterables."""

    def __init__(self, source: object, inputs: list[ModelInput]):
        self.inputs = inputs
        self.files: list[str] = []
        self.count: int | None = None
        self._source = source
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            if os.path.isdir(path):
                self.files = sorted(os.path.join(path, name) for name in os.listdir(path) if name.endswith(".npz"))
                if not self.files:
                    raise CalibrationDataError(f"calibration folder '{path}' has no .npz files")
            elif os.path.exists(path):
                self.files = [path]
            else:
                raise CalibrationDataError(f"calibration data '{path}' does not exist")
            self.count = sum(self._file_count(file) for file in self.files)
        elif isinstance(source, Mapping):
            self.count, _ = _stacked_samples(source, "calibration arrays")
        elif not isinstance(source, Iterable):
            raise CalibrationDataError("calibration must be an .npz path, a folder of .npz files, a dict of "
                                       f"stacked arrays or an iterable of feed dicts, not {type(source).__name__}")
        if self.count == 0:
            raise CalibrationDataError("the calibration set is empty (0 samples)")

    @staticmethod
    def _file_count(path: str) -> int:
        try:
            with np.load(path, allow_pickle=False) as data:
                if not hasattr(data, "files"):
                    raise CalibrationDataError(f"'{path}' is a single .npy array; use an .npz whose arrays are "
                                               "named after the model inputs")
                shapes = {name: data[name].shape for name in data.files}
        except (OSError, ValueError) as error:
            if isinstance(error, CalibrationDataError):
                raise
            raise CalibrationDataError(f"cannot read calibration file '{path}': {error}") from error
        counts = {shape[0] if shape else 0 for shape in shapes.values()}
        if len(counts) > 1:
            raise CalibrationDataError(f"'{path}': arrays hold different sample counts on the batch axis: "
                                       + ", ".join(f"'{name}' {shape[0] if shape else 0}"
                                                   for name, shape in shapes.items()))
        return counts.pop() if counts else 0

    def __len__(self) -> int:
        if self.count is None:
            raise TypeError("the sample count of an iterable calibration set is unknown before it is read")
        return self.count

    def _raw_samples(self) -> Iterator[tuple[str, object]]:
        if self.files:
            for path in self.files:
                _, samples = _stacked_samples(_npz_arrays(path), f"'{path}'")
                for index, sample in enumerate(samples):
                    yield f"'{path}' sample {index}", sample
        elif isinstance(self._source, Mapping):
            _, samples = _stacked_samples(self._source, "calibration arrays")
            for index, sample in enumerate(samples):
                yield f"calibration sample {index}", sample
        else:
            for index, sample in enumerate(self._source):
                yield f"calibration sample {index}", sample

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        seen = 0
        for where, sample in self._raw_samples():
            seen += 1
            yield check_sample(sample, self.inputs, where)
        if seen == 0:
            raise CalibrationDataError("the calibration set is empty (0 samples)")


def calibration_set(source: object, model: onnx.ModelProto) -> CalibrationSet:
    """The calibration samples of `source`, checked against `model`'s inputs as they are read."""
    if isinstance(source, CalibrationSet):
        return source
    return CalibrationSet(source, model_inputs(model))
