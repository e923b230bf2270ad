"""Sparse lowerings: constant weights packed as blocked CSR in column panels (kernels/sparse.h) for sparse_conv2d_f32
and sparse_gemm_f32, when ortx.tune.sparse_choice says sparse is faster for the layer; the panel count is the
kernel's (sparse_sizes_f32), so a panel of B rows stays in L2.

Conv -> sparse_conv2d_f32 (group 1, fp32; epilogues bias, residual, activation as the dense conv);
Gemm (constant B, no general C) and MatMul (one constant 2-D B) -> sparse_gemm_f32 on W^T.
ai.ortx::QConv (int8, ortx/ep/lowering/qdq.py) -> sparse_qconv2d_i8 on the weights as quad CSR (QuadCsr: VNNI's
4-wide k blocks, in the dense packed K order).
Depthwise, grouped and transposed convs, bf16 and products of two activations always stay dense.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ortx import _kernels

BLOCK_ROWS = (1, 4)  # the fast kernels' block heights (kernels/sparse_avx512.c)


@dataclasses.dataclass(frozen=True)
class BlockedCsr:
    """Blocked CSR of a rows x depth matrix in `panels` column panels of ceil(depth / panels) columns (the last ones
    may be narrower or empty): block row i of panel p holds blocks row_ptr[p*nbr + i]:row_ptr[p*nbr + i + 1]
    (nbr = ceil(rows / R)), block b sits in column cols[b] and holds values[b*R:(b+1)*R] for rows i*R .. i*R+R-1
    (rows past `rows` are zero)."""
    rows: int
    depth: int
    block_rows: int
    values: np.ndarray  # float32 [blocks * R]
    cols: np.ndarray  # int32 [blocks]
    row_ptr: np.ndarray  # int32 [panels * ceil(rows / R) + 1]
    panels: int = 1

    @property
    def blocks(self) -> int:
        return int(self.cols.size)

    @property
    def stored_density(self) -> float:
        """Multiply-adds the kernel runs per dense multiply-add (stored values, zeros inside blocks included)."""
        return self.values.size / max(self.rows * self.depth, 1)


def pack_blocked_csr(matrix: np.ndarray, block_rows: int = 1, panels: int = 1) -> BlockedCsr:
    """Blocked CSR of a 2-D float matrix in `panels` column panels; a block is kept when any of its R values is
    nonzero."""
    if block_rows not in BLOCK_ROWS:
        raise ValueError(f"blocked CSR: block_rows {block_rows} is not one of {BLOCK_ROWS}")
    if panels < 1:
        raise ValueError(f"blocked CSR: panels {panels} must be >= 1")
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"blocked CSR: expected a 2-D matrix, got shape {matrix.shape}")
    rows, depth = matrix.shape
    if rows * depth >= 2 ** 31:
        raise ValueError(f"blocked CSR: {rows}x{depth} has too many elements for int32 indices")
    width = max(1, -(-depth // panels))  # kernels/sparse.c: panel_width
    padded_rows = -(-rows // block_rows) * block_rows
    padded = np.zeros((padded_rows, depth), np.float32)
    padded[:rows] = matrix
    blocks = padded.reshape(-1, block_rows, depth).transpose(0, 2, 1)  # [block row, column, R]
    values, cols, row_ptr = _panel_csr(blocks, width, panels)
    return BlockedCsr(rows, depth, block_rows, values.astype(np.float32), cols, row_ptr, panels)


def _panel_csr(units: np.ndarray, width: int, panels: int):
    """(values, cols, row_ptr) of units [rows, columns, unit size] in `panels` column panels of `width` columns,
    keeping the units with any nonzero: panel p of row i owns entries row_ptr[p*rows + i]:row_ptr[p*rows + i + 1],
    columns absolute, values the kept units' elements in order."""
    keep = np.any(units != 0, axis=2)
    counts, cols, values = [], [], []
    for panel in range(panels):
        start = panel * width
        panel_keep = keep[:, start:start + width]
        counts.append(panel_keep.sum(axis=1))
        cols.append(np.nonzero(panel_keep)[1] + start)
        values.append(units[:, start:start + width][panel_keep].reshape(-1))
    row_ptr = np.zeros(panels * keep.shape[0] + 1, np.int32)
    np.cumsum(np.concatenate(counts), out=row_ptr[1:])
    return np.ascontiguousarray(np.concatenate(values)), np.concatenate(cols).astype(np.int32), row_ptr


