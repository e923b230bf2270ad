"""Conv kernels (conv2d_f32, conv2d_depthwise_f32, conv_transpose2d_f32) and the Conv, FusedConv and ConvTranspose
lowerings: fast vs reference vs onnxruntime on one-node models.

Every case runs for each ISA this CPU has, with 1 and 2 threads; widths are chosen so vector tails (not multiples
of 8, 16 or 32 output columns) and GEMM edge tiles are exercised, and every result is bitwise repeatable.
FusedConv is checked against the explicit Conv -> Add -> activation graph in onnxruntime.
"""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortx import _kernels
from ortx.ep.compile_nodes import check_node, infer_shapes, run_graph
from tests.tolerances import assert_close

ISA_ORDER = ("portable", "avx2", "avx512")
RUNNABLE_ISAS = ISA_ORDER[: ISA_ORDER.index(_kernels.cpu_isa()) + 1]


@pytest.fixture(autouse=True)
def direct_kernels():
    """This module covers the direct conv kernels: 3x3 stride-1 convs stay off Winograd (test_conv_winograd.py)."""
    previous = _kernels.allow_winograd(False)
    yield
    _kernels.allow_winograd(previous)


def random(shape, seed, scale=1.0):
    x = (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)
    x[x == 0] = 0.5
    return x


