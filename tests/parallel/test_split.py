"""ortx.pipeline.split: stage models are valid ONNX, chain back to the model's outputs, bad requests fail clearly."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime
import pytest

import ortx.pipeline
from ortx.model_io import ort_max_ir_version, to_ort_bytes
from ortx.parallel import PipelinePlan
from tests import _models
from tests.tolerances import assert_close


def _chain(plan: PipelinePlan, feeds: dict) -> dict:
    """Runs the stage models one after another in plain ORT, the way `run` moves tensors between them."""
    boundary = dict(feeds)
    for stage in plan.stages:
        session = onnxruntime.InferenceSession(to_ort_bytes(stage.model), providers=["CPUExecutionProvider"])
        results = dict(zip(stage.outputs, session.run(list(stage.outputs), {n: boundary[n] for n in stage.inputs})))
        results.update({name: boundary[name] for name in plan.passing_through(stage.index)})
        assert set(results) == set(plan.boundaries[stage.index + 1].names)
        boundary = results
    return boundary


def _reference(model: onnx.ModelProto, feeds: dict) -> dict:
    session = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
    return dict(zip([out.name for out in session.get_outputs()], session.run(None, feeds)))


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {value.name: rng.uniform(-1, 1, [d.dim_value for d in value.type.tensor_type.shape.dim]).astype(np.float32)
            for value in model.graph.input}


def _check_invariants(plan: PipelinePlan, stages: int) -> None:
    assert len(plan.stages) == stages and len(plan.boundaries) == stages + 1
    for stage in plan.stages:
        onnx.checker.check_model(stage.model, full_check=True)
        assert stage.model.ir_version <= ort_max_ir_version()
        initializers = {tensor.name for tensor in stage.model.graph.initializer}
        assert set(stage.inputs) <= set(plan.boundaries[stage.index].names)
        after = set(plan.boundaries[stage.index + 1].names)
        assert set(stage.outputs) | set(plan.passing_through(stage.index)) == after
        assert not initializers & set(plan.boundaries[stage.index + 1].names), "a constant crossed a cut"
    assert sum(len(stage.nodes) for stage in plan.stages) <= plan.max_stages


@pytest.mark.parametrize("stages", [3])  # 2 stages: the transformer tests below
def test_resnet_stages_chain_to_the_model_outputs(stages):
    model = _models.resnet18_style(size=32)
    plan = ortx.pipeline.split(model, stages=stages)
    _check_invariants(plan, stages)
    assert plan.cost_source.startswith("estimated")
    feeds = _feeds(model)
    got, expected = _chain(plan, feeds), _reference(model, feeds)
    assert_close(got["logits"], expected["logits"], what="logits")


def test_tensors_pass_through_a_stage_that_does_not_read_them():
    # The residual X feeds the first Add, and the attention block's sum feeds the last Add: in 4 stages some cut
    # carries a tensor past a stage (passing_through), and the chain must still reproduce Y.
    model = _models.transformer_block()
    plan = ortx.pipeline.split(model, stages=4, balance_slack=0.0)
    _check_invariants(plan, 4)
    assert any(plan.passing_through(index) for index in range(3))
    feeds = _feeds(model, seed=1)
    assert_close(_chain(plan, feeds)["Y"], _reference(model, feeds)["Y"], what="Y")


def test_measured_costs_with_sample_inputs():
    model = _models.resnet18_style(size=32)
    plan = ortx.pipeline.split(model, stages=2, sample_inputs=_feeds(model))
    assert plan.cost_source.startswith("measured")
    assert all(stage.cost_seconds > 0 for stage in plan.stages)
    assert "cut 0|1" in plan.describe()


def test_one_stage_is_the_model_itself():
    model = _models.transformer_block()
    plan = ortx.pipeline.split(model, stages=1)
    assert [node.op_type for node in plan.stages[0].model.graph.node] == [node.op_type for node in model.graph.node]
    assert plan.inputs.names == ("X",) and plan.outputs.names == ("Y",)


def test_too_many_stages_says_the_maximum():
    model = _models.tiny_conv_relu()
    with pytest.raises(ValueError, match=r"stages=5 but this graph allows at most 2"):
        ortx.pipeline.split(model, stages=5)
    with pytest.raises(ValueError, match="positive integer"):
        ortx.pipeline.split(model, stages=0)


def test_dynamic_input_needs_shapes():
    model = _models.tiny_conv_relu()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(ValueError, match="model input 'X' has dynamic dims"):
        ortx.pipeline.split(model, stages=2)
    plan = ortx.pipeline.split(model, stages=2, input_shapes={"X": (2, 3, 8, 8)})
    assert plan.inputs.tensors[0].shape == (2, 3, 8, 8)


def test_save_writes_loadable_stages_and_the_plan(tmp_path):
    plan = ortx.pipeline.split(_models.transformer_block(), stages=2, save_to=str(tmp_path))
    for stage in plan.stages:
        onnx.checker.check_model(str(tmp_path / f"stage_{stage.index}.onnx"))
    summary = json.loads((tmp_path / "plan.json").read_text())
    assert [entry["outputs"] for entry in summary["stages"]] == [list(stage.outputs) for stage in plan.stages]
    assert not list(tmp_path.glob("*.tmp"))


def test_split_command_prints_the_cut_and_writes_the_stages(tmp_path, capsys):
    from ortx.cli import main

    path = tmp_path / "model.onnx"
    onnx.save(_models.transformer_block(), str(path))
    assert main(["split", str(path), "--stages", "2", "-o", str(tmp_path / "stages"), "--measure"]) == 0
    printed = capsys.readouterr().out
    assert "costs measured" in printed and "cut 0|1:" in printed and "bytes" in printed
    assert (tmp_path / "stages" / "stage_1.onnx").exists() and (tmp_path / "stages" / "plan.json").exists()
    assert main(["split", str(path), "--stages", "99"]) == 2
    assert "allows at most" in capsys.readouterr().err
