"""ortx.codegen.render: golden C files, exact float literals, determinism, and the rendered C compiles cleanly.

Golden files in tests/golden/ are diffed byte for byte; after a deliberate change to the template or a lowering,
regenerate them with `ORTX_REGENERATE_GOLDEN=1 pytest tests/codegen/test_render.py` and review the diff.
"""
from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from ortx.codegen import jit, render
from ortx.config import Options
from ortx.ep import compile_nodes
from tests import _models

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden"
REGENERATE = os.environ.get("ORTX_REGENERATE_GOLDEN") == "1"


def small_classifier(seed: int = 0) -> onnx.ModelProto:
    """X[1,3,13,11] -> Conv 3x3/2 + BN + Clip(0,6) -> MaxPool 2x2 -> Add(itself) -> GAP -> Flatten -> Gemm -> Y[1,5].

    Odd spatial sizes, a clip with float bounds, an alias (Flatten) and a Gemm: most buffer kinds and literals."""
    builder = _models.GraphBuilder("small_classifier", seed)
    x = builder.clip6(builder.batchnorm(builder.conv("X", 3, 6, 3, stride=2), 6))
    x = builder.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = builder.node("Add", [x, x])
    x = builder.node("Flatten", [builder.node("GlobalAveragePool", [x])], axis=1)
    builder.gemm(x, 6, 5)
    builder.nodes[-1].output[0] = "Y"
    return builder.finish([_models._float_input("X", [1, 3, 13, 11])], [_models._float_input("Y", [1, 5])])


GOLDEN_MODELS = {"tiny_conv_relu": _models.tiny_conv_relu, "small_classifier": small_classifier}


def _compiled(model: onnx.ModelProto):
    return compile_nodes.compile_graph(compile_nodes.infer_shapes(model).graph)


@pytest.mark.parametrize("name", sorted(GOLDEN_MODELS))
def test_render_matches_golden(name):
    source = render.render(_compiled(GOLDEN_MODELS[name]())).source
    golden = GOLDEN_DIR / f"{name}.c"
    if REGENERATE:
        golden.write_text(source)
    assert golden.exists(), f"{golden} missing: run with ORTX_REGENERATE_GOLDEN=1 and review it"
    assert source == golden.read_text(), f"{golden} differs from the rendered source (see module docstring)"


@pytest.mark.parametrize("name", sorted(GOLDEN_MODELS))
def test_golden_compiles_without_warnings(name, tmp_path):
    compiler = jit.find_compiler(Options())
    assert compiler is not None, "the codegen tests need a C compiler (cc, gcc or clang)"
    output = tmp_path / f"{name}.so"
    result = subprocess.run([compiler.path, *jit.FLAGS, "-Wall", "-Wextra", "-Werror", "-o", str(output),
                             str(GOLDEN_DIR / f"{name}.c")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert output.stat().st_size > 0


def test_render_lists_every_step_and_kernel():
    compiled = _compiled(small_classifier())
    rendered = render.render(compiled)
    assert rendered.source.count("ortx_step(kernels[") == compiled.program.num_steps
    assert set(rendered.kernel_names) == {step.kernel for step in compiled.steps}
    assert f"int {rendered.symbol}(" in rendered.source
    assert all(len(line) <= 120 for line in rendered.source.splitlines())


def test_render_checks_the_status_after_fallible_steps_only():
    """Gather (fallible) is step 1 here: the rendered function returns 2 when its status record holds an error."""
    model = _models.GraphBuilder("gather_relu", 0)
    model.nodes.append(onnx.helper.make_node("Relu", ["X"], ["r"]))
    model.nodes.append(onnx.helper.make_node("Gather", ["r", "I"], ["Y"], axis=1))
    proto = model.finish([_models._float_input("X", [3, 7]),
                          onnx.helper.make_tensor_value_info("I", onnx.TensorProto.INT64, [2])],
                         [_models._float_input("Y", [3, 2])])
    compiled = _compiled(proto)
    assert [step.kernel for step in compiled.steps] == ["unary_f32", "gather"]
    source = render.render(compiled).source
    assert source.count("!= 0) return") == 1
    assert "if (*(const int64_t *)buffers[3] != 0) return 2;" in source
    assert source.rstrip().endswith("return 0;\n}")


def test_render_is_deterministic_and_symbols_follow_content():
    first = render.render(_compiled(_models.tiny_conv_relu(seed=0)))
    again = render.render(_compiled(_models.tiny_conv_relu(seed=0)))
    other = render.render(_compiled(small_classifier()))
    assert first.source == again.source
    assert first.symbol != other.symbol


def _float_from_literal(text: str) -> np.float32:
    assert text.endswith("f")
    return np.float32(float.fromhex(text[:-1]))


def test_float_literals_keep_every_bit():
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 32, size=2000, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    values = values[np.isfinite(values)]
    special = np.array([0.0, -0.0, 1.0, -6.0, 1e-45, -1e-45, 1.17549435e-38, 3.4028235e38, 1e-5, 0.1],
                       dtype=np.float32)
    for value in np.concatenate([values, special]):
        literal = render._c_float(value)
        parsed = _float_from_literal(literal)
        assert struct.pack("<f", parsed) == struct.pack("<f", value), (value, literal)
    assert render._c_float(np.float32(np.inf)) == "(1.0f / 0.0f)"
    assert render._c_float(np.float32(-np.inf)) == "(-1.0f / 0.0f)"


def test_int_literals_cover_the_int64_range():
    assert render._c_int(-(1 << 63)) == "INT64_MIN"
    assert render._c_int((1 << 63) - 1) == "9223372036854775807"
    assert render._c_int(-5) == "-5"


def test_export_c_writes_the_jit_source(tmp_path):
    compiled = _compiled(_models.tiny_conv_relu())
    written = render.export_c(compiled, tmp_path / "segment.c")
    assert (tmp_path / "segment.c").read_text() == written.source == render.render(compiled).source


def test_render_refuses_a_program_without_listing():
    compiled = _compiled(_models.tiny_conv_relu())
    with pytest.raises(ValueError, match="no step listing"):
        render.render(dataclasses.replace(compiled, steps=()))
