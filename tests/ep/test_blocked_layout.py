"""Runs of convs on blocked tensors (ortx.ep.lowering.blocked_layout): which nodes the planner takes, where the
reorders go, and whole graphs against onnxruntime on fresh random inputs (float32 tolerance: the blocked kernels
sum in another order than ORT's).
"""
from __future__ import annotations

import collections
import contextlib

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ortx
from ortx import _kernels
from ortx.model_io import to_ort_bytes
from tests import _models
from tests.tolerances import BF16_MODEL_MIN_COSINE, MODEL_MAX_ABS_FRACTION, MODEL_MIN_COSINE, assert_close, cosine

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]
BLOCKED_KERNELS = {"conv_pointwise_nchwc_f32", "conv2d_depthwise_nchwc_f32", "conv2d_to_nchwc_f32"}
needs_avx512 = pytest.mark.skipif(_kernels.cpu_isa() != "avx512", reason="blocked runs are planned on AVX-512 only")


@pytest.fixture
def vdpbf16ps_path():
    """Blocked bf16 runs are planned on the avx512_bf16 path only: on an AMX CPU, that path with AMX off."""
    if _kernels.cpu_isa() != "avx512" or not (_kernels.bf16_isa() == "avx512_bf16" or _kernels.cpu_has_amx_bf16()):
        pytest.skip("no AVX512_BF16")
    amx = _kernels.bf16_isa() == "amx_bf16"
    _kernels.allow_amx(False)
    assert _kernels.bf16_isa() == "avx512_bf16"
    yield
    _kernels.allow_amx(amx)
    assert (_kernels.bf16_isa() == "amx_bf16") == amx


def _options(threads: int = 2) -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return options


def _kernel_counts(session) -> collections.Counter:
    from ortx.ep.runtime import ClaimedStep

    return collections.Counter(step.kernel for compiled in session._compiled.values()
                               for claimed in compiled.plan.steps if isinstance(claimed, ClaimedStep)
                               for step in claimed.program.steps)


def _steps(session) -> list:
    from ortx.ep.runtime import ClaimedStep

    return [step for compiled in session._compiled.values() for claimed in compiled.plan.steps
            if isinstance(claimed, ClaimedStep) for step in claimed.program.steps]


def _run_both(model, feeds, threads=2, **options):
    reference = onnxruntime.InferenceSession(to_ort_bytes(model), _options(threads),
                                             providers=["CPUExecutionProvider"]).run(None, feeds)
    session = ortx.InferenceSession(model, _options(threads), providers=PROVIDERS, provider_options=[options, {}])
    return reference, session.run(None, feeds), session


def _random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@needs_avx512
@pytest.mark.parametrize("batch,threads", [(1, 2), (2, 1)])
def test_mobilenetv2_runs_blocked_from_stem_to_the_last_conv(batch, threads):
    """The stem writes blocked (no reorder in), every 1x1 and depthwise conv with its residual Adds runs blocked,
    and one reorder brings the last conv's output back for GlobalAveragePool; channel counts 16 and 24 leave
    partial blocks."""
    model = _models.mobilenetv2_style(batch=batch, size=64, seed=3)
    feeds = {"input": _random((batch, 3, 64, 64), 4)}
    (expected,), (actual,), session = _run_both(model, feeds, threads)
    assert_close(actual, expected)
    counts = _kernel_counts(session)
    assert counts["conv2d_to_nchwc_f32"] == 1 and counts["reorder_to_nchwc_f32"] == 0
    assert counts["reorder_from_nchwc_f32"] == 1
    # 17 depthwise and 34 1x1 convs; the 5 expands before a depthwise conv of at least 8 output columns (the blocks
    # after the first whose depthwise output is 16x16 or 8x8) run fused with it
    fused = counts["conv_expand_depthwise_nchwc_f32"]
    assert fused == 5
    assert counts["conv2d_depthwise_nchwc_f32"] == 17 - fused and counts["conv_pointwise_nchwc_f32"] == 34 - fused
    assert counts["gemm_f32"] == 1 and "conv2d_depthwise_f32" not in counts


@needs_avx512
@pytest.mark.parametrize("threads", [1, 2])
def test_expand_and_depthwise_fuse_only_where_the_expand_output_has_one_reader(threads, monkeypatch):
    """Four 1x1 -> Clip -> depthwise 3x3 -> 1x1 blocks on two inputs: the first fuses its expand and depthwise conv
    (conv_expand_depthwise_nchwc_f32); the second's expand output is also a graph output, the third's depthwise
    conv has 7 output columns (kernels/conv_expand_depthwise.c would take scalar loops) and the fourth adds a
    residual to its depthwise output, so they stay two steps each. Against ORT, and bit for bit against the same
    session with fusion off (both compute every output the same way)."""
    nodes, initializers = [], [numpy_helper.from_array(np.array(0.0, np.float32), "low"),
                               numpy_helper.from_array(np.array(6.0, np.float32), "high")]
    blocks = [("x", 20, 1, False), ("x", 20, 1, False), ("x7", 7, 1, False), ("x", 20, 2, True)]
    for index, (source, size, stride, residual) in enumerate(blocks):
        hidden, seed = 48, 40 + 5 * index
        nodes += [helper.make_node("Conv", [source, f"we{index}", f"be{index}"], [f"e{index}"],
                                   name=f"expand{index}"),
                  helper.make_node("Clip", [f"e{index}", "low", "high"], [f"c{index}"], name=f"clip{index}"),
                  helper.make_node("Conv", [f"c{index}", f"wd{index}", f"bd{index}"], [f"d{index}"],
                                   name=f"depthwise{index}", group=hidden, pads=[1, 1, 1, 1], strides=[stride] * 2)]
        last = f"d{index}"
        if residual:  # an Add the depthwise conv takes as its residual (FusedConv)
            nodes.append(helper.make_node("Add", [f"d{index}", "r"], [f"r{index}"], name=f"residual{index}"))
            last = f"r{index}"
        nodes.append(helper.make_node("Conv", [last, f"wp{index}"], [f"y{index}"], name=f"project{index}"))
        initializers += [_weights(f"we{index}", (hidden, 16, 1, 1), seed),
                         numpy_helper.from_array(_random((hidden,), seed + 1), f"be{index}"),
                         _weights(f"wd{index}", (hidden, 1, 3, 3), seed + 2),
                         numpy_helper.from_array(_random((hidden,), seed + 3), f"bd{index}"),
                         _weights(f"wp{index}", (24, hidden, 1, 1), seed + 4)]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 20]),
                           helper.make_tensor_value_info("x7", TensorProto.FLOAT, [1, 16, 7, 7]),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 48, 10, 10])],
                   [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                    for name, shape in (("y0", [1, 24, 20, 20]), ("e1", [1, 48, 20, 20]), ("y1", [1, 24, 20, 20]),
                                        ("y2", [1, 24, 7, 7]), ("y3", [1, 24, 10, 10]))], initializers)
    feeds = {"x": _random((1, 16, 20, 20), 38), "x7": _random((1, 16, 7, 7), 39), "r": _random((1, 48, 10, 10), 37)}
    expected, actual, session = _run_both(model, feeds, threads)
    for want, got in zip(expected, actual):
        assert_close(got, want)
    counts = _kernel_counts(session)
    assert counts["conv_expand_depthwise_nchwc_f32"] == 1 and counts["conv2d_depthwise_nchwc_f32"] == 3
    import ortx.pipeline

    monkeypatch.setattr(ortx.pipeline, "EXPAND_DEPTHWISE", False)
    _, unfused, unfused_session = _run_both(model, feeds, threads)
    assert "conv_expand_depthwise_nchwc_f32" not in _kernel_counts(unfused_session)
    for fused_output, unfused_output in zip(actual, unfused):
        np.testing.assert_array_equal(fused_output, unfused_output)


