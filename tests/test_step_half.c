/*
 * test_step_half.c — the decode steps with BF16/F16 activations (issue 28 item 3): a table of
 * conv1d_step and ssd_step cases run on the candidate CPU backend (its default kernel set with
 * 1 and 2 threads, and the forced scalar set) against the float64 reference.
 *
 * conv1d_step: x, out and conv_cache in bf16/f16, weight and bias in f32 or x's dtype, awkward
 * C (not a multiple of any vector width, one more than the half path's channel block), W = 1..4
 * and 8, Lc = W-1, W and W+3, contiguous, transposed and padded (gaps) caches, shift and
 * circular mode, T = 1 ([B,C]) and T > 1 (also past a kernel call's token block), permuted
 * slots with a padding row, x a strided view into a wider row.
 * ssd_step: x, dt, Bm, Cm, z, out in bf16/f16 with an f32, bf16 or f16 state_cache (and
 * all_states), T = 1 ([B,H,P]) and T > 1, D per head / per channel / absent, state rows past
 * one block of the CPU path (P = 70), permuted slots with a padding row, strided views.
 *
 * Every case checks: the reference's half output equals its float64 run on the same
 * (widened) inputs rounded once to nearest even, bit for bit; the candidate agrees with the
 * reference within SPEC §8's half tolerance (1e-2; a float32 state within 1e-5); the
 * candidate's half output equals its own float32 run on the widened inputs rounded once, and
 * its conv cache / half state the float32 run's, bit for bit; 1 and 2 threads give the same
 * bits; ssd_step: T calls of one token give one call's bits; every byte outside the views
 * (guards, gaps, padding rows) is untouched. Bad arguments: mixed half dtypes, a cache
 * of another dtype, an f64 state, the forward with half x.
 *
 * Usage: test_step_half [-q]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "harness.h"

#define GUARD 8 /* elements of sentinel bytes before and after every buffer */

static th_rng g_rng;

/* ---- a guarded, strided buffer of any float dtype -------------------------------------- */

typedef struct tb {
    mamba2_tensor_t t;
    unsigned char *alloc, *snap;
    size_t bytes;
} tb;

static int64_t tb_numel(const tb *b) { return th_numel(b->t.rank, b->t.shape); }

/* element offset of the i-th element in row-major logical order */
static int64_t tb_off(const mamba2_tensor_t *t, int64_t i) {
    int64_t o = 0;
    for (int d = t->rank - 1; d >= 0; d--) {
        o += (i % t->shape[d]) * t->stride[d];
        i /= t->shape[d];
    }
    return o;
}

/* strides: NULL = contiguous; pad > 0 adds pad elements to every stride but the last */
static void tb_make(tb *b, mamba2_dtype_t dt, int rank, const int64_t *shape, const int64_t *st,
                    int64_t pad) {
    int64_t s[MAMBA2_MAX_RANK];
    if (st) {
        for (int i = 0; i < rank; i++) s[i] = st[i];
    } else { /* row-major, pad elements added to every outer stride */
        int64_t acc = shape[rank - 1];
        s[rank - 1] = 1;
        for (int i = rank - 2; i >= 0; i--) {
            s[i] = acc + pad;
            acc = s[i] * shape[i];
        }
    }
    int64_t span = 1, any0 = 0;
    for (int i = 0; i < rank; i++) {
        if (shape[i] == 0) any0 = 1;
        span += (shape[i] - 1) * s[i];
    }
    if (any0) span = 0;
    const size_t es = mamba2_dtype_size(dt);
    b->bytes = (size_t)(span + 2 * GUARD) * es;
    b->alloc = th_xmalloc(b->bytes);
    b->snap = th_xmalloc(b->bytes);
    for (size_t i = 0; i < b->bytes; i++) b->alloc[i] = (unsigned char)(0xA5 ^ (i * 7));
    b->t = mamba2_tensor_make_strided(b->alloc + GUARD * es, dt, rank, shape, s);
}

static void tb_free(tb *b) {
    free(b->alloc);
    free(b->snap);
}

static double tb_get(const tb *b, int64_t i) {
    const int64_t o = tb_off(&b->t, i);
    switch (b->t.dtype) {
    case MAMBA2_DTYPE_F64: return ((const double *)b->t.data)[o];
    case MAMBA2_DTYPE_BF16: return m2_bf16_to_f32(((const uint16_t *)b->t.data)[o]);
    case MAMBA2_DTYPE_F16: return m2_f16_to_f32(((const uint16_t *)b->t.data)[o]);
    default: return ((const float *)b->t.data)[o];
    }
}

