/*
 * simd.h — the thin per-ISA vector layer the CPU kernels are written against.
 *
 * A kernel file defines exactly one of M2_SIMD_AVX2, M2_SIMD_AVX512 (conv1d and SSD only: it
 * maps just the operations those kernel texts use), M2_SIMD_NEON (AArch64; every op) or
 * M2_SIMD_SCALAR, then includes this header
 * and its op's *_kernels_impl.h. The kernel bodies use only the m2v_* names below, so one
 * source text yields every instruction set and no kernel body carries an #ifdef (the same
 * arrangement as ggml's simd-mappings.h).
 *
 * m2v is a vector of M2V_LEN floats. The scalar mapping is a "vector" of one lane: the
 * kernels' vector loops then cover every element and their scalar tails never run.
 * Loads and stores are unaligned: rows of N or P floats start anywhere (N = 5 is legal).
 *
 * Arithmetic is IEEE float32 throughout; m2v_fma is a fused multiply-add on AVX2/AVX-512/NEON and a
 * multiply followed by an add in the scalar mapping (a software fmaf would be slow where
 * the hardware has none). Results differ between the scalar and the vector kernel sets in
 * the last bits, never between runs or thread counts.
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

/* A hint to fetch the cache line holding p (for reading; m2_prefetch_w: for writing). Kernels
 * whose rows are far apart use it where the hardware prefetchers lose track of the streams. */
#if defined(__GNUC__)
#define m2_prefetch(p) __builtin_prefetch((p), 0, 3)
#define m2_prefetch_w(p) __builtin_prefetch((p), 1, 3)
#else
#define m2_prefetch(p) ((void)(p))
#define m2_prefetch_w(p) ((void)(p))
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
#define m2v_fnma(a, b, c) _mm256_fnmadd_ps((a), (b), (c)) /* c - a*b, one rounding */

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

/* e^(-x) for float32 lanes: cheaper than m2v_exp(-x) (about a quarter fewer ops, most of them
 * on the FMA ports; the negation folded in) at a little less accuracy: at most ~4 ulp on the
 * clamped range (m2v_exp: ~3). Added for sigmoid-type activations (1 + e^-v), where those
 * ports are the bottleneck. x = -(n ln2 + r): n = round(-x log2e) is read off a magic-number sum, q = x +
 * n ln2 = -r with ln2 split in two (Cody-Waite), e^r a degree-5 minimax polynomial in q
 * (relative error 9e-8 on |r| <= ln2/2), and 2^n goes into the result by an integer add to
 * its exponent field (the low bits of the magic sum, shifted, are n << 23 in two's
 * complement). The clamp keeps n in [-125, 127], so the result stays normal: e^-86.5 ~ 2.7e-38
 * stands in for smaller results, e^88 for larger ones. A NaN x gives NaN. */
M2_INLINE m2v m2v_exp_neg(m2v x) {
    /* operand order: a NaN x passes through both (min/max return their second operand) */
    x = _mm256_min_ps(_mm256_set1_ps(86.5f), _mm256_max_ps(_mm256_set1_ps(-88.0f), x));
    const __m256 magic = _mm256_set1_ps(12582912.0f); /* 1.5 * 2^23: rounds to an integer */
    const __m256 t = _mm256_fnmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic);
    const __m256 n = _mm256_sub_ps(t, magic);
    __m256 q = _mm256_fmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    q = _mm256_fmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), q);
    __m256 y = _mm256_fmadd_ps(_mm256_set1_ps(-8.2903151531e-3f), q, _mm256_set1_ps(4.1897932501e-2f));
    y = _mm256_fmadd_ps(y, q, _mm256_set1_ps(-1.6667636210e-1f));
    y = _mm256_fmadd_ps(y, q, _mm256_set1_ps(4.9999149507e-1f));
    y = _mm256_fmadd_ps(y, q, _mm256_set1_ps(-9.9999970718e-1f));
    y = _mm256_fmadd_ps(y, q, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(t), 23); /* n << 23 */
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), e));
}

