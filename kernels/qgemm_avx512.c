/* AVX-512 pieces of the int8 GEMM (kernels/qgemm.h):
 *   - micro-kernel: an MR x NB = 8 x 32 int32 tile in 16 zmm accumulators; per quad of k, two 64-byte B loads at
 *     the quad's offset
 *     (16 pixels x 4 uint8 each) and one 32-bit weight broadcast per row, vpdpbusd (u8 x s8, four products summed
 *     into each int32 lane without intermediate saturation). Needs AVX-512 VNNI.
 *   - packing of one run of pixels (stride 1 or 2): 16 pixels of each of the 4 k sources per step (stride 2: 32
 *     bytes narrowed to their even bytes with vpmovwb), interleaved into quads with two rounds of unpacks, or with
 *     one vpermb where the CPU has AVX512_VBMI (a second table, chosen at run time);
 *   - epilogue rows with pixel stride 1: requantize (or scale, residual, Relu) 16 lanes at a time, narrowing with
 *     vpmovdb; the same operations as the scalar epilogue in the same order, so results are bitwise equal.
 * The AVX2 table uses the portable packing and epilogue, so forcing AVX2 in the tests checks those too. */
#include "activation.h"
#include "isa.h"
#include "qgemm.h"

#if ORTX_HAVE_X86
#include <immintrin.h>
#include <string.h>

#define ORTX_TARGET_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

_Static_assert(ORTX_QGEMM_MR == 8 && ORTX_QGEMM_NB == 32, "micro_avx512_vnni is written for an 8 x 32 tile");

/* Sixteen named accumulators (an array of them, unrolled by the compiler, was copied between registers and spilled:
 * 5% slower in isolation). */
