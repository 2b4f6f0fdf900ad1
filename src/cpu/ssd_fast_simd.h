/*
 * ssd_fast_simd.h — vector helpers the SSD kernels need beyond cpu/simd.h: a double-precision
 * vector (m2vd, for the segment scales E_t = exp(c_t), which must be accurate to far better
 * than float), a lean sigmoid and a fast reciprocal (the silu gate), a lane select.
 *
 * Included by ssd_kernels_impl.h after cpu/simd.h, under the same M2_SIMD_<ISA> switch, so a
 * kernel body stays free of #ifdefs. As in simd.h, the scalar mapping is a vector of one lane
 * and uses libm; the kernel sets differ in the last bits, never between runs or threads.
 * Every lane is computed by the same operations whatever its position, so a head's results
 * do not depend on which lane (which head set, which thread) it lands in.
 */
#ifndef MAMBA2C_CPU_SSD_FAST_SIMD_H
#define MAMBA2C_CPU_SSD_FAST_SIMD_H

#include "core/half.h"
#include "cpu/simd.h"

/* the sigmoid's clamp: σ(z) is +0 below it (cpu/simd.h, "Saturation") */
#define M2_SIGMOID_LIM (-87.0f)

#if defined(M2_SIMD_AVX2)

#define M2VD_LEN 4
typedef __m256d m2vd;

#define m2vd_set1(x) _mm256_set1_pd(x)
#define m2vd_add(a, b) _mm256_add_pd((a), (b))
#define m2vd_sub(a, b) _mm256_sub_pd((a), (b))
#define m2vd_mul(a, b) _mm256_mul_pd((a), (b))
#define m2vd_div(a, b) _mm256_div_pd((a), (b))
#define m2vd_min(a, b) _mm256_min_pd((a), (b))
#define m2vd_max(a, b) _mm256_max_pd((a), (b))
#define m2vd_load(p) _mm256_loadu_pd(p)
/* a > b (a >= b) lane-wise as a mask; m2vd_select(mask, a, b) = mask ? a : b; m2vd_any: some
 * lane set */
typedef __m256d m2vd_mask;
#define m2vd_gt(a, b) _mm256_cmp_pd((a), (b), _CMP_GT_OQ)
#define m2vd_ge(a, b) _mm256_cmp_pd((a), (b), _CMP_GE_OQ)
#define m2vd_any(m) (_mm256_movemask_pd(m) != 0)
#define m2vd_select(m, a, b) _mm256_blendv_pd((b), (a), (m))
#define m2vd_store(p, v) _mm256_storeu_pd((p), (v))
/* 4 floats at p as doubles, and back (round to nearest) */
#define m2vd_load_ps(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define m2vd_store_ps(p, v) _mm_storeu_ps((p), _mm256_cvtpd_ps(v))

/* For m2vd_exp (after the sets): x clamped to [-708, 708] (e^-708 ~ 3e-308 stands in for
 * anything smaller, 0 once rounded to float; x second in max and min, whose NaN operand
 * rule then passes a NaN through, so exp(NaN) = NaN), and 2^n from the magic-number sum t (its low
 * mantissa bits hold the biased exponent of 2^n), as m2v_pow2_of_magic does in float */
#define m2vd_fma(a, b, c) _mm256_fmadd_pd((a), (b), (c))
#define m2vd_fnma(a, b, c) _mm256_fnmadd_pd((a), (b), (c))
#define m2vd_exp_clamp(x)                                                                      \
    _mm256_min_pd(_mm256_set1_pd(708.0), _mm256_max_pd(_mm256_set1_pd(-708.0), (x)))
#define m2vd_pow2_of_magic(t) _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(t), 52))

/* 1/x: the hardware estimate (12 bits) and one Newton step, r (2 - x r): about 2^-22
 * relative. Used for 1/(1 + e^-z) in the gate, where a division would cost more than the
 * rest of the element's work. */