static void tb_set(tb *b, int64_t i, double v) {
    const int64_t o = tb_off(&b->t, i);
    switch (b->t.dtype) {
    case MAMBA2_DTYPE_F64: ((double *)b->t.data)[o] = v; break;
    case MAMBA2_DTYPE_BF16: ((uint16_t *)b->t.data)[o] = m2_f32_to_bf16((float)v); break;
    case MAMBA2_DTYPE_F16: ((uint16_t *)b->t.data)[o] = m2_f32_to_f16((float)v); break;
    default: ((float *)b->t.data)[o] = (float)v; break;
    }
}

static void tb_fill(tb *b, double scale, double lo, double hi) {
    for (int64_t i = 0; i < tb_numel(b); i++)
        tb_set(b, i, scale != 0.0 ? scale * th_rng_normal(&g_rng) : th_rng_uniform(&g_rng, lo, hi));
}

static void tb_snap(tb *b) { memcpy(b->snap, b->alloc, b->bytes); }

/* the bytes of every element a call may write: the listed logical rows of the view (rows =
 * the first dimension; NULL = all) */
static int tb_untouched_outside(const tb *b, const int *rows_written) {
    const size_t es = mamba2_dtype_size(b->t.dtype);
    unsigned char *mask = calloc(b->bytes, 1);
    const int64_t n = tb_numel(b), per_row = b->t.shape[0] ? n / b->t.shape[0] : 0;
    for (int64_t i = 0; i < n; i++) {
        if (rows_written && !rows_written[i / per_row]) continue;
        const size_t o = (size_t)(GUARD + tb_off(&b->t, i)) * es;
        memset(mask + o, 1, es);
    }
    int ok = 1;
    for (size_t i = 0; i < b->bytes; i++)
        if (!mask[i] && b->alloc[i] != b->snap[i]) ok = 0;
    free(mask);
    return ok;
}

static int tb_bits_equal(const tb *a, const tb *b) {
    const size_t es = mamba2_dtype_size(a->t.dtype);
    for (int64_t i = 0; i < tb_numel(a); i++)
        if (memcmp((const char *)a->t.data + tb_off(&a->t, i) * (int64_t)es,
                   (const char *)b->t.data + tb_off(&b->t, i) * (int64_t)es, es))
            return 0;
    return 1;
}

/* every element of h (half) is the value of f (float32 / float64) rounded once */
static int tb_rounded_from(const tb *h, const tb *f) {
    for (int64_t i = 0; i < tb_numel(h); i++) {
        const uint16_t got = ((const uint16_t *)h->t.data)[tb_off(&h->t, i)];
        const double v = tb_get(f, i);
        uint16_t want;
        if (f->t.dtype == MAMBA2_DTYPE_F64) {
            /* round to odd in float32, then to nearest even: v rounded once */
            float r = (float)v;
            if ((double)r != v && !isnan(v)) {
                if (fabs((double)r) > fabs(v)) r = nextafterf(r, 0.0f);
                r = m2_f32_from_bits(m2_f32_bits(r) | 1u);
            }
            want = h->t.dtype == MAMBA2_DTYPE_BF16 ? m2_f32_to_bf16(r) : m2_f32_to_f16(r);
        } else {
            want = h->t.dtype == MAMBA2_DTYPE_BF16 ? m2_f32_to_bf16((float)v) : m2_f32_to_f16((float)v);
        }
        if (got != want) return 0;
    }
    return 1;
}

static double tb_nerr(const tb *got, const tb *ref) {
    const int64_t n = tb_numel(got);
    double *g = th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    double *r = th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        g[i] = tb_get(got, i);
        r[i] = tb_get(ref, i);
    }
    const double e = th_nerr(g, r, n);
    free(g);
    free(r);
    return e;
}

static const char *dn(mamba2_dtype_t d) {
    return d == MAMBA2_DTYPE_BF16 ? "bf16" : d == MAMBA2_DTYPE_F16 ? "f16" : d == MAMBA2_DTYPE_F64 ? "f64" : "f32";
}


/* ---- conv1d_step ---------------------------------------------------------------------- */

typedef struct conv_case {
    mamba2_dtype_t adt, wdt;
    int64_t B, S, T, C, W, Lc; /* T = 0: the [B,C] form (one token) */
    int layout;                /* cache: 0 contiguous, 1 transposed (C innermost), 2 padded */
    int circ, slots, bias, silu;
} conv_case;

typedef struct conv_io {
    tb x, cache, w, b, out;
    int64_t idx[8];
    int32_t seql[8];
} conv_io;

/* inputs of a case in dtype adt (activations) / wdt (weight, bias); src: NULL = random, else
 * the values of src widened/copied */
