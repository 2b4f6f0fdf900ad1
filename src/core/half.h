/*
 * half.h — bfloat16 and IEEE binary16 (float16) storage conversions, portable C11.
 *
 * The library stores activations in bf16/f16 but computes in float32 (CPU) or float64
 * (reference), so every backend needs the same exact widenings and correctly rounded
 * narrowings. They are written with integer bit manipulation only (no F16C/AVX512-BF16, no
 * compiler _Float16), so this header compiles with any flags and gives the same bits on
 * every machine; an ISA-specific kernel may use hardware conversions where they provably
 * agree (round to nearest even, same NaN/inf handling).
 *
 *   m2_bf16_to_f32  exact (bf16 is the top half of a float32; NaN payloads kept as is)
 *   m2_f32_to_bf16  round to nearest even; ±inf stays inf, values above the largest bf16
 *                   round to inf by the same rule; NaN stays NaN and is made quiet
 *   m2_f16_to_f32   exact, subnormals included; inf -> inf; NaN -> quiet NaN (payload kept)
 *   m2_f32_to_f16   round to nearest even, to subnormals too; |v| >= 65520 (half-way past
 *                   65504, the largest f16) -> ±inf; NaN -> quiet NaN
 *   m2_row_to_f32 / m2_row_from_f32: n contiguous elements of an F32, BF16 or F16 array.
 *
 * Type punning goes through memcpy (strict-aliasing safe; compilers turn it into a move).
 */
#ifndef MAMBA2C_HALF_H
#define MAMBA2C_HALF_H

#include <stdint.h>
#include <string.h>

#include "mamba2c.h"

static inline uint32_t m2_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float m2_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- bfloat16: sign, 8 exponent bits, 7 mantissa bits (the top 16 bits of a float32) ---- */

static inline float m2_bf16_to_f32(uint16_t h) { return m2_f32_from_bits((uint32_t)h << 16); }

static inline uint16_t m2_f32_to_bf16(float f) {
    uint32_t u = m2_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)              /* NaN: keep sign and top payload bits, */
        return (uint16_t)((u >> 16) | 0x0040u);       /* set the quiet bit (never becomes inf) */
    /* Round to nearest even on the 16 dropped bits: add 0x7FFF plus the kept lsb. A carry
     * into the exponent is the correct rounding up; the largest finite values round to inf
     * (0x7F7F8000 and above), and inf + 0x7FFF does not carry out of the dropped bits. */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- float16: sign, 5 exponent bits (bias 15), 10 mantissa bits ----------------------- */

static inline float m2_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) /* inf (m == 0) or NaN: quiet it, keep the payload */
        return m2_f32_from_bits(sign | 0x7F800000u | (m << 13) | (m ? 0x00400000u : 0u));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float32 */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return m2_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13)); /* rebias 15 -> 127 */
}

static inline uint16_t m2_f32_to_f16(float f) {
    const uint32_t u = m2_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) /* NaN: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) /* >= 65520 (inf included): rounds past 65504 -> inf */
        return (uint16_t)(sign | 0x7C00u);
    if (a >= 0x38800000u) { /* >= 2^-14: a normal f16. Round the 13 dropped bits to nearest */
        uint32_t r = a + 0x0FFFu + ((a >> 13) & 1u); /* even; a carry bumps the exponent */
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13)); /* rebias 127 -> 15 */
    }
    if (a <= 0x33000000u) /* <= 2^-25: half the smallest subnormal or less -> 0 (ties even) */
        return sign;
    /* subnormal result: value = m * 2^(e-150) = (m >> s) units of 2^-24 with s = 126 - e,
     * s in [14, 24]; rounding up from 0x3FF gives 0x400, the smallest normal, as it should */
    const uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u, s = 126u - e;
    uint32_t q = m >> s;
    const uint32_t rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

/* ---- rows ------------------------------------------------------------------------------ */

/* dst[i] = element i of src (dtype F32, BF16 or F16), i < n. Other dtypes: nothing. */
static inline void m2_row_to_f32(const void *src, mamba2_dtype_t dt, int64_t n, float *dst) {
    if (dt == MAMBA2_DTYPE_F32) {
        if (n > 0) memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dt == MAMBA2_DTYPE_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = m2_bf16_to_f32(s[i]);
    } else if (dt == MAMBA2_DTYPE_F16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = m2_f16_to_f32(s[i]);
    }
}

/* Element i of dst (dtype F32, BF16 or F16) = src[i] (rounded to nearest even), i < n. */
static inline void m2_row_from_f32(void *dst, mamba2_dtype_t dt, int64_t n, const float *src) {
    if (dt == MAMBA2_DTYPE_F32) {
        if (n > 0) memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dt == MAMBA2_DTYPE_BF16) {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = m2_f32_to_bf16(src[i]);
    } else if (dt == MAMBA2_DTYPE_F16) {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = m2_f32_to_f16(src[i]);
    }
}

#endif /* MAMBA2C_HALF_H */
