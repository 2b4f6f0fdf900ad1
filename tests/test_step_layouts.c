/*
 * test_step_layouts.c — the decode steps on the standard cache layouts (issue 18 item 2):
 *
 * conv1d_step with conv_cache[S,C,Lc] for Lc = W-1, W, W+3, contiguous, transposed (the
 * channel dimension innermost, as causal-conv1d's channel-last caches) and padded (gaps
 * between elements), in shift mode and in circular mode (cache_seqlens, int32 and int64,
 * wrapping around Lc within and across calls), T = 1 ([B,C] and [B,1,C]) and T > 1 (also
 * T > Lc), W = 1..4 and 8, C not a multiple of any vector width, identity and permuted slots
 * with padding rows. Every result is checked against the test's own float64 evaluation of
 * the documented semantics (the reference backend in float64 must match it to 1e-12, the
 * candidate backend in float32 to SPEC §8's 1e-5), every byte outside the views (gaps,
 * guards, padding rows, unused slots) must be untouched, and in shift mode the outputs must
 * equal mamba2_conv1d_forward with the slot's last W-1 inputs as initial state.
 *
 * ssd_step with a bf16/f16 state_cache (and all_states): the reference's stored state equals
 * the test's own float64 update rounded once to nearest even, bit for bit; the candidate's
 * stored state and out agree with the reference (SPEC §8 half tolerance, and for one token
 * every state element within one unit in the last place), T calls of one token give the same bits as one
 * call of T tokens, padding rows untouched.
 *
 * Bad arguments: Lc < W-1, self-overlapping cache strides, cache_seqlens of the wrong
 * dtype / shape / sign / overlapping the cache, a struct_size that does not cover
 * cache_seqlens (the field is then not read), state_cache and all_states dtypes.
 *
 * Usage: test_step_layouts [--backend cpu|opencl|cuda] [-q]. With --backend opencl (cuda) the
 * candidate is the OpenCL (CUDA) backend (exit 77 when no such device exists) and a subset of
 * the conv cases runs.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define GUARD 16 /* elements of sentinel before and after every buffer */
static const uint32_t SENT32 = 0x7fc0beefu;

static th_rng g_rng;

/* ---- a strided, guarded float buffer ---------------------------------------------------- */

typedef struct gbuf {
    float *alloc, *data; /* data = alloc + GUARD */
    unsigned char *mask; /* per element of alloc: 1 inside the view */
    int64_t n;           /* elements of alloc */
} gbuf;

static int64_t view_off(int rank, const int64_t *st, const int64_t *idx) {
    int64_t o = 0;
    for (int i = 0; i < rank; i++) o += idx[i] * st[i];
    return o;
}

static void gbuf_make(gbuf *g, int rank, const int64_t *shape, const int64_t *st) {
    int64_t span = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] == 0) span = 0;
    }
    if (span) {
        span = 1;
        for (int i = 0; i < rank; i++) span += (shape[i] - 1) * st[i];
    }
    g->n = span + 2 * GUARD;
    g->alloc = th_xmalloc((size_t)g->n * sizeof(float));
    g->mask = calloc((size_t)g->n, 1);
    g->data = g->alloc + GUARD;
    for (int64_t i = 0; i < g->n; i++) memcpy(&g->alloc[i], &SENT32, 4);
    int64_t numel = 1, idx[4] = {0, 0, 0, 0};
    for (int i = 0; i < rank; i++) numel *= shape[i];
    for (int64_t e = 0; e < numel; e++) {
        int64_t r = e;
        for (int i = rank - 1; i >= 0; i--) {
            idx[i] = r % shape[i];
            r /= shape[i];
        }
        g->mask[GUARD + view_off(rank, st, idx)] = 1;
    }
}
static void gbuf_free(gbuf *g) {
    free(g->alloc);
    free(g->mask);
}
/* every element outside the view still holds the sentinel */
static int gbuf_outside_ok(const gbuf *g) {
    for (int64_t i = 0; i < g->n; i++)
        if (!g->mask[i] && memcmp(&g->alloc[i], &SENT32, 4) != 0) return 0;
    return 1;
}

/* ---- conv1d_step ------------------------------------------------------------------------ */

enum { LAY_CONTIG = 0, LAY_TRANSPOSED = 1, LAY_PADDED = 2 };

typedef struct conv_case {
    int64_t B, S, C, W, Lc, T;
    int circular, layout, slots, silu, bias, rank2, seq64;
} conv_case;

/* cache strides for layout */
static void cache_strides(const conv_case *k, int64_t st[3]) {
    const int64_t S = k->S, C = k->C, Lc = k->Lc > 0 ? k->Lc : 1;
    (void)S;
    if (k->layout == LAY_CONTIG) {
        st[2] = 1, st[1] = Lc, st[0] = C * Lc;
    } else if (k->layout == LAY_TRANSPOSED) { /* [S,Lc,C] storage viewed as [S,C,Lc] */
        st[1] = 1, st[2] = C, st[0] = C * Lc;
    } else { /* gaps everywhere: Lc stride 2, channel stride 2*Lc+1, slot stride + 5 */
        st[2] = 2, st[1] = 2 * Lc + 1, st[0] = C * (2 * Lc + 1) + 5;
    }
}

/* The documented semantics in float64 for one call: out[B,T,C] (padding rows: untouched),
 * cache[S,C,Lc] updated (dense double copy). */
static void conv_oracle(const conv_case *k, const double *x, const double *w, const double *bias,
                        const int64_t *slot, const int64_t *seql, double *cache, double *out) {
    const int64_t C = k->C, W = k->W, T = k->T, Lc = k->Lc;
    double v[64], old[64];
    for (int64_t b = 0; b < k->B; b++) {
        const int64_t q = slot[b];
        if (q < 0) continue;
        for (int64_t c = 0; c < C; c++) {
            double *cq = cache + (q * C + c) * Lc;
            for (int64_t i = 0; i < Lc; i++) old[i] = cq[i];
            for (int64_t j = 0; j < W - 1; j++) {
                int64_t pos = k->circular ? (seql[b] - (W - 1) + j) % Lc : Lc - (W - 1) + j;
                if (pos < 0) pos += Lc;
                v[j] = old[pos];
            }
            for (int64_t t = 0; t < T; t++) v[W - 1 + t] = x[(b * T + t) * C + c];
            for (int64_t t = 0; t < T; t++) {
                double acc = bias ? bias[c] : 0.0;
                for (int64_t j = 0; j < W; j++) acc += w[c * W + j] * v[t + j];
                out[(b * T + t) * C + c] = k->silu ? acc / (1.0 + exp(-acc)) : acc;
            }
            if (k->circular) {
                for (int64_t t = 0; t < T && Lc > 0; t++) cq[(seql[b] + t) % Lc] = v[W - 1 + t];
            } else {
                for (int64_t i = 0; i < Lc; i++)
                    cq[i] = T + i < Lc ? old[T + i] : v[W - 1 + T + i - Lc];
            }
        }
    }
}