static void conv_io_make(conv_io *io, const conv_case *k, mamba2_dtype_t adt, mamba2_dtype_t wdt,
                         const conv_io *src) {
    const int64_t T = k->T ? k->T : 1, Lc = k->Lc, C = k->C;
    const int64_t sx3[3] = {k->B, T, C}, sx2[2] = {k->B, C}, sw[2] = {C, k->W}, sb[1] = {C};
    const int64_t sc[3] = {k->S, C, Lc}, tst[3] = {C * Lc, 1, C};
    const int xr = k->T ? 3 : 2;
    tb_make(&io->x, adt, xr, xr == 3 ? sx3 : sx2, NULL, 5);
    tb_make(&io->cache, adt, 3, sc, k->layout == 1 ? tst : NULL, k->layout == 2 ? 3 : 0);
    tb_make(&io->w, wdt, 2, sw, NULL, 0);
    tb_make(&io->b, wdt, 1, sb, NULL, 0);
    tb_make(&io->out, adt, xr, xr == 3 ? sx3 : sx2, NULL, 2);
    if (!src) {
        tb_fill(&io->x, 1.0, 0, 0);
        tb_fill(&io->cache, 1.0, 0, 0);
        tb_fill(&io->w, 0.5, 0, 0);
        tb_fill(&io->b, 0.3, 0, 0);
        for (int64_t b = 0; b < k->B; b++) {
            io->idx[b] = k->slots ? (b == 1 ? -1 : (k->S - 1 - b)) : b;
            io->seql[b] = (int32_t)(th_rng_next(&g_rng) % (uint64_t)(2 * Lc + 3));
        }
    } else {
        tb *d[4] = {&io->x, &io->cache, &io->w, &io->b};
        const tb *s_[4] = {&src->x, &src->cache, &src->w, &src->b};
        for (int j = 0; j < 4; j++)
            for (int64_t i = 0; i < tb_numel(s_[j]); i++) tb_set(d[j], i, tb_get(s_[j], i));
        memcpy(io->idx, src->idx, sizeof io->idx);
        memcpy(io->seql, src->seql, sizeof io->seql);
    }
    for (int64_t i = 0; i < tb_numel(&io->out); i++) tb_set(&io->out, i, 0.0);
    tb_snap(&io->cache);
    tb_snap(&io->out);
}

static void conv_io_free(conv_io *io) {
    tb_free(&io->x);
    tb_free(&io->cache);
    tb_free(&io->w);
    tb_free(&io->b);
    tb_free(&io->out);
}

static mamba2_status_t conv_run(mamba2_context_t *ctx, const conv_case *k, conv_io *io) {
    const int64_t sb[1] = {k->B};
    mamba2_tensor_t ti = mamba2_tensor_make(io->idx, MAMBA2_DTYPE_I64, 1, sb);
    mamba2_tensor_t ts = mamba2_tensor_make(io->seql, MAMBA2_DTYPE_I32, 1, sb);
    mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
    o.bias = k->bias ? &io->b.t : NULL;
    o.state_indices = k->slots ? &ti : NULL;
    o.cache_seqlens = k->circ ? &ts : NULL;
    o.activation = k->silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    return mamba2_conv1d_step(ctx, &io->out.t, &io->cache.t, &io->x.t, &io->w.t, &o);
}

/* rows of out written (padding rows not) and slots of the cache written */
static void conv_written(const conv_case *k, const conv_io *io, int *rows, int *slots) {
    for (int64_t s = 0; s < k->S; s++) slots[s] = 0;
    for (int64_t b = 0; b < k->B; b++) {
        const int64_t q = io->idx[b];
        rows[b] = q >= 0;
        if (q >= 0) slots[q] = 1;
    }
}

/* the candidate ctx on the case (half) and on its widened float32 copy: out within SPEC §8 of
 * the reference, bit-exact against its own float32 run rounded once; guards untouched */
