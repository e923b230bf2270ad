# cython: language_level=3
"""Marshals numpy buffers to the C kernels; no logic lives here."""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int8_t, int32_t, int64_t, uint64_t

cnp.import_array()

cdef extern from "ortx_kernels.h":
    ctypedef void (*ortx_kernel_fn)(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) noexcept nogil
    ctypedef struct ortx_kernel_entry:
        const char *name
        ortx_kernel_fn fast
        ortx_kernel_fn ref
        int fallible
    ctypedef struct ortx_program:
        int32_t num_steps
        const int32_t *kernel_ids
        const int64_t *int_offsets
        const int64_t *float_offsets
        const int64_t *buffer_offsets
        const int64_t *ints
        const float *floats
        const int32_t *buffer_ids
        int32_t num_buffers
        const int8_t *buffer_kinds
        const int64_t *buffer_values
    int ortx_cpu_isa() nogil
    int ortx_selected_isa() nogil
    int ortx_force_isa(int isa) nogil
    int ortx_cpu_has_avx512_bf16() nogil
    int ortx_cpu_has_amx_bf16() nogil
    int ortx_allow_amx(int allow) nogil
    int ortx_allow_winograd(int allow) nogil
    const char *ortx_bf16_isa_name() nogil
    const char *ortx_kernels_source() nogil
    int ortx_kernel_count() nogil
    const ortx_kernel_entry *ortx_kernel_at(int index) nogil
    int ortx_program_run(const ortx_program *program, char *arena, void *const *constants, void *const *externals,
                         int num_threads, int use_ref, double *step_seconds) nogil
    ortx_kernel_fn ortx_kernel_function(int index, int use_ref) nogil
    ctypedef int (*ortx_segment_fn)(char *arena, void *const *constants, void *const *externals, int num_threads,
                                     const ortx_kernel_fn *kernels, double *step_seconds) noexcept nogil
    int ORTX_MAX_STEP_BUFFERS

ISA_NAMES = ("portable", "avx2", "avx512")


def _build_kernel_names():
    names = []
    for index in range(ortx_kernel_count()):
        names.append(ortx_kernel_at(index).name.decode())
    return tuple(names)


KERNEL_NAMES = _build_kernel_names()
KERNEL_IDS = {name: index for index, name in enumerate(KERNEL_NAMES)}
# Kernels that can fail on runtime data; each takes an ortx_status record as its last buffer (ortx_kernels.h).
FALLIBLE_KERNELS = frozenset(name for index, name in enumerate(KERNEL_NAMES) if ortx_kernel_at(index).fallible)
STATUS_WORDS = 4  # int64 words of an ortx_status: code, value, position, bound
STATUS_INDEX_OUT_OF_RANGE = 1


class KernelError(RuntimeError):
    """A fallible step reported an error: `step` (None for `call`) and its status record `code`, `value`,
    `position`, `bound` (ortx_kernels.h); the runtime turns it into an error naming the node."""

    def __init__(self, step, record):
        self.step = step
        self.code, self.value, self.position, self.bound = (int(word) for word in record[:STATUS_WORDS])
        where = "kernel call" if step is None else f"step {step}"
        super().__init__(f"ortx {where} failed: status code {self.code}, value {self.value} at position "
                         f"{self.position}, bound {self.bound}")


def cpu_isa():
    """The best ISA this CPU supports, by name."""
    return ISA_NAMES[ortx_cpu_isa()]


def selected_isa():
    return ISA_NAMES[ortx_selected_isa()]


def cpu_has_avx512_bf16():
    """Whether this CPU has AVX512_BF16 (vdpbf16ps), which the bf16 kernels use while the ISA is avx512."""
    return bool(ortx_cpu_has_avx512_bf16())


def cpu_has_amx_bf16():
    """Whether this CPU has AMX-BF16 and the OS lets this process use tiles; the bf16 kernels then use tdpbf16ps."""
    return bool(ortx_cpu_has_amx_bf16())


def allow_amx(allow):
    """Tests: False runs the vdpbf16ps path on an AMX CPU; returns whether AMX is now in use. Packed bf16 A operands
    are in the format of the path selected when packed (gemm_bf16.h): pack again after switching."""
    return bool(ortx_allow_amx(1 if allow else 0))


def allow_winograd(allow):
    """Tests: False keeps 3x3 stride-1 convs on the direct kernels (the Winograd shape rule declines them); returns
    the previous setting. Affects lowerings made after the call."""
    return bool(ortx_allow_winograd(1 if allow else 0))


