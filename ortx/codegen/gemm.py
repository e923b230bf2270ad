"""Generated SGEMM kernels: (problem, schedule) -> C specialised to the shape -> JIT-compiled -> a callable.

1. GemmProblem: the fixed shape, operand strides and epilogue (alpha, bias per row or column, a cheap activation).
2. GemmSchedule: how to compute it (frozen, literal data): ISA, register tile MR x NR, KC/MC/NC blocking, loop
   order, K-loop unroll, prefetch distance, whether A is packed, and the task grid TASKS_M x TASKS_N.
3. render_gemm: templates/gemm.c with the problem and schedule as literals and the ISA's vector primitives
   (templates/gemm_<isa>.c) pasted in; the symbol is a hash of the rest of the source, so equal inputs render
   byte-identical files.
4. build_gemm: compiled through ortx.codegen.jit (same content-hash cache, lock and checksum sidecars as segments)
   and wrapped as a GemmKernel, which passes ortx's thread pool (ortx_parallel_for) in as a function pointer.
5. Steps: from_gemm_step reads a gemm_f32 step's ints and floats (kernels/gemm.c) as a GemmProblem, B possibly in
   kernels/gemm.h's packed format (constant weights, packed by the lowering); the generated object's
   `<symbol>_step` takes that step's arguments unchanged, so a JIT'd segment can call it in gemm_f32's place.
6. Convs: from_conv_step reads a conv2d_f32 step (one image, one group) as a GemmProblem in conv mode (`conv`
   holds its ints): A the lowering's packed weights, B the patch matrix packed block by block through
   kernels/conv_source.c (templates/gemm.c, conv mode), and `<symbol>_step` takes conv2d_f32's arguments.
Limits: fp32 only; the epilogue's residual is row-major (unit column stride, not broadcast over rows) and its
activations only those that need no exp (none, relu, leaky relu, clip, hard sigmoid, hard swish); A is never
prepacked; NEON renders but is only compiled by an AArch64 compiler.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import platform
import string
import threading
from importlib import resources

import numpy as np

from ortx import _kernels
from ortx.codegen import jit
from ortx.codegen.render import _c_float
from ortx.config import Options

ISAS = ("portable", "avx2", "avx512", "neon")
VECTOR_WIDTH = {"portable": 4, "avx2": 8, "avx512": 16, "neon": 4}  # floats per vector in templates/gemm_<isa>.c
VECTOR_REGISTERS = {"portable": 16, "avx2": 16, "avx512": 32, "neon": 32}  # portable: SSE on x86-64, NEON on arm
# kernels/activation.h codes the template has
ACTIVATIONS = {0: "none", 1: "relu", 2: "leaky_relu", 3: "clip", 5: "hard_sigmoid", 6: "hard_swish"}
BIAS_MODES = {0: "none", 1: "row", 2: "column"}
MAX_VECTORS_PER_ROW = 8  # the template unrolls the vector loop by 8
MAX_TILE_ROWS = 32  # and the row loop by 32
# kernels/gemm.h's packed-panel format, which a prepacked B arrives in: ORTX_GEMM_NR columns per panel and
# ORTX_GEMM_KC deep blocks (tests/codegen/test_gemm.py checks them against gemm_pack_f32).
PREPACKED_NR = 16
PREPACKED_KC = 256
PREPACKED_MR = 6  # its A panels' rows (ORTX_GEMM_MR), in which conv2d_f32's weights arrive
CONV_INTS = 20  # conv2d_f32's ints (kernels/conv.h)


class GemmError(ValueError):
    """A problem or schedule the template cannot render; the message names the field."""


@dataclasses.dataclass(frozen=True)
class GemmProblem:
    """C[m, n] = act(alpha * A @ B + bias + residual_scale * R): A element (i, k) at a[i*a_strides[0] + k*a_strides[1]],
    B element (k, j) at b[k*b_strides[0] + j*b_strides[1]] (or, b_packed, in kernels/gemm.h's packed panels;
    b_strides unused), C element (i, j) at c[i*c_row_stride + j], R element (i, j) at r[i*residual_row_stride + j]
    (residual_row_stride 0: no residual)."""

    m: int
    n: int
    k: int
    a_strides: tuple[int, int]
    b_strides: tuple[int, int]
    c_row_stride: int
    alpha: float = 1.0
    bias: int = 0  # BIAS_MODES
    activation: int = 0  # ACTIVATIONS
    params: tuple[float, float] = (0.0, 0.0)  # LeakyRelu alpha; Clip min, max
    b_packed: bool = False
    residual_row_stride: int = 0
    residual_scale: float = 1.0
    conv: tuple[int, ...] = ()  # conv mode: conv2d_f32's ints (one image, one group); A and B as the module says

    @classmethod
    def dense(cls, m: int, n: int, k: int, *, transpose_a: bool = False, transpose_b: bool = False,
              **epilogue) -> "GemmProblem":
        """Contiguous operands: A is [m, k] (or [k, m] when transpose_a), B [k, n] (or [n, k]), C [m, n]."""
        return cls(m, n, k, (1, m) if transpose_a else (k, 1), (1, k) if transpose_b else (n, 1), n, **epilogue)

    def __post_init__(self):
        for name in ("m", "n", "k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise GemmError(f"GemmProblem.{name} must be a positive int, got {value!r}")
        if self.c_row_stride < self.n:
            raise GemmError(f"GemmProblem.c_row_stride {self.c_row_stride} is below n={self.n}")
        if self.bias not in BIAS_MODES:
            raise GemmError(f"GemmProblem.bias {self.bias!r} is not one of {BIAS_MODES}")
        if self.activation not in ACTIVATIONS:
            raise GemmError(f"GemmProblem.activation {self.activation!r}: the template has only {ACTIVATIONS}")
        if self.residual_row_stride < 0 or (0 < self.residual_row_stride < self.n and self.m > 1):
            raise GemmError(f"GemmProblem.residual_row_stride {self.residual_row_stride}: 0 (none) or at least n")
        if self.conv:
            ints = self.conv
            shape = (ints[4], ints[5] * ints[6], ints[1] * ints[7] * ints[8])
            if len(ints) != CONV_INTS or ints[0] != 1 or ints[15] != 1 or (self.m, self.n, self.k) != shape:
                raise GemmError(f"GemmProblem.conv {ints}: needs {CONV_INTS} conv2d_f32 ints of one image and one "
                                f"group, with m x n x k = Cout x OH*OW x Cin*KH*KW = {shape}")

    @property
    def signature(self) -> str:
        """The tuning-records key of the problem (shape, strides, epilogue; a conv's geometry)."""
        if self.conv:
            (_, cin, height, width, cout, out_height, out_width, kernel_height, kernel_width, stride_height,
             stride_width, pad_top, pad_left, dilation_height, dilation_width, _, _, _, _, threads) = self.conv
            return (f"conv2d_f32|{cin}x{height}x{width}->{cout}x{out_height}x{out_width}"
                    f"|kernel={kernel_height}x{kernel_width}|stride={stride_height},{stride_width}"
                    f"|pad={pad_top},{pad_left}|dilation={dilation_height},{dilation_width}|workspace_threads={threads}"
                    f"|bias={self.bias}|act={self.activation}:{self.params[0]!r},{self.params[1]!r}"
                    + (f"|residual={self.residual_row_stride}" if self.residual_row_stride else ""))
        b_layout = "packed" if self.b_packed else f"{self.b_strides[0]},{self.b_strides[1]}"
        return (f"gemm_f32|{self.m}x{self.n}x{self.k}|a={self.a_strides[0]},{self.a_strides[1]}"
                f"|b={b_layout}|c={self.c_row_stride}|alpha={self.alpha!r}"
                f"|bias={self.bias}|act={self.activation}:{self.params[0]!r},{self.params[1]!r}"
                + (f"|residual={self.residual_row_stride}:{self.residual_scale!r}" if self.residual_row_stride else ""))

    def extent(self, operand: str) -> int:
        """Elements a flat buffer for operand "a", "b" or "c" must hold (conv mode: a the packed weights, b X)."""
        if self.conv and operand in ("a", "b"):
            return _round_up(self.m, PREPACKED_MR) * self.k if operand == "a" else self.k // (
                self.conv[7] * self.conv[8]) * self.conv[2] * self.conv[3]
        if operand == "b" and self.b_packed:
            return _round_up(self.n, PREPACKED_NR) * self.k
        rows, cols, strides = {"a": (self.m, self.k, self.a_strides), "b": (self.k, self.n, self.b_strides),
                               "c": (self.m, self.n, (self.c_row_stride, 1)),
                               "residual": (self.m, self.n, (self.residual_row_stride, 1))}[operand]
        return (rows - 1) * strides[0] + (cols - 1) * strides[1] + 1

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


