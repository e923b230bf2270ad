"""Layout kernels and lowerings: one-node (and a few small multi-node) models through run_graph, compared with
onnxruntime and with the reference kernels, for each ISA this CPU has, 1 and 2 threads.

Data movement must be exact: outputs are compared bitwise (NaN-free inputs), linear Resize with the float32
tolerance. Declined configurations are checked for their reasons.
"""
from __future__ import annotations

import itertools

import numpy as np
import onnxruntime
import pytest
from onnx import helper, numpy_helper

from ortx import _kernels
from ortx.ep.compile_nodes import check_node, infer_shapes, run_graph
from tests.tolerances import assert_close

TENSOR_TYPES = {np.dtype(t): helper.np_dtype_to_tensor_dtype(np.dtype(t))
                for t in (np.float32, np.float16, np.int64, np.int32, np.uint8, np.int8, np.float64, np.bool_)}
TENSOR_TYPES[np.dtype(object)] = helper.np_dtype_to_tensor_dtype(np.dtype(object))


def build(nodes, inputs, *, initializers=None, outputs=("y",), output_dtypes=None, opset=13):
    """A model over `nodes`: graph inputs from `inputs` (name -> array), constant initializers, named outputs."""
    initializers = initializers or {}
    first_dtype = np.asarray(next(iter(inputs.values()))).dtype
    output_dtypes = output_dtypes or [first_dtype] * len(outputs)
    graph = helper.make_graph(
        nodes, "layout_case",
        [helper.make_tensor_value_info(name, TENSOR_TYPES[np.asarray(a).dtype], np.shape(a))
         for name, a in inputs.items()],
        [helper.make_tensor_value_info(name, TENSOR_TYPES[np.dtype(d)], None)
         for name, d in zip(outputs, output_dtypes)],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def run_everywhere(model, feeds, *, exact=True):
    """onnxruntime vs reference kernels vs fast kernels (1 and 2 threads, each twice for repeatability)."""
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    compare = np.testing.assert_array_equal if exact else assert_close
    reference = run_graph(model, feeds, use_reference_kernels=True)
    for got, want in zip(reference, expected):
        compare(got, want)
    for threads in (1, 2):
        first = run_graph(model, feeds, num_threads=threads)
        second = run_graph(model, feeds, num_threads=threads)
        for got, again, want in zip(first, second, expected):
            np.testing.assert_array_equal(got, again, err_msg="not bitwise repeatable")
            compare(got, want)
    return expected


def data(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        x[x == 0] = 1
        return x
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape).astype(dtype)


def reason_of(model, index=0):
    return check_node(infer_shapes(model).graph.node(index))


# Transpose ------------------------------------------------------------------------------------------------
TRANSPOSE_CASES = [
    ((67, 131), (1, 0), np.float32),
    ((2, 16, 9, 13), (0, 2, 3, 1), np.float32),   # NCHW -> NHWC
    ((2, 9, 13, 16), (0, 3, 1, 2), np.float16),   # NHWC -> NCHW
    ((3, 4, 5, 6), (1, 0, 2, 3), np.int64),       # trailing dims unchanged: memcpy runs
    ((2, 3, 4, 5, 6, 7), (5, 3, 1, 4, 0, 2), np.uint8),
    ((2, 3, 4, 5, 2, 3), (0, 1, 3, 2, 5, 4), np.float32),
    ((40, 1, 33), (2, 1, 0), np.int8),
    ((1, 3, 1, 5), None, np.float32),             # default perm: reversed
    ((5, 37, 70), (0, 2, 1), np.float64),
]


@pytest.mark.parametrize("shape,perm,dtype", TRANSPOSE_CASES)
def test_transpose(isa, shape, perm, dtype):
    attributes = {} if perm is None else {"perm": list(perm)}
    model = build([helper.make_node("Transpose", ["x"], ["y"], **attributes)], {"x": data(shape, dtype)})
    run_everywhere(model, {"x": data(shape, dtype)})


def test_transpose_random_perms(isa):
    rng = np.random.default_rng(5)
    for rank in range(1, 7):
        shape = tuple(int(d) for d in rng.integers(1, 6, size=rank))
        perm = [int(p) for p in rng.permutation(rank)]
        x = data(shape, np.float32, seed=rank)
        model = build([helper.make_node("Transpose", ["x"], ["y"], perm=perm)], {"x": x})
        run_everywhere(model, {"x": x})


# Concat / Split -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concat(isa, axis):
    shapes = [[2, 3, 5], [2, 3, 5], [2, 3, 5]]
    for i, shape in enumerate(shapes):
        shape[axis] += i
    feeds = {"a": data(shapes[0], seed=1), "b": data(shapes[1], seed=2)}
    model = build([helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=axis)], feeds,
                  initializers={"c": data(shapes[2], seed=3)})
    run_everywhere(model, feeds)


