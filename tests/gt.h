/*
 * gt.h — guarded single tensors for the tests of the ops whose arguments th_ssd_io does not
 * describe (test_conv1d.c, test_ssd_step.c, test_ssd_chunked.c). Header-only (static inline
 * functions), on top of harness.h; the fused SSD op's tensors come from th_ssd_io.
 *
 * A gt is one tensor in its own allocation: TH_GUARD bytes before and after, and with pad != 0
 * a strided view (every dim but the last gets extra stride, so there are gaps, and the data
 * starts 2 elements into the buffer); with align64 (gt_make_a) the buffer, and so an unpadded
 * view's data, starts on a 64-byte boundary, else wherever malloc puts it. Inputs get their values and NaN in the gaps (the library
 * must not read them); outputs get NaN elements (an element the library forgets to write stays
 * NaN) and guard bytes in the gaps, or values for an in/out tensor. gt_check then verifies the
 * guards, the gaps and (inputs) every byte.
 */
#ifndef MAMBA2C_TEST_GT_H
#define MAMBA2C_TEST_GT_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct gt {
    mamba2_tensor_t t;
    int present;
    int is_out;
    unsigned char *alloc; /* TH_GUARD + bytes + TH_GUARD */
    size_t bytes;
    unsigned char *snap;  /* the whole allocation after arming */
    unsigned char *mask;  /* outputs: 1 on the bytes of an element */
    int64_t n;
    int64_t *off;         /* element offsets from t.data, row-major logical order */
} gt;

static inline void gt_put(void *base, mamba2_dtype_t dt, int64_t o, double v) {
    switch (dt) {
    case MAMBA2_DTYPE_F32: ((float *)base)[o] = (float)v; break;
    case MAMBA2_DTYPE_F64: ((double *)base)[o] = v; break;
    case MAMBA2_DTYPE_I32: ((int32_t *)base)[o] = (int32_t)v; break;
    case MAMBA2_DTYPE_I64: ((int64_t *)base)[o] = (int64_t)v; break;
    default: break;
    }
}

static inline double gt_get(const void *base, mamba2_dtype_t dt, int64_t o) {
    switch (dt) {
    case MAMBA2_DTYPE_F32: return ((const float *)base)[o];
    case MAMBA2_DTYPE_F64: return ((const double *)base)[o];
    case MAMBA2_DTYPE_I32: return ((const int32_t *)base)[o];
    case MAMBA2_DTYPE_I64: return (double)((const int64_t *)base)[o];
    default: return NAN;
    }
}

/* (Re)fill: inputs get vals; outputs get NaN elements, or vals (in/out tensor). */
static inline void gt_arm(gt *g, const double *vals) {
    const size_t es = mamba2_dtype_size(g->t.dtype);
    memset(g->alloc, TH_PAT_GUARD, g->bytes + 2 * TH_GUARD);
    unsigned char *data = g->alloc + TH_GUARD;
    memset(data, g->is_out ? TH_PAT_GUARD : TH_PAT_UNSET, g->bytes);
    memset(g->mask, 0, g->bytes + 2 * TH_GUARD);
    const int64_t base = (int64_t)(((unsigned char *)g->t.data - data) / (ptrdiff_t)es);
    for (int64_t i = 0; i < g->n; i++) {
        if (vals)
            gt_put(g->t.data, g->t.dtype, g->off[i], vals[i]);
        else
            memset(data + (size_t)(base + g->off[i]) * es, TH_PAT_UNSET, es);
        if (g->is_out) memset(g->mask + TH_GUARD + (size_t)(base + g->off[i]) * es, 1, es);
    }
    memcpy(g->snap, g->alloc, g->bytes + 2 * TH_GUARD);
}