/* One call of the op on backend ctx with storage dtype dt (F32 or F64); host values in
 * double; the cache in a guarded buffer of the case's layout, read back into cache. Returns
 * the status; *mem_ok = every byte outside the views untouched. */
static mamba2_status_t conv_call(mamba2_context_t *ctx, mamba2_dtype_t dt, const conv_case *k,
                                 const double *x, const double *w, const double *bias,
                                 const int64_t *slot, const int64_t *seql, double *cache,
                                 double *out, int *mem_ok) {
    const int64_t B = k->B, C = k->C, W = k->W, T = k->T, S = k->S, Lc = k->Lc;
    const size_t es = dt == MAMBA2_DTYPE_F64 ? 8 : 4;
    /* F64 through the float buffers: two floats per element (the strides double) */
    const int64_t m = es / 4;
    int64_t cst[3];
    cache_strides(k, cst);
    const int64_t cshape[3] = {S, C, Lc};
    int64_t cst_f[3] = {cst[0] * m, cst[1] * m, cst[2] * m}, cshape_f[4] = {S, C, Lc, m};
    int64_t cst_f4[4] = {cst_f[0], cst_f[1], cst_f[2], 1};
    gbuf gc, go;
    gbuf_make(&gc, 4, cshape_f, cst_f4);
    const int64_t oshape_f[4] = {B, T, C, m}, ost_f[4] = {T * C * m, C * m, m, 1};
    gbuf_make(&go, 4, oshape_f, ost_f);
    void *xb = th_xmalloc((size_t)(B * T * C + 1) * es), *wb = th_xmalloc((size_t)(C * W) * es),
         *bb = th_xmalloc((size_t)C * es);
    for (int64_t i = 0; i < B * T * C; i++)
        dt == MAMBA2_DTYPE_F64 ? (void)(((double *)xb)[i] = x[i]) : (void)(((float *)xb)[i] = (float)x[i]);
    for (int64_t i = 0; i < C * W; i++)
        dt == MAMBA2_DTYPE_F64 ? (void)(((double *)wb)[i] = w[i]) : (void)(((float *)wb)[i] = (float)w[i]);
    for (int64_t i = 0; i < C; i++)
        dt == MAMBA2_DTYPE_F64 ? (void)(((double *)bb)[i] = bias ? bias[i] : 0)
                               : (void)(((float *)bb)[i] = bias ? (float)bias[i] : 0);
    for (int64_t q = 0; q < S; q++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < Lc; i++) {
                const int64_t o = q * cst[0] + c * cst[1] + i * cst[2];
                const double v = cache[(q * C + c) * Lc + i];
                if (dt == MAMBA2_DTYPE_F64) memcpy(gc.data + 2 * o, &v, 8);
                else gc.data[o] = (float)v;
            }
    const int64_t shx3[3] = {B, T, C}, shx2[2] = {B, C}, shw[2] = {C, W}, shb[1] = {C}, shi[1] = {B};
    const int rank = k->rank2 && T == 1 ? 2 : 3;
    mamba2_tensor_t tx = mamba2_tensor_make(xb, dt, rank, rank == 2 ? shx2 : shx3);
    mamba2_tensor_t to = mamba2_tensor_make(go.data, dt, rank, rank == 2 ? shx2 : shx3);
    mamba2_tensor_t tc = mamba2_tensor_make_strided(gc.data, dt, 3, cshape, cst);
    mamba2_tensor_t tw = mamba2_tensor_make(wb, dt, 2, shw), tb = mamba2_tensor_make(bb, dt, 1, shb);
    int32_t s32[64], q32[64];
    for (int64_t b = 0; b < B; b++) s32[b] = (int32_t)seql[b], q32[b] = (int32_t)slot[b];
    mamba2_tensor_t ts = k->seq64 ? mamba2_tensor_make((void *)seql, MAMBA2_DTYPE_I64, 1, shi)
                                  : mamba2_tensor_make(s32, MAMBA2_DTYPE_I32, 1, shi);
    mamba2_tensor_t ti = k->seq64 ? mamba2_tensor_make(q32, MAMBA2_DTYPE_I32, 1, shi)
                                  : mamba2_tensor_make((void *)slot, MAMBA2_DTYPE_I64, 1, shi);
    mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
    o.bias = k->bias ? &tb : NULL;
    o.state_indices = k->slots ? &ti : NULL;
    o.activation = k->silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    o.cache_seqlens = k->circular ? &ts : NULL;
    mamba2_status_t st = mamba2_conv1d_step(ctx, &to, &tc, &tx, &tw, &o);
    for (int64_t q = 0; q < S; q++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < Lc; i++) {
                const int64_t off = q * cst[0] + c * cst[1] + i * cst[2];
                double v;
                if (dt == MAMBA2_DTYPE_F64) memcpy(&v, gc.data + 2 * off, 8);
                else v = gc.data[off];
                cache[(q * C + c) * Lc + i] = v;
            }
    int ok = gbuf_outside_ok(&gc) && gbuf_outside_ok(&go);
    for (int64_t b = 0; b < B; b++)
        for (int64_t e = 0; e < T * C; e++) {
            const float *p = go.data + (b * T * C + e) * m;
            if (slot[b] < 0) { /* padding row: untouched */
                if (memcmp(p, &SENT32, 4) != 0) ok = 0;
                continue;
            }
            double v;
            if (dt == MAMBA2_DTYPE_F64) memcpy(&v, p, 8);
            else v = *p;
            out[b * T * C + e] = v;
        }
    *mem_ok = ok;
    gbuf_free(&gc);
    gbuf_free(&go);
    free(xb);
    free(wb);
    free(bb);
    return st;
}