def test_concat_many_int32_inputs(isa):
    feeds = {f"x{i}": data((3, i + 1, 4), np.int32, seed=i) for i in range(20)}  # more than 16 step buffers
    model = build([helper.make_node("Concat", list(feeds), ["y"], axis=1)], feeds)
    run_everywhere(model, feeds)


@pytest.mark.parametrize("opset,axis,split,num_outputs", [
    (11, 1, [2, 3, 4], None),      # split attribute
    (13, -1, [1, 5, 1], None),     # split input
    (13, 0, None, None),           # equal split into the output count
    (18, 2, None, 3),              # num_outputs, uneven (7 -> 3, 3, 1)
])
def test_split(isa, opset, axis, split, num_outputs):
    x = data((6, 9, 7), np.float32)
    count = num_outputs or (len(split) if split else 3)
    outputs = [f"y{i}" for i in range(count)]
    inputs, attributes, initializers = ["x"], {"axis": axis}, {}
    if split and opset < 13:
        attributes["split"] = split
    elif split:
        inputs.append("split")
        initializers["split"] = np.array(split, np.int64)
    if num_outputs:
        attributes["num_outputs"] = num_outputs
    model = build([helper.make_node("Split", inputs, outputs, **attributes)], {"x": x},
                  initializers=initializers, outputs=outputs, opset=opset)
    run_everywhere(model, {"x": x})


# Slice ----------------------------------------------------------------------------------------------------
SLICE_CASES = [
    ([1, 0], [5, 100], [0, 2], [1, 1]),
    ([-3, 2], [-1, -2], [1, -1], [1, 1]),
    ([10, -1], [-100, 0], [0, 2], [-2, -3]),      # negative steps, clamped starts
    ([0], [2 ** 63 - 1], [-2], [3]),
    ([4, 1, 0], [0, 100, 3], [0, 1, 2], [-1, 2, 1]),
    ([3], [1], [0], [1]),                         # empty result
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICE_CASES)
def test_slice_inputs(isa, starts, ends, axes, steps):
    x = data((7, 11, 9), np.int64)
    initializers = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64),
                    "axes": np.array(axes, np.int64), "steps": np.array(steps, np.int64)}
    model = build([helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])], {"x": x},
                  initializers=initializers)
    run_everywhere(model, {"x": x})


def test_slice_opset1_attributes(isa):
    x = data((5, 8, 6), np.float32)
    model = build([helper.make_node("Slice", ["x"], ["y"], starts=[1, -5], ends=[4, 1000], axes=[0, 2])],
                  {"x": x}, opset=9)
    run_everywhere(model, {"x": x})


# Gather ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_gather_runtime_indices(isa, axis, index_dtype):
    x = data((5, 6, 7), np.float32)
    dim = x.shape[axis]
    indices = np.array([[0, -1, 2], [dim - 1, -dim, 1]], index_dtype)
    feeds = {"x": x, "i": indices}
    model = build([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)], feeds)
    run_everywhere(model, feeds)


def test_gather_constant_scalar_index(isa):
    x = data((4, 10, 3), np.uint8)
    model = build([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], {"x": x},
                  initializers={"i": np.array(-3, np.int64)})
    run_everywhere(model, {"x": x})