ORTX_TARGET_AVX512_VNNI static void micro_avx512_vnni(int64_t k4, const int8_t *a, const uint8_t *b,
                                                      const int64_t *quad_offsets, int32_t *acc) {
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00;
    __m512i c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    for (int64_t q = 0; q < k4; q++) {
        const uint8_t *bq = b + quad_offsets[q];
        __m512i b0 = _mm512_loadu_si512(bq), b1 = _mm512_loadu_si512(bq + 64), w;
        const int8_t *aq = a + q * ORTX_QGEMM_MR * 4;
        int32_t quad;
#define ORTX_QGEMM_ROW(m)                                   \
        memcpy(&quad, aq + 4 * m, 4);                      \
        w = _mm512_set1_epi32(quad);                       \
        c##m##0 = _mm512_dpbusd_epi32(c##m##0, b0, w);     \
        c##m##1 = _mm512_dpbusd_epi32(c##m##1, b1, w);
        ORTX_QGEMM_ROW(0) ORTX_QGEMM_ROW(1) ORTX_QGEMM_ROW(2) ORTX_QGEMM_ROW(3)
        ORTX_QGEMM_ROW(4) ORTX_QGEMM_ROW(5) ORTX_QGEMM_ROW(6) ORTX_QGEMM_ROW(7)
#undef ORTX_QGEMM_ROW
    }
#define ORTX_QGEMM_STORE(m)                                         \
    _mm512_storeu_si512(acc + m * ORTX_QGEMM_NB, c##m##0);         \
    _mm512_storeu_si512(acc + m * ORTX_QGEMM_NB + 16, c##m##1);
    ORTX_QGEMM_STORE(0) ORTX_QGEMM_STORE(1) ORTX_QGEMM_STORE(2) ORTX_QGEMM_STORE(3)
    ORTX_QGEMM_STORE(4) ORTX_QGEMM_STORE(5) ORTX_QGEMM_STORE(6) ORTX_QGEMM_STORE(7)
#undef ORTX_QGEMM_STORE
}

/* Entry e's four weights on every 32-bit lane. */
ORTX_TARGET_AVX512_VNNI static inline __m512i stored_quad(const ortx_qsparse *w, int64_t e) {
    int32_t quad;
    memcpy(&quad, w->values + 4 * e, 4);
    return _mm512_set1_epi32(quad);
}

/* Sparse tiles (qgemm.h's ortx_qsparse). A stored quad costs one broadcast and its column's offset; with four blocks
 * (128 pixels) those serve eight 64-byte B loads and vpdpbusd into eight accumulators per row (eight independent
 * chains). Fewer blocks (a map's last task) run block by block, a row's quads two at a time into two pairs of
 * accumulators (four chains). */
ORTX_TARGET_AVX512_VNNI static void sparse_block_avx512_vnni(const ortx_qsparse *w, const int32_t *row_ptr,
                                                             int64_t rows, const uint8_t *b,
                                                             const int64_t *quad_offsets, int accumulate,
                                                             int32_t *acc) {
    for (int64_t r = 0; r < rows; r++) {
        __m512i d0 = _mm512_setzero_si512(), d1 = d0, c0 = d0, c1 = d0;
        if (accumulate) {
            c0 = _mm512_loadu_si512(acc + r * ORTX_QGEMM_NB);
            c1 = _mm512_loadu_si512(acc + r * ORTX_QGEMM_NB + 16);
        }
        int64_t e = row_ptr[r], end = row_ptr[r + 1];
        for (; e + 2 <= end; e += 2) {
            const uint8_t *bq = b + quad_offsets[w->cols[e]], *bp = b + quad_offsets[w->cols[e + 1]];
            __m512i wq = stored_quad(w, e), wp = stored_quad(w, e + 1);
            c0 = _mm512_dpbusd_epi32(c0, _mm512_loadu_si512(bq), wq);
            c1 = _mm512_dpbusd_epi32(c1, _mm512_loadu_si512(bq + 64), wq);
            d0 = _mm512_dpbusd_epi32(d0, _mm512_loadu_si512(bp), wp);
            d1 = _mm512_dpbusd_epi32(d1, _mm512_loadu_si512(bp + 64), wp);
        }
        if (e < end) {
            const uint8_t *bq = b + quad_offsets[w->cols[e]];
            __m512i wq = stored_quad(w, e);
            c0 = _mm512_dpbusd_epi32(c0, _mm512_loadu_si512(bq), wq);
            c1 = _mm512_dpbusd_epi32(c1, _mm512_loadu_si512(bq + 64), wq);
        }
        _mm512_storeu_si512(acc + r * ORTX_QGEMM_NB, _mm512_add_epi32(c0, d0));
        _mm512_storeu_si512(acc + r * ORTX_QGEMM_NB + 16, _mm512_add_epi32(c1, d1));
    }
}

_Static_assert(ORTX_QSPARSE_SPAN == 4, "sparse_micro_avx512_vnni's wide path is written for four blocks");

ORTX_TARGET_AVX512_VNNI static void sparse_micro_avx512_vnni(const ortx_qsparse *w, int64_t panel, int64_t m0,
                                                             int64_t rows, const uint8_t *b, int64_t block_stride,
                                                             int64_t blocks, const int64_t *quad_offsets,
                                                             int accumulate, int32_t *acc) {
    const int64_t tile = ORTX_QGEMM_MR * ORTX_QGEMM_NB;
    const int32_t *row_ptr = w->row_ptr + panel * w->rows + m0;
    if (blocks != 4) {
        for (int64_t i = 0; i < blocks; i++)
            sparse_block_avx512_vnni(w, row_ptr, rows, b + i * block_stride, quad_offsets, accumulate,
                                     acc + i * tile);
        return;
    }
    const int64_t s1 = block_stride, s2 = 2 * block_stride, s3 = 3 * block_stride;
    for (int64_t r = 0; r < rows; r++) {
        int32_t *row = acc + r * ORTX_QGEMM_NB;
        __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00;
        __m512i c31 = c00;
        if (accumulate) {
            c00 = _mm512_loadu_si512(row), c01 = _mm512_loadu_si512(row + 16);
            c10 = _mm512_loadu_si512(row + tile), c11 = _mm512_loadu_si512(row + tile + 16);
            c20 = _mm512_loadu_si512(row + 2 * tile), c21 = _mm512_loadu_si512(row + 2 * tile + 16);
            c30 = _mm512_loadu_si512(row + 3 * tile), c31 = _mm512_loadu_si512(row + 3 * tile + 16);
        }
        for (int64_t e = row_ptr[r], end = row_ptr[r + 1]; e < end; e++) {
            const uint8_t *bq = b + quad_offsets[w->cols[e]];
            __m512i wq = stored_quad(w, e);
            c00 = _mm512_dpbusd_epi32(c00, _mm512_loadu_si512(bq), wq);
            c01 = _mm512_dpbusd_epi32(c01, _mm512_loadu_si512(bq + 64), wq);
            c10 = _mm512_dpbusd_epi32(c10, _mm512_loadu_si512(bq + s1), wq);
            c11 = _mm512_dpbusd_epi32(c11, _mm512_loadu_si512(bq + s1 + 64), wq);
            c20 = _mm512_dpbusd_epi32(c20, _mm512_loadu_si512(bq + s2), wq);
            c21 = _mm512_dpbusd_epi32(c21, _mm512_loadu_si512(bq + s2 + 64), wq);
            c30 = _mm512_dpbusd_epi32(c30, _mm512_loadu_si512(bq + s3), wq);
            c31 = _mm512_dpbusd_epi32(c31, _mm512_loadu_si512(bq + s3 + 64), wq);
        }
        _mm512_storeu_si512(row, c00);
        _mm512_storeu_si512(row + 16, c01);
        _mm512_storeu_si512(row + tile, c10);
        _mm512_storeu_si512(row + tile + 16, c11);
        _mm512_storeu_si512(row + 2 * tile, c20);
        _mm512_storeu_si512(row + 2 * tile + 16, c21);
        _mm512_storeu_si512(row + 3 * tile, c30);
        _mm512_storeu_si512(row + 3 * tile + 16, c31);
    }
}

/* 16 pixels of one source: bytes t*stride for t < 16. */
ORTX_TARGET_AVX512 static inline __m128i sixteen(const uint8_t *source, int64_t stride) {
    if (!source) return _mm_setzero_si128();
    if (stride == 1) return _mm_loadu_si128((const __m128i *)source);
    return _mm256_cvtepi16_epi8(_mm256_loadu_si256((const __m256i *)source));  /* even bytes */
}

ORTX_TARGET_AVX512 static void pack_run_avx512(const uint8_t *const source[4], int64_t stride, int64_t count,
                                              int64_t readable, uint8_t *out) {
    int64_t t = 0;
    if (stride <= 2) {
        for (; t + 16 <= count || (t < count && (t + 16) * stride <= readable); t += 16) {
            const uint8_t *s[4];
            for (int i = 0; i < 4; i++) s[i] = source[i] ? source[i] + t * stride : NULL;
            __m128i x0 = sixteen(s[0], stride), x1 = sixteen(s[1], stride);
            __m128i x2 = sixteen(s[2], stride), x3 = sixteen(s[3], stride);
            __m128i p01_lo = _mm_unpacklo_epi8(x0, x1), p01_hi = _mm_unpackhi_epi8(x0, x1);
            __m128i p23_lo = _mm_unpacklo_epi8(x2, x3), p23_hi = _mm_unpackhi_epi8(x2, x3);
            uint8_t *o = out + t * 4;
            _mm_storeu_si128((__m128i *)o, _mm_unpacklo_epi16(p01_lo, p23_lo));
            _mm_storeu_si128((__m128i *)(o + 16), _mm_unpackhi_epi16(p01_lo, p23_lo));
            _mm_storeu_si128((__m128i *)(o + 32), _mm_unpacklo_epi16(p01_hi, p23_hi));
            _mm_storeu_si128((__m128i *)(o + 48), _mm_unpackhi_epi16(p01_hi, p23_hi));
        }
    }
    if (t < count) ortx_qgemm_pack_scalar(source, stride, t, count - t, out);
}

/* The same with AVX512_VBMI: the four 16-byte rows in one zmm, interleaved into quads by a single vpermb: output
 * byte o = 4t + i takes row i's byte t, at (o % 4) * 16 + o / 4. */
static const uint8_t quad_order[64] __attribute__((aligned(64))) = {0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51, 4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38, 54, 7, 23, 39, 55, 8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59, 12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63};
#define ORTX_TARGET_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi")))

ORTX_TARGET_AVX512_VBMI static void pack_run_vbmi(const uint8_t *const source[4], int64_t stride, int64_t count,
                                                 int64_t readable, uint8_t *out) {
    int64_t t = 0;
    if (stride <= 2) {
        __m512i permutation = _mm512_loadu_si512(quad_order);
        for (; t + 16 <= count || (t < count && (t + 16) * stride <= readable); t += 16) {
            __m128i x[4];
            for (int i = 0; i < 4; i++) {
                const uint8_t *at = source[i] + t * stride;
                x[i] = !source[i] ? _mm_setzero_si128() : stride == 1 ? _mm_loadu_si128((const __m128i *)at) :
                       _mm256_cvtepi16_epi8(_mm256_loadu_si256((const __m256i *)at));
            }
            __m512i rows = _mm512_inserti32x4(_mm512_castsi128_si512(x[0]), x[1], 1);
            rows = _mm512_inserti32x4(rows, x[2], 2);
            rows = _mm512_inserti32x4(rows, x[3], 3);
            _mm512_storeu_si512(out + t * 4, _mm512_permutexvar_epi8(permutation, rows));
        }
    }
    if (t < count) ortx_qgemm_pack_scalar(source, stride, t, count - t, out);
}

/* 16 int32 lanes (in byte range) to bytes in a register. The empty asm keeps GCC from fusing vpmovdb with the
 * store that follows into vpmovdb's memory form, which Zen 4 runs far slower (perf: 19% of the epilogue's samples
 * on that one instruction in MobileNetV2). */
ORTX_TARGET_AVX512 static inline __m128i narrow_bytes(__m512i lanes) {
    __m128i bytes = _mm512_cvtepi32_epi8(lanes);
    __asm__("" : "+v"(bytes));
    return bytes;
}

/* The epilogue's per-call constants, read from the params once: byte stores may alias the params, so reading
 * p->qmin and friends inside the lane loop made GCC reload and re-broadcast them for every vector. */
typedef struct lane_constants {
    int quantized, activation;
    __m512 low, high, clip_low, clip_high;
    __m512i zero_point;
} lane_constants;

ORTX_TARGET_AVX512 __attribute__((always_inline)) static inline lane_constants lane_constants_of(
    const ortx_qconv_params *p, float p0, float p1) {
    lane_constants k;
    k.quantized = p->output_kind != 2;
    k.activation = (int)p->activation;
    k.low = _mm512_set1_ps((float)(p->qmin - p->y_zero_point));
    k.high = _mm512_set1_ps((float)(p->qmax - p->y_zero_point));
    k.clip_low = _mm512_set1_ps(p0);
    k.clip_high = _mm512_set1_ps(p1);
    k.zero_point = _mm512_set1_epi32((int32_t)p->y_zero_point);
    return k;
}

/* One tile row's 16 lanes from column j: requantized bytes (stored at out8) or floats (+ residual, Relu or Clip;
 * at out32). fp-contract off: the multiply and the residual add round separately, as in the scalar epilogue.
 * Masked stores only where the mask is partial: on Zen 4 they cost far more than plain ones (the Gemm epilogue's
 * 8-byte masked stores made a 128x256x1024 int8 GEMM 0.29 instead of 0.22 ms). */
ORTX_TARGET_AVX512 __attribute__((optimize("fp-contract=off"), always_inline)) static inline void epilogue_lanes(
    lane_constants k, __m512i a, __m512 scale, __mmask16 mask, const float *residual, uint8_t *out8, float *out32) {
    __m512 value = _mm512_mul_ps(_mm512_cvtepi32_ps(a), scale);
    if (k.quantized) {
        value = _mm512_min_ps(_mm512_max_ps(value, k.low), k.high);
        __m128i bytes = narrow_bytes(_mm512_add_epi32(_mm512_cvtps_epi32(value), k.zero_point));
        if (mask == 0xffff) _mm_storeu_si128((__m128i *)out8, bytes);
        else _mm_mask_storeu_epi8(out8, mask, bytes);
        return;
    }
    if (residual) value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, residual));
    if (k.activation == ORTX_ACT_RELU) value = _mm512_max_ps(value, _mm512_setzero_ps());
    /* Clip as the scalar x < p0 ? p0 : (x > p1 ? p1 : x): max/min return their second operand (x) on NaN and ties */
    if (k.activation == ORTX_ACT_CLIP) value = _mm512_min_ps(k.clip_high, _mm512_max_ps(k.clip_low, value));
    if (mask == 0xffff) _mm512_storeu_ps(out32, value);
    else _mm512_mask_storeu_ps(out32, mask, value);
}