def _graph(nodes, inputs, outputs, initializers):
    model = helper.make_model(helper.make_graph(nodes, "blocked", inputs, outputs, initializer=initializers),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _weights(name, shape, seed):
    return numpy_helper.from_array(_random(shape, seed) * np.float32(1.0 / np.sqrt(np.prod(shape[1:]))), name)


@needs_avx512
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("height,width", [(13, 17), (16, 16)])
def test_elementwise_ops_join_a_run_and_outputs_leave_it_through_reorders(threads, height, width):
    """1x1 conv -> Mul by a per-channel constant -> Add of a scalar -> HardSwish -> depthwise 3x3 -> Add of the
    1x1's output (a full-tensor operand) -> 1x1 conv. The depthwise output is also a graph output and feeds MaxPool
    (NCHW), so it is reordered back once; the last conv's output is a graph output (reordered at once). The
    per-channel constant is stored tiled over rows of 17 pixels (13x17) or 64 (16x16): no reorder of it."""
    c_in, hidden, c_out = 24, 40, 20
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="expand"),
        helper.make_node("Mul", ["a", "scale"], ["b"], name="scale"),
        helper.make_node("Add", ["b", "shift"], ["c"], name="shift"),
        helper.make_node("HardSwish", ["c"], ["d"], name="act"),
        helper.make_node("Conv", ["d", "w2"], ["e"], name="depthwise", group=hidden, pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["e", "a"], ["f"], name="residual"),
        helper.make_node("Conv", ["f", "w3", "b3"], ["y"], name="project"),
        helper.make_node("MaxPool", ["e"], ["pooled"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
    ]
    initializers = [_weights("w1", (hidden, c_in, 1, 1), 1), _weights("w2", (hidden, 1, 3, 3), 2),
                    _weights("w3", (c_out, hidden, 1, 1), 3), numpy_helper.from_array(_random((c_out,), 4), "b3"),
                    numpy_helper.from_array(_random((1, hidden, 1, 1), 6), "scale"),
                    numpy_helper.from_array(np.array([0.25], np.float32), "shift")]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, height, width])],
                   [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                    for name, shape in (("y", [1, c_out, height, width]), ("e", [1, hidden, height, width]),
                                        ("pooled", [1, hidden, height // 2, width // 2]))],
                   initializers)
    feeds = {"x": _random((1, c_in, height, width), 5)}
    expected, actual, session = _run_both(model, feeds, threads)
    for want, got in zip(expected, actual):
        assert_close(got, want)
    counts = _kernel_counts(session)
    assert counts["conv_pointwise_nchwc_f32"] == 2 and counts["conv2d_depthwise_nchwc_f32"] == 1
    assert counts["reorder_to_nchwc_f32"] == 1  # x, the graph input
    assert counts["reorder_from_nchwc_f32"] == 2  # e (graph output, read by MaxPool too) and y


@needs_avx512
@pytest.mark.parametrize("batch,threads", [(1, 2), (2, 1)])
@pytest.mark.parametrize("size,stride", [(15, 2), (16, 2), (10, 3)])
def test_resnet_projection_1x1_with_a_stride_stays_blocked(batch, threads, size, stride):
    """A ResNet block's head: the block input X (blocked, a 1x1 conv's output) read by a 1x1 conv and by the
    strided 1x1 projection, whose output is the residual of the block's last 1x1 conv. The projection keeps every
    stride-th pixel (strided_copy, odd and even sizes, stride 3 too) and runs conv_pointwise_nchwc_f32 on them, so
    X stays blocked and is never reordered; the graph input and output are reordered once each."""
    c_in, mid, c_out = 20, 24, 40
    out_size = (size - 1) // stride + 1
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["x1"], name="stem_1x1"),
        helper.make_node("Relu", ["x1"], ["block_in"], name="stem_relu"),
        helper.make_node("Conv", ["block_in", "w1"], ["a"], name="reduce", strides=[stride, stride]),
        helper.make_node("Relu", ["a"], ["ar"], name="reduce_relu"),
        helper.make_node("Conv", ["block_in", "wp", "bp"], ["p"], name="projection", strides=[stride, stride]),
        helper.make_node("Conv", ["ar", "w2", "b2"], ["c"], name="expand"),
        helper.make_node("Add", ["c", "p"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["y"], name="out_relu"),
    ]
    initializers = [_weights("w0", (c_in, c_in, 1, 1), 1), numpy_helper.from_array(_random((c_in,), 2), "b0"),
                    _weights("w1", (mid, c_in, 1, 1), 3), _weights("wp", (c_out, c_in, 1, 1), 4),
                    numpy_helper.from_array(_random((c_out,), 5), "bp"), _weights("w2", (c_out, mid, 1, 1), 6),
                    numpy_helper.from_array(_random((c_out,), 7), "b2")]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c_in, size, size])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, c_out, out_size, out_size])],
                   initializers)
    feeds = {"x": _random((batch, c_in, size, size), 8)}
    expected, actual, session = _run_both(model, feeds, threads)
    assert_close(actual[0], expected[0])
    counts = _kernel_counts(session)
    assert counts["conv_pointwise_nchwc_f32"] == 4 and counts["strided_copy"] == 2
    assert counts["reorder_to_nchwc_f32"] == 1 and counts["reorder_from_nchwc_f32"] == 1


