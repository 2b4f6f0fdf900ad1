/*
 * ref_common.h — helpers shared by the float64 reference kernels (src/ref/).
 *
 * The reference computes everything in double whatever the storage type: loads widen an
 * F32, F64, BF16 or F16 element to double (exactly), stores round once (to nearest even;
 * for BF16/F16 directly from the double, never through a rounded float32). Scratch arrays are doubles allocated
 * with an overflow-checked size, so an absurd shape fails as "out of memory" instead of
 * wrapping around to a short buffer.
 */
#ifndef MAMBA2C_REF_COMMON_H
#define MAMBA2C_REF_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/half.h"
#include "mamba2c.h"

/* Element i of an F32, F64, BF16 or F16 array, as double (exact). */
static inline double m2r_load(const void *base, mamba2_dtype_t dtype, int64_t i) {
    switch (dtype) {
    case MAMBA2_DTYPE_F64: return ((const double *)base)[i];
    case MAMBA2_DTYPE_BF16: return (double)m2_bf16_to_f32(((const uint16_t *)base)[i]);
    case MAMBA2_DTYPE_F16: return (double)m2_f16_to_f32(((const uint16_t *)base)[i]);
    default: return (double)((const float *)base)[i];
    }
}

/* v rounded to float32 "to odd": truncated toward zero, then the last bit set when inexact.
 * A float32 carries at least 13 more bits than bf16/f16, so rounding this to nearest even
 * in bf16/f16 equals rounding v itself once (no double-rounding error at ties). Out of the
 * float32 range it gives ±FLT_MAX, which still rounds to the right bf16/f16 infinity. */
static inline float m2r_f32_round_to_odd(double v) {
    float f = (float)v;
    if (isnan(v) || (double)f == v) return f;
    if (fabs((double)f) > fabs(v)) f = nextafterf(f, 0.0f);
    return m2_f32_from_bits(m2_f32_bits(f) | 1u);
}

/* Store v into element i of an F32, F64, BF16 or F16 array (rounded once). */
static inline void m2r_store(void *base, mamba2_dtype_t dtype, int64_t i, double v) {
    switch (dtype) {
    case MAMBA2_DTYPE_F64: ((double *)base)[i] = v; break;
    case MAMBA2_DTYPE_BF16: ((uint16_t *)base)[i] = m2_f32_to_bf16(m2r_f32_round_to_odd(v)); break;
    case MAMBA2_DTYPE_F16: ((uint16_t *)base)[i] = m2_f32_to_f16(m2r_f32_round_to_odd(v)); break;
    default: ((float *)base)[i] = (float)v; break;
    }
}

/* a * b for a, b >= 0; -1 when an operand is negative or the product overflows int64. */
static inline int64_t m2r_mul(int64_t a, int64_t b) {
    if (a < 0 || b < 0)
        return -1;
    if (a != 0 && b > INT64_MAX / a)
        return -1;
    return a * b;
}

/* a + b for a, b >= 0; -1 when an operand is negative or the sum overflows int64. */
static inline int64_t m2r_add(int64_t a, int64_t b) {
    if (a < 0 || b < 0 || b > INT64_MAX - a)
        return -1;
    return a + b;
}

/* n zeroed doubles (at least one, so n == 0 is not a failure); NULL when n < 0, when
 * n doubles do not fit in size_t, or when memory is short. Release with free(). */
static inline double *m2r_zeros(int64_t n) {
    if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(double))
        return NULL;
    return (double *)calloc(n > 0 ? (size_t)n : 1, sizeof(double));
}

#endif /* MAMBA2C_REF_COMMON_H */
