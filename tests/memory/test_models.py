"""Issue #6's bar on the real models: each claimed segment's arena and the session arena within 1.05 x the lower
bound, no two live buffers overlapping, in-place reuse never worse than none, as an OrtxEP session compiles them."""
from __future__ import annotations

import onnxruntime
import pytest

from ortx import pipeline
from ortx.demo import PACKAGED_MODELS, packaged_model_path
from ortx.ep.runtime import ClaimedStep
from ortx.memory.lifetimes import check_no_overlap
from ortx.memory.plan import plan_offsets
from ortx.memory.summary import session_lower_bound_bytes
from tests import _models

MAX_RATIO = 1.05  # issue #6 acceptance

CASES = {
    "det": lambda: (packaged_model_path("det"), PACKAGED_MODELS["det"][1]),
    "rec": lambda: (packaged_model_path("rec"), PACKAGED_MODELS["rec"][1]),
    "cls": lambda: (packaged_model_path("cls"), PACKAGED_MODELS["cls"][1]),
    "resnet18": lambda: (_models.resnet18_style(), (1, 3, 224, 224)),
    "mobilenetv2": lambda: (_models.mobilenetv2_style(), (1, 3, 224, 224)),
    "transformer_block": lambda: (_models.transformer_block(), None),
}


@pytest.mark.parametrize("key", list(CASES))
def test_arena_within_five_percent_of_lower_bound(key):
    model, shape = CASES[key]()
    prepared = pipeline.prepare(model)
    graph_input = prepared.model.graph.inputs[0]
    shapes = {graph_input.name: shape or tuple(graph_input.shape)}
    ort = pipeline.OrtSettings(onnxruntime.SessionOptions(), ["CPUExecutionProvider"], [{}])
    plan = pipeline.compile_for_shapes(prepared, shapes, ort, num_threads=2).plan
    claimed = [step.program for step in plan.steps if isinstance(step, ClaimedStep)]
    assert claimed, f"{key}: nothing claimed"
    for program in claimed:
        memory = program.plan
        check_no_overlap(memory.lifetimes, memory.offsets)
        assert memory.arena_bytes <= MAX_RATIO * memory.lower_bound_bytes, memory.table()
        assert memory.arena_bytes <= plan_offsets(program.buffer_lifetimes).arena_bytes  # reuse never hurts
    check_no_overlap(plan.memory_plan.lifetimes, plan.memory_plan.offsets)
    lower = session_lower_bound_bytes(plan)
    assert lower <= plan.memory_plan.arena_bytes <= MAX_RATIO * lower, (key, plan.memory_plan.arena_bytes, lower)