# Pad ------------------------------------------------------------------------------------------------------
PAD_CASES = [
    (13, "constant", [1, 0, 2, 3, 0, 1, 1, 2], 1.5, None),
    (13, "reflect", [0, 1, 2, 3, 0, 2, 1, 2], None, None),
    (13, "edge", [0, 2, 4, 1, 1, 0, 3, 2], None, None),
    (13, "constant", [0, -1, 2, -2, 0, 1, -3, 2], -2.0, None),  # negative pads crop
    (18, "reflect", [2, 3, 1, 2], None, [-1, 2]),              # axes input
    (19, "wrap", [0, 1, 2, 3, 0, 2, 3, 1], None, None),
]


@pytest.mark.parametrize("opset,mode,pads,value,axes", PAD_CASES)
def test_pad(isa, opset, mode, pads, value, axes):
    x = data((2, 3, 5, 6), np.float32)
    inputs = ["x", "pads", "value" if value is not None else "", "axes" if axes else ""]
    initializers = {"pads": np.array(pads, np.int64)}
    if value is not None:
        initializers["value"] = np.array(value, np.float32)
    if axes:
        initializers["axes"] = np.array(axes, np.int64)
    while inputs[-1] == "":
        inputs.pop()
    model = build([helper.make_node("Pad", inputs, ["y"], mode=mode)], {"x": x}, initializers=initializers,
                  opset=opset)
    run_everywhere(model, {"x": x})


def test_pad_opset2_attributes_int64(isa):
    x = data((3, 4, 5), np.float32)
    model = build([helper.make_node("Pad", ["x"], ["y"], pads=[1, 0, 2, 0, 3, 1], value=-7.0)], {"x": x}, opset=2)
    run_everywhere(model, {"x": x})
    xi = data((3, 4, 5), np.int64)
    model = build([helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode="edge")], {"x": xi},
                  initializers={"pads": np.array([1, 0, 2, 0, 3, 1], np.int64), "value": np.array(0, np.int64)})
    run_everywhere(model, {"x": xi})


# Expand / Tile / DepthToSpace / SpaceToDepth --------------------------------------------------------------
def test_expand_and_tile(isa):
    x = data((3, 1, 5), np.float32)
    model = build([helper.make_node("Expand", ["x", "shape"], ["y"])], {"x": x},
                  initializers={"shape": np.array([2, 1, 4, 5], np.int64)})
    run_everywhere(model, {"x": x})
    xi = data((2, 3, 4), np.int32)
    model = build([helper.make_node("Tile", ["x", "repeats"], ["y"])], {"x": xi},
                  initializers={"repeats": np.array([2, 1, 3], np.int64)})
    run_everywhere(model, {"x": xi})


