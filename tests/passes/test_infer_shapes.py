import onnx
import onnx_ir as ir
import pytest

from ortx.passes._report import PassError, run_passes
from ortx.passes.infer_shapes import infer_shapes
from tests import _models
from tests.passes._helpers import feeds_for, op_types, run_ort, to_ir
from tests.tolerances import assert_close


def _dynamic_conv_relu() -> onnx.ModelProto:
    proto = _models.tiny_conv_relu()
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[2].dim_param = "batch", "height"
    for dim in proto.graph.output[0].type.tensor_type.shape.dim:
        dim.ClearField("dim_value")
    return proto


def test_symbolic_dims_propagate_and_given_shapes_fix_them():
    model = to_ir(_dynamic_conv_relu())
    report = infer_shapes(model)
    conv = next(node for node in model.graph if node.op_type == "Conv")
    # onnx names dims it cannot compute symbolically (height after a padded Conv) unk__N: still not a number.
    dims = list(conv.outputs[0].shape)
    assert str(dims[0]) == "batch" and dims[1] == 4 and not isinstance(dims[2], int) and dims[3] == 8
    assert report.counts["dims_fixed"] == 0 and report.counts["values_shaped"] == 1

    proto = _dynamic_conv_relu()
    model = to_ir(proto)
    report = infer_shapes(model, input_shapes={"X": (2, 3, 8, 8)})
    assert op_types(model) == ["Conv", "Relu"]
    assert report.counts == {"dims_fixed": 2, "values_shaped": 1, "values_made_static": 2}
    assert all(tuple(node.outputs[0].shape) == (2, 4, 8, 8) for node in model.graph)
    feeds = {"X": feeds_for(_models.tiny_conv_relu(), seed=1)["X"].repeat(2, axis=0)}
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_contradicting_shapes_are_errors_naming_the_input():
    with pytest.raises(ValueError, match="input 'X' dim 1 is fixed at 3"):
        infer_shapes(to_ir(_dynamic_conv_relu()), input_shapes={"X": (1, 4, 8, 8)})
    with pytest.raises(ValueError, match="rank 4"):
        infer_shapes(to_ir(_dynamic_conv_relu()), input_shapes={"X": (1, 3)})
    with pytest.raises(PassError, match="'Y', which is not a graph input"):
        run_passes(to_ir(_dynamic_conv_relu()), [lambda m: infer_shapes(m, input_shapes={"Y": (1,)})])


def test_unknown_domain_is_left_unshaped_without_failing():
    proto = _models.tiny_conv_relu()
    proto.graph.node[1].domain = "com.example"
    proto.opset_import.append(onnx.helper.make_opsetid("com.example", 1))
    model = to_ir(proto)
    report = infer_shapes(model)
    assert next(iter(model.graph)).outputs[0].shape is not None
    assert report.counts["dims_fixed"] == 0


def test_idempotent():
    model = to_ir(_dynamic_conv_relu())
    assert infer_shapes(model, input_shapes={"X": (1, 3, 8, 8)}).modified
    assert not infer_shapes(model, input_shapes={"X": (1, 3, 8, 8)}).modified


def test_sequence_outputs_keep_their_sequence_types():
    """onnx_ir's merge would set a SplitToSequence output's type to its element's tensor type, which ORT rejects;
    tensor values beside it are still shaped."""
    proto = onnx.parser.parse_model("""
    <ir_version: 7, opset_import: ["" : 12]>
    agraph (float[6,3] X, int64[2] splits) => (int64 length, float[6,3] Y) {
        pieces = SplitToSequence (X, splits)
        length = SequenceLength (pieces)
        Y = Relu (X)
    }""")
    model = to_ir(proto)
    infer_shapes(model)
    split, _, relu = model.graph
    assert isinstance(split.outputs[0].type, ir.SequenceType) or split.outputs[0].type is None
    assert relu.outputs[0].shape == ir.Shape([6, 3])
    onnx.checker.check_model(ir.serde.serialize_model(model), full_check=True)


@pytest.mark.parametrize("op_type,attributes,expected", [
    # the last window would start at pixel 13 of 13 (in the end padding): ORT drops it, onnx (opset 13) keeps it
    ("MaxPool", "kernel_shape = [2, 2], strides = [2, 2], pads = [1, 1, 1, 1], ceil_mode = 1", 7),
    ("AveragePool", "kernel_shape = [2, 2], strides = [2, 2], pads = [1, 1, 1, 1], ceil_mode = 1", 7),
    # rules agree: nothing to correct
    ("MaxPool", "kernel_shape = [3, 3], strides = [2, 2], ceil_mode = 1", 6),
])
def test_ceil_mode_pools_get_onnxruntimes_output_size_downstream_too(op_type, attributes, expected):
    """onnx's inference for the pools before opset 22 ignores ORT's rule that a ceil_mode window must start inside
    the input or the begin padding; the corrected shape reaches the Relu after it."""
    from tests.passes._helpers import from_text

    proto = from_text(f"""
    <ir_version: 9, opset_import: ["" : 13]>
    agraph (float[1,2,13,13] X) => (float[1,2,?,?] Y) {{
        pooled = {op_type} <{attributes}> (X)
        Y = Relu (pooled)
    }}""")
    model = to_ir(proto)
    infer_shapes(model)
    shapes = [tuple(node.outputs[0].shape) for node in model.graph]
    assert shapes == [(1, 2, expected, expected)] * 2
    feeds = feeds_for(proto)
    assert run_ort(proto, feeds)[0].shape == (1, 2, expected, expected)
