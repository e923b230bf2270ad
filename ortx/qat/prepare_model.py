"""prepare: a torch model -> a torch.fx GraphModule that fake-quantizes as ortx PTQ quantizes, to calibrate and
fine-tune (ortx/qat/train.py) and export to QDQ ONNX (ortx/qat/export.py).

1. torch.fx.symbolic_trace a deep copy (the caller's model is never changed); data-dependent control flow fails
   there, with fx's message.
2. Fold each BatchNorm whose input is a Conv's only use into that Conv (eval statistics: w' = w g / sqrt(v + e),
   b' = (b - m) g / sqrt(v + e) + beta), as `ortx quantize` folds it (-O2) before quantizing, so the int8 weights
   trained are the ones that run.
3. Wrap each nn.Conv1d/2d/3d and nn.Linear module not excluded in a QuantizedCompute: weight per output channel
   symmetric int8, bias on the int32 grid of input scale x weight scale.
4. One ActivationQuantizer per tensor those modules read, shared by all of them (ortx inserts one Q/DQ pair per
   tensor) and read only by them: a residual Add or any other consumer keeps the float tensor, as in ortx's QDQ.
Limits: functional convolutions (F.conv2d), torch.matmul and ConvTranspose stay float, and export leaves their
ONNX nodes float; a BatchNorm that does not follow a Conv stays a BatchNorm (and trains in fine_tune).
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Iterable

import torch

from ortx.qat.fake_quant import MODES, ActivationQuantizer, quantize_bias, quantize_weight
from ortx.quantization.scales import MIN_SCALE

COMPUTE_MODULES = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Linear)
BATCH_NORMS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
SCALE_MODES = ("observed", "learned")


@dataclasses.dataclass
class PrepareReport:
    activation_dtype: str
    scales: str
    batch_norms_folded: list[tuple[str, str]]   # (conv, batch norm) module names
    modules_quantized: list[str]
    activation_quantizers: list[str]
    excluded: list[str]


class QuantizedCompute(torch.nn.Module):
    """A Conv or Linear module with fake-quantized weight and bias; `input_scale` is its input quantizer's scale.
    Modes: "observe" and "export" run the float module (calibration statistics come from the float model, as in
    PTQ; export hands ortx the float weights to quantize), "quantize" the fake-quantized one."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module
        self.mode = "observe"

    def forward(self, values: torch.Tensor, input_scale: torch.Tensor) -> torch.Tensor:
        if self.mode != "quantize":
            return self.module(values)
        weight, scales = quantize_weight(self.module.weight)
        bias = self.module.bias
        if bias is not None:
            bias = quantize_bias(bias, input_scale.clamp_min(MIN_SCALE), scales)
        if isinstance(self.module, torch.nn.Linear):
            return torch.nn.functional.linear(values, weight, bias)
        return self.module._conv_forward(values, weight, bias)


