"""Fused 1x1 expand + depthwise convs: OrtxEP with them against the same sessions with each pair as two steps.

Usage: python benchmarks/expand_depthwise.py [--runs 200] [--threads 2] [--models mobilenetv2,cls,rec,det]
                                             [--output BENCHMARKS.md] [--no-write]
"fused" is OrtxEP compiled with ortx.pipeline.EXPAND_DEPTHWISE on (sessions' default since session 22), "unfused"
with it off, everything else equal (tuning off). Rounds: the host probe's cache-line round trip between the two
threads (ortx.host_contention) is read, then a block of runs of each engine, in rotating order, each block after
100 ms idle and an uncounted warm-in (ortx.measure.switch_over); medians per engine over the rounds with the
vCPUs close and over those with them far apart, until each state has --runs runs or 3 minutes pass. The fused and
unfused outputs are compared bit for bit. Writes BENCHMARKS.md's "Fused expand and depthwise convs" section.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402

import ortx  # noqa: E402
from benchmarks._report import head_commit, host, kernel_counts, model_feeds, pipeline_flag, write_section  # noqa: E402
from ortx.host_contention import FAR_ROUND_TRIP_NS, core_round_trip_ns  # noqa: E402
from ortx.measure import switch_over  # noqa: E402

HEADING = "Fused expand and depthwise convs (issue #4)"
BLOCK = 8
MAX_SECONDS = 120.0
STATES = ("close", "far apart")


def timed_rounds(engines: dict, feeds: dict, runs: int) -> dict[str, dict[str, list[float]]]:
    """Per host state, per engine: run times (ms), rounds of one block per engine in rotating order."""
    times = {state: {engine: [] for engine in engines} for state in STATES}
    names = list(engines)
    start, round_index = time.monotonic(), 0
    while time.monotonic() - start < MAX_SECONDS and min(
            len(times[state][names[0]]) for state in STATES) < runs:
        state = STATES[core_round_trip_ns() >= FAR_ROUND_TRIP_NS]
        order = names[round_index % len(names):] + names[:round_index % len(names)]
        round_index += 1
        for engine in order:
            session = engines[engine]
            switch_over(lambda: session.run(None, feeds))
            for _ in range(BLOCK):
                begin = time.perf_counter()
                session.run(None, feeds)
                times[state][engine].append(1e3 * (time.perf_counter() - begin))
    return times


def measure(label: str, path: str, feeds: dict, threads: int, runs: int) -> str:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    provider_options = [{"input_shapes": {name: array.shape for name, array in feeds.items()}, "tuning": "off"}, {}]
    engines = {"ORT": onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])}
    for name, on in (("unfused", False), ("fused", True)):
        with pipeline_flag("EXPAND_DEPTHWISE", on):
            engines[name] = ortx.InferenceSession(path, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                                  provider_options=provider_options)
    outputs = {name: engines[name].run(None, feeds) for name in ("unfused", "fused")}
    bitwise = all(np.array_equal(a, b) for a, b in zip(outputs["unfused"], outputs["fused"]))
    pairs = kernel_counts(engines["fused"])["conv_expand_depthwise_nchwc_f32"]
    times = timed_rounds(engines, feeds, runs)
    cells = []
    for state in STATES:
        counted = times[state]
        if not counted["fused"]:
            cells += ["-"] * 5
            continue
        ms = {engine: statistics.median(values) for engine, values in counted.items()}
        cells += [str(len(counted["fused"])), f"{ms['ORT']:.3f}", f"{ms['unfused']:.3f}", f"{ms['fused']:.3f}",
                  f"{ms['fused'] / ms['unfused']:.3f}"]
    print(f"  {label}: {pairs} fused pairs, bitwise {bitwise}, " + " ".join(cells), flush=True)
    return f"| {label} | {pairs} | {'yes' if bitwise else 'NO'} | " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="runs per engine wanted in each host state")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="mobilenetv2,cls,rec,det")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    commit = head_commit()  # the code measured: read before anything runs
    rows = [measure(name, path, feeds, args.threads, args.runs)
            for name, path, feeds in model_feeds(args.models, 0)]
    body = (f"Measured {datetime.date.today()} on commit {commit}, {host()}, {args.threads} threads, tuning off, "
            f"seeded random inputs. \"fused\" is OrtxEP with ortx.pipeline.EXPAND_DEPTHWISE on (sessions' default), "
            f"\"unfused\" with it off; pairs = the fused session's conv_expand_depthwise_nchwc_f32 steps; bitwise = "
            f"the two sessions' outputs equal bit for bit. Medians of the runs in rounds with the two vCPUs close "
            f"and far apart (ortx.host_contention's round trip >= {FAR_ROUND_TRIP_NS:.0f} ns), blocks of {BLOCK} runs "
            f"per engine in rotating order after 100 ms idle and a warm-in; n = runs per engine in that state, at "
            f"most {MAX_SECONDS:.0f} s per model. Written by `python benchmarks/expand_depthwise.py`.\n\n"
            "| model | pairs | bitwise | n close | ORT ms | unfused ms | fused ms | fused / unfused | n far | ORT ms | "
            "unfused ms | fused ms | fused / unfused |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    print(body)
    if not args.no_write:
        write_section(args.output, HEADING, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
