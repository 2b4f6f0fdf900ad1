/*
 * validate.c — checks shared by every public entry point: one tensor against its expected
 * rank, shape, dtype and strides; whether two tensors may share memory; message helpers.
 */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"


const char *m2_dtype_name(mamba2_dtype_t d) {
    switch (d) {
    case MAMBA2_DTYPE_F32: return "f32";
    case MAMBA2_DTYPE_F64: return "f64";
    case MAMBA2_DTYPE_BF16: return "bf16";
    case MAMBA2_DTYPE_F16: return "f16";
    case MAMBA2_DTYPE_I32: return "i32";
    case MAMBA2_DTYPE_I64: return "i64";
    }
    return "unknown";
}

void m2_fmt_dims(char *buf, size_t n, int rank, const int64_t *dims) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* ---- one tensor ------------------------------------------------------------------- */

/* Check rank, shape, strides, dtype and data of one tensor against what the problem
 * expects. `layout` names the dims ("[B,L,G,N]"); `want` holds their values. */
mamba2_status_t m2_check_tensor(const char *name, const mamba2_tensor_t *t, int rank,
                                    const int64_t *want, const char *layout, mamba2_dtype_t dtype,
                                    const char *dtype_why, int is_output, int64_t *numel) {
    char got[128], exp[128];
    if (t->rank != rank) {
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has rank %d; expected rank %d %s", name,
                        (int)t->rank, rank, layout);
    }
    int shape_ok = 1;
    for (int i = 0; i < rank; i++)
        if (t->shape[i] != want[i]) shape_ok = 0;
    if (!shape_ok) {
        m2_fmt_dims(got, sizeof got, rank, t->shape);
        m2_fmt_dims(exp, sizeof exp, rank, want);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has shape %s; expected %s = %s", name,
                        got, layout, exp);
    }
    if ((unsigned)t->dtype > (unsigned)MAMBA2_DTYPE_I64)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has an unknown dtype (%d)", name,
                        (int)t->dtype);
    if (t->dtype != dtype) {
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has dtype %s; expected %s (%s)", name,
                        m2_dtype_name(t->dtype), m2_dtype_name(dtype), dtype_why);
    }
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (t->stride[i] < 0) {
            m2_fmt_dims(got, sizeof got, rank, t->stride);
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "%s has strides %s; negative strides are not supported", name, got);
        }
        if (t->stride[i] > MAX_DIM)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has stride %lld in dim %d; too large",
                            name, (long long)t->stride[i], i);
        if (__builtin_mul_overflow(n, t->shape[i], &n) || n > MAX_DIM * 64)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has too many elements", name);
    }
    /* the farthest element must be addressable: (shape-1)*stride summed, in bytes < 2^62 */
    int64_t ext = 0;
    for (int i = 0; i < rank && n > 0; i++) {
        int64_t e;
        if (__builtin_mul_overflow(t->shape[i] - 1, t->stride[i], &e) ||
            __builtin_add_overflow(ext, e, &ext) || ext > ((int64_t)1 << 58))
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "%s spans more memory than can be addressed (strides too large)", name);
    }
    if (rank > 0 && t->shape[rank - 1] > 1 && t->stride[rank - 1] != 1) {
        m2_fmt_dims(got, sizeof got, rank, t->stride);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "%s has strides %s; its last dimension must be contiguous (stride 1)", name,
                        got);
    }
    if (n > 0 && !t->data)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has %lld elements but a NULL data pointer",
                        name, (long long)n);
    if (is_output && n > 1) {
        /* Distinct indices must map to distinct elements: sorted by stride, each stride
         * must step over everything the faster dims cover. */
        int idx[MAMBA2_MAX_RANK], m = 0;
        for (int i = 0; i < rank; i++)
            if (t->shape[i] > 1) idx[m++] = i;
        for (int a = 1; a < m; a++)
            for (int b = a; b > 0 && t->stride[idx[b]] < t->stride[idx[b - 1]]; b--) {
                int tmp = idx[b];
                idx[b] = idx[b - 1];
                idx[b - 1] = tmp;
            }
        int64_t covered = 1;
        for (int a = 0; a < m; a++) {
            int d = idx[a];
            if (t->stride[d] < covered) {
                m2_fmt_dims(got, sizeof got, rank, t->stride);
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "%s has strides %s: its elements overlap each other, which an "
                                "output may not",
                                name, got);
            }
            covered = t->stride[d] * (t->shape[d] - 1) + covered;
        }
    }
    *numel = n;
    return MAMBA2_STATUS_OK;
}

/* Byte range [lo, hi) a tensor touches. */
static void byte_range(const mamba2_tensor_t *t, int64_t *lo, int64_t *hi) {
    int64_t es = (int64_t)mamba2_dtype_size(t->dtype);
    int64_t ext = 0;
    for (int i = 0; i < t->rank; i++) ext += (t->shape[i] - 1) * t->stride[i];
    *lo = (int64_t)(intptr_t)t->data;
    *hi = *lo + (ext + 1) * es;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Could two tensors share a byte? Conservative: returns 1 unless disjointness is proven.
 * Proofs: disjoint byte ranges; or, splitting each tensor into outer dims (whose byte
 * strides are all multiples of m) and an inner block narrower than m, inner blocks that
 * never meet modulo m — the case of views into one row-interleaved buffer, such as the
 * x | B | C split of Mamba-2's in_proj output (or dx | dB | dC gradients written into one). */
int m2_may_overlap(const mamba2_tensor_t *a, const mamba2_tensor_t *b) {
    int64_t alo, ahi, blo, bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    if (ahi <= blo || bhi <= alo) return 0;
    int64_t ea = (int64_t)mamba2_dtype_size(a->dtype), eb = (int64_t)mamba2_dtype_size(b->dtype);
    for (int ka = 1; ka < a->rank; ka++) {
        for (int kb = 1; kb < b->rank; kb++) {
            int64_t m = 0, spa = 0, spb = 0;
            for (int i = 0; i < ka; i++)
                if (a->shape[i] > 1) m = gcd64(m, a->stride[i] * ea);
            for (int i = 0; i < kb; i++)
                if (b->shape[i] > 1) m = gcd64(m, b->stride[i] * eb);
            if (m == 0) continue;
            for (int i = ka; i < a->rank; i++) spa += (a->shape[i] - 1) * a->stride[i];
            for (int i = kb; i < b->rank; i++) spb += (b->shape[i] - 1) * b->stride[i];
            spa = (spa + 1) * ea;
            spb = (spb + 1) * eb;
            if (spa > m || spb > m) continue;
            /* a's inner block is [0, spa) mod m, b's is [d, d + spb) mod m */
            int64_t d = ((blo - alo) % m + m) % m;
            if (d >= spa && d + spb <= m) return 0;
        }
    }
    return 1;
}