@needs_avx512
@pytest.mark.parametrize("batch,threads", [(1, 2), (2, 1)])
@pytest.mark.parametrize("size", [14, 15])
def test_resnet_v15_stage_head_with_a_strided_3x3_stays_blocked(batch, threads, size):
    """ResNet-50 v1.5's stage head: 1x1 reduce, 3x3 stride 2 (pad 1), 1x1 expand with the strided 1x1
    projection as its residual. The 3x3 conv runs conv2d_nchwc_f32 on blocked tensors, so the whole block is one
    run: the graph input and output are reordered once each, nothing inside. A 3x3 stride-2 stem from 3 channels
    stays off it (conv2d_to_nchwc_f32 writes the run's first tensor)."""
    c_in, mid, c_out = 32, 24, 48
    out_size = (size - 1) // 2 + 1
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["x1"], name="stem", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["x1"], ["block_in"], name="stem_relu"),
        helper.make_node("Conv", ["block_in", "w1"], ["a"], name="reduce"),
        helper.make_node("Relu", ["a"], ["ar"], name="reduce_relu"),
        helper.make_node("Conv", ["ar", "w2", "b2"], ["b"], name="conv3x3", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["b"], ["br"], name="conv3x3_relu"),
        helper.make_node("Conv", ["block_in", "wp", "bp"], ["p"], name="projection", strides=[2, 2]),
        helper.make_node("Conv", ["br", "w3", "b3"], ["c"], name="expand"),
        helper.make_node("Add", ["c", "p"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["y"], name="out_relu"),
    ]
    initializers = [_weights("w0", (c_in, 3, 3, 3), 1), numpy_helper.from_array(_random((c_in,), 2), "b0"),
                    _weights("w1", (mid, c_in, 1, 1), 3), _weights("w2", (mid, mid, 3, 3), 4),
                    numpy_helper.from_array(_random((mid,), 5), "b2"), _weights("wp", (c_out, c_in, 1, 1), 6),
                    numpy_helper.from_array(_random((c_out,), 7), "bp"), _weights("w3", (c_out, mid, 1, 1), 8),
                    numpy_helper.from_array(_random((c_out,), 9), "b3")]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, c_out, out_size, out_size])],
                   initializers)
    feeds = {"x": _random((batch, 3, size, size), 10)}
    expected, actual, session = _run_both(model, feeds, threads)
    assert_close(actual[0], expected[0])
    counts = _kernel_counts(session)
    assert counts["conv2d_nchwc_f32"] == 1 and counts["conv2d_to_nchwc_f32"] == 1, counts
    assert counts["conv_pointwise_nchwc_f32"] == 3 and counts["strided_copy"] == 1, counts
    assert "reorder_to_nchwc_f32" not in counts and counts["reorder_from_nchwc_f32"] == 1, counts


def _counts_after_checking(nodes, initializers, x_shape, y_shape, seed, threads):
    """The model of `nodes` (input x, output y) run by ORT and OrtxEP on one random input: equal within float32's
    tolerance; OrtxEP's kernel counts."""
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))], initializers)
    expected, actual, session = _run_both(model, {"x": _random(tuple(x_shape), seed)}, threads)
    assert_close(actual[0], expected[0])
    return _kernel_counts(session)


def _bias(name, count, seed):
    return numpy_helper.from_array(_random((count,), seed), name)


@needs_avx512
@pytest.mark.parametrize("channels,size,blocked", [
    (32, 14, True),  # 196 pixels: blocked (DIRECT_MAX_PIXELS)
    (64, 23, True),  # 529 pixels, 64 x 64 channels: blocked (few channels on a mid-sized map)
    (160, 23, False),  # 160 x 160 channels on 529 pixels: Winograd
    (32, 60, False),  # 3600 pixels: Winograd
])
@pytest.mark.parametrize("winograd", [True, False])
@pytest.mark.parametrize("batch,threads", [(1, 2), (2, 1)])
def test_resnet_basic_block_with_stride_1_3x3_convs(channels, size, blocked, winograd, batch, threads, monkeypatch):
    """A ResNet-18 basic block after a 3-channel stem: two stride-1 3x3 convs and the residual Add. With blocked
    Winograd (is_winograd_blocked) both run conv2d_winograd_nchwc_f32 on blocked tensors whatever the shape, the
    stem writing blocked (one run: no reorder into it, one out). Without it, where is_dense_direct holds they run
    conv2d_nchwc_f32 so, elsewhere they stay NCHW (Winograd) and nothing is blocked. Equal to ORT every way. The
    rules as on a CPU where they apply (dense_direct_pays: measured on one host; on the others the block stays
    NCHW, as in the unblocked cases)."""
    from ortx.ep.lowering import blocked_layout

    monkeypatch.setattr(blocked_layout, "dense_direct_pays", lambda: True)
    if not winograd:
        monkeypatch.setattr(blocked_layout, "is_winograd_blocked", lambda plan: False)
    blocked = blocked or winograd
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["x1"], name="stem", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["x1"], ["block_in"], name="stem_relu"),
        helper.make_node("Conv", ["block_in", "w1", "b1"], ["a"], name="conv_a", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"], name="conv_a_relu"),
        helper.make_node("Conv", ["ar", "w2", "b2"], ["b"], name="conv_b", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b", "block_in"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["y"], name="out_relu"),
    ]
    initializers = [_weights("w0", (channels, 3, 3, 3), 1), _bias("b0", channels, 2),
                    _weights("w1", (channels, channels, 3, 3), 3), _bias("b1", channels, 4),
                    _weights("w2", (channels, channels, 3, 3), 5), _bias("b2", channels, 6)]
    counts = _counts_after_checking(nodes, initializers, (batch, 3, size, size), (batch, channels, size, size), 7,
                                    threads)
    if blocked:
        assert counts["conv2d_winograd_nchwc_f32" if winograd else "conv2d_nchwc_f32"] == 2, counts
        assert counts["conv2d_to_nchwc_f32"] == 1, counts
        assert "reorder_to_nchwc_f32" not in counts and counts["reorder_from_nchwc_f32"] == 1, counts
    else:
        assert not set(counts) & (BLOCKED_KERNELS | {"conv2d_nchwc_f32", "conv2d_winograd_nchwc_f32"}), counts
        assert counts["conv2d_winograd_f32"] == 2, counts


@pytest.mark.parametrize("rate,pays", [(146.2, True), (110.0, True), (70.0, False), (0.0, False)])
def test_dense_direct_pays_where_multiply_adds_are_fast(rate, pays, monkeypatch):
    """The stride-1 direct rule follows the probe's fp32 multiply-add rate per core (DIRECT_MIN_FP32_RATE): the AMD
    Zen 5 host where it was measured reads 146; 0 is a CPU without AVX-512."""
    from ortx.ep import precision
    from ortx.ep.lowering import blocked_layout

    monkeypatch.setattr(precision, "dot_rates", lambda: (rate, 0.0))
    assert blocked_layout.dense_direct_pays() is pays


@needs_avx512
@pytest.mark.parametrize("expand,blocked", [(32, True), (24, False)])
@pytest.mark.parametrize("batch,threads", [(1, 2), (2, 1)])
def test_fire_module_concat_stays_blocked(expand, blocked, batch, threads, monkeypatch):
    """SqueezeNet's fire module: squeeze 1x1 -> expand 1x1 and expand 3x3 -> Concat -> the next squeeze 1x1. With
    whole 16-channel blocks per input the Concat joins the run (blocked_layout.blocked_concat): no reorder inside;
    at batch 1 both expands write straight into the Concat's blocked output (no copy), at batch 2 copy_rows joins
    them. With 24 channels per expand the Concat stays NCHW: the run ends at it (both expands reordered out). The
    3x3 expand runs blocked (Winograd) as on a CPU where blocked_layout.dense_direct_pays."""
    from ortx.ep.lowering import blocked_layout

    monkeypatch.setattr(blocked_layout, "dense_direct_pays", lambda: True)
    squeeze = 16
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["s0"], name="squeeze"),
        helper.make_node("Relu", ["s0"], ["s"], name="squeeze_relu"),
        helper.make_node("Conv", ["s", "w1", "b1"], ["e1"], name="expand1x1"),
        helper.make_node("Relu", ["e1"], ["e1r"], name="expand1x1_relu"),
        helper.make_node("Conv", ["s", "w3", "b3"], ["e3"], name="expand3x3", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["e3"], ["e3r"], name="expand3x3_relu"),
        helper.make_node("Concat", ["e1r", "e3r"], ["cat"], name="concat", axis=1),
        helper.make_node("Conv", ["cat", "w4", "b4"], ["y"], name="next_squeeze"),
    ]
    size, c_in, c_out = 13, 48, 32
    initializers = [_weights("w0", (squeeze, c_in, 1, 1), 1), _bias("b0", squeeze, 2),
                    _weights("w1", (expand, squeeze, 1, 1), 3), _bias("b1", expand, 4),
                    _weights("w3", (expand, squeeze, 3, 3), 5), _bias("b3", expand, 6),
                    _weights("w4", (c_out, 2 * expand, 1, 1), 7), _bias("b4", c_out, 8)]
    counts = _counts_after_checking(nodes, initializers, (batch, c_in, size, size), (batch, c_out, size, size), 9,
                                    threads)
    assert counts["conv2d_winograd_nchwc_f32"] == 1 and counts["reorder_to_nchwc_f32"] == 1, counts
    if blocked:
        assert counts["conv_pointwise_nchwc_f32"] == 3 and counts["reorder_from_nchwc_f32"] == 1, counts
        assert counts["copy_rows"] == (0 if batch == 1 else 2), counts
    else:  # both expands reordered out for the NCHW Concat; the next 1x1 conv alone stays NCHW
        assert counts["conv_pointwise_nchwc_f32"] == 2 and counts["reorder_from_nchwc_f32"] == 2, counts