def tensor(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def make_model(nodes, inputs, outputs, initializers, opset=17, extra_opsets=()):
    graph = helper.make_graph(nodes, "conv_test", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    model.ir_version = 10
    return model


def run_ort(model, feeds):
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def check_against(model, feeds, expected):
    assert_close(run_graph(model, feeds, use_reference_kernels=True)[0], expected, what="reference vs onnxruntime")
    for threads in (1, 2):
        fast = run_graph(model, feeds, num_threads=threads)[0]
        np.testing.assert_array_equal(fast, run_graph(model, feeds, num_threads=threads)[0],
                                      err_msg="not bitwise repeatable")
        assert_close(fast, expected, what=f"fast ({threads} threads) vs onnxruntime")


def conv_model(op_type, x_shape, w_shape, attributes, *, bias=True, seed=0):
    w = random(w_shape, seed + 1, scale=1.0 / np.sqrt(np.prod(w_shape[1:])))
    out_channels = w_shape[1] * attributes.get("group", 1) if op_type == "ConvTranspose" else w_shape[0]
    initializers = [numpy_helper.from_array(w, "w")]
    names = ["x", "w"]
    if bias:
        initializers.append(numpy_helper.from_array(random(out_channels, seed + 2), "b"))
        names.append("b")
    node = helper.make_node(op_type, names, ["y"], **attributes)
    return make_model([node], [tensor("x", x_shape)], [tensor("y", None)], initializers)


# (x shape, w shape, attributes): dense, strided, padded, dilated, grouped, 1x1, 1-D, auto_pad
CONV_CASES = [
    ((1, 3, 23, 29), (8, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 5, 17, 21), (13, 5, 3, 3), dict(strides=[2, 2], pads=[1, 0, 2, 1])),
    ((1, 7, 19, 25), (10, 7, 1, 1), dict()),
    ((1, 7, 19, 25), (10, 7, 1, 1), dict(strides=[2, 2])),
    ((1, 4, 20, 22), (6, 4, 3, 2), dict(dilations=[2, 3], pads=[2, 1, 1, 2])),
    ((1, 8, 15, 18), (12, 2, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),
    ((1, 3, 31, 33), (16, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    ((2, 6, 40), (9, 6, 5), dict(pads=[2, 1], strides=[2])),
    ((1, 3, 17, 20), (5, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ((1, 3, 17, 20), (5, 3, 4, 4), dict(auto_pad="SAME_LOWER")),
    # SAME with a kernel smaller than the stride: the pad ORT's formula needs is negative (9 rows, 2x2/3: -1),
    # and ORT pads by 0
    ((1, 8, 9, 11), (6, 8, 2, 2), dict(auto_pad="SAME_UPPER", strides=[3, 3])),
    ((1, 8, 11, 13), (6, 8, 1, 1), dict(auto_pad="SAME_LOWER", strides=[4, 5])),
    ((1, 3, 17, 20), (5, 3, 3, 3), dict(auto_pad="VALID", strides=[1, 2])),
    ((1, 300, 9, 11), (20, 300, 1, 1), dict()),
    ((1, 40, 12, 13), (70, 40, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 4, 40, 53), (7, 4, 3, 3), dict(pads=[1, 2, 0, 1])),  # > 1024 output pixels: several NC blocks
    ((1, 16, 40, 53), (24, 16, 3, 3), dict(pads=[1, 1, 1, 1])),  # > 2M multiply-adds: really split over 2 threads
    # B packed from phase planes (kernels/conv_planes.c): stride 3 (3 column phases), a kernel smaller than the
    # stride (phases no tap reads stay unfilled), dilation equal to the stride (every tap in one phase), outputs
    # narrower than a 16-pixel panel (a panel spans 2-3 output rows) and a stride (2, 1) 2x3 kernel
    ((1, 5, 40, 47), (9, 5, 3, 3), dict(strides=[3, 3], pads=[1, 2, 1, 0])),
    ((1, 6, 30, 35), (11, 6, 2, 2), dict(strides=[3, 3])),
    ((1, 4, 33, 70), (10, 4, 3, 3), dict(strides=[2, 2], dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 9, 11, 13), (14, 9, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 7, 9, 6), (20, 7, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 6, 31, 40), (19, 6, 2, 3), dict(strides=[2, 1], pads=[0, 1, 1, 1])),
]

# Dense convs on conv2d_f32's direct path (stride 1, <= 32 output channels per group (64 on CPUs with two FMA
# ports), K >= 64, few discarded columns; kernels/conv.c use_direct): row panels not multiples of 6, tiles that
# cross output rows and the last row, dilation, asymmetric pads, groups, batch 2, 5x5, and one case large enough
# to split over 2 threads.
DIRECT_CASES = [
    ((1, 12, 17, 30), (13, 12, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 8, 21, 40), (7, 8, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((2, 16, 15, 37), (10, 8, 3, 3), dict(group=2, pads=[0, 1, 2, 1])),
    ((1, 4, 18, 50), (32, 4, 5, 5), dict(pads=[2, 2, 2, 2])),
    ((1, 96, 20, 41), (24, 96, 3, 3), dict(pads=[1, 1, 1, 1])),
    # up to 64 output channels where the CPU has two FMA ports (the AVX-512 12 x 32 tile; elsewhere the packed
    # GEMM): a lone last panel of 4 rows after 5 groups of 12 with depth over two KC blocks, a last group of 10
    # rows (two panels, the second partial), and 55 per group (7 rows) with dilation and batch 2
    ((1, 40, 13, 45), (64, 40, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 16, 11, 19), (58, 16, 3, 3), dict(pads=[1, 0, 1, 2])),
    ((2, 24, 9, 30), (110, 12, 3, 3), dict(group=2, dilations=[2, 2], pads=[2, 2, 2, 2])),
]

# Dense convs run as conv2d_pixel_rows_f32 (few output pixels, many output channels; kernels/conv.c
# use_pixel_rows): pixel counts not multiples of 6, an odd number of 16-channel panels (a lone last panel next to
# the 6x32 tiles), channel counts not multiples of 16, stride, dilation, asymmetric pads, batch 2, strided and
# unstrided 1x1s, and depth over several KC blocks; the first is large enough to split over 2 threads.
PIXEL_ROWS_CASES = [
    ((1, 128, 10, 10), (64, 128, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 32, 9, 7), (272, 32, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 120, 15, 13), (88, 120, 3, 3), dict(strides=[2, 2], pads=[1, 0, 2, 1], dilations=[2, 1])),
    ((1, 300, 13, 11), (260, 300, 1, 1), dict(strides=[2, 2])),
    ((1, 300, 14, 12), (256, 300, 1, 1), dict(strides=[2, 2])),  # the last input row and column unused
    ((1, 320, 7, 7), (272, 320, 1, 1), dict()),
    # split over 2 threads, each filling and packing the pixels its tasks read (pixel_rows_stage): by columns (every
    # thread stages every pixel), by rows (bands with halo rows) and by both
    ((1, 256, 14, 14), (512, 256, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 128, 28, 28), (256, 128, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 128, 6, 10), (144, 128, 3, 3), dict(pads=[1, 1, 1, 1])),
]

# depthwise (group == Cin == Cout): 3x3 and 5x5, strides 1 and 2, dilation, asymmetric pads, odd widths
DEPTHWISE_CASES = [
    ((1, 16, 21, 45), (16, 1, 3, 3), dict(group=16, pads=[1, 1, 1, 1])),
    ((2, 5, 22, 37), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1], strides=[2, 2])),
    ((1, 6, 19, 70), (6, 1, 5, 5), dict(group=6, pads=[2, 2, 2, 2])),
    ((1, 6, 19, 70), (6, 1, 5, 5), dict(group=6, pads=[2, 2, 2, 2], strides=[2, 2])),
    ((1, 3, 20, 23), (3, 1, 3, 3), dict(group=3, dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 4, 13, 17), (4, 1, 2, 4), dict(group=4, pads=[0, 1, 1, 2], strides=[1, 3])),
    ((1, 4, 13, 17), (4, 1, 3, 3), dict(group=4, auto_pad="SAME_UPPER", strides=[2, 2])),
    ((1, 7, 40), (7, 1, 5), dict(group=7, pads=[2, 2])),
    ((1, 64, 60, 70), (64, 1, 3, 3), dict(group=64, pads=[1, 1, 1, 1])),  # large enough for 2 threads
    # conv2d_depthwise_f32's channel blocks (16 lanes AVX-512, 8 AVX2): a tail block of 3 channels, 7x7 planes
    # (16-pixel transposes across output rows), bands split over 2 threads and by the tile budget (300 columns)
    ((2, 35, 17, 29), (35, 1, 3, 3), dict(group=35, pads=[1, 1, 1, 1], strides=[2, 2])),
    ((1, 20, 7, 7), (20, 1, 3, 3), dict(group=20, pads=[1, 1, 1, 1])),
    ((1, 24, 23, 41), (24, 1, 5, 5), dict(group=24, pads=[2, 2, 2, 2], strides=[2, 2])),
    ((1, 17, 21, 33), (17, 1, 3, 3), dict(group=17, dilations=[2, 2], pads=[2, 1, 2, 3])),
    ((1, 24, 64, 70), (24, 1, 3, 3), dict(group=24, pads=[1, 1, 1, 1])),
    ((1, 16, 40, 300), (16, 1, 3, 3), dict(group=16, pads=[0, 1, 1, 0])),
    ((1, 8, 15, 17), (16, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1])),  # channel multiplier 2: grouped conv2d_f32
    # the in-plane form (3x3/1, one pad column each side, >= 16 columns): top/bottom pads 0 and 2, 4-row groups
    # with a remainder, widths 16 and 33 (a 1-column last vector)
    ((2, 5, 11, 33), (5, 1, 3, 3), dict(group=5, pads=[0, 1, 2, 1])),
    ((1, 3, 6, 16), (3, 1, 3, 3), dict(group=3, pads=[2, 1, 0, 1])),
    # in-plane at stride 2: no right pad column (the last input column is read), 20 and 17 output columns
    ((1, 20, 33, 40), (20, 1, 3, 3), dict(group=20, pads=[1, 1, 0, 0], strides=[2, 2])),
    ((2, 3, 9, 33), (3, 1, 3, 3), dict(group=3, pads=[0, 1, 2, 1], strides=[2, 2])),
]


# Grouped 1x1 convs with small groups (ShuffleNet's), which conv2d_f32 runs as tasks of (image, group, columns) on
# more than one thread (conv.c Case 1g): 6 -> 28 channels a group at 56x56, batch 2, 49 columns (one range), and 3
# groups on 2 threads (column ranges keep them even).
GROUPED_POINTWISE_CASES = [
    ((1, 24, 56, 56), (112, 6, 1, 1), dict(group=4)),
    ((2, 136, 28, 28), (136, 34, 1, 1), dict(group=4)),
    ((1, 544, 7, 7), (544, 136, 1, 1), dict(group=4)),
    ((1, 240, 14, 14), (240, 80, 1, 1), dict(group=3)),
]


@pytest.mark.parametrize("case", CONV_CASES + DIRECT_CASES + PIXEL_ROWS_CASES + DEPTHWISE_CASES
                         + GROUPED_POINTWISE_CASES, ids=lambda c: f"{c[0]}*{c[1]}:{c[2]}")
def test_conv_matches_onnxruntime(isa, case):
    x_shape, w_shape, attributes = case
    x = random(x_shape, 3)
    for bias in (True, False):
        model = conv_model("Conv", x_shape, w_shape, attributes, bias=bias)
        check_against(model, {"x": x}, run_ort(model, {"x": x}))


def test_depthwise_and_pointwise_use_their_fast_paths():
    """A 1x1 stride-1 unpadded conv of one image and group is one gemm_f32 on NCHW (weights as a raw A, so a tuned
    generated GEMM can take its place); batch 2, a group or a stride keep conv2d_f32."""
    from ortx.ep.compile_nodes import compile_graph
    depthwise = conv_model("Conv", (1, 8, 10, 10), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1]))
    dense = conv_model("Conv", (1, 8, 10, 10), (4, 8, 1, 1), dict())
    assert compile_graph(infer_shapes(depthwise).graph).program.kernel_names == ("conv2d_depthwise_f32",)
    program = compile_graph(infer_shapes(dense).graph)
    assert program.program.kernel_names == ("gemm_f32",)
    (step,) = program.steps
    assert list(step.ints[:11]) == [4, 100, 8, 1, 0, 8, 1, 0, 100, 1, 1], "M=Cout N=H*W K=Cin, raw A, B in place"
    for shape, weights, attributes in [((2, 8, 10, 10), (4, 8, 1, 1), {}), ((1, 8, 10, 10), (4, 4, 1, 1),
                                       dict(group=2)), ((1, 8, 10, 10), (4, 8, 1, 1), dict(strides=[2, 2]))]:
        model = conv_model("Conv", shape, weights, attributes)
        assert compile_graph(infer_shapes(model).graph).program.kernel_names == ("conv2d_f32",)


@pytest.mark.parametrize("case", GROUPED_POINTWISE_CASES, ids=lambda c: f"{c[0]}*{c[1]}:{c[2]}")
def test_grouped_pointwise_tasks_give_the_one_thread_bits(isa, case):
    """Case 1g's tasks (each a one-thread product of a column range) sum every output as the one-thread conv
    does: 1, 2 and 3 threads agree bitwise, with a residual and an activation."""
    x_shape, w_shape, attributes = case
    model = conv_model("Conv", x_shape, w_shape, attributes)
    y_shape = run_ort(model, {"x": random(x_shape, 8)}).shape
    nodes = [helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="ai.ortx", activation="Relu",
                              **attributes)]
    fused = make_model(nodes, [tensor("x", x_shape), tensor("z", y_shape)], [tensor("y", y_shape)],
                       list(model.graph.initializer), extra_opsets=[helper.make_opsetid("ai.ortx", 1)])
    feeds = {"x": random(x_shape, 9), "z": random(y_shape, 10)}
    one = run_graph(fused, feeds, num_threads=1)[0]
    for threads in (2, 3):
        np.testing.assert_array_equal(run_graph(fused, feeds, num_threads=threads)[0], one)


def test_depthwise_bits_do_not_depend_on_threads_or_vector_isa():
    """conv2d_depthwise_f32 computes every pixel in the same order whatever the band split, and AVX2 (tiles) and
    AVX-512 (these shapes: the in-plane form) run the same operations per output (conv_depthwise_avx512.c)."""
    for x_shape, w_shape, attributes in (DEPTHWISE_CASES[13], DEPTHWISE_CASES[18]):  # stride 1 and 2
        model = conv_model("Conv", x_shape, w_shape, attributes)
        feeds = {"x": random(x_shape, 7)}
        results = {}
        for isa in [name for name in RUNNABLE_ISAS if name != "portable"]:
            _kernels.force_isa(isa)
            try:
                results[isa] = [run_graph(model, feeds, num_threads=threads)[0] for threads in (1, 2)]
            finally:
                _kernels.force_isa(_kernels.cpu_isa())
            np.testing.assert_array_equal(results[isa][0], results[isa][1], err_msg=f"{isa}: 1 vs 2 threads")
        if len(results) == 2:
            np.testing.assert_array_equal(results["avx2"][0], results["avx512"][0], err_msg="avx2 vs avx512")


# The tiled form's row remainders (conv_depthwise_avx512.c runs a row's last OW % 8 pixels in one call of that
# width): OW = 9..15 without a left pad column (so not the in-plane form), 3x3 stride 1 and 5x5 stride 2
DEPTHWISE_REMAINDER_CASES = [((1, 19, 6, ow + 2), (19, 1, 3, 3), dict(group=19)) for ow in range(9, 16)] + [
    ((1, 16, 9, 2 * ow + 3), (16, 1, 5, 5), dict(group=16, strides=[2, 2])) for ow in range(9, 16)]


@pytest.mark.parametrize("case", DEPTHWISE_REMAINDER_CASES, ids=lambda c: f"{c[0]}*{c[1]}:{c[2]}")
def test_depthwise_row_remainders_match_onnxruntime_and_agree_across_isas(case):
    x_shape, w_shape, attributes = case
    model = conv_model("Conv", x_shape, w_shape, attributes)
    feeds = {"x": random(x_shape, 11)}
    expected = run_ort(model, feeds)
    results = {}
    for isa in [name for name in RUNNABLE_ISAS if name != "portable"]:
        _kernels.force_isa(isa)
        try:
            results[isa] = run_graph(model, feeds, num_threads=1)[0]
        finally:
            _kernels.force_isa(_kernels.cpu_isa())
        assert_close(results[isa], expected, what=f"{isa} vs onnxruntime")
    if len(results) == 2:
        np.testing.assert_array_equal(results["avx2"], results["avx512"], err_msg="avx2 vs avx512")


@pytest.mark.parametrize("case", PIXEL_ROWS_CASES, ids=lambda c: f"{c[0]}*{c[1]}:{c[2]}")
def test_few_pixel_many_channel_convs_run_as_pixel_rows(case):
    from ortx.ep.compile_nodes import compile_graph
    model = conv_model("Conv", *case)
    assert compile_graph(infer_shapes(model).graph).program.kernel_names == ("conv2d_pixel_rows_f32",)


def test_many_pixel_or_few_channel_convs_keep_channel_rows():
    from ortx.ep.compile_nodes import compile_graph
    many_pixels = conv_model("Conv", (1, 64, 56, 56), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1]))
    pointwise_14 = conv_model("Conv", (1, 384, 14, 14), (64, 384, 1, 1), dict())
    assert compile_graph(infer_shapes(many_pixels).graph).program.kernel_names == ("conv2d_f32",)
    assert compile_graph(infer_shapes(pointwise_14).graph).program.kernel_names == ("gemm_f32",)


# (activation, ONNX node factory for the explicit graph, activation_params)
FUSED_ACTIVATIONS = [
    (None, None, []),
    ("Relu", lambda i, o: [helper.make_node("Relu", [i], [o])], []),
    ("LeakyRelu", lambda i, o: [helper.make_node("LeakyRelu", [i], [o], alpha=0.2)], [0.2]),
    ("Clip", lambda i, o: [helper.make_node("Clip", [i, "clip_min", "clip_max"], [o])], [-0.5, 0.6]),
    ("Sigmoid", lambda i, o: [helper.make_node("Sigmoid", [i], [o])], []),
    ("HardSigmoid", lambda i, o: [helper.make_node("HardSigmoid", [i], [o], alpha=0.3, beta=0.45)], [0.3, 0.45]),
    ("HardSwish", lambda i, o: [helper.make_node("HardSwish", [i], [o])], []),
    ("Tanh", lambda i, o: [helper.make_node("Tanh", [i], [o])], []),
    ("HardSwishAffine", lambda i, o: [helper.make_node("HardSwish", [i], [i + "_hs"]),
                                      helper.make_node("Mul", [i + "_hs", "lab_scale"], [i + "_scaled"]),
                                      helper.make_node("Add", [i + "_scaled", "lab_shift"], [o])], [0.7, -0.3]),
]
# The constants the explicit forms read (Clip's bounds, HardSwishAffine's scale and shift).
EXPLICIT_CONSTANTS = [numpy_helper.from_array(np.float32(v), name) for name, v in
                      (("clip_min", -0.5), ("clip_max", 0.6), ("lab_scale", 0.7), ("lab_shift", -0.3))]


@pytest.mark.parametrize("activation,explicit,params", FUSED_ACTIVATIONS, ids=lambda v: str(v)[:12])
@pytest.mark.parametrize("case", [CONV_CASES[1], DIRECT_CASES[2], PIXEL_ROWS_CASES[2], DEPTHWISE_CASES[0],
                                  DEPTHWISE_CASES[9]],
                         ids=["dense", "direct", "pixel_rows", "depthwise", "depthwise_tail_block"])
def test_fused_conv_matches_conv_add_activation(isa, activation, explicit, params, case):
    x_shape, w_shape, attributes = case
    x = random(x_shape, 4)
    reference = conv_model("Conv", x_shape, w_shape, attributes)
    y_shape = run_ort(reference, {"x": x}).shape
    z = random(y_shape, 5)
    initializers = list(reference.graph.initializer) + EXPLICIT_CONSTANTS
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], **attributes),
             helper.make_node("Add", ["conv", "z"], ["sum" if explicit else "y"])]
    if explicit:
        nodes += explicit("sum", "y")
    inputs = [tensor("x", x_shape), tensor("z", y_shape)]
    explicit_model = make_model(nodes, inputs, [tensor("y", y_shape)], initializers)
    expected = run_ort(explicit_model, {"x": x, "z": z})
    fused_attributes = dict(attributes)
    if activation:
        fused_attributes["activation"] = activation
    if params:
        fused_attributes["activation_params"] = params
    fused = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="ai.ortx", **fused_attributes)
    fused_model = make_model([fused], inputs, [tensor("y", y_shape)], list(reference.graph.initializer),
                             extra_opsets=[helper.make_opsetid("ai.ortx", 1)])
    check_against(fused_model, {"x": x, "z": z}, expected)