/* Channel stride 1 (Gemm/MatMul rows, no residual), a tile of at most 8 rows: the rows finished as in
 * epilogue_lanes into a local tile (floats, or the requantized int32 values), then 8x8 blocks transposed in
 * registers and stored one pixel (8 channels, masked to `rows`) at a time. The scalar transposed copy-out this
 * replaces took a third of the micro-kernel's time on BERT's K=256 GEMMs; a vpgatherdd per pixel was no better. */
ORTX_TARGET_AVX512 static inline void transpose8x8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

ORTX_TARGET_AVX512 __attribute__((optimize("fp-contract=off"))) static void epilogue_channels(
    const ortx_qconv_params *p, const int32_t *acc, int64_t rows, int64_t cols, const int32_t *bias,
    const float *multiplier, void *output, int64_t offset, float p0, float p1) {
    float tile[ORTX_QGEMM_MR * ORTX_QGEMM_NB] __attribute__((aligned(64)));
    int quantized = p->output_kind != 2;
    __m512 low = _mm512_set1_ps((float)(p->qmin - p->y_zero_point));
    __m512 high = _mm512_set1_ps((float)(p->qmax - p->y_zero_point));
    __m512 clip_low = _mm512_set1_ps(p0), clip_high = _mm512_set1_ps(p1);
    __m512i zero_point = _mm512_set1_epi32((int32_t)p->y_zero_point);
    for (int64_t i = 0; i < ORTX_QGEMM_MR; i++) {  /* rows past `rows` are finished too (never stored) */
        __m512i b = _mm512_set1_epi32(i < rows ? bias[i] : 0);
        __m512 scale = _mm512_set1_ps(i < rows ? multiplier[i] : 0.0f);
        for (int64_t j = 0; j < cols; j += 16) {
            __m512i a = _mm512_add_epi32(_mm512_loadu_si512(acc + i * ORTX_QGEMM_NB + j), b);
            __m512 value = _mm512_mul_ps(_mm512_cvtepi32_ps(a), scale);
            if (quantized) {
                value = _mm512_min_ps(_mm512_max_ps(value, low), high);
                value = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_cvtps_epi32(value), zero_point));
            } else if (p->activation == ORTX_ACT_RELU) {
                value = _mm512_max_ps(value, _mm512_setzero_ps());
            } else if (p->activation == ORTX_ACT_CLIP) {
                value = _mm512_min_ps(clip_high, _mm512_max_ps(clip_low, value));
            }
            _mm512_store_ps(tile + i * ORTX_QGEMM_NB + j, value);
        }
    }
    __mmask8 mask = (__mmask8)((1u << rows) - 1);
    for (int64_t j0 = 0; j0 < cols; j0 += 8) {
        __m256 block[8];
        for (int i = 0; i < 8; i++) block[i] = _mm256_load_ps(tile + i * ORTX_QGEMM_NB + j0);
        transpose8x8(block);
        for (int64_t j = j0; j < cols && j < j0 + 8; j++) {
            int64_t index = offset + j * p->out_pixel_stride;
            if (quantized) {
                __m128i bytes = _mm256_cvtepi32_epi8(_mm256_castps_si256(block[j - j0]));
                __asm__("" : "+v"(bytes));  /* as narrow_bytes: no vpmovdb to memory */
                if (rows == 8) _mm_storel_epi64((__m128i *)((uint8_t *)output + index), bytes);
                else _mm_mask_storeu_epi8((uint8_t *)output + index, mask, bytes);
            } else if (rows == 8) {
                _mm256_storeu_ps((float *)output + index, block[j - j0]);
            } else {
                _mm256_mask_storeu_ps((float *)output + index, mask, block[j - j0]);
            }
        }
    }
}