def kernels_source():
    """"<hash>|<compiler>": the hash setup.py took of the C kernels' sources and flags ("unknown" when the build did
    not pass one), and the compiler version that built them (ortx.tune.fingerprint.kernels_build)."""
    return ortx_kernels_source().decode()


def bf16_isa():
    """The bf16 kernels' path in use: "amx_bf16", "avx512_bf16", or "portable" (no AVX512_BF16, or a lower ISA
    forced)."""
    return ortx_bf16_isa_name().decode()


def force_isa(name):
    """Runs lower ISA variants (for tests); returns the ISA now in use (never above what the CPU has)."""
    return ISA_NAMES[ortx_force_isa(ISA_NAMES.index(name))]


cdef inline void *_address(object array):
    return <void *><uint64_t>array.__array_interface__["data"][0]


def call(str name, ints, floats, list buffers, int num_threads=1, bint use_ref=False):
    """Runs one kernel now on numpy buffers (tests, and weight packing at compile time). A fallible kernel gets
    its status record appended here, as the SegmentBuilder does; an error raises KernelError after the call."""
    if name not in KERNEL_IDS:
        raise KeyError(f"ortx kernel {name!r} does not exist; known kernels: {', '.join(KERNEL_NAMES)}")
    status = None
    if name in FALLIBLE_KERNELS:
        status = np.zeros(STATUS_WORDS, np.int64)
        buffers = buffers + [status]
    if len(buffers) > ORTX_MAX_STEP_BUFFERS:
        raise ValueError(f"kernel {name!r}: {len(buffers)} buffers, at most {ORTX_MAX_STEP_BUFFERS}")
    cdef cnp.ndarray[int64_t, ndim=1] int_array = np.ascontiguousarray(ints, dtype=np.int64).reshape(-1)
    cdef cnp.ndarray[float, ndim=1] float_array = np.ascontiguousarray(floats, dtype=np.float32).reshape(-1)
    if int_array.shape[0] == 0:
        int_array = np.zeros(1, np.int64)
    if float_array.shape[0] == 0:
        float_array = np.zeros(1, np.float32)
    cdef void *pointers[16]
    for index, buffer in enumerate(buffers):
        if not buffer.flags.c_contiguous:
            raise ValueError(f"kernel {name!r}: buffer {index} is not C-contiguous")
        pointers[index] = _address(buffer)
    cdef const ortx_kernel_entry *entry = ortx_kernel_at(KERNEL_IDS[name])
    cdef ortx_kernel_fn fn = entry.ref if (use_ref and entry.ref != NULL) else entry.fast
    cdef const int64_t *ip = &int_array[0]
    cdef const float *fp = &float_array[0]
    with nogil:
        fn(ip, fp, pointers, num_threads)
    if status is not None and status[0] != 0:
        raise KernelError(None, status)


def kernel_functions(names, bint use_ref=False):
    """Addresses of the named kernels' step functions (uint64 array), the table a JIT'd segment calls through."""
    table = np.zeros(max(len(names), 1), dtype=np.uint64)
    for index, name in enumerate(names):
        if name not in KERNEL_IDS:
            raise KeyError(f"ortx kernel {name!r} does not exist; known kernels: {', '.join(KERNEL_NAMES)}")
        table[index] = <uint64_t>ortx_kernel_function(KERNEL_IDS[name], use_ref)
    return table


def _cache_line_aligned(array):
    """`array`, or its copy starting on a 64-byte boundary: numpy gives 16, and an AMX tile row or a 64-byte vector
    load that straddles two cache lines reads both (packed bf16 weights 32 bytes off the lines: ResNet-18-style
    bf16 0.89x, MobileNetV2-style 0.97x once aligned, in-process A/B at 2 threads)."""
    if array.__array_interface__["data"][0] % 64 == 0 or array.nbytes == 0:
        return array
    raw = np.empty(array.nbytes + 64, dtype=np.uint8)
    start = -raw.__array_interface__["data"][0] % 64
    aligned = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    aligned[...] = array
    return aligned