static void conv_cand(mamba2_context_t *ctx, const char *name, const conv_case *k, const conv_io *in,
                      const conv_io *r, conv_io *got) {
    th_begin("conv1d_step %s %s/w%s B=%lld T=%lld C=%lld W=%lld Lc=%lld layout=%d circ=%d "
             "slots=%d bias=%d silu=%d",
             name, dn(k->adt), dn(k->wdt), (long long)k->B, (long long)k->T, (long long)k->C,
             (long long)k->W, (long long)k->Lc, k->layout, k->circ, k->slots, k->bias, k->silu);
    conv_io_make(got, k, k->adt, k->wdt, in);
    conv_io f;
    conv_io_make(&f, k, MAMBA2_DTYPE_F32, MAMBA2_DTYPE_F32, in);
    mamba2_status_t st = conv_run(ctx, k, got);
    if (th_expect(st == MAMBA2_STATUS_OK, "half step: %s", mamba2_last_error()) &&
        th_expect(conv_run(ctx, k, &f) == MAMBA2_STATUS_OK, "f32 step: %s", mamba2_last_error())) {
        int rows[8], slots[8];
        conv_written(k, in, rows, slots);
        th_metric("out", tb_nerr(&got->out, &r->out), 1e-2);
        th_expect(tb_bits_equal(&got->cache, &r->cache), "conv_cache differs from the reference");
        th_expect(tb_rounded_from(&got->out, &f.out), "out is not the float32 step's rounded once");
        th_expect(tb_rounded_from(&got->cache, &f.cache), "conv_cache differs from the float32 step's");
        th_expect(tb_untouched_outside(&got->out, rows), "out: a byte outside the written rows changed");
        th_expect(tb_untouched_outside(&got->cache, slots), "conv_cache: a byte outside the slots changed");
    }
    conv_io_free(&f);
    th_end();
}

static void conv_case_run(mamba2_context_t *ref, mamba2_context_t *c1, mamba2_context_t *c2,
                          mamba2_context_t *sc, const conv_case *k) {
    conv_io in, r, r64, g2, g1;
    conv_io_make(&in, k, k->adt, k->wdt, NULL);
    th_begin("conv1d_step ref %s/w%s B=%lld T=%lld C=%lld W=%lld Lc=%lld layout=%d circ=%d",
             dn(k->adt), dn(k->wdt), (long long)k->B, (long long)k->T, (long long)k->C,
             (long long)k->W, (long long)k->Lc, k->layout, k->circ);
    conv_io_make(&r, k, k->adt, k->wdt, &in);
    conv_io_make(&r64, k, MAMBA2_DTYPE_F64, MAMBA2_DTYPE_F64, &in);
    if (th_expect(conv_run(ref, k, &r) == MAMBA2_STATUS_OK, "ref half: %s", mamba2_last_error()) &&
        th_expect(conv_run(ref, k, &r64) == MAMBA2_STATUS_OK, "ref f64: %s", mamba2_last_error())) {
        th_expect(tb_rounded_from(&r.out, &r64.out), "ref out is not its float64 result rounded once");
        th_expect(tb_rounded_from(&r.cache, &r64.cache), "ref conv_cache differs from its float64 run");
    }
    th_end();
    conv_cand(c2, "cpu/2", k, &in, &r, &g2);
    conv_cand(c1, "cpu/1", k, &in, &r, &g1);
    th_begin("conv1d_step 1 vs 2 threads");
    th_expect(tb_bits_equal(&g1.out, &g2.out) && tb_bits_equal(&g1.cache, &g2.cache),
              "1 and 2 threads differ");
    th_end();
    conv_io_free(&g1);
    conv_io_free(&g2);
    if (sc) {
        conv_cand(sc, "cpu-scalar", k, &in, &r, &g1);
        conv_io_free(&g1);
    }
    conv_io_free(&r64);
    conv_io_free(&r);
    conv_io_free(&in);
}

static void conv_table(mamba2_context_t *ref, mamba2_context_t *c1, mamba2_context_t *c2,
                       mamba2_context_t *sc) {
    static const int64_t Ws[5] = {1, 2, 3, 4, 8};
    int idx = 0;
    for (int ai = 0; ai < 2; ai++)
        for (int wi = 0; wi < 5; wi++)
            for (int li = 0; li < 3; li++, idx++) {
                conv_case k;
                memset(&k, 0, sizeof k);
                k.adt = ai ? MAMBA2_DTYPE_F16 : MAMBA2_DTYPE_BF16;
                k.wdt = idx % 2 ? k.adt : MAMBA2_DTYPE_F32;
                k.W = Ws[wi];
                k.Lc = li == 0 ? k.W - 1 : li == 1 ? k.W : k.W + 3;
                k.B = 3;
                k.S = 4;
                k.T = idx % 3 == 0 ? 0 : idx % 3 == 1 ? 1 : 19;
                k.C = idx % 4 == 0 ? 257 : 37;
                k.layout = idx % 3;
                k.circ = (idx / 2) % 2 && k.Lc > 0;
                k.slots = (idx / 3) % 2;
                k.bias = idx % 5 != 0;
                k.silu = idx % 2 == 0;
                conv_case_run(ref, c1, c2, sc, &k);
            }
}

/* ---- ssd_step ------------------------------------------------------------------------- */

