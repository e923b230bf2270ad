/* AVX-512 instance of the phase-plane packing loops (conv_planes_pack.h): the same loops under the AVX-512 target,
 * so every 16-float panel row copy is one 64-byte move (the portable build copies 16 bytes at a time); results are
 * the same floats. Chosen by conv_planes.c's table after dispatch.c has checked the CPU. */
#include "conv_planes_pack.h"
#include "isa.h"

#if ORTX_HAVE_X86
ORTX_TARGET_AVX512 void ortx_conv_planes_pack_b_avx512(const void *context, int64_t k0, int64_t kc, int64_t n0,
                                                       int64_t nc, float *dst) {
    ortx_planes_pack_b(context, k0, kc, n0, nc, dst);
}

ORTX_TARGET_AVX512 void ortx_conv_planes_pack_rows_avx512(const ortx_conv_planes_context *context, int64_t k0,
                                                          int64_t kc, int64_t pixel, float *dst) {
    ortx_planes_pack_rows(context, k0, kc, pixel, dst);
}
#else
/* Never selected off x86 (dispatch.c only picks AVX-512 after CPUID says so). */
void ortx_conv_planes_pack_b_avx512(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    ortx_conv_planes_pack_b_portable(context, k0, kc, n0, nc, dst);
}

void ortx_conv_planes_pack_rows_avx512(const ortx_conv_planes_context *context, int64_t k0, int64_t kc,
                                       int64_t pixel, float *dst) {
    ortx_conv_planes_pack_rows_portable(context, k0, kc, pixel, dst);
}
#endif