def _overlapping_live_buffers(session) -> list:
    """Pairs of arena buffers live at a common step whose bytes overlap, a Concat input planned inside its output
    excepted (TensorPlacement.within)."""
    from ortx.ep.runtime import ClaimedStep

    found = []
    for compiled in session._compiled.values():
        for claimed in compiled.plan.steps:
            if not isinstance(claimed, ClaimedStep):
                continue
            tensors = claimed.program.tensors
            for index, a in enumerate(tensors):
                for b in tensors[index + 1:]:
                    live = a.first <= b.last and b.first <= a.last
                    if (live and a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes
                            and b.label != a.within and a.label != b.within):
                        found.append((a, b))
    return found


@needs_avx512
@pytest.mark.parametrize("batch,threads", [(1, 2), (2, 1)])
def test_blocked_concat_of_an_nchw_input_plans_it_outside_the_output(batch, threads, monkeypatch):
    """A fire module whose Concat runs blocked while its 3x3 expand runs NCHW (Winograd): the expand's NCHW
    output is reordered and copied into the blocked output, so it must not be planned as a slice of the Concat's
    NCHW output, which no step writes (until this was fixed that slice was placed past a buffer sized as the slice
    alone, over live tensors: a bf16 SqueezeNet crashed). Equal to ORT; no two live buffers overlap."""
    from ortx.ep.lowering import blocked_layout

    monkeypatch.setattr(blocked_layout, "dense_direct_pays", lambda: True)
    monkeypatch.setattr(blocked_layout, "is_dense_direct", lambda plan: False)
    monkeypatch.setattr(blocked_layout, "is_winograd_blocked", lambda plan: False)
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["s0"], name="squeeze"),
        helper.make_node("Relu", ["s0"], ["s"], name="squeeze_relu"),
        helper.make_node("Conv", ["s", "w1", "b1"], ["e1"], name="expand1x1"),
        helper.make_node("Conv", ["s", "w3", "b3"], ["e3"], name="expand3x3", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["e1", "e3"], ["cat"], name="concat", axis=1),
        helper.make_node("Conv", ["cat", "w4", "b4"], ["y"], name="next_squeeze"),
    ]
    size, c_in, squeeze, expand, c_out = 27, 64, 32, 64, 32
    initializers = [_weights("w0", (squeeze, c_in, 1, 1), 1), _bias("b0", squeeze, 2),
                    _weights("w1", (expand, squeeze, 1, 1), 3), _bias("b1", expand, 4),
                    _weights("w3", (expand, squeeze, 3, 3), 5), _bias("b3", expand, 6),
                    _weights("w4", (c_out, 2 * expand, 1, 1), 7), _bias("b4", c_out, 8)]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c_in, size, size])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, c_out, size, size])], initializers)
    (expected,), (actual,), session = _run_both(model, {"x": _random((batch, c_in, size, size), 9)}, threads)
    assert_close(actual, expected)
    counts = _kernel_counts(session)
    assert counts["conv2d_winograd_f32"] == 1 and counts["conv_pointwise_nchwc_f32"] == 2, counts
    assert counts["copy_rows"] >= 1, counts  # the expand's reordered output into the Concat's blocked output
    assert _overlapping_live_buffers(session) == []


@needs_avx512
@pytest.mark.parametrize("batch", [1, 2])
def test_squeeze_and_excitation_stays_blocked(batch):
    """depthwise -> GlobalAveragePool -> 1x1 -> Relu -> 1x1 -> HardSigmoid -> Mul with the depthwise output (a
    per-channel [N, C, 1, 1] operand) -> Add of a constant [1, C, 1, 1] shift -> Relu -> 1x1: one run, no reorder
    inside (elementwise.blocked_operands: the constant shift stored blocked and tiled, the gate tiled by a copy)."""
    channels, squeezed = 40, 10
    nodes = [
        helper.make_node("Conv", ["x", "wd"], ["d"], name="depthwise", group=channels, pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["d"], ["g"], name="squeeze"),
        helper.make_node("Conv", ["g", "w1", "b1"], ["s1"], name="reduce"),
        helper.make_node("Relu", ["s1"], ["s2"], name="relu"),
        helper.make_node("Conv", ["s2", "w2", "b2"], ["s3"], name="expand"),
        helper.make_node("HardSigmoid", ["s3"], ["gate"], name="gate"),
        helper.make_node("Mul", ["d", "gate"], ["e"], name="excite"),
        helper.make_node("Add", ["e", "shift"], ["e2"], name="shift"),
        helper.make_node("Relu", ["e2"], ["f"], name="relu2"),
        helper.make_node("Conv", ["f", "w3"], ["y"], name="project"),
    ]
    initializers = [_weights("wd", (channels, 1, 3, 3), 11), _weights("w1", (squeezed, channels, 1, 1), 12),
                    numpy_helper.from_array(_random((squeezed,), 13), "b1"),
                    _weights("w2", (channels, squeezed, 1, 1), 14),
                    numpy_helper.from_array(_random((channels,), 15), "b2"),
                    numpy_helper.from_array(_random((1, channels, 1, 1), 16), "shift"),
                    _weights("w3", (24, channels, 1, 1), 17)]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, channels, 11, 9])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 24, 11, 9])], initializers)
    (expected,), (actual,), session = _run_both(model, {"x": _random((batch, channels, 11, 9), 18)})
    assert_close(actual, expected)
    counts = _kernel_counts(session)
    assert counts["global_avgpool_nchwc_f32"] == 1 and counts["conv2d_depthwise_nchwc_f32"] == 1
    assert counts["reorder_to_nchwc_f32"] == 1  # x (the constant shift is stored blocked, tiled over pixels)
    assert counts["strided_copy"] == 1  # the computed gate tiled over the rows' pixels
    assert counts["reorder_from_nchwc_f32"] == 1  # y