def set_mode(model: torch.nn.Module, mode: str) -> None:
    """Puts every quantizer and quantized module of `model` in `mode` (observe, quantize, export)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    for module in model.modules():
        if isinstance(module, (ActivationQuantizer, QuantizedCompute)):
            module.mode = mode


def activation_quantizers(model: torch.nn.Module) -> list[ActivationQuantizer]:
    return [module for module in model.modules() if isinstance(module, ActivationQuantizer)]


def _fold_batch_norm(conv: torch.nn.Module, norm: torch.nn.Module) -> None:
    with torch.no_grad():
        variance = norm.running_var.double()
        gamma = norm.weight.double() if norm.weight is not None else torch.ones_like(variance)
        beta = norm.bias.double() if norm.bias is not None else torch.zeros_like(variance)
        factor = gamma / torch.sqrt(variance + norm.eps)
        bias = conv.bias.double() if conv.bias is not None else torch.zeros_like(variance)
        shape = (-1,) + (1,) * (conv.weight.dim() - 1)
        conv.weight.copy_((conv.weight.double() * factor.reshape(shape)).to(conv.weight.dtype))
        folded = ((bias - norm.running_mean.double()) * factor + beta).to(conv.weight.dtype)
        if conv.bias is None:
            conv.bias = torch.nn.Parameter(folded)
        else:
            conv.bias.copy_(folded)


def _fold_batch_norms(graph_module: torch.fx.GraphModule) -> list[tuple[str, str]]:
    folded = []
    modules = dict(graph_module.named_modules())
    for node in list(graph_module.graph.nodes):
        if node.op != "call_module" or not isinstance(modules.get(node.target), BATCH_NORMS):
            continue
        source, norm = node.args[0], modules[node.target]
        if not (isinstance(source, torch.fx.Node) and source.op == "call_module"
                and isinstance(modules.get(source.target), CONVS) and len(source.users) == 1):
            continue
        if norm.running_mean is None or norm.running_var is None:
            continue  # batch statistics only: nothing constant to fold
        _fold_batch_norm(modules[source.target], norm)
        node.replace_all_uses_with(source)
        graph_module.graph.erase_node(node)
        folded.append((source.target, node.target))
    return folded


def _replace_module(graph_module: torch.fx.GraphModule, path: str, module: torch.nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    setattr(graph_module.get_submodule(parent_path) if parent_path else graph_module, name, module)


def prepare(model: torch.nn.Module, *, activation_dtype: str = "uint8", scales: str = "observed",
            exclude: Iterable[str] = ()) -> torch.fx.GraphModule:
    """A fake-quantizing copy of `model` (steps in the module docstring), in mode "observe": run
    ortx.qat.calibrate next. `exclude`: names of Conv/Linear modules (as in model.named_modules()) to leave float.
    `scales`: "observed" (calibrated range, then fixed) or "learned" (LSQ, starting from the calibrated range).
    The returned module's `ortx_qat` attribute is a PrepareReport."""
    if activation_dtype not in ("int8", "uint8"):
        raise ValueError(f"activation_dtype must be 'int8' or 'uint8', not {activation_dtype!r}")
    if scales not in SCALE_MODES:
        raise ValueError(f"scales must be one of {', '.join(SCALE_MODES)}, not {scales!r}")
    exclude = set(exclude)
    known = {name for name, module in model.named_modules() if isinstance(module, COMPUTE_MODULES)}
    unknown = sorted(exclude - known)
    if unknown:
        raise ValueError(f"excluded module name(s) {', '.join(map(repr, unknown))} are not Conv/Linear modules of "
                         f"the model (those are: {', '.join(sorted(known)) or 'none'})")
    try:
        graph_module = torch.fx.symbolic_trace(copy.deepcopy(model).eval())
    except Exception as error:  # fx raises TraceError, TypeError, ... for code it cannot trace
        raise ValueError(f"ortx.qat.prepare traces the model with torch.fx, which failed (data-dependent control "
                         f"flow or non-tensor logic in forward?): {error}") from error
    graph = graph_module.graph
    folded = _fold_batch_norms(graph_module)
    modules = dict(graph_module.named_modules())
    quantizer_of: dict[torch.fx.Node, tuple[str, torch.fx.Node]] = {}
    quantized, excluded = [], []
    for node in list(graph.nodes):
        if node.op != "call_module" or not isinstance(modules.get(node.target), COMPUTE_MODULES):
            continue
        if node.target in exclude:
            excluded.append(node.target)
            continue
        source = node.args[0]
        if source not in quantizer_of:
            name = f"{source.name}_quantizer"
            while hasattr(graph_module, name):
                name += "_"
            graph_module.add_submodule(name, ActivationQuantizer(activation_dtype, learn_scale=scales == "learned",
                                                                 name=name))
            with graph.inserting_before(node):
                quantizer_of[source] = (name, graph.call_module(name, (source,)))
        name, quantizer_node = quantizer_of[source]
        with graph.inserting_before(node):
            scale_node = graph.get_attr(f"{name}.scale")
        _replace_module(graph_module, node.target, QuantizedCompute(modules[node.target]))
        node.args = (quantizer_node, scale_node)
        quantized.append(node.target)
    graph_module.delete_all_unused_submodules()
    graph.lint()
    graph_module.recompile()
    graph_module.ortx_qat = PrepareReport(activation_dtype, scales, folded, quantized,
                                          [name for name, _ in quantizer_of.values()], excluded)
    return graph_module