M2_INLINE m2v m2v_rcp(m2v x) {
    const __m256 r = _mm256_rcp_ps(x);
    return _mm256_mul_ps(r, _mm256_fnmadd_ps(x, r, _mm256_set1_ps(2.0f)));
}

/* For m2v_sigmoid (after the sets): z clamped to [-87, 87] (the operand order passes a NaN
 * through), and 2^n from the magic-number sum t (its low mantissa bits hold the biased
 * exponent of 2^n) */
#define m2v_sigmoid_clamp(z)                                                                   \
    _mm256_max_ps(_mm256_set1_ps(-87.0f), _mm256_min_ps(_mm256_set1_ps(87.0f), (z)))
#define m2v_pow2_of_magic(t) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23))

/* a > b lane-wise as an all-ones mask; m2v_select(mask, a, b) = mask ? a : b */
#define m2v_gt(a, b) _mm256_cmp_ps((a), (b), _CMP_GT_OQ)
#define m2v_select(m, a, b) _mm256_blendv_ps((b), (a), (m))

/* 8 bfloat16 / float16 at p (uint16_t) as floats, and back, rounded to nearest even: the
 * same bits as the scalar converters of core/half.h (a NaN stays a quiet NaN). float16
 * through F16C (every AVX2 CPU has it; the avx2 kernel set is compiled with -mf16c and
 * chosen only where cpuid reports it). */
#define m2v_load_bf16(p)                                                                       \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
/* m2h: one vector's worth of 16-bit values (m2v_to_bf16 / m2v_to_f16); m2h_stream2 writes two
 * of them, 2 * M2V_LEN values, with one non-temporal store (p aligned to M2V_STREAM_ALIGN) */
typedef __m128i m2h;
#define m2h_stream2(p, a, b) _mm256_stream_si256((__m256i *)(p), _mm256_set_m128i((b), (a)))
M2_INLINE m2h m2v_to_bf16(m2v v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, q, nan);
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(r);
}
#define m2v_store_bf16(p, v) _mm_storeu_si128((__m128i *)(p), m2v_to_bf16(v))
#define m2v_to_f16(v) _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define m2v_load_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
/* m2v_stream (cpu/simd.h) needs p aligned to this many bytes */
#define M2V_STREAM_ALIGN 32
#define m2v_store_f16(p, v)                                                                    \
    _mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))

#elif defined(M2_SIMD_AVX512)

/* AVX-512 F/VL/BW/DQ (+F16C): the AVX2 helpers above, 8 doubles / 16 floats per vector,
 * constant for constant, except m2v_rcp: its estimate is AVX-512's 14-bit one (one Newton
 * step then gives about 2^-28 instead of 2^-22), so the gate differs from the AVX2 set's in
 * the last bits, as the sums grouped by vector length do anyway. */
#define M2VD_LEN 8
typedef __m512d m2vd;

#define m2vd_set1(x) _mm512_set1_pd(x)
#define m2vd_add(a, b) _mm512_add_pd((a), (b))
#define m2vd_sub(a, b) _mm512_sub_pd((a), (b))
#define m2vd_mul(a, b) _mm512_mul_pd((a), (b))
#define m2vd_div(a, b) _mm512_div_pd((a), (b))
#define m2vd_min(a, b) _mm512_min_pd((a), (b))
#define m2vd_max(a, b) _mm512_max_pd((a), (b))
#define m2vd_load(p) _mm512_loadu_pd(p)
typedef __mmask8 m2vd_mask;
#define m2vd_gt(a, b) _mm512_cmp_pd_mask((a), (b), _CMP_GT_OQ)
#define m2vd_ge(a, b) _mm512_cmp_pd_mask((a), (b), _CMP_GE_OQ)
#define m2vd_any(m) ((m) != 0)
#define m2vd_select(m, a, b) _mm512_mask_blend_pd((m), (b), (a))
#define m2vd_store(p, v) _mm512_storeu_pd((p), (v))
/* 8 floats at p as doubles, and back (round to nearest) */
#define m2vd_load_ps(p) _mm512_cvtps_pd(_mm256_loadu_ps(p))
#define m2vd_store_ps(p, v) _mm256_storeu_ps((p), _mm512_cvtpd_ps(v))

