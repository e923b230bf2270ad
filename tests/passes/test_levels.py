import onnx
import onnxruntime
import pytest

from ortx.model_io import to_ort_bytes
from ortx.optimize import optimize
from ortx.passes import DEFAULT_PASSES, LEVEL_1_PASSES, LEVEL_2_PASSES, LEVEL_3_PASSES
from tests import _models
from tests.passes._helpers import feeds_for, run_ort
from tests.tolerances import assert_model_close

SMALL = {"tiny_conv_relu": {}, "resnet18_style": {"size": 32}, "mobilenetv2_style": {"size": 32},
         "lstm_classifier": {}, "transformer_block": {}}


def test_levels_nest_and_default_is_level_2():
    assert DEFAULT_PASSES is LEVEL_2_PASSES
    assert set(LEVEL_1_PASSES) < set(LEVEL_2_PASSES) < set(LEVEL_3_PASSES)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_default_output_is_standard_onnx_that_plain_ort_runs(name):
    proto = _models.ALL_MODELS[name](**SMALL[name])
    optimized, reports = optimize(proto, check=True)
    assert {node.domain for node in optimized.graph.node} <= {"", "ai.onnx"}
    onnx.checker.check_model(optimized, full_check=True)
    onnxruntime.InferenceSession(to_ort_bytes(optimized), providers=["CPUExecutionProvider"])
    assert len(optimized.graph.node) <= len(proto.graph.node)
    feeds = feeds_for(proto)
    assert_model_close(run_ort(optimized, feeds)[0], run_ort(proto, feeds)[0])


def test_level_1_changes_no_arithmetic_and_level_3_emits_fused_conv():
    proto = _models.mobilenetv2_style(size=32)
    level_1, _ = optimize(proto, level=1)
    assert [n.op_type for n in level_1.graph.node] == [n.op_type for n in proto.graph.node]
    level_3, reports = optimize(proto, level=3)
    ops = [n.op_type for n in level_3.graph.node]
    assert "FusedConv" in ops and "BatchNormalization" not in ops
    assert reports[-1].name == "fuse_conv_epilogue" and reports[-1].counts["convs_fused"] == 45  # of 52: 7 Convs have no epilogue to take
    with pytest.raises(ValueError, match="level must be one of"):
        optimize(proto, level=4)