cdef class Program:
    """A compiled segment's steps as flat arrays; read-only once built, so runs may share it across threads."""
    cdef ortx_program program
    cdef object _keep
    cdef cnp.ndarray constant_pointers
    cdef readonly int num_steps
    cdef readonly object kernel_names
    cdef readonly tuple constant_addresses  # where the kernels read each constant (64-byte aligned)

    def __init__(self, kernel_ids, int_offsets, float_offsets, buffer_offsets, ints, floats, buffer_ids,
                 buffer_kinds, buffer_values, list constants):
        def padded(values, dtype):
            # one spare element so empty arrays still have an address; np.append would change the dtype
            array = np.zeros(len(values) + 1, dtype=dtype)
            array[:len(values)] = values
            return array

        arrays = {
            "kernel_ids": np.ascontiguousarray(kernel_ids, dtype=np.int32),
            "int_offsets": np.ascontiguousarray(int_offsets, dtype=np.int64),
            "float_offsets": np.ascontiguousarray(float_offsets, dtype=np.int64),
            "buffer_offsets": np.ascontiguousarray(buffer_offsets, dtype=np.int64),
            "ints": padded(np.asarray(ints).reshape(-1), np.int64),
            "floats": padded(np.asarray(floats).reshape(-1), np.float32),
            "buffer_ids": padded(np.asarray(buffer_ids).reshape(-1), np.int32),
            "buffer_kinds": padded(np.asarray(buffer_kinds).reshape(-1), np.int8),
            "buffer_values": padded(np.asarray(buffer_values).reshape(-1), np.int64),
        }
        count = len(arrays["kernel_ids"])
        for key in ("int_offsets", "float_offsets", "buffer_offsets"):
            if len(arrays[key]) != count + 1:
                raise ValueError(f"Program: {key} must have num_steps + 1 entries")
        if count and (arrays["kernel_ids"].min() < 0 or arrays["kernel_ids"].max() >= len(KERNEL_NAMES)):
            raise ValueError("Program: kernel id out of range")
        constants = [_cache_line_aligned(np.ascontiguousarray(c)) for c in constants]
        self.constant_pointers = np.array([c.__array_interface__["data"][0] for c in constants] or [0],
                                          dtype=np.uint64)
        self._keep = (arrays, constants)
        self.constant_addresses = tuple(int(a) for a in self.constant_pointers[:len(constants)])
        self.num_steps = count
        self.kernel_names = tuple(KERNEL_NAMES[k] for k in arrays["kernel_ids"])
        self.program.num_steps = count
        self.program.kernel_ids = <const int32_t *>_address(arrays["kernel_ids"])
        self.program.int_offsets = <const int64_t *>_address(arrays["int_offsets"])
        self.program.float_offsets = <const int64_t *>_address(arrays["float_offsets"])
        self.program.buffer_offsets = <const int64_t *>_address(arrays["buffer_offsets"])
        self.program.ints = <const int64_t *>_address(arrays["ints"])
        self.program.floats = <const float *>_address(arrays["floats"])
        self.program.buffer_ids = <const int32_t *>_address(arrays["buffer_ids"])
        self.program.num_buffers = len(arrays["buffer_kinds"]) - 1
        self.program.buffer_kinds = <const int8_t *>_address(arrays["buffer_kinds"])
        self.program.buffer_values = <const int64_t *>_address(arrays["buffer_values"])

    def run(self, arena, externals, int num_threads=1, bint use_ref=False, step_seconds=None):
        """arena: a uint8 array (or None when the program uses none); externals: uint64 array of addresses."""
        cdef cnp.ndarray[uint64_t, ndim=1] external_array = np.ascontiguousarray(externals, dtype=np.uint64)
        if external_array.shape[0] == 0:
            external_array = np.zeros(1, np.uint64)
        cdef char *arena_pointer = <char *>_address(arena) if arena is not None else NULL
        cdef void *const *external_pointers = <void *const *>&external_array[0]
        cdef void *const *constant_pointers = <void *const *>_address(self.constant_pointers)
        cdef double *seconds = NULL
        if step_seconds is not None:
            if step_seconds.dtype != np.float64 or step_seconds.shape[0] < self.num_steps:
                raise ValueError("step_seconds must be a float64 array with one entry per step")
            seconds = <double *>_address(step_seconds)
        cdef int status
        with nogil:
            status = ortx_program_run(&self.program, arena_pointer, constant_pointers, external_pointers,
                                      num_threads, use_ref, seconds)
        self._check(status, arena)

    def _check(self, int status, arena):
        """status: 0, -(step+1) for a malformed step, or step+1 when a fallible step filled its status record
        (its last buffer, in the arena; the SegmentBuilder puts it there)."""
        if status < 0:
            raise RuntimeError(f"ortx program failed at step {-status - 1}")
        if status > 0:
            step = status - 1
            buffer = self.program.buffer_ids[self.program.buffer_offsets[step + 1] - 1]
            offset = self.program.buffer_values[buffer]
            if self.program.buffer_kinds[buffer] != 0 or arena is None:
                raise RuntimeError(f"ortx program: step {step} failed; its status record is not in the arena")
            raise KernelError(step, np.asarray(arena[offset:offset + 8 * STATUS_WORDS]).view(np.int64))

    def run_native(self, uint64_t function, kernel_table, arena, externals, int num_threads=1, step_seconds=None):
        """Runs a JIT'd segment function (an ortx_segment_fn address) over this program's constants; arena,
        externals and step_seconds as for `run`; kernel_table from `kernel_functions` (already fast or ref)."""
        if function == 0:
            raise ValueError("run_native: null segment function")
        cdef cnp.ndarray[uint64_t, ndim=1] table = np.ascontiguousarray(kernel_table, dtype=np.uint64)
        cdef cnp.ndarray[uint64_t, ndim=1] external_array = np.ascontiguousarray(externals, dtype=np.uint64)
        if external_array.shape[0] == 0:
            external_array = np.zeros(1, np.uint64)
        cdef char *arena_pointer = <char *>_address(arena) if arena is not None else NULL
        cdef void *const *external_pointers = <void *const *>&external_array[0]
        cdef void *const *constant_pointers = <void *const *>_address(self.constant_pointers)
        cdef const ortx_kernel_fn *kernels = <const ortx_kernel_fn *>&table[0]
        cdef double *seconds = NULL
        if step_seconds is not None:
            if step_seconds.dtype != np.float64 or step_seconds.shape[0] < self.num_steps:
                raise ValueError("step_seconds must be a float64 array with one entry per step")
            seconds = <double *>_address(step_seconds)
        cdef ortx_segment_fn segment = <ortx_segment_fn>function
        cdef int status
        with nogil:
            status = segment(arena_pointer, constant_pointers, external_pointers, num_threads, kernels, seconds)
        if status != 0:
            self._check(status, arena)