@pytest.mark.parametrize("activation, explicit, params", FUSED_ACTIVATIONS,
                         ids=[a[0] or "none" for a in FUSED_ACTIVATIONS])
def test_pointwise_gemm_with_activation_matches_onnxruntime(isa, activation, explicit, params):
    """The 1x1 conv lowered to gemm_f32 (bias per row, FusedConv's residual and the activation in the epilogue), 437
    pixels and 21 channels (tails of every tile), with and without bias and residual."""
    from ortx.ep.compile_nodes import compile_graph
    x_shape, w_shape = (1, 24, 19, 23), (21, 24, 1, 1)
    x, z = random(x_shape, 8), random((1, 21, 19, 23), 9)
    for bias, residual in ((True, False), (False, False), (True, True), (False, True)):
        reference = conv_model("Conv", x_shape, w_shape, {}, bias=bias)
        initializers = list(reference.graph.initializer)
        names = ["x", "w", "b"] if bias else ["x", "w"]
        nodes = [helper.make_node("Conv", names, ["conv"])]
        nodes.append(helper.make_node("Add", ["conv", "z"], ["sum"]) if residual else
                     helper.make_node("Identity", ["conv"], ["sum"]))
        nodes += explicit("sum", "y") if explicit else [helper.make_node("Identity", ["sum"], ["y"])]
        clip = EXPLICIT_CONSTANTS
        inputs = [tensor("x", x_shape)] + ([tensor("z", z.shape)] if residual else [])
        feeds = {"x": x, "z": z} if residual else {"x": x}
        expected = run_ort(make_model(nodes, inputs, [tensor("y", None)], initializers + clip), feeds)
        attributes = {"activation": activation} if activation else {}
        if params:
            attributes["activation_params"] = params
        fused_inputs = (names if bias else names + [""]) + ["z"] if residual else names
        fused = helper.make_node("FusedConv", fused_inputs, ["y"], domain="ai.ortx", **attributes)
        model = make_model([fused], inputs, [tensor("y", expected.shape)], initializers,
                           extra_opsets=[helper.make_opsetid("ai.ortx", 1)])
        assert compile_graph(infer_shapes(model).graph).program.kernel_names == ("gemm_f32",)
        check_against(model, feeds, expected)