/* e^(-x) for float32 lanes with two fewer operations on the FMA ports than m2v_exp_neg (the
 * bound of the SiLU backward) and a shorter dependency chain, at about the same accuracy
 * (measured: <= 4.2 ulp for |x| <= 5, 4.8 ulp for |x| <= 20, 8 ulp near the clamp):
 * -x = (k/8) ln2 + r with k = round(-8 x log2e) read off a magic-number sum, |r| <= ln2/16,
 * so a degree-3 polynomial suffices (relative error 1.5e-7); 2^(k/8) = 2^(k>>3) 2^((k&7)/8),
 * the second factor from an 8-entry table (one lane permute: the permute reads the low three
 * bits of the magic sum, k & 7) and the first added to the exponent field ((k>>3) << 23 is
 * (sum << 20) with the low 23 bits cleared). ln2/8 as one float constant: its rounding error
 * times |k| <= 1016 stays below 2.5e-7 relative, far less where the results matter. The
 * clamp keeps k>>3 in [-125, 126]: results stay normal, as in m2v_exp_neg. A NaN x gives NaN. */
M2_INLINE m2v m2v_exp_neg_tab(m2v x) {
    x = _mm256_min_ps(_mm256_set1_ps(86.5f), _mm256_max_ps(_mm256_set1_ps(-88.0f), x));
    const __m256 magic = _mm256_set1_ps(12582912.0f); /* 1.5 * 2^23: rounds to an integer */
    const __m256 t = _mm256_fnmadd_ps(x, _mm256_set1_ps(11.5415603271117f), magic); /* 8 log2e */
    const __m256 k = _mm256_sub_ps(t, magic);
    const __m256 q = _mm256_fmadd_ps(k, _mm256_set1_ps(0.0866433975699932f), x); /* -r */
    /* e^-q - 1 = q^2 (1/2 - q/6) - q: two levels, not three (the chain is the bound) */
    const __m256 b = _mm256_fmadd_ps(q, _mm256_set1_ps(-1.6666666666667e-1f), _mm256_set1_ps(0.5f));
    const __m256 p = _mm256_fmsub_ps(_mm256_mul_ps(q, q), b, q);
    const __m256 tab = _mm256_setr_ps(1.0f, 1.0905077326652577f, 1.1892071150027210f,
                                      1.2968395546510096f, 1.4142135623730951f,
                                      1.5422108254079407f, 1.6817928305074290f,
                                      1.8340080864093424f); /* 2^(j/8) */
    const __m256 f = _mm256_permutevar8x32_ps(tab, _mm256_castps_si256(t));
    const __m256 y = _mm256_fmadd_ps(f, p, f);
    const __m256i e = _mm256_and_si256(_mm256_slli_epi32(_mm256_castps_si256(t), 20),
                                       _mm256_set1_epi32((int)0xff800000u));
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), e));
}

/* r, or s in the lanes where x < lim (a NaN x keeps r): see "Saturation" at the end. */
M2_INLINE m2v m2v_exp_sat(m2v x, float lim, m2v s, m2v r) {
    return _mm256_blendv_ps(r, s, _mm256_cmp_ps(x, _mm256_set1_ps(lim), _CMP_LT_OQ));
}

/* Non-temporal store of a vector to a 32-byte aligned p: the line goes to memory without
 * first being read (no read-for-ownership) and without displacing cached data. For outputs
 * written once and not read again soon; a kernel writes whole 64-byte lines with back-to-back
 * streams (a partly written line is flushed in pieces). m2_stream_fence() orders a thread's
 * streamed stores before its later stores (call it before another thread may read them). */
#define m2v_stream(p, v) _mm256_stream_ps((p), (v))
#define m2_stream_fence() _mm_sfence()

/* Interleaved <-> planar for small fixed strides (channel-major conv states [C,3] and
 * weights [C,4] of a width-4 conv, read and written a vector of channels at a time):
 *   m2v_load_deint3(p, a, b, c):    a[i] = p[3i], b[i] = p[3i+1], c[i] = p[3i+2]
 *   m2v_store_int3(p, a, b, c):     the inverse (writes p[0 .. 3*M2V_LEN))
 *   m2v_load_deint4(p, a, b, c, d): a[i] = p[4i], ..., d[i] = p[4i+3]
 * AVX2: stride 3 as two blends and one lane-crossing permute per vector (the three loads hold
 * each output's elements at disjoint positions); stride 4 as a 4x4 in-lane transpose
 * (unpacks) and one permute per vector. */
