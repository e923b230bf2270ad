/* Family "layout": data movement (copies, transposes, concatenation, slicing, resizing).
 *
 * copy_bytes: ints = [nbytes]; buffers = [src, dst].
 */
#include <string.h>

#include "ortx_kernels.h"

static void ortx_copy_bytes(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    if (buffers[0] != buffers[1]) memmove(buffers[1], buffers[0], (size_t)ints[0]);
}

const ortx_kernel_entry ortx_family_layout[] = {
    {"copy_bytes", ortx_copy_bytes, ortx_copy_bytes},
    {NULL, NULL, NULL},
};
