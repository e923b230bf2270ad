"""A give-back to ORT confirmed by a fresh process: one measurement can fall in a period where OrtxEP runs slow.

Why: on the 2-vCPU VMs these numbers come from, there are periods of seconds to minutes in which the two vCPUs
slow each other down whenever both compute, and OrtxEP's two-thread runs of ResNet-18-style slow ~1.45x while
OrtxEP at 1 thread keeps its speed (one process alternating four sessions for 60 s: OrtxEP 2 threads 14.4-15.7 ms,
in two such periods 21.2-25.1; OrtxEP 1 thread 26.5-28.6 ms throughout; ORT at 2 threads 17.5-18.5 there, though
1.37x slower in a later period; two independent one-thread sessions run at once 1.48x slower). Every ResNet conv
slows 1.2-1.9x and the maxpool 2.8x; which shared resource is contended is not established (BENCHMARKS.md, "End to
end after ortx tune"). About one process in four starts in such a period. `ortx tune` measured OrtxEP in one and
gave ResNet-18-style back to ORT, which a separate process then measured 15% slower than OrtxEP.

So when engine_choice's measurement says ORT is faster, up to CONFIRM_PROCESSES fresh Python processes measure
the same nodes again, later (ortx.measure.compare: OrtxEP with tuning "off" against ORT, interleaved blocks), and
the segment goes back only if every measurement agrees; the confirming times are recorded too, and the decision
(here and from records later) takes each engine's fastest measurement. A confirmation that cannot run (no
interpreter, timeout, error) leaves the first measurement to decide, with a warning.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile

import onnx

logger = logging.getLogger(__name__)

CONFIRM_PROCESSES = 2
TIMEOUT_S = 300.0


def measure_in_fresh_process(sub_model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], *, threads: int,
                             runs: int, precision: str) -> tuple[float, float] | None:
    """(OrtxEP ms, ORT ms) of `sub_model` measured by a new Python process, or None (with a warning) if it failed."""
    with tempfile.TemporaryDirectory(prefix="ortx-confirm-") as folder:
        path = os.path.join(folder, "segment.onnx")
        with open(path, "wb") as file:
            file.write(sub_model.SerializeToString())
        command = [sys.executable, "-m", "ortx.tune.engine_confirm", path, "--threads", str(threads),
                   "--runs", str(runs), "--precision", precision, "--shapes", json.dumps(shapes)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            logger.warning("engine choice: the confirming process did not run (%s)", error)
            return None
    if done.returncode != 0:
        logger.warning("engine choice: the confirming process failed (exit %d): %s", done.returncode,
                       done.stderr.strip().splitlines()[-1:] or "")
        return None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return float(answer["ortx_ms"]), float(answer["ort_ms"])
    except (IndexError, KeyError, TypeError, ValueError):
        logger.warning("engine choice: the confirming process printed no times: %r", done.stdout[-200:])
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ortx.tune.engine_confirm",
                                     description="Measure OrtxEP (tuning off) against ORT on one model and print "
                                                 "both medians as JSON (engine_choice's confirming process).")
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--shapes", default="{}", help="JSON: input name -> shape")
    args = parser.parse_args(argv)
    from ortx.measure import compare

    shapes = {name: tuple(shape) for name, shape in json.loads(args.shapes).items()}
    result = compare("segment", args.model, shapes=shapes or None, threads=args.threads, runs=args.runs,
                     precision=args.precision)
    print(json.dumps({"ortx_ms": result.ortx_ms, "ort_ms": result.ort_ms}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