/* Shift mode: the candidate's outputs equal mamba2_conv1d_forward with the slots' last W-1
 * inputs as initial state (rows of padding slots compared to nothing). */
static double conv_vs_forward(mamba2_context_t *ctx, const conv_case *k, const double *x,
                              const double *w, const double *bias, const int64_t *slot,
                              const double *cache0, const double *out_step) {
    const int64_t B = k->B, C = k->C, W = k->W, T = k->T, Lc = k->Lc;
    float *xf = th_xmalloc((size_t)(B * T * C) * 4), *of = th_xmalloc((size_t)(B * T * C) * 4);
    float *wf = th_xmalloc((size_t)(C * W) * 4), *bf = th_xmalloc((size_t)C * 4);
    float *init = th_xmalloc((size_t)(B * C * (W > 1 ? W - 1 : 1)) * 4);
    for (int64_t i = 0; i < B * T * C; i++) xf[i] = (float)x[i];
    for (int64_t i = 0; i < C * W; i++) wf[i] = (float)w[i];
    for (int64_t i = 0; i < C; i++) bf[i] = bias ? (float)bias[i] : 0.0f;
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t j = 0; j < W - 1; j++) {
                const int64_t q = slot[b] < 0 ? 0 : slot[b];
                init[(b * C + c) * (W - 1) + j] = (float)cache0[(q * C + c) * Lc + Lc - (W - 1) + j];
            }
    const int64_t shx[3] = {B, T, C}, shw[2] = {C, W}, shb[1] = {C}, shi[3] = {B, C, W - 1};
    mamba2_tensor_t tx = mamba2_tensor_make(xf, MAMBA2_DTYPE_F32, 3, shx),
                    to = mamba2_tensor_make(of, MAMBA2_DTYPE_F32, 3, shx),
                    tw = mamba2_tensor_make(wf, MAMBA2_DTYPE_F32, 2, shw),
                    tb = mamba2_tensor_make(bf, MAMBA2_DTYPE_F32, 1, shb),
                    ti = mamba2_tensor_make(init, MAMBA2_DTYPE_F32, 3, shi);
    mamba2_conv1d_options_t o = mamba2_conv1d_options_default();
    o.bias = bias ? &tb : NULL;
    o.initial_conv_state = &ti;
    o.activation = k->silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    double err = 1.0;
    if (mamba2_conv1d_forward(ctx, &to, NULL, &tx, &tw, &o) == MAMBA2_STATUS_OK) {
        double *a = th_xmalloc((size_t)(B * T * C) * 8), *r = th_xmalloc((size_t)(B * T * C) * 8);
        int64_t n = 0;
        for (int64_t b = 0; b < B; b++)
            if (slot[b] >= 0)
                for (int64_t e = 0; e < T * C; e++) a[n] = out_step[b * T * C + e], r[n++] = of[b * T * C + e];
        err = n ? th_nerr(a, r, n) : 0.0;
        free(a);
        free(r);
    }
    free(xf), free(of), free(wf), free(bf), free(init);
    return err;
}

static void conv_case_run(mamba2_context_t *cand, mamba2_context_t *ref, const conv_case *k,
                          const char *label) {
    const int64_t B = k->B, S = k->S, C = k->C, W = k->W, T = k->T, Lc = k->Lc;
    th_begin("conv1d_step %s W=%lld C=%lld Lc=%lld T=%lld %s %s%s%s%s", label, (long long)W,
             (long long)C, (long long)Lc, (long long)T, k->circular ? "circular" : "shift",
             k->layout == LAY_CONTIG ? "contig" : k->layout == LAY_TRANSPOSED ? "transposed" : "padded",
             k->slots ? " slots" : "", k->rank2 && T == 1 ? " [B,C]" : "", k->seq64 ? " i64" : "");
    double *w = th_xmalloc((size_t)(C * W) * 8), *bias = th_xmalloc((size_t)C * 8);
    double *cache_o = th_xmalloc((size_t)(S * C * Lc + 1) * 8), *cache_r = th_xmalloc((size_t)(S * C * Lc + 1) * 8),
           *cache_c = th_xmalloc((size_t)(S * C * Lc + 1) * 8), *cache0 = th_xmalloc((size_t)(S * C * Lc + 1) * 8);
    double *x = th_xmalloc((size_t)(B * T * C + 1) * 8), *out_o = th_xmalloc((size_t)(B * T * C + 1) * 8),
           *out_r = th_xmalloc((size_t)(B * T * C + 1) * 8), *out_c = th_xmalloc((size_t)(B * T * C + 1) * 8);
    int64_t slot[8], seql[8];
    for (int64_t i = 0; i < C * W; i++) w[i] = (float)(th_rng_normal(&g_rng) * 0.5);
    for (int64_t i = 0; i < C; i++) bias[i] = (float)th_rng_normal(&g_rng);
    for (int64_t i = 0; i < S * C * Lc; i++) cache_o[i] = (float)th_rng_normal(&g_rng);
    memcpy(cache_r, cache_o, (size_t)(S * C * Lc) * 8);
    memcpy(cache_c, cache_o, (size_t)(S * C * Lc) * 8);
    for (int64_t b = 0; b < B; b++) {
        slot[b] = k->slots ? (S - 1 - b) : b; /* permuted, and the last row a padding row */
        if (k->slots && b == 1) slot[b] = -1;
        seql[b] = (int64_t)th_rng_uniform(&g_rng, 0, (double)(3 * Lc + 3));
    }
    double worst_r = 0, worst_c = 0, worst_f = 0;
    int mem_r = 1, mem_c = 1, st_ok = 1;
    for (int call = 0; call < 2; call++) { /* two calls: the caller advances cache_seqlens */
        for (int64_t i = 0; i < B * T * C; i++) x[i] = (float)th_rng_normal(&g_rng);
        memcpy(cache0, cache_c, (size_t)(S * C * Lc) * 8);
        conv_oracle(k, x, w, k->bias ? bias : NULL, slot, seql, cache_o, out_o);
        int m1, m2;
        mamba2_status_t s1 = conv_call(ref, MAMBA2_DTYPE_F64, k, x, w, k->bias ? bias : NULL, slot,
                                       seql, cache_r, out_r, &m1);
        mamba2_status_t s2 = conv_call(cand, MAMBA2_DTYPE_F32, k, x, w, k->bias ? bias : NULL, slot,
                                       seql, cache_c, out_c, &m2);
        if (s1 != MAMBA2_STATUS_OK || s2 != MAMBA2_STATUS_OK) {
            th_fail("call %d: ref %s, candidate %s: %s", call, mamba2_status_string(s1),
                    mamba2_status_string(s2), mamba2_last_error());
            st_ok = 0;
            break;
        }
        mem_r &= m1, mem_c &= m2;
        /* the compared rows: non-padding rows of out, every slot of the cache */
        int64_t n = 0;
        double *a = th_xmalloc((size_t)(B * T * C + S * C * Lc + 1) * 8),
               *r = th_xmalloc((size_t)(B * T * C + S * C * Lc + 1) * 8),
               *g = th_xmalloc((size_t)(B * T * C + S * C * Lc + 1) * 8);
        for (int64_t b = 0; b < B; b++)
            if (slot[b] >= 0)
                for (int64_t e = 0; e < T * C; e++, n++)
                    a[n] = out_o[b * T * C + e], r[n] = out_r[b * T * C + e], g[n] = out_c[b * T * C + e];
        for (int64_t i = 0; i < S * C * Lc; i++, n++) a[n] = cache_o[i], r[n] = cache_r[i], g[n] = cache_c[i];
        if (n) {
            const double er = th_nerr(r, a, n), ec = th_nerr(g, a, n);
            worst_r = er > worst_r ? er : worst_r;
            worst_c = ec > worst_c ? ec : worst_c;
        }
        free(a), free(r), free(g);
        if (!k->circular) {
            const double ef = conv_vs_forward(cand, k, x, w, k->bias ? bias : NULL, slot, cache0, out_c);
            worst_f = ef > worst_f ? ef : worst_f;
        }
        for (int64_t b = 0; b < B; b++) seql[b] += T;
    }
    if (st_ok) {
        th_metric("ref(f64) vs oracle", worst_r, TH_TOL_ORACLE);
        th_metric("candidate vs oracle", worst_c, TH_TOL_F32);
        if (!k->circular) th_metric("candidate vs conv1d_forward", worst_f, TH_TOL_F32);
        th_expect(mem_r && mem_c, "bytes outside the views changed (ref %d, candidate %d)", mem_r, mem_c);
    }
    th_end();
    free(w), free(bias), free(cache_o), free(cache_r), free(cache_c), free(cache0);
    free(x), free(out_o), free(out_r), free(out_c);
}