M2_INLINE void m2v_load_deint3(const float *p, m2v *a, m2v *b, m2v *c) {
    const __m256 A = _mm256_loadu_ps(p), B = _mm256_loadu_ps(p + 8), C = _mm256_loadu_ps(p + 16);
    /* t0 = [A0 B1 C2 A3 B4 C5 A6 B7] = channels 0 3 6 1 4 7 2 5 of a; t1, t2 likewise */
    const __m256 t0 = _mm256_blend_ps(_mm256_blend_ps(A, B, 0x92), C, 0x24);
    const __m256 t1 = _mm256_blend_ps(_mm256_blend_ps(A, B, 0x24), C, 0x49);
    const __m256 t2 = _mm256_blend_ps(_mm256_blend_ps(A, B, 0x49), C, 0x92);
    *a = _mm256_permutevar8x32_ps(t0, _mm256_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5));
    *b = _mm256_permutevar8x32_ps(t1, _mm256_setr_epi32(1, 4, 7, 2, 5, 0, 3, 6));
    *c = _mm256_permutevar8x32_ps(t2, _mm256_setr_epi32(2, 5, 0, 3, 6, 1, 4, 7));
}
M2_INLINE void m2v_store_int3(float *p, m2v a, m2v b, m2v c) {
    const __m256 t0 = _mm256_permutevar8x32_ps(a, _mm256_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5));
    const __m256 t1 = _mm256_permutevar8x32_ps(b, _mm256_setr_epi32(5, 0, 3, 6, 1, 4, 7, 2));
    const __m256 t2 = _mm256_permutevar8x32_ps(c, _mm256_setr_epi32(2, 5, 0, 3, 6, 1, 4, 7));
    _mm256_storeu_ps(p, _mm256_blend_ps(_mm256_blend_ps(t0, t1, 0x92), t2, 0x24));
    _mm256_storeu_ps(p + 8, _mm256_blend_ps(_mm256_blend_ps(t0, t1, 0x24), t2, 0x49));
    _mm256_storeu_ps(p + 16, _mm256_blend_ps(_mm256_blend_ps(t0, t1, 0x49), t2, 0x92));
}
M2_INLINE void m2v_load_deint4(const float *p, m2v *a, m2v *b, m2v *c, m2v *d) {
    const __m256 P0 = _mm256_loadu_ps(p), P1 = _mm256_loadu_ps(p + 8);
    const __m256 P2 = _mm256_loadu_ps(p + 16), P3 = _mm256_loadu_ps(p + 24);
    const __m256 U0 = _mm256_unpacklo_ps(P0, P1), U1 = _mm256_unpackhi_ps(P0, P1);
    const __m256 U2 = _mm256_unpacklo_ps(P2, P3), U3 = _mm256_unpackhi_ps(P2, P3);
    /* the unpacks leave the channels in the order 0 2 4 6 1 3 5 7 */
    const __m256i ord = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
#define M2V_LO_(x, y) _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(x), _mm256_castps_pd(y)))
#define M2V_HI_(x, y) _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(x), _mm256_castps_pd(y)))
    *a = _mm256_permutevar8x32_ps(M2V_LO_(U0, U2), ord);
    *b = _mm256_permutevar8x32_ps(M2V_HI_(U0, U2), ord);
    *c = _mm256_permutevar8x32_ps(M2V_LO_(U1, U3), ord);
    *d = _mm256_permutevar8x32_ps(M2V_HI_(U1, U3), ord);
#undef M2V_LO_
#undef M2V_HI_
}

#elif defined(M2_SIMD_AVX512)

/* AVX-512 (F, VL, BW, DQ; with AVX2, FMA): 16 floats per vector, one 64-byte line. Only the
 * operations the conv1d and SSD kernels use are mapped (the other ops keep their AVX2 kernels
 * at this level). Each lane computes the float operations of the AVX2 mapping, constant for constant,
 * so a channel's result differs from its AVX2 one only where the kernel text itself groups
 * work by vector (none of conv1d's sums do; see conv1d_kernels_impl.h). */
#include <immintrin.h>

#define M2V_LEN 16
typedef __m512 m2v;