@needs_avx512
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_nearest_resize_into_a_blocked_add_stays_blocked(precision, monkeypatch):
    """An FPN step: 1x1 conv at 8x8 -> nearest Resize x2 -> Add with a 1x1 conv's output at 16x16 -> 1x1 conv. The
    Resize, whose only reader takes it blocked, runs on the blocked array (resize_nearest over its H and W), so no
    reorder surrounds it; a Resize of another 1x1 conv's output into a Concat that stays NCHW (40 + 48 channels, not
    whole blocks: blocked_layout.blocked_concat) stays NCHW too (its smaller input is what gets reordered). The bits are those of the session whose Resizes all run NCHW (there small's conv is NCHW too
    and the Add reorders the upsampled map)."""
    from ortx.ep.lowering import blocked_layout

    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["small"], name="small"),
             helper.make_node("Conv", ["big_in", "w2"], ["big"], name="big"),
             helper.make_node("Resize", ["small", "", "scales"], ["up"], mode="nearest", name="up"),
             helper.make_node("Add", ["up", "big"], ["sum"], name="sum"),
             helper.make_node("Conv", ["sum", "w3"], ["y"], name="y"),
             helper.make_node("Conv", ["x", "w4"], ["small2"], name="small2"),
             helper.make_node("Relu", ["small2"], ["act2"], name="act2"),
             helper.make_node("Conv", ["act2", "w5"], ["small3"], name="small3"),
             helper.make_node("Resize", ["small3", "", "scales"], ["up2"], mode="nearest", name="up2"),
             helper.make_node("Concat", ["up2", "big"], ["z"], axis=1, name="z")]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 8, 8]),
                           helper.make_tensor_value_info("big_in", TensorProto.FLOAT, [1, 16, 16, 16])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16]),
                    helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 88, 16, 16])],
                   [_weights("w1", (48, 32, 1, 1), 11), _weights("w2", (48, 16, 1, 1), 12),
                    _weights("w3", (32, 48, 1, 1), 13), _weights("w4", (48, 32, 1, 1), 16),
                    _weights("w5", (40, 48, 1, 1), 17), scales])
    feeds = {"x": _random((1, 32, 8, 8), 14), "big_in": _random((1, 16, 16, 16), 15)}

    def steps_of(session):
        steps = collections.defaultdict(list)
        for compiled in session._compiled.values():
            for claimed in compiled.plan.steps:
                for step in getattr(getattr(claimed, "program", None), "steps", ()):
                    steps[step.node].append(step.kernel)
        return steps

    (expected_y, expected_z), (y, z), session = _run_both(model, feeds, precision=precision)
    steps = steps_of(session)
    # the Add reorders only big (also read by the Concat, so its conv writes NCHW), not the upsampled map
    assert steps["up"] == ["resize_nearest"] and steps["sum"].count("reorder_to_nchwc_f32") == 1, steps
    assert steps["up2"] == ["reorder_from_nchwc_f32", "resize_nearest"], steps
    if precision == "fp32":
        assert_close(y, expected_y)
        assert_close(z, expected_z)
    monkeypatch.setattr(blocked_layout, "blocked_resize", lambda node: False)
    (_, _), (plain_y, plain_z), plain = _run_both(model, feeds, precision=precision)
    plain_steps = steps_of(plain)
    assert plain_steps["up"] == ["resize_nearest"], plain_steps  # small's conv then stays NCHW, up is reordered
    assert plain_steps["sum"].count("reorder_to_nchwc_f32") == 2, plain_steps
    np.testing.assert_array_equal(y, plain_y)
    np.testing.assert_array_equal(z, plain_z)


@needs_avx512
def test_a_lone_pointwise_conv_stays_nchw():
    """No blocked neighbour (an AveragePool has no blocked kernel): the NCHW kernels, no reorders."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="pointwise"),
             helper.make_node("AveragePool", ["a"], ["y"], name="pool", kernel_shape=[2, 2])]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 14, 14])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 13, 13])],
                   [_weights("w", (64, 32, 1, 1), 6)])
    (expected,), (actual,), session = _run_both(model, {"x": _random((1, 32, 14, 14), 7)})
    assert_close(actual, expected)
    assert not set(_kernel_counts(session)) & (BLOCKED_KERNELS | {"reorder_to_nchwc_f32", "reorder_from_nchwc_f32"})


@needs_avx512
@pytest.mark.parametrize("batch,threads", [(1, 2), (2, 1)])
@pytest.mark.parametrize("pads,ceil_mode", [([0, 0, 0, 0], 1), ([1, 1, 1, 1], 0)])
def test_fp32_stem_maxpool_and_pointwise_conv_run_blocked(batch, threads, pads, ceil_mode):
    """SqueezeNet's head in fp32: a 3-channel 3x3/2 stem -> MaxPool 3x3/2 -> 1x1 conv. The MaxPool joins the run
    (maxpool_nchwc_f32), so the stem writes blocked (conv2d_to_nchwc_f32) and the 1x1 conv reads them; one reorder,
    of the graph output. Odd map sizes (ceil_mode, padding) leave partial windows; 40 channels a partial block."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="stem", strides=[2, 2]),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2], pads=pads,
                              ceil_mode=ceil_mode),
             helper.make_node("Conv", ["p", "w2", "b2"], ["y"], name="squeeze")]
    size = 37
    stem_size = (size - 3) // 2 + 1
    pooled = (stem_size + pads[0] + pads[2] - 3 + (1 if ceil_mode else 0)) // 2 + 1
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 24, pooled, pooled])],
                   [_weights("w1", (40, 3, 3, 3), 1), numpy_helper.from_array(_random((40,), 2), "b1"),
                    _weights("w2", (24, 40, 1, 1), 3), numpy_helper.from_array(_random((24,), 4), "b2")])
    (expected,), (actual,), session = _run_both(model, {"x": _random((batch, 3, size, size), 5)}, threads)
    assert_close(actual, expected)
    counts = _kernel_counts(session)
    assert counts["conv2d_to_nchwc_f32"] == 1 and counts["maxpool_nchwc_f32"] == 1, counts
    assert counts["conv_pointwise_nchwc_f32"] == 1 and counts["reorder_from_nchwc_f32"] == 1, counts
    assert counts["reorder_to_nchwc_f32"] == 0 and counts["maxpool_f32"] == 0, counts


@pytest.fixture
def amx_path():
    """The AMX bf16 path (tdpbf16ps), where the CPU has it."""
    if _kernels.cpu_isa() != "avx512" or not _kernels.cpu_has_amx_bf16():
        pytest.skip("no AMX-BF16")
    assert _kernels.allow_amx(True) and _kernels.bf16_isa() == "amx_bf16"