def test_fused_conv_without_bias_or_residual(isa):
    x_shape, w_shape, attributes = CONV_CASES[0]
    x = random(x_shape, 6)
    plain = conv_model("Conv", x_shape, w_shape, attributes, bias=False)
    expected = np.maximum(run_ort(plain, {"x": x}), 0)
    fused = helper.make_node("FusedConv", ["x", "w", "", ""], ["y"], domain="ai.ortx", activation="Relu",
                             **attributes)
    model = make_model([fused], [tensor("x", x_shape)], [tensor("y", expected.shape)],
                       list(plain.graph.initializer), extra_opsets=[helper.make_opsetid("ai.ortx", 1)])
    check_against(model, {"x": x}, expected)


# (x shape, w shape (Cin, Cout/g, kh, kw), attributes)
TRANSPOSE_CASES = [
    ((1, 8, 9, 11), (8, 5, 2, 2), dict(strides=[2, 2])),
    ((2, 6, 7, 10), (6, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ((1, 4, 8, 9), (4, 3, 3, 3), dict(pads=[1, 0, 2, 1], dilations=[2, 1])),
    ((1, 6, 7, 8), (6, 2, 3, 3), dict(group=3, strides=[2, 1], pads=[1, 1, 1, 1])),
    ((1, 4, 7, 9), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 4, 7, 9), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 4, 7, 9), (4, 3, 4, 4), dict(strides=[2, 2], output_shape=[15, 18])),
    ((1, 5, 30), (5, 3, 4), dict(strides=[2], pads=[1, 1])),
    ((1, 64, 24, 30), (64, 16, 2, 2), dict(strides=[2, 2])),  # large enough for 2 threads
    # kernel == stride (each output pixel one tap: Y assembled row by row from col blocks of input rows; with
    # KW == 2 on AVX-512 written straight from X, conv_transpose_avx512.c: channel blocks of 4, 16-pixel steps)
    ((1, 8, 70, 200), (8, 1, 2, 2), dict(strides=[2, 2])),  # one output channel: one block, split by rows
    ((1, 6, 5, 33), (6, 3, 2, 2), dict(strides=[2, 2], group=2)),  # groups, 3 channels of a block of 4, tail 1
    ((2, 5, 6, 17), (5, 7, 3, 2), dict(strides=[3, 2])),  # KH 3, KW 2; two images, 2 blocks (4 + 3)
    ((2, 8, 45, 190), (8, 9, 3, 3), dict(strides=[3, 3])),  # kernel 3: M 81, W 190: row blocks 17, 17, 11
]