/* For m2vd_exp: as in the AVX2 set, 8 lanes */
#define m2vd_fma(a, b, c) _mm512_fmadd_pd((a), (b), (c))
#define m2vd_fnma(a, b, c) _mm512_fnmadd_pd((a), (b), (c))
#define m2vd_exp_clamp(x)                                                                      \
    _mm512_min_pd(_mm512_set1_pd(708.0), _mm512_max_pd(_mm512_set1_pd(-708.0), (x)))
#define m2vd_pow2_of_magic(t) _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_castpd_si512(t), 52))

/* 1/x: the 14-bit hardware estimate and one Newton step, r (2 - x r) */
M2_INLINE m2v m2v_rcp(m2v x) {
    const __m512 r = _mm512_rcp14_ps(x);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(x, r, _mm512_set1_ps(2.0f)));
}

/* For m2v_sigmoid: z clamped by one vrangeps (the smaller magnitude of z and 87 with z's
 * sign; a NaN stays a NaN), an operation less on the gate's chain than a min and a max;
 * 2^n as in the AVX2 set */
#define m2v_sigmoid_clamp(z) _mm512_range_ps((z), _mm512_set1_ps(87.0f), 0x02)
#define m2v_pow2_of_magic(t) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(t), 23))

/* a > b lane-wise as a lane mask; m2v_select(mask, a, b) = mask ? a : b */
#define m2v_gt(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_GT_OQ)
#define m2v_select(m, a, b) _mm512_mask_blend_ps((m), (b), (a))

/* 16 bfloat16 / float16 at p as floats, and back, rounded to nearest even: the bits of the
 * AVX2 versions and of core/half.h (a NaN stays a quiet NaN). float16 through the 512-bit
 * F16C forms (AVX-512 F); bfloat16 by word permutes (AVX-512 BW).
 * M2_BF16_ODD: the odd 16-bit words of a vector (index 2i+1 for result word i), the high
 * halves of its 32-bit lanes in lane order; for a pair of vectors (vpermt2w), those of the
 * first then the second. */
#define M2_BF16_ODD                                                                            \
    _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,  \
                     25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1)
/* word i of the 16 at p into the high half of lane i, the low half zero: one vpermw */
#define m2v_load_bf16(p)                                                                       \
    _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(                                        \
        0xAAAAAAAAu,                                                                           \
        _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0, 4, \
                         0, 3, 0, 2, 0, 1, 0, 0, 0),                                           \
        _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(p)))))
typedef __m256i m2h; /* see the AVX2 set */
#define m2h_stream2(p, a, b)                                                                   \
    _mm512_stream_si512((void *)(p), _mm512_inserti64x4(_mm512_castsi256_si512(a), (b), 1))
/* v rounded to bfloat16, in the high half of each lane (the low half is garbage): the bits of
 * the AVX2 m2v_to_bf16 — u + 0x7FFF + (bit 16 of u), a NaN as (u >> 16) | 0x40 — in five
 * operations, two of them on masks */
M2_INLINE __m512i m2v_bf16_hi(m2v v) {
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
    __m512i r = _mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF));
    r = _mm512_mask_add_epi32(r, odd, r, _mm512_set1_epi32(1));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
}
M2_INLINE m2h m2v_to_bf16(m2v v) {
    return _mm512_castsi512_si256(_mm512_permutexvar_epi16(M2_BF16_ODD, m2v_bf16_hi(v)));
}
/* 2 M2V_LEN values, a then b, as bfloat16 with one non-temporal store (p aligned to
 * M2V_STREAM_ALIGN): the high halves of both gathered by one vpermt2w */
#define m2v_stream_bf16x2(p, a, b)                                                             \
    _mm512_stream_si512((void *)(p),                                                           \
                        _mm512_permutex2var_epi16(m2v_bf16_hi(a), M2_BF16_ODD, m2v_bf16_hi(b)))
