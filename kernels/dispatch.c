/* The explicit kernel table and the run-time ISA choice.
 *
 * Families are listed here, once, in a fixed order; kernel ids are positions in the flattened list and are
 * looked up by name from Python at import. The ISA is detected once from CPUID; tests may lower it to check
 * every variant the machine can run.
 */
#include "ortx_kernels.h"
#include "threadpool.h"

static const ortx_kernel_entry *const families[] = {
    ortx_family_gemm, ortx_family_conv, ortx_family_elementwise,
    ortx_family_reduce, ortx_family_pool, ortx_family_layout, ortx_family_threadpool, ortx_family_bf16,
    ortx_family_qgemm, ortx_family_qpool, ortx_family_sparse,
    ortx_family_fft, /* DSP device (issue #7) */
    ortx_family_band, /* MatMul by a banded constant, e.g. a mel filterbank (issue #7) */
    ortx_family_attention, /* multi-head attention on head-interleaved rows (issue #4) */
    ortx_family_host, /* the host's state now: are the pool's threads on separate cores? */
    ortx_family_lrn, /* LocalResponseNormalization */
};

/* The build's identity for tuning records (ortx.tune.fingerprint.kernels_build): setup.py passes a hash of the C
 * kernels' sources and compile flags, and the compiler that built them is appended. Not the library's bytes: those
 * also hold the Cython layer, which pip's isolated build (another Cython, numpy) generated differently from an
 * in-place build of the same C, so their records were never shared. */
#ifndef ORTX_KERNELS_SOURCE
#define ORTX_KERNELS_SOURCE "unknown"
#endif
#ifdef __VERSION__
#define ORTX_KERNELS_COMPILER __VERSION__
#else
#define ORTX_KERNELS_COMPILER "unknown compiler"
#endif
const char *ortx_kernels_source(void) { return ORTX_KERNELS_SOURCE "|" ORTX_KERNELS_COMPILER; }

/* Flattened once; _kernels.pyx calls ortx_kernel_count() at import, before any thread can run a program. */
#define ORTX_MAX_KERNELS 1024
static const ortx_kernel_entry *flat_table[ORTX_MAX_KERNELS];
static int flat_count = -1;

int ortx_kernel_count(void) {
    if (flat_count >= 0) return flat_count;
    int count = 0;
    for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++)
        for (const ortx_kernel_entry *e = families[f]; e->name && count < ORTX_MAX_KERNELS; e++)
            flat_table[count++] = e;
    flat_count = count;
    return count;
}

const ortx_kernel_entry *ortx_kernel_at(int index) {
    if (index < 0 || index >= ortx_kernel_count()) return NULL;
    return flat_table[index];
}

static int detect_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return ORTX_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ORTX_ISA_AVX2;
#endif
    return ORTX_ISA_PORTABLE;
}

static int cpu_bf16 = -1;

int ortx_cpu_has_avx512_bf16(void) {
    if (cpu_bf16 < 0) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_cpu_init();
        cpu_bf16 = ortx_cpu_isa() == ORTX_ISA_AVX512 && __builtin_cpu_supports("avx512bf16");
#else
        cpu_bf16 = 0;
#endif
    }
    return cpu_bf16;
}

static int cpu_amx = -1;
static int amx_allowed = 1;

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023 /* linux/arch/x86/include/uapi/asm/prctl.h */
#define XFEATURE_XTILEDATA 18
#define CPUID7_EDX_AMX_BF16 (1u << 22)
#define CPUID7_EDX_AMX_TILE (1u << 24)

/* CPUID.(EAX=7, ECX=0):EDX, the AMX feature bits (0 when the leaf is missing). */
static unsigned cpuid7_edx(void) {
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) ? edx : 0;
}

static int detect_amx_bf16(void) {
    unsigned eax, ebx, ecx, edx;
    unsigned amx = CPUID7_EDX_AMX_TILE | CPUID7_EDX_AMX_BF16;
    if (!ortx_cpu_has_avx512_bf16() || (cpuid7_edx() & amx) != amx) return 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return 0;  /* OSXSAVE */
    unsigned xcr0_low, xcr0_high;
    __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    if ((xcr0_low & (3u << 17)) != (3u << 17)) return 0;  /* XTILECFG and XTILEDATA enabled by the OS */
    /* Linux >= 5.16 grants tile data per process on request; every thread may then load a tile config */
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#else
static int detect_amx_bf16(void) { return 0; }
#endif

int ortx_cpu_has_amx_bf16(void) {
    if (cpu_amx < 0) cpu_amx = detect_amx_bf16();
    return cpu_amx;
}

int ortx_amx_allowed(void) { return amx_allowed; }

int ortx_allow_amx(int allow) {
    amx_allowed = allow != 0;
    return amx_allowed && ortx_cpu_has_amx_bf16();
}

static int cpu_two_fma_ports = -1;

/* Inferred from AMX-TILE: every CPU with AMX (Sapphire Rapids on) has two 512-bit FMA ports; others keep the
 * one-port schedules, which are what was measured on them. */
int ortx_cpu_has_two_fma_ports(void) {
    if (cpu_two_fma_ports < 0) {
#if defined(__x86_64__)
        cpu_two_fma_ports = ortx_cpu_isa() == ORTX_ISA_AVX512 && (cpuid7_edx() & CPUID7_EDX_AMX_TILE) != 0;
#else
        cpu_two_fma_ports = 0;
#endif
    }
    return cpu_two_fma_ports;
}

static int cpu_isa = -1;
static int selected_isa = -1;

int ortx_cpu_isa(void) {
    if (cpu_isa < 0) cpu_isa = detect_isa();
    return cpu_isa;
}

int ortx_selected_isa(void) {
    if (selected_isa < 0) selected_isa = ortx_cpu_isa();
    return selected_isa;
}

int ortx_force_isa(int isa) {
    int best = ortx_cpu_isa();
    selected_isa = isa < best ? isa : best;
    return selected_isa;
}