def apply_activation(problem: GemmProblem, value: np.ndarray) -> np.ndarray:
    """The template's epilogue activation (ACTIVATIONS codes) in numpy, for reference results."""
    if problem.activation == 1:
        return np.maximum(value, 0.0)
    if problem.activation == 2:
        return np.where(value >= 0, value, problem.params[0] * value)
    if problem.activation == 3:
        return np.clip(value, problem.params[0], problem.params[1])
    if problem.activation == 5:
        return np.clip(problem.params[0] * value + problem.params[1], 0.0, 1.0)
    if problem.activation == 6:
        return value * np.clip(value / 6.0 + 0.5, 0.0, 1.0)
    return value


@dataclasses.dataclass(frozen=True)
class GemmSchedule:
    """How templates/gemm.c computes a problem; every field is a literal in the rendered C."""

    isa: str = "avx512"
    mr: int = 6  # rows of the register tile
    nr: int = 32  # columns of the register tile, a multiple of the ISA's vector width
    kc: int = 256  # depth of a packed block
    mc: int = 144  # rows per block of A (a multiple of mr)
    nc: int = 1024  # columns per block of B (a multiple of nr)
    loop_order: str = "jr_ir"  # inside a block: "jr_ir" (B micro-panel outer) or "ir_jr" (A micro-panel outer)
    unroll: int = 4  # of the k loop
    prefetch: int = 0  # k steps ahead the tile prefetches its A and B panels; 0 = none
    pack_a: bool = False  # False: tiles broadcast A's elements from A itself
    pack_b: bool = True  # False: tiles load B's rows from B itself (row-major B only: b_strides[1] == 1)
    tasks_m: int = 1  # the output is split into tasks_m x tasks_n tasks for the thread pool
    tasks_n: int = 2

    def problems(self, problem: GemmProblem | None = None) -> list[str]:
        """Why this schedule cannot be rendered (for `problem`, when given); empty when it can."""
        found = []
        if self.isa not in ISAS:
            return [f"isa {self.isa!r} is not one of {ISAS}"]
        width = VECTOR_WIDTH[self.isa]
        if not 1 <= self.mr <= MAX_TILE_ROWS:
            found.append(f"mr {self.mr} is not in 1..{MAX_TILE_ROWS}")
        if self.nr < width or self.nr % width or self.nr // width > MAX_VECTORS_PER_ROW:
            found.append(f"nr {self.nr} is not 1..{MAX_VECTORS_PER_ROW} vectors of {width} floats ({self.isa})")
        if self.kc < 1:
            found.append(f"kc {self.kc} is not positive")
        if self.mc < self.mr or self.mc % self.mr:
            found.append(f"mc {self.mc} is not a positive multiple of mr {self.mr}")
        if self.nc < self.nr or self.nc % self.nr:
            found.append(f"nc {self.nc} is not a positive multiple of nr {self.nr}")
        if self.loop_order not in ("jr_ir", "ir_jr"):
            found.append(f"loop_order {self.loop_order!r} is not 'jr_ir' or 'ir_jr'")
        if not 1 <= self.unroll <= 16:
            found.append(f"unroll {self.unroll} is not in 1..16")
        if self.prefetch < 0:
            found.append(f"prefetch {self.prefetch} is negative")
        if self.tasks_m < 1 or self.tasks_n < 1:
            found.append(f"tasks {self.tasks_m} x {self.tasks_n} is not positive")
        if problem is not None and problem.b_packed:
            if self.kc != PREPACKED_KC or self.nr % PREPACKED_NR or self.pack_b:
                found.append(f"a prepacked B needs kc {PREPACKED_KC}, nr a multiple of {PREPACKED_NR} and pack_b "
                             f"False (got kc {self.kc}, nr {self.nr}, pack_b {self.pack_b})")
        elif problem is not None and problem.conv:
            if self.nr % PREPACKED_NR or not self.pack_b:
                found.append(f"a conv's B needs nr a multiple of {PREPACKED_NR} and pack_b True (got nr {self.nr}, "
                             f"pack_b {self.pack_b})")
            if not self.pack_a and (self.mr != PREPACKED_MR or self.kc != PREPACKED_KC):
                found.append(f"a conv's packed weights are read in place only with mr {PREPACKED_MR} and kc "
                             f"{PREPACKED_KC}; pack_a otherwise (got mr {self.mr}, kc {self.kc})")
        elif problem is not None and not self.pack_b and problem.b_strides[1] != 1:
            found.append(f"pack_b False needs a row-major B (b_strides[1] == 1), got b_strides {problem.b_strides}")
        return found

    @property
    def registers(self) -> int:
        """Vector registers the tile's inner loop holds: accumulators, B vectors and one broadcast."""
        vectors = self.nr // VECTOR_WIDTH[self.isa]
        return self.mr * vectors + vectors + 1

    def __str__(self) -> str:
        return ", ".join(f"{field.name}={getattr(self, field.name)}" for field in dataclasses.fields(self))