#define m2v_store_bf16(p, v) _mm256_storeu_si256((__m256i *)(p), m2v_to_bf16(v))
#define m2v_to_f16(v) _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define m2v_load_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
/* m2v_stream (cpu/simd.h) needs p aligned to this many bytes */
#define M2V_STREAM_ALIGN 64
#define m2v_store_f16(p, v)                                                                    \
    _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))

#elif defined(M2_SIMD_NEON)

/* AArch64 NEON: the AVX2 helpers above, 2 doubles / 4 floats per vector, constant for
 * constant, except: m2vd_min / m2vd_max are x86's (a > b ? a : b, by compare and select: a
 * NaN dt is clamped to the limit as on x86 and in the scalar set, where NEON's own min/max
 * would give NaN); m2v_rcp is NEON's 8-bit estimate with two Newton steps (vrecps: 2 - x r,
 * fused), about 2^-23; float16 through the base ISA's conversions (fcvtl / fcvtn, round to
 * nearest even, a NaN stays a quiet NaN), bfloat16 by integer shifts with round to nearest
 * even exactly as the AVX2 m2v_to_bf16. */
#define M2VD_LEN 2
typedef float64x2_t m2vd;

#define m2vd_set1(x) vdupq_n_f64(x)
#define m2vd_add(a, b) vaddq_f64((a), (b))
#define m2vd_sub(a, b) vsubq_f64((a), (b))
#define m2vd_mul(a, b) vmulq_f64((a), (b))
#define m2vd_div(a, b) vdivq_f64((a), (b))
M2_INLINE m2vd m2vd_min(m2vd a, m2vd b) { return vbslq_f64(vcltq_f64(a, b), a, b); }
M2_INLINE m2vd m2vd_max(m2vd a, m2vd b) { return vbslq_f64(vcgtq_f64(a, b), a, b); }
#define m2vd_load(p) vld1q_f64(p)
typedef uint64x2_t m2vd_mask;
#define m2vd_gt(a, b) vcgtq_f64((a), (b))
#define m2vd_ge(a, b) vcgeq_f64((a), (b))
#define m2vd_any(m) (vmaxvq_u32(vreinterpretq_u32_u64(m)) != 0)
#define m2vd_select(m, a, b) vbslq_f64((m), (a), (b))
#define m2vd_store(p, v) vst1q_f64((p), (v))
/* 2 floats at p as doubles, and back (round to nearest) */
#define m2vd_load_ps(p) vcvt_f64_f32(vld1_f32(p))
#define m2vd_store_ps(p, v) vst1_f32((p), vcvt_f32_f64(v))

#define m2vd_fma(a, b, c) vfmaq_f64((c), (a), (b))
#define m2vd_fnma(a, b, c) vfmsq_f64((c), (a), (b))
#define m2vd_exp_clamp(x) m2vd_min(m2vd_max((x), vdupq_n_f64(-708.0)), vdupq_n_f64(708.0))
#define m2vd_pow2_of_magic(t) vreinterpretq_f64_s64(vshlq_n_s64(vreinterpretq_s64_f64(t), 52))

/* 1/x: the 8-bit estimate and two Newton steps r (2 - x r) */
M2_INLINE m2v m2v_rcp(m2v x) {
    float32x4_t r = vrecpeq_f32(x);
    r = vmulq_f32(r, vrecpsq_f32(x, r));
    return vmulq_f32(r, vrecpsq_f32(x, r));
}

/* z clamped to [-87, 87] (a NaN stays NaN), 2^n from the magic-number sum as in AVX2 */
#define m2v_sigmoid_clamp(z) vmaxq_f32(vdupq_n_f32(-87.0f), vminq_f32(vdupq_n_f32(87.0f), (z)))
#define m2v_pow2_of_magic(t) vreinterpretq_f32_s32(vshlq_n_s32(vreinterpretq_s32_f32(t), 23))

#define m2v_gt(a, b) vcgtq_f32((a), (b))
#define m2v_select(m, a, b) vbslq_f32((m), (a), (b))

