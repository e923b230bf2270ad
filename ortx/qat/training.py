"""calibrate (activation ranges from float passes, as ortx PTQ's MinMax) and fine_tune (a short training loop
through the fake-quantized model) for a model from ortx.qat.prepare."""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterable

import torch

from ortx.qat.prepare_model import activation_quantizers, set_mode


@dataclasses.dataclass
class QuantizerRecord:
    name: str
    minimum: float   # observed over the calibration batches
    maximum: float
    scale: float
    zero_point: int


@dataclasses.dataclass
class FineTuneReport:
    epochs: int
    steps: int
    epoch_losses: list[float]   # mean training loss of each epoch
    seconds: float


def _as_inputs(batch) -> tuple:
    return tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)


def calibrate(model: torch.nn.Module, batches: Iterable) -> list[QuantizerRecord]:
    """Runs the float model over `batches` (each the model's input tensor, or a tuple of its inputs), records
    every activation's min/max and sets its (scale, zero_point) by ortx's activation_parameters; then the model
    fake-quantizes (mode "quantize"). Calling it again starts the ranges afresh (a learned scale is reset)."""
    quantizers = activation_quantizers(model)
    if not quantizers:
        raise ValueError("the model has no activation quantizers: pass it through ortx.qat.prepare first")
    for quantizer in quantizers:
        quantizer.observed_min.fill_(float("inf"))
        quantizer.observed_max.fill_(-float("inf"))
    set_mode(model, "observe")
    was_training = model.training
    model.eval()
    count = 0
    with torch.no_grad():
        for batch in batches:
            model(*_as_inputs(batch))
            count += 1
    model.train(was_training)
    if count == 0:
        raise ValueError("calibration got no batches")
    for quantizer in quantizers:
        quantizer.freeze_observation()
    set_mode(model, "quantize")
    return [QuantizerRecord(quantizer.name, float(quantizer.observed_min), float(quantizer.observed_max),
                            float(quantizer.scale.detach()), int(quantizer.zero_point))
            for quantizer in quantizers]


def fine_tune(model: torch.nn.Module, batches: Iterable, *, epochs: int = 1, learning_rate: float = 1e-4,
              loss_function: Callable = torch.nn.functional.cross_entropy,
              optimizer: torch.optim.Optimizer | None = None) -> FineTuneReport:
    """Trains the calibrated fake-quantized model: each batch is (inputs, targets), inputs a tensor or a tuple;
    Adam at `learning_rate` over all parameters (weights, biases, learned scales) unless `optimizer` is given.
    `batches` is iterated once per epoch, so more than one epoch needs a list or a DataLoader, not an iterator.
    Leaves the model in eval mode."""
    quantizers = activation_quantizers(model)
    uncalibrated = [quantizer.name for quantizer in quantizers if not bool(quantizer.calibrated)]
    if not quantizers or uncalibrated:
        raise ValueError("run ortx.qat.calibrate before fine_tune"
                         + (f" (uncalibrated: {', '.join(uncalibrated)})" if uncalibrated else ""))
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, not {epochs}")
    if epochs > 1 and iter(batches) is batches:
        raise ValueError("batches is a one-shot iterator; pass a list or a DataLoader to train more than 1 epoch")
    set_mode(model, "quantize")
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=learning_rate)
    start, steps, epoch_losses = time.perf_counter(), 0, []
    model.train()
    try:
        for _ in range(epochs):
            total, count = 0.0, 0
            for inputs, targets in batches:
                loss = loss_function(model(*_as_inputs(inputs)), targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total, count, steps = total + loss.item(), count + 1, steps + 1
            if count == 0:
                raise ValueError("fine_tune got no batches")
            epoch_losses.append(total / count)
    finally:
        model.eval()
    return FineTuneReport(epochs, steps, epoch_losses, time.perf_counter() - start)