#define m2v_load(p) _mm512_loadu_ps(p)
#define m2v_store(p, v) _mm512_storeu_ps((p), (v))
#define m2v_set1(x) _mm512_set1_ps(x)
#define m2v_zero() _mm512_setzero_ps()
#define m2v_add(a, b) _mm512_add_ps((a), (b))
#define m2v_sub(a, b) _mm512_sub_ps((a), (b))
#define m2v_mul(a, b) _mm512_mul_ps((a), (b))
#define m2v_div(a, b) _mm512_div_ps((a), (b))
#define m2v_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c)) /* a*b + c, one rounding */
#define m2v_fnma(a, b, c) _mm512_fnmadd_ps((a), (b), (c)) /* c - a*b, one rounding */

/* Sum of the 16 lanes, in a fixed order: the two 256-bit halves added, then as the AVX2
 * m2v_reduce. (Added for the SSD kernels.) */
M2_INLINE float m2v_reduce(m2v v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
}

/* out[i] = sum of the lanes of v_i, four vectors at once, 13 operations (8 shuffles): per
 * 128-bit block, unpack + add pair the lanes of (a, b) and of (c, d), a shuffle + add makes
 * each block [a b c d] partial sums, then the four blocks are added (2 + 1 + 1). One fixed
 * order per lane position. */
M2_INLINE void m2v_reduce4(m2v a, m2v b, m2v c, m2v d, float *out) {
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                      _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 h = _mm512_add_ps(abcd, _mm512_shuffle_f32x4(abcd, abcd, _MM_SHUFFLE(1, 0, 3, 2)));
    _mm_storeu_ps(out, _mm_add_ps(_mm512_castps512_ps128(h), _mm512_extractf32x4_ps(h, 1)));
}

/* e^(-x): the AVX2 m2v_exp_neg, lane for lane (see there). */
M2_INLINE m2v m2v_exp_neg(m2v x) {
    x = _mm512_min_ps(_mm512_set1_ps(86.5f), _mm512_max_ps(_mm512_set1_ps(-88.0f), x));
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512 t = _mm512_fnmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic);
    const __m512 n = _mm512_sub_ps(t, magic);
    __m512 q = _mm512_fmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    q = _mm512_fmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), q);
    __m512 y = _mm512_fmadd_ps(_mm512_set1_ps(-8.2903151531e-3f), q, _mm512_set1_ps(4.1897932501e-2f));
    y = _mm512_fmadd_ps(y, q, _mm512_set1_ps(-1.6667636210e-1f));
    y = _mm512_fmadd_ps(y, q, _mm512_set1_ps(4.9999149507e-1f));
    y = _mm512_fmadd_ps(y, q, _mm512_set1_ps(-9.9999970718e-1f));
    y = _mm512_fmadd_ps(y, q, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_castps_si512(t), 23); /* n << 23 */
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(y), e));
}

/* e^(-x) with the 2^(j/8) table: the AVX2 m2v_exp_neg_tab, lane for lane (see there). The
 * table is 16 entries, the 8 values twice: the permute reads the low four bits of the magic
 * sum, and entry k & 15 holds 2^((k & 7)/8). */
M2_INLINE m2v m2v_exp_neg_tab(m2v x) {
    x = _mm512_min_ps(_mm512_set1_ps(86.5f), _mm512_max_ps(_mm512_set1_ps(-88.0f), x));
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512 t = _mm512_fnmadd_ps(x, _mm512_set1_ps(11.5415603271117f), magic); /* 8 log2e */
    const __m512 k = _mm512_sub_ps(t, magic);
    const __m512 q = _mm512_fmadd_ps(k, _mm512_set1_ps(0.0866433975699932f), x); /* -r */
    const __m512 b = _mm512_fmadd_ps(q, _mm512_set1_ps(-1.6666666666667e-1f), _mm512_set1_ps(0.5f));
    const __m512 p = _mm512_fmsub_ps(_mm512_mul_ps(q, q), b, q);
    const __m512 tab = _mm512_setr_ps(1.0f, 1.0905077326652577f, 1.1892071150027210f,
                                      1.2968395546510096f, 1.4142135623730951f,
                                      1.5422108254079407f, 1.6817928305074290f,
                                      1.8340080864093424f, 1.0f, 1.0905077326652577f,
                                      1.1892071150027210f, 1.2968395546510096f,
                                      1.4142135623730951f, 1.5422108254079407f,
                                      1.6817928305074290f, 1.8340080864093424f); /* 2^(j/8) */
    const __m512 f = _mm512_permutexvar_ps(_mm512_castps_si512(t), tab);
    const __m512 y = _mm512_fmadd_ps(f, p, f);
    const __m512i e = _mm512_and_si512(_mm512_slli_epi32(_mm512_castps_si512(t), 20),
                                       _mm512_set1_epi32((int)0xff800000u));
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(y), e));
}