/* 4 bfloat16 / float16 at p (uint16_t) as floats, and back, rounded to nearest even: the
 * bits of core/half.h's converters */
#define m2v_load_bf16(p)                                                                       \
    vreinterpretq_f32_u32(vshlq_n_u32(vmovl_u16(vld1_u16((const uint16_t *)(p))), 16))
typedef uint16x4_t m2h;
#define m2h_stream2(p, a, b) vst1q_u16((uint16_t *)(p), vcombine_u16((a), (b)))
M2_INLINE m2h m2v_to_bf16(m2v v) {
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7FFF)), lsb), 16);
    const uint32x4_t a = vandq_u32(u, vdupq_n_u32(0x7FFFFFFF));
    const uint32x4_t nan = vcgtq_u32(a, vdupq_n_u32(0x7F800000));
    const uint32x4_t q = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40));
    r = vbslq_u32(nan, q, r);
    return vmovn_u32(r);
}
#define m2v_store_bf16(p, v) vst1_u16((uint16_t *)(p), m2v_to_bf16(v))
#define m2v_to_f16(v) vreinterpret_u16_f16(vcvt_f16_f32(v))
#define m2v_load_f16(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(p))))
#define M2V_STREAM_ALIGN 16
#define m2v_store_f16(p, v) vst1_u16((uint16_t *)(p), m2v_to_f16(v))

#elif defined(M2_SIMD_SCALAR)

#define M2VD_LEN 1
typedef double m2vd;

#define m2vd_set1(x) ((double)(x))
#define m2vd_add(a, b) ((a) + (b))
#define m2vd_sub(a, b) ((a) - (b))
#define m2vd_mul(a, b) ((a) * (b))
#define m2vd_div(a, b) ((a) / (b))
#define m2vd_min(a, b) ((a) < (b) ? (a) : (b))
#define m2vd_max(a, b) ((a) > (b) ? (a) : (b))
#define m2vd_load(p) (*(p))
typedef int m2vd_mask;
#define m2vd_gt(a, b) ((a) > (b))
#define m2vd_ge(a, b) ((a) >= (b))
#define m2vd_any(m) (m)
#define m2vd_select(m, a, b) ((m) ? (a) : (b))
#define m2vd_store(p, v) (*(p) = (v))
#define m2vd_load_ps(p) ((double)*(p))
#define m2vd_store_ps(p, v) (*(p) = (float)(v))
#define m2vd_fma(a, b, c) ((a) * (b) + (c))
M2_INLINE m2vd m2vd_exp(m2vd x) { return exp(x); }
M2_INLINE m2v m2v_rcp(m2v x) { return 1.0f / x; }
M2_INLINE m2v m2v_sigmoid(m2v z) { return m2v_exp_sat(z, M2_SIGMOID_LIM, 0.0f, 1.0f / (1.0f + expf(-z))); }
#define m2v_gt(a, b) ((a) > (b))
#define m2v_select(m, a, b) ((m) ? (a) : (b))
#define m2v_load_bf16(p) m2_bf16_to_f32(*(const uint16_t *)(p))
#define M2V_STREAM_ALIGN 4
#define m2v_store_bf16(p, v) (*(p) = m2_f32_to_bf16(v))
#define m2v_load_f16(p) m2_f16_to_f32(*(const uint16_t *)(p))
#define m2v_store_f16(p, v) (*(p) = m2_f32_to_f16(v))
typedef uint16_t m2h;
#define m2v_to_bf16(v) m2_f32_to_bf16(v)
#define m2v_to_f16(v) m2_f32_to_f16(v)
#define m2h_stream2(p, a, b) ((p)[0] = (a), (p)[1] = (b))

#else
#error "define M2_SIMD_AVX2, M2_SIMD_AVX512, M2_SIMD_NEON or M2_SIMD_SCALAR before including cpu/ssd_fast_simd.h"
#endif