static inline void gt_make_a(gt *g, mamba2_dtype_t dt, int rank, const int64_t *shape, int pad,
                      int is_out, const double *vals, int align64) {
    memset(g, 0, sizeof *g);
    g->present = 1;
    g->is_out = is_out;
    int64_t stride[MAMBA2_MAX_RANK];
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        stride[i] = s;
        s = s * (shape[i] > 0 ? shape[i] : 1) + (pad ? (i == rank - 1 ? 3 : 1) : 0);
    }
    const size_t es = mamba2_dtype_size(dt);
    const int64_t off0 = pad ? 2 : 0;
    int64_t span = 1;
    for (int i = 0; i < rank; i++) span += (shape[i] > 0 ? shape[i] - 1 : 0) * stride[i];
    g->bytes = (size_t)(off0 + span) * es;
    if (align64) { /* TH_GUARD is a multiple of 64: the data stays on the boundary */
        g->alloc = (unsigned char *)aligned_alloc(64, (g->bytes + 2 * TH_GUARD + 63) / 64 * 64);
        if (!g->alloc) {
            printf("out of memory (%zu bytes)\n", g->bytes + 2 * TH_GUARD);
            exit(2);
        }
    } else {
        g->alloc = (unsigned char *)th_xmalloc(g->bytes + 2 * TH_GUARD);
    }
    g->snap = (unsigned char *)th_xmalloc(g->bytes + 2 * TH_GUARD);
    g->mask = (unsigned char *)th_xmalloc(g->bytes + 2 * TH_GUARD);
    g->t = mamba2_tensor_make_strided(g->alloc + TH_GUARD + off0 * es, dt, rank, shape, stride);
    /* element offsets in row-major logical order */
    g->n = th_numel(rank, shape);
    g->off = (int64_t *)th_xmalloc((size_t)(g->n > 0 ? g->n : 1) * sizeof(int64_t));
    int64_t idx[MAMBA2_MAX_RANK] = {0};
    for (int64_t i = 0; i < g->n; i++) {
        int64_t o = 0;
        for (int d = 0; d < rank; d++) o += idx[d] * stride[d];
        g->off[i] = o;
        for (int d = rank - 1; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    gt_arm(g, vals);
}

static inline void gt_make(gt *g, mamba2_dtype_t dt, int rank, const int64_t *shape, int pad, int is_out,
                    const double *vals) {
    gt_make_a(g, dt, rank, shape, pad, is_out, vals, 0);
}

static inline void gt_free(gt *g) {
    if (!g->present) return;
    free(g->alloc);
    free(g->snap);
    free(g->mask);
    free(g->off);
    memset(g, 0, sizeof *g);
}

static inline const mamba2_tensor_t *gt_t(const gt *g) { return g->present ? &g->t : NULL; }

static inline void gt_read(const gt *g, double *dst) {
    for (int64_t i = 0; i < g->n; i++) dst[i] = gt_get(g->t.data, g->t.dtype, g->off[i]);
}

/* A freshly allocated copy of the logical values (at least one element). */
static inline double *gt_values(const gt *g) {
    double *v = (double *)th_xmalloc((size_t)(g->n > 0 ? g->n : 1) * sizeof(double));
    gt_read(g, v);
    return v;
}

/* Is element i bitwise the NaN pattern the outputs are armed with (never written)? */
static inline int gt_unwritten(const gt *g, int64_t i) {
    const size_t es = mamba2_dtype_size(g->t.dtype);
    const unsigned char *p = (const unsigned char *)g->t.data + (size_t)g->off[i] * es;
    for (size_t k = 0; k < es; k++)
        if (p[k] != TH_PAT_UNSET) return 0;
    return 1;
}

/* Guards, gaps and (inputs) every byte unchanged. On failure writes a message. */
static inline int gt_check(const gt *g, const char *name, char *msg, size_t msz) {
    if (!g->present) return 1;
    const size_t total = g->bytes + 2 * TH_GUARD;
    for (size_t i = 0; i < total; i++) {
        if (g->is_out && g->mask[i]) continue;
        if (g->alloc[i] != g->snap[i]) {
            const char *where = i < TH_GUARD                ? "head guard"
                                : i >= TH_GUARD + g->bytes ? "tail guard"
                                : g->is_out                ? "gap between elements"
                                                           : "input data";
            snprintf(msg, msz, "%s: byte %lld (%s) changed", name, (long long)i - TH_GUARD, where);
            return 0;
        }
    }
    return 1;
}

/* Bitwise equality of two value arrays (read back from tensors of the same dtype). */
static inline int gt_bits_equal(const double *a, const double *b, int64_t n) {
    return n <= 0 || memcmp(a, b, (size_t)n * sizeof(double)) == 0;
}

/* Compare n values: bitwise (exact) or within tol (normalised error), with a NaN/Inf check. */
static inline void gt_cmp(const char *label, const double *got, const double *want, int64_t n, int exact,
                   double tol) {
    th_expect(th_all_finite(got, n), "%s has NaN/Inf", label);
    if (exact) {
        th_expect(gt_bits_equal(got, want, n), "%s is not bitwise identical", label);
        th_metric(label, th_nerr(got, want, n), TH_TOL_EXACT);
    } else {
        th_metric(label, th_nerr(got, want, n), tol);
    }
}

/* Does the last error message name `a` (and `b`, when given) as whole words? */
static inline int gt_expect_err(mamba2_status_t st, mamba2_status_t want, const char *a, const char *b) {
    const char *msg = mamba2_last_error();
    if (st != want) {
        th_fail("status %s, expected %s (message: %s)", mamba2_status_string(st),
                mamba2_status_string(want), msg);
        return 0;
    }
    if (want == MAMBA2_STATUS_OK) return 1;
    if ((a && !th_has_word(msg, a)) || (b && !th_has_word(msg, b))) {
        th_fail("message \"%s\" should name %s%s%s", msg, a ? a : "", b ? " and " : "", b ? b : "");
        return 0;
    }
    if (th_verbose() > 1) th_note("[%s]", msg);
    return 1;
}

#endif /* MAMBA2C_TEST_GT_H */