/* Rows are output channels, columns pixels. Pixel stride 1 (NCHW): each row's lanes go straight to the output.
 * Channel stride 1 (Gemm/MatMul rows): epilogue_channels. fp-contract off here too: epilogue_lanes is inlined into
 * this body, and an FMA of the multiply and the residual add would round differently from the scalar epilogue. */
ORTX_TARGET_AVX512 __attribute__((optimize("fp-contract=off"))) static void epilogue_avx512(const ortx_qconv_params *p, const int32_t *acc, int64_t rows,
                                              int64_t cols, const int32_t *bias, const float *multiplier,
                                              void *output, int64_t offset, const float *residual, float p0,
                                              float p1) {
    int quantized = p->output_kind != 2;
    int direct = p->out_pixel_stride == 1, transposed = p->out_channel_stride == 1 && !residual;
    int vector_activation = p->activation == ORTX_ACT_NONE || p->activation == ORTX_ACT_RELU ||
                            p->activation == ORTX_ACT_CLIP;
    if ((!direct && !transposed) || (!quantized && !vector_activation)) {
        ortx_qgemm_epilogue_portable(p, acc, rows, cols, bias, multiplier, output, offset, residual, p0, p1);
        return;
    }
    if (!direct) {
        epilogue_channels(p, acc, rows, cols, bias, multiplier, output, offset, p0, p1);
        return;
    }
    lane_constants k = lane_constants_of(p, p0, p1);
    int64_t channel_stride = p->out_channel_stride;
    for (int64_t i = 0; i < rows; i++) {
        __m512i b = _mm512_set1_epi32(bias[i]);
        __m512 scale = _mm512_set1_ps(multiplier[i]);
        int64_t row = offset + i * channel_stride;
        for (int64_t j = 0; j < cols; j += 16) {
            __mmask16 mask = cols - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - j)) - 1);
            __m512i a = _mm512_add_epi32(_mm512_loadu_si512(acc + i * ORTX_QGEMM_NB + j), b);
            epilogue_lanes(k, a, scale, mask, residual ? residual + row + j : NULL, (uint8_t *)output + row + j,
                           (float *)output + row + j);
        }
    }
}

