"""Knowledge distillation (extra `ortx[torch]`): a torch student learns from an ONNX teacher that ONNX Runtime runs.

    report = ortx.distill(teacher="resnet.onnx", student=torch_module, data=batches, temperature=4.0, alpha=0.7)
    onnx_model = ortx.distillation.export_student(student, example_input, "student.onnx")

1. The teacher is any ONNX model a user has: loaded by ortx.model_io (checked, IR version clamped) and run by plain
   onnxruntime on CPU, one call per batch, on the batch's inputs as numpy (no gradients flow into it).
2. Loss per batch (Hinton et al. 2015): alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T))
   + (1 - alpha) * cross_entropy(student, labels); T^2 keeps the soft term's gradient scale independent of T.
   With labels absent (batches of inputs only) alpha must be 1.
3. keep_zeros=True (the default) records which student weights are exactly zero before training and zeroes them
   again after every optimizer step: a pruned student stays exactly as sparse (pruning plus recovery).
4. With `validation` batches, the student is scored (top-1, then loss) before training and after each epoch and
   the best weights are kept, as ortx.qat.fine_tune does.
Limits: the teacher's first output is the logits, and the student returns one logits tensor of the same shape.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import time
from typing import Iterable

import numpy as np

TORCH_EXTRA_MESSAGE = "ortx.distill needs the torch extra: pip install 'ortx[torch]'"


@dataclasses.dataclass
class DistillReport:
    epochs: int
    steps: int
    epoch_losses: list[float]  # mean total loss per epoch
    seconds: float
    validation_scores: list[tuple[float, float]]  # (top-1, loss) before training and after each epoch
    best_epoch: int | None  # 0 = the starting weights; None without validation
    zeros_kept: int  # student weights held at zero (keep_zeros)
    teacher_seconds: float  # time spent in the teacher (ORT)


def _torch():
    try:
        import torch
    except ImportError as error:
        raise ImportError(TORCH_EXTRA_MESSAGE) from error
    return torch


class OnnxTeacher:
    """An ONNX model run by onnxruntime on CPU, returning its first output for a batch of inputs."""

    def __init__(self, model, *, threads: int = 0):
        import onnxruntime

        from ortx.model_io import load, to_ort_bytes

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(to_ort_bytes(load(model)), options,
                                                    providers=["CPUExecutionProvider"])
        self.input_names = [arg.name for arg in self.session.get_inputs()]
        self.seconds = 0.0

    def __call__(self, inputs: tuple) -> np.ndarray:
        if len(inputs) != len(self.input_names):
            raise ValueError(f"the teacher takes {len(self.input_names)} input(s) {self.input_names}; the batch has "
                             f"{len(inputs)}")
        feeds = {name: value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
                 for name, value in zip(self.input_names, inputs)}
        start = time.perf_counter()
        try:
            logits = self.session.run(None, feeds)[0]
        except Exception as error:  # ORT's message names the input; add which side it came from
            raise ValueError(f"the teacher could not run this batch: {error}") from error
        self.seconds += time.perf_counter() - start
        return logits


def _split(batch) -> tuple[tuple, object]:
    """(inputs tuple, labels or None): a batch is (inputs, labels) when it is a pair whose second item is a 1-D
    integer array or tensor; otherwise it is the inputs alone (a tensor or a tuple of them)."""
    torch = _torch()
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and _looks_like_labels(batch[1]):
        inputs, labels = batch
    else:
        inputs, labels = batch, None
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    inputs = tuple(torch.as_tensor(value) for value in inputs)
    return inputs, None if labels is None else torch.as_tensor(labels)


def _looks_like_labels(value) -> bool:
    dtype = str(getattr(value, "dtype", ""))
    return "int" in dtype and getattr(value, "ndim", 0) == 1


def distillation_loss(student_logits, teacher_logits, labels, *, temperature: float, alpha: float):
    torch = _torch()
    functional = torch.nn.functional
    soft = functional.kl_div(functional.log_softmax(student_logits / temperature, dim=-1),
                             functional.softmax(teacher_logits / temperature, dim=-1), reduction="batchmean")
    loss = alpha * temperature * temperature * soft
    if alpha < 1.0:
        loss = loss + (1.0 - alpha) * functional.cross_entropy(student_logits, labels)
    return loss


def _evaluate(student, validation, teacher, temperature, alpha) -> tuple[float, float]:
    torch = _torch()
    correct = total = 0
    loss_sum = 0.0
    with torch.no_grad():
        for batch in validation:
            inputs, labels = _split(batch)
            if labels is None:
                raise ValueError("validation batches need labels: (inputs, labels)")
            logits = student(*inputs)
            teacher_logits = torch.from_numpy(np.ascontiguousarray(teacher(inputs)))
            loss_sum += float(distillation_loss(logits, teacher_logits, labels, temperature=temperature,
                                                alpha=alpha)) * len(labels)
            correct += int((logits.argmax(-1) == labels).sum())
            total += len(labels)
    return correct / max(1, total), loss_sum / max(1, total)


def distill(teacher, student, data: Iterable, *, temperature: float = 4.0, alpha: float = 0.7, epochs: int = 5,
            learning_rate: float = 1e-3, optimizer=None, validation: Iterable | None = None, keep_zeros: bool = True,
            teacher_threads: int = 0) -> DistillReport:
    """Trains `student` (a torch.nn.Module) in place on `data` (re-iterable batches of (inputs, labels), or of
    inputs alone with alpha=1) against `teacher` (a path, bytes or onnx.ModelProto). Leaves it in eval mode."""
    torch = _torch()
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs!r}")
    if epochs > 1 and iter(data) is data:
        raise ValueError("data is a one-shot iterator; pass a list or a DataLoader to train more than 1 epoch")
    if validation is not None and iter(validation) is validation:
        raise ValueError("validation is a one-shot iterator; pass a list or a DataLoader")
    runner = teacher if isinstance(teacher, OnnxTeacher) else OnnxTeacher(teacher, threads=teacher_threads)
    masks = {}
    if keep_zeros:
        masks = {name: parameter.detach() != 0 for name, parameter in student.named_parameters()
                 if parameter.dim() > 1 and bool((parameter.detach() == 0).any())}
    parameters = dict(student.named_parameters())
    optimizer = optimizer or torch.optim.Adam(student.parameters(), lr=learning_rate)
    start, steps, losses, scores, best = time.perf_counter(), 0, [], [], None
    if validation is not None:
        scores.append(_evaluate(student, validation, runner, temperature, alpha))
        best = (0, copy.deepcopy(student.state_dict()))
    try:
        for epoch in range(1, epochs + 1):
            student.train()
            total, count = 0.0, 0
            for batch in data:
                inputs, labels = _split(batch)
                if labels is None and alpha < 1.0:
                    raise ValueError(f"alpha={alpha} weighs the label loss, but the batches have no labels; pass "
                                     "(inputs, labels) batches or alpha=1.0")
                teacher_logits = torch.from_numpy(np.ascontiguousarray(runner(inputs)))
                student_logits = student(*inputs)
                if tuple(student_logits.shape) != tuple(teacher_logits.shape):
                    raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                                     f"{tuple(teacher_logits.shape)} differ in shape")
                loss = distillation_loss(student_logits, teacher_logits, labels, temperature=temperature, alpha=alpha)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                with torch.no_grad():
                    for name, mask in masks.items():
                        parameters[name].mul_(mask)
                total, count, steps = total + float(loss.detach()), count + 1, steps + 1
            if count == 0:
                raise ValueError("distill got no batches")
            losses.append(total / count)
            if validation is not None:
                scores.append(_evaluate(student, validation, runner, temperature, alpha))
                if scores[-1][0] > scores[best[0]][0] or (scores[-1][0] == scores[best[0]][0]
                                                          and scores[-1][1] < scores[best[0]][1]):
                    best = (epoch, copy.deepcopy(student.state_dict()))
    finally:
        student.eval()
    if best is not None:
        student.load_state_dict(best[1])
    zeros = sum(int((~mask).sum()) for mask in masks.values())
    return DistillReport(epochs, steps, losses, time.perf_counter() - start, scores,
                         None if best is None else best[0], zeros, runner.seconds)


def export_student(student, example_inputs, path: str | os.PathLike | None = None, *,
                   input_names: list[str] | None = None, output_names: list[str] | None = None,
                   dynamic_batch: bool = True):
    """The student as standard ONNX (torch.onnx.export, IR version clamped for ORT); saved atomically to `path`."""
    torch = _torch()
    from ortx.model_io import clamp_ir_version, save

    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    dynamic_shapes = tuple({0: torch.export.Dim.DYNAMIC} for _ in inputs) if dynamic_batch else None
    student.eval()
    program = torch.onnx.export(student, inputs, dynamo=True, verbose=False, input_names=input_names,
                                output_names=output_names, dynamic_shapes=dynamic_shapes)
    proto = clamp_ir_version(program.model_proto)
    if path is not None:
        save(proto, path)
    return proto
