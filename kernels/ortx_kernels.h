/* The one ABI between ortx's Python side and its C kernels.
 *
 * Every kernel is a step function with the same signature: integer parameters, float parameters, buffer
 * pointers and a thread count. Each op family documents its parameter layout above its entry table. A compiled
 * segment is a list of steps (program.c); the JIT of issue #4 emits C that calls the same functions with
 * constant arguments. Fast kernels are named ortx_<op>_<dtype>_<isa>, their oracles ortx_<op>_<dtype>_ref.
 */
#ifndef ORTX_KERNELS_H
#define ORTX_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef void (*ortx_kernel_fn)(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

typedef struct ortx_kernel_entry {
    const char *name;     /* e.g. "conv2d_f32"; the Python lowering refers to kernels by this name */
    ortx_kernel_fn fast;  /* the dispatching implementation (picks the ISA variant) */
    ortx_kernel_fn ref;   /* the naive oracle; may equal fast for pure data movement */
    int fallible;         /* 1: can fail on runtime data; its last buffer is an ortx_status (see below) */
} ortx_kernel_entry;

/* The error channel. A kernel that can fail on the data it reads (an index out of range) is marked `fallible` in
 * its table entry and takes one buffer more, last: a status record in the arena (the SegmentBuilder adds it).
 * Every call rewrites the record: code ORTX_STATUS_OK, or an error code with the offending value, its position
 * and the bound it broke; on error the kernel still writes its whole output (zeros), so nothing undefined is
 * ever read. The runners (ortx_program_run, JIT'd segments) test `code` after each fallible step only and stop
 * there, returning step + 1; Python turns the record into an exception naming the node. */
enum { ORTX_STATUS_OK = 0, ORTX_STATUS_INDEX_OUT_OF_RANGE = 1 };
typedef struct ortx_status {
    int64_t code;
    int64_t value;     /* INDEX_OUT_OF_RANGE: the index as given (before negative indices are wrapped) */
    int64_t position;  /* its flat position in the indices tensor */
    int64_t bound;     /* the axis size n: valid indices are [-n, n - 1] */
} ortx_status;

/* Per-family entry tables, each terminated by {NULL, NULL, NULL}; dispatch.c lists them all explicitly. */
extern const ortx_kernel_entry ortx_family_gemm[];
extern const ortx_kernel_entry ortx_family_conv[];
extern const ortx_kernel_entry ortx_family_elementwise[];
extern const ortx_kernel_entry ortx_family_reduce[];
extern const ortx_kernel_entry ortx_family_pool[];
extern const ortx_kernel_entry ortx_family_layout[];
extern const ortx_kernel_entry ortx_family_bf16[];
extern const ortx_kernel_entry ortx_family_qgemm[];
extern const ortx_kernel_entry ortx_family_qpool[];  /* int8 average pools (issue #5) */
extern const ortx_kernel_entry ortx_family_sparse[];
/* DSP device (issue #7): DFT, STFT, FIR on planned FFTs (fft.c) */
extern const ortx_kernel_entry ortx_family_fft[];
/* MatMul by a constant with a narrow row band per 16-column panel (band_gemm.c), e.g. a mel filterbank */
extern const ortx_kernel_entry ortx_family_band[];
/* Multi-head attention over head-interleaved [batch, seq, heads * head_dim] rows (attention.c) */
extern const ortx_kernel_entry ortx_family_attention[];
/* What the host machine is doing now (host_probe.c), for benchmarks to report */
extern const ortx_kernel_entry ortx_family_host[];
extern const ortx_kernel_entry ortx_family_lrn[];  /* LocalResponseNormalization (lrn.c) */

/* CPU features, detected once. */
enum { ORTX_ISA_PORTABLE = 0, ORTX_ISA_AVX2 = 1, ORTX_ISA_AVX512 = 2 };
int ortx_cpu_isa(void);          /* best ISA this CPU supports */
int ortx_selected_isa(void);     /* ISA in use (best, unless lowered by ortx_force_isa) */
int ortx_fma_ports(void);        /* zmm multiply-adds a core starts per cycle: 1 or 2 (host_probe.c) */
int ortx_force_isa(int isa);     /* tests: run a lower ISA; returns the ISA now in use */
/* AVX512_BF16 (vdpbf16ps): an extension beside the ISA levels; the bf16 family uses it while the selected ISA is
 * AVX-512 (forcing a lower ISA runs its portable path). */