typedef struct ssd_case {
    mamba2_dtype_t adt, sdt;
    int64_t B, S, T, H, G, P, N; /* T = 0: the [B,H,P] form (one token) */
    int Dmode, z, slots, all, softplus;
} ssd_case;

enum { SX, SDT, SBM, SCM, SZ, SOUT, SA, SD, SBIAS, SST, SALL, SNT };

typedef struct ssd_io {
    tb t[SNT];
    int64_t idx[8];
} ssd_io;

static void ssd_io_make(ssd_io *io, const ssd_case *k, mamba2_dtype_t adt, mamba2_dtype_t pdt,
                        mamba2_dtype_t sdt, const ssd_io *src) {
    const int64_t B = k->B, T = k->T, H = k->H, G = k->G, P = k->P, N = k->N;
    const int m = T > 0; /* multi-token form */
    const int64_t sx[4] = {B, T, H, P}, sx3[3] = {B, H, P}, sdt4[3] = {B, T, H}, sdt3[2] = {B, H};
    const int64_t sbc[4] = {B, T, G, N}, sbc3[3] = {B, G, N}, sh[1] = {H}, shp[2] = {H, P};
    const int64_t sst[4] = {k->S, H, P, N}, sal[5] = {B, T, H, P, N}, sal4[4] = {B, H, P, N};
    tb_make(&io->t[SX], adt, m ? 4 : 3, m ? sx : sx3, NULL, 3);
    tb_make(&io->t[SDT], adt, m ? 3 : 2, m ? sdt4 : sdt3, NULL, 1);
    tb_make(&io->t[SBM], adt, m ? 4 : 3, m ? sbc : sbc3, NULL, 2);
    tb_make(&io->t[SCM], adt, m ? 4 : 3, m ? sbc : sbc3, NULL, 1);
    tb_make(&io->t[SZ], adt, m ? 4 : 3, m ? sx : sx3, NULL, 0);
    tb_make(&io->t[SOUT], adt, m ? 4 : 3, m ? sx : sx3, NULL, 2);
    tb_make(&io->t[SA], pdt, 1, sh, NULL, 0);
    tb_make(&io->t[SD], pdt, k->Dmode == 2 ? 2 : 1, k->Dmode == 2 ? shp : sh, NULL, 0);
    tb_make(&io->t[SBIAS], pdt, 1, sh, NULL, 0);
    tb_make(&io->t[SST], sdt, 4, sst, NULL, 1);
    tb_make(&io->t[SALL], sdt, m ? 5 : 4, m ? sal : sal4, NULL, 0);
    if (!src) {
        tb_fill(&io->t[SX], 1.0, 0, 0);
        tb_fill(&io->t[SDT], 0.0, 0.01, 0.11);
        tb_fill(&io->t[SBM], 0.2, 0, 0);
        tb_fill(&io->t[SCM], 0.2, 0, 0);
        tb_fill(&io->t[SZ], 1.0, 0, 0);
        tb_fill(&io->t[SA], 0.0, -0.5, -0.1);
        tb_fill(&io->t[SD], 1.0, 0, 0);
        tb_fill(&io->t[SBIAS], 0.1, 0, 0);
        tb_fill(&io->t[SST], 0.2, 0, 0);
        for (int64_t b = 0; b < B; b++) io->idx[b] = k->slots ? (b == 1 ? -1 : (k->S - 1 - b)) : b;
    } else {
        for (int j = 0; j < SNT; j++)
            if (j != SOUT && j != SALL)
                for (int64_t i = 0; i < tb_numel(&src->t[j]); i++) tb_set(&io->t[j], i, tb_get(&src->t[j], i));
        memcpy(io->idx, src->idx, sizeof io->idx);
    }
    for (int j = SOUT; j <= SALL; j += SALL - SOUT)
        for (int64_t i = 0; i < tb_numel(&io->t[j]); i++) tb_set(&io->t[j], i, 0.0);
    tb_snap(&io->t[SOUT]);
    tb_snap(&io->t[SST]);
    tb_snap(&io->t[SALL]);
}

static void ssd_io_free(ssd_io *io) {
    for (int j = 0; j < SNT; j++) tb_free(&io->t[j]);
}

/* one call over the case's tokens, or (tok >= 0, multi-token form) token tok alone through
 * [B,H,P] views of the tensors */