/* qdepthwise2d_i8's padded plane copy when a padded row fits in 64 bytes (the 7x7 to 56x56 maps of MobileNetV2-like
 * nets): per row one masked load of the input row (the lanes outside it are never read), the sign flip, the zero
 * point blended into the padding, one 64-byte store; a store's spill past its row is zero points, overwritten by
 * the next row or landing in the plane's 64 bytes of slack. The scalar copy made three libc calls a row, most of a
 * 7x7 plane's time. Returns 0 (nothing written) when a row does not fit. */
ORTX_TARGET_AVX512 int ortx_qdepthwise_pad_plane_avx512(const uint8_t *in, int64_t in_height, int64_t in_width,
                                                        int64_t pad_top, int64_t pad_left, int64_t plane_height,
                                                        int64_t plane_width, uint8_t zero_u, uint8_t flip,
                                                        uint8_t *plane) {
    if (plane_width > 64 || in_width < 1 || pad_left < 0 || pad_left + in_width > 64) return 0;
    __mmask64 columns = (in_width >= 64 ? ~0ULL : (1ULL << in_width) - 1) << pad_left;
    __m512i fill = _mm512_set1_epi8((char)zero_u), flips = _mm512_set1_epi8((char)flip);
    for (int64_t row = 0; row < plane_height; row++) {
        int64_t source_row = row - pad_top;
        __m512i line = fill;
        if (source_row >= 0 && source_row < in_height) {
            __m512i values = _mm512_maskz_loadu_epi8(columns, in + source_row * in_width - pad_left);
            line = _mm512_mask_blend_epi8(columns, fill, _mm512_xor_si512(values, flips));
        }
        _mm512_storeu_si512(plane + row * plane_width, line);
    }
    return 1;
}

