/* Per-function instruction-set targets, so ISA files compile with the package's portable flags and run only
 * after dispatch.c has checked the CPU. */
#ifndef ORTX_ISA_H
#define ORTX_ISA_H

#if defined(__x86_64__) || defined(__i386__)
#define ORTX_HAVE_X86 1
#define ORTX_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define ORTX_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
/* AVX-512 plus AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16); only the bf16 family uses it, after
 * ortx_cpu_has_avx512_bf16(). */
#define ORTX_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
/* AVX512_BF16 plus AMX tiles (tdpbf16ps); only gemm_bf16_amx.c uses it, after ortx_cpu_has_amx_bf16(). */
#define ORTX_TARGET_AMX_BF16 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,amx-tile,amx-bf16")))
#else
#define ORTX_HAVE_X86 0
#define ORTX_TARGET_AVX2
#define ORTX_TARGET_AVX512
#define ORTX_TARGET_AVX512_BF16
#define ORTX_TARGET_AMX_BF16
#endif

#endif