/* r, or s in the lanes where x < lim (a NaN x keeps r): see "Saturation" at the end. */
M2_INLINE m2v m2v_exp_sat(m2v x, float lim, m2v s, m2v r) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(lim), _CMP_LT_OQ), r, s);
}

/* Non-temporal store of a vector (one whole 64-byte line) to a 64-byte aligned p; as AVX2. */
#define m2v_stream(p, v) _mm512_stream_ps((p), (v))
#define m2_stream_fence() _mm_sfence()

/* Interleaved <-> planar, as the AVX2 versions (same definitions, 16 lanes). Stride 3: each
 * output takes its first 10 or 11 elements from the first two loads with one two-source
 * permute and the rest from the third with one masked permute (the store: the inverse).
 * Stride 4: two-source permutes, pairs of outputs at a time, then halves joined. */
M2_INLINE void m2v_load_deint3(const float *p, m2v *a, m2v *b, m2v *c) {
    const __m512 A = _mm512_loadu_ps(p), B = _mm512_loadu_ps(p + 16), C = _mm512_loadu_ps(p + 32);
    *a = _mm512_mask_permutexvar_ps(
        _mm512_permutex2var_ps(A, _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 0, 0, 0, 0, 0), B),
        0xf800, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 4, 7, 10, 13), C);
    *b = _mm512_mask_permutexvar_ps(
        _mm512_permutex2var_ps(A, _mm512_setr_epi32(1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 0, 0, 0, 0, 0), B),
        0xf800, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 5, 8, 11, 14), C);
    *c = _mm512_mask_permutexvar_ps(
        _mm512_permutex2var_ps(A, _mm512_setr_epi32(2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 0, 0, 0, 0, 0, 0), B),
        0xfc00, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 6, 9, 12, 15), C);
}
M2_INLINE void m2v_store_int3(float *p, m2v a, m2v b, m2v c) {
    _mm512_storeu_ps(p, _mm512_mask_permutexvar_ps(
        _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 16, 0, 1, 17, 0, 2, 18, 0, 3, 19, 0, 4, 20, 0, 5), b),
        0x4924, _mm512_setr_epi32(0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0), c));
    _mm512_storeu_ps(p + 16, _mm512_mask_permutexvar_ps(
        _mm512_permutex2var_ps(a, _mm512_setr_epi32(21, 0, 6, 22, 0, 7, 23, 0, 8, 24, 0, 9, 25, 0, 10, 26), b),
        0x2492, _mm512_setr_epi32(0, 5, 0, 0, 6, 0, 0, 7, 0, 0, 8, 0, 0, 9, 0, 0), c));
    _mm512_storeu_ps(p + 32, _mm512_mask_permutexvar_ps(
        _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 11, 27, 0, 12, 28, 0, 13, 29, 0, 14, 30, 0, 15, 31, 0), b),
        0x9249, _mm512_setr_epi32(10, 0, 0, 11, 0, 0, 12, 0, 0, 13, 0, 0, 14, 0, 0, 15), c));
}
M2_INLINE void m2v_load_deint4(const float *p, m2v *a, m2v *b, m2v *c, m2v *d) {
    const __m512 P0 = _mm512_loadu_ps(p), P1 = _mm512_loadu_ps(p + 16);
    const __m512 P2 = _mm512_loadu_ps(p + 32), P3 = _mm512_loadu_ps(p + 48);
    /* [x0..x7 | y0..y7] of 8 channels for (x, y) = (a, b) and (c, d) */
    const __m512i ab = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i cd = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    const __m512 ab0 = _mm512_permutex2var_ps(P0, ab, P1), ab1 = _mm512_permutex2var_ps(P2, ab, P3);
    const __m512 cd0 = _mm512_permutex2var_ps(P0, cd, P1), cd1 = _mm512_permutex2var_ps(P2, cd, P3);
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i hi = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    *a = _mm512_permutex2var_ps(ab0, lo, ab1);
    *b = _mm512_permutex2var_ps(ab0, hi, ab1);
    *c = _mm512_permutex2var_ps(cd0, lo, cd1);
    *d = _mm512_permutex2var_ps(cd0, hi, cd1);
}