@pytest.mark.usefixtures("amx_path")
def test_fp32_nodes_1x1_convs_run_bf16x3_and_write_what_their_depthwise_readers_read():
    """fp32_nodes' 1x1 convs in a bf16 session on AMX run conv_pointwise_bf16x3 on blocked fp32 input: an expand
    whose only reader is a bf16 depthwise conv writes the pair rows that conv reads (the rounding is the reader's);
    a projection runs with the depthwise conv before it as one conv_depthwise_bf16x3 step (its fp32 output never
    written), bitwise the unfused pair (the depthwise conv writing blocked fp32 from pair rows, a chunk at a time).
    The result is closer to ORT's fp32 than all-bf16's; with the depthwise conv named too, its input stays fp32."""
    import ortx.ep.lowering.blocked_layout as blocked_layout

    model = _models.mobilenetv2_style(size=64, seed=5)
    convs = [node.name for node in model.graph.node if node.op_type == "Conv"]
    expand, depthwise, project = convs[3], convs[4], convs[5]  # block 2: 1x1 expand, depthwise, 1x1 projection
    feeds = {"input": _random((1, 3, 64, 64), 8)}
    (expected,), (plain,), _ = _run_both(model, feeds, precision="bf16")
    (_,), (mixed,), session = _run_both(model, feeds, precision="bf16", fp32_nodes=f"{expand},{project}")
    steps = {step.node: step for step in _steps(session)}
    assert steps[expand].kernel == "conv_pointwise_bf16x3" and steps[expand].ints[7] == 1  # out_rows: pair rows
    assert steps[project].kernel == "conv_depthwise_bf16x3" and depthwise not in steps, _kernel_counts(session)
    assert steps[project].ints[20] == 1  # the depthwise conv's input: the expand's pair rows
    assert np.abs(mixed - expected).max() < np.abs(plain - expected).max()
    blocked_layout.DEPTHWISE_BF16X3 = False
    try:
        (_,), (unfused,), session = _run_both(model, feeds, precision="bf16", fp32_nodes=f"{expand},{project}")
    finally:
        blocked_layout.DEPTHWISE_BF16X3 = True
    steps = {step.node: step for step in _steps(session)}
    assert steps[project].kernel == "conv_pointwise_bf16x3" and steps[project].ints[7] == 0
    assert steps[depthwise].kernel == "conv2d_depthwise_pair_rows" and list(steps[depthwise].ints[-3:-1]) == [1, 0]
    np.testing.assert_array_equal(mixed, unfused)
    (_,), (inputs_fp32,), session = _run_both(model, feeds, precision="bf16",
                                              fp32_nodes=f"{expand},{depthwise},{project}")
    steps = {step.node: step for step in _steps(session)}
    assert steps[expand].ints[7] == 0 and steps[project].ints[20] == 0  # the depthwise conv reads blocked fp32


@contextlib.contextmanager
def _pair_rows(mode: str):
    import ortx.pipeline

    saved, ortx.pipeline.PAIR_ROWS = ortx.pipeline.PAIR_ROWS, mode
    try:
        yield
    finally:
        ortx.pipeline.PAIR_ROWS = saved


@pytest.mark.usefixtures("amx_path")
def test_bf16_on_amx_runs_its_1x1_convs_blocked_unfused():
    """On AMX the same model's 1x1 convs all run conv_pointwise_nchwc_bf16 (its tdpbf16ps steps), none fused with
    a depthwise conv (the fused step's 1x1 conv is the vdpbf16ps tile); here with no tensor in pair rows."""
    with _pair_rows("off"):
        _bf16_blocked_mobilenet(fused=0)


@pytest.mark.parametrize("path", ["amx_path", "vdpbf16ps_path"])
def test_bf16_keeps_the_runs_tensors_in_pair_rows(path, request):
    """On AMX and on the vdpbf16ps path (conv_pointwise_pair_rows_bf16's rows tile; there the expand + depthwise
    pairs run unfused while pair rows are on, fused with them "off": blocked_layout.expand_depthwise_pairs).
    PAIR_ROWS "all" (the default): every tensor between the run's 1x1 and depthwise convs is bf16 pair rows,
    the expanded maps the depthwise convs read too (the option's bf16 activations): every 1x1 conv reads or writes
    pair rows, and the result is as accurate against fp32 as with none, within the blocked test's margin. "exact"
    keeps only the tensors 1x1 convs alone read (the depthwise convs' outputs, and 1x1 outputs only 1x1 convs
    read), whose bits those convs round their input to anyway: the same bits as with no pair rows."""
    import ortx.pipeline

    request.getfixturevalue(path)
    assert ortx.pipeline.PAIR_ROWS == "all"
    model = _models.mobilenetv2_style(size=64, seed=5)
    feeds = {"input": _random((1, 3, 64, 64), 8)}
    with _pair_rows("off"):
        (expected,), (plain,), session = _run_both(model, feeds, precision="bf16")
    fused = _kernel_counts(session)["conv_expand_depthwise_nchwc_bf16"]
    assert fused == (5 if path == "vdpbf16ps_path" else 0)
    with _pair_rows("exact"):
        (_,), (exact,), session = _run_both(model, feeds, precision="bf16")
    np.testing.assert_array_equal(exact, plain)
    counts = _kernel_counts(session)
    assert counts["conv2d_depthwise_pair_rows"] == 17 and "conv2d_depthwise_nchwc_f32" not in counts
    assert counts["conv_pointwise_pair_rows_bf16"] == 24 and counts["conv_pointwise_nchwc_bf16"] == 10
    (_,), (every,), session = _run_both(model, feeds, precision="bf16")
    counts = _kernel_counts(session)
    assert counts["conv_pointwise_pair_rows_bf16"] == 34 and "conv_pointwise_nchwc_bf16" not in counts
    assert counts["conv2d_depthwise_pair_rows"] == 17
    assert cosine(every, expected) >= cosine(plain, expected) - 1e-3


