"""Segments on different devices run concurrently (checked structurally, not by timing), results match ORT, the
arena plan counts lifetimes in waves, and bad device options fail with errors that say why."""
import threading

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ortx
import ortx.ep.devices
from ortx.ep.runtime import DeviceStep, waves_of
from tests.ep.devices import _numpy_backend, numpy_device_a, numpy_device_b
from tests.tolerances import TOLERANCES


@pytest.fixture
def test_devices(monkeypatch):
    monkeypatch.setattr(ortx.ep.devices, "DEVICES", ortx.ep.devices.DEVICES + (numpy_device_a.DEVICE,
                                                                               numpy_device_b.DEVICE))
    _numpy_backend.RUNS.clear()
    _numpy_backend.HOOKS.clear()
    yield
    _numpy_backend.HOOKS.clear()


def _two_branch_model(channels=5, height=7, width=9):
    # x -> a1 Relu -> a2 Sigmoid \
    #                              Add -> Conv -> y      (7x9 spatial by default: no tile multiple)
    # x -> b1 Tanh -> b2 Neg    /
    weight = np.random.default_rng(1).standard_normal((channels, channels, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["a1"], name="a1"), helper.make_node("Sigmoid", ["a1"], ["a2"], name="a2"),
        helper.make_node("Tanh", ["x"], ["b1"], name="b1"), helper.make_node("Neg", ["b1"], ["b2"], name="b2"),
        helper.make_node("Add", ["a2", "b2"], ["s"], name="join"),
        helper.make_node("Conv", ["s", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
    ]
    shape = [1, channels, height, width]
    graph = helper.make_graph(nodes, "two_branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [helper.make_tensor("w", TensorProto.FLOAT, weight.shape, weight.ravel())])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _session(model, **options):
    return ortx.InferenceSession(model.SerializeToString(), providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[options, {}])


def _check_against_ort(session, model):
    shape = [dim.dim_value for dim in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, **TOLERANCES[np.dtype(np.float32)])


def test_branches_on_two_devices_are_in_flight_at_once(test_devices):
    model = _two_branch_model()
    session = _session(model, devices="numpya,numpyb,cpu", placement="a1:numpya,a2:numpya,b1:numpyb,b2:numpyb,join:cpu")
    rows = {row.name: row for row in session.assignment}
    assert [rows[name].device for name in ("a1", "a2", "b1", "b2", "join", "conv")] == \
        ["numpya", "numpya", "numpyb", "numpyb", "cpu", "cpu"]
    assert "forced" in rows["a1"].reason
    # Each device's run waits at a two-party barrier: it passes only if the other device's run has started too,
    # i.e. both branches are in flight at once (run one after the other, the first would time out).
    barrier = threading.Barrier(2, timeout=10)
    _numpy_backend.HOOKS.update(numpya=barrier.wait, numpyb=barrier.wait)
    for _ in range(3):
        _check_against_ort(session, model)
    runs = {device: [run for run in _numpy_backend.RUNS if run[0] == device] for device in ("numpya", "numpyb")}
    assert len(runs["numpya"]) == len(runs["numpyb"]) == 3
    for (_, thread_a, start_a, end_a), (_, thread_b, start_b, end_b) in zip(runs["numpya"], runs["numpyb"]):
        assert start_a < end_b and start_b < end_a  # the two runs overlap in time
        assert thread_a.startswith("ortx-numpya") and thread_b.startswith("ortx-numpyb")
        assert threading.main_thread().name not in (thread_a, thread_b)


def test_waves_and_arena_under_concurrency(test_devices):
    model = _two_branch_model()
    session = _session(model, devices="numpya,numpyb,cpu", placement="a1:numpya,a2:numpya,b1:numpyb,b2:numpyb,join:cpu")
    [compiled] = session._compiled.values()
    plan = compiled.plan
    assert [type(step).__name__ for step in plan.steps[:2]] == ["DeviceStep", "DeviceStep"]
    assert waves_of(plan.steps) == [0, 0, 1] and plan.times == [0, 0, 1]
    # a2 and b2 are written in the same wave by different threads: they must not share bytes, and both are read
    # in wave 1; the no-overlap invariant over wave lifetimes holds for every pair.
    lifetimes = {item.name: item for item in plan.memory_plan.lifetimes}
    offsets = plan.memory_plan.offsets
    for first in lifetimes.values():
        for second in lifetimes.values():
            if first.name < second.name and first.first <= second.last and second.first <= first.last:
                assert (offsets[first.name] + first.nbytes <= offsets[second.name]
                        or offsets[second.name] + second.nbytes <= offsets[first.name]), (first, second)
    assert {"a2", "b2"} <= set(lifetimes) and lifetimes["a2"].first == lifetimes["b2"].first == 0


def test_cost_placement_uses_the_cheaper_device_and_matches_ort(test_devices):
    model = _two_branch_model(height=70, width=90)  # 126 KB tensors: the CPU's estimate is bandwidth-bound
    session = _session(model, devices="numpya,cpu")
    rows = {row.name: row for row in session.assignment}
    # numpya estimates its ops (0.1 us) far below the CPU's (~18 us each), even after paying for the transfers of x
    # and of the join's output; numpy cannot run Conv
    assert rows["conv"].device == "cpu" and rows["conv"].provider == "OrtxEP"
    assert all(rows[name].device == "numpya" for name in ("a1", "a2", "b1", "b2")), str(session.assignment)
    assert session.assignment.capability["conv"]["numpya"] == "Conv: not a numpy test op"
    _check_against_ort(session, model)
    device_steps = [step for step in session._compiled[next(iter(session._compiled))].plan.steps
                    if isinstance(step, DeviceStep)]
    assert device_steps and all(step.device == "numpya" for step in device_steps)
    svg = session.assignment.to_svg()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>") and svg.count("<rect") >= 7
    assert "numpya" in svg and "#d62728" in svg  # a device-crossing edge, labelled with its bytes


def test_default_devices_give_todays_plan():
    model = _two_branch_model()
    session = _session(model)
    [compiled] = session._compiled.values()
    assert all(type(step).__name__ == "ClaimedStep" for step in compiled.plan.steps)
    assert compiled.plan.waves is None and compiled.plan.times == list(range(len(compiled.plan.steps)))
    assert {row.device for row in session.assignment} == {"cpu"}
    _check_against_ort(session, model)


def test_unknown_device_is_an_error_listing_the_valid_ones():
    with pytest.raises(ValueError, match=r"option 'devices'.*unknown device 'tpu'.*valid devices: cpu"):
        _session(_two_branch_model(), devices="tpu,cpu")


def test_forcing_an_op_onto_a_device_that_cannot_run_it(test_devices):
    with pytest.raises(ValueError, match=r"node 'conv' \(Conv\) cannot run on device 'numpya': Conv: not a numpy"):
        _session(_two_branch_model(), devices="numpya,cpu", placement="conv:numpya")


def test_forcing_onto_an_unselected_device_or_unknown_node(test_devices):
    with pytest.raises(ValueError, match=r"node 'a1' is forced onto device 'numpyb', which is not in option"):
        _session(_two_branch_model(), devices="numpya,cpu", placement="a1:numpyb")
    with pytest.raises(ValueError, match=r"node 'nope' is not in the graph"):
        _session(_two_branch_model(), devices="numpya,cpu", placement="nope:numpya")
    with pytest.raises(ValueError, match=r"option 'placement'.*is not NODE:DEVICE"):
        _session(_two_branch_model(), devices="numpya,cpu", placement="a1")


def test_ort_segments_run_in_waves_beside_device_lanes(test_devices):
    model = _two_branch_model()
    # Hardmax: OrtxEP has no lowering, so ONNX Runtime runs it on the main lane, after the join
    model.graph.node.append(helper.make_node("Hardmax", ["y"], ["h"], name="hardmax", axis=-1))
    model.graph.output[0].name = "h"
    session = _session(model, devices="numpya,cpu", placement="a1:numpya,a2:numpya")
    rows = {row.name: row for row in session.assignment}
    assert rows["hardmax"].provider == "CPUExecutionProvider" and rows["hardmax"].device == ""
    assert "cpu: Hardmax: op not supported" in rows["hardmax"].reason and "numpya: " in rows["hardmax"].reason
    [compiled] = session._compiled.values()
    kinds = [(type(step).__name__, wave) for step, wave in zip(compiled.plan.steps, compiled.plan.times)]
    assert ("DeviceStep", 0) in kinds and kinds[-1] == ("OrtStep", max(compiled.plan.times))
    for _ in range(2):
        _check_against_ort(session, model)


def test_artifact_placement_is_followed_on_load(test_devices, tmp_path):
    from ortx.artifact import read_artifact
    from ortx.compile_artifact import compile_artifact

    source = tmp_path / "two.onnx"
    source.write_bytes(_two_branch_model().SerializeToString())
    artifact = tmp_path / "two.ortx"
    forced = {"devices": "numpya,cpu", "placement": "a1:numpya,a2:numpya"}
    compile_artifact(str(source), artifact, provider_options=forced)
    # loaded without the forced placement: the artifact's decides (the cost model alone keeps these tiny ops on cpu)
    session = ortx.InferenceSession(str(artifact), providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{"devices": "numpya,cpu"}, {}])
    rows = {row.name: row for row in session.assignment}
    assert rows["a1"].device == rows["a2"].device == "numpya"
    assert rows["a1"].reason == "on numpya as the compiled artifact placed it"
    stored = read_artifact(str(artifact)).placement
    assert {name: row.device or "ort" for name, row in rows.items()} == stored
    _check_against_ort(session, _two_branch_model())