#elif defined(M2_SIMD_NEON)

/* AArch64 Advanced SIMD (NEON): 4 floats per vector. Every operation the AVX2 mapping has,
 * lane for lane and constant for constant, with these differences: min/max are NEON's
 * (a NaN operand gives NaN, where x86 returns the second operand: m2v_exp of a NaN is NaN
 * here, e^-87.3 there; the clamps of m2v_exp_neg / _tab and of the sigmoid pass a NaN in both),
 * the lane sums pair neighbouring lanes ((a0 + a1) + (a2 + a3)), and there are no
 * non-temporal stores (m2v_stream is a plain store). The kernel texts need nothing of the
 * vector width but M2V_LEN (scalar: 1, AVX-512: 16), so 4 native lanes it is (docs/
 * architecture.md, "NEON"). ASIMD is part of the AArch64 base ISA: no compiler flags. */
#include <arm_neon.h>

#define M2V_LEN 4
typedef float32x4_t m2v;

#define m2v_load(p) vld1q_f32(p)
#define m2v_store(p, v) vst1q_f32((p), (v))
#define m2v_set1(x) vdupq_n_f32(x)
#define m2v_zero() vdupq_n_f32(0.0f)
#define m2v_add(a, b) vaddq_f32((a), (b))
#define m2v_sub(a, b) vsubq_f32((a), (b))
#define m2v_mul(a, b) vmulq_f32((a), (b))
#define m2v_div(a, b) vdivq_f32((a), (b))
#define m2v_fma(a, b, c) vfmaq_f32((c), (a), (b)) /* a*b + c, one rounding */
#define m2v_fnma(a, b, c) vfmsq_f32((c), (a), (b)) /* c - a*b, one rounding */

/* Sum of the 4 lanes: (v0 + v1) + (v2 + v3). */
M2_INLINE float m2v_reduce(m2v v) {
    const float32x4_t p = vpaddq_f32(v, v);
    return vpadds_f32(vget_low_f32(p));
}

/* out[i] = sum of the lanes of v_i, four vectors at once (three pairwise adds), each in the
 * order of m2v_reduce. */
M2_INLINE void m2v_reduce4(m2v a, m2v b, m2v c, m2v d, float *out) {
    vst1q_f32(out, vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d)));
}

/* exp(x): the AVX2 m2v_exp (Cephes' scheme, see there), lane for lane. */
M2_INLINE m2v m2v_exp(m2v x) {
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.3f)), vdupq_n_f32(88.0f));
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t y = vdupq_n_f32(1.9875691500e-4f);
    y = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), y, r);
    y = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), y, r);
    y = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), y, r);
    y = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), y, r);
    y = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), y, r);
    y = vfmaq_f32(r, y, vmulq_f32(r, r));
    y = vaddq_f32(y, vdupq_n_f32(1.0f));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(y, vreinterpretq_f32_s32(e));
}

/* e^(-x): the AVX2 m2v_exp_neg (see there), lane for lane. */
M2_INLINE m2v m2v_exp_neg(m2v x) {
    x = vminq_f32(vdupq_n_f32(86.5f), vmaxq_f32(vdupq_n_f32(-88.0f), x));
    const float32x4_t magic = vdupq_n_f32(12582912.0f); /* 1.5 * 2^23: rounds to an integer */
    const float32x4_t t = vfmsq_f32(magic, x, vdupq_n_f32(1.44269504088896341f));
    const float32x4_t n = vsubq_f32(t, magic);
    float32x4_t q = vfmaq_f32(x, n, vdupq_n_f32(0.693359375f));
    q = vfmaq_f32(q, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t y = vfmaq_f32(vdupq_n_f32(4.1897932501e-2f), vdupq_n_f32(-8.2903151531e-3f), q);
    y = vfmaq_f32(vdupq_n_f32(-1.6667636210e-1f), y, q);
    y = vfmaq_f32(vdupq_n_f32(4.9999149507e-1f), y, q);
    y = vfmaq_f32(vdupq_n_f32(-9.9999970718e-1f), y, q);
    y = vfmaq_f32(vdupq_n_f32(1.0f), y, q);
    const int32x4_t e = vshlq_n_s32(vreinterpretq_s32_f32(t), 23); /* n << 23 */
    return vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(y), e));
}