@pytest.mark.usefixtures("amx_path")
@pytest.mark.parametrize("batch,size,threads", [(1, 224, 2), (2, 64, 1)])
def test_bf16_on_amx_runs_resnet_blocked_from_stem_to_pool(batch, size, threads, monkeypatch):
    """ResNet-style under bf16 on AMX at 224x224: every conv (the 7x7 stem writing from the NCHW input, the 3x3 convs
    with their residuals, the 1x1 stride-2 shortcuts) runs conv2d_bf16_nchwc, the MaxPool its blocked kernel and
    the GlobalAveragePool its blocked kernel, so no reorder enters the run and one leaves it (the pooled vector). At
    64x64 the 4x4 and 2x2 maps' convs are not the direct form's (kept NCHW, as the kernel's rule says) and the run
    ends before them. A tensor only convs read is bf16 pair rows (they round it anyway: the same bits as fp32
    blocked): each BasicBlock's conv1 -> conv2 edge, and a layer's output, which only the next layer's stride-2 conv1
    and 1x1 shortcut read. Under PAIR_ROWS "all" (bf16 activations) the stem's output, which only the MaxPool reads,
    is pair rows too (maxpool_pair_rows_f32's maxima are the fp32 ones rounded, so the convs after it see the same
    bits and the first residual bf16 values), and so are block outputs a conv2 also reads as its residual (it adds
    their bf16 values); so is the MaxPool's output (maxpool_pair_rows_bf16: those maxima rounded, which is what
    the blocked fp32 output gave its readers, so the bits do not change). Without those three, the bits are those
    of the NCHW session (dense_bf16_blocked off), whose convs compute the same products."""
    from ortx.ep.lowering import blocked_layout

    model = _models.resnet18_style(batch=batch, size=size, seed=3)
    feeds = {"input": _random((batch, 3, size, size), 9)}
    (expected,), (blocked,), session = _run_both(model, feeds, threads, precision="bf16")
    counts = _kernel_counts(session)
    layouts = collections.Counter(tuple(step.ints[20:23]) for step in _steps(session)
                                  if step.kernel == "conv2d_bf16_nchwc")
    # (X, Y, residual) 0 NCHW, 1 blocked, 2 pair rows: the stem; the conv2s with a residual in pair rows (layer 1's
    # first one: the MaxPool's output); the run's last conv2 (the global pool reads blocked)
    if size == 224:
        assert counts["conv2d_bf16_nchwc"] == 20 and "conv2d_bf16" not in counts, counts
        assert counts["global_avgpool_nchwc_f32"] == 1, counts
        assert layouts == {(0, 2, 1): 1, (2, 2, 2): 7, (2, 1, 2): 1, (2, 2, 1): 11}, layouts
    else:  # layers 1 and 2 (the run's end)
        assert counts["conv2d_bf16_nchwc"] == 10 and counts["conv2d_bf16"] == 10, counts
        assert layouts == {(0, 2, 1): 1, (2, 2, 2): 3, (2, 1, 2): 1, (2, 2, 1): 5}, layouts
    assert counts["maxpool_pair_rows_bf16"] == 1 and counts["reorder_from_nchwc_f32"] == 1, counts
    assert "reorder_to_nchwc_f32" not in counts and "maxpool_nchwc_f32" not in counts, counts
    assert cosine(blocked, expected) >= BF16_MODEL_MIN_COSINE
    monkeypatch.setattr(blocked_layout, "POOL_OUT_PAIR_ROWS", False)
    (_,), (fp32_pool_out,), session = _run_both(model, feeds, threads, precision="bf16")
    assert _kernel_counts(session)["maxpool_pair_rows_f32"] == 1
    np.testing.assert_array_equal(fp32_pool_out, blocked)
    monkeypatch.setattr(blocked_layout, "POOL_PAIR_ROWS", False)
    monkeypatch.setattr(blocked_layout, "RESIDUAL_PAIR_ROWS", False)
    (_,), (fp32_pool,), session = _run_both(model, feeds, threads, precision="bf16")
    assert _kernel_counts(session)["maxpool_nchwc_f32"] == 1
    assert all(step.ints[22] == 1 for step in _steps(session) if step.kernel == "conv2d_bf16_nchwc")
    assert abs(cosine(fp32_pool, expected) - cosine(blocked, expected)) < 1e-4
    monkeypatch.setattr(blocked_layout, "DENSE_PAIR_ROWS", False)
    (_,), (fp32_edges,), session = _run_both(model, feeds, threads, precision="bf16")
    assert all(step.ints[20] != 2 for step in _steps(session) if step.kernel == "conv2d_bf16_nchwc")
    np.testing.assert_array_equal(fp32_pool, fp32_edges)
    monkeypatch.setattr(blocked_layout, "DENSE_BF16", False)
    (_,), (plain,), session = _run_both(model, feeds, threads, precision="bf16")
    assert "conv2d_bf16_nchwc" not in _kernel_counts(session)
    np.testing.assert_array_equal(fp32_pool, plain)


@pytest.mark.usefixtures("amx_path")
def test_bf16_on_amx_a_stem_form_conv_inside_a_run_reads_nchw():
    """A dense conv from 3 channels that a 1x1 conv inside the run feeds (1x1 to 3 channels, then 7x7) takes its
    stem form, which reads NCHW: the tensor between them is not pair rows (it leaves the run through a reorder) and
    the result matches fp32 within bf16's tolerance; the 7x7 conv's output, which only the next 3x3 conv reads, is
    pair rows."""
    tensor = lambda name, channels: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, channels, 56, 56])
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["p"], name="pointwise"),
        helper.make_node("Relu", ["p"], ["q"]),
        helper.make_node("Conv", ["q", "w1"], ["a"], name="to_three"),
        helper.make_node("Conv", ["a", "w2"], ["b"], name="stem_form", pads=[3, 3, 3, 3], kernel_shape=[7, 7]),
        helper.make_node("Relu", ["b"], ["c"]),
        helper.make_node("Conv", ["c", "w3"], ["y"], name="dense", pads=[1, 1, 1, 1]),
    ]
    model = _graph(nodes, [tensor("x", 64)], [tensor("y", 64)],
                   [_weights("w0", (64, 64, 1, 1), 0), _weights("w1", (3, 64, 1, 1), 1),
                    _weights("w2", (64, 3, 7, 7), 2), _weights("w3", (64, 64, 3, 3), 3)])
    feeds = {"x": _random((1, 64, 56, 56), 4)}
    (expected,), (actual,), session = _run_both(model, feeds, precision="bf16")
    assert cosine(actual, expected) >= BF16_MODEL_MIN_COSINE
    steps = _steps(session)
    assert [step.kernel for step in steps].count("reorder_from_nchwc_f32") == 2  # the 3 channels, the output
    assert [tuple(step.ints[20:23]) for step in steps if step.kernel == "conv2d_bf16_nchwc"] == [(0, 2, 1), (2, 1, 1)]


def _bf16_blocked_mobilenet(fused: int):
    import ortx.pipeline

    model = _models.mobilenetv2_style(size=64, seed=5)
    feeds = {"input": _random((1, 3, 64, 64), 8)}
    (expected,), (actual,), session = _run_both(model, feeds, precision="bf16")
    ortx.pipeline.BLOCKED_LAYOUT = False
    try:
        (_,), (nchw,), _ = _run_both(model, feeds, precision="bf16")
    finally:
        ortx.pipeline.BLOCKED_LAYOUT = True
    assert cosine(actual, expected) >= cosine(nchw, expected) - 1e-3
    counts = _kernel_counts(session)
    # `fused` expands run fused with their depthwise conv (conv_expand_depthwise_nchwc_bf16), 5 as in fp32
    assert counts["conv_pointwise_nchwc_bf16"] == 34 - fused and counts["conv2d_depthwise_nchwc_f32"] == 17 - fused
    assert counts.get("conv_expand_depthwise_nchwc_bf16", 0) == fused
    assert counts["conv2d_to_nchwc_f32"] == 1 and "reorder_to_nchwc_f32" not in counts
    assert "conv_pointwise_nchwc_f32" not in counts and "conv2d_bf16" not in counts


