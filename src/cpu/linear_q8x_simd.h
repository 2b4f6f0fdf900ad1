/*
 * linear_q8x_simd.h — the one integer primitive of the Q8_0 integer-activation kernels
 * (linear_q8x_impl.h), per instruction set: the thin layer the kernel text is written over,
 * beside simd.h's float mapping (which the including file has chosen already).
 *
 *   m2q_dot(w, x)  the 32 products w_j · x_j of one block, w a Q8_0 weight block's int8 (any
 *                  value, any alignment), x a quantized x block (|x_j| <= 127), summed in
 *                  exact integers into M2V_LEN lanes and converted to float (exact: a lane
 *                  is at most 32 · 128 · 127 in magnitude). Lane k of a vector set holds the
 *                  products 4k .. 4k+3 of each 4 · M2V_LEN-byte slice, the grouping of the
 *                  dot-product instructions, so the variants of one width give equal lanes:
 *     AVX2    |w| · (x with w's sign): vpmaddubsw (pairs, at most 2 · 128 · 127 < 2^15, no
 *             saturation) then vpmaddwd by ones; with M2_Q8X_VNNI (AVX-512 VNNI + VL, the
 *             same 8 lanes) one vpdpbusd instead of the two. (x with w's sign never
 *             overflows: x is never -128; |w| of -128 is 128 as an unsigned byte.)
 *     NEON    with M2_Q8X_DOT (the dot-product extension) two sdot; else vmull_s8 into int16
 *             products, pairwise added twice (2 products fit int16: 2 · 128 · 127).
 *     scalar  one lane: the whole sum.
 */
#ifndef MAMBA2C_CPU_LINEAR_Q8X_SIMD_H
#define MAMBA2C_CPU_LINEAR_Q8X_SIMD_H

#include <stdint.h>

#include "cpu/simd.h"

#if defined(M2_SIMD_AVX2)
M2_INLINE m2v m2q_dot(const int8_t *w, const int8_t *x) {
    const __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)w);
    const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)x);
    const __m256i aw = _mm256_abs_epi8(wv);
    const __m256i sx = _mm256_sign_epi8(xv, wv);
#if defined(M2_Q8X_VNNI)
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sx);
#else
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
#endif
    return _mm256_cvtepi32_ps(s);
}
#elif defined(M2_SIMD_NEON)
M2_INLINE m2v m2q_dot(const int8_t *w, const int8_t *x) {
    const int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16);
    const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
#if defined(M2_Q8X_DOT)
    const int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1);
#else
    const int16x8_t p0 = vpaddq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), vmull_high_s8(w0, x0));
    const int16x8_t p1 = vpaddq_s16(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), vmull_high_s8(w1, x1));
    const int32x4_t s = vpadalq_s16(vpaddlq_s16(p0), p1);
#endif
    return vcvtq_f32_s32(s);
}
#elif defined(M2_SIMD_SCALAR)
M2_INLINE m2v m2q_dot(const int8_t *w, const int8_t *x) {
    int32_t s = 0;
    for (int j = 0; j < 32; j++) s += (int32_t)w[j] * (int32_t)x[j];
    return (float)s;
}
#else
#error "linear_q8x_simd.h: no integer mapping for this instruction set"
#endif

#endif /* MAMBA2C_CPU_LINEAR_Q8X_SIMD_H */