static void conv_cases(mamba2_context_t *cand, mamba2_context_t *ref, const char *label, int stride) {
    static const int64_t Ws[5] = {1, 2, 3, 4, 8}, Cs[4] = {1, 5, 19, 37}, Ts[3] = {1, 3, 6};
    int idx = 0;
    for (int wi = 0; wi < 5; wi++)
        for (int ci = 0; ci < 4; ci++)
            for (int li = 0; li < 3; li++)
                for (int ti = 0; ti < 3; ti++)
                    for (int mode = 0; mode < 2; mode++)
                        for (int lay = 0; lay < 3; lay++) {
                            const int64_t W = Ws[wi];
                            const int64_t Lc = li == 0 ? W - 1 : li == 1 ? W : W + 3;
                            if (mode == 1 && Lc == 0) continue; /* nothing to hold */
                            if (idx++ % stride) continue;
                            conv_case k = {.B = 3, .S = 4, .C = Cs[ci], .W = W, .Lc = Lc,
                                           .T = Ts[ti], .circular = mode, .layout = lay,
                                           .slots = (idx / 3) % 2, .silu = idx % 2,
                                           .bias = (idx / 2) % 2, .rank2 = (idx / 5) % 2,
                                           .seq64 = (idx / 7) % 2};
                            conv_case_run(cand, ref, &k, label);
                        }
}

/* ---- conv1d_step: bad arguments ----------------------------------------------------------- */

