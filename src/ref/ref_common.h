/*
 * ref_common.h — helpers shared by the float64 reference kernels (src/ref/).
 *
 * The reference computes everything in double whatever the storage type: loads widen an
 * F32 or F64 element to double, stores round once. Scratch arrays are doubles allocated
 * with an overflow-checked size, so an absurd shape fails as "out of memory" instead of
 * wrapping around to a short buffer.
 */
#ifndef MAMBA2C_REF_COMMON_H
#define MAMBA2C_REF_COMMON_H

#include <stdint.h>
#include <stdlib.h>

#include "mamba2c.h"

/* Element i of an F32 or F64 array, as double. */
static inline double m2r_load(const void *base, mamba2_dtype_t dtype, int64_t i) {
    if (dtype == MAMBA2_DTYPE_F64)
        return ((const double *)base)[i];
    return (double)((const float *)base)[i];
}

/* Store v into element i of an F32 or F64 array (rounded once for F32). */
static inline void m2r_store(void *base, mamba2_dtype_t dtype, int64_t i, double v) {
    if (dtype == MAMBA2_DTYPE_F64)
        ((double *)base)[i] = v;
    else
        ((float *)base)[i] = (float)v;
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
