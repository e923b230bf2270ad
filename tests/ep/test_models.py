"""Issue #2's model bar: PP-OCR det/rec/cls and ResNet-18-/MobileNetV2-style networks through OrtxEP match ORT CPU
(max abs error <= 1e-3 x max|ref|, cosine >= 0.9999) on fresh random inputs, with >= 95% of MACs claimed."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

import ortx
from ortx.demo import PACKAGED_MODELS, packaged_model_path
from ortx.model_io import load, to_ort_bytes
from tests import _models
from tests.tolerances import assert_model_close

CASES = {
    "det": lambda: (packaged_model_path("det"), PACKAGED_MODELS["det"][1]),
    "rec": lambda: (packaged_model_path("rec"), PACKAGED_MODELS["rec"][1]),
    "cls": lambda: (packaged_model_path("cls"), PACKAGED_MODELS["cls"][1]),
    "resnet18": lambda: (_models.resnet18_style(), (1, 3, 224, 224)),
    "mobilenetv2": lambda: (_models.mobilenetv2_style(), (1, 3, 224, 224)),
}


@pytest.mark.parametrize("key", list(CASES))
def test_model_matches_ort_and_is_claimed(key):
    model, shape = CASES[key]()
    proto = load(model)
    name = proto.graph.input[0].name
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    reference = onnxruntime.InferenceSession(to_ort_bytes(proto), options, providers=["CPUExecutionProvider"])
    session = ortx.InferenceSession(proto, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{"input_shapes": {name: shape}}, {}])
    for seed in (1, 2):
        # U(-1, 1) is PP-OCR's own input range ((pixel / 255 - 0.5) / 0.5). With all-positive inputs det saturates
        # (outputs ~1e-5) and ORT with and without its graph optimisations already differ by 1.7% of max|out|.
        feeds = {name: np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(np.float32)}
        for index, (got, want) in enumerate(zip(session.run(None, feeds), reference.run(None, feeds))):
            assert_model_close(got, want, what=f"{key} output {index} (seed {seed})")
    assignment = session.assignment
    assert assignment.claimed_mac_share >= 0.95, str(assignment)