static void conv_bad_args(mamba2_context_t *ctx) {
    th_begin("conv1d_step bad arguments");
    enum { B = 2, C = 3, W = 4, Lc = 5 };
    static float x[B * C], out[B * C], w[C * W], cache[2 * C * Lc + 8];
    int64_t shx[2] = {B, C}, shw[2] = {C, W}, shc[3] = {2, C, Lc}, shb[1] = {B};
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 2, shx),
                    to = mamba2_tensor_make(out, MAMBA2_DTYPE_F32, 2, shx),
                    tw = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 2, shw),
                    tc = mamba2_tensor_make(cache, MAMBA2_DTYPE_F32, 3, shc);
    mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
    th_expect(mamba2_conv1d_step(ctx, &to, &tc, &tx, &tw, &o) == MAMBA2_STATUS_OK, "valid: %s",
              mamba2_last_error());
    /* Lc < W-1 */
    int64_t shs[3] = {2, C, W - 2};
    mamba2_tensor_t tshort = mamba2_tensor_make(cache, MAMBA2_DTYPE_F32, 3, shs);
    mamba2_status_t st = mamba2_conv1d_step(ctx, &to, &tshort, &tx, &tw, &o);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "conv_cache") &&
                  strstr(mamba2_last_error(), "Lc"),
              "Lc = W-2: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    /* stride 0 on Lc: its elements overlap */
    int64_t s0[3] = {C * Lc, Lc, 0};
    mamba2_tensor_t tov = mamba2_tensor_make_strided(cache, MAMBA2_DTYPE_F32, 3, shc, s0);
    st = mamba2_conv1d_step(ctx, &to, &tov, &tx, &tw, &o);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && strstr(mamba2_last_error(), "overlap"),
              "stride 0: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    /* channel and Lc strides interleaving (C stride 2 with Lc stride 1: overlap) */
    int64_t s1[3] = {C * Lc, 2, 1};
    mamba2_tensor_t tov2 = mamba2_tensor_make_strided(cache, MAMBA2_DTYPE_F32, 3, shc, s1);
    st = mamba2_conv1d_step(ctx, &to, &tov2, &tx, &tw, &o);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT, "overlapping strides: %s", mamba2_status_string(st));
    /* cache_seqlens: dtype, shape, sign, overlap */
    int32_t sl[B] = {0, 3};
    float slf[B] = {0, 0};
    int64_t sh3[1] = {3};
    mamba2_tensor_t ts = mamba2_tensor_make(sl, MAMBA2_DTYPE_I32, 1, shb),
                    tsf = mamba2_tensor_make(slf, MAMBA2_DTYPE_F32, 1, shb),
                    ts3 = mamba2_tensor_make(sl, MAMBA2_DTYPE_I32, 1, sh3),
                    tsov = mamba2_tensor_make(cache, MAMBA2_DTYPE_I32, 1, shb);
    o.cache_seqlens = &ts;
    th_expect(mamba2_conv1d_step(ctx, &to, &tc, &tx, &tw, &o) == MAMBA2_STATUS_OK, "circular: %s",
              mamba2_last_error());
    o.cache_seqlens = &tsf;
    st = mamba2_conv1d_step(ctx, &to, &tc, &tx, &tw, &o);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "cache_seqlens"),
              "f32 cache_seqlens: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    o.cache_seqlens = &ts3;
    st = mamba2_conv1d_step(ctx, &to, &tc, &tx, &tw, &o);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "cache_seqlens"),
              "cache_seqlens [3]: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    sl[1] = -1;
    o.cache_seqlens = &ts;
    st = mamba2_conv1d_step(ctx, &to, &tc, &tx, &tw, &o);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && strstr(mamba2_last_error(), "cache_seqlens[1]"),
              "negative cache_seqlens: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    /* ... but a padding row's value is not read */
    int64_t ix[B] = {0, -1};
    mamba2_tensor_t ti = mamba2_tensor_make(ix, MAMBA2_DTYPE_I64, 1, shb);
    o.state_indices = &ti;
    th_expect(mamba2_conv1d_step(ctx, &to, &tc, &tx, &tw, &o) == MAMBA2_STATUS_OK,
              "padding row with cache_seqlens -1: %s", mamba2_last_error());
    o.state_indices = NULL;
    sl[1] = 0;
    memset(cache, 0, sizeof cache); /* its first elements read as cache_seqlens 0 */
    o.cache_seqlens = &tsov;        /* inside the cache */
    st = mamba2_conv1d_step(ctx, &to, &tc, &tx, &tw, &o);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && strstr(mamba2_last_error(), "overlap"),
              "cache_seqlens in the cache: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    /* a struct_size that ends before cache_seqlens: the field is not read (shift mode) */
    memset(cache, 0, sizeof cache);
    for (int i = 0; i < B * C; i++) x[i] = (float)(i + 1);
    for (int i = 0; i < C * W; i++) w[i] = 1.0f;
    o.cache_seqlens = &tsf; /* invalid if it were read */
    o.struct_size = (uint32_t)offsetof(mamba2_conv1d_step_options_t, cache_seqlens);
    st = mamba2_conv1d_step(ctx, &to, &tc, &tx, &tw, &o);
    th_expect(st == MAMBA2_STATUS_OK && cache[Lc - 1] == 1.0f && cache[0] == 0.0f,
              "v1 struct_size: %s \"%s\", cache[Lc-1] = %g", mamba2_status_string(st),
              mamba2_last_error(), (double)cache[Lc - 1]);
    th_end();
}

/* ---- ssd_step with a half state ----------------------------------------------------------- */

typedef struct ssd_case {
    int64_t B, S, T, H, G, P, N;
    mamba2_dtype_t sdt;
    int with_all, slots, opts;
} ssd_case;

/* v rounded once to nearest even in bf16/f16, written independently of the library: v is
 * first rounded to float32 "to odd" (13+ spare bits, so no double-rounding error), then to
 * the half format (bf16: on the bits; f16: scaled to 11 significant bits and rint). */