@pytest.mark.usefixtures("vdpbf16ps_path")
@pytest.mark.parametrize("size,rule,blocked", [(28, True, True), (40, True, False), (40, False, True)])
def test_bf16_runs_only_where_most_1x1_work_is_on_small_maps(size, rule, blocked, monkeypatch):
    """1x1 -> depthwise -> 1x1 at size x size: under bf16, where the small-map rule applies (a CPU whose bf16 rate is
    below BF16_SMALL_MAP_MAX_RATE), the run is kept at 28x28 (784 pixels, BF16_SMALL_MAP_PIXELS) and left to the
    NCHW bf16 kernels at 40x40; where it does not, kept at 40x40 too; fp32 keeps both."""
    from ortx.ep.lowering import blocked_layout

    monkeypatch.setattr(blocked_layout, "BF16_SMALL_MAP_MAX_RATE", float("inf") if rule else 0.0)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="expand"),
             helper.make_node("Conv", ["a", "w2"], ["b"], name="depthwise", group=64, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["b", "w3"], ["y"], name="project")]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, size, size])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, size, size])],
                   [_weights("w1", (64, 32, 1, 1), 19), _weights("w2", (64, 1, 3, 3), 20),
                    _weights("w3", (32, 64, 1, 1), 21)])
    feeds = {"x": _random((1, 32, size, size), 22)}
    (expected,), (actual,), session = _run_both(model, feeds, precision="bf16")
    assert cosine(actual, expected) >= BF16_MODEL_MIN_COSINE
    counts = _kernel_counts(session)  # blocked: the 1x1 convs through pair rows (or the expand fused, AMX aside)
    blocked_1x1 = (counts["conv_pointwise_nchwc_bf16"] + counts["conv_pointwise_pair_rows_bf16"]
                   + counts["conv_expand_depthwise_nchwc_bf16"])
    assert blocked_1x1 == (2 if blocked else 0), counts
    _, _, fp32_session = _run_both(model, feeds)
    fp32_counts = _kernel_counts(fp32_session)  # the expand runs fused with the depthwise conv
    assert fp32_counts["conv_pointwise_nchwc_f32"] == 1 and fp32_counts["conv_expand_depthwise_nchwc_f32"] == 1


@pytest.mark.usefixtures("vdpbf16ps_path")
@pytest.mark.parametrize("batch,threads", [(1, 2), (2, 1)])
def test_bf16_resnet18_runs_blocked_on_vdpbf16ps(batch, threads, monkeypatch):
    """ResNet-18-style under bf16 without AMX: its dense convs run conv2d_nchwc_bf16 on blocked tensors
    (blocked_layout.dense_bf16_direct; the 3 -> 64 stem its x-unfolded form from the NCHW input, dense_bf16_stem;
    stage 1's 3x3 convs fp32 blocked Winograd, winograd_over_bf16),
    the strided 1x1 projections the bf16 1x1 conv on the kept pixels, the stem pool maxpool_nchwc_f32, so the
    network is one run from the stem to the global pool: no reorder in, one out. Output cosine against ORT fp32 at
    the bf16 bar; with DENSE_BF16 off the NCHW bf16 kernels run the dense convs."""
    from ortx.ep.lowering import blocked_layout

    model = _models.resnet18_style(batch=batch, size=64, seed=11)
    feeds = {"input": _random((batch, 3, 64, 64), 12)}
    (expected,), (actual,), session = _run_both(model, feeds, threads, precision="bf16")
    assert cosine(actual, expected) >= BF16_MODEL_MIN_COSINE
    counts = _kernel_counts(session)
    # stage 1's four 64@16 3x3 convs run fp32 blocked Winograd (winograd_over_bf16), the other dense convs bf16
    assert counts["conv2d_winograd_nchwc_f32"] == 4 and counts["conv2d_nchwc_bf16"] == 13, counts
    assert counts["conv_pointwise_nchwc_bf16"] == 3, counts
    assert counts["strided_copy"] == 3 and counts["maxpool_nchwc_f32"] == 1, counts
    assert "conv2d_to_nchwc_f32" not in counts and "conv2d_bf16" not in counts, counts
    assert "reorder_to_nchwc_f32" not in counts and counts["reorder_from_nchwc_f32"] <= 1, counts
    monkeypatch.setattr(blocked_layout, "DENSE_BF16", False)
    (_,), (nchw,), nchw_session = _run_both(model, feeds, threads, precision="bf16")
    assert cosine(nchw, expected) >= BF16_MODEL_MIN_COSINE
    nchw_counts = _kernel_counts(nchw_session)
    assert "conv2d_nchwc_bf16" not in nchw_counts and nchw_counts["conv2d_bf16"] >= 16, nchw_counts


@pytest.mark.usefixtures("vdpbf16ps_path")
@pytest.mark.parametrize("size,rule,blocked", [(28, True, True), (40, True, False), (40, False, True)])
def test_bf16_dense_convs_run_blocked_only_on_small_maps(size, rule, blocked, monkeypatch):
    """Two 3x3 convs with a residual Add (a ResNet basic block) under bf16 without AMX: blocked (conv2d_nchwc_bf16)
    at 28x28 (784 pixels, BF16_SMALL_MAP_PIXELS), NCHW (conv2d_bf16) at 40x40 where the small-map rule applies (it
    weighs the dense convs' multiply-adds as the 1x1 convs'), blocked there too where it does not; within the bf16
    bar of ORT fp32 either way."""
    from ortx.ep.lowering import blocked_layout

    monkeypatch.setattr(blocked_layout, "BF16_SMALL_MAP_MAX_RATE", float("inf") if rule else 0.0)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="conv_a", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"], name="conv_a_relu"),
        helper.make_node("Conv", ["ar", "w2", "b2"], ["b"], name="conv_b", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b", "x"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["y"], name="out_relu"),
    ]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, size, size])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, size, size])],
                   [_weights("w1", (32, 32, 3, 3), 23), _bias("b1", 32, 24), _weights("w2", (32, 32, 3, 3), 25),
                    _bias("b2", 32, 26)])
    (expected,), (actual,), session = _run_both(model, {"x": _random((1, 32, size, size), 27)}, precision="bf16")
    assert cosine(actual, expected) >= BF16_MODEL_MIN_COSINE
    counts = _kernel_counts(session)
    assert (counts["conv2d_nchwc_bf16"], counts["conv2d_bf16"]) == ((2, 0) if blocked else (0, 2)), counts


def test_other_isas_keep_nchw():
    """Below AVX-512 the blocked kernels would be portable loops: NCHW kernels only."""
    model = _models.mobilenetv2_style(size=32, seed=5)
    feeds = {"input": _random((1, 3, 32, 32), 8)}
    previous = _kernels.selected_isa()
    try:
        _kernels.force_isa("avx2")
        (expected,), (actual,), session = _run_both(model, feeds)
        assert_close(actual, expected)
        assert not set(_kernel_counts(session)) & BLOCKED_KERNELS
    finally:
        _kernels.force_isa(previous)


@needs_avx512
def test_packaged_ppocr_cls_matches_onnxruntime_with_blocked_runs():
    """PP-OCR cls (MobileNetV3-style: SE blocks, HardSwish) on fresh random input: runs blocked, model bar."""
    import onnx

    from ortx.demo import packaged_model_path

    model = onnx.load(packaged_model_path("cls"))
    feeds = {model.graph.input[0].name: _random((1, 3, 48, 192), 9)}
    (expected, *_), (actual, *_), session = _run_both(model, feeds)
    assert cosine(actual, expected) >= MODEL_MIN_COSINE
    assert np.abs(actual - expected).max() <= MODEL_MAX_ABS_FRACTION * np.abs(expected).max()
    assert _kernel_counts(session)["conv2d_depthwise_nchwc_f32"] > 0