/* exp(x) in double: x = n ln2 + r (ln2 in two parts, |r| <= ln2/2 up to a rounding), e^r
 * as its Taylor series to degree 11 (truncation < 1e-14 relative), evaluated in Estrin's
 * scheme (a chain of 5 dependent operations instead of Horner's 11: dt_block's chains of
 * consecutive tokens overlap), times 2^n. */
#if !defined(M2_SIMD_SCALAR) /* the scalar set's is libm's */
M2_INLINE m2vd m2vd_exp(m2vd x) {
    x = m2vd_exp_clamp(x);
    /* n = round(x log2e) off the sum t = x log2e + 1.5 * 2^52 + 1023 */
    const m2vd magic = m2vd_set1(6755399441055744.0 + 1023.0);
    const m2vd t = m2vd_fma(x, m2vd_set1(1.4426950408889634), magic);
    const m2vd n = m2vd_sub(t, magic);
    m2vd r = m2vd_fnma(n, m2vd_set1(6.93147180369123816490e-01), x);
    r = m2vd_fnma(n, m2vd_set1(1.90821492927058770002e-10), r);
    const m2vd r2 = m2vd_mul(r, r), r4 = m2vd_mul(r2, r2);
    /* pairs c_2k + c_2k+1 r, quads of them with r^2, then q0 + r^4 (q1 + r^4 q2) */
    const m2vd p0 = m2vd_fma(r, m2vd_set1(1.0), m2vd_set1(1.0));
    const m2vd p1 = m2vd_fma(r, m2vd_set1(1.0 / 6.0), m2vd_set1(0.5));
    const m2vd p2 = m2vd_fma(r, m2vd_set1(1.0 / 120.0), m2vd_set1(1.0 / 24.0));
    const m2vd p3 = m2vd_fma(r, m2vd_set1(1.0 / 5040.0), m2vd_set1(1.0 / 720.0));
    const m2vd p4 = m2vd_fma(r, m2vd_set1(1.0 / 362880.0), m2vd_set1(1.0 / 40320.0));
    const m2vd p5 = m2vd_fma(r, m2vd_set1(1.0 / 39916800.0), m2vd_set1(1.0 / 3628800.0));
    const m2vd q0 = m2vd_fma(p1, r2, p0), q1 = m2vd_fma(p3, r2, p2), q2 = m2vd_fma(p5, r2, p4);
    const m2vd y = m2vd_fma(m2vd_fma(q2, r4, q1), r4, q0);
    return m2vd_mul(y, m2vd_pow2_of_magic(t));
}
#endif

/* σ(z) = 1/(1 + e^-z), lean: the silu gate costs more than the rest of the forward's
 * per-element work (all of it on the two FMA ports). e^x for x = -z clamped to [-87, 87]:
 * n = round(x log2e) read off a magic-number sum whose low mantissa bits also hold the
 * biased exponent of 2^n (no round or convert instruction), r = x - n ln2 (ln2 in two
 * parts), e^r = 1 + r q(r) with q of degree 4 fitted for relative error (1.7e-7 evaluated in
 * float on |r| <= ln2/2), 1 + e^x as one FMA with 2^n (one rounding fewer, and one operation
 * less on the chain), then the reciprocal estimate and one Newton step (2^-22). At the
 * clamp, σ ~ 1.6e-38 stands in for smaller values. Each set's clamp (m2v_sigmoid_clamp)
 * passes a NaN z through. */
