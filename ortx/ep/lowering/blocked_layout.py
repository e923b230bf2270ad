"""Runs of pointwise and depthwise convs on blocked tensors (kernels/conv.h's NCHWc: 16 channels per vector).

Why: a MobileNet-style block is 1x1 conv -> depthwise conv -> 1x1 conv. In NCHW each 1x1 conv is a GEMM whose
vector dimension runs over the pixels (7x7 maps fill 49 of 64 lanes) and the depthwise conv transposes its input
and output; blocked, the 1x1 conv's tile keeps 16 output channels per register with no packing
(conv_pointwise_nchwc_f32) and the depthwise conv reads and writes the layout its tiles already use
(conv2d_depthwise_nchwc_f32). ONNX Runtime's CPU EP does the same with its NCHWc transformer.

1. `blocked_nodes` picks the nodes, once per segment before lowering. An fp32 Conv/FusedConv with constant
   bias *reads and writes* blocked tensors when it is pointwise (1x1, stride 1, no padding, one group, dense
   weights: not chosen sparse), a strided 1x1 conv of an fp32 session (ResNet's projection shortcuts:
   `is_strided_pointwise`, a strided_copy of the kept pixels into a workspace, then the 1x1 conv), a dense
   strided conv of an fp32 session from at least DENSE_MIN_CHANNELS channels (ResNet v1.5's stride-2 3x3 convs:
   `is_dense_strided`, conv2d_nchwc_f32), a stride-1 dense conv on a small map or with few channels
   (`is_dense_direct`, conv2d_nchwc_f32) or depthwise (group == Cin == Cout); a dense one-group conv from at most
   STEM_MAX_CHANNELS channels without residual (a stem) *writes* them (conv2d_to_nchwc_f32); and only while the
   kernels' ISA is AVX-512 (elsewhere the blocked kernels are the portable loops, slower than the NCHW kernels). A
   tensor is a *blocked edge* when its producer writes blocked, every consumer reads blocked and takes it in a
   blocked role (a conv's X or FusedConv's residual, an elementwise node's output-shaped operand), and it is not a
   segment output. Blocked edges join nodes into runs; a run with a 1x1 or depthwise conv on a map of more than
   one pixel is lowered blocked (a stem, elementwise nodes or a squeeze-and-excitation block's convs alone gain
   nothing: PP-OCRv4 det's neck had a run of those that cost a 9.8 MB reorder), so a reorder is paid only where
   such a run meets the rest of the graph, never around a lone conv.
   Elementwise nodes whose operands are output-shaped or single elements (unary ops, Add/Sub/Mul/Div,
   ElementwiseChain) read and write blocked tensors too (flat, pad lanes included), so PP-LCNet's affine blocks
   and residual Adds do not cut a run. Measured on this Zen 4 at 2 threads, whole models against the same session
   on NCHW kernels: MobileNetV2-style 0.75x, PP-OCR cls 0.78x, rec 0.94x, det 0.95x. (Runs of 1x1 convs alone,
   cut at every affine block before elementwise nodes joined, had lost: det 47 reorders, 6.4 ms, 1.02-1.06x; a
   run-by-run estimate of gain against reorder bytes then dropped runs that the whole-model measurement shows
   winning, so every run is kept.)
   `expand_depthwise_pairs` then picks, among them, each 1x1 conv whose output only a depthwise conv reads
   (MobileNetV2's expand -> depthwise, PP-LCNet's 1x1 -> the next block's depthwise): the pair becomes one step,
   conv_expand_depthwise_nchwc_f32, whose expanded rows stay in the thread's scratch (kernels/
   conv_expand_depthwise.c). Fp32, 2 threads, against the same pairs unfused (benchmarks/expand_depthwise.py,
   rounds split by ortx.host_contention's probe), close / far apart: MobileNetV2-style 0.98x / 0.85x, PP-OCR cls
   0.93x / 0.87x, rec 1.02x / 0.97x, det 1.02x / 0.95x (their pairs are on smaller maps).
   Only where the depthwise conv is at least 8 columns wide and takes no residual (_fits_expand_rows).
2. `lower_blocked_conv` emits a blocked node's step: its X and residual come from `builder.blocked_buffer` (a reorder
   from NCHW where the producer was not blocked, once per tensor) and its output goes to
   `builder.produce_blocked`; the builder reorders it back to NCHW only if a non-blocked consumer or the segment's
   outputs need it. `lower_expand_depthwise` emits a pair's step at the depthwise conv's place; the 1x1 conv's
   output is never made.
Under precision bf16 the 1x1 convs run conv_pointwise_nchwc_bf16 (bf16 operands, fp32 sums, as the option
defines; the depthwise convs stay fp32 as in NCHW) and a stem that writes into a run stays fp32
(conv2d_to_nchwc_f32): its 3 input channels give the bf16 GEMM 14 K pairs, and the bf16 conv writes NCHW, which a
reorder then blocks (MobileNetV2-style's 3 -> 32 stem at 112x112, 2 threads, profiled: conv2d_bf16 0.200-0.207 ms
+ reorder 0.110-0.117 ms against conv2d_to_nchwc_f32's 0.178-0.181 ms). Session 34 (model 167 host, not kept,
branch stem-bf16x3): the stem as conv_pointwise_bf16x3's AMX steps over banded patches (27 values a patch, input
rows pixel-major in the thread's workspace) took 0.160 ms against conv2d_to_nchwc_f32's 0.113 (the AMX steps and
their fp32 epilogue alone 0.085: the 1.6 MB blocked output, not the multiply-adds, bounds this conv), the whole
model 1.054x.
On the AMX path, tensors inside a run that only 1x1, depthwise and dense convs (and a MaxPool) read are kept as
bf16 pair rows (`pair_rows_values`, kernels/pair_rows.h): half the bytes, and the 1x1 convs' AMX tiles load them as
they lie.
Under bf16 on AMX, dense convs that take the AMX direct form (`dense_bf16_blocked`: one group, conv2d_bf16's
shape rule) read and write blocked tensors too (conv2d_bf16_nchwc: its chunk planes filled from blocked vectors,
its C tile rows stored as blocked vectors, no transposes; a stem reads the NCHW input), and so does a 2-D MaxPool
(maxpool_nchwc_f32), so ResNet-style networks run blocked from the stem to the global pool. The bits are the NCHW
program's. Emerald Rapids VM, 2 threads, in-process A/B against DENSE_BF16 off: ResNet-18-style 0.79x (before the
blocked MaxPool 0.84x, a reorder of its output then entering the run), PP-OCR det 0.94x (its neck's 3x3 convs),
rec 0.99x, cls 1.00x, MobileNetV2-style and the BERT-like encoder 0.99x.
A nearest Resize of H and W joins a run where every reader of its output takes it blocked (`blocked_resize`: an
FPN's upsampled map into a blocked Add; the resize of the [N * C/16, H, W, 16] array): det 0.94x bf16, 0.97x fp32.
Strided 1x1 convs joined fp32 runs in session 38: before, a ResNet-50 stage's first block read its input X in NCHW
(the projection ran conv2d_f32), so X was reordered from blocked and the block's first 1x1 conv ran NCHW too; now X
stays blocked and only that 1x1 conv's output (half X's channels) is reordered for the 3x3 conv. Light ResNet-50
(the onnx wheel's model zoo architecture), 2 threads, 3 alternating processes: 1.09 -> 1.07x ORT. Its stride-2 3x3
convs, on conv2d_nchwc_f32 since, keep each bottleneck one run (they had reordered their input from blocked and
their output back): 1.06 -> 1.05x (3 alternating processes; the three convs 2.69 ms against ORT's 2.49 in one
profile, where before they and their reorders had cost 0.6 ms more than ORT's).
MaxPool in fp32 runs (session 40): a 2-D MaxPool joins fp32 runs too (before, only bf16 ones on AMX, lest it pull
a lone 1x1 conv into a run with two reorders). A 3-channel stem before it then writes blocked (conv2d_to_nchwc_f32:
SqueezeNet's 3x3/2 stem to 64 channels 0.19 ms against conv2d_f32's 0.39-0.47, profiled) and the 1x1 conv after it
reads them. Model 167 host, 2 threads, untuned, both sessions in one process, runs interleaved: SqueezeNet
0.93-0.96x, PP-OCR cls 0.96-0.98x, ResNet-50 and Inception v2 0.98x, Inception v1 1.00x; ResNet-18-style and
ShuffleNet, whose lowering it leaves unchanged, read 0.99-1.02x (the A/B's own spread). A lone 1x1 conv next to a
MaxPool, micro A/B: 0.81-0.93x in 6 of 8 shapes, 1.01x and 1.08x (192 -> 64 channels at 28x28 before a 3x3/2 pool)
in two. Not measured on the vdpbf16ps bf16 path, where it stays NCHW.
Dense stride-1 convs (session 41): where `is_dense_direct` holds (maps of at most 14x14, or at most 56x56 with Cin x
Cout <= 128 x 128, on a CPU with fast multiply-adds: `dense_direct_pays`) a stride-1 dense conv from at least 16
channels runs conv2d_nchwc_f32 on blocked tensors and makes a run by itself, so ResNet-18-style networks run blocked
from the stem to the pool and ResNet-50's, DenseNet's and Inception's 3x3 convs stop cutting their runs with two
reorders; larger ones stay on Winograd (NCHW), whose fewer multiply-adds win there. AMD Zen 5 host, 2 threads,
untuned, in-process A/B against Winograd for every stride-1 dense conv, interleaved: ResNet-18-style 0.88x,
ResNet-50 0.87x, DenseNet-121 0.82x, Inception v2 0.88x, SqueezeNet 0.87x, ZFNet-512 0.82x, AlexNet 0.96x, Inception
v1 0.97x, VGG-19 0.985x, MobileNetV2-style 0.98x, PP-OCR rec 0.97x, det 0.99-1.03x, cls 0.96-1.00x, ShuffleNet
1.00x. Every such conv blocked instead: VGG-19 1.27x and Inception v1 1.07x (VGG's 256@56 convs 1.65-1.85x, 512@28
1.23-1.30x per layer). Not measured on Intel hosts, where in session 40 Winograd beat the blocked conv (then one
call per tap) on SqueezeNet's 3x3 convs: off there.
Concats (session 41): where dense_direct_pays, a Concat along channels whose inputs are whole 16-channel blocks
joins a run where some reader takes its output blocked (`blocked_concat`; on blocked tensors each input is a run of
whole blocks of the output, so layout.concat_in_place still lets the producers write into the output): SqueezeNet's
fire modules and Inception's modules stay one run. AMD Zen 5, 2 threads, untuned, in-process A/B: SqueezeNet
0.76-0.90x, Inception v1 0.91x, Inception v2 0.90-0.93x, the other models 0.98-1.01x. With the stride-1 convs left
on Winograd (the lowering of the other hosts, simulated there) it lost: DenseNet-121 1.23x, Inception v2 1.10x,
SqueezeNet 1.035x, so it applies only where dense_direct_pays does.
Blocked Winograd (session 42): in fp32 sessions a 3x3 stride-1 dense conv (`is_winograd_blocked`, on CPUs where
dense_direct_pays) runs F(4x4, 3x3) on blocked tensors (conv2d_winograd_nchwc_f32: 2.25 multiply-adds per output for
9; its transforms on whole 16-channel vectors, its 36 GEMMs the 1x1 conv's tile), whatever its map, so such convs
also join runs that the NCHW Winograd cut with reorders. Kernel alone 0.30-0.76x conv2d_nchwc_f32's time (the rule's
docstring). AMD Zen 5, 2 threads, untuned, in-process A/B against it off (both build orders, geometric mean):
ResNet-18-style 0.68x, VGG-19 0.60x, Inception v1 and v2 0.79x, DenseNet-121 0.83x, SqueezeNet 0.88x, ResNet-50
0.90x, ZFNet-512 0.945x, AlexNet 0.98x; PP-OCR det, rec, cls and MobileNetV2-style (no such convs) 0.99-1.04x.
Dense convs under bf16 without AMX (session 42): on the vdpbf16ps path a dense one-group conv from at least 16
channels runs conv2d_nchwc_bf16 on blocked tensors (`dense_bf16_direct`; kernels/conv_nchwc_bf16.c: its input rounded
once into a zero-padded bf16 image, 6-pixel x 4-block vdpbf16ps tiles), and the strided 1x1 convs and MaxPools between
such convs join the runs, so ResNet-style networks run blocked from the stem to the pool as in fp32. The small-map
rule below then weighs the dense convs' multiply-adds with the 1x1 convs'. Kernel alone on ResNet-18's 3x3 shapes
against conv2d_bf16 on NCHW: 0.63-0.96x (415-467 G multiply-adds/s on 2 threads). AMD Zen 5, 2 threads, untuned,
in-process A/B against DENSE_BF16 off (sessions built in both orders, geometric mean): ResNet-18-style 0.88-0.89x,
ResNet-50 0.90x, DenseNet-121 0.93x, Inception v1 and v2 0.84x, SqueezeNet 0.77x, ZFNet-512 0.93x; PP-OCR rec and
cls, VGG-19 0.99-1.00x, AlexNet 1.02x; det's runs stay NCHW (its work is on large maps; with every run that holds a
dense conv kept, 1.02-1.05x). Since session 44 the small-map rule holds only on CPUs with a slower bf16 rate
(BF16_SMALL_MAP_MAX_RATE): with the 1x1 tiles' long forms there, the Zen 5 host runs det's and rec's runs blocked.
Limits: stride-1 dense convs other than 3x3 from more channels on larger maps neither read nor write blocked tensors
in fp32 sessions, so a run ends at them.
"""
from __future__ import annotations

