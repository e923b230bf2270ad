import numpy as np
import onnx
from onnx import helper, numpy_helper

from ortx.passes.fuse_gemm import fuse_gemm
from ortx.passes.infer_shapes import infer_shapes
from tests import _models
from tests.passes._helpers import feeds_for, op_types, run_ort, to_ir
from tests.tolerances import assert_close


def _linear_bn(rank: int = 2, *, affine: bool = True, bias_shape=(7,)) -> onnx.ModelProto:
    """X[3,5] (or [2,3,5]) -> MatMul W[5,7] -> Add b -> BatchNormalization -> Mul m -> Add a -> Y (7: odd width)."""
    builder = _models.GraphBuilder("linear_bn", 0)
    weight = builder.rng.standard_normal((5, 7)).astype(np.float32)
    bias = builder.rng.uniform(-0.5, 0.5, bias_shape).astype(np.float32)
    x = builder.node("Add", [builder.node("MatMul", ["X", builder.constant(weight, "w")]), builder.constant(bias, "b")])
    if affine:
        x = builder.batchnorm(x, 7)
        x = builder.node("Mul", [builder.constant(builder.rng.uniform(0.5, 2, 7).astype(np.float32), "m"), x])
        x = builder.node("Add", [x, builder.constant(builder.rng.uniform(-1, 1, (1, 7)).astype(np.float32), "a")])
    builder.nodes[-1].output[0] = "Y"
    shape = [3, 5] if rank == 2 else [2, 3, 5]
    return builder.finish([helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, shape[:-1] + [7])])


def _fused(proto):
    model = to_ir(proto)
    infer_shapes(model)
    return model, fuse_gemm(model)


def test_matmul_add_bn_mul_add_become_one_gemm():
    proto = _linear_bn()
    model, report = _fused(proto)
    assert op_types(model) == ["Gemm"]
    assert report.counts["gemms_formed"] == 1 and report.counts["affines_folded"] == 3
    assert len(model.graph.initializers) == 2  # the folded B and C; the originals were dropped
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_rank_3_matmul_add_and_non_column_bias_are_kept():
    model, report = _fused(_linear_bn(rank=3, affine=False))
    assert op_types(model) == ["MatMul", "Add"] and not report.modified
    assert "Gemm is 2-D only" in report.notes[0]
    model, report = _fused(_linear_bn(affine=False, bias_shape=(3, 7)))
    assert op_types(model) == ["MatMul", "Add"] and not report.modified
    assert "not [N], [1,N]" in report.notes[0]


def test_gemm_bn_on_resnet_head_and_transposed_weights():
    """resnet18_style ends in Flatten -> Gemm(transB=1); a BN after it folds into the transposed weights."""
    proto = _models.resnet18_style(size=32)
    builder_bn = _models.GraphBuilder("bn", 1)
    builder_bn.batchnorm("logits_pre", 1000)
    proto.graph.node[-1].output[0] = "logits_pre"
    bn = builder_bn.nodes[0]
    bn.output[0] = "logits"
    proto.graph.node.append(bn)
    proto.graph.initializer.extend(builder_bn.initializers)
    model, report = _fused(proto)
    assert op_types(model).count("BatchNormalization") == 20 and op_types(model)[-1] == "Gemm"
    assert report.counts["affines_folded"] == 1
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_idempotent():
    model, report = _fused(_linear_bn())
    assert report.modified
    assert not fuse_gemm(model).modified