/* QuantizeLinear over 16 lanes: x / scale, clamp (max first: NaN becomes low, as the scalar loop), round to nearest
 * even (cvtps2dq), + zero point, narrowed (in range after the clamp). Returns how many elements it did. */
ORTX_TARGET_AVX512 int64_t ortx_quantize_avx512(const float *x, int64_t count, float scale, float low, float high,
                                               int32_t zero, void *y) {
    __m512 s = _mm512_set1_ps(scale), lo = _mm512_set1_ps(low), hi = _mm512_set1_ps(high);
    __m512i z = _mm512_set1_epi32(zero);
    int64_t i = 0;
    for (; i + 16 <= count; i += 16) {
        __m512 value = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), s), lo), hi);
        __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(value), z);
        _mm_storeu_si128((__m128i *)((uint8_t *)y + i), narrow_bytes(q));
    }
    return i;
}

/* DequantizeLinear of uint8/int8 over 16 lanes: float(q - zero) * scale. Returns how many elements it did. */
ORTX_TARGET_AVX512 int64_t ortx_dequantize_avx512(const void *q, int64_t count, int is_signed, int32_t zero,
                                                 float scale, float *y) {
    __m512 s = _mm512_set1_ps(scale);
    __m512i z = _mm512_set1_epi32(zero);
    int64_t i = 0;
    for (; i + 16 <= count; i += 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)((const uint8_t *)q + i));
        __m512i wide = is_signed ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(wide, z)), s));
    }
    return i;
}

/* Depthwise row: 16 output columns per vector, per tap one widening load (stride 2: 32 bytes narrowed to their even
 * bytes first), vpmulld by the broadcast tap, vpaddd. Exact int32 sums, so equal to the portable row. */
