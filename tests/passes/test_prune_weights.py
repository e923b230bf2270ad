"""prune_weights: which entries become zero in each mode, what is skipped and why, idempotence, and that the
pruned model is the dense model with those weights zero (checked in ORT)."""
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from ortx.passes.prune_weights import prune_weights, weight_sparsity
from tests import _models
from tests.passes._helpers import feeds_for, op_types, run_ort, to_ir
from tests.tolerances import assert_close


def _conv_gemm(seed: int = 0) -> onnx.ModelProto:
    """X[1,8,6,6] -> Conv 3x3 (8 -> 16) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(16 -> 70), plus a tiny
    Conv branch (2 x 8 x 1 x 1 = 16 weights) that stays under min_elements."""
    builder = _models.GraphBuilder("conv_gemm", seed)
    conv = builder.conv("X", 8, 16, 3)
    pooled = builder.node("GlobalAveragePool", [builder.node("Relu", [conv])])
    builder.gemm(builder.node("Flatten", [pooled], axis=1), 16, 70)
    builder.nodes[-1].output[0] = "Y"
    builder.conv("X", 8, 2, 1)
    builder.nodes[-1].output[0] = "Z"
    return builder.finish([helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 8, 6, 6])],
                          [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1, 70]),
                           helper.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, [1, 2, 6, 6])])


def _weights(model):
    return {node.name: node.inputs[1].const_value.numpy() for node in model.graph
            if node.op_type in ("Conv", "Gemm")}


def test_per_layer_pruning_zeroes_each_layers_smallest_share_and_keeps_the_graph():
    proto = _conv_gemm()
    model = to_ir(proto)
    before = _weights(model)
    report = prune_weights(model, sparsity=0.75, min_elements=100)
    assert op_types(model) == op_types(proto)
    after = _weights(model)
    tiny = next(name for name, array in before.items() if array.size == 16)
    assert np.array_equal(after[tiny], before[tiny])
    assert any("under min_elements=100" in note and tiny in note for note in report.notes)
    zeroed = 0
    for name in before:
        if name == tiny:
            continue
        kept = after[name] != 0
        assert kept.sum() == before[name].size - int(np.ceil(0.75 * before[name].size))
        # every kept entry is at least as large as every pruned one
        assert np.abs(before[name][kept]).min() >= np.abs(before[name][~kept]).max()
        zeroed += int((~kept).sum())
    assert report.counts == {"weights_zeroed": zeroed, "layers_pruned": 2}
    # the pruned model is the dense model with those entries zero: ORT agrees
    masked = to_ir(proto)
    for node in masked.graph:
        if node.name in after:
            node.inputs[1].const_value = ir.Tensor(after[node.name], name=node.inputs[1].name)
    feeds = feeds_for(proto)
    for got, want in zip(run_ort(model, feeds), run_ort(masked, feeds)):
        assert_close(got, want)
    assert not prune_weights(model, sparsity=0.75, min_elements=100).modified  # idempotent


def test_global_scope_ranks_all_layers_together():
    model = to_ir(_conv_gemm())
    before = _weights(model)
    prune_weights(model, sparsity=0.5, scope="global", min_elements=100)
    after = _weights(model)
    names = [name for name, array in before.items() if array.size > 16]
    pruned = np.concatenate([np.abs(before[n][after[n] == 0]) for n in names])
    kept = np.concatenate([np.abs(before[n][after[n] != 0]) for n in names])
    assert pruned.max() <= kept.min()
    total = sum(before[n].size for n in names)
    assert pruned.size == int(np.ceil(0.5 * total))
    shares = [np.mean(after[n] == 0) for n in names]
    assert max(shares) - min(shares) > 0.01  # not the same share per layer
    assert not prune_weights(model, sparsity=0.5, scope="global", min_elements=100).modified


def test_two_of_four_keeps_the_two_largest_of_every_four_along_the_reduction_axis():
    model = to_ir(_conv_gemm())
    before = _weights(model)
    report = prune_weights(model, sparsity=0.5, structure="2:4", min_elements=100)
    after = _weights(model)
    conv = next(n for n in before if before[n].ndim == 4 and before[n].size > 16)
    rows = after[conv].reshape(16, -1).reshape(16, -1, 4)  # 8 * 3 * 3 = 72 = 18 groups of 4
    assert np.all((rows != 0).sum(axis=2) == 2)
    groups = np.abs(before[conv].reshape(16, -1, 4))
    assert np.all(np.sort(groups, axis=2)[:, :, 2:].sum(2) == pytest.approx(np.abs(rows).sum(2)))
    gemm = next(n for n in before if before[n].ndim == 2)
    # Gemm here has transB=1 ([70, 16]): groups run along axis 1
    assert np.all((after[gemm].reshape(70, 4, 4) != 0).sum(axis=2) == 2)
    assert report.counts["layers_pruned"] == 2
    assert not prune_weights(model, sparsity=0.5, structure="2:4", min_elements=100).modified


def test_does_not_fire_on_non_constant_or_excluded_weights_and_rejects_bad_options():
    proto = _conv_gemm()
    model = to_ir(proto)
    names = [node.name for node in model.graph if node.op_type in ("Conv", "Gemm")]
    report = prune_weights(model, sparsity=0.9, exclude=frozenset(names))
    assert not report.modified and sum("excluded" in note for note in report.notes) == 3
    text = onnx.parser.parse_model("""<ir_version: 10, opset_import: ["" : 17]>
        g (float[4, 64] a, float[64, 64] b) => (float[4, 64] y) { y = MatMul(a, b) }""")
    assert not prune_weights(to_ir(text), sparsity=0.9, min_elements=1).modified
    for options, message in (({"sparsity": 1.0}, "sparsity must be in"), ({"sparsity": 0.5, "scope": "all"}, "scope"),
                             ({"sparsity": 0.5, "structure": "4:2"}, "N:M with 0 < N < M")):
        with pytest.raises(ValueError, match=message):
            prune_weights(to_ir(proto), **options)


def test_weight_sparsity_reports_the_zero_share_per_layer():
    model = to_ir(_conv_gemm())
    prune_weights(model, sparsity=0.6, min_elements=100)
    shares = weight_sparsity(model)
    assert sorted(round(share, 2) for share in shares.values()) == [0.0, 0.6, 0.6]
