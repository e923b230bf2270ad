"""Pad folded into the Conv or pooling op that reads it, whose own pads do the same thing.

Before: Conv(Pad(x, pads, mode=constant, value=0), W[, B], pads=p)        After: Conv(x, W[, B], pads=p + spatial pads)
Before: AveragePool(Pad(x, value 0), pads=p)   After: AveragePool(x, pads=p + pads, count_include_pad=1)
Before: MaxPool(Pad(x, value -inf), pads=p)    After: MaxPool(x, pads=p + pads)   (MaxPool's pads read as -inf)
Does not apply when: mode is not constant (reflect/edge); the pad value is not 0 (Conv, AveragePool) or -inf
(MaxPool); pads or the value are not constant, or negative (cropping); batch or channel dims are padded; the
consumer uses auto_pad other than NOTSET; an AveragePool already pads with count_include_pad=0 (its own padding
would then be excluded from the mean while the Pad's was included); MaxPool has storage_order/Indices output; the
Pad output has another reader.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._ir_utils import get_numpy_value

from ortx.passes._report import PassReport, apply_fusions, record_fused_from

logger = logging.getLogger(__name__)


def _pad_amounts(pad: ir.Node, rank: int) -> np.ndarray | str:
    """[begin_0..begin_{r-1}, end_0..end_{r-1}] over all `rank` axes, or the reason they are not usable."""
    if pad.attributes.get_string("mode", "constant") != "constant":
        return f"mode {pad.attributes.get_string('mode')} is not constant"
    if len(pad.inputs) > 1:
        pads = get_numpy_value(pad.inputs[1])
        if pads is None:
            return "pads are not constant"
        pads = np.asarray(pads, np.int64).ravel()
        if len(pad.inputs) > 3 and pad.inputs[3] is not None:  # opset 18 axes
            axes = get_numpy_value(pad.inputs[3])
            if axes is None:
                return "axes are not constant"
            full = np.zeros(2 * rank, np.int64)
            for index, axis in enumerate(np.ravel(axes).tolist()):
                full[axis % rank], full[axis % rank + rank] = pads[index], pads[index + len(pads) // 2]
            pads = full
    else:
        pads = np.asarray(pad.attributes.get_ints("pads", []), np.int64)
    if len(pads) != 2 * rank:
        return f"{len(pads)} pads for rank {rank}"
    if np.any(pads < 0):
        return "negative pads crop"
    if np.any(pads[[0, 1, rank, rank + 1]] != 0):
        return "batch or channel dims are padded"
    return pads


def _pad_value(pad: ir.Node) -> float | None:
    if len(pad.inputs) > 2 and pad.inputs[2] is not None:
        value = get_numpy_value(pad.inputs[2])
        return None if value is None or value.size != 1 else float(value.reshape(()))
    return pad.attributes.get_float("value", 0.0) if len(pad.inputs) == 1 else 0.0


class PadFusion(RewriteRuleClassBase):
    """One rule per consumer op type (Conv, AveragePool, MaxPool)."""

    def __init__(self, consumer: str, notes: dict[str, str]) -> None:
        super().__init__(name=f"PadFusion_{consumer}")
        self.consumer = consumer
        self.notes = notes

    def pattern(self, op, x):
        padded = op.Pad(x, _allow_other_inputs=True, _outputs=["padded"])
        return getattr(op, self.consumer)(padded, _allow_other_inputs=True, _outputs=["result"])

    def check(self, context, x, padded, result) -> MatchResult:
        check = MatchResult()
        pad, consumer = padded.producer(), result.producer()
        reason = self._reason(x, pad, consumer, padded)
        if reason:
            self.notes[pad.name or padded.name] = f"not folded into {self.consumer} '{consumer.name}': {reason}"
            return check.fail(reason)
        return check

    def _reason(self, x: ir.Value, pad: ir.Node, consumer: ir.Node, padded: ir.Value) -> str | None:
        if len(padded.uses()) != 1 or padded.is_graph_output():
            return "the Pad output has other readers"
        if x.shape is None:
            return "the input rank is unknown"
        pads = _pad_amounts(pad, len(x.shape))
        if isinstance(pads, str):
            return pads
        value = _pad_value(pad)
        expected = -np.inf if self.consumer == "MaxPool" else 0.0
        if value is None or value != expected:
            return f"pad value {value} is not {expected}"
        if consumer.attributes.get_string("auto_pad", "NOTSET") != "NOTSET":
            return "auto_pad is set"
        if self.consumer == "AveragePool" and consumer.attributes.get_int("count_include_pad", 0) == 0 \
                and any(consumer.attributes.get_ints("pads", [])):
            return "its own pads are excluded from the mean (count_include_pad=0)"
        if self.consumer == "MaxPool" and (len(consumer.outputs) > 1 or consumer.attributes.get_int("storage_order", 0)):
            return "MaxPool returns indices"
        self._pads = pads
        return None

    def rewrite(self, op, x, padded, result):
        pad, consumer = padded.producer(), result.producer()
        rank = len(x.shape)
        spatial = rank - 2
        own = list(consumer.attributes.get_ints("pads", [0] * (2 * spatial)))
        added = self._pads
        new_pads = [own[i] + int(added[2 + i]) for i in range(spatial)] + \
                   [own[spatial + i] + int(added[rank + 2 + i]) for i in range(spatial)]
        attributes = {key: attr for key, attr in consumer.attributes.items() if key != "pads"}
        if self.consumer == "AveragePool":
            attributes.pop("count_include_pad", None)
            attributes["count_include_pad"] = ir.AttrInt64("count_include_pad", 1)
        output = getattr(op, self.consumer)(x, *consumer.inputs[1:], pads=new_pads, _name=consumer.name,
                                            **attributes)
        record_fused_from(output.producer(), [pad, consumer])
        return output


def fuse_pad(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    notes: dict[str, str] = {}
    count = apply_fusions(model, [PadFusion(consumer, notes) for consumer in ("Conv", "AveragePool", "MaxPool")])
    remaining = {node.name or node.outputs[0].name for node in model.graph}
    note_lines = [f"{name} (Pad): {reason}" for name, reason in notes.items() if name in remaining]
    return PassReport(model, name="fuse_pad", counts={"pads_fused": count}, notes=note_lines,
                      seconds=time.perf_counter() - start)