/* e^(-x) with the 2^(j/8) table: the AVX2 m2v_exp_neg_tab (see there), lane for lane. The
 * table lookup is one two-register byte shuffle (tbl), lane i's four byte indices formed
 * from k & 7 (the low three bits of the magic sum). */
M2_INLINE m2v m2v_exp_neg_tab(m2v x) {
    static const float tab8[8] = {1.0f, 1.0905077326652577f, 1.1892071150027210f,
                                  1.2968395546510096f, 1.4142135623730951f,
                                  1.5422108254079407f, 1.6817928305074290f,
                                  1.8340080864093424f}; /* 2^(j/8) */
    x = vminq_f32(vdupq_n_f32(86.5f), vmaxq_f32(vdupq_n_f32(-88.0f), x));
    const float32x4_t magic = vdupq_n_f32(12582912.0f);
    const float32x4_t t = vfmsq_f32(magic, x, vdupq_n_f32(11.5415603271117f)); /* 8 log2e */
    const float32x4_t k = vsubq_f32(t, magic);
    const float32x4_t q = vfmaq_f32(x, k, vdupq_n_f32(0.0866433975699932f)); /* -r */
    const float32x4_t b = vfmaq_f32(vdupq_n_f32(0.5f), q, vdupq_n_f32(-1.6666666666667e-1f));
    const float32x4_t p = vnegq_f32(vfmsq_f32(q, vmulq_f32(q, q), b)); /* q^2 b - q */
    const uint32x4_t j = vandq_u32(vreinterpretq_u32_f32(t), vdupq_n_u32(7));
    const uint8x16_t idx = vreinterpretq_u8_u32(
        vmlaq_u32(vdupq_n_u32(0x03020100u), j, vdupq_n_u32(0x04040404u)));
    const uint8x16x2_t tb = {{vreinterpretq_u8_f32(vld1q_f32(tab8)),
                              vreinterpretq_u8_f32(vld1q_f32(tab8 + 4))}};
    const float32x4_t f = vreinterpretq_f32_u8(vqtbl2q_u8(tb, idx));
    const float32x4_t y = vfmaq_f32(f, f, p);
    const uint32x4_t e = vandq_u32(vshlq_n_u32(vreinterpretq_u32_f32(t), 20),
                                   vdupq_n_u32(0xff800000u));
    return vreinterpretq_f32_u32(vaddq_u32(vreinterpretq_u32_f32(y), e));
}

/* r, or s in the lanes where x < lim (a NaN x keeps r): see "Saturation" at the end. */
M2_INLINE m2v m2v_exp_sat(m2v x, float lim, m2v s, m2v r) {
    return vbslq_f32(vcltq_f32(x, vdupq_n_f32(lim)), s, r);
}

/* No non-temporal stores in the NEON intrinsics: plain stores, no fence needed. */
#define m2v_stream(p, v) vst1q_f32((p), (v))
#define m2_stream_fence() ((void)0)