static uint16_t half_of(double v, mamba2_dtype_t dt) {
    float g = (float)v;
    if ((double)g != v) {
        if (fabs((double)g) > fabs(v)) g = nextafterf(g, 0.0f);
        uint32_t u;
        memcpy(&u, &g, 4);
        u |= 1u;
        memcpy(&g, &u, 4);
    }
    uint32_t u;
    memcpy(&u, &g, 4);
    if (dt == MAMBA2_DTYPE_BF16) return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    const double a = fabs((double)g);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a >= 65520.0) return sign | 0x7c00u;
    if (a < ldexp(1.0, -14)) return sign | (uint16_t)rint(a * ldexp(1.0, 24));
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    double m = rint(a * ldexp(1.0, 11 - e)); /* 11 significant bits */
    if (m >= 2048.0) m /= 2.0, e++;
    if (e + 14 >= 31) return sign | 0x7c00u;
    return sign | (uint16_t)(((e + 14) << 10) | ((uint16_t)m & 0x3ffu));
}
static double from_half(uint16_t h, mamba2_dtype_t dt) {
    if (dt == MAMBA2_DTYPE_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}
/* distance in units in the last place between two finite halves of one sign class */
static int ulp_dist(uint16_t a, uint16_t b) {
    const int ia = (a & 0x8000) ? -(int)(a & 0x7fff) : (int)a;
    const int ib = (b & 0x8000) ? -(int)(b & 0x7fff) : (int)b;
    return abs(ia - ib);
}

typedef struct ssd_io {
    float *x, *dt, *A, *Bm, *Cm, *D, *z, *dtb, *out;
    uint16_t *cache, *all;
    int64_t *ix;
} ssd_io;

static mamba2_status_t ssd_run(mamba2_context_t *ctx, const ssd_case *k, ssd_io *io, int64_t t0,
                               int64_t nt) {
    const int64_t B = k->B, T = k->T, H = k->H, G = k->G, P = k->P, N = k->N;
    const int64_t shx[4] = {B, nt, H, P}, sdt[3] = {B, nt, H}, sbc[4] = {B, nt, G, N},
                  sh[1] = {H}, sc[4] = {k->S, H, P, N}, sas[5] = {B, nt, H, P, N}, sb[1] = {B};
    const int64_t stx[4] = {T * H * P, H * P, P, 1}, stdt[3] = {T * H, H, 1},
                  stbc[4] = {T * G * N, G * N, N, 1}, stas[5] = {T * H * P * N, H * P * N, P * N, N, 1};
    mamba2_tensor_t tx = mamba2_tensor_make_strided(io->x + t0 * H * P, MAMBA2_DTYPE_F32, 4, shx, stx),
                    tz = mamba2_tensor_make_strided(io->z + t0 * H * P, MAMBA2_DTYPE_F32, 4, shx, stx),
                    to = mamba2_tensor_make_strided(io->out + t0 * H * P, MAMBA2_DTYPE_F32, 4, shx, stx),
                    tdt = mamba2_tensor_make_strided(io->dt + t0 * H, MAMBA2_DTYPE_F32, 3, sdt, stdt),
                    tB = mamba2_tensor_make_strided(io->Bm + t0 * G * N, MAMBA2_DTYPE_F32, 4, sbc, stbc),
                    tC = mamba2_tensor_make_strided(io->Cm + t0 * G * N, MAMBA2_DTYPE_F32, 4, sbc, stbc),
                    tA = mamba2_tensor_make(io->A, MAMBA2_DTYPE_F32, 1, sh),
                    tD = mamba2_tensor_make(io->D, MAMBA2_DTYPE_F32, 1, sh),
                    tdb = mamba2_tensor_make(io->dtb, MAMBA2_DTYPE_F32, 1, sh),
                    tc = mamba2_tensor_make(io->cache, k->sdt, 4, sc),
                    tas = mamba2_tensor_make_strided(io->all + t0 * H * P * N, k->sdt, 5, sas, stas),
                    ti = mamba2_tensor_make(io->ix, MAMBA2_DTYPE_I64, 1, sb);
    mamba2_ssd_step_options_t o = mamba2_ssd_step_options_default();
    if (k->opts) {
        o.D = &tD, o.z = &tz, o.dt_bias = &tdb, o.dt_softplus = 1;
        o.dt_limit_lo = 0.001, o.dt_limit_hi = 0.5;
    }
    o.state_indices = k->slots ? &ti : NULL;
    return mamba2_ssd_step(ctx, &tc, &to, k->with_all ? &tas : NULL, &tx, &tdt, &tA, &tB, &tC, &o);
}

static void ssd_io_make(ssd_io *io, const ssd_case *k, const ssd_io *from) {
    const int64_t B = k->B, T = k->T, H = k->H, G = k->G, P = k->P, N = k->N, S = k->S;
    const int64_t nx = B * T * H * P, nbc = B * T * G * N, nc = S * H * P * N, nas = B * T * H * P * N;
#define AL(f, n, sz) io->f = th_xmalloc((size_t)(n) * (sz) + 8)
    AL(x, nx, 4), AL(z, nx, 4), AL(out, nx, 4), AL(dt, B * T * H, 4), AL(Bm, nbc, 4), AL(Cm, nbc, 4);
    AL(A, H, 4), AL(D, H, 4), AL(dtb, H, 4), AL(cache, nc, 2), AL(all, nas, 2), AL(ix, B, 8);
#undef AL
    if (from) {
        memcpy(io->x, from->x, (size_t)nx * 4), memcpy(io->z, from->z, (size_t)nx * 4);
        memcpy(io->dt, from->dt, (size_t)(B * T * H) * 4), memcpy(io->Bm, from->Bm, (size_t)nbc * 4);
        memcpy(io->Cm, from->Cm, (size_t)nbc * 4), memcpy(io->A, from->A, (size_t)H * 4);
        memcpy(io->D, from->D, (size_t)H * 4), memcpy(io->dtb, from->dtb, (size_t)H * 4);
        memcpy(io->cache, from->cache, (size_t)nc * 2), memcpy(io->ix, from->ix, (size_t)B * 8);
    } else {
        for (int64_t i = 0; i < nx; i++) io->x[i] = (float)th_rng_normal(&g_rng), io->z[i] = (float)th_rng_normal(&g_rng);
        for (int64_t i = 0; i < B * T * H; i++) io->dt[i] = (float)th_rng_uniform(&g_rng, 0.01, 0.11);
        for (int64_t i = 0; i < nbc; i++)
            io->Bm[i] = (float)(th_rng_normal(&g_rng) / 5), io->Cm[i] = (float)(th_rng_normal(&g_rng) / 5);
        for (int64_t i = 0; i < H; i++) {
            io->A[i] = (float)-th_rng_uniform(&g_rng, 0.1, 0.5), io->D[i] = (float)th_rng_normal(&g_rng);
            io->dtb[i] = (float)(0.1 * th_rng_normal(&g_rng));
        }
        for (int64_t i = 0; i < nc; i++) io->cache[i] = half_of(th_rng_normal(&g_rng) / 5, k->sdt);
        for (int64_t b = 0; b < B; b++) io->ix[b] = k->slots ? (b == 1 ? -1 : S - 1 - b) : b;
    }
    memset(io->out, 0xFF, (size_t)nx * 4);
    memset(io->all, 0xFF, (size_t)nas * 2);
}
static void ssd_io_free(ssd_io *io) {
    free(io->x), free(io->z), free(io->out), free(io->dt), free(io->Bm), free(io->Cm);
    free(io->A), free(io->D), free(io->dtb), free(io->cache), free(io->all), free(io->ix);
}

static void ssd_half_case(mamba2_context_t *cand, mamba2_context_t *ref, const ssd_case *k,
                          const char *label) {
    const int64_t B = k->B, T = k->T, H = k->H, P = k->P, N = k->N, S = k->S, G = k->G;
    th_begin("ssd_step %s %s state B=%lld T=%lld H=%lld G=%lld P=%lld N=%lld%s%s%s", label,
             k->sdt == MAMBA2_DTYPE_BF16 ? "bf16" : "f16", (long long)B, (long long)T, (long long)H,
             (long long)G, (long long)P, (long long)N, k->with_all ? " all_states" : "",
             k->slots ? " slots" : "", k->opts ? " D,z,dt_bias,softplus,limit" : "");
    ssd_io r, c, c1;
    ssd_io_make(&r, k, NULL);
    ssd_io_make(&c, k, &r);
    ssd_io_make(&c1, k, &r);
    /* the test's own float64 update of the first token, rounded once: the reference's stored
     * state after a one-token call must be exactly that */
    ssd_case k1 = *k;
    k1.T = 1;
    ssd_io r1;
    ssd_io_make(&r1, &k1, NULL);
    for (int64_t i = 0; i < S * H * P * N; i++) r1.cache[i] = r.cache[i];
    for (int64_t b = 0; b < B; b++) r1.ix[b] = r.ix[b];
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < H * P; i++) r1.x[b * H * P + i] = r.x[b * T * H * P + i];
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < H; i++) r1.dt[b * H + i] = r.dt[b * T * H + i];
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < G * N; i++)
            r1.Bm[b * G * N + i] = r.Bm[b * T * G * N + i], r1.Cm[b * G * N + i] = r.Cm[b * T * G * N + i];
    memcpy(r1.A, r.A, (size_t)H * 4), memcpy(r1.D, r.D, (size_t)H * 4), memcpy(r1.dtb, r.dtb, (size_t)H * 4);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < H * P; i++) r1.z[b * H * P + i] = r.z[b * T * H * P + i];
    mamba2_status_t s = ssd_run(ref, &k1, &r1, 0, 1);
    th_expect(s == MAMBA2_STATUS_OK, "ref one token: %s", mamba2_last_error());
    int64_t exact_bad = 0;
    for (int64_t b = 0; b < B && s == MAMBA2_STATUS_OK; b++) {
        const int64_t q = r.ix[b];
        if (q < 0) continue;
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / (H / G);
            double d = (double)r.dt[b * T * H + h] + (k->opts ? (double)r.dtb[h] : 0.0);
            if (k->opts) {
                if (d <= 20.0) d = log1p(exp(d));
                if (d < 0.001) d = 0.001;
                if (d > 0.5) d = 0.5;
            }
            const double a = exp(d * (double)r.A[h]);
            for (int64_t p = 0; p < P; p++)
                for (int64_t n = 0; n < N; n++) {
                    const int64_t e = ((q * H + h) * P + p) * N + n;
                    const double old = from_half(r.cache[e], k->sdt);
                    const double v = a * old + d * (double)r.x[b * T * H * P + h * P + p] *
                                                   (double)r.Bm[b * T * G * N + g * N + n];
                    if (half_of(v, k->sdt) != r1.cache[e]) exact_bad++;
                }
        }
    }
    th_expect(exact_bad == 0, "%lld reference state elements are not the float64 update rounded once",
              (long long)exact_bad);

    /* reference vs candidate over T tokens in one call; candidate: T calls of one token */
    mamba2_status_t sr = ssd_run(ref, k, &r, 0, T), sc = ssd_run(cand, k, &c, 0, T);
    mamba2_status_t s1 = MAMBA2_STATUS_OK;
    for (int64_t t = 0; t < T && s1 == MAMBA2_STATUS_OK; t++) s1 = ssd_run(cand, k, &c1, t, 1);
    if (!th_expect(sr == MAMBA2_STATUS_OK && sc == MAMBA2_STATUS_OK && s1 == MAMBA2_STATUS_OK,
                   "ref %s, candidate %s, per token %s: %s", mamba2_status_string(sr),
                   mamba2_status_string(sc), mamba2_status_string(s1), mamba2_last_error())) {
        th_end();
        goto done;
    }
    {
        const int64_t nx = B * T * H * P, nc = S * H * P * N, nas = B * T * H * P * N;
        double *a = th_xmalloc((size_t)(nx + nc + nas) * 8), *g = th_xmalloc((size_t)(nx + nc + nas) * 8);
        int64_t n = 0, far = 0, ulp1 = 0, untouched_bad = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t e = 0; e < T * H * P; e++) {
                const int64_t i = b * T * H * P + e;
                if (r.ix[b] < 0) { /* padding rows untouched */
                    uint32_t u1, u2;
                    memcpy(&u1, &c.out[i], 4), memcpy(&u2, &r.out[i], 4);
                    if (u1 != 0xFFFFFFFFu || u2 != 0xFFFFFFFFu) untouched_bad++;
                    continue;
                }
                a[n] = r.out[i], g[n++] = c.out[i];
            }
        for (int64_t i = 0; i < nc; i++) {
            a[n] = from_half(r.cache[i], k->sdt), g[n++] = from_half(c.cache[i], k->sdt);
            const int du = ulp_dist(r.cache[i], c.cache[i]);
            if (du > 1) far++;
            if (du == 1) ulp1++;
        }
        if (k->with_all)
            for (int64_t b = 0; b < B; b++)
                for (int64_t e = 0; e < T * H * P * N; e++) {
                    const int64_t i = b * T * H * P * N + e;
                    if (r.ix[b] < 0) {
                        if (c.all[i] != 0xFFFF) untouched_bad++;
                        continue;
                    }
                    if (ulp_dist(r.all[i], c.all[i]) > 1) far++;
                    /* all_states[b, T-1] is the stored slot */
                    if (e >= (T - 1) * H * P * N &&
                        c.all[i] != c.cache[r.ix[b] * H * P * N + (e - (T - 1) * H * P * N)])
                        untouched_bad++;
                }
        th_metric("candidate vs ref (out, state)", th_nerr(g, a, n), 1e-2);
        /* one token: both round the same stored state's update once, so they may differ by
         * one ulp (a float32 result on the other side of a rounding boundary); over T > 1
         * tokens such a difference feeds the next update, and the SPEC bound above applies */
        if (T == 1)
            th_expect(far == 0, "%lld state elements more than one ulp from the reference",
                      (long long)far);
        th_note("%lld of %lld state elements one ulp apart", (long long)ulp1, (long long)nc);
        th_expect(untouched_bad == 0, "%lld padding-row or all_states[T-1] mismatches", (long long)untouched_bad);
        th_expect(memcmp(c.cache, c1.cache, (size_t)nc * 2) == 0 &&
                      memcmp(c.out, c1.out, (size_t)nx * 4) == 0 &&
                      (!k->with_all || memcmp(c.all, c1.all, (size_t)nas * 2) == 0),
                  "one call of T tokens differs from T calls of one token");
        free(a), free(g);
    }
    th_end();