@pytest.mark.parametrize("op_type,mode", [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"), ("SpaceToDepth", None)])
def test_depth_space(isa, op_type, mode):
    shape = (2, 12, 3, 5) if op_type == "DepthToSpace" else (2, 3, 6, 10)
    x = data(shape, np.float32)
    attributes = {"blocksize": 2}
    if mode:
        attributes["mode"] = mode
    model = build([helper.make_node(op_type, ["x"], ["y"], **attributes)], {"x": x})
    run_everywhere(model, {"x": x})


# Resize ---------------------------------------------------------------------------------------------------
def resize_model(x, opset, *, scales=None, sizes=None, **attributes):
    initializers, inputs = {}, ["x"]
    if opset == 10:
        inputs.append("scales")
        initializers["scales"] = np.array(scales, np.float32)
    else:
        # opsets 11-12 need roi and scales present (empty tensors when unused)
        empty = np.zeros(0, np.float32)
        inputs.append("roi" if opset < 13 else "")
        if opset < 13:
            initializers["roi"] = empty
        if scales is not None:
            inputs.append("scales")
            initializers["scales"] = np.array(scales, np.float32)
        else:
            inputs += ["scales" if opset < 13 else "", "sizes"]
            if opset < 13:
                initializers["scales"] = empty
            initializers["sizes"] = np.array(sizes, np.int64)
    return build([helper.make_node("Resize", inputs, ["y"], **attributes)], {"x": x},
                 initializers=initializers, opset=opset)


@pytest.mark.parametrize("factor,width", [(2, 13), (2, 40), (4, 9), (8, 5), (3, 11)])
def test_resize_ppocr_nearest_upsampling(isa, factor, width):
    """PP-OCRv4 det's Resize: opset 11, nearest, asymmetric, floor, scales [1, 1, f, f]."""
    x = data((1, 3, 6, width), np.float32)
    model = resize_model(x, 11, scales=[1, 1, factor, factor], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    run_everywhere(model, {"x": x})


TRANSFORMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_resize_nearest_modes(isa, transform):
    x = data((2, 3, 7, 9), np.float32)
    for nearest_mode, (scales, sizes) in itertools.product(
            NEAREST_MODES, [([1, 1, 1.7, 0.6], None), (None, [2, 3, 13, 4]), ([1, 1, 3.0, 2.0], None)]):
        model = resize_model(x, 13, scales=scales, sizes=sizes, mode="nearest",
                             coordinate_transformation_mode=transform, nearest_mode=nearest_mode)
        run_everywhere(model, {"x": x})


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("scales,sizes", [([1, 1, 2.0, 2.0], None), ([1, 1, 0.6, 1.5], None),
                                          (None, [1, 2, 11, 5]), ([1, 1, 1.0, 2.5], None)])
def test_resize_linear(isa, transform, scales, sizes):
    x = data((1, 2, 7, 9), np.float32)
    model = resize_model(x, 13, scales=scales, sizes=sizes, mode="linear", coordinate_transformation_mode=transform)
    run_everywhere(model, {"x": x}, exact=False)


def test_resize_other_opsets_and_dtypes(isa):
    x = data((1, 2, 6, 10), np.float32)
    for scales in ([1, 1, 2.0, 3.0], [1, 1, 0.5, 0.6]):
        run_everywhere(resize_model(x, 10, scales=scales, mode="nearest"), {"x": x})
    xu = data((1, 3, 5, 17), np.uint8)
    run_everywhere(resize_model(xu, 11, scales=[1, 1, 2, 2], mode="nearest"), {"x": xu})
    x3 = data((2, 5, 7), np.float32)  # nearest on every axis of a rank-3 tensor
    run_everywhere(resize_model(x3, 13, scales=[2.0, 0.5, 1.5], mode="nearest"), {"x": x3})
    model = build([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], axes=[3, 2], mode="linear")],
                  {"x": x}, initializers={"sizes": np.array([7, 9], np.int64)}, opset=18)
    run_everywhere(model, {"x": x}, exact=False)
    model = resize_model(x, 19, scales=[1, 1, 1.6, 0.6], mode="linear",
                         coordinate_transformation_mode="half_pixel_symmetric")
    run_everywhere(model, {"x": x}, exact=False)


# Aliases --------------------------------------------------------------------------------------------------
def test_aliases_inside_and_at_the_boundary(isa):
    x = data((2, 3, 4, 5), np.float32)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["t", "shape"], ["r"]),                 # 0 and -1 in the shape
        helper.make_node("Unsqueeze", ["r", "axes"], ["u"]),
        helper.make_node("Squeeze", ["u", "axes"], ["s"]),
        helper.make_node("Identity", ["s"], ["i"]),
        helper.make_node("Dropout", ["i", "ratio", "training"], ["d"]),
        helper.make_node("Flatten", ["d"], ["f"], axis=2),
        helper.make_node("Transpose", ["f"], ["y"], perm=[1, 0]),
        helper.make_node("Reshape", ["x", "flat"], ["y2"]),                 # graph input -> graph output: copy
    ]
    initializers = {"shape": np.array([0, -1, 5], np.int64), "axes": np.array([1, -1], np.int64),
                    "ratio": np.array(0.3, np.float32), "training": np.array(False),
                    "flat": np.array([-1], np.int64)}
    model = build(nodes, {"x": x}, initializers=initializers, outputs=("y", "y2"))
    run_everywhere(model, {"x": x})


