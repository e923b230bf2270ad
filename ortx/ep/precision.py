"""OrtxEP's `precision` option: what "bf16" means, and a numpy reference of it.

precision="fp32" (the default) runs every kernel in float32. precision="bf16" runs the GEMMs and convolutions
whose weights are constant (Gemm, MatMul with a constant B, dense and grouped Conv/FusedConv, and ConvTranspose
whose kernel equals its stride without padding, from 64 input channels per group) with bf16 operands and fp32
accumulation, and so do both activation x activation products of a fused MultiHeadAttention step
(multi_head_attention_bf16: Q, K, the probabilities and V rounded to bf16, the scale and the softmax in fp32); every
other op, and everything around those GEMMs, stays fp32: softmax, normalisation statistics, depthwise convs, other
transposed convs, the products of an unfused ScaledDotProductAttention, and the epilogues (bias, residual,
activation), which run on the fp32 accumulators. The 1x1 convs of blocked runs
(ortx.ep.lowering.blocked_layout) run conv_pointwise_nchwc_bf16, the same numerics with vdpbf16ps's pair order (on
AMX, its tdpbf16ps steps: step 3); a network's stem that writes into such a run (a dense conv from at most 4
channels) stays fp32 (faster there). On AMX the tensors of such a run that only 1x1, depthwise and dense bf16 convs
(or a MaxPool) read travel as bf16 pair rows (kernels/pair_rows.h): the values the 1x1 and dense convs round them to
anyway, and, for a depthwise conv's or a MaxPool's input or a dense conv's residual, bf16 activations (their sums,
maxima and residual additions stay fp32; blocked_layout.pair_rows_values).
Provider option `fp32_nodes` names nodes of a bf16 session computed at fp32 accuracy from unrounded (fp32) inputs and
weights (mark_fp32_nodes marks them in the prepared graph; the lowerings ask SegmentBuilder.precision_of): for layers
where bf16's error grows most. Their kernels are the fp32 ones, except a 1x1 conv on the AMX path of a blocked run,
which runs conv_pointwise_bf16x3 (kernels/conv_pointwise_nchwc_amx.c step 5: each input value and weight split into
its bf16 rounding and the remainder's, three tdpbf16ps products per pair, within about 2^-16 of each product;
tests/kernels/test_pointwise_bf16x3.py): as accurate for this purpose and cheaper than fp32 multiply-adds. Its output,
where only bf16 depthwise convs read it, is written as the pair rows they read (their bf16 activations, rounded once):
the rounding belongs to the reader. A depthwise conv whose output only such a 1x1 conv reads runs with it as one
conv_depthwise_bf16x3 step (kernels/conv_depthwise_bf16x3.c): its fp32 rows stay in the thread's band buffer.
MobileNetV2-style (random weights) with its first 8 conv layers fp32: output cosine against fp32 0.9993-0.9994 instead
of 0.9982-0.9987 on three inputs, at 1.26x the time (2 threads, session 30, fp32 kernels; where its error comes from:
benchmarks/bf16_sensitivity.py). Its first five expand convs and first two projections (conv_29, conv_56, conv_84,
conv_111, conv_139, conv_22, conv_49, as that script's "by role" rows suggest) with bf16x3: cosine 0.99904-0.99941 on
8 standard-normal inputs at 1.11x the all-bf16 time (1.12x with the depthwise convs unfused, 1.27x with fp32 kernels;
session 33, paired in one process). `ortx fp32-nodes` (ortx.ep.fp32_nodes_search) chooses them by measurement for a
cosine target on given inputs: on MobileNetV2-style 5 layers for 0.999 (conv_22, conv_29, conv_84, conv_104, conv_111;
worst cosine 0.99902 on 4 random inputs) at 1.15-1.17x with fp32 kernels (session 31).

Where bf16 does not pay: provider option `bf16_compute` 'auto' (the default) runs a bf16 session's kernels in fp32 on
a CPU whose bf16 path has no faster multiply-add than fp32's (effective_precision): the portable path (no
AVX512_BF16: fp32 arithmetic on rounded values), or vdpbf16ps measured below BF16_PAYS_FROM x the fp32 rate in
multiply-adds per second (kernels/host_probe.c host_dot_rates, once per process). On the Intel model 167 host with
AMX turned off vdpbf16ps reads 0.5x (one every other cycle against two vfmadd231ps a cycle): bf16 sessions ran
ResNet-18-style at 1.70x ONNX Runtime's fp32 time and BERT-like at 1.25x (session 36, `benchmarks/bf16.py
--no-amx`); fp32 there is faster and exact. AMX (tdpbf16ps) always pays. 'always' keeps the bf16 kernels.

The numerics, which kernels/gemm_bf16.h implements and tests check against `bf16_matmul`:
1. Every operand element (weights and activations alike) is rounded to bf16 as vcvtne2ps2bf16 rounds: to nearest,
   ties to even; NaN stays NaN (quieted); infinities stay; fp32 denormals become zero of the same sign; values
   above bf16's largest finite round to infinity.
2. Products of two bf16 values are exact in fp32; the sums are fp32 additions. The reference adds in ascending k;
   the kernels add k pairs in order, odd product first (vdpbf16ps's order), so they differ from the reference
   by reassociation only: within `tests/tolerances.py`'s bf16_reassociation entry, and within its bf16 entry of
   the float32 result.
3. On a CPU with AMX-BF16 the GEMMs (and the blocked 1x1 convs, kernels/conv_pointwise_nchwc_amx.c) run tdpbf16ps
   (kernels/gemm_bf16_amx.c), whose order and rounding inside a 16-pair tile step are the hardware's, not
   vdpbf16ps's sequence (measured: a pair whose products cancel keeps a small third term that vdpbf16ps rounds away;
   31 tiny terms after a 1 keep 16 of them, vdpbf16ps none), and it flushes denormal products. So that path is not
   bitwise the portable one; per output it is within `tests/tolerances.py`'s BF16_SUM_ERROR_UNITS x 2^-24 x sum_k
   |a_k b_k| of the exact sum of the rounded operands (measured on normal, positive and wide-range operands with K
   up to 4608: at most 12.1 units, vdpbf16ps 17.4).
"""
from __future__ import annotations