int ortx_cpu_has_avx512_bf16(void);
/* Whether this AVX-512 CPU issues two 512-bit FMAs per cycle per core, inferred from AMX (amx_tile): every AMX
 * core so far (Sapphire Rapids and later Xeons) has both FMA ports, while AMD's Zen 4/5 and the single-port Xeon
 * SKUs have no AMX. Kernels whose wider register tiles only pay off at that FMA rate choose them by it. */
int ortx_cpu_has_two_fma_ports(void);
/* AMX-BF16 (tdpbf16ps on 16x16 fp32 tiles): CPUID's AMX-TILE and AMX-BF16, the OS's XCR0 tile state and Linux's
 * permission to use it (arch_prctl ARCH_REQ_XCOMP_PERM, asked once per process); without all three the bf16 family
 * keeps vdpbf16ps. The bf16 family uses it while AVX512_BF16 is in use and ortx_allow_amx has not turned it off. */
int ortx_cpu_has_amx_bf16(void);
int ortx_allow_amx(int allow);  /* tests: 0 runs the vdpbf16ps path on an AMX CPU; returns whether AMX is in use */
/* Tests: 0 keeps 3x3 stride-1 convs off conv2d_winograd_f32 (conv_winograd_sizes_f32's shape rule then answers 0) so
 * the direct kernels' paths stay covered; returns the previous setting. */
int ortx_allow_winograd(int allow);
int ortx_amx_allowed(void);
const char *ortx_bf16_isa_name(void);  /* the bf16 family's path: "amx_bf16", "avx512_bf16" or "portable" */
const char *ortx_kernels_source(void);  /* "<hash of the C sources and flags>|<compiler version>" */

/* Kernel table (flattened families). */
int ortx_kernel_count(void);
const ortx_kernel_entry *ortx_kernel_at(int index);

/* Buffer kinds of a program's buffer table. */
enum { ORTX_BUFFER_ARENA = 0, ORTX_BUFFER_CONSTANT = 1, ORTX_BUFFER_EXTERNAL = 2 };

typedef struct ortx_program {
    int32_t num_steps;
    const int32_t *kernel_ids;       /* [num_steps] index into the kernel table */
    const int64_t *int_offsets;      /* [num_steps + 1] into ints */
    const int64_t *float_offsets;    /* [num_steps + 1] into floats */
    const int64_t *buffer_offsets;   /* [num_steps + 1] into buffer_ids */
    const int64_t *ints;
    const float *floats;
    const int32_t *buffer_ids;       /* indexes into the buffer table */
    int32_t num_buffers;
    const int8_t *buffer_kinds;      /* [num_buffers] ORTX_BUFFER_* */
    const int64_t *buffer_values;    /* arena byte offset, constant index or external index */
} ortx_program;

#define ORTX_MAX_STEP_BUFFERS 16

/* Runs every step in order. constants and externals are pointer arrays; step_seconds (optional, may be NULL)
 * receives each step's wall time. use_ref != 0 runs the reference kernels. Returns 0, -(step+1) when a step
 * names an unknown kernel or too many buffers, or step+1 when a fallible step reported an error in its
 * ortx_status (its last buffer); the steps after it did not run. */
int ortx_program_run(const ortx_program *program, char *arena, void *const *constants, void *const *externals,
                     int num_threads, int use_ref, double *step_seconds);

/* The step function kernel `index` runs, chosen as ortx_program_run chooses it (ref when asked and present);
 * NULL for an unknown index. JIT'd segments receive their kernels as a table of these, so their shared objects
 * never link against the extension. */
ortx_kernel_fn ortx_kernel_function(int index, int use_ref);

/* A JIT'd segment (ortx/codegen/templates/segment.c): the program's steps as straight-line calls with fixed
 * arguments. kernels[i] is the i-th kernel the rendered source lists; step_seconds and the returned status are
 * as for ortx_program_run (0, or step+1 after a fallible step reported an error). */
typedef int (*ortx_segment_fn)(char *arena, void *const *constants, void *const *externals, int num_threads,
                                const ortx_kernel_fn *kernels, double *step_seconds);

#endif