ORTX_TARGET_AVX512 static void depthwise_row_avx512(const ortx_qconv_params *p, const uint8_t *plane,
                                                   int64_t plane_width, const int32_t *taps, int64_t oh,
                                                   int32_t *acc) {
    if (p->stride_width > 2) {
        ortx_qdepthwise_row_portable(p, plane, plane_width, taps, oh, acc);
        return;
    }
    for (int64_t ow = 0; ow < p->out_width; ow += 16) {
        __m512i sum = _mm512_setzero_si512();
        for (int64_t kh = 0; kh < p->kernel_height; kh++) {
            const uint8_t *row = plane + (oh * p->stride_height + kh * p->dilation_height) * plane_width +
                                 ow * p->stride_width;
            for (int64_t kw = 0; kw < p->kernel_width; kw++) {
                const uint8_t *x = row + kw * p->dilation_width;
                __m128i bytes = p->stride_width == 1 ? _mm_loadu_si128((const __m128i *)x)
                                                     : _mm256_cvtepi16_epi8(_mm256_loadu_si256((const __m256i *)x));
                __m512i value = _mm512_cvtepu8_epi32(bytes);
                sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(value, _mm512_set1_epi32(taps[kh * p->kernel_width + kw])));
            }
        }
        _mm512_storeu_si512(acc + ow, sum);
    }
}

/* Depthwise row for 3-wide kernels (no horizontal dilation, stride 1 or 2) with VNNI and VBMI: per kernel row, one
 * 64-byte load of the plane row, one vpermb that gives each of 16 output lanes its three input bytes (x[s*j],
 * x[s*j + 1], x[s*j + 2], and a fourth whose weight is 0), one vpdpbusd with the row's three taps broadcast: three
 * instructions per tap row where the widening path above needs twelve. The 64-byte loads stay inside the plane's
 * 64 bytes of slack. Exact int32 sums, so equal to the portable row. */
static const uint8_t triple_stride1[64] __attribute__((aligned(64))) = {
    0, 1, 2, 0, 1, 2, 3, 0, 2, 3, 4, 0, 3, 4, 5, 0, 4, 5, 6, 0, 5, 6, 7, 0, 6, 7, 8, 0, 7, 8, 9, 0,
    8, 9, 10, 0, 9, 10, 11, 0, 10, 11, 12, 0, 11, 12, 13, 0, 12, 13, 14, 0, 13, 14, 15, 0, 14, 15, 16, 0,
    15, 16, 17, 0};
static const uint8_t triple_stride2[64] __attribute__((aligned(64))) = {
    0, 1, 2, 0, 2, 3, 4, 0, 4, 5, 6, 0, 6, 7, 8, 0, 8, 9, 10, 0, 10, 11, 12, 0, 12, 13, 14, 0, 14, 15, 16, 0,
    16, 17, 18, 0, 18, 19, 20, 0, 20, 21, 22, 0, 22, 23, 24, 0, 24, 25, 26, 0, 26, 27, 28, 0, 28, 29, 30, 0,
    30, 31, 32, 0};
#define ORTX_TARGET_AVX512_VNNI_VBMI \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")))

/* The three-wide taps of each kernel row as one dword (the fourth byte 0) and the permutation of the stride; 0 when
 * the geometry is not the three-wide one these rows compute. */
ORTX_TARGET_AVX512_VNNI_VBMI static inline int triple_setup(const ortx_qconv_params *p, const int32_t *taps,
                                                            __m512i weights[8], __m512i *order) {
    if (p->kernel_width != 3 || p->dilation_width != 1 || p->stride_width > 2 || p->kernel_height > 8) return 0;
    *order = _mm512_load_si512(p->stride_width == 1 ? triple_stride1 : triple_stride2);
    for (int64_t kh = 0; kh < p->kernel_height; kh++) {
        const int32_t *t = taps + kh * 3;
        weights[kh] = _mm512_set1_epi32((int32_t)((uint32_t)(t[0] & 0xff) | (uint32_t)(t[1] & 0xff) << 8 |
                                                  (uint32_t)(t[2] & 0xff) << 16));
    }
    return 1;
}

/* Output rows [first, first + count) into acc (row stride out_width; a row's 16-lane spill past its end is
 * rewritten by the next row, the last one's lands in the caller's slack). */
ORTX_TARGET_AVX512_VNNI_VBMI static inline void triple_rows(const ortx_qconv_params *p, const uint8_t *plane,
                                                            int64_t plane_width, const __m512i weights[8],
                                                            __m512i order, int64_t first, int64_t count,
                                                            int32_t *acc) {
    int64_t row_step = p->stride_height * plane_width, tap_step = p->dilation_height * plane_width;
    for (int64_t oh = first; oh < first + count; oh++) {
        const uint8_t *top = plane + oh * row_step;
        for (int64_t ow = 0; ow < p->out_width; ow += 16) {
            const uint8_t *x = top + ow * p->stride_width;
            __m512i sum = _mm512_setzero_si512();
            for (int64_t kh = 0; kh < p->kernel_height; kh++)
                sum = _mm512_dpbusd_epi32(sum, _mm512_permutexvar_epi8(order, _mm512_loadu_si512(x + kh * tap_step)),
                                          weights[kh]);
            _mm512_storeu_si512(acc + (oh - first) * p->out_width + ow, sum);
        }
    }
}