def runnable_isas() -> tuple[str, ...]:
    """The ISAs whose kernels run on this CPU, lowest first."""
    if platform.machine().lower() in ("aarch64", "arm64"):
        return ("portable", "neon")
    order = ("portable", "avx2", "avx512")
    return order[: order.index(_kernels.cpu_isa()) + 1]


# Compiled with the JIT's flags plus these: no contraction of the epilogue's alpha * x + bias into one FMA, so the
# epilogue rounds as the `_ref` kernel and the prebuilt ones do (the K loop's FMAs are explicit intrinsics).
EXTRA_FLAGS = ("-ffp-contract=off",)


@dataclasses.dataclass(frozen=True)
class RenderedGemm:
    symbol: str
    source: str
    problem: GemmProblem
    schedule: GemmSchedule
    workspace_floats: int  # what ${symbol}_workspace_floats() returns
    extra_flags: tuple[str, ...] = EXTRA_FLAGS  # ortx.codegen.jit compiles with FLAGS + these


def _template(name: str) -> str:
    return resources.files("ortx.codegen").joinpath(f"templates/{name}").read_text()


def template_hash() -> str:
    """Hash of the driver and every ISA's primitives: the template part of a tuning record's key."""
    digest = hashlib.sha256(_template("gemm.c").encode())
    for isa in ISAS:
        digest.update(_template(f"gemm_{isa}.c").encode())
    return "gemm:" + digest.hexdigest()[:16]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@functools.lru_cache(maxsize=256)