#if !defined(M2_SIMD_SCALAR) /* the scalar set has its own, from libm's expf */
M2_INLINE m2v m2v_sigmoid(m2v z) {
    /* x = -z is folded in: z is clamped, and s = -r (each step below is the plain one
     * negated, exactly: round to nearest is symmetric), one operation less on the chain */
    const m2v zc = m2v_sigmoid_clamp(z);
    const m2v magic = m2v_set1(12582912.0f + 127.0f); /* 1.5 * 2^23 + bias */
    const m2v t = m2v_fnma(zc, m2v_set1(1.44269504088896341f), magic);
    const m2v n = m2v_sub(t, magic);
    m2v s = m2v_fma(n, m2v_set1(0.693359375f), zc);
    s = m2v_fma(n, m2v_set1(-2.12194440e-4f), s);
    m2v q = m2v_set1(8.3178728819e-03f);
    q = m2v_fnma(q, s, m2v_set1(4.1897952557e-02f));
    q = m2v_fnma(q, s, m2v_set1(1.6667181253e-01f));
    q = m2v_fnma(q, s, m2v_set1(4.9999150634e-01f));
    q = m2v_fnma(q, s, m2v_set1(9.9999988079e-01f));
    q = m2v_fnma(q, s, m2v_set1(1.0f));
    /* below the clamp σ -> +0, not σ(-87) ~ 1.6e-38 (cpu/simd.h, "Saturation") */
    return m2v_exp_sat(z, M2_SIGMOID_LIM, m2v_zero(),
                       m2v_rcp(m2v_fma(q, m2v_pow2_of_magic(t), m2v_set1(1.0f))));
}
#endif

/* 2 M2V_LEN values as bfloat16 with one non-temporal store: the AVX-512 set has its own */
#ifndef m2v_stream_bf16x2
#define m2v_stream_bf16x2(p, a, b) m2h_stream2((p), m2v_to_bf16(a), m2v_to_bf16(b))
#endif

/* softplus(r) = log(1 + e^r) and its derivative σ(r), in double, for every set (the scalar
 * one too: its m2vd_exp is libm's). With e = e^-|r| in (0, 1]: softplus = max(r, 0) +
 * log1p(e), and log1p(e) = 2 atanh(s) with s = e / (2 + e) in (0, 1/3], whose odd series
 * 2 s Σ s^2k / (2k + 1) is cut after 12 terms (s^24 / 25 < 2e-13 relative: the float the
 * caller rounds it to is the correctly rounded one unless within 2e-13 of a tie), evaluated in
 * Estrin's scheme; σ = (r > 0 ? 1 : e) / (1 + e). Both quotients from one division:
 * 1 / ((1 + e)(2 + e)). Above 20 the caller takes softplus = r, σ = 1 (as SPEC §1 and the
 * reference do). */
M2_INLINE m2vd m2vd_softplus(m2vd r, m2vd *sig) {
    const m2vd zero = m2vd_set1(0.0), one = m2vd_set1(1.0);
    const m2vd a = m2vd_max(r, m2vd_sub(zero, r));
    const m2vd e = m2vd_exp(m2vd_sub(zero, a));
    const m2vd e1 = m2vd_add(one, e), e2 = m2vd_add(m2vd_set1(2.0), e);
    const m2vd inv = m2vd_div(one, m2vd_mul(e1, e2));
    const m2vd s = m2vd_mul(m2vd_mul(e, e1), inv);
    const m2vd x = m2vd_mul(s, s), x2 = m2vd_mul(x, x), x4 = m2vd_mul(x2, x2);
    const m2vd x8 = m2vd_mul(x4, x4);
#define M2_SP_PAIR(k) m2vd_fma(x, m2vd_set1(1.0 / (4 * (k) + 3)), m2vd_set1(1.0 / (4 * (k) + 1)))
    const m2vd q0 = m2vd_fma(M2_SP_PAIR(1), x2, M2_SP_PAIR(0));
    const m2vd q1 = m2vd_fma(M2_SP_PAIR(3), x2, M2_SP_PAIR(2));
    const m2vd q2 = m2vd_fma(M2_SP_PAIR(5), x2, M2_SP_PAIR(4));
#undef M2_SP_PAIR
    const m2vd q = m2vd_fma(q2, x8, m2vd_fma(q1, x4, q0));
    const m2vd l1p = m2vd_mul(m2vd_add(s, s), q);
    *sig = m2vd_mul(m2vd_select(m2vd_gt(r, zero), one, e), m2vd_mul(e2, inv));
    return m2vd_add(m2vd_max(r, zero), l1p);
}

#endif /* MAMBA2C_CPU_SSD_FAST_SIMD_H */