import functools

import numpy as np

from ortx.ep.assignment import nodes_by_user_name

PRECISIONS = ("fp32", "bf16")
BF16_COMPUTE = ("auto", "always")  # provider option bf16_compute (effective_precision)
BF16_PAYS_FROM = 1.25  # vdpbf16ps's multiply-adds per second over fp32's from which bf16 kernels run
KERNEL_SUFFIX = {"fp32": "f32", "bf16": "bf16"}  # the GEMM kernels of each: gemm_f32, gemm_bf16, ...
# Provider option fp32_nodes: nodes of a bf16 session that keep every kernel fp32, marked in the prepared graph
# (mark_fp32_nodes); the lowerings ask SegmentBuilder.precision_of(node).
PRECISION_KEY = "ortx.precision"


def mark_fp32_nodes(graph, names, fused_from_key: str) -> None:
    """Marks the graph's nodes named in `names` fp32: a name the graph passes fused into another node (a Conv's
    BatchNormalization, say) marks that node. Raises ValueError naming the option and every name not found."""
    holders = nodes_by_user_name(graph, fused_from_key)
    missing = [name for name in names if name not in holders]
    if missing:
        raise ValueError(f"OrtxEP option fp32_nodes: {', '.join(repr(name) for name in missing)} not in the graph "
                         f"after the graph passes (removed, or a name the model does not have); its nodes: "
                         f"{sorted(node.name for node in graph)[:20]}")
    for name in names:
        for node in holders[name]:
            node.metadata_props[PRECISION_KEY] = "fp32"


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 array of the same shape holding bf16(values) (step 1 above)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    denormal = (bits & 0x7F800000) == 0
    rounded = bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))
    result = np.where(nan, bits | np.uint32(0x00400000), rounded)
    result = np.where(denormal, bits & np.uint32(0x80000000), result)
    return (result & np.uint32(0xFFFF0000)).astype(np.uint32).view(np.float32)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """The uint16 bf16 encodings of `values` (as the packed weights store them)."""
    return (round_to_bf16(values).view(np.uint32) >> 16).astype(np.uint16)


def bf16_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b with both operands rounded to bf16 and fp32 products and sums, k ascending (step 2's reference)."""
    a16, b16 = round_to_bf16(a), round_to_bf16(b)
    result = np.zeros(a16.shape[:-1] + b16.shape[-1:], dtype=np.float32)
    for k in range(a16.shape[-1]):
        result += a16[..., k:k + 1] * b16[..., k:k + 1, :]
    return result


@functools.cache
def dot_rates() -> tuple[float, float]:
    """(fp32, bf16) multiply-adds per nanosecond on one core (kernels/host_probe.c host_dot_rates; bf16 0 without
    AVX512_BF16, both 0 below AVX-512); measured once per process."""
    from ortx import _kernels

    rates = np.zeros(2, dtype=np.float64)
    _kernels.call("host_dot_rates", [], [], [rates])
    return float(rates[0]), float(rates[1])


def bf16_compute_pays() -> tuple[bool, str]:
    """(whether this CPU's bf16 kernels multiply-add faster than its fp32 ones, why not when they do not)."""
    from ortx import _kernels

    path = _kernels.bf16_isa()
    if path == "amx_bf16":
        return True, ""
    if path != "avx512_bf16":
        return False, (f"this CPU's bf16 path is {path!r} (no AVX512_BF16 in use): bf16 products run as fp32 "
                       "arithmetic on rounded values")
    fp32, bf16 = dot_rates()
    if fp32 > 0 and bf16 >= BF16_PAYS_FROM * fp32:
        return True, ""
    return False, (f"this CPU's bf16 dot product (vdpbf16ps) measured {bf16:.1f} G multiply-adds/s on one core "
                   f"against {fp32:.1f} G in fp32 ({bf16 / fp32 if fp32 else 0:.2f}x; bf16 pays from "
                   f"{BF16_PAYS_FROM}x)")


def effective_precision(requested: str, bf16_compute: str = "auto") -> tuple[str, str]:
    """(the precision a session's kernels run, a note saying why when it is not `requested`): a bf16 session runs
    fp32 where bf16 would be slower (module docstring, "Where bf16 does not pay") unless bf16_compute is 'always'."""
    if requested != "bf16" or bf16_compute == "always":
        return requested, ""
    pays, why = bf16_compute_pays()
    if pays:
        return requested, ""
    return "fp32", (f"precision 'bf16' runs fp32 kernels here: {why}, so fp32 is faster and exact; provider option "
                    "bf16_compute='always' keeps the bf16 kernels")