def conv_source_sizes(conv: tuple[int, ...]) -> tuple[int, int, bool]:
    """(scratch floats, source bytes, whether it packs from planes) of a conv's B source (kernels/conv_source.c)."""
    sizes = np.zeros(3, np.int64)
    _kernels.call("conv_source_sizes_f32", list(conv), [], [sizes])
    return int(sizes[0]), int(sizes[1]), bool(sizes[2])


def workspace_floats(problem: GemmProblem, schedule: GemmSchedule) -> int:
    """Packed B and A (when the schedule packs them) and 16 floats to align the start (templates/gemm.c); conv
    mode: packed A, a KC x NC block of B per workspace thread and the conv source's scratch."""
    if problem.conv:
        packed_a = _round_up(problem.m, schedule.mr) * problem.k if schedule.pack_a else 0
        block = _round_up(min(schedule.kc, problem.k) * min(schedule.nc, _round_up(problem.n, PREPACKED_NR)), 16)
        return _round_up(packed_a, 16) + problem.conv[19] * block + conv_source_sizes(problem.conv)[0] + 16
    packed_a = _round_up(problem.m, schedule.mr) * problem.k if schedule.pack_a else 0
    packed_b = _round_up(problem.n, schedule.nr) * problem.k if schedule.pack_b else 0
    return packed_b + packed_a + 16


