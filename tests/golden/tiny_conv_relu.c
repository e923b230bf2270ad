/* ortx_segment_4c8c9b91b02e9a5c: one ortx segment as straight-line kernel calls (2 steps, arena 9664 bytes).
 *
 * Rendered by ortx.codegen.render from ortx/codegen/templates/segment.c. Shapes, kernel parameters and arena
 * offsets are fixed; only the memory is passed in:
 *   arena      9664 bytes, 64-byte aligned, scratch owned by the caller
 *   constants  pointers to the segment's read-only tensors, in this order:
 *     [0] 'conv_b_2': float32[4]
 *     [1] 'conv_3:packed_weights': float32[162]
 *   externals  pointers to the segment's inputs, then its outputs (indexes below 2)
 *   kernels    step functions, in this order (ortx: _kernels.kernel_functions(names)):
 *     [0] conv2d_f32
 *     [1] unary_f32
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

int ortx_segment_4c8c9b91b02e9a5c(
    char *arena, void *const *constants, void *const *externals, int num_threads, const ortx_kernel_fn *kernels,
    double *step_seconds) {
    (void)arena;
    (void)constants;
    (void)externals;
    /* step 0: conv2d_f32, node 'conv_3' */
    {
        static const int64_t ints[20] = {1, 3, 8, 8, 4, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1};
        static const float floats[2] = {0x0p+0f, 0x0p+0f};
        void *const buffers[6] = {externals[0], constants[1], arena + 8640, arena + 0, constants[0],
            arena + 8640};
        ortx_step(kernels[0], ints, floats, buffers, num_threads, step_seconds ? step_seconds + 0 : NULL);
    }
    /* step 1: unary_f32, node 'relu_4' */
    {
        static const int64_t ints[2] = {1, 256};
        static const float floats[2] = {0x0p+0f, 0x0p+0f};
        void *const buffers[2] = {arena + 8640, externals[1]};
        ortx_step(kernels[1], ints, floats, buffers, num_threads, step_seconds ? step_seconds + 1 : NULL);
    }
    return 0;
}
