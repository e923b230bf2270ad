"""Conv-mode GEMM problems (ortx.codegen.gemm.from_conv_step) for the GEMM tuner: seeded operands with their float64
reference, and the prebuilt conv2d_f32 called like a generated kernel (the baseline a schedule must beat).

Operands as a conv-mode kernel takes them: a = the weights packed by gemm_pack_f32 as the lowering packs them,
b = the image X, then bias and residual when the problem has them. The reference is the direct definition of the
convolution in float64 (sum over input channels and taps of the zero-padded input), not another GEMM.
"""
from __future__ import annotations

import numpy as np

from ortx import _kernels
from ortx.codegen import gemm


def conv_operands(problem: gemm.GemmProblem, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    (_, cin, height, width, cout, out_height, out_width, kernel_height, kernel_width, stride_height, stride_width,
     pad_top, pad_left, dilation_height, dilation_width, _, _, _, _, _) = problem.conv
    rng = np.random.default_rng(seed)
    weights = rng.uniform(-1.0, 1.0, (cout, cin, kernel_height, kernel_width)).astype(np.float32)
    x = rng.uniform(-1.0, 1.0, (cin, height, width)).astype(np.float32)
    packed = np.empty(problem.extent("a"), np.float32)
    _kernels.call("gemm_pack_f32", [cout, problem.k, problem.k, 1, 0], [1.0], [weights.reshape(cout, -1), packed])
    rows = (out_height - 1) * stride_height + (kernel_height - 1) * dilation_height + 1
    cols = (out_width - 1) * stride_width + (kernel_width - 1) * dilation_width + 1
    padded = np.zeros((cin, max(rows, pad_top + height), max(cols, pad_left + width)))
    padded[:, pad_top:pad_top + height, pad_left:pad_left + width] = x
    value = np.zeros((cout, out_height, out_width))
    for ky in range(kernel_height):
        for kx in range(kernel_width):
            top, left = ky * dilation_height, kx * dilation_width
            patch = padded[:, top:top + (out_height - 1) * stride_height + 1:stride_height,
                           left:left + (out_width - 1) * stride_width + 1:stride_width]
            value += np.einsum("oc,cyx->oyx", weights[:, :, ky, kx].astype(np.float64), patch)
    value = value.reshape(cout, -1)
    arrays = [packed, x.reshape(-1)]
    if problem.bias:
        bias = rng.uniform(-1.0, 1.0, cout).astype(np.float32)
        arrays.append(bias)
        value = value + bias[:, None]
    if problem.residual_row_stride:
        residual = rng.uniform(-1.0, 1.0, cout * problem.n).astype(np.float32)
        arrays.append(residual)
        value = value + residual.reshape(cout, -1)
    return arrays, gemm.apply_activation(problem, value)


class PrebuiltConv:
    """The prebuilt conv2d_f32 (kernels/conv.c) on a conv-mode problem, called like a GemmKernel."""

    def __init__(self, problem: gemm.GemmProblem):
        self.problem = problem
        sizes = np.zeros(3, np.int64)
        _kernels.call("conv_sizes_f32", [0, *problem.conv], [], [sizes])
        self._workspace = np.empty(int(sizes[0]) // 4 + 1, np.float32)

    def __call__(self, a, b, c, bias=None, residual=None, *, num_threads: int = 1):
        _kernels.call("conv2d_f32", list(self.problem.conv), list(self.problem.params),
                      [b, a, c, self._workspace, bias if bias is not None else c,
                       residual if residual is not None else c], num_threads)
        return c