import collections
import logging

import numpy as np
import onnx_ir as ir

from ortx import _kernels
from ortx.ep.lowering import _resize, elementwise, sparse
from ortx.ep.lowering._values import (NotStatic, attribute, constant_value, numpy_dtype, opset_version, present,
                                      static_shape)
from ortx.ep.precision import bf16_bits, round_to_bf16

LANES = 16
POINTWISE_LONG_PIXELS = 24  # kernels/conv.h's ORTX_POINTWISE_LONG_PIXELS: the bf16 tiles' scratch
logger = logging.getLogger(__name__)


def is_pointwise(plan) -> bool:
    """1x1, stride 1, no padding, one group (dilation does not matter for a 1x1 kernel)."""
    (_, _, height, width, _, out_height, out_width, kernel_height, kernel_width, stride_height, stride_width,
     pad_top, pad_left, _, _, group, *_) = plan.ints
    attributes = (kernel_height, kernel_width, stride_height, stride_width, pad_top, pad_left, group)
    return (attributes == (1, 1, 1, 1, 0, 0, 1)
            and (out_height, out_width) == (height, width))


DENSE_MIN_CHANNELS = 16  # a dense strided conv from fewer channels (a stem) stays off conv2d_nchwc_f32


def is_dense_strided(plan) -> bool:
    """A one-group conv larger than 1x1 with both strides above 1, from at least DENSE_MIN_CHANNELS channels:
    ResNet v1.5's stride-2 3x3 convs, which run conv2d_nchwc_f32 on blocked tensors in fp32 sessions. Its tile
    reads the 1x1 conv's way, a broadcast per channel, so few channels (a stem: 3) leave it idle: 7x7/2 from 3
    channels at 43 G multiply-adds/s against 154 for 128 -> 128 3x3/2. At stride 1 Winograd (NCHW) is faster."""
    (_, in_channels, _, _, _, _, _, kernel_height, kernel_width, stride_height, stride_width, *_,) = plan.ints
    return (not plan.depthwise and plan.ints[15] == 1 and kernel_height * kernel_width > 1
            and min(stride_height, stride_width) > 1 and in_channels >= DENSE_MIN_CHANNELS)


# Stride-1 dense convs that run conv2d_nchwc_f32 on blocked tensors in fp32 sessions (`is_dense_direct`): output
# maps of at most DIRECT_MAX_PIXELS, or of at most DIRECT_MAX_PIXELS_FEW_CHANNELS with Cin x Cout at most
# DIRECT_MAX_CHANNEL_PRODUCT; larger ones stay on Winograd (NCHW).
DIRECT_MAX_PIXELS = 14 * 14
DIRECT_MAX_PIXELS_FEW_CHANNELS = 56 * 56
DIRECT_MAX_CHANNEL_PRODUCT = 128 * 128
# ... on a CPU whose fp32 multiply-add rate (kernels/host_probe.c, per core) is at least this many per ns
DIRECT_MIN_FP32_RATE = 110.0


def dense_direct_pays() -> bool:
    """Whether is_dense_direct's rule applies on this CPU: where multiply-adds are fast against memory, Winograd's
    fewer multiply-adds no longer pay for its transforms. Measured only on the AMD Zen 5 host of session 41 (146
    fp32 multiply-adds per ns per core; ORT's NCHWc convs near that peak: ResNet-18-style at 420-450 GFLOP/s on 2
    threads). On the Intel hosts of sessions 23-40 (ORT 204 GFLOP/s there) Winograd beat the blocked direct conv
    (session 40, SqueezeNet's 3x3 convs, with the per-tap tile of then) and `ortx tune` replaces their NCHW convs
    with generated GEMMs, which a blocked conv would take out of the search: there the rule stays off."""
    from ortx.ep.precision import dot_rates

    return dot_rates()[0] >= DIRECT_MIN_FP32_RATE


def is_dense_direct(plan) -> bool:
    """A stride-1 one-group conv larger than 1x1 from at least DENSE_MIN_CHANNELS channels where the direct blocked
    conv (conv2d_nchwc_f32) beats Winograd on NCHW tensors with its reorders (on CPUs where dense_direct_pays):
    small maps, or few channels on mid-sized maps (Winograd's fewer multiply-adds pay where its transforms are
    amortised over many channels and tiles). Measured on an AMD Zen 5 host (session 41, 2 threads, untuned, one
    process, interleaved), every stride-1 dense conv blocked against Winograd: ResNet-18-style's 3x3 convs
    256@14 and 512@7 0.80-0.85x per layer, 64@56 and 128@28 about equal; VGG-19's 512@14 0.70x but 512@28
    1.23-1.30x, 256@56 1.65-1.85x and 64@224 1.39x. Whole models with this rule: see the module docstring,
    "Dense stride-1 convs"."""
    (_, in_channels, _, _, out_channels, out_height, out_width, kernel_height, kernel_width, stride_height,
     stride_width, *_,) = plan.ints
    pixels = out_height * out_width
    return (not plan.depthwise and plan.ints[15] == 1 and kernel_height * kernel_width > 1
            and (stride_height, stride_width) == (1, 1) and in_channels >= DENSE_MIN_CHANNELS
            and (pixels <= DIRECT_MAX_PIXELS or (pixels <= DIRECT_MAX_PIXELS_FEW_CHANNELS
                                                 and in_channels * out_channels <= DIRECT_MAX_CHANNEL_PRODUCT))
            and dense_direct_pays())


# Blocked Winograd (conv2d_winograd_nchwc_f32) only where its transformed weights (36 x Cin x Cout floats) per 4x4
# output tile are at most this many bytes: they stream from memory once per conv, shared by its tiles
WINOGRAD_MAX_WEIGHT_BYTES_PER_TILE = 4 << 20


