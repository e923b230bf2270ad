"""Per-layer precision formats: each rewrite passes onnx.checker, runs in plain ORT equal to the fp32 model on the
stored weights, and stores the bytes it claims; int4 blocks with a K tail; int8 touches only its layer."""
import math

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, numpy_helper

from ortx.model_io import to_ort_bytes
from ortx.quantization.mixed_model import build_mixed_model, int8_ranges
from ortx.quantization.precisions import (INT4_LIMIT, PrecisionError, dequantize_int4, find_layers, int4_weight,
                                          ort_support, store_weight)
from tests import _models
from tests.tolerances import assert_close


def _net(opset=21):
    model = _models.mixed_precision_net()
    if opset != _models.OPSET:
        model = onnx.version_converter.convert_version(model, opset)
    return model


def _run(model, feed, optimize=False):
    options = onnxruntime.SessionOptions()
    if not optimize:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(to_ort_bytes(model), options, providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def _feed(seed=1):
    return {"X": np.random.default_rng(seed).standard_normal((1, 3, 12, 12)).astype(np.float32)}


def _with_weight(model, name, values):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    tensor = next(tensor for tensor in copy.graph.initializer if tensor.name == name)
    tensor.CopyFrom(numpy_helper.from_array(values.astype(np.float32), name))
    return copy


def test_find_layers_one_per_op_with_axes():
    layers = find_layers(_net())
    assert [(layer.op_type, layer.output_axis, layer.reduction_axis, layer.bias is not None) for layer in layers] == [
        ("Conv", 0, None, True), ("Conv", 0, None, True), ("Gemm", 0, 1, True), ("MatMul", 1, 0, False)]
    transformer = _models.transformer_block()
    activation_products = [node.name for node in transformer.graph.node if node.op_type == "MatMul"
                           and all(name not in {t.name for t in transformer.graph.initializer} for name in node.input)]
    assert activation_products and not {layer.node for layer in find_layers(transformer)} & set(activation_products)


@pytest.mark.parametrize("precision, dtype, element_bytes", [("fp16", TensorProto.FLOAT16, 2),
                                                             ("bf16", TensorProto.BFLOAT16, 2)])
def test_half_weights_are_the_rounded_fp32_model(precision, dtype, element_bytes):
    model = _net(opset=_models.OPSET)
    numpy_type = {"fp16": np.float16, "bf16": __import__("ml_dtypes").bfloat16}[precision]
    feed = _feed()
    for layer in find_layers(model):
        rewritten = onnx.ModelProto()
        rewritten.CopyFrom(model)
        store_weight(rewritten, layer, precision)
        onnx.checker.check_model(rewritten, full_check=True)
        stored = [tensor for tensor in rewritten.graph.initializer if tensor.data_type == dtype]
        assert len(stored) == 1 and len(stored[0].raw_data) == element_bytes * layer.elements
        assert layer.weight not in {tensor.name for tensor in rewritten.graph.initializer}
        assert [node.op_type for node in rewritten.graph.node].count("Cast") == 1
        original = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == layer.weight))
        reference = _with_weight(model, layer.weight, original.astype(numpy_type).astype(np.float32))
        assert_close(_run(rewritten, feed), _run(reference, feed), what=f"{layer.node} {precision}")


@pytest.mark.parametrize("block_size", [0, 16])
def test_int4_weights_blocked_with_tail_and_per_channel(block_size):
    model = _net()
    feed = _feed()
    for layer in find_layers(model):
        values = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == layer.weight))
        quantized, scale, attributes = int4_weight(values, layer, block_size)
        assert quantized.min() >= -INT4_LIMIT and quantized.max() <= INT4_LIMIT
        if layer.reduction_axis is not None and block_size:
            blocks = math.ceil(values.shape[layer.reduction_axis] / block_size)
            assert scale.shape[layer.reduction_axis] == blocks and attributes["block_size"] == block_size
        else:
            assert scale.shape == (values.shape[layer.output_axis],) and attributes == {"axis": layer.output_axis}
        dequantized = dequantize_int4(quantized, scale, attributes)
        assert np.max(np.abs(dequantized - values)) <= 0.5 * float(scale.max()) * (1 + 1e-6)
        rewritten = onnx.ModelProto()
        rewritten.CopyFrom(model)
        store_weight(rewritten, layer, "int4", block_size=block_size)
        onnx.checker.check_model(rewritten, full_check=True)
        stored = next(t for t in rewritten.graph.initializer if t.data_type == TensorProto.INT4)
        assert len(stored.raw_data) == math.ceil(layer.elements / 2)
        reference = _with_weight(model, layer.weight, dequantized)
        assert_close(_run(rewritten, feed), _run(reference, feed), what=f"{layer.node} int4 block {block_size}")
        # ORT's own rewrites (DequantizeLinear + MatMul -> MatMulNBits, whose default accuracy level quantizes the
        # activations to int8) change the numbers a little but run
        optimized, expected = _run(rewritten, feed, optimize=True), _run(reference, feed)
        assert np.linalg.norm(optimized - expected) <= 0.05 * np.linalg.norm(expected)


def test_int4_needs_opset_21_and_fp16_range_is_checked():
    model = _net(opset=_models.OPSET)
    layer = find_layers(model)[0]
    with pytest.raises(PrecisionError, match=r"int4 weights need opset >= 21.*conv_"):
        store_weight(model, layer, "int4")
    huge = _with_weight(model, layer.weight, np.full(layer.shape, 1e6, np.float32))
    with pytest.raises(PrecisionError, match=r"exceeds fp16's range"):
        store_weight(huge, layer, "fp16")
    with pytest.raises(PrecisionError, match="int8"):
        store_weight(model, layer, "int8")


def test_int8_only_touches_its_layer():
    model = _net()
    layers = find_layers(model)
    samples = [_feed(seed) for seed in range(4)]
    ranges = int8_ranges(model, layers, samples, method="minmax", percentile=99.99, activation_dtype="uint8")
    gemm = next(layer for layer in layers if layer.op_type == "Gemm")
    mixed = build_mixed_model(model, layers, {gemm.node: "int8"}, ranges=ranges)
    onnx.checker.check_model(mixed, full_check=True)
    producers = {output: node for node in mixed.graph.node for output in node.output}
    for node in mixed.graph.node:
        if node.op_type in ("Conv", "MatMul", "Gemm"):
            sources = [producers[name].op_type if name in producers else "initializer/input" for name in node.input]
            quantized = node.name == gemm.node
            assert ("DequantizeLinear" in sources) == quantized, (node.name, sources)
    types = {tensor.data_type for tensor in mixed.graph.initializer}
    assert TensorProto.INT8 in types and TensorProto.INT32 in types    # int8 weight, int32 bias
    reference, result = _run(model, _feed()), _run(mixed, _feed(), optimize=True)
    assert np.linalg.norm(result - reference) <= 0.05 * np.linalg.norm(reference)


def test_this_onnxruntime_runs_every_precision():
    assert {precision: ort_support(precision) for precision in ("fp16", "bf16", "int8", "int4")} == \
        {"fp16": None, "bf16": None, "int8": None, "int4": None}
    assert "unknown precision" in ort_support("fp8")