def render_gemm(problem: GemmProblem, schedule: GemmSchedule) -> RenderedGemm:
    reasons = schedule.problems(problem)
    if reasons:
        raise GemmError(f"schedule ({schedule}): {'; '.join(reasons)}")
    fields = dict(
        m=problem.m, n=problem.n, k=problem.k, a_row_stride=problem.a_strides[0], a_col_stride=problem.a_strides[1],
        b_row_stride=problem.b_strides[0], b_col_stride=problem.b_strides[1], c_row_stride=problem.c_row_stride,
        alpha=_c_float(np.float32(problem.alpha)), bias_mode=problem.bias, activation=problem.activation,
        param0=_c_float(np.float32(problem.params[0])), param1=_c_float(np.float32(problem.params[1])),
        residual_row_stride=problem.residual_row_stride,
        residual_scale=_c_float(np.float32(problem.residual_scale)),
        isa=schedule.isa, mr=schedule.mr, nv=schedule.nr // VECTOR_WIDTH[schedule.isa], kc=schedule.kc,
        mc=schedule.mc, nc=schedule.nc, unroll=schedule.unroll, prefetch=schedule.prefetch,
        pack_a=int(schedule.pack_a), pack_b=int(schedule.pack_b), b_prepacked=int(problem.b_packed),
        prepacked_nr=PREPACKED_NR, jr_outer=int(schedule.loop_order == "jr_ir"),
        tasks_m=schedule.tasks_m, tasks_n=schedule.tasks_n, schedule=str(schedule),
        workspace_floats=workspace_floats(problem, schedule), prepacked_mr=PREPACKED_MR, prepacked_kc=PREPACKED_KC,
        conv_mode=int(bool(problem.conv)), conv_threads=problem.conv[19] if problem.conv else 1,
        conv_source_floats=conv_source_sizes(problem.conv)[0] if problem.conv else 0,
        conv_source_bytes=conv_source_sizes(problem.conv)[1] if problem.conv else 8,
        conv_ints=", ".join(str(value) for value in problem.conv) or "0",
        isa_source=_template(f"gemm_{schedule.isa}.c").rstrip("\n"),
    )
    template = string.Template(_template("gemm.c"))
    digest = hashlib.sha256(template.substitute(fields, symbol="ortx_gemm").encode()).hexdigest()
    symbol = f"ortx_gemm_{digest[:16]}"
    return RenderedGemm(symbol, template.substitute(fields, symbol=symbol), problem, schedule,
                        fields["workspace_floats"])


_GEMM_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)


def _kernels_address(name: str) -> int:
    return ctypes.cast(getattr(ctypes.CDLL(_kernels.__file__), name), ctypes.c_void_p).value


def parallel_for_address() -> int:
    """Address of ortx's ortx_parallel_for (kernels/threadpool.h), which generated kernels call through a pointer."""
    return _kernels_address("ortx_parallel_for")


class GemmKernel:
    """A built generated GEMM. Calls are serialised (one workspace per kernel); ctypes releases the GIL."""

    def __init__(self, rendered: RenderedGemm, native: jit.NativeLibrary):
        self.rendered = rendered
        self.problem = rendered.problem
        self.schedule = rendered.schedule
        self.native = native
        self._function = _GEMM_FUNCTION(native.address)
        self._parallel_for = parallel_for_address()
        getattr(native.library, f"{rendered.symbol}_init")(ctypes.c_void_p(self._parallel_for))
        if self.problem.conv:  # the conv source (kernels/conv_source.c) the conv mode packs B through
            getattr(native.library, f"{rendered.symbol}_init_conv")(
                ctypes.c_void_p(_kernels_address("ortx_conv_source_prepare")),
                ctypes.c_void_p(_kernels_address("ortx_conv_source_pack_b")))
        # the step-ABI entry (kernels/ortx_kernels.h), which a JIT'd segment calls in gemm_f32's place
        self.step_address = ctypes.cast(getattr(native.library, f"{rendered.symbol}_step"), ctypes.c_void_p).value
        self._workspace = np.empty(rendered.workspace_floats, np.float32)
        self._lock = threading.Lock()

    def _checked(self, name: str, array: np.ndarray | None, extent: int) -> int:
        if not isinstance(array, np.ndarray) or array.dtype != np.float32 or not array.flags.c_contiguous:
            raise GemmError(f"{self.rendered.symbol}: operand {name} must be a C-contiguous float32 array")
        if array.size < extent:
            raise GemmError(f"{self.rendered.symbol}: operand {name} has {array.size} elements, needs {extent}")
        return array.ctypes.data

    def __call__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, bias: np.ndarray | None = None,
                 residual: np.ndarray | None = None, *, num_threads: int = 1) -> np.ndarray:
        """c (allocated [m, c_row_stride] when None) = the problem's result; returns c."""
        problem = self.problem
        if c is None:
            c = np.empty((problem.m, problem.c_row_stride), np.float32)
        pointers = [self._checked("a", a, problem.extent("a")), self._checked("b", b, problem.extent("b")),
                    self._checked("c", c, problem.extent("c"))]
        bias_length = {0: 0, 1: problem.m, 2: problem.n}[problem.bias]
        pointers.append(self._checked("bias", bias, bias_length) if bias_length else None)
        pointers.append(self._checked("residual", residual, problem.extent("residual"))
                        if problem.residual_row_stride else None)
        with self._lock:
            self._function(*pointers, self._workspace.ctypes.data, max(int(num_threads), 1), self._parallel_for)
        return c


