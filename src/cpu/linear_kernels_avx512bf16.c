/*
 * linear_kernels_avx512bf16.c — bf16 weights times a bf16-exact x with AVX512-BF16
 * (vdpbf16ps). Compiled with the AVX-512 flags and -mavx512bf16 (CMakeLists.txt); linear_cpu.c
 * calls these tiles when the context runs the avx512 set, the CPU has avx512_bf16, the weight
 * is bf16 and a row of x is exactly bf16-representable (every low 16 bits zero: the case of a
 * bf16 model, whose activation is rounded to bf16 before the product). That row of x arrives
 * packed as bf16 (its top halves, exact).
 *
 * vdpbf16ps multiplies pairs of bf16 and adds both products to a float32 lane. Each product
 * of two bf16 (8-bit significands) is exact in float32, so the only roundings are the float32
 * additions, as in the widening kernel (linear_kernels_impl.h); what differs is the order:
 * per output two accumulators a0 (even 32-element chunks) and a1 (odd chunks; an odd last
 * full chunk goes to a0, the masked tail chunk to a1), each lane adding the odd element's
 * product then the even one's, then the 16 lanes of a0 + a1 (m2v_reduce's order). The
 * instruction treats bf16 subnormals as zero (inputs and the sums flush denormals; no
 * exceptions), which the widening kernel does not: results differ from that kernel within
 * float32 rounding (and by values below 2^-126). The order depends on I alone, so a result
 * never depends on the tile, the thread or M (tested in tests/test_linear.c). With M = 1
 * linear_cpu.c runs the 4x1s tile over four streams 16 rows apart (docs/decode.md, "Four
 * streams"), batches the 2x2 / 2x1 tiles.
 */
#define M2_SIMD_AVX512 1
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/linear_kernels.h"
#include "cpu/simd.h"

#define BD_NRMAX 4
#define BD_MBMAX 2

static inline __m512bh bd_load(const void *p) { return (__m512bh)_mm512_loadu_si512(p); }
static inline __m512bh bd_load_mask(__mmask32 k, const void *p) {
    return (__m512bh)_mm512_maskz_loadu_epi16(k, p);
}

/* x: row m at xb + m * xbs (bf16 elements); w: row r at w + r * wrb bytes */
static inline __attribute__((always_inline)) void bd_body(const int NR, const int MB,
                                                          const int PF, int64_t I,
                                                          const unsigned char *w, int64_t wrb,
                                                          const uint16_t *xb, int64_t xbs,
                                                          float *res) {
    __m512 a0[BD_NRMAX][BD_MBMAX], a1[BD_NRMAX][BD_MBMAX];
    for (int r = 0; r < NR; r++)
        for (int m = 0; m < MB; m++) a0[r][m] = a1[r][m] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= I; i += 64) {
        __m512bh xv[BD_MBMAX], xw[BD_MBMAX];
        for (int m = 0; m < MB; m++) {
            xv[m] = bd_load(xb + m * xbs + i);
            xw[m] = bd_load(xb + m * xbs + i + 32);
        }
        for (int r = 0; r < NR; r++) {
            const unsigned char *wr = w + r * wrb + i * 2;
            if (PF) { /* NR rows on (not in 4x1s: its rows are 4 streams far apart) */
                _mm_prefetch((const char *)(wr + NR * wrb), _MM_HINT_T0);
                _mm_prefetch((const char *)(wr + NR * wrb + 64), _MM_HINT_T0);
            }
            const __m512bh wv = bd_load(wr), wu = bd_load(wr + 64);
            for (int m = 0; m < MB; m++) {
                a0[r][m] = _mm512_dpbf16_ps(a0[r][m], wv, xv[m]);
                a1[r][m] = _mm512_dpbf16_ps(a1[r][m], wu, xw[m]);
            }
        }
    }
    if (i + 32 <= I) {
        for (int r = 0; r < NR; r++) {
            const __m512bh wv = bd_load(w + r * wrb + i * 2);
            for (int m = 0; m < MB; m++)
                a0[r][m] = _mm512_dpbf16_ps(a0[r][m], wv, bd_load(xb + m * xbs + i));
        }
        i += 32;
    }
    if (i < I) { /* masked: the lanes past I load zeros (never read, never fault) */
        const __mmask32 k = (__mmask32)((1u << (I - i)) - 1u);
        for (int r = 0; r < NR; r++) {
            const __m512bh wv = bd_load_mask(k, w + r * wrb + i * 2);
            for (int m = 0; m < MB; m++)
                a1[r][m] = _mm512_dpbf16_ps(a1[r][m], wv, bd_load_mask(k, xb + m * xbs + i));
        }
    }
    for (int r = 0; r < NR; r++)
        for (int m = 0; m < MB; m++) res[m * 4 + r] = m2v_reduce(_mm512_add_ps(a0[r][m], a1[r][m]));
}

#define BD_TILE(NR, MB, PF, name)                                                              \
    static void bd_##name(int64_t I, const unsigned char *w, int64_t wrb, const uint16_t *xb,  \
                          int64_t xbs, float *res) {                                           \
        bd_body(NR, MB, PF, I, w, wrb, xb, xbs, res);                                          \
    }
BD_TILE(4, 1, 1, 4x1)
BD_TILE(2, 2, 1, 2x2)
BD_TILE(2, 1, 1, 2x1)
BD_TILE(1, 2, 1, 1x2)
BD_TILE(1, 1, 1, 1x1)
BD_TILE(4, 1, 0, 4x1s)

const m2_linear_bf16x_kernels m2_linear_bf16x_avx512bf16 = {
    "avx512bf16", {bd_4x1, bd_2x2, bd_2x1, bd_1x2, bd_1x1, bd_4x1s}};