# --- NPU simulator (issue #7; owner: npu; kernels/npu_sim.c) ------------------------------------------------------
cdef extern from "npu_sim.h":
    int ORTX_NPU_STATS
    int ortx_npu_simulate(const unsigned char *stream, int64_t length, const unsigned char *constants,
                          int64_t constant_bytes, unsigned char *work, int64_t work_bytes, int64_t *stats,
                          int64_t *timeline, char *error, int64_t error_bytes) nogil

NPU_STAT_NAMES = ("cycles", "issued_macs", "dma_bytes", "dma_cycles", "compute_cycles", "mac_cycles", "phases")


def npu_simulate(bytes stream, constants, work, timeline=None):
    """Runs an NPU command stream on uint8 DRAM regions (constants read-only, work in place); returns the stats
    array (NPU_STAT_NAMES). timeline: optional int64 array, one entry per command. Raises ValueError with the
    simulator's message (naming the command) on a bad stream."""
    for name, array in (("constants", constants), ("work", work)):
        if array.dtype != np.uint8 or not array.flags.c_contiguous:
            raise ValueError(f"npu_simulate: {name} must be a C-contiguous uint8 array")
    cdef cnp.ndarray[int64_t, ndim=1] stats = np.zeros(ORTX_NPU_STATS, np.int64)
    cdef int64_t *timeline_pointer = NULL
    if timeline is not None:
        if timeline.dtype != np.int64 or not timeline.flags.c_contiguous:
            raise ValueError("npu_simulate: timeline must be a C-contiguous int64 array")
        timeline_pointer = <int64_t *>_address(timeline)
    cdef char error[512]
    error[0] = 0
    cdef const unsigned char *stream_pointer = stream
    cdef int64_t length = len(stream)
    cdef const unsigned char *constant_pointer = <const unsigned char *>_address(constants)
    cdef unsigned char *work_pointer = <unsigned char *>_address(work)
    cdef int64_t constant_bytes = constants.shape[0], work_bytes = work.shape[0]
    cdef int status
    with nogil:
        status = ortx_npu_simulate(stream_pointer, length, constant_pointer, constant_bytes, work_pointer,
                                   work_bytes, &stats[0], timeline_pointer, error, 512)
    if status != 0:
        raise ValueError(error.decode(errors="replace"))
    return stats