ORTX_TARGET_AVX512_VNNI_VBMI static void depthwise_row_vbmi(const ortx_qconv_params *p, const uint8_t *plane,
                                                            int64_t plane_width, const int32_t *taps, int64_t oh,
                                                            int32_t *acc) {
    __m512i weights[8], order;
    if (!triple_setup(p, taps, weights, &order)) {
        depthwise_row_avx512(p, plane, plane_width, taps, oh, acc);
        return;
    }
    triple_rows(p, plane, plane_width, weights, order, oh, 1, acc);
}

/* depthwise_row_vbmi over every output row of a plane in one call: the taps and the permutation set up once, and
 * the rows' independent sums in one loop the core overlaps (a 7x7 plane was seven calls of three dependent
 * vpdpbusd each). The same instructions per row, so the same exact int32 sums. */
ORTX_TARGET_AVX512_VNNI_VBMI static int depthwise_plane_vbmi(const ortx_qconv_params *p, const uint8_t *plane,
                                                             int64_t plane_width, const int32_t *taps, int32_t *acc) {
    __m512i weights[8], order;
    if (!triple_setup(p, taps, weights, &order)) return 0;
    triple_rows(p, plane, plane_width, weights, order, 0, p->out_height, acc);
    return 1;
}

const ortx_qgemm_isa ortx_qgemm_isa_avx512_vnni = {.name = "avx512_vnni", .micro = micro_avx512_vnni,
                                                   .sparse_micro = sparse_micro_avx512_vnni,
                                                   .pack_run = pack_run_avx512, .epilogue = epilogue_avx512,
                                                   .depthwise_row = depthwise_row_avx512};
const ortx_qgemm_isa ortx_qgemm_isa_avx512_vbmi = {.name = "avx512_vnni_vbmi", .micro = micro_avx512_vnni,
                                                   .sparse_micro = sparse_micro_avx512_vnni,
                                                   .pack_run = pack_run_vbmi, .epilogue = epilogue_avx512,
                                                   .depthwise_row = depthwise_row_vbmi,
                                                   .depthwise_plane = depthwise_plane_vbmi};

#else
const ortx_qgemm_isa ortx_qgemm_isa_avx512_vbmi = {.name = "avx512_vnni_vbmi", .micro = ortx_qgemm_micro_portable,
                                                   .sparse_micro = ortx_qgemm_sparse_micro_portable,
                                                   .pack_run = ortx_qgemm_pack_run_portable,
                                                   .epilogue = ortx_qgemm_epilogue_portable,
                                                   .depthwise_row = ortx_qdepthwise_row_portable};
int ortx_qdepthwise_pad_plane_avx512(const uint8_t *in, int64_t in_height, int64_t in_width, int64_t pad_top,
                                     int64_t pad_left, int64_t plane_height, int64_t plane_width, uint8_t zero_u,
                                     uint8_t flip, uint8_t *plane) {
    (void)in, (void)in_height, (void)in_width, (void)pad_top, (void)pad_left, (void)plane_height, (void)plane_width;
    (void)zero_u, (void)flip, (void)plane;
    return 0;
}
int64_t ortx_quantize_avx512(const float *x, int64_t count, float scale, float low, float high, int32_t zero,
                             void *y) {
    (void)x, (void)count, (void)scale, (void)low, (void)high, (void)zero, (void)y;
    return 0;
}
int64_t ortx_dequantize_avx512(const void *q, int64_t count, int is_signed, int32_t zero, float scale, float *y) {
    (void)q, (void)count, (void)is_signed, (void)zero, (void)scale, (void)y;
    return 0;
}
const ortx_qgemm_isa ortx_qgemm_isa_avx512_vnni = {.name = "avx512_vnni", .micro = ortx_qgemm_micro_portable,
                                                   .sparse_micro = ortx_qgemm_sparse_micro_portable,
                                                   .pack_run = ortx_qgemm_pack_run_portable,
                                                   .epilogue = ortx_qgemm_epilogue_portable,
                                                   .depthwise_row = ortx_qdepthwise_row_portable};
#endif