@pytest.mark.parametrize("case", TRANSPOSE_CASES, ids=lambda c: f"{c[0]}*{c[1]}:{c[2]}")
def test_conv_transpose_matches_onnxruntime(isa, case):
    x_shape, w_shape, attributes = case
    x = random(x_shape, 7)
    model = conv_model("ConvTranspose", x_shape, w_shape, attributes)
    check_against(model, {"x": x}, run_ort(model, {"x": x}))


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid", "HardSwish"])
@pytest.mark.parametrize("case", [TRANSPOSE_CASES[2], TRANSPOSE_CASES[8], TRANSPOSE_CASES[11], TRANSPOSE_CASES[12]],
                         ids=["col2im_dilated", "tiling_kw2", "tiling_kh3_kw2", "tiling_kernel3"])
def test_fused_conv_transpose_matches_conv_transpose_then_activation(isa, case, activation):
    """ai.ortx FusedConvTranspose (fuse_conv_epilogue's ConvTranspose -> activation): the activation in the
    kernels' epilogue, on both of conv_transpose2d_f32's cases and the col2im scatter."""
    x_shape, w_shape, attributes = case
    x = random(x_shape, 7)
    reference = conv_model("ConvTranspose", x_shape, w_shape, attributes)
    explicit = conv_model("ConvTranspose", x_shape, w_shape, attributes)
    explicit.graph.node[0].output[0] = "t"
    explicit.graph.node.append(helper.make_node(activation, ["t"], ["y"]))
    expected = run_ort(explicit, {"x": x})
    fused = helper.make_node("FusedConvTranspose", ["x", "w", "b"], ["y"], domain="ai.ortx", activation=activation,
                             **attributes)
    model = make_model([fused], [tensor("x", x_shape)], [tensor("y", expected.shape)],
                       list(reference.graph.initializer), extra_opsets=[helper.make_opsetid("ai.ortx", 1)])
    check_against(model, {"x": x}, expected)


def test_checks_decline_what_the_lowering_cannot_run():
    weights_input = make_model([helper.make_node("Conv", ["x", "w"], ["y"])],
                               [tensor("x", (1, 3, 8, 8)), tensor("w", (4, 3, 3, 3))], [tensor("y", None)], [])
    assert "weights are not constant" in check_node(next(iter(infer_shapes(weights_input).graph)))
    conv3d = conv_model("Conv", (1, 2, 4, 5, 6), (3, 2, 1, 1, 1), dict())
    assert "rank 5 not supported" in check_node(next(iter(infer_shapes(conv3d).graph)))
    fused = helper.make_node("FusedConv", ["x", "w"], ["y"], domain="ai.ortx", activation="Gelu")
    model = make_model([fused], [tensor("x", (1, 3, 8, 8))], [tensor("y", (1, 3, 8, 8))],
                       [numpy_helper.from_array(random((3, 3, 1, 1), 1), "w")],
                       extra_opsets=[helper.make_opsetid("ai.ortx", 1)])
    assert "activation 'Gelu' not supported" in check_node(next(iter(infer_shapes(model).graph)))
    ok = conv_model("Conv", (1, 3, 8, 8), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]))
    assert check_node(next(iter(infer_shapes(ok).graph))) is None