def is_winograd_blocked(plan) -> bool:
    """A 3x3 stride-1 one-group conv from at least DENSE_MIN_CHANNELS channels that runs F(4x4, 3x3) Winograd on
    blocked tensors (conv2d_winograd_nchwc_f32) in fp32 sessions, on CPUs where dense_direct_pays (measured there
    only), unless its transformed weights per output tile pass WINOGRAD_MAX_WEIGHT_BYTES_PER_TILE. Kernel alone,
    AMD Zen 5, 2 threads, interleaved, against conv2d_nchwc_f32 (direct, 420-500 GFLOP/s): ResNet-18's 64@56 0.41x,
    128@28 0.35x, 256@14 0.52x, 512@7 1.12x (37.7 MB of weights for 4 tiles: kept direct); VGG's 64@224 0.67x,
    256@56 0.37x, 512@28 0.33x, 512@14 0.58x; SqueezeNet's 16 -> 64 @55 0.68x, 64 -> 256 @13 0.76x; 256@7 0.60x.
    Outputs within 2e-5 of the direct conv's magnitude."""
    (_, in_channels, _, _, out_channels, out_height, out_width, kernel_height, kernel_width, stride_height,
     stride_width, _, _, dilation_height, dilation_width, group, *_) = plan.ints
    if plan.depthwise or group != 1 or (kernel_height, kernel_width, stride_height, stride_width, dilation_height,
                                         dilation_width) != (3, 3, 1, 1, 1, 1) or in_channels < DENSE_MIN_CHANNELS:
        return False
    tiles = -(-out_height // 4) * -(-out_width // 4)
    return 36 * in_channels * out_channels * 4 <= WINOGRAD_MAX_WEIGHT_BYTES_PER_TILE * tiles and dense_direct_pays()


WINOGRAD_BF16_MIN_CHANNELS = 64  # winograd_over_bf16: channels each way
WINOGRAD_BF16_MIN_TILES = 16  # ... output tiles of 4x4
WINOGRAD_BF16_MAX_WORK_BYTES = 8 << 20  # ... V and M (36 positions of Cin and Cout floats per tile), cached
WINOGRAD_BF16_MAX_COVER = 1.4  # ... and the 4x4 tiles' pixels at most this many times the output's (13x13: 1.51)


def winograd_over_bf16(node: ir.Node, plan, builder) -> bool:
    """Whether a bf16 session without AMX runs a dense conv as fp32 blocked Winograd (conv2d_winograd_nchwc_f32)
    instead of conv2d_nchwc_bf16: where dense_bf16_direct and is_winograd_blocked hold, with at least
    WINOGRAD_BF16_MIN_CHANNELS channels each way and WINOGRAD_BF16_MIN_TILES tiles, V and M within
    WINOGRAD_BF16_MAX_WORK_BYTES. A quarter of the multiply-adds at fp32's rate against all of them at bf16's
    (1.7x fp32's on this CPU), and fp32-accurate. Kernel alone, Zen 5, 2 threads, interleaved: ResNet-18's 64@56
    0.71x, 128@28 0.67x, 256@14 0.90x the bf16 direct conv's time, VGG's 512@14 0.99x; few tiles (512@7 1.67x, 256@7
    1.31x), few channels (16 -> 64 @55 2.4x, 48 -> 192 @27 1.19x), large maps of few channels (64@112 1.13-1.5x
    with the kernel's bands, 96 -> 24 @160 1.68x: the transforms' bytes bound them) and maps that 4x4 tiles cover
    badly (SqueezeNet's 64 -> 256 @13, 1.59x: 13x13 computed as 16x16) stay bf16. Whole models, in-process A/B
    against the rule off, both build orders: ResNet-18-style 0.94x, ResNet-50 0.975x, VGG-19 0.985x, DenseNet-121
    and Inception v1 1.00x."""
    if not (dense_bf16_direct(node, plan, builder) and is_winograd_blocked(plan)):
        return False
    (_, in_channels, _, _, out_channels, out_height, out_width, *_) = plan.ints
    tiles = -(-out_height // 4) * -(-out_width // 4)
    work = 36 * (in_channels + out_channels) * tiles * 4
    return (min(in_channels, out_channels) >= WINOGRAD_BF16_MIN_CHANNELS and tiles >= WINOGRAD_BF16_MIN_TILES
            and work <= WINOGRAD_BF16_MAX_WORK_BYTES
            and 16 * tiles <= WINOGRAD_BF16_MAX_COVER * out_height * out_width)


def _spares_reorders_only(plan, builder) -> bool:
    """A conv that reads and writes blocked tensors only to spare its neighbours' reorders (a strided 1x1 conv, and
    an fp32 session's dense strided convs): it never makes a run worth its reorders by itself."""
    return not plan.depthwise and (is_strided_pointwise(plan)
                                   or (builder.precision == "fp32" and is_dense_strided(plan)))


def is_strided_pointwise(plan) -> bool:
    """1x1 with a stride above 1, no padding, one group: ResNet's projection shortcuts (1x1 stride 2). On blocked
    tensors a strided_copy keeps every stride-th pixel of each row and conv_pointwise_nchwc_f32 runs on that."""
    (_, _, height, width, _, out_height, out_width, kernel_height, kernel_width, stride_height, stride_width,
     pad_top, pad_left, _, _, group, *_) = plan.ints
    return ((kernel_height, kernel_width, pad_top, pad_left, group) == (1, 1, 0, 0, 1)
            and max(stride_height, stride_width) > 1
            and (out_height, out_width) == ((height - 1) // stride_height + 1, (width - 1) // stride_width + 1))
    # (the output size rules out bottom and right padding, which the plan's ints leave implicit)


# Under precision bf16 on the vdpbf16ps path a run is kept only when at least BF16_SMALL_MAP_SHARE of its 1x1 and
# dense convs' multiply-adds are on maps of at most BF16_SMALL_MAP_PIXELS pixels (see blocked_nodes; measured there
# with 0.5: a share of 0.4 was tried on AMX, which no longer applies the rule).
BF16_SMALL_MAP_PIXELS = 784
BF16_SMALL_MAP_SHARE = 0.5
# ... on CPUs whose bf16 multiply-add rate per core (kernels/host_probe.c host_dot_rates) is below this: the rule
# was measured on the Zen 4 host (one 512-bit multiply-add a cycle). On the Zen 5 host (244 per ns) with session 44's
# 1x1 tiles every run gains (in-process A/B against the rule, 2 threads: det 0.97x, rec 0.92x)
BF16_SMALL_MAP_MAX_RATE = 180.0
BF16_BLOCKED_PATHS = ("avx512_bf16", "amx_bf16")  # the bf16 paths with blocked 1x1 conv kernels
STEM_MAX_CHANNELS = 4  # dense convs from at most this many channels may write blocked outputs (a network's stem)
# Dense convs on blocked tensors under bf16 on AMX (dense_bf16_blocked); False: they end runs as before (A/B, tests)
DENSE_BF16 = True


BLOCKED_BINARY = ("Add", "Sub", "Mul", "Div")


def _elementwise_inputs(node: ir.Node) -> tuple[int, ...] | None:
    """The inputs an elementwise node reads as blocked tensors (output-shaped float32 operands and per-channel ones,
    elementwise.channel_operand), when every other operand is a single element and the output is 4-D; else None. A
    GlobalAveragePool reads its input blocked (global_avgpool_nchwc_f32), a 2-D MaxPool too (maxpool_nchwc_f32)."""
    domain = node.domain if node.domain != "ai.onnx" else ""
    if domain == "" and node.op_type in elementwise.UNARY_CODES or (
            domain == elementwise.CONTRIB_DOMAIN and node.op_type in elementwise.CONTRIB_UNARY_CODES):
        data = (0,)
    elif domain == "" and node.op_type in BLOCKED_BINARY:
        data = (0, 1)
    elif (domain, node.op_type) == ("ai.ortx", "ElementwiseChain"):
        data = tuple(range(len(node.inputs)))
    elif domain == "" and node.op_type in ("GlobalAveragePool", "MaxPool"):
        data = (0,)
    elif domain == "" and node.op_type == "Concat":  # measured only with the stride-1 direct convs: see "Concats"
        return tuple(range(len(node.inputs))) if blocked_concat(node) and dense_direct_pays() else None
    else:
        return None
    try:
        out_shape = static_shape(node.outputs[0])
        if len(out_shape) != 4 or numpy_dtype(node.outputs[0]) != np.float32:
            return None
        shapes = [static_shape(node.inputs[index]) for index in data]
    except (NotStatic, TypeError, AttributeError):
        return None
    if node.op_type == "GlobalAveragePool":
        return (0,) if len(shapes[0]) == 4 else None
    if node.op_type == "MaxPool":  # 2-D, without the Indices output (maxpool_nchwc_f32)
        return (0,) if len(shapes[0]) == 4 and len([o for o in node.outputs if o is not None and o.name]) == 1 \
            else None
    blocked = tuple(index for index, shape in zip(data, shapes)
                    if shape == out_shape or elementwise.channel_operand(shape, out_shape))
    if len(blocked) + sum(int(np.prod(shape, dtype=np.int64)) == 1 for shape in shapes) < len(shapes):
        return None  # an operand broadcast some other way
    return blocked if any(shapes[data.index(index)] == out_shape for index in blocked) else None


def blocked_concat(node: ir.Node) -> bool:
    """A Concat of 4-D float32 tensors along channels, each a whole number of 16-channel blocks: on blocked
    tensors each input is a run of whole blocks of the output, as many bytes as in NCHW at the same offset, so the
    same copy (or, where layout.concat_in_place places an input inside the output, none) joins them. SqueezeNet's
    fire modules, Inception's branches and DenseNet's layers concatenate so; unblocked, each Concat cut a run with a
    reorder out of it and one back in."""
    try:
        shape = static_shape(node.outputs[0])
        if len(shape) != 4 or numpy_dtype(node.outputs[0]) != np.float32:
            return False
        if int(attribute(node, "axis", 0)) % 4 != 1:
            return False
        shapes = [static_shape(value) for value in node.inputs if value is not None]
    except (NotStatic, TypeError, AttributeError):
        return False
    return (len(shapes) == len(node.inputs) and len(shapes) > 0
            and all(len(shape) == 4 and shape[1] % 16 == 0 for shape in shapes))


def lower_blocked_concat(node: ir.Node, builder) -> None:
    """blocked_concat's Concat: each input's blocks copied into the output's (copy_rows, a row per image), unless
    the input was written in place there."""
    batch, channels, height, width = static_shape(node.outputs[0])
    target = builder.produce_blocked(node.outputs[0])
    offset = 0
    for value in node.inputs:
        row_bytes = static_shape(value)[1] * height * width * 4
        source = builder.blocked_buffer(value)
        if row_bytes and batch and not builder.is_slice_of(source, target, offset):
            builder.emit("copy_rows", [batch, row_bytes, row_bytes, channels * height * width * 4, 0, offset], [],
                         [source, target])
        offset += row_bytes
    builder.finish_blocked(node.outputs[0])


def blocked_resize(node: ir.Node) -> bool:
    """A 4-D float32 nearest Resize of H and W only (its N and C maps the identity): on blocked tensors it is the
    layout's own nearest resize of a [N * C/16, H, W, 16] array (resize_nearest), pad lanes copied along."""
    try:
        shape = static_shape(node.inputs[0])
        if len(shape) != 4 or numpy_dtype(node.inputs[0]) != np.float32:
            return False
        plan, _ = _resize.plan(node, opset_version(node))
    except (NotStatic, TypeError, AttributeError, ValueError):
        return False
    if plan is None or plan.mode != "nearest":
        return False
    return all(tuple(plan.nearest_maps[axis]) == tuple(range(shape[axis])) for axis in (0, 1))


def dense_bf16_blocked(node: ir.Node, plan, builder) -> bool:
    """Whether a dense conv runs conv2d_bf16_nchwc's AMX direct form on blocked tensors (kernels/conv_bf16.c):
    precision bf16 (the node's: builder.precision_of) on the AMX path, one group, and the kernel's own rule
    (conv_bf16_nchwc_applies)."""
    if not DENSE_BF16:
        return False
    if (builder.precision_of(node) != "bf16" or _kernels.bf16_isa() != "amx_bf16" or plan.depthwise
            or plan.ints[15] != 1):
        return False
    out = np.zeros(1, np.int64)
    _kernels.call("conv_bf16_nchwc_applies", list(plan.ints) + [builder.num_threads], [], [out])
    return bool(out[0])


def dense_bf16_direct(node: ir.Node, plan, builder) -> bool:
    """Whether a dense conv runs conv2d_nchwc_bf16 (kernels/conv_nchwc_bf16.c: vdpbf16ps tiles over a padded bf16
    image) on blocked tensors: precision bf16 (the node's) on the avx512_bf16 path (AMX CPUs: dense_bf16_blocked),
    one group, larger than 1x1, from at least DENSE_MIN_CHANNELS channels (a stem's 3 would be padded to 16), at
    most ORTX_NCHWC_BF16_MAX_TAPS taps."""
    if not DENSE_BF16 or builder.precision_of(node) != "bf16" or _kernels.bf16_isa() != "avx512_bf16":
        return False
    (_, in_channels, _, _, _, _, _, kernel_height, kernel_width, *_) = plan.ints
    return (not plan.depthwise and plan.ints[15] == 1 and 1 < kernel_height * kernel_width <= NCHWC_BF16_MAX_TAPS
            and in_channels >= DENSE_MIN_CHANNELS)


NCHWC_BF16_MAX_TAPS = 64  # kernels/conv.h's ORTX_NCHWC_BF16_MAX_TAPS
NCHWC_BF16_CHUNK_PAIRS = 64  # kernels/conv_nchwc_bf16.c's CHUNK_BLOCKS * 8: input channel pairs a weight chunk
NCHWC_BF16_MAX_PAIRS = 32  # ... and ORTX_NCHWC_BF16_MAX_PAIRS (the x-unfolded form's values per row: twice that)
STEM_BF16_MIN_CHANNELS = 64  # stems to fewer output channels stay on conv2d_to_nchwc_f32 (dense_bf16_stem)


def dense_bf16_stem(node: ir.Node, plan, builder) -> bool:
    """Whether a stem that writes a blocked run (role "writes": at most STEM_MAX_CHANNELS input channels) runs
    conv2d_nchwc_bf16's x-unfolded form from its NCHW input under bf16 without AMX: at least STEM_BF16_MIN_CHANNELS
    output channels, Cin x KW values a row within the kernel's pairs. Kernel alone, 2 threads, interleaved, against
    conv2d_to_nchwc_f32 (fp32): ResNet's 3 -> 64 7x7/2 at 224x224 0.41 against 0.67 ms; MobileNetV2's 3 -> 32 3x3/2
    0.127 against 0.104 and PP-OCR det's 3 -> 16 at 640x640 0.82 against 0.41 (few output blocks: the unfolded
    rows and the output's bytes, not the multiply-adds, bound them), so those stay fp32."""
    if not DENSE_BF16 or builder.precision_of(node) != "bf16" or _kernels.bf16_isa() != "avx512_bf16":
        return False
    (_, in_channels, _, _, out_channels, _, _, kernel_height, kernel_width, *_) = plan.ints
    return (not plan.depthwise and plan.ints[15] == 1 and out_channels >= STEM_BF16_MIN_CHANNELS
            and in_channels * kernel_width <= 2 * NCHWC_BF16_MAX_PAIRS and kernel_height <= NCHWC_BF16_MAX_TAPS)


def _role(node: ir.Node, builder, plan, elementwise_inputs) -> str | None:
    """"both" for a node that reads and writes blocked tensors, "writes" for a stem, None for the rest; plan: its
    ConvPlan (None: not a conv), elementwise_inputs: _elementwise_inputs(node)."""
    if elementwise_inputs is not None:
        return "both"
    if plan is None:
        return None
    if plan.depthwise:
        return "both"
    bias = present(node, 2)
    if bias is not None and constant_value(bias) is None:
        return None  # the blocked kernels pack the bias with the weights
    if is_pointwise(plan):
        bf16 = builder.precision_of(node) == "bf16"
        return "both" if bf16 or sparse.sparse_conv_choice(node, builder, plan) is None else None
    dense = is_dense_strided(plan) or is_dense_direct(plan) or is_winograd_blocked(plan)
    if (is_strided_pointwise(plan) or dense) and builder.precision == "fp32":
        # (bf16: the dense form's rule below)
        return "both" if sparse.sparse_conv_choice(node, builder, plan) is None else None
    if dense_bf16_direct(node, plan, builder) or (is_strided_pointwise(plan) and _bf16_direct_runs(builder)):
        return "both"
    group, has_residual = plan.ints[15], plan.has_residual
    stem = group == 1 and plan.ints[1] <= STEM_MAX_CHANNELS and not has_residual
    if dense_bf16_blocked(node, plan, builder):
        return "writes" if stem else "both"  # a stem reads the graph's NCHW input
    if stem:
        return "writes"  # fp32 under bf16 too (module docstring)
    return None


def _bf16_direct_runs(builder) -> bool:
    """Whether bf16 runs on the vdpbf16ps path take dense convs (conv2d_nchwc_bf16), and with them the strided 1x1
    convs and MaxPools between them (ResNet's projections and stem pool)."""
    return DENSE_BF16 and builder.precision == "bf16" and _kernels.bf16_isa() == "avx512_bf16"


def blocked_nodes(nodes, outputs, builder, plan_of) -> frozenset[ir.Node]:
    """Step 1: the nodes to lower on blocked tensors (empty off AVX-512, and under precision bf16 unless the bf16
    GEMMs' path is avx512_bf16 or amx_bf16); a set of the node objects, since a graph's node names may be empty.
    On AMX the 1x1 convs run tdpbf16ps steps (kernels/conv_pointwise_nchwc_amx.c; before them, the vdpbf16ps tile
    lost to the NCHW AMX programs: MobileNetV2-style 1.77x, cls 1.14x). An Emerald Rapids VM, 2 threads, one
    process, against the NCHW AMX program: MobileNetV2-style 0.67-0.79x, cls 1.02-1.07x (kept blocked by the
    small-map rule below, then; tuning's layout choice measures both); det's runs went 1.26-1.30x blocked then.
    Since pair rows and tiled channel operands in elementwise chains (without the latter det's blocked run was
    1.19-1.23x), the small-map rule applies on the vdpbf16ps path only (and there below BF16_SMALL_MAP_MAX_RATE):
    det 0.90x, rec 0.87x the NCHW program.
    plan_of(node): the conv lowering's ConvPlan of a Conv/FusedConv it runs, else None."""
    bf16_path = _kernels.bf16_isa() if builder.precision == "bf16" else None
    if _kernels.selected_isa() != "avx512" or bf16_path not in (None, *BF16_BLOCKED_PATHS):
        return frozenset()
    nodes = list(nodes)
    # a MaxPool joins runs in fp32 sessions and where dense convs do (bf16 on AMX; not measured on the vdpbf16ps
    # path, where it stays NCHW): see the module docstring, "MaxPool in fp32 runs"
    pool_runs = builder.precision == "fp32" or (DENSE_BF16 and builder.precision == "bf16"
                                                and bf16_path == "amx_bf16") or _bf16_direct_runs(builder)
    inputs_of = {node: None if node.op_type == "MaxPool" and not pool_runs else _elementwise_inputs(node)
                 for node in nodes}  # each node's questions asked once
    plans = {node: plan_of(node) for node in nodes if inputs_of[node] is None}
    roles = {node: role for node in nodes
             if (role := _role(node, builder, plans.get(node), inputs_of[node])) is not None}
    if not roles:
        return frozenset()
    # the inputs a blocked reader takes blocked: an elementwise node's, or a conv's X and residual
    blocked_inputs = {node: inputs_of[node] if inputs_of[node] is not None else (0, 3) for node in roles}
    consumers: dict[int, list[tuple[ir.Node, int]]] = {}  # by id(value)
    for node in nodes:
        for index, value in enumerate(node.inputs):
            if value is not None:
                consumers.setdefault(id(value), []).append((node, index))
    output_values = {id(value) for value in outputs}
    # a Concat joins only where some reader takes its output blocked (a conv, a pool, a joined Concat): DenseNet's
    # Concats, each read by the next Concat and by a BatchNormalization that runs NCHW, went blocked for each
    # other's sake and then reordered every growing output back for the BatchNormalization (1.04-1.05x the model);
    # Inception's and SqueezeNet's feed 1x1 convs (an AveragePool beside them reads a reorder). Dropping a Concat
    # may leave the Concat before it with no such reader, hence the loop
    while True:
        dropped = [node for node in roles if node.op_type == "Concat" and not any(
            roles.get(reader) == "both" and index in blocked_inputs[reader]
            for reader, index in consumers.get(id(node.outputs[0]), []))]
        for node in dropped:
            del roles[node], blocked_inputs[node]
        if not dropped:
            break
    # a nearest Resize reads and writes blocked tensors where every reader of its output takes it blocked (an FPN's
    # upsampled map into a blocked Add): elsewhere (into a Concat) its NCHW input is the smaller map to reorder
    for node in nodes:
        readers = consumers.get(id(node.outputs[0]), []) if node.outputs else []
        if (node.op_type == "Resize" and node.domain in ("", "ai.onnx") and readers
                and id(node.outputs[0]) not in output_values
                and all(roles.get(reader) == "both" and index in blocked_inputs[reader] for reader, index in readers)
                and blocked_resize(node)):
            roles[node], blocked_inputs[node] = "both", (0,)
    run_of: dict[ir.Node, ir.Node] = {}  # union-find over the nodes that blocked edges join (values by identity:
    # names may be empty)

    def run(node: ir.Node) -> ir.Node:
        while run_of[node] is not node:
            run_of[node] = run_of[run_of[node]]
            node = run_of[node]
        return node

    for node in nodes:
        if node not in roles:
            continue
        value = node.outputs[0]
        readers = consumers.get(id(value), [])
        if id(value) in output_values or not readers:
            continue
        if all(roles.get(reader) == "both" and index in blocked_inputs[reader] for reader, index in readers):
            for reader, _ in readers:
                run_of.setdefault(node, node)
                run_of.setdefault(reader, reader)
                run_of[run(reader)] = run(node)
    # a run gains only through its 1x1 and depthwise convs on maps of more than one pixel: a stem, elementwise
    # nodes, strided convs and a squeeze-and-excitation block's 1x1 convs (one pixel) alone are kept NCHW
    convs = [node for node in run_of if plans.get(node) is not None and roles[node] == "both"
             and not _spares_reorders_only(plans[node], builder)]
    useful = {run(node) for node in convs if np.prod(plans[node].ints[5:7]) > 1}
    if builder.precision == "bf16" and bf16_path != "amx_bf16" and _small_map_rule_applies():
        # measured on Zen 4's vdpbf16ps path (2 threads, in-process A/B against the NCHW bf16 kernels):
        # MobileNetV2-style 0.76-0.92 but PP-OCRv4 det 1.07-1.18, whose 1x1 convs run on 160x160 to 40x40 maps,
        # where the NCHW bf16 GEMM is as fast and the reorders are not paid back; rec 0.98-1.06. On AMX no such
        # rule: with pair rows and the chains' tiled channel operands (elementwise.blocked_operands) every run
        # gains there (in-process against the NCHW program, PAIR_ROWS "exact": det 0.90, rec 0.87)
        small, total = collections.Counter(), collections.Counter()
        for node in convs:
            plan = plans[node]
            if is_pointwise(plan) or dense_bf16_direct(node, plan, builder):
                macs = (float(np.prod(plan.ints[:2])) * plan.ints[4] * float(np.prod(plan.ints[5:7]))
                        * plan.ints[7] * plan.ints[8])
                total[run(node)] += macs
                small[run(node)] += macs if np.prod(plan.ints[5:7]) <= BF16_SMALL_MAP_PIXELS else 0.0
        for name in useful:
            logger.debug("run of %s: %.0f%% of its conv multiply-adds on maps of at most %d pixels", name.name,
                         100.0 * small[name] / max(total[name], 1.0), BF16_SMALL_MAP_PIXELS)
        useful = {name for name in useful if small[name] >= BF16_SMALL_MAP_SHARE * total[name]}
    chosen = frozenset(node for node in run_of if run(node) in useful)
    logger.debug("%d of %d nodes on blocked tensors, in %d runs", len(chosen), len(nodes), len(useful))
    return chosen


def _small_map_rule_applies() -> bool:
    """Whether blocked_nodes keeps only the bf16 runs with most of their work on small maps
    (BF16_SMALL_MAP_MAX_RATE)."""
    from ortx.ep.precision import dot_rates

    return dot_rates()[1] < BF16_SMALL_MAP_MAX_RATE


PAIR_ROWS_MODES = ("all", "exact", "off")
DENSE_PAIR_ROWS = True  # dense bf16 convs on AMX read and write pair rows too (pair_rows_values)
POOL_PAIR_ROWS = True  # under "all", a blocked MaxPool reads pair rows (maxpool_pair_rows_f32; pair_rows_values)
POOL_OUT_PAIR_ROWS = True  # ... and writes them where its readers take them (maxpool_pair_rows_bf16)
DEPTHWISE_BF16X3 = True  # a depthwise conv fused with the bf16x3 1x1 conv reading it (depthwise_bf16x3_pairs)
BAND_FLOATS = 32 * 1024  # conv_depthwise_bf16x3's band of depthwise rows a thread (128 KB; 8K-64K alike)
SPLIT_FP32_POINTWISE = True  # fp32_nodes' 1x1 convs on AMX as bf16x3 (split_pointwise); False: fp32 kernels
VDPBF16PS_PAIR_ROWS = True  # pair rows on the avx512_bf16 path too (1x1 and depthwise convs; pair_rows_values)
RESIDUAL_PAIR_ROWS = True  # under "all", a dense bf16 conv reads its residual from pair rows (pair_rows_values)


def _readers(nodes) -> dict[int, list[tuple[ir.Node, int]]]:
    """Per value (by identity: names may be empty), the (node, input index) pairs that read it."""
    readers: dict[int, list[tuple[ir.Node, int]]] = collections.defaultdict(list)
    for node in nodes:
        for index, value in enumerate(node.inputs):
            if value is not None:
                readers[id(value)].append((node, index))
    return readers


def pair_rows_values(nodes, outputs, builder, plan_of, mode: str = "all") -> frozenset[str]:
    """Step 1c: under precision bf16 on the AMX path (and the vdpbf16ps path: VDPBF16PS_PAIR_ROWS), the blocked tensors
    kept as bf16 pair rows (kernels/pair_rows.h) instead of blocked fp32: a 1x1, depthwise or dense conv's output
    that is no segment output and that only such convs read, each as its X (dense: conv2d_bf16_nchwc's AMX direct
    form, dense_bf16_blocked, with DENSE_PAIR_ROWS), or, under "all", a blocked MaxPool (POOL_PAIR_ROWS:
    maxpool_pair_rows_f32, writing blocked fp32; a MaxPool whose input is pair rows writes them too where its readers
    take them, POOL_OUT_PAIR_ROWS: maxpool_pair_rows_bf16, the same maxima rounded) or a dense conv's residual input
    (RESIDUAL_PAIR_ROWS: conv2d_bf16_nchwc adds the bf16 values).
    Half the bytes of each such tensor move through memory, a 1x1 conv loads its AMX tiles from the
    rows as they lie instead of rounding its input, and a dense conv copies them into its chunk planes. Dense convs
    in-process against DENSE_PAIR_ROWS off (2 threads, bits unchanged): ResNet-18-style 0.979 and 0.982 (conv1 ->
    conv2 edges, and each layer's output that only the next layer's stride-2 conv and shortcut read), PP-OCR det
    1.001, rec 0.981 and 1.000. A MaxPool's maxima of rounded values are the fp32 maxima rounded, so the convs after
    it see the same bits and only its fp32 readers (ResNet's first residual) see bf16 values: ResNet-18-style's stem
    -> MaxPool in pair rows against POOL_PAIR_ROWS off 0.975-0.982 (three of four runs; 1.000 once), cosine
    against ORT fp32 0.9999923 -> 0.9999933; block outputs a conv2 also reads as its residual, against
    RESIDUAL_PAIR_ROWS off, 0.977 and 0.986 (cosine 0.9999933 -> 0.9999927; det 1.023, its bits unchanged); the
    MaxPool writing pair rows (its maxima on 16-bit keys, a chunk a vector) against POOL_OUT_PAIR_ROWS off 0.975 and
    0.980, the same bits (session 29).
    mode "exact": only tensors that 1x1 (and dense) convs alone read (MobileNetV2's depthwise -> projection): they
    round their input to these very bits, so the session's results do not change. "all" (the default): also the
    1x1 convs' outputs a depthwise conv reads (the expanded maps), which the depthwise conv then reads as bf16
    values, as the option's definition allows (bf16 activations; ortx/ep/precision.py). "off": none.
    In-process against "off" (Emerald Rapids VM, 2 threads, 16 rounds, paired medians): MobileNetV2-style "exact"
    0.945, "all" 0.897 (cosine against ORT fp32 0.998439 -> 0.998712); PP-OCR cls 0.996 and 0.980 (0.999995 ->
    0.999987); against "exact", rec "all" 0.86 (0.999979 -> 0.999971) but det's cosine on the benchmarks' seeded
    random input fell 0.999135 -> 0.994304, so "exact" was the default until session 28. That input is noise to a
    text detector: its output is a near-empty map whose cosine swings with any single rounding (rounding one more
    tensor, any one of the 13, gave 0.9957-0.9992; keeping the 1x1 convs from < 32 channels fp32 gave 0.9971).
    On a rendered page of text (benchmarks/text_image.py) det's cosine is 0.999974 "exact", 0.999963 "all"
    (OpenVINO's bf16 0.999876), rec's line 0.999858 / 0.999879. Session 28, against "exact", with the depthwise
    convs' register-chunk kernels (2 threads, paired): MobileNetV2-style 0.907, det 0.949, rec 0.998, cls 0.989;
    "all" is the default since. Before their writers stored whole 64-byte pixel lines (a block's half lines, one
    task each), "all" read 1.05-1.08x: the half-line stores cost a read of every line.
    On the vdpbf16ps path (session 44: conv_pointwise_pair_rows_bf16's AVX512_BF16 rows tile; MaxPools stay blocked
    fp32 there, unmeasured) the 1x1 and depthwise convs take pair rows instead of the fused expand + depthwise steps
    (expand_depthwise_pairs has the A/B); against the same unfused program in blocked fp32: MobileNetV2-style
    0.85x, cls 1.02x (AMD Zen 5, 2 threads, in-process)."""
    if mode not in PAIR_ROWS_MODES:
        raise ValueError(f"pair rows mode {mode!r}: expected one of {', '.join(PAIR_ROWS_MODES)}")
    path = _kernels.bf16_isa()
    if (mode == "off" or builder.precision != "bf16" or not builder.blocked_nodes or builder.expand_of
            or path not in ("amx_bf16", "avx512_bf16") or (path == "avx512_bf16" and not VDPBF16PS_PAIR_ROWS)):
        return frozenset()
    readers, output_values = _readers(nodes), {id(value) for value in outputs}

    def conv_kind(node: ir.Node) -> str | None:
        if builder.precision_of(node) == "fp32":  # provider option fp32_nodes: no bf16 value in or out
            return None
        if node.op_type == "MaxPool" and node in builder.blocked_nodes:  # reads pair rows, writes blocked fp32
            return "maxpool" if POOL_PAIR_ROWS and path == "amx_bf16" else None
        plan = plan_of(node) if node in builder.blocked_nodes else None
        if plan is None:
            return None
        if plan.depthwise:
            return "depthwise"
        if is_pointwise(plan):
            return "pointwise"
        return "dense" if DENSE_PAIR_ROWS and dense_bf16_blocked(node, plan, builder) else None

    def reader_kind(node: ir.Node, index: int) -> str | None:
        """What reads a tensor as input `index` of `node`: a conv's X (not a dense conv's stem form, which reads
        NCHW: lower_dense_bf16), or a dense conv's residual (conv2d_bf16_nchwc adds it from pair rows: bf16
        activations); None: a reader that cannot take pair rows."""
        kind = conv_kind(node)
        if index == 3:
            return "residual" if RESIDUAL_PAIR_ROWS and kind == "dense" else None
        if index != 0 or (kind == "dense" and _dense_stem(plan_of(node))):
            return None
        return kind

    chosen = set()
    for node in nodes:
        value = node.outputs[0] if node.outputs else None
        if value is None or id(value) in output_values or not readers.get(id(value)):
            continue
        # an fp32 node's 1x1 conv (bf16x3) writes pair rows as a bf16 one: its readers round what they read
        if conv_kind(node) is None and not split_pointwise(node, builder, plan_of(node) if node in
                                                              builder.blocked_nodes else None):
            continue
        kinds = [reader_kind(reader, index) for reader, index in readers[id(value)]]
        if conv_kind(node) == "maxpool" and not (POOL_OUT_PAIR_ROWS and node.inputs[0].name in chosen):
            continue  # maxpool_pair_rows_bf16 reads and writes pair rows; no kernel writes them from blocked fp32
        if None in kinds or (mode == "exact" and ("depthwise" in kinds
                                                                               or "maxpool" in kinds
                                                                               or "residual" in kinds)):
            continue
        chosen.add(value.name)
    logger.debug("%d tensors in pair rows", len(chosen))
    return frozenset(chosen)


def blocked_nbytes(shape) -> int:
    """Bytes of a float32 [N, C, H, W] tensor in the blocked layout (channels padded to a multiple of 16)."""
    batch, channels, height, width = shape
    return 4 * batch * -(-channels // LANES) * LANES * height * width


def pack_pointwise(weights: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """conv.h's packing of conv_pointwise_nchwc_f32: [ceil(Cout/64)][Cin][64] weights and ceil(Cout/64)*64 biases,
    zeros past Cout."""
    out_channels, in_channels = weights.shape
    groups = -(-out_channels // 64)
    padded = np.zeros((groups * 64, in_channels), np.float32)
    padded[:out_channels] = weights
    return (np.ascontiguousarray(padded.reshape(groups, 64, in_channels).transpose(0, 2, 1)),
            _packed_bias(bias, out_channels))


DIRECT_CHUNK_CHANNELS = 128  # kernels/conv_nchwc_direct.c's CHUNK: input channels a weight chunk


def pack_dense(weights: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """conv.h's packing of conv2d_nchwc_f32: per group of 64 output channels, per chunk of DIRECT_CHUNK_CHANNELS
    input channels, [KH*KW][the chunk's channels][64] weights (a chunk's weights one run), and ceil(Cout/64)*64
    biases; zeros past Cout."""
    out_channels, in_channels, kernel_height, kernel_width = weights.shape
    groups = -(-out_channels // 64)
    padded = np.zeros((groups * 64, in_channels, kernel_height * kernel_width), np.float32)
    padded[:out_channels] = weights.reshape(out_channels, in_channels, -1)
    by_tap = padded.reshape(groups, 64, in_channels, -1).transpose(0, 3, 2, 1)  # [g][tap][Cin][64]
    return _chunk_runs(by_tap, DIRECT_CHUNK_CHANNELS), _packed_bias(bias, out_channels)


def _chunk_runs(by_tap: np.ndarray, chunk: int) -> np.ndarray:
    """[group][tap][k][...] weights as [group][chunk of k][tap][the chunk's k][...], flat: each chunk's taps one run
    of memory (the direct convs' packing)."""
    groups, _, depth = by_tap.shape[:3]
    runs = [by_tap[:, :, start:start + chunk].reshape(groups, -1) for start in range(0, depth, chunk)]
    return np.ascontiguousarray(np.concatenate(runs, axis=1)).reshape(-1)


def pack_dense_bf16(weights: np.ndarray, bias: np.ndarray | None,
                    unfolded: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """conv.h's packing of conv2d_nchwc_bf16: per group of 64 output channels, per chunk of NCHWC_BF16_CHUNK_PAIRS
    of the ceil(Cin/16)*8 input channel pairs, [KH*KW][the chunk's pairs][64][2] bf16 weights (the two input
    channels of a pair adjacent, vdpbf16ps's operand; a chunk's weights one run), and pack_dense's fp32 biases; zeros
    past Cin and Cout.
    `unfolded` (a stem read from NCHW, x-unfolded): [ceil(Cout/64)][KH][ceil(Cin*KW/2)][64][2] over the values
    j = kx * Cin + c of a row's taps."""
    out_channels, in_channels, kernel_height, kernel_width = weights.shape
    groups = -(-out_channels // 64)
    if unfolded:  # [Cout, KH, KW * Cin] with value j = kx * Cin + c
        rows = weights.transpose(0, 2, 3, 1).reshape(out_channels, kernel_height, kernel_width * in_channels)
        pairs = -(-kernel_width * in_channels // 2)
        padded = np.zeros((groups * 64, kernel_height, pairs * 2), np.float32)
        padded[:out_channels, :, :rows.shape[2]] = rows
        packed = bf16_bits(padded).reshape(groups, 64, kernel_height, pairs, 2).transpose(0, 2, 3, 1, 4)
        return np.ascontiguousarray(packed), _packed_bias(bias, out_channels)
    pairs = -(-in_channels // LANES) * LANES // 2
    padded = np.zeros((groups * 64, pairs * 2, kernel_height * kernel_width), np.float32)
    padded[:out_channels, :in_channels] = weights.reshape(out_channels, in_channels, -1)
    by_tap = bf16_bits(padded).reshape(groups, 64, pairs, 2, -1).transpose(0, 4, 2, 1, 3)  # [g][tap][pair][64][2]
    return _chunk_runs(by_tap, NCHWC_BF16_CHUNK_PAIRS), _packed_bias(bias, out_channels)


# F(4x4, 3x3)'s G (Lavin and Gray; points 0, 1, -1, 2, -2), as kernels/conv_winograd.c's g_exact_4
WINOGRAD_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                       [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64)


def pack_winograd_nchwc(weights: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """conv.h's packing of conv2d_winograd_nchwc_f32: per position q of the 6x6 tile, U[q] = (G g G^T)[q] of every
    (output, input) channel, in float64 rounded once, packed as conv_pointwise_nchwc_f32's weights ([ceil(Cout/64)]
    [Cin][64], zeros past Cout); and pack_dense's biases."""
    out_channels, in_channels = weights.shape[:2]
    transformed = np.einsum("ia,ocab,jb->ijoc", WINOGRAD_G, weights.astype(np.float64), WINOGRAD_G)  # [6][6][O][C]
    groups = -(-out_channels // 64)
    padded = np.zeros((36, groups * 64, in_channels), np.float64)
    padded[:, :out_channels] = transformed.reshape(36, out_channels, in_channels)
    packed = padded.reshape(36, groups, 64, in_channels).transpose(0, 1, 3, 2).astype(np.float32)
    return np.ascontiguousarray(packed).reshape(-1), _packed_bias(bias, out_channels)


def _packed_bias(bias: np.ndarray | None, out_channels: int) -> np.ndarray:
    """The blocked 1x1 convs' fp32 bias: ceil(Cout/64)*64 values, zeros past Cout (and all zeros without one)."""
    packed = np.zeros(-(-out_channels // 64) * 64, np.float32)
    if bias is not None:
        packed[:out_channels] = bias
    return packed


def pack_pointwise_bf16(weights: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """conv.h's packing of conv_pointwise_nchwc_bf16: [ceil(Cout/64)][pair rows][64][2] bf16 weights (the two
    input channels of a pair adjacent; pair rows ceil(Cin/32)*16, whole AMX tiles), and the fp32 bias as
    pack_pointwise's; zeros past Cin and Cout."""
    out_channels, in_channels = weights.shape
    groups, rows = -(-out_channels // 64), -(-in_channels // 32) * 16
    padded = np.zeros((groups * 64, rows * 2), np.float32)
    padded[:out_channels, :in_channels] = weights
    packed = bf16_bits(padded).reshape(groups, 64, rows, 2).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(packed), _packed_bias(bias, out_channels)


def pack_pointwise_bf16x3(weights: np.ndarray,
                          bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """conv_pointwise_bf16x3's operands (kernels/conv_pointwise_nchwc_amx.c step 5): (the rounded weights, the bias,
    the weights' remainders, form), the weights packed as pack_pointwise_bf16's. Form 2 from at most 16 input
    channels: a row's rounded inputs and their remainders share one chunk, so the rows are [W; W] and [W_lo; 0]."""
    remainders = weights - round_to_bf16(weights)
    out_channels, in_channels = weights.shape
    packed_bias = _packed_bias(bias, out_channels)
    if in_channels > 16:
        return pack_pointwise_bf16(weights, None)[0], packed_bias, pack_pointwise_bf16(remainders, None)[0], 1
    doubled, low = np.zeros((out_channels, 32), np.float32), np.zeros((out_channels, 32), np.float32)
    doubled[:, :in_channels] = doubled[:, 16:16 + in_channels] = weights  # the remainders sit at lanes 16 on
    low[:, :in_channels] = remainders
    return pack_pointwise_bf16(doubled, None)[0], packed_bias, pack_pointwise_bf16(low, None)[0], 2


def pack_depthwise_chunks(weights: np.ndarray, bias: np.ndarray | None, pair_rows_input: bool) -> np.ndarray:
    """conv2d_depthwise_pair_rows's chunk_weights (kernels/conv_depthwise.c): per 32-channel chunk, each tap's 32
    lanes then the 32 biases, lanes in the input's order (pair rows: the chunk's even channels, then its odd); zeros
    past C. weights: [C, taps]."""
    channels, taps = weights.shape
    chunks = -(-channels // 32)
    lanes = np.zeros((chunks * 32, taps + 1), np.float32)
    lanes[:channels, :taps] = weights
    if bias is not None:
        lanes[:channels, taps] = bias
    lanes = lanes.reshape(chunks, 32, taps + 1)
    if pair_rows_input:
        lanes = np.concatenate([lanes[:, 0::2], lanes[:, 1::2]], axis=1)
    return np.ascontiguousarray(lanes.transpose(0, 2, 1)).reshape(-1)


def pack_to_nchwc(weights: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """conv.h's packing of conv2d_to_nchwc_f32: tap-major [Cin*KH*KW][ceil(Cout/16)*16] weights and the bias padded
    alike, zeros past Cout."""
    out_channels = weights.shape[0]
    width = -(-out_channels // LANES) * LANES
    packed = np.zeros((weights[0].size, width), np.float32)
    packed[:, :out_channels] = weights.reshape(out_channels, -1).T
    packed_bias = np.zeros(width, np.float32)
    if bias is not None:
        packed_bias[:out_channels] = bias
    return packed, packed_bias


def lower_blocked_conv(node: ir.Node, builder, plan, depthwise_workspace_bytes: int) -> None:
    """Step 2: one conv_pointwise_nchwc_f32 or conv2d_depthwise_nchwc_f32 step on blocked X, residual and Y;
    depthwise_workspace_bytes: conv_sizes_f32's workspace of the depthwise kernel (its blocked form's too)."""
    bias_value = present(node, 2)
    bias = constant_value(bias_value) if bias_value is not None else None
    batch, in_channels, height, width, out_channels = plan.ints[:5]
    if dense_bf16_blocked(node, plan, builder):  # Case dense bf16: blocked in (a stem: NCHW in) and out
        lower_dense_bf16(node, builder, plan)
        return
    stem_bf16 = (not plan.depthwise and not is_pointwise(plan) and not is_strided_pointwise(plan)
                 and plan.ints[1] <= STEM_MAX_CHANNELS and not plan.has_residual
                 and dense_bf16_stem(node, plan, builder))
    if (dense_bf16_direct(node, plan, builder) and not winograd_over_bf16(node, plan, builder)) or stem_bf16:
        # Case dense bf16 on vdpbf16ps: blocked (a stem: NCHW) in
        if bias_value is not None and bias is None:
            raise ValueError(f"bias {bias_value.name!r} is not constant (the blocked dense conv packs it)")
        packed, packed_bias = pack_dense_bf16(plan.weights, bias, unfolded=stem_bf16)
        ints = list(plan.ints) + [builder.num_threads, 0 if stem_bf16 else 1]  # X's layout: NCHW, or blocked
        sizes = np.zeros(1, np.int64)
        _kernels.call("conv_nchwc_bf16_sizes", ints, [], [sizes])
        x = builder.buffer(node.inputs[0]) if stem_bf16 else builder.blocked_buffer(node.inputs[0])
        residual = builder.blocked_buffer(node.inputs[3]) if plan.has_residual else None
        y = builder.produce_blocked(node.outputs[0])
        builder.emit("conv2d_nchwc_bf16", ints, list(plan.params),
                     [x, builder.add_constant(packed, label=f"{node.name}:packed_weights_bf16"),
                      builder.add_constant(packed_bias, label=f"{node.name}:packed_bias"), y,
                      residual if residual is not None else y,
                      builder.workspace(max(int(sizes[0]), 4), label="conv")])
        builder.finish_blocked(node.outputs[0])
        return
    winograd = is_winograd_blocked(plan) and (builder.precision == "fp32" or winograd_over_bf16(node, plan, builder))
    if winograd or (builder.precision == "fp32" and (is_dense_strided(plan) or is_dense_direct(plan))):  # Case dense
        if bias_value is not None and bias is None:
            raise ValueError(f"bias {bias_value.name!r} is not constant (the blocked dense conv packs it)")
        packed, packed_bias = (pack_winograd_nchwc if winograd else pack_dense)(plan.weights, bias)
        ints = list(plan.ints) + [builder.num_threads]
        x = builder.blocked_buffer(node.inputs[0])
        residual = builder.blocked_buffer(node.inputs[3]) if plan.has_residual else None
        y = builder.produce_blocked(node.outputs[0])
        buffers = [x, builder.add_constant(packed, label=f"{node.name}:packed_weights"),
                   builder.add_constant(packed_bias, label=f"{node.name}:packed_bias"), y,
                   residual if residual is not None else y]
        if winograd:  # V and M: workspace
            sizes = np.zeros(1, np.int64)
            _kernels.call("conv_winograd_nchwc_sizes_f32", ints, [], [sizes])
            buffers.append(builder.workspace(max(int(sizes[0]), 4), label="conv_winograd"))
        builder.emit("conv2d_winograd_nchwc_f32" if winograd else "conv2d_nchwc_f32", ints, list(plan.params),
                     buffers)
        builder.finish_blocked(node.outputs[0])
        return
    if not plan.depthwise and not is_pointwise(plan) and not is_strided_pointwise(plan):  # Case stem: NCHW in
        packed, packed_bias = pack_to_nchwc(plan.weights, bias)
        x = builder.buffer(node.inputs[0])
        y = builder.produce_blocked(node.outputs[0])
        builder.emit("conv2d_to_nchwc_f32", list(plan.ints) + [builder.num_threads], list(plan.params),
                     [x, builder.add_constant(packed, label=f"{node.name}:packed_weights"), y,
                      builder.add_constant(packed_bias, label=f"{node.name}:packed_bias")])
        builder.finish_blocked(node.outputs[0])
        return
    x_rows, y_rows = node.inputs[0].name in builder.pair_rows, node.outputs[0].name in builder.pair_rows
    x = builder.pair_rows_buffer(node.inputs[0]) if x_rows else builder.blocked_buffer(node.inputs[0])
    if not plan.depthwise and is_strided_pointwise(plan):  # Case strided 1x1: the kept pixels, then the 1x1 conv
        x = _subsampled(builder, x, plan)
    residual = builder.blocked_buffer(node.inputs[3]) if plan.has_residual else None
    y = builder.pair_rows_buffer(node.outputs[0]) if y_rows else builder.produce_blocked(node.outputs[0])
    rows = [int(x_rows), int(y_rows)] if x_rows or y_rows else []  # the pair-rows kernels' two extra ints
    if plan.depthwise:
        weights = builder.add_constant(plan.weights.reshape(-1), label=f"{node.name}:weights")
        workspace = builder.workspace(max(depthwise_workspace_bytes, 4), label="conv")
        bias_buffer = builder.buffer(bias_value) if bias_value is not None else y
        buffers = [x, weights, y, workspace, bias_buffer, residual if residual is not None else y]
        if rows:
            # each chunk's weights and biases as the pair-rows kernel hands them to its ISA step, packed here once
            # (a constant bias only; that step makes every pair-rows output and a blocked one from pair rows)
            packed = bias_value is None or bias is not None
            if packed:
                chunk_weights = pack_depthwise_chunks(plan.weights.reshape(in_channels, -1), bias, x_rows)
                buffers.append(builder.add_constant(chunk_weights, label=f"{node.name}:chunk_weights"))
            rows = rows + [int(packed)]
        builder.emit("conv2d_depthwise_pair_rows" if rows else "conv2d_depthwise_nchwc_f32",
                     list(plan.ints) + [builder.num_threads] + rows, list(plan.params), buffers)
    else:
        if bias_value is not None and bias is None:
            raise ValueError(f"bias {bias_value.name!r} is not constant (the blocked 1x1 conv packs it)")
        weights = plan.weights.reshape(out_channels, in_channels)
        split = split_pointwise(node, builder, plan)
        bf16 = builder.precision_of(node) == "bf16" or split
        if split:  # X blocked fp32 (readers that are fp32 nodes never get pair rows), the remainders' weights
            packed, packed_bias, remainders, form = pack_pointwise_bf16x3(weights, bias)
            rows = [int(y_rows), form]
        else:
            packed, packed_bias = (pack_pointwise_bf16 if bf16 else pack_pointwise)(weights, bias)
        buffers = [x, builder.add_constant(packed, label=f"{node.name}:packed_weights"),
                   builder.add_constant(packed_bias, label=f"{node.name}:packed_bias"), y,
                   residual if residual is not None else y]
        if bf16:  # the tiles' input as bf16 pairs, per thread (conv.h's ortx_pointwise_bf16_pair_words)
            words = POINTWISE_LONG_PIXELS * -(-in_channels // 32) * 16
            buffers.append(builder.workspace(4 * words * builder.num_threads, label="bf16_pairs"))
        if split:
            buffers.append(builder.add_constant(remainders, label=f"{node.name}:packed_weights_lo"))
        kernel = ("conv_pointwise_bf16x3" if split else "conv_pointwise_pair_rows_bf16" if rows else
                  "conv_pointwise_nchwc_bf16" if bf16 else "conv_pointwise_nchwc_f32")
        pixels = plan.ints[5] * plan.ints[6]  # the output's (the input's too, but for a strided 1x1)
        builder.emit(kernel, [batch, in_channels, out_channels, pixels, int(residual is not None),
                              plan.activation, builder.num_threads] + rows, list(plan.params), buffers)
    if not y_rows:
        builder.finish_blocked(node.outputs[0])


def _subsampled(builder, x, plan):
    """A workspace holding blocked `x` at every stride-th row and column (a strided 1x1 conv's input pixels), made
    by a strided_copy of the [N * C/16, H, W, 16] array."""
    batch, channels, height, width = plan.ints[:4]
    out_height, out_width, stride_height, stride_width = plan.ints[5], plan.ints[6], plan.ints[9], plan.ints[10]
    shape = (batch * -(-channels // LANES), out_height, out_width, LANES)
    strides = (height * width * LANES, stride_height * width * LANES, stride_width * LANES, 1)
    kept = builder.workspace(4 * int(np.prod(shape)), label="strided_pixels")
    builder.emit("strided_copy", [4, 4, *shape, *strides, 0], [], [x, kept])
    return kept


def split_pointwise(node: ir.Node, builder, plan) -> bool:
    """A 1x1 conv that provider option fp32_nodes keeps fp32, in a bf16 session on AMX: it runs bf16x3
    (conv_pointwise_bf16x3; ortx/ep/precision.py) on its blocked fp32 input, fp32-accurate to
    about 2^-16 of each product, and may write pair rows where only bf16 depthwise convs read its output."""
    return (SPLIT_FP32_POINTWISE and plan is not None and is_pointwise(plan) and builder.precision == "bf16"
            and builder.precision_of(node) == "fp32" and _kernels.bf16_isa() == "amx_bf16")


def _dense_stem(plan) -> bool:
    """A dense bf16 conv in its stem form: from at most STEM_MAX_CHANNELS channels, it reads NCHW (x-unfolded)."""
    return plan.ints[1] <= STEM_MAX_CHANNELS and not plan.has_residual


def lower_dense_bf16(node: ir.Node, builder, plan) -> None:
    """Step 2, Case dense bf16: one conv2d_bf16_nchwc step (conv2d_bf16's weights, workspace and epilogue) whose Y
    and residual are blocked, and its X too unless the conv is a stem (blocked_nodes' role "writes")."""
    ints = list(plan.ints) + [builder.num_threads]
    sizes = np.zeros(3, np.int64)
    _kernels.call("conv_sizes_bf16", ints, [], [sizes])
    packed = np.empty(int(sizes[1]), np.uint16)
    _kernels.call("conv_pack_bf16", ints, [], [np.ascontiguousarray(plan.weights), packed])
    stem = _dense_stem(plan)
    x_rows, y_rows = node.inputs[0].name in builder.pair_rows, node.outputs[0].name in builder.pair_rows
    x = (builder.buffer(node.inputs[0]) if stem else builder.pair_rows_buffer(node.inputs[0]) if x_rows
         else builder.blocked_buffer(node.inputs[0]))
    y = builder.pair_rows_buffer(node.outputs[0]) if y_rows else builder.produce_blocked(node.outputs[0])
    bias_value = present(node, 2)
    residual_rows = plan.has_residual and node.inputs[3].name in builder.pair_rows
    residual = (builder.pair_rows_buffer(node.inputs[3]) if residual_rows else builder.blocked_buffer(node.inputs[3])
                if plan.has_residual else y)
    x_layout = 0 if stem else 2 if x_rows else 1
    builder.emit("conv2d_bf16_nchwc", ints + [x_layout, 2 if y_rows else 1, 2 if residual_rows else 1],
                 list(plan.params),
                 [x, builder.add_constant(packed, label=f"{node.name}:packed_weights_bf16"), y,
                  builder.workspace(max(int(sizes[0]), 4), label="conv"),
                  builder.buffer(bias_value) if bias_value is not None else y, residual])
    if not y_rows:
        builder.finish_blocked(node.outputs[0])


def depthwise_bf16x3_pairs(nodes, outputs, builder, plan_of) -> dict[ir.Node, ir.Node]:
    """Step 1d: each 1x1 conv that runs bf16x3 (split_pointwise) whose input is a depthwise conv's output that only it
    reads, lowered with that conv as one conv_depthwise_bf16x3 step (kernels/conv_depthwise_bf16x3.c): 1x1 node ->
    depthwise node. The depthwise conv a blocked node without residual, its bias constant, of a shape the ISA's
    pair_rows step takes (3x3 or 5x5 across, stride 1 or 2 across, dilation 1 across, at most 25 taps); its output
    (fp32 for the 1x1 conv to read unrounded) is then never written. MobileNetV2-style with fp32_nodes' first two
    projections and first five expands, against DEPTHWISE_BF16X3 off, in one process: see ortx/ep/precision.py."""
    if not DEPTHWISE_BF16X3 or not builder.blocked_nodes:
        return {}
    readers, output_values = _readers(nodes), {id(value) for value in outputs}
    producer = {id(value): node for node in nodes for value in node.outputs}
    pairs = {}
    for node in nodes:
        if node not in builder.blocked_nodes or not split_pointwise(node, builder, plan_of(node)):
            continue
        value = node.inputs[0]
        depthwise = producer.get(id(value))
        if depthwise is None or depthwise not in builder.blocked_nodes or id(value) in output_values:
            continue
        plan = plan_of(depthwise)
        if plan is None or not plan.depthwise or plan.has_residual or len(readers[id(value)]) != 1:
            continue
        bias = present(depthwise, 2)
        if bias is not None and constant_value(bias) is None:
            continue
        kernel_height, kernel_width, _, stride_width = plan.ints[7:11]
        if (kernel_width not in (3, 5) or stride_width not in (1, 2) or plan.ints[14] != 1
                or kernel_height * kernel_width > 25):
            continue
        pairs[node] = depthwise
    return pairs


def lower_depthwise_bf16x3(depthwise: ir.Node, node: ir.Node, builder, depthwise_plan, plan) -> None:
    """Step 2c: one conv_depthwise_bf16x3 step for a depthwise_bf16x3_pairs pair, at the 1x1 conv's place."""
    channels = depthwise_plan.ints[1]
    x_rows = depthwise.inputs[0].name in builder.pair_rows
    x = builder.pair_rows_buffer(depthwise.inputs[0]) if x_rows else builder.blocked_buffer(depthwise.inputs[0])
    y_rows = node.outputs[0].name in builder.pair_rows
    y = builder.pair_rows_buffer(node.outputs[0]) if y_rows else builder.produce_blocked(node.outputs[0])
    residual = builder.blocked_buffer(node.inputs[3]) if plan.has_residual else None
    depthwise_bias_value = present(depthwise, 2)
    depthwise_bias = constant_value(depthwise_bias_value) if depthwise_bias_value is not None else None
    chunk_weights = pack_depthwise_chunks(depthwise_plan.weights.reshape(channels, -1), depthwise_bias, x_rows)
    bias_value = present(node, 2)
    bias = constant_value(bias_value) if bias_value is not None else None
    if bias_value is not None and bias is None:
        raise ValueError(f"bias {bias_value.name!r} is not constant (the blocked 1x1 conv packs it)")
    out_channels = plan.ints[4]
    weights = plan.weights.reshape(out_channels, channels)
    packed, packed_bias, remainders, form = pack_pointwise_bf16x3(weights, bias)
    # a band of rows, every channel blocked: at least BAND_FLOATS, and one output row
    band_floats = max(BAND_FLOATS, -(-channels // LANES) * LANES * depthwise_plan.ints[6])
    builder.emit("conv_depthwise_bf16x3",
                 list(depthwise_plan.ints) + [builder.num_threads, int(x_rows), out_channels,
                                               int(residual is not None), plan.activation, int(y_rows), form,
                                               band_floats],
                 list(depthwise_plan.params) + list(plan.params),
                 [x, builder.add_constant(depthwise_plan.weights.reshape(-1), label=f"{depthwise.name}:weights"),
                  builder.add_constant(depthwise_bias if depthwise_bias is not None else np.zeros(1, np.float32),
                                       label=f"{depthwise.name}:bias"),
                  builder.add_constant(chunk_weights, label=f"{depthwise.name}:chunk_weights"),
                  builder.add_constant(packed, label=f"{node.name}:packed_weights"),
                  builder.add_constant(packed_bias, label=f"{node.name}:packed_bias"), y,
                  residual if residual is not None else y,
                  builder.workspace(4 * band_floats * builder.num_threads, label="depthwise_rows"),
                  builder.add_constant(remainders, label=f"{node.name}:packed_weights_lo")])
    if not y_rows:
        builder.finish_blocked(node.outputs[0])


def _fits_expand_rows(plan) -> bool:
    """The depthwise shapes kernels/conv_expand_depthwise.c computes from rows in place (the AVX-512
    blocked_rows: 3x3 or 5x5, stride 1 or 2, dilation 1), at least 8 output columns: narrower ones fell back to
    scalar loops, slower than the two kernels unfused; since blocked_rows takes them too (3281284), fusing
    MobileNetV2-style's 7x7 pairs as well measured 1.013x [0.941, 1.077] fp32 in-process (2 threads), so not."""
    (_, _, _, _, _, _, out_width, kernel_height, kernel_width, stride_height, stride_width, _, _, dilation_height,
     dilation_width, *_) = plan.ints
    return (kernel_height == kernel_width and kernel_width in (3, 5) and stride_height == stride_width
            and stride_width in (1, 2) and (dilation_height, dilation_width) == (1, 1) and out_width >= 8)


def expand_depthwise_pairs(nodes, outputs, builder, plan_of, pair_rows: str = "all") -> dict[ir.Node, ir.Node]:
    """Step 1b: the depthwise convs lowered together with the 1x1 conv whose output only they read (MobileNetV2's
    expand -> depthwise), as one conv_expand_depthwise_nchwc_f32 step; depthwise node -> 1x1 node. Both must be
    blocked nodes (step 1), the 1x1 conv without residual and its output no segment output, the depthwise conv
    without residual and of a shape _fits_expand_rows takes. Under bf16 the step is conv_expand_depthwise_nchwc_bf16
    (the 1x1 conv in bf16 as conv_pointwise_nchwc_bf16's vdpbf16ps tile computes it, the depthwise conv fp32); on
    the AMX path nothing is fused: its 1x1 steps alone beat the vdpbf16ps tile (MobileNetV2-style, 2 threads, one
    process: fused 0.95-1.03x ORT fp32's time, unfused 0.66-0.71x), and a fused step running the AMX steps over
    its rows measured 1.00-1.15x the unfused runs' time (cls 0.97-1.05x), so it was not kept. Nor, session 34
    (model 167 host, branch expand-depthwise-rows), was one on pair rows: the AMX steps' bf16 rows into a thread's
    window, then the pair-rows depthwise step from it (bitwise the unfused pair): each pair took the unfused pair's
    time (16 -> 96 -> depthwise s2 at 112x112: 0.159 ms fused, 0.104 + 0.055 unfused), MobileNetV2-style 0.997x
    [0.974, 1.008] in-process, so these steps are bound by their own work, not by the expanded map's traffic.
    Nor on the vdpbf16ps path while pair rows are on there (`pair_rows` the session's mode, VDPBF16PS_PAIR_ROWS):
    the expanded maps and the depthwise outputs in pair rows beat the fused step (session 44, AMD Zen 5, 2 threads,
    in-process A/B, unfused with pair rows "all" against fused: MobileNetV2-style 0.85-0.86x, PP-OCR rec 0.86-0.89x,
    det 0.95x, cls 1.02-1.04x)."""
    if builder.precision not in ("fp32", "bf16") or not builder.blocked_nodes:
        return {}
    if (builder.precision == "bf16" and _kernels.bf16_isa() == "avx512_bf16" and VDPBF16PS_PAIR_ROWS
            and pair_rows != "off"):
        return {}  # pair rows instead (see above)
    if builder.precision == "bf16" and _kernels.bf16_isa() == "amx_bf16":
        return {}  # the fused step's 1x1 conv is the vdpbf16ps tile; the AMX steps unfused are faster (see above)
    readers, output_values = _readers(nodes), {id(value) for value in outputs}
    pairs = {}
    for node in nodes:
        if node not in builder.blocked_nodes:
            continue
        plan = plan_of(node)
        if plan is None or not is_pointwise(plan) or plan.has_residual:
            continue
        value = node.outputs[0]
        consumers = readers.get(id(value), [])
        if id(value) in output_values or len(consumers) != 1:
            continue
        depthwise, index = consumers[0]
        if index != 0 or depthwise not in builder.blocked_nodes:
            continue
        depthwise_plan = plan_of(depthwise)
        if (depthwise_plan is not None and depthwise_plan.depthwise and not depthwise_plan.has_residual
                and _fits_expand_rows(depthwise_plan)):
            pairs[depthwise] = node
    logger.debug("%d depthwise convs fused with their 1x1 expand", len(pairs))
    return pairs


def lower_expand_depthwise(expand: ir.Node, depthwise: ir.Node, builder, expand_plan, depthwise_plan) -> None:
    """Step 2b: one conv_expand_depthwise_nchwc_f32 (_bf16 under precision bf16) step for an expand_depthwise_pairs
    pair, at the depthwise conv's place in the order (the expand's output is never made)."""
    expand_bias_value = present(expand, 2)
    expand_bias = constant_value(expand_bias_value) if expand_bias_value is not None else None
    if expand_bias_value is not None and expand_bias is None:
        raise ValueError(f"bias {expand_bias_value.name!r} is not constant (the blocked 1x1 conv packs it)")
    in_channels, out_channels = expand_plan.ints[1], expand_plan.ints[4]
    bf16 = builder.precision_of(expand) == "bf16"
    packed, packed_bias = (pack_pointwise_bf16 if bf16 else pack_pointwise)(
        expand_plan.weights.reshape(out_channels, in_channels), expand_bias)
    x = builder.blocked_buffer(expand.inputs[0])
    y = builder.produce_blocked(depthwise.outputs[0])
    bias_value = present(depthwise, 2)
    builder.emit("conv_expand_depthwise_nchwc_bf16" if bf16 else "conv_expand_depthwise_nchwc_f32",
                 list(depthwise_plan.ints) + [builder.num_threads, in_channels, expand_plan.activation, 0],
                 list(depthwise_plan.params) + list(expand_plan.params),
                 [x, builder.add_constant(packed, label=f"{expand.name}:packed_weights"),
                  builder.add_constant(packed_bias, label=f"{expand.name}:packed_bias"),
                  builder.add_constant(depthwise_plan.weights.reshape(-1), label=f"{depthwise.name}:weights"), y,
                  builder.buffer(bias_value) if bias_value is not None else y],
                 product_node=expand.name)  # under bf16 the expand's products are bf16, the depthwise conv's fp32
    builder.finish_blocked(depthwise.outputs[0])