static mamba2_status_t ssd_run(mamba2_context_t *ctx, const ssd_case *k, ssd_io *io, int64_t tok) {
    const int64_t sb[1] = {k->B};
    mamba2_tensor_t ti = mamba2_tensor_make(io->idx, MAMBA2_DTYPE_I64, 1, sb);
    mamba2_ssd_step_options_t o = mamba2_ssd_step_options_default();
    mamba2_tensor_t v[SNT];
    for (int j = 0; j < SNT; j++) v[j] = io->t[j].t;
    if (tok >= 0) { /* drop dimension 1 (T) of the token-form tensors at index tok */
        const int js[7] = {SX, SDT, SBM, SCM, SZ, SOUT, SALL};
        for (int q = 0; q < 7; q++) {
            mamba2_tensor_t *t = &v[js[q]];
            t->data = (char *)t->data + tok * t->stride[1] * (int64_t)mamba2_dtype_size(t->dtype);
            for (int d = 1; d + 1 < t->rank; d++) {
                t->shape[d] = t->shape[d + 1];
                t->stride[d] = t->stride[d + 1];
            }
            t->rank--;
        }
    }
    o.D = k->Dmode ? &v[SD] : NULL;
    o.z = k->z ? &v[SZ] : NULL;
    o.dt_bias = &v[SBIAS];
    o.dt_softplus = k->softplus;
    o.state_indices = k->slots ? &ti : NULL;
    return mamba2_ssd_step(ctx, &v[SST], &v[SOUT], k->all ? &v[SALL] : NULL, &v[SX], &v[SDT], &v[SA],
                           &v[SBM], &v[SCM], &o);
}

static void ssd_written(const ssd_case *k, const ssd_io *io, int *rows, int *slots) {
    for (int64_t s = 0; s < k->S; s++) slots[s] = 0;
    for (int64_t b = 0; b < k->B; b++) {
        rows[b] = io->idx[b] >= 0;
        if (io->idx[b] >= 0) slots[io->idx[b]] = 1;
    }
}

static void ssd_cand(mamba2_context_t *ctx, const char *name, const ssd_case *k, const ssd_io *in,
                     const ssd_io *r, ssd_io *got) {
    th_begin("ssd_step %s %s/state %s B=%lld T=%lld H=%lld G=%lld P=%lld N=%lld D=%d z=%d "
             "slots=%d all=%d softplus=%d",
             name, dn(k->adt), dn(k->sdt), (long long)k->B, (long long)k->T, (long long)k->H,
             (long long)k->G, (long long)k->P, (long long)k->N, k->Dmode, k->z, k->slots, k->all,
             k->softplus);
    ssd_io_make(got, k, k->adt, MAMBA2_DTYPE_F32, k->sdt, in);
    ssd_io f;
    ssd_io_make(&f, k, MAMBA2_DTYPE_F32, MAMBA2_DTYPE_F32, k->sdt, in);
    if (th_expect(ssd_run(ctx, k, got, -1) == MAMBA2_STATUS_OK, "half step: %s", mamba2_last_error()) &&
        th_expect(ssd_run(ctx, k, &f, -1) == MAMBA2_STATUS_OK, "f32 step: %s", mamba2_last_error())) {
        int rows[8], slots[8];
        ssd_written(k, in, rows, slots);
        const double stol = k->sdt == MAMBA2_DTYPE_F32 ? 1e-5 : 1e-2;
        th_metric("out", tb_nerr(&got->t[SOUT], &r->t[SOUT]), 1e-2);
        th_metric("state", tb_nerr(&got->t[SST], &r->t[SST]), stol);
        if (k->all) th_metric("all", tb_nerr(&got->t[SALL], &r->t[SALL]), stol);
        th_expect(tb_rounded_from(&got->t[SOUT], &f.t[SOUT]), "out is not the float32 step's rounded once");
        th_expect(tb_bits_equal(&got->t[SST], &f.t[SST]), "state differs from the float32 step's");
        th_expect(!k->all || tb_bits_equal(&got->t[SALL], &f.t[SALL]), "all_states differs from the float32 step's");
        th_expect(tb_untouched_outside(&got->t[SOUT], rows), "out: a byte outside the written rows changed");
        th_expect(tb_untouched_outside(&got->t[SST], slots), "state: a byte outside the slots changed");
        const int none[8] = {0};
        th_expect(tb_untouched_outside(&got->t[SALL], k->all ? rows : none),
                  "all_states: a byte outside the written rows changed");
        if (k->T > 1) { /* T calls of one token: the same bits */
            ssd_io one;
            ssd_io_make(&one, k, k->adt, MAMBA2_DTYPE_F32, k->sdt, in);
            int ok = 1;
            for (int64_t t = 0; t < k->T; t++) ok &= ssd_run(ctx, k, &one, t) == MAMBA2_STATUS_OK;
            th_expect(ok && tb_bits_equal(&one.t[SOUT], &got->t[SOUT]) &&
                          tb_bits_equal(&one.t[SST], &got->t[SST]),
                      "T calls of one token differ from one call of T tokens");
            ssd_io_free(&one);
        }
    }
    ssd_io_free(&f);
    th_end();
}