def unpack_blocked_csr(csr: BlockedCsr) -> np.ndarray:
    """The dense rows x depth matrix (the round trip of pack_blocked_csr)."""
    block_count = -(-csr.rows // csr.block_rows)
    dense = np.zeros((block_count, csr.depth, csr.block_rows), np.float32)
    block_row_of = np.repeat(np.arange(csr.row_ptr.size - 1) % max(block_count, 1), np.diff(csr.row_ptr))
    dense[block_row_of, csr.cols] = csr.values.reshape(-1, csr.block_rows)
    return dense.transpose(0, 2, 1).reshape(-1, csr.depth)[:csr.rows]


QGEMM_MR = 8  # kernels/qgemm.h ORTX_QGEMM_MR: rows per panel of the dense packed int8 weights


@dataclasses.dataclass(frozen=True)
class QuadCsr:
    """int8 weights of `rows` output channels as CSR over quads of k in the dense kernel's packed K order, in K panels
    of `panel_quads` quads (kernels/qgemm.h ortx_qsparse): row m holds in panel p entries
    row_ptr[p * rows + m]:row_ptr[p * rows + m + 1], entry e is quad cols[e] with weights values[4e:4e + 4]."""
    rows: int
    quads: int  # K4: quads per row, stored or not
    values: np.ndarray  # int8 [stored * 4]
    cols: np.ndarray  # int32 [stored]
    row_ptr: np.ndarray  # int32 [panels * rows + 1]
    panel_quads: int = 128

    @property
    def panels(self) -> int:
        return max(1, -(-self.quads // self.panel_quads))

    @property
    def stored_density(self) -> float:
        """Multiply-adds the kernel runs per dense multiply-add (zeros inside stored quads included)."""
        return self.cols.size / max(self.rows * self.quads, 1)


def pack_quad_csr(packed: np.ndarray, out_channels: int, group: int = 1, panel_quads: int = 128) -> QuadCsr:
    """Quad CSR of weights packed by qconv_pack_weights_i8 ([group][panels][K4][MR][4], rows past each group's
    channels zero) in K panels of `panel_quads` (qconv_sizes_i8's fourth size); a quad is kept when any of its four
    weights is nonzero."""
    cout_g = out_channels // group
    panels = -(-cout_g // QGEMM_MR)
    quads = packed.size // max(group * panels * QGEMM_MR * 4, 1)
    if packed.size != group * panels * quads * QGEMM_MR * 4:
        raise ValueError(f"quad CSR: {packed.size} packed bytes are not {group} groups of {panels} panels of "
                         f"[K4][{QGEMM_MR}][4]")
    by_row = packed.reshape(group, panels, quads, QGEMM_MR, 4).transpose(0, 1, 3, 2, 4)
    by_row = by_row.reshape(group, panels * QGEMM_MR, quads, 4)[:, :cout_g].reshape(out_channels, quads, 4)
    values, cols, row_ptr = _panel_csr(by_row, panel_quads, max(1, -(-quads // panel_quads)))
    return QuadCsr(out_channels, quads, values.astype(np.int8), cols, row_ptr, panel_quads)


def unpack_quad_csr(csr: QuadCsr) -> np.ndarray:
    """[rows, K4, 4] int8 quads (the round trip of pack_quad_csr; not stored quads are zero)."""
    quads = np.zeros((csr.rows, csr.quads, 4), np.int8)
    row_of = np.repeat(np.arange(csr.row_ptr.size - 1) % max(csr.rows, 1), np.diff(csr.row_ptr))
    quads[row_of, csr.cols] = csr.values.reshape(-1, 4)
    return quads


def add_csr(builder, csr: BlockedCsr | QuadCsr, label: str):
    """The three constant buffers of a packed weight (values, cols, row_ptr); one spare element each so an all-zero
    matrix still has addresses."""
    return [builder.add_constant(np.append(array, np.zeros(1, array.dtype)), label=f"{label}:{name}")
            for name, array in (("values", csr.values), ("cols", csr.cols), ("row_ptr", csr.row_ptr))]


def kernel_sizes(kind: int, ints) -> tuple[int, int]:
    """(workspace bytes, panel count) from sparse_sizes_f32: kind 0 with the 20 conv ints, 1 with M, N, K, threads."""
    out = np.zeros(3, np.int64)
    _kernels.call("sparse_sizes_f32", [kind, *ints], [], [out])
    return int(out[0]), int(out[1])


def conv_columns(conv_ints, csr: BlockedCsr) -> tuple[int, BlockedCsr]:
    """The column layout sparse_conv2d_f32 reads for these 20 conv ints (kernels/sparse.h ORTX_SPARSE_CONV_LAYOUT)
    and csr with its columns in it: 0 keeps the patch columns; 1 (stride-1 convs of 9-64 wide rows) maps each to its
    row of the kernel's shifted planes."""
    out = np.zeros(3, np.int64)
    _kernels.call("sparse_sizes_f32", [0, *conv_ints], [], [out])
    if out[2] == 0:
        return 0, csr
    rows = np.zeros(max(csr.depth, 1), np.int32)
    _kernels.call("sparse_sizes_f32", [2, *conv_ints], [], [rows])
    return 1, dataclasses.replace(csr, cols=rows[csr.cols])


def workspace_bytes(kind: int, ints) -> int:
    return kernel_sizes(kind, ints)[0]


def panel_count(kind: int, ints) -> int:
    """Panels the kernel wants for these sizes: each panel's B rows of a 64-column tile fit its L2 budget."""
    return kernel_sizes(kind, ints)[1]


def emit_sparse_conv(builder, node_name: str, conv_ints, params, csr: BlockedCsr, buffers) -> None:
    """buffers: X, Y, bias (or None), residual (or None); csr packed in panel_count(0, conv ints) panels or more."""
    x, y, bias, residual = buffers
    layout, csr = conv_columns(list(conv_ints) + [builder.num_threads], csr)
    ints = list(conv_ints) + [builder.num_threads, csr.block_rows, csr.panels, layout]
    workspace = builder.workspace(max(workspace_bytes(0, ints[:20]), 4), label="sparse_patches")
    values, cols, row_ptr = add_csr(builder, csr, f"{node_name}:csr")
    builder.emit("sparse_conv2d_f32", ints, list(params),
                 [x, values, cols, row_ptr, y, workspace, bias if bias is not None else y,
                  residual if residual is not None else y])


def emit_sparse_gemm(builder, node_name: str, M: int, csr: BlockedCsr, a, y, bias=None, activation: int = 0,
                     activation_params=(0.0, 0.0), residual=None) -> None:
    """Y[M, N] = act(A[M, K] @ W + bias + residual) with csr = W^T (N x K); A row-major with row stride K, the
    residual (a buffer, or None) laid out as Y."""
    N, K = csr.rows, csr.depth
    workspace = builder.workspace(max(workspace_bytes(1, [M, N, K, builder.num_threads]), 4),
                                  label="sparse_transposed")
    values, cols, row_ptr = add_csr(builder, csr, f"{node_name}:csr")
    builder.emit("sparse_gemm_f32", [M, N, K, K, csr.block_rows, int(bias is not None), activation,
                                     builder.num_threads, csr.panels, int(residual is not None)],
                 list(activation_params), [a, values, cols, row_ptr, y, workspace, bias if bias is not None else y,
                                           residual if residual is not None else y])


def emit_sparse_qconv(builder, node_name: str, ints, params, csr: QuadCsr, buffers) -> None:
    """sparse_qconv2d_i8 with qconv2d_i8's ints and workspace size; buffers: x, bias_eff, multiplier, output,
    workspace, residual (qconv2d_i8's, without the packed weights)."""
    x, bias, multiplier, output, workspace, residual = buffers
    values, cols, row_ptr = add_csr(builder, csr, f"{node_name}:quad_csr")
    builder.emit("sparse_qconv2d_i8", list(ints), list(params),
                 [x, values, bias, multiplier, output, workspace, residual, cols, row_ptr])


# The lowerings' entry points: each returns False (emitting nothing) when the layer stays dense. ----------------

def _policy(builder):
    from ortx.tune.sparse_choice import SparsePolicy

    return builder.sparse_policy if getattr(builder, "sparse_policy", None) is not None else SparsePolicy("off")


def _choose(node, builder, kind: str, shape_text: str, weights: np.ndarray | None, zeros: float | None = None):
    """zeros: the fraction the choice goes by (default: of `weights`' elements)."""
    from ortx.tune.sparse_choice import zero_fraction

    zeros = zero_fraction(weights) if zeros is None else zeros
    choice = _policy(builder).choose(node, kind, shape_text, zeros, builder.num_threads)
    return choice if choice.engine == "sparse" else None


def sparse_conv_choice(node, builder, plan):
    """ortx.tune.sparse_choice's choice for a non-depthwise fp32 conv when it is the sparse kernel, else None."""
    ints = plan.ints
    if ints[15] != 1:  # Case grouped: not covered by sparse_conv2d_f32
        return None
    weights = plan.weights.reshape(ints[4], -1)
    shape_text = "x".join(map(str, ints[:4])) + "|" + "x".join(map(str, (ints[4], *plan.weights.shape[1:]))) + \
        "|" + ",".join(map(str, ints[9:15]))
    return _choose(node, builder, "conv", shape_text, weights)


def try_sparse_conv(node, builder, plan, buffers) -> bool:
    """plan: conv.ConvPlan of a non-depthwise fp32 conv; buffers: X, Y, bias (or None), residual (or None)."""
    choice = sparse_conv_choice(node, builder, plan)
    if choice is None:
        return False
    ints = plan.ints
    weights = plan.weights.reshape(ints[4], -1)
    panels = panel_count(0, list(ints) + [builder.num_threads])
    emit_sparse_conv(builder, node.name, ints, plan.params, pack_blocked_csr(weights, choice.block_rows, panels),
                     buffers)
    return True


def sparse_qconv_choice(node, builder, ints, csr: QuadCsr):
    """The choice for an int8 conv/GEMM (qconv2d_i8's ints, its weights as quad CSR) when it is the sparse kernel,
    else None; it goes by the fraction of all-zero quads; depthwise and grouped convs stay dense."""
    if ints[15] != 1:
        return None
    shape_text = "x".join(map(str, ints[:16])) + f"|in{ints[17]}out{ints[18]}"
    return _choose(node, builder, "qconv", shape_text, None, 1.0 - csr.stored_density)


def try_sparse_gemm(node, builder, M: int, weights_t: np.ndarray, a, y, bias=None, residual=None, activation: int = 0,
                    activation_params=(0.0, 0.0)) -> bool:
    """Y[M, N] = act(A[M, K] @ W (+ bias[N]) (+ residual[M, N])) with weights_t = W^T (N x K, alpha folded in), A
    row-major. `bias`: a buffer, or a numpy array stored as a constant only when the sparse kernel is chosen (a dense
    lowering that follows must not carry an unused copy); `residual`: a buffer laid out as Y, or None; `activation`:
    a kernels/activation.h code."""
    N, K = weights_t.shape
    choice = _choose(node, builder, "gemm", f"{M}x{K}x{N}", weights_t)
    if choice is None:
        return False
    if isinstance(bias, np.ndarray):
        bias = builder.add_constant(bias, label=f"{node.name}:bias")
    panels = panel_count(1, [M, N, K, builder.num_threads])
    emit_sparse_gemm(builder, node.name, M, pack_blocked_csr(weights_t, choice.block_rows, panels), a, y, bias,
                     activation, activation_params, residual=residual)
    return True
