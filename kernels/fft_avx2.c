/* AVX2 + FMA build of the FFT's Stockham stages and real-input post-processing (fft_stages.h); chosen by fft_plan.c when the selected ISA is
 * AVX2 or above. The pragma makes the compiler vectorise the stage loops 8 floats wide; the file is otherwise
 * compiled with the package's portable flags and only runs after dispatch.c checked the CPU. */
#include "isa.h"

#if ORTX_HAVE_X86
#pragma GCC target("avx2,fma")
#include "fft_stages.h"

void ortx_fft_run_stages_avx2(const ortx_fft_plan *plan, ortx_cpx *data, ortx_cpx *scratch) {
    run_stages(plan, data, scratch);
}

void ortx_fft_real_post_avx2(const ortx_cpx *z, int64_t h, const ortx_cpx *twiddles, ortx_cpx *out) {
    real_post(z, h, twiddles, out);
}
#endif