static void ssd_case_run(mamba2_context_t *ref, mamba2_context_t *c1, mamba2_context_t *c2,
                         mamba2_context_t *sc, const ssd_case *k) {
    ssd_io in, r, r64, g1, g2;
    ssd_io_make(&in, k, k->adt, MAMBA2_DTYPE_F32, k->sdt, NULL);
    th_begin("ssd_step ref %s/state %s T=%lld P=%lld N=%lld", dn(k->adt), dn(k->sdt),
             (long long)k->T, (long long)k->P, (long long)k->N);
    ssd_io_make(&r, k, k->adt, MAMBA2_DTYPE_F32, k->sdt, &in);
    ssd_io_make(&r64, k, MAMBA2_DTYPE_F64, MAMBA2_DTYPE_F64, MAMBA2_DTYPE_F64, &in);
    if (th_expect(ssd_run(ref, k, &r, -1) == MAMBA2_STATUS_OK, "ref half: %s", mamba2_last_error()) &&
        th_expect(ssd_run(ref, k, &r64, -1) == MAMBA2_STATUS_OK, "ref f64: %s", mamba2_last_error())) {
        /* a half state is rounded between tokens (the f64 run's is not): one token, or an f32 state */
        if (k->T <= 1 || k->sdt == MAMBA2_DTYPE_F32)
            th_expect(tb_rounded_from(&r.t[SOUT], &r64.t[SOUT]),
                      "ref out is not its float64 result rounded once");
        th_metric("ref state vs f64", tb_nerr(&r.t[SST], &r64.t[SST]),
                  k->sdt == MAMBA2_DTYPE_F32 ? 1e-5 : 1e-2);
    }
    th_end();
    ssd_cand(c2, "cpu/2", k, &in, &r, &g2);
    ssd_cand(c1, "cpu/1", k, &in, &r, &g1);
    th_begin("ssd_step 1 vs 2 threads");
    th_expect(tb_bits_equal(&g1.t[SOUT], &g2.t[SOUT]) && tb_bits_equal(&g1.t[SST], &g2.t[SST]),
              "1 and 2 threads differ");
    th_end();
    ssd_io_free(&g1);
    ssd_io_free(&g2);
    if (sc) {
        ssd_cand(sc, "cpu-scalar", k, &in, &r, &g1);
        ssd_io_free(&g1);
    }
    ssd_io_free(&r64);
    ssd_io_free(&r);
    ssd_io_free(&in);
}

static void ssd_table(mamba2_context_t *ref, mamba2_context_t *c1, mamba2_context_t *c2,
                      mamba2_context_t *sc) {
    static const mamba2_dtype_t sdts[3] = {MAMBA2_DTYPE_F32, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F16};
    static const int64_t Ps[3] = {3, 16, 70}, Ns[3] = {5, 16, 33};
    int idx = 0;
    for (int ai = 0; ai < 2; ai++)
        for (int si = 0; si < 3; si++)
            for (int pi = 0; pi < 3; pi++, idx++) {
                ssd_case k;
                memset(&k, 0, sizeof k);
                k.adt = ai ? MAMBA2_DTYPE_F16 : MAMBA2_DTYPE_BF16;
                k.sdt = sdts[si];
                k.B = 3;
                k.S = 4;
                k.T = idx % 3 == 0 ? 0 : idx % 3 == 1 ? 1 : 5;
                k.H = 4;
                k.G = idx % 2 ? 2 : 1;
                k.P = Ps[pi];
                k.N = Ns[(idx / 2) % 3];
                k.Dmode = idx % 3;
                k.z = idx % 4 != 1;
                k.slots = (idx / 3) % 2;
                k.all = idx % 2 == 0;
                k.softplus = (idx / 2) % 2;
                ssd_case_run(ref, c1, c2, sc, &k);
            }
}

/* ---- bad arguments ---------------------------------------------------------------------- */