def test_alias_opset11_attributes_and_allowzero(isa):
    x = data((3, 1, 4), np.float32)
    nodes = [helper.make_node("Squeeze", ["x"], ["s"], axes=[1]),
             helper.make_node("Unsqueeze", ["s"], ["u"], axes=[0]),
             helper.make_node("Dropout", ["u"], ["y"], ratio=0.5)]
    run_everywhere(build(nodes, {"x": x}, opset=11), {"x": x})
    model = build([helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)], {"x": x},
                  initializers={"shape": np.array([4, 3], np.int64)}, opset=14)
    run_everywhere(model, {"x": x})


# Declined configurations ----------------------------------------------------------------------------------
def test_declined_configurations_have_reasons():
    x = data((1, 2, 4, 4), np.float32)
    cases = [
        (resize_model(x, 13, scales=[1, 1, 2, 2], mode="cubic"), "mode 'cubic' not supported"),
        (resize_model(data((1, 2, 6, 10)), 13, scales=[1, 1, 1, 0.7], mode="nearest"), "differs from the inferred"),
        (resize_model(x, 11, scales=[1, 1, 2, 2], coordinate_transformation_mode="tf_half_pixel_for_nearest"),
         "tf_half_pixel_for_nearest"),
        (resize_model(x, 13, scales=[1, 1, 2, 2], mode="nearest",
                      coordinate_transformation_mode="tf_crop_and_resize"), "tf_crop_and_resize"),
        (resize_model(x, 13, scales=[1, 2, 2, 2], mode="linear"), "linear mode only over the last two axes"),
        (resize_model(data((1, 2, 4, 4), np.uint8), 13, scales=[1, 1, 2, 2], mode="linear"), "float32 only"),
        (build([helper.make_node("Resize", ["x", "", "s"], ["y"])], {"x": x, "s": np.ones(4, np.float32)}),
         "input 2 must be a constant"),
        (build([helper.make_node("Dropout", ["x", "r", "t"], ["y"])], {"x": x},
               initializers={"r": np.array(0.5, np.float32), "t": np.array(True)}), "training_mode"),
        (build([helper.make_node("Dropout", ["x"], ["y", "mask"])], {"x": x}, outputs=("y", "mask"),
               output_dtypes=[np.float32, np.bool_]), "mask output"),
        (build([helper.make_node("Gather", ["x", "i"], ["y"])], {"x": x}, initializers={"i": np.array([3])}),
         "out of range"),
        (build([helper.make_node("Slice", ["x", "s", "e"], ["y"])], {"x": x, "s": np.array([0])},
               initializers={"e": np.array([1])}), "must be a constant"),
        (build([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], {"x": x},
               initializers={"p": np.array([0, 0, 4, 0, 0, 0, 0, 0])}), "reflect pads must be smaller"),
        (build([helper.make_node("Transpose", ["x"], ["y"])], {"x": np.array(["a"], dtype=object)}), "dtype"),
    ]
    for model, fragment in cases:
        reason = reason_of(model)
        assert reason is not None and fragment in reason, (fragment, reason)


def test_direct_kernel_calls_match_reference(isa):
    """Kernel ABI directly: strided views with zero and negative strides, every element size."""
    rng = np.random.default_rng(9)
    for elem, dtype in ((1, np.uint8), (2, np.float16), (4, np.float32), (8, np.int64)):
        src = rng.integers(0, 100, size=600).astype(dtype)
        for shape, strides, offset in (([4, 5, 6], [0, -6, 1], 24), ([3, 7, 5], [1, 15, 3], 0),
                                       ([6, 9], [-2, 50], 150), ([2, 3, 33], [100, 1, 3], 0)):
            ints = [elem, len(shape), *shape, *strides, offset]
            fast = np.zeros(shape, dtype)
            ref = np.ones(shape, dtype)
            _kernels.call("strided_copy", ints, [], [src, fast], num_threads=2)
            _kernels.call("strided_copy", ints, [], [src, ref], use_ref=True)
            np.testing.assert_array_equal(fast, ref)
            view = np.lib.stride_tricks.as_strided(src[offset:], shape, [s * elem for s in strides])
            np.testing.assert_array_equal(fast, view)
