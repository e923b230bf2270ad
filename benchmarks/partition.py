"""Two independent branches on two devices run concurrently: writes BENCHMARKS.md's "Concurrent branches" section.

Usage: python benchmarks/partition.py [--device dsp|npu] [--rounds 15] [--runs 20] [--quiet-wait 60]
The model has two inputs and two outputs: branch A is work the device claims (dsp: a batch of real DFTs; npu: a
chain of int8 QDQ convs), branch B a chain of fp32 convs on the CPU, sized so that it takes about as long as A.
Sessions use devices "<device>,cpu" and one CPU thread (the device's lane is its own worker thread; on this host
both devices are these same cores, so one thread each is what leaves them free to overlap). Three sessions are
timed in turn, run by run: both branches, A alone, B alone; the ratio both / (A + B) is below 1 when the branches
overlap (1.0: one after the other). Ratios are per round (median run times), quoted as median and range, and from
the fastest run of each session over all rounds (the least disturbed by other processes on a shared host).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ortx  # noqa: E402
from benchmarks._report import write_section  # noqa: E402
from ortx.ep.devices import DEVICES  # noqa: E402

HEADING = "Concurrent branches on two devices (issue #7)"


def _dft_branch(prefix: str, batch: int = 64, length: int = 4096):
    """x [batch, length, 1] -> real DFT (onesided) -> [batch, length/2 + 1, 2]."""
    nodes = [helper.make_node("DFT", [f"{prefix}x", "", f"{prefix}axis"], [f"{prefix}y"], name=f"{prefix}dft",
                              onesided=1)]
    initializers = [numpy_helper.from_array(np.array(1, np.int64), f"{prefix}axis")]
    inputs = [helper.make_tensor_value_info(f"{prefix}x", TensorProto.FLOAT, [batch, length, 1])]
    outputs = [helper.make_tensor_value_info(f"{prefix}y", TensorProto.FLOAT, [batch, length // 2 + 1, 2])]
    return nodes, initializers, inputs, outputs


def _qdq_conv_branch(prefix: str, depth: int = 4, channels: int = 32, size: int = 28):
    """x float -> Q -> (DQ -> Conv(DQ(int8 weights), DQ(int32 bias)) -> Relu -> Q) x depth -> DQ."""
    rng = np.random.default_rng(7)
    x_scale = np.float32(0.05)
    initializers = [numpy_helper.from_array(np.array(x_scale), f"{prefix}s"),
                    numpy_helper.from_array(np.array(0, np.int8), f"{prefix}z")]
    nodes = [helper.make_node("QuantizeLinear", [f"{prefix}x", f"{prefix}s", f"{prefix}z"], [f"{prefix}q0"],
                              name=f"{prefix}quantize")]
    for layer in range(depth):
        w_scale = rng.uniform(0.002, 0.006, channels).astype(np.float32)
        initializers += [
            numpy_helper.from_array(rng.integers(-127, 128, (channels, channels, 3, 3)).astype(np.int8),
                                    f"{prefix}w{layer}"),
            numpy_helper.from_array(w_scale, f"{prefix}ws{layer}"),
            numpy_helper.from_array(np.zeros(channels, np.int8), f"{prefix}wz{layer}"),
            numpy_helper.from_array(rng.integers(-500, 500, channels).astype(np.int32), f"{prefix}b{layer}"),
            numpy_helper.from_array((x_scale * w_scale).astype(np.float32), f"{prefix}bs{layer}"),
        ]
        q, name = f"{prefix}q{layer}", f"{prefix}{layer}"
        nodes += [
            helper.make_node("DequantizeLinear", [q, f"{prefix}s", f"{prefix}z"], [f"{name}xd"], name=f"{name}dqx"),
            helper.make_node("DequantizeLinear", [f"{prefix}w{layer}", f"{prefix}ws{layer}", f"{prefix}wz{layer}"],
                             [f"{name}wd"], name=f"{name}dqw", axis=0),
            helper.make_node("DequantizeLinear", [f"{prefix}b{layer}", f"{prefix}bs{layer}"], [f"{name}bd"],
                             name=f"{name}dqb", axis=0),
            helper.make_node("Conv", [f"{name}xd", f"{name}wd", f"{name}bd"], [f"{name}c"], name=f"{name}conv",
                             pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"{name}c"], [f"{name}r"], name=f"{name}relu"),
            helper.make_node("QuantizeLinear", [f"{name}r", f"{prefix}s", f"{prefix}z"], [f"{prefix}q{layer + 1}"],
                             name=f"{name}q"),
        ]
    nodes.append(helper.make_node("DequantizeLinear", [f"{prefix}q{depth}", f"{prefix}s", f"{prefix}z"],
                                  [f"{prefix}y"], name=f"{prefix}dequantize"))
    shape = [1, channels, size, size]
    return (nodes, initializers, [helper.make_tensor_value_info(f"{prefix}x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(f"{prefix}y", TensorProto.FLOAT, shape)])


def _conv_branch(prefix: str, depth: int, channels: int = 32, size: int = 28):
    """x -> (Conv 3x3 -> Relu) x depth, fp32: the CPU's branch."""
    rng = np.random.default_rng(3)
    nodes, initializers, last = [], [], f"{prefix}x"
    for layer in range(depth):
        weight = (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32)
        initializers.append(numpy_helper.from_array(weight, f"{prefix}w{layer}"))
        nodes += [helper.make_node("Conv", [last, f"{prefix}w{layer}"], [f"{prefix}c{layer}"],
                                   name=f"{prefix}conv{layer}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"{prefix}c{layer}"], [f"{prefix}r{layer}"], name=f"{prefix}relu{layer}")]
        last = f"{prefix}r{layer}"
    nodes.append(helper.make_node("Identity", [last], [f"{prefix}y"], name=f"{prefix}out"))
    shape = [1, channels, size, size]
    return (nodes, initializers, [helper.make_tensor_value_info(f"{prefix}x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(f"{prefix}y", TensorProto.FLOAT, shape)])


DEVICE_BRANCHES = {"dsp": _dft_branch, "npu": _qdq_conv_branch}


def _model(*branches):
    nodes, initializers, inputs, outputs = [], [], [], []
    for branch in branches:
        for collected, part in zip((nodes, initializers, inputs, outputs), branch):
            collected.extend(part)
    graph = helper.make_graph(nodes, "branches", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _feeds(model) -> dict:
    """Seeded by input name, so a branch gets the same input alone and in the two-branch model."""
    return {info.name: np.random.default_rng(zlib.crc32(info.name.encode())).standard_normal(
        [d.dim_value for d in info.type.tensor_type.shape.dim]).astype(np.float32) for info in model.graph.input}


def _session(model, device: str):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return ortx.InferenceSession(model.SerializeToString(), options, providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[{"devices": f"{device},cpu"}, {}])


def _seconds(session, feeds, runs: int) -> float:
    session.run(None, feeds)
    start = time.perf_counter()
    for _ in range(runs):
        session.run(None, feeds)
    return (time.perf_counter() - start) / runs


def _interleaved(sessions: dict, feeds: dict, runs: int) -> dict[str, list[float]]:
    """Per session, `runs` single-run times taken in turn (both, A, B, both, ...), so host noise hits all three."""
    samples = {name: [] for name in sessions}
    for _ in range(runs):
        for name, session in sessions.items():
            start = time.perf_counter()
            session.run(None, feeds[name])
            samples[name].append(time.perf_counter() - start)
    return samples


def _balanced_cpu_depth(device_seconds: float, device: str, runs: int) -> int:
    one = _conv_branch("b_", 1)
    seconds = _seconds(_session(_model(one), device), _feeds(_model(one)), runs)
    return max(1, min(60, round(device_seconds / seconds)))


def wait_for_quiet(limit_seconds: float) -> float:
    deadline = time.monotonic() + limit_seconds
    while os.getloadavg()[0] >= 1.0 and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    available = [device.name for device in DEVICES if device.name in DEVICE_BRANCHES]
    parser.add_argument("--device", choices=sorted(DEVICE_BRANCHES), default=available[0] if available else None)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=20, help="runs per session per round")
    parser.add_argument("--quiet-wait", type=float, default=60.0, help="seconds to wait for load < 1 first")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    args = parser.parse_args()
    if args.device is None or args.device not in [device.name for device in DEVICES]:
        parser.error(f"device {args.device!r} is not in ortx.ep.devices.DEVICES "
                     f"({', '.join(device.name for device in DEVICES)}); this benchmark needs a second device")
    load = wait_for_quiet(args.quiet_wait)
    branch_a = DEVICE_BRANCHES[args.device]("a_")
    device_seconds = _seconds(_session(_model(branch_a), args.device), _feeds(_model(branch_a)), args.runs)
    depth = _balanced_cpu_depth(device_seconds, args.device, args.runs)
    branch_b = _conv_branch("b_", depth)
    models = {"both": _model(branch_a, branch_b), "a": _model(branch_a), "b": _model(branch_b)}
    sessions = {name: _session(model, args.device) for name, model in models.items()}
    feeds = {name: _feeds(model) for name, model in models.items()}
    sessions = {name: sessions[name] for name in ("both", "a", "b")}
    rows = sessions["both"].assignment.by_device()
    expected = {}
    for name in ("a", "b"):  # the two-branch model gives each branch's outputs exactly as the branch alone does
        expected.update(dict(zip([o.name for o in models[name].graph.output], sessions[name].run(None, feeds[name]))))
    both = sessions["both"].run(None, feeds["both"])
    identical = all(np.array_equal(value, expected[info.name])
                    for value, info in zip(both, models["both"].graph.output))
    ratios, times, fastest = [], {name: [] for name in sessions}, {name: float("inf") for name in sessions}
    for _ in range(args.rounds):
        measured = _interleaved(sessions, feeds, args.runs)
        for name, samples in measured.items():
            times[name].append(statistics.median(samples))
            fastest[name] = min(fastest[name], min(samples))
        ratios.append(times["both"][-1] / (times["a"][-1] + times["b"][-1]))
    load_after = os.getloadavg()[0]
    median = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    lines = [
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.node() or 'host'} "
        f"({os.cpu_count()} cores), load {load:.1f} before / {load_after:.1f} after; `python benchmarks/partition.py "
        f"--device {args.device} --rounds {args.rounds} --runs {args.runs}`.",
        "",
        f"Branch A on `{args.device}` ({DEVICE_BRANCHES[args.device].__doc__.splitlines()[0]}), branch B on `cpu` "
        f"({depth} fp32 3x3 convs + Relu, 32 channels at 28x28, balanced to A), one CPU thread; nodes per device in "
        f"the two-branch session: {', '.join(f'{k}: {v}' for k, v in sorted(rows.items()))}; its outputs "
        f"{'identical to' if identical else 'DIFFERENT from'} each branch run alone.",
        "",
        "| session | median ms per run |",
        "|---|---|",
        f"| A alone ({args.device}) | {median['a']:.2f} |",
        f"| B alone (cpu) | {median['b']:.2f} |",
        f"| both branches | {median['both']:.2f} |",
        "",
        f"both / (A + B) per round (median run times, runs interleaved both, A, B): median "
        f"{statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f} over {args.rounds} rounds; from "
        f"the fastest run of each: {fastest['both'] / (fastest['a'] + fastest['b']):.2f} "
        f"({fastest['both'] * 1e3:.2f} / ({fastest['a'] * 1e3:.2f} + {fastest['b'] * 1e3:.2f}) ms). 1.0 would be one "
        f"branch after the other, 0.5 full overlap of equal branches.",
    ]
    body = "\n".join(lines)
    print(body)
    write_section(args.output, HEADING, body)


if __name__ == "__main__":
    main()
