/* ortx_segment_efda03718937921c: one ortx segment as straight-line kernel calls (7 steps, arena 9408 bytes).
 *
 * Rendered by ortx.codegen.render from ortx/codegen/templates/segment.c. Shapes, kernel parameters and arena
 * offsets are fixed; only the memory is passed in:
 *   arena      9408 bytes, 64-byte aligned, scratch owned by the caller
 *   constants  pointers to the segment's read-only tensors, in this order:
 *     [0] 'conv_2:packed_weights': float32[162]
 *     [1] 'batchnormalization_7:scale': float32[6]
 *     [2] 'batchnormalization_7:shift': float32[6]
 *     [3] 'gemm_17:B': float32[96]
 *     [4] 'gemm_17:bias': float32[5]
 *   externals  pointers to the segment's inputs, then its outputs (indexes below 2)
 *   kernels    step functions, in this order (ortx: _kernels.kernel_functions(names)):
 *     [0] conv2d_f32
 *     [1] channel_affine_f32
 *     [2] unary_f32
 *     [3] maxpool_f32
 *     [4] binary_f32
 *     [5] global_avgpool_f32
 *     [6] gemm_f32
 *   step_seconds  NULL, or one double per step receiving its wall time
 * Returns 0, or step + 1 when a fallible step's status record (its last buffer) reports an error: later steps
 * did not run.
 * Steps run on num_threads threads unless the schedule they were rendered with caps a step lower (a literal).
 * Needs only the C standard library; link it with ortx's kernels (or any functions with the same contracts).
 */
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The ortx step-function ABI (kernels/ortx_kernels.h), repeated so this file needs no ortx header. */
typedef void (*ortx_kernel_fn)(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

static double ortx_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A step scheduled for at most `wanted` threads: never more than the session's count. */
static inline int ortx_threads_at_most(int wanted, int num_threads) {
    return wanted < num_threads ? wanted : num_threads;
}

static void ortx_step(ortx_kernel_fn kernel, const int64_t *ints, const float *floats, void *const *buffers,
                      int num_threads, double *seconds) {
    if (!seconds) {
        kernel(ints, floats, buffers, num_threads);
        return;
    }
    double start = ortx_now_seconds();
    kernel(ints, floats, buffers, num_threads);
    *seconds = ortx_now_seconds() - start;
}

int ortx_segment_efda03718937921c(
    char *arena, void *const *constants, void *const *externals, int num_threads, const ortx_kernel_fn *kernels,
    double *step_seconds) {
    (void)arena;
    (void)constants;
    (void)externals;
    /* step 0: conv2d_f32, node 'conv_2' */
    {
        static const int64_t ints[20] = {1, 3, 13, 11, 6, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0, 1};
        static const float floats[2] = {0x0p+0f, 0x0p+0f};
        void *const buffers[6] = {externals[0], constants[0], arena + 8384, arena + 0, arena + 8384,
            arena + 8384};
        ortx_step(kernels[0], ints, floats, buffers, num_threads, step_seconds ? step_seconds + 0 : NULL);
    }
    /* step 1: channel_affine_f32, node 'batchnormalization_7' */
    {
        static const int64_t ints[3] = {1, 6, 42};
        static const float floats[1] = {0.0f};
        void *const buffers[4] = {arena + 8384, constants[1], constants[2], arena + 8384};
        ortx_step(kernels[1], ints, floats, buffers, num_threads, step_seconds ? step_seconds + 1 : NULL);
    }
    /* step 2: unary_f32, node 'clip_10' */
    {
        static const int64_t ints[2] = {3, 252};
        static const float floats[2] = {0x0p+0f, 0x1.8p+2f};
        void *const buffers[2] = {arena + 8384, arena + 8384};
        ortx_step(kernels[2], ints, floats, buffers, num_threads, step_seconds ? step_seconds + 2 : NULL);
    }
    /* step 3: maxpool_f32, node 'maxpool_11' */
    {
        static const int64_t ints[23] = {6, 1, 7, 6, 1, 3, 3, 1, 2, 2, 1, 2, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0};
        static const float floats[1] = {0.0f};
        void *const buffers[2] = {arena + 8384, arena + 0};
        ortx_step(kernels[3], ints, floats, buffers, num_threads, step_seconds ? step_seconds + 3 : NULL);
    }
    /* step 4: binary_f32, node 'add_12' */
    {
        static const int64_t ints[5] = {0, 1, 54, 1, 1};
        static const float floats[1] = {0.0f};
        void *const buffers[3] = {arena + 0, arena + 0, arena + 0};
        ortx_step(kernels[4], ints, floats, buffers, num_threads, step_seconds ? step_seconds + 4 : NULL);
    }
    /* step 5: global_avgpool_f32, node 'globalaveragepool_13' */
    {
        static const int64_t ints[2] = {6, 9};
        static const float floats[1] = {0.0f};
        void *const buffers[2] = {arena + 0, arena + 320};
        ortx_step(kernels[5], ints, floats, buffers, num_threads, step_seconds ? step_seconds + 5 : NULL);
    }
    /* step 6: gemm_f32, node 'gemm_17' */
    {
        static const int64_t ints[19] = {1, 5, 6, 1, 0, 6, 1, 1, 1, 6, 2, 0, 0, 0, 0, 0, 1, 0, 0};
        static const float floats[4] = {0x1p+0f, 0x1p+0f, 0x0p+0f, 0x0p+0f};
        void *const buffers[6] = {arena + 320, constants[3], externals[1], arena + 0, constants[4],
            externals[1]};
        ortx_step(kernels[6], ints, floats, buffers, num_threads, step_seconds ? step_seconds + 6 : NULL);
    }
    return 0;
}