static void bad_args(mamba2_context_t *cpu, mamba2_context_t *ref) {
    (void)ref;
    th_begin("half steps: bad arguments");
    uint16_t hx[64] = {0}, hc[64] = {0}, ho[64];
    float fw[16] = {0}, fc[64] = {0};
    const int64_t sx[2] = {2, 4}, sw[2] = {4, 4}, sc[3] = {2, 4, 3}, sx3[3] = {2, 1, 4};
    mamba2_tensor_t x = mamba2_tensor_make(hx, MAMBA2_DTYPE_BF16, 2, sx),
                    out = mamba2_tensor_make(ho, MAMBA2_DTYPE_BF16, 2, sx),
                    cache = mamba2_tensor_make(hc, MAMBA2_DTYPE_BF16, 3, sc),
                    cache32 = mamba2_tensor_make(fc, MAMBA2_DTYPE_F32, 3, sc),
                    w16 = mamba2_tensor_make(hc + 32, MAMBA2_DTYPE_F16, 2, sw),
                    w = mamba2_tensor_make(fw, MAMBA2_DTYPE_F32, 2, sw);
    mamba2_status_t st = mamba2_conv1d_step(cpu, &out, &cache, &x, &w16, NULL);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "weight"),
              "f16 weight with bf16 x: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    st = mamba2_conv1d_step(cpu, &out, &cache32, &x, &w, NULL);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "conv_cache"),
              "f32 cache with bf16 x: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    st = mamba2_conv1d_step(cpu, &out, &cache, &x, &w, NULL);
    th_expect(st == MAMBA2_STATUS_OK, "bf16 step, f32 weight: %s", mamba2_last_error());
    /* the forward and backward keep their dtypes: half x there is unsupported */
    mamba2_tensor_t x3 = mamba2_tensor_make(hx, MAMBA2_DTYPE_BF16, 3, sx3),
                    o3 = mamba2_tensor_make(ho, MAMBA2_DTYPE_BF16, 3, sx3);
    st = mamba2_conv1d_forward(cpu, &o3, NULL, &x3, &w, NULL);
    th_expect(st == MAMBA2_STATUS_UNSUPPORTED && th_has_word(mamba2_last_error(), "x"),
              "bf16 conv1d_forward: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    /* ssd_step: mixed activation dtypes, an f64 state with half activations */
    const int64_t shx[3] = {1, 2, 2}, sdt[2] = {1, 2}, sbc[3] = {1, 1, 4}, sh[1] = {2},
                  sst[4] = {1, 2, 2, 4};
    uint16_t ax[4] = {0}, adt16[2] = {0}, ab[4] = {0}, aout[4];
    float A[2] = {-1, -1};
    double st64[16] = {0};
    mamba2_tensor_t tx = mamba2_tensor_make(ax, MAMBA2_DTYPE_BF16, 3, shx),
                    to = mamba2_tensor_make(aout, MAMBA2_DTYPE_BF16, 3, shx),
                    tdt = mamba2_tensor_make(adt16, MAMBA2_DTYPE_F16, 2, sdt),
                    tdtb = mamba2_tensor_make(adt16, MAMBA2_DTYPE_BF16, 2, sdt),
                    tB = mamba2_tensor_make(ab, MAMBA2_DTYPE_BF16, 3, sbc),
                    tA = mamba2_tensor_make(A, MAMBA2_DTYPE_F32, 1, sh),
                    ts = mamba2_tensor_make(fc, MAMBA2_DTYPE_F32, 4, sst),
                    ts64 = mamba2_tensor_make(st64, MAMBA2_DTYPE_F64, 4, sst);
    st = mamba2_ssd_step(cpu, &ts, &to, NULL, &tx, &tdt, &tA, &tB, &tB, NULL);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "dt"),
              "f16 dt with bf16 x: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    st = mamba2_ssd_step(cpu, &ts64, &to, NULL, &tx, &tdtb, &tA, &tB, &tB, NULL);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "state_cache"),
              "f64 state with bf16 x: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    st = mamba2_ssd_step(cpu, &ts, &to, NULL, &tx, &tdtb, &tA, &tB, &tB, NULL);
    th_expect(st == MAMBA2_STATUS_OK, "bf16 ssd_step: %s", mamba2_last_error());
    th_end();
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    th_rng_seed(&g_rng, 0x5eed28u);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    mamba2_context_t *c1 = th_ctx(MAMBA2_BACKEND_CPU, 1, NULL);
    mamba2_context_t *c2 = th_ctx(MAMBA2_BACKEND_CPU, 2, NULL);
    mamba2_context_t *sc = th_cpu_default_isa_is("scalar") ? NULL
                                                           : th_ctx(MAMBA2_BACKEND_CPU, 2, "scalar");
    conv_table(ref, c1, c2, sc);
    ssd_table(ref, c1, c2, sc);
    bad_args(c2, ref);
    if (sc) mamba2_context_destroy(sc);
    mamba2_context_destroy(c2);
    mamba2_context_destroy(c1);
    mamba2_context_destroy(ref);
    return th_finish();
}