done:
    ssd_io_free(&r), ssd_io_free(&c), ssd_io_free(&c1), ssd_io_free(&r1);
}

static void ssd_bad_args(mamba2_context_t *ctx, mamba2_context_t *ref) {
    th_begin("ssd_step state dtype arguments");
    ssd_case k = {.B = 1, .S = 1, .T = 1, .H = 2, .G = 1, .P = 2, .N = 4, .sdt = MAMBA2_DTYPE_BF16,
                  .with_all = 1};
    ssd_io io;
    ssd_io_make(&io, &k, NULL);
    th_expect(ssd_run(ctx, &k, &io, 0, 1) == MAMBA2_STATUS_OK, "bf16: %s", mamba2_last_error());
    const int64_t shx[3] = {1, 2, 2}, sdt[2] = {1, 2}, sbc[3] = {1, 1, 4}, sh[1] = {2},
                  sc[4] = {1, 2, 2, 4};
    mamba2_tensor_t tx = mamba2_tensor_make(io.x, MAMBA2_DTYPE_F32, 3, shx),
                    to = mamba2_tensor_make(io.out, MAMBA2_DTYPE_F32, 3, shx),
                    tdt = mamba2_tensor_make(io.dt, MAMBA2_DTYPE_F32, 2, sdt),
                    tB = mamba2_tensor_make(io.Bm, MAMBA2_DTYPE_F32, 3, sbc),
                    tC = mamba2_tensor_make(io.Cm, MAMBA2_DTYPE_F32, 3, sbc),
                    tA = mamba2_tensor_make(io.A, MAMBA2_DTYPE_F32, 1, sh),
                    tci = mamba2_tensor_make(io.cache, MAMBA2_DTYPE_I32, 4, sc),
                    tc = mamba2_tensor_make(io.cache, MAMBA2_DTYPE_BF16, 4, sc),
                    tas = mamba2_tensor_make(io.all, MAMBA2_DTYPE_F16, 4, sc);
    mamba2_status_t st = mamba2_ssd_step(ctx, &tci, &to, NULL, &tx, &tdt, &tA, &tB, &tC, NULL);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "state_cache"),
              "i32 state: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    st = mamba2_ssd_step(ctx, &tc, &to, &tas, &tx, &tdt, &tA, &tB, &tC, NULL);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "all_states"),
              "f16 all_states with a bf16 state: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    /* f64 activations (reference) keep an f64 state */
    double x64[4] = {0}, o64[4], dt64[2] = {0.1, 0.1}, b64[4] = {0}, a64[2] = {-1, -1};
    mamba2_tensor_t tx64 = mamba2_tensor_make(x64, MAMBA2_DTYPE_F64, 3, shx),
                    to64 = mamba2_tensor_make(o64, MAMBA2_DTYPE_F64, 3, shx),
                    tdt64 = mamba2_tensor_make(dt64, MAMBA2_DTYPE_F64, 2, sdt),
                    tb64 = mamba2_tensor_make(b64, MAMBA2_DTYPE_F64, 3, sbc),
                    ta64 = mamba2_tensor_make(a64, MAMBA2_DTYPE_F64, 1, sh);
    st = mamba2_ssd_step(ref, &tc, &to64, NULL, &tx64, &tdt64, &ta64, &tb64, &tb64, NULL);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && strstr(mamba2_last_error(), "f64"),
              "bf16 state with f64 activations: %s \"%s\"", mamba2_status_string(st), mamba2_last_error());
    ssd_io_free(&io);
    th_end();
}