def build_gemm(problem: GemmProblem, schedule: GemmSchedule, options: Options) -> GemmKernel:
    """Renders, compiles (or finds in the JIT cache) and loads; raises GemmError for an unrenderable schedule and
    jit.JitError when it cannot be built."""
    rendered = render_gemm(problem, schedule)
    return GemmKernel(rendered, jit.build_library(rendered, options))


def from_gemm_step(ints, floats) -> tuple[GemmProblem | None, str]:
    """(the problem a gemm_f32 step computes, "") or (None, why the template cannot compute it); ints and floats
    in gemm_f32's layout (kernels/gemm.c)."""
    ints = [int(value) for value in ints]
    m, n, k, batch = ints[0:4]
    a_packed, b_packed, bias_mode, has_residual, activation = ints[4], ints[7], ints[10], ints[11], ints[15]
    if a_packed:
        return None, "A is prepacked"
    if has_residual and (ints[13] != 1 or ints[12] < n):
        return None, f"the residual is not row-major (row and column strides {ints[12]}, {ints[13]})"
    if activation not in ACTIVATIONS:
        return None, f"activation {activation} is not one of {sorted(ACTIVATIONS)}"
    if bias_mode not in BIAS_MODES:
        return None, f"bias mode {bias_mode}"
    if min(m, n, k, batch) < 1:
        return None, f"empty problem {m}x{n}x{k}, batch {batch}"
    alpha, param0, param1 = (float(np.float32(value)) for value in (floats[0], floats[2], floats[3]))
    return GemmProblem(m, n, k, (ints[5], ints[6]), (ints[8], ints[9]), n, alpha=alpha, bias=bias_mode,
                       activation=activation, params=(param0, param1), b_packed=bool(b_packed),
                       residual_row_stride=ints[12] if has_residual else 0,
                       residual_scale=float(np.float32(floats[1])) if has_residual else 1.0), ""


def from_conv_step(ints, floats) -> tuple[GemmProblem | None, str]:
    """(the conv-mode problem of a conv2d_f32 step, "") or (None, why the template cannot compute it); ints and
    floats in conv2d_f32's layout (kernels/conv.h)."""
    ints = tuple(int(value) for value in ints)
    if len(ints) != CONV_INTS:
        return None, f"{len(ints)} ints, conv2d_f32 has {CONV_INTS}"
    batch, cin, _, _, cout, out_height, out_width, kernel_height, kernel_width = ints[:9]
    group, has_bias, has_residual, activation = ints[15:19]
    if batch != 1:
        return None, f"batch {batch}: conv2d_f32 runs one GEMM per image (a tuned single image does not measure it)"
    if group != 1:
        return None, f"group {group}: one GEMM per group"
    if activation not in ACTIVATIONS:
        return None, f"activation {activation} is not one of {sorted(ACTIVATIONS)}"
    n = out_height * out_width
    param0, param1 = (float(np.float32(value)) for value in (floats[0], floats[1]))
    return GemmProblem(cout, n, cin * kernel_height * kernel_width, (cin * kernel_height * kernel_width, 1), (n, 1),
                       n, bias=1 if has_bias else 0, activation=activation, params=(param0, param1),
                       residual_row_stride=n if has_residual else 0, conv=ints), ""
