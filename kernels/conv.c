/* Family "conv": entry table (filled in as kernels land). */
#include "ortx_kernels.h"

const ortx_kernel_entry ortx_family_conv[] = {
    {NULL, NULL, NULL},
};