int main(int argc, char **argv) {
    const char *which = "cpu";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) which = argv[++i];
    }
    const int gpu = !strcmp(which, "opencl") || !strcmp(which, "cuda");
    const mamba2_backend_t gk = strcmp(which, "cuda") ? MAMBA2_BACKEND_OPENCL : MAMBA2_BACKEND_CUDA;
    if (!gpu && strcmp(which, "cpu")) {
        printf("usage: test_step_layouts [--backend cpu|opencl|cuda] [-q]\n");
        return 2;
    }
    if (gpu) { /* skip (77) only when there is no such device */
        mamba2_context_t *cl = NULL;
        if (mamba2_context_create(&cl, gk, 1) == MAMBA2_STATUS_BACKEND_UNAVAILABLE) {
            printf("SKIP: %s\n", mamba2_last_error());
            return 77;
        }
        mamba2_context_destroy(cl);
    }
    th_rng_seed(&g_rng, 0x5eed18u);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    mamba2_context_t *cand = th_ctx(gpu ? gk : MAMBA2_BACKEND_CPU, 2, NULL);
    conv_cases(cand, ref, which, gpu ? 5 : 1);
    if (!gpu) {
        mamba2_context_t *sc = th_ctx(MAMBA2_BACKEND_CPU, 1, "scalar");
        conv_cases(sc, ref, "cpu-scalar", 7);
        mamba2_context_destroy(sc);
    }
    conv_bad_args(cand);
    conv_bad_args(ref);
    static const int64_t Ps[2] = {3, 8}, Ns[3] = {5, 16, 33};
    int idx = 0;
    for (int di = 0; di < 2; di++)
        for (int pi = 0; pi < 2; pi++)
            for (int ni = 0; ni < 3; ni++)
                for (int ti = 0; ti < 2; ti++, idx++) {
                    ssd_case k = {.B = 3, .S = 4, .T = ti ? 4 : 1, .H = 4, .G = 2, .P = Ps[pi],
                                  .N = Ns[ni], .sdt = di ? MAMBA2_DTYPE_F16 : MAMBA2_DTYPE_BF16,
                                  .with_all = idx % 2, .slots = (idx / 2) % 2, .opts = (idx / 3) % 2};
                    ssd_half_case(cand, ref, &k, which);
                }
    ssd_bad_args(cand, ref);
    mamba2_context_destroy(cand);
    mamba2_context_destroy(ref);
    return th_finish();
}
