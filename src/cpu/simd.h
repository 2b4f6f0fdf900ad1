/*
 * simd.h — the thin per-ISA vector layer the CPU kernels are written against.
 *
 * A kernel file defines exactly one of M2_SIMD_AVX2 or M2_SIMD_SCALAR, then includes this
 * header and ssd_kernels_impl.h. The kernel bodies use only the m2v_* names below, so one
 * source text yields every instruction set and no kernel body carries an #ifdef (the same
 * arrangement as ggml's simd-mappings.h).
 *
 * m2v is a vector of M2V_LEN floats. The scalar mapping is a "vector" of one lane: the
 * kernels' vector loops then cover every element and their scalar tails never run.
 * Loads and stores are unaligned: rows of N or P floats start anywhere (N = 5 is legal).
 *
 * Arithmetic is IEEE float32 throughout; m2v_fma is a fused multiply-add on AVX2 and a
 * multiply followed by an add in the scalar mapping (a software fmaf would be slow where
 * the hardware has none). Results differ between the two kernel sets in the last bits,
 * never between runs or thread counts.
 */
#ifndef MAMBA2C_CPU_SIMD_H
#define MAMBA2C_CPU_SIMD_H

#include <math.h>
#include <stdint.h>

#if defined(__GNUC__)
#define M2_INLINE static inline __attribute__((always_inline))
#else
#define M2_INLINE static inline
#endif

#if defined(M2_SIMD_AVX2)

#include <immintrin.h>

#define M2V_LEN 8
typedef __m256 m2v;

#define m2v_load(p) _mm256_loadu_ps(p)
#define m2v_store(p, v) _mm256_storeu_ps((p), (v))
#define m2v_set1(x) _mm256_set1_ps(x)
#define m2v_zero() _mm256_setzero_ps()
#define m2v_add(a, b) _mm256_add_ps((a), (b))
#define m2v_sub(a, b) _mm256_sub_ps((a), (b))
#define m2v_mul(a, b) _mm256_mul_ps((a), (b))
#define m2v_div(a, b) _mm256_div_ps((a), (b))
#define m2v_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c)) /* a*b + c, one rounding */

/* Sum of the 8 lanes. */
M2_INLINE float m2v_reduce(m2v v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
}

/* out[i] = sum of the lanes of v_i, four vectors at once (three hadds instead of four
 * separate reductions: the per-token cost of a 4-row tile). */
M2_INLINE void m2v_reduce4(m2v a, m2v b, m2v c, m2v d, float *out) {
    __m256 ab = _mm256_hadd_ps(a, b);
    __m256 cd = _mm256_hadd_ps(c, d);
    __m256 abcd = _mm256_hadd_ps(ab, cd); /* [a b c d | a b c d] partial sums per half */
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

/* exp(x) for float32 lanes, Cephes' expf scheme: x = n ln2 + r with |r| <= ln2/2 (ln2 split
 * in two for an exact n ln2), a degree-7 polynomial for e^r, 2^n through the exponent bits.
 * About 1 ulp on the clamped range; the clamp keeps 2^n finite, and e^-87.3 ~ 1.2e-38 is as
 * good as 0 wherever the kernels use it (1 + e^-z, sigmoid). */
M2_INLINE m2v m2v_exp(m2v x) {
    const __m256 hi = _mm256_set1_ps(88.0f), lo = _mm256_set1_ps(-87.3f);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    e = _mm256_slli_epi32(e, 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

#elif defined(M2_SIMD_SCALAR)

#define M2V_LEN 1
typedef float m2v;

#define m2v_load(p) (*(p))
#define m2v_store(p, v) (*(p) = (v))
#define m2v_set1(x) ((float)(x))
#define m2v_zero() 0.0f
#define m2v_add(a, b) ((a) + (b))
#define m2v_sub(a, b) ((a) - (b))
#define m2v_mul(a, b) ((a) * (b))
#define m2v_div(a, b) ((a) / (b))
#define m2v_fma(a, b, c) ((a) * (b) + (c)) /* ISO C mode: not contracted, two roundings */

M2_INLINE float m2v_reduce(m2v v) { return v; }
M2_INLINE void m2v_reduce4(m2v a, m2v b, m2v c, m2v d, float *out) {
    out[0] = a;
    out[1] = b;
    out[2] = c;
    out[3] = d;
}
M2_INLINE m2v m2v_exp(m2v x) { return expf(x); }

#else
#error "define M2_SIMD_AVX2 or M2_SIMD_SCALAR before including cpu/simd.h"
#endif

#endif /* MAMBA2C_CPU_SIMD_H */