/* Interleaved <-> planar: NEON's structure loads and stores (ld3 / st3 / ld4). */
M2_INLINE void m2v_load_deint3(const float *p, m2v *a, m2v *b, m2v *c) {
    const float32x4x3_t v = vld3q_f32(p);
    *a = v.val[0];
    *b = v.val[1];
    *c = v.val[2];
}
M2_INLINE void m2v_store_int3(float *p, m2v a, m2v b, m2v c) {
    const float32x4x3_t v = {{a, b, c}};
    vst3q_f32(p, v);
}
M2_INLINE void m2v_load_deint4(const float *p, m2v *a, m2v *b, m2v *c, m2v *d) {
    const float32x4x4_t v = vld4q_f32(p);
    *a = v.val[0];
    *b = v.val[1];
    *c = v.val[2];
    *d = v.val[3];
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
#define m2v_fnma(a, b, c) ((c) - (a) * (b))

M2_INLINE float m2v_reduce(m2v v) { return v; }
M2_INLINE void m2v_reduce4(m2v a, m2v b, m2v c, m2v d, float *out) {
    out[0] = a;
    out[1] = b;
    out[2] = c;
    out[3] = d;
}
M2_INLINE m2v m2v_exp(m2v x) { return expf(x); }

M2_INLINE m2v m2v_exp_neg(m2v x) { return expf(-x); }
M2_INLINE m2v m2v_exp_neg_tab(m2v x) { return expf(-x); }
M2_INLINE m2v m2v_exp_sat(m2v x, float lim, m2v s, m2v r) { return x < lim ? s : r; }
#define m2v_stream(p, v) (*(p) = (v)) /* no streaming stores in portable C */
#define m2_stream_fence() ((void)0)
M2_INLINE void m2v_load_deint3(const float *p, m2v *a, m2v *b, m2v *c) {
    *a = p[0];
    *b = p[1];
    *c = p[2];
}
M2_INLINE void m2v_store_int3(float *p, m2v a, m2v b, m2v c) {
    p[0] = a;
    p[1] = b;
    p[2] = c;
}
M2_INLINE void m2v_load_deint4(const float *p, m2v *a, m2v *b, m2v *c, m2v *d) {
    *a = p[0];
    *b = p[1];
    *c = p[2];
    *d = p[3];
}

#else
#error "define M2_SIMD_AVX2, M2_SIMD_AVX512, M2_SIMD_NEON or M2_SIMD_SCALAR before including cpu/simd.h"
#endif

/*
 * Saturation. The vector exponentials clamp their argument to keep 2^n finite (m2v_exp:
 * e^x for x <= 88; m2v_exp_neg, m2v_exp_neg_tab: e^-x for x >= -88; the SSD gate's sigmoid:
 * z >= -87), so below the clamp 1 + e^-v stays near 1.7e38 where it should be +inf, and
 * v / (1 + e^-v) grows with |v| instead of being -0 (silu(-1e36) gave -0.0061, silu(-3e38)
 * -1.82). The activations therefore replace their result below the clamp by its limit with
 * m2v_exp_sat(v, lim, limit, result): σ(v) -> +0, silu(v) -> v * 0 (= -0, and NaN for v = -inf
 * as v / (1 + e^-v) is), the gate v silu(z) -> v (z * 0). Above the clamp nothing changes,
 * bit for bit. The scalar mapping (libm's expf, no clamp) gives these limits by itself below
 * expf's overflow; it takes the same select so that every set agrees on the whole range.
 */
#define M2_EXP_NEG_LIM (-88.0f) /* m2v_exp_neg(v), m2v_exp_neg_tab(v), m2v_exp(-v) clamp below it */

/*
 * Narrow weights (the decode linear layer, linear_kernels_impl.h): widen M2V_LEN stored
 * weights to one m2v, exactly.
 *   m2v_load_bf16(p)  p[0 .. M2V_LEN) bf16 (the top halves of float32s: a shift)
 *   m2v_load_i8(p)    p[0 .. M2V_LEN) int8, converted to float (exact)
 *   m2_load_f16(p)    one f16 at an unaligned address, to float (exact; NaN made quiet, as
 *                     m2_f16_to_f32 in core/half.h does)
 * The AVX2 and AVX-512 files using m2_load_f16 are compiled with -mf16c.
 */
#include <string.h>
#if defined(M2_SIMD_AVX2)
M2_INLINE m2v m2v_load_bf16(const uint16_t *p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
M2_INLINE m2v m2v_load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}
M2_INLINE float m2_load_f16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}
#elif defined(M2_SIMD_AVX512)
M2_INLINE m2v m2v_load_bf16(const uint16_t *p) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}
M2_INLINE m2v m2v_load_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
M2_INLINE float m2_load_f16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}
#elif defined(M2_SIMD_NEON)
M2_INLINE m2v m2v_load_bf16(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
M2_INLINE m2v m2v_load_i8(const int8_t *p) {
    int32_t t;
    memcpy(&t, p, sizeof t);
    const int8x8_t b = vreinterpret_s8_s32(vdup_n_s32(t));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(b))));
}
M2_INLINE float m2_load_f16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}
#else
#include "core/half.h"
M2_INLINE m2v m2v_load_bf16(const uint16_t *p) { return m2_bf16_to_f32(*p); }
M2_INLINE m2v m2v_load_i8(const int8_t *p) { return (float)*p; }
M2_INLINE float m2_load_f16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return m2_f16_to_f32(h);
}
#endif

#endif /* MAMBA2C_CPU_SIMD_H */
