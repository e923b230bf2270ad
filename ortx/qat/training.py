"""calibrate (activation ranges from float passes, as ortx PTQ's MinMax) and fine_tune (a short training loop
through the fake-quantized model) for a model from ortx.qat.prepare."""
from __future__ import annotations

import copy
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
    # with validation data: (top-1, mean loss) before training (index 0) and after each epoch, and the epoch whose
    # weights the model keeps (0: the calibrated model as it came in)
    validation: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    kept_epoch: int | None = None


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


def _evaluate(model: torch.nn.Module, batches: Iterable, loss_function: Callable) -> tuple[float, float]:
    """Top-1 (argmax of the outputs against class targets) and the mean loss over held-out batches."""
    correct, seen, loss_sum = 0, 0, 0.0
    model.eval()
    with torch.no_grad():
        for inputs, targets in batches:
            outputs = model(*_as_inputs(inputs))
            loss_sum += float(loss_function(outputs, targets, reduction="sum"))
            correct += int((outputs.argmax(1) == targets).sum())
            seen += len(targets)
    if seen == 0:
        raise ValueError("fine_tune got empty validation data")
    return correct / seen, loss_sum / seen


def fine_tune(model: torch.nn.Module, batches: Iterable, *, epochs: int = 1, learning_rate: float = 1e-4,
              loss_function: Callable = torch.nn.functional.cross_entropy,
              optimizer: torch.optim.Optimizer | None = None, validation: Iterable | None = None) -> FineTuneReport:
    """Trains the calibrated fake-quantized model: each batch is (inputs, targets), inputs a tensor or a tuple;
    Adam at `learning_rate` over all parameters (weights, biases, learned scales) unless `optimizer` is given.
    `batches` is iterated once per epoch, so more than one epoch needs a list or a DataLoader, not an iterator.
    With `validation` (held-out (inputs, class targets) batches, re-iterable), the fake-quantized model is scored
    before training and after each epoch and keeps the best weights (top-1, then loss): fine-tuning a model already
    near its optimum can lose accuracy, and the calibrated starting point stays a candidate. `loss_function` must
    take `reduction=` to score validation data. Leaves the model in eval mode."""
    quantizers = activation_quantizers(model)
    uncalibrated = [quantizer.name for quantizer in quantizers if not bool(quantizer.calibrated)]
    if not quantizers or uncalibrated:
        raise ValueError("run ortx.qat.calibrate before fine_tune"
                         + (f" (uncalibrated: {', '.join(uncalibrated)})" if uncalibrated else ""))
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, not {epochs}")
    if epochs > 1 and iter(batches) is batches:
        raise ValueError("batches is a one-shot iterator; pass a list or a DataLoader to train more than 1 epoch")
    if validation is not None and iter(validation) is validation:
        raise ValueError("validation is a one-shot iterator; pass a list or a DataLoader")
    set_mode(model, "quantize")
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=learning_rate)
    start, steps, epoch_losses, scores = time.perf_counter(), 0, [], []
    best = None
    if validation is not None:
        scores.append(_evaluate(model, validation, loss_function))
        best = (0, copy.deepcopy(model.state_dict()))
    try:
        for epoch in range(1, epochs + 1):
            model.train()
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
            if validation is not None:
                scores.append(_evaluate(model, validation, loss_function))
                top1, loss = scores[-1]
                best_top1, best_loss = scores[best[0]]
                if top1 > best_top1 or (top1 == best_top1 and loss < best_loss):
                    best = (epoch, copy.deepcopy(model.state_dict()))
    finally:
        model.eval()
    if best is not None:
        model.load_state_dict(best[1])
    return FineTuneReport(epochs, steps, epoch_losses, time.perf_counter() - start, scores,
                          None if best is None else best[0])
