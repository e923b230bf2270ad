import onnx_ir as ir
import pytest

from ortx.passes import DEFAULT_PASSES
from ortx.passes import fold_constants
from ortx.passes._report import PassError, PassReport, pass_name, run_passes
from tests import _models
from tests.passes._helpers import to_ir


def test_modified_is_derived_from_counts():
    assert not PassReport(None, name="p", counts={"nodes_removed": 0}).modified
    assert PassReport(None, name="p", counts={"nodes_removed": 2}).modified
    assert PassReport(None, name="p", counts={"bytes_saved": -8}).modified


def test_run_passes_records_nodes_and_time():
    model = to_ir(_models.mobilenetv2_style(size=32))
    reports = run_passes(model, DEFAULT_PASSES, check=True)
    assert [r.name for r in reports] == [pass_name(p) for p in DEFAULT_PASSES]
    assert reports[0].nodes_before == 152 and reports[-1].nodes_after <= 100
    assert all(r.seconds > 0 for r in reports)
    fusion = next(r for r in reports if r.name == "fuse_conv_batchnorm")
    assert fusion.nodes_before - fusion.nodes_after == 52 and fusion.to_dict()["counts"]["batchnorms_fused"] == 52


def break_graph(model: ir.Model) -> PassReport:
    """A buggy pass: removes the first Conv but leaves its consumers reading the dangling output."""
    conv = next(node for node in model.graph if node.op_type == "Conv")
    model.graph.remove(conv)
    return PassReport(model, name="break_graph", counts={"nodes_removed": 1})


def test_check_names_failing_pass_previous_passes_and_node():
    model = to_ir(_models.tiny_conv_relu())
    with pytest.raises(PassError) as raised:
        run_passes(model, (fold_constants, break_graph), check=True)
    error = raised.value
    assert error.pass_name == "break_graph" and error.previous == ["fold_constants"]
    assert error.node == "relu_4"
    assert "break_graph" in str(error) and "fold_constants" in str(error) and "relu_4" in str(error)


def test_exception_in_pass_is_wrapped():
    def explode(model):
        raise RuntimeError("boom")

    with pytest.raises(PassError, match=r"pass 'explode' \(first pass\) failed: RuntimeError: boom"):
        run_passes(to_ir(_models.tiny_conv_relu()), (explode,))
