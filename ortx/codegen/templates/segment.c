/* ${symbol}: one ortx segment as straight-line kernel calls (${num_steps} steps, arena ${arena_bytes} bytes).
 *
 * Rendered by ortx.codegen.render from ortx/codegen/templates/segment.c. Shapes, kernel parameters and arena
 * offsets are fixed; only the memory is passed in:
 *   arena      ${arena_bytes} bytes, ${alignment}-byte aligned, scratch owned by the caller
 *   constants  pointers to the segment's read-only tensors, in this order:
${constant_lines}
 *   externals  pointers to the segment's inputs, then its outputs (indexes below ${num_externals})
 *   kernels    step functions, in this order (ortx: _kernels.kernel_functions(names)):
${kernel_lines}
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

int ${symbol}(
    char *arena, void *const *constants, void *const *externals, int num_threads, const ortx_kernel_fn *kernels,
    double *step_seconds) {
    (void)arena;
    (void)constants;
    (void)externals;
${steps}
    return 0;
}
