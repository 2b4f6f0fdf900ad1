/*
 * test_rmsnorm.c — the gated RMSNorm (SPEC §5): CPU backend against the float64 reference,
 * the reference against finite differences and against the equations written out here,
 * memory safety, argument validation and thread-count determinism.
 *
 * Units:
 *   formula_*   reference (f64) forward vs the SPEC §5 equations evaluated in this file, and
 *               per-group statistics vs whole-row ones (mamba_ssm's group_size = D/ngroups
 *               vs a norm over the whole row: must differ when ngroups > 1);
 *   fd_*        reference (f64) backward vs central finite differences of L = Σ out ∘ dout
 *               for dx, dz, dweight, dbias;
 *   <case>/...  each case on the CPU backend (both kernel sets, 1 and 2 threads, with and
 *               without rstd reuse) and on the reference fed f32, vs the f64 reference:
 *               out, rstd and every gradient within TH_TOL_F32; guard bytes, gaps of strided
 *               views and unchanged inputs checked; outputs pre-filled with NaN; results
 *               identical across thread counts and with/without rstd reuse;
 *   grad_subsets_*  any subset of {dx, dz, dweight, dbias} requested alone gives the same
 *               bits as all of them (CPU kernel sets and reference);
 *   api_*       invalid arguments: the status, a message naming the tensor, no output
 *               touched.
 * `test_rmsnorm --bench [threads]` instead times the CPU forward and backward at a Mamba-2 shape
 * (M = 2048, D = 5120) and a memcpy loop in the same run, and prints GB/s.
 */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#include "harness.h"

/* ------------------------------------------------------------------ guarded buffers --- */

#define MAXBUF 16

typedef struct gbuf {
    unsigned char *alloc, *data, *mask, *snap;
    size_t bytes;
    int is_out;
} gbuf;

typedef struct inst {
    int nbuf;
    gbuf b[MAXBUF];
    mamba2_dtype_t dt;
    /* tensors; .data == NULL when absent */
    mamba2_tensor_t x, z, w, bias, out, rstd, dout, dx, dz, dw, db;
} inst;

static int buf_new(inst *I, size_t bytes, int is_out) {
    gbuf *g = &I->b[I->nbuf];
    memset(g, 0, sizeof *g);
    size_t total = bytes + 2 * TH_GUARD;
    g->alloc = th_xmalloc(total);
    g->data = g->alloc + TH_GUARD;
    g->bytes = bytes;
    g->is_out = is_out;
    memset(g->alloc, TH_PAT_GUARD, total);
    if (!is_out) memset(g->data, TH_PAT_UNSET, bytes); /* padding of inputs: NaN */
    g->mask = calloc(total, 1);
    g->snap = th_xmalloc(total);
    return I->nbuf++;
}

/* A rank-1 or rank-2 view into buffer `bi` at element offset off, row stride ld. */
static mamba2_tensor_t view(inst *I, int bi, int64_t off, int rank, int64_t rows, int64_t cols,
                            int64_t ld) {
    gbuf *g = &I->b[bi];
    size_t es = mamba2_dtype_size(I->dt);
    int64_t shape[2], stride[2];
    if (rank == 1) {
        shape[0] = cols;
        stride[0] = 1;
    } else {
        shape[0] = rows;
        shape[1] = cols;
        stride[0] = ld;
        stride[1] = 1;
    }
    mamba2_tensor_t t = mamba2_tensor_make_strided(g->data + (size_t)off * es, I->dt, rank, shape, stride);
    for (int64_t r = 0; r < (rank == 1 ? 1 : rows); r++)
        memset(g->mask + TH_GUARD + (size_t)(off + r * ld) * es, 1, (size_t)cols * es);
    return t;
}

/* Own buffer for a [rows, cols] tensor with row stride cols + pad (rank 1 when rows < 0). */
static mamba2_tensor_t own(inst *I, int is_out, int64_t rows, int64_t cols, int64_t pad) {
    size_t es = mamba2_dtype_size(I->dt);
    int rank = rows < 0 ? 1 : 2;
    int64_t r = rows < 0 ? 1 : rows, ld = cols + pad;
    int64_t span = r > 0 ? (r - 1) * ld + cols : 0;
    int bi = buf_new(I, (size_t)span * es, is_out);
    return view(I, bi, 0, rank, r, cols, ld);
}

/* Outputs back to NaN (payload) / guard pattern (gaps), inputs snapshotted. */
static void arm(inst *I) {
    for (int i = 0; i < I->nbuf; i++) {
        gbuf *g = &I->b[i];
        size_t total = g->bytes + 2 * TH_GUARD;
        if (g->is_out)
            for (size_t k = 0; k < total; k++) g->alloc[k] = g->mask[k] ? TH_PAT_UNSET : TH_PAT_GUARD;
        memcpy(g->snap, g->alloc, total);
    }
}

/* Guards and gaps intact, inputs unchanged. */
static int mem_ok(const inst *I, char *msg, size_t n) {
    for (int i = 0; i < I->nbuf; i++) {
        const gbuf *g = &I->b[i];
        size_t total = g->bytes + 2 * TH_GUARD;
        for (size_t k = 0; k < total; k++) {
            if (g->is_out && g->mask[k]) continue;
            if (g->alloc[k] != g->snap[k]) {
                snprintf(msg, n, "buffer %d (%s) byte %zd (relative to payload) changed", i,
                         g->is_out ? "output" : "input", (ptrdiff_t)k - TH_GUARD);
                return 0;
            }
        }
    }
    return 1;
}

/* Payload bytes of every output buffer equal? */
static int outs_equal(const inst *a, const inst *b, char *msg, size_t n) {
    for (int i = 0; i < a->nbuf; i++) {
        if (!a->b[i].is_out) continue;
        if (a->b[i].bytes != b->b[i].bytes || memcmp(a->b[i].alloc, b->b[i].alloc, a->b[i].bytes + 2 * TH_GUARD)) {
            snprintf(msg, n, "output buffer %d differs", i);
            return 0;
        }
    }
    return 1;
}

static void inst_free(inst *I) {
    for (int i = 0; i < I->nbuf; i++) {
        free(I->b[i].alloc);
        free(I->b[i].mask);
        free(I->b[i].snap);
    }
    memset(I, 0, sizeof *I);
}

#define T(t) ((t).data || (t).rank ? &(t) : NULL)

/* ------------------------------------------------------------------------- cases --- */

typedef struct rcase {
    const char *name;
    int64_t M, D, S; /* S = group_size (0 = D) */
    int z, bias, nbg;
    int layout;      /* 0: own buffers with row padding `pad`; 1: Mamba-2 in_proj views */
    int64_t pad;
    double eps;
    uint64_t seed;
} rcase;

/* Logical data of one case (row-major doubles, already float32-rounded). */
typedef struct rdata {
    double *x, *z, *w, *b, *dout;
} rdata;

static double f32r(double v) { return (double)(float)v; }

static void data_make(rdata *d, const rcase *c) {
    th_rng r;
    th_rng_seed(&r, c->seed ? c->seed : 0x5eed + (uint64_t)(c->M * 131 + c->D * 7 + c->S));
    int64_t n = c->M * c->D;
    d->x = th_xmalloc((size_t)(n + 1) * sizeof(double));
    d->z = th_xmalloc((size_t)(n + 1) * sizeof(double));
    d->dout = th_xmalloc((size_t)(n + 1) * sizeof(double));
    d->w = th_xmalloc((size_t)c->D * sizeof(double));
    d->b = th_xmalloc((size_t)c->D * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        d->x[i] = f32r(th_rng_normal(&r));
        d->z[i] = f32r(th_rng_normal(&r));
        d->dout[i] = f32r(th_rng_normal(&r));
    }
    for (int64_t i = 0; i < c->D; i++) {
        d->w[i] = f32r(1.0 + 0.5 * th_rng_normal(&r)); /* signed, around mamba_ssm's ones init */
        d->b[i] = f32r(0.5 * th_rng_normal(&r));
    }
}

static void data_free(rdata *d) {
    free(d->x);
    free(d->z);
    free(d->w);
    free(d->b);
    free(d->dout);
}

static int64_t groups_of(const rcase *c) { return c->D / (c->S ? c->S : c->D); }

static void inst_make(inst *I, const rcase *c, const rdata *d, mamba2_dtype_t dt, int layout) {
    memset(I, 0, sizeof *I);
    I->dt = dt;
    const int64_t M = c->M, D = c->D, G = groups_of(c), p = c->pad;
    if (layout == 1) {
        /* z | x | 3 spare in one input row (in_proj output), dz | dx | 3 spare in one output row */
        int64_t W = 2 * D + 3;
        size_t es = mamba2_dtype_size(dt);
        int ib = buf_new(I, (size_t)(M > 0 ? (M - 1) * W + 2 * D : 0) * es, 0);
        int ob = buf_new(I, (size_t)(M > 0 ? (M - 1) * W + 2 * D : 0) * es, 1);
        if (c->z) I->z = view(I, ib, 0, 2, M, D, W);
        I->x = view(I, ib, D, 2, M, D, W);
        if (c->z) I->dz = view(I, ob, 0, 2, M, D, W);
        I->dx = view(I, ob, D, 2, M, D, W);
    } else {
        I->x = own(I, 0, M, D, p);
        if (c->z) I->z = own(I, 0, M, D, p + 1);
        I->dx = own(I, 1, M, D, p + 2);
        if (c->z) I->dz = own(I, 1, M, D, p + 3);
    }
    I->w = own(I, 0, -1, D, 0);
    if (c->bias) I->bias = own(I, 0, -1, D, 0);
    I->out = own(I, 1, M, D, p ? p + 4 : 0);
    I->rstd = own(I, 1, M, G, p ? 1 : 0);
    I->dout = own(I, 0, M, D, p ? p + 5 : 0);
    I->dw = own(I, 1, -1, D, 0);
    if (c->bias) I->db = own(I, 1, -1, D, 0);
    th_tensor_scatter(&I->x, d->x);
    if (c->z) th_tensor_scatter(&I->z, d->z);
    th_tensor_scatter(&I->w, d->w);
    if (c->bias) th_tensor_scatter(&I->bias, d->b);
    th_tensor_scatter(&I->dout, d->dout);
    arm(I);
}

static mamba2_rmsnorm_gated_options_t opts_of(const rcase *c) {
    mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
    o.eps = c->eps;
    o.group_size = c->S;
    o.norm_before_gate = c->nbg;
    return o;
}

/* ws_mode 0: NULL workspace (library allocates); 1: exactly the queried size, guarded tail */
static mamba2_status_t call_fwd(mamba2_context_t *ctx, inst *I, const rcase *c, int want_rstd, int ws_mode) {
    mamba2_rmsnorm_gated_options_t o = opts_of(c);
    const mamba2_tensor_t *rs = want_rstd ? &I->rstd : NULL;
    if (!ws_mode)
        return mamba2_rmsnorm_gated_forward(ctx, &I->out, rs, &I->x, T(I->z), &I->w, T(I->bias), &o, NULL, 0);
    size_t need = 0;
    mamba2_status_t st = mamba2_rmsnorm_gated_forward_workspace_size(ctx, &I->out, rs, &I->x, T(I->z), &I->w,
                                                                      T(I->bias), &o, &need);
    if (st != MAMBA2_STATUS_OK) return st;
    unsigned char *ws = th_xmalloc(need + 64);
    memset(ws, TH_PAT_GUARD, need + 64);
    st = mamba2_rmsnorm_gated_forward(ctx, &I->out, rs, &I->x, T(I->z), &I->w, T(I->bias), &o, need ? ws : NULL, need);
    for (size_t k = need; k < need + 64; k++)
        if (ws[k] != TH_PAT_GUARD) {
            th_fail("forward wrote past its workspace (%zu bytes) at byte %zu", need, k);
            break;
        }
    free(ws);
    return st;
}

static mamba2_status_t call_bwd(mamba2_context_t *ctx, inst *I, const rcase *c, int use_rstd, int ws_mode) {
    mamba2_rmsnorm_gated_options_t o = opts_of(c);
    mamba2_rmsnorm_gated_grads_t g = {0, &I->dx, T(I->dz), &I->dw, T(I->db)};
    const mamba2_tensor_t *rs = use_rstd ? &I->rstd : NULL;
    if (!ws_mode)
        return mamba2_rmsnorm_gated_backward(ctx, &g, &I->dout, &I->x, T(I->z), &I->w, T(I->bias), rs, &o, NULL, 0);
    size_t need = 0;
    mamba2_status_t st = mamba2_rmsnorm_gated_backward_workspace_size(ctx, &g, &I->dout, &I->x, T(I->z), &I->w,
                                                                       T(I->bias), rs, &o, &need);
    if (st != MAMBA2_STATUS_OK) return st;
    unsigned char *ws = th_xmalloc(need + 64);
    memset(ws, TH_PAT_GUARD, need + 64);
    st = mamba2_rmsnorm_gated_backward(ctx, &g, &I->dout, &I->x, T(I->z), &I->w, T(I->bias), rs, &o,
                                       need ? ws : NULL, need);
    for (size_t k = need; k < need + 64; k++)
        if (ws[k] != TH_PAT_GUARD) {
            th_fail("backward wrote past its workspace (%zu bytes) at byte %zu", need, k);
            break;
        }
    free(ws);
    return st;
}

/* Results of one run, gathered to row-major doubles. */
enum { R_OUT, R_RSTD, R_DX, R_DZ, R_DW, R_DB, R_N };
static const char *const rname[R_N] = {"out", "rstd", "dx", "dz", "dweight", "dbias"};

typedef struct res {
    double *v[R_N];
    int64_t n[R_N];
} res;

static void res_read(res *r, const inst *I) {
    const mamba2_tensor_t *t[R_N] = {&I->out, &I->rstd, &I->dx, T(I->dz), &I->dw, T(I->db)};
    for (int i = 0; i < R_N; i++) {
        r->v[i] = NULL;
        r->n[i] = 0;
        if (!t[i]) continue;
        r->n[i] = th_numel(t[i]->rank, t[i]->shape);
        r->v[i] = th_xmalloc((size_t)(r->n[i] + 1) * sizeof(double));
        th_tensor_gather(t[i], r->v[i]);
    }
}

static void res_free(res *r) {
    for (int i = 0; i < R_N; i++) free(r->v[i]);
}

/* Full forward (with rstd) + backward (rstd reused or not) on one instance. */
static int run_both(mamba2_context_t *ctx, inst *I, const rcase *c, int use_rstd, int ws_mode) {
    arm(I);
    mamba2_status_t st = call_fwd(ctx, I, c, 1, ws_mode);
    if (st == MAMBA2_STATUS_OK) st = call_bwd(ctx, I, c, use_rstd, ws_mode);
    if (st != MAMBA2_STATUS_OK) {
        th_fail("returned %s: %s", mamba2_status_string(st), mamba2_last_error());
        return 0;
    }
    char msg[256];
    return th_expect(mem_ok(I, msg, sizeof msg), "%s", msg);
}

/* ------------------------------------------------------------------ in-test formula --- */

static double silu(double s) { return s / (1.0 + exp(-s)); }

/* SPEC §5 written out for one row-major problem, in double. */
static void formula(const rcase *c, const rdata *d, double *out) {
    const int64_t S = c->S ? c->S : c->D;
    for (int64_t m = 0; m < c->M; m++)
        for (int64_t g0 = 0; g0 < c->D; g0 += S) {
            double ms = 0.0;
            for (int64_t k = g0; k < g0 + S; k++) {
                double x = d->x[m * c->D + k];
                double v = (c->z && !c->nbg) ? x * silu(d->z[m * c->D + k]) : x;
                ms += v * v / (double)S;
            }
            for (int64_t k = g0; k < g0 + S; k++) {
                double x = d->x[m * c->D + k];
                double v = (c->z && !c->nbg) ? x * silu(d->z[m * c->D + k]) : x;
                double o = v / sqrt(ms + c->eps) * d->w[k];
                if (c->bias) o += d->b[k];
                if (c->z && c->nbg) o *= silu(d->z[m * c->D + k]);
                out[m * c->D + k] = o;
            }
        }
}

static void ref_forward_f64(mamba2_context_t *ref, const rcase *c, const rdata *d, double *out) {
    inst I;
    inst_make(&I, c, d, MAMBA2_DTYPE_F64, 0);
    mamba2_status_t st = call_fwd(ref, &I, c, 0, 0);
    if (st != MAMBA2_STATUS_OK) th_fail("ref forward: %s: %s", mamba2_status_string(st), mamba2_last_error());
    th_tensor_gather(&I.out, out);
    inst_free(&I);
}

static void test_formula(mamba2_context_t *ref) {
    /* every combination of mode, z, bias on a grouped problem */
    for (int mode = 0; mode < 8; mode++) {
        rcase c = {"formula", 5, 48, 12, mode & 1, (mode >> 1) & 1, (mode >> 2) & 1, 0, 0, 1e-5, 11};
        th_begin("formula_z%d_bias%d_nbg%d", c.z, c.bias, c.nbg);
        rdata d;
        data_make(&d, &c);
        double *a = th_xmalloc(sizeof(double) * 240), *b = th_xmalloc(sizeof(double) * 240);
        formula(&c, &d, a);
        ref_forward_f64(ref, &c, &d, b);
        th_metric("out", th_nerr(b, a, 240), TH_TOL_ORACLE);
        free(a);
        free(b);
        data_free(&d);
        th_end();
    }

    /* Per-group statistics (mamba_ssm, group_size = D/ngroups) vs whole-row statistics (a norm
     * over the whole row, as ports that ignore ngroups compute): groups of very different
     * scale make the two clearly different, and only the grouped one matches the formula. */
    th_begin("formula_group_vs_row_stats");
    rcase cg = {"grp", 3, 64, 16, 1, 0, 0, 0, 0, 1e-5, 12};
    rdata d;
    data_make(&d, &cg);
    for (int64_t m = 0; m < cg.M; m++)
        for (int64_t k = 0; k < cg.D; k++) d.x[m * cg.D + k] = f32r(d.x[m * cg.D + k] * pow(10.0, (double)(k / 16)));
    double *grouped = th_xmalloc(sizeof(double) * 192), *row = th_xmalloc(sizeof(double) * 192),
           *want = th_xmalloc(sizeof(double) * 192);
    formula(&cg, &d, want);
    ref_forward_f64(ref, &cg, &d, grouped);
    rcase cr = cg;
    cr.S = 0; /* whole row */
    ref_forward_f64(ref, &cr, &d, row);
    double diff = th_nerr(row, grouped, 192);
    th_metric("grouped_vs_formula", th_nerr(grouped, want, 192), TH_TOL_ORACLE);
    th_note("grouped_vs_row=%.2e", diff);
    th_expect(diff > 0.1, "per-group and whole-row statistics agree (%.3e); groups not applied", diff);
    /* the first group (smallest scale) is crushed by the row statistics */
    double g0 = 0, r0 = 0;
    for (int k = 0; k < 16; k++) {
        g0 += fabs(grouped[k]);
        r0 += fabs(row[k]);
    }
    th_expect(r0 < 0.01 * g0, "row statistics should shrink the small-scale group (%.3e vs %.3e)", r0, g0);
    free(grouped);
    free(row);
    free(want);
    data_free(&d);
    th_end();
}

/* ------------------------------------------------------------ finite differences --- */

static double loss(mamba2_context_t *ref, const rcase *c, const rdata *d) {
    int64_t n = c->M * c->D;
    double *out = th_xmalloc(sizeof(double) * (size_t)(n + 1));
    ref_forward_f64(ref, c, d, out);
    double l = 0.0;
    for (int64_t i = 0; i < n; i++) l += out[i] * d->dout[i];
    free(out);
    return l;
}

static void test_fd(mamba2_context_t *ref, const rcase *c) {
    th_begin("fd_%s", c->name);
    rdata d;
    data_make(&d, c);
    inst I;
    inst_make(&I, c, &d, MAMBA2_DTYPE_F64, 0);
    mamba2_status_t st = call_bwd(ref, &I, c, 0, 1);
    if (st != MAMBA2_STATUS_OK) {
        th_fail("ref backward: %s: %s", mamba2_status_string(st), mamba2_last_error());
        inst_free(&I);
        data_free(&d);
        return;
    }
    res r;
    res_read(&r, &I);
    struct {
        int id;
        double *vals;
        int64_t n;
    } params[4] = {{R_DX, d.x, c->M * c->D}, {R_DZ, d.z, c->z ? c->M * c->D : 0},
                   {R_DW, d.w, c->D}, {R_DB, d.b, c->bias ? c->D : 0}};
    for (int p = 0; p < 4; p++) {
        if (!params[p].n) continue;
        double *fd = th_xmalloc(sizeof(double) * (size_t)params[p].n);
        for (int64_t i = 0; i < params[p].n; i++) {
            double v = params[p].vals[i], h = 1e-6 * (fabs(v) > 1.0 ? fabs(v) : 1.0);
            params[p].vals[i] = v + h;
            double lp = loss(ref, c, &d);
            params[p].vals[i] = v - h;
            double lm = loss(ref, c, &d);
            params[p].vals[i] = v;
            fd[i] = (lp - lm) / (2.0 * h);
        }
        th_metric(rname[params[p].id], th_nerr(r.v[params[p].id], fd, params[p].n), TH_TOL_FD);
        free(fd);
    }
    res_free(&r);
    inst_free(&I);
    data_free(&d);
    th_end();
}

/* -------------------------------------------------------------- CPU vs reference --- */

static void compare(const res *got, const res *want, int skip_rstd) {
    for (int i = 0; i < R_N; i++) {
        if (!want->v[i] || (skip_rstd && i == R_RSTD)) continue;
        th_metric(rname[i], th_nerr(got->v[i], want->v[i], want->n[i]), TH_TOL_F32);
    }
}

static void test_case(mamba2_context_t *ref, mamba2_context_t *cpu[2][2], const rcase *c) {
    rdata d;
    data_make(&d, c);

    /* the oracle: reference in f64, contiguous, statistics recomputed in the backward */
    inst R;
    inst_make(&R, c, &d, MAMBA2_DTYPE_F64, 0);
    res want;
    th_begin("%s/ref_f64", c->name);
    run_both(ref, &R, c, 0, 1);
    res_read(&want, &R);
    for (int i = 0; i < R_N; i++)
        if (want.v[i]) th_expect(th_all_finite(want.v[i], want.n[i]), "reference %s not finite", rname[i]);
    th_end();

    /* the reference fed f32 (strided layout) */
    {
        inst I;
        inst_make(&I, c, &d, MAMBA2_DTYPE_F32, c->layout);
        th_begin("%s/ref_f32", c->name);
        if (run_both(ref, &I, c, 1, 0)) {
            res got;
            res_read(&got, &I);
            compare(&got, &want, 0);
            res_free(&got);
        }
        th_end();
        inst_free(&I);
    }

    /* CPU: both kernel sets, 1 and 2 threads, rstd reused or recomputed */
    for (int isa = 0; isa < 2; isa++) {
        inst base;
        inst_make(&base, c, &d, MAMBA2_DTYPE_F32, c->layout);
        th_begin("%s/cpu_%s_1thr", c->name, isa ? "scalar" : mamba2_context_get_isa(cpu[isa][0]));
        int ok = run_both(cpu[isa][0], &base, c, 1, 1);
        if (ok) {
            res got;
            res_read(&got, &base);
            compare(&got, &want, 0);
            res_free(&got);
        }
        th_end();
        if (!ok) {
            inst_free(&base);
            continue;
        }
        th_begin("%s/cpu_%s_same_bits", c->name, isa ? "scalar" : mamba2_context_get_isa(cpu[isa][0]));
        char msg[256];
        inst other;
        inst_make(&other, c, &d, MAMBA2_DTYPE_F32, c->layout);
        /* 2 threads, library-allocated workspace, statistics recomputed: same bits */
        if (run_both(cpu[isa][1], &other, c, 0, 0))
            th_expect(outs_equal(&base, &other, msg, sizeof msg), "2 threads, rstd recomputed: %s", msg);
        /* again on the same context: same bits */
        if (run_both(cpu[isa][1], &other, c, 1, 1))
            th_expect(outs_equal(&base, &other, msg, sizeof msg), "2 threads, repeated: %s", msg);
        th_end();
        inst_free(&other);
        inst_free(&base);
    }
    res_free(&want);
    inst_free(&R);
    data_free(&d);
}

/* M == 0: nothing to normalise; dweight and dbias are sums over no rows (0). */
static void test_empty(mamba2_context_t *ctx, const char *name) {
    th_begin("M0/%s", name);
    rcase c = {"M0", 0, 24, 8, 1, 1, 0, 0, 0, 1e-5, 1};
    rdata d;
    data_make(&d, &c);
    inst I;
    inst_make(&I, &c, &d, MAMBA2_DTYPE_F32, 0);
    if (run_both(ctx, &I, &c, 1, 1)) {
        double v[24], zero[24] = {0};
        th_tensor_gather(&I.dw, v);
        th_metric("dweight", th_nerr(v, zero, 24), TH_TOL_EXACT);
        th_tensor_gather(&I.db, v);
        th_metric("dbias", th_nerr(v, zero, 24), TH_TOL_EXACT);
    }
    inst_free(&I);
    data_free(&d);
    th_end();
}

/* Determinism across 1, 2 and 3 threads on a problem with many backward blocks. */
static void test_threads(const char *isa) {
    th_begin("threads_1_2_3_%s", isa ? isa : "default");
    rcase c = {"thr", 300, 136, 34, 1, 1, 0, 0, 3, 1e-5, 21};
    rdata d;
    data_make(&d, &c);
    inst I[3];
    const int32_t nt[3] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, nt[k], isa);
        inst_make(&I[k], &c, &d, MAMBA2_DTYPE_F32, 0);
        run_both(ctx, &I[k], &c, k == 1, 1);
        mamba2_context_destroy(ctx);
    }
    char msg[256];
    th_expect(outs_equal(&I[0], &I[1], msg, sizeof msg), "1 vs 2 threads: %s", msg);
    th_expect(outs_equal(&I[0], &I[2], msg, sizeof msg), "1 vs 3 threads: %s", msg);
    for (int k = 0; k < 3; k++) inst_free(&I[k]);
    data_free(&d);
    th_end();
}

/* Requesting a subset of the gradients gives the same bits as requesting them all. */
static void test_grad_subsets(mamba2_context_t *ctx, const char *isa) {
    rcase c = {"subsets", 19, 40, 10, 1, 1, 0, 0, 2, 1e-5, 41};
    for (int nbg = 0; nbg < 2; nbg++) {
        c.nbg = nbg;
        th_begin("grad_subsets_nbg%d_%s", nbg, isa);
        rdata d;
        data_make(&d, &c);
        inst full;
        inst_make(&full, &c, &d, MAMBA2_DTYPE_F32, 0);
        if (!run_both(ctx, &full, &c, 0, 1)) goto done; /* statistics recomputed, as below */
        res want;
        res_read(&want, &full);
        /* bit k of mask: dx, dz, dweight, dbias */
        for (unsigned mask = 1; mask < 15; mask++) {
            inst I;
            inst_make(&I, &c, &d, MAMBA2_DTYPE_F32, 0);
            arm(&I);
            mamba2_rmsnorm_gated_options_t o = opts_of(&c);
            mamba2_rmsnorm_gated_grads_t g = {0, (mask & 1) ? &I.dx : NULL, (mask & 2) ? &I.dz : NULL,
                                              (mask & 4) ? &I.dw : NULL, (mask & 8) ? &I.db : NULL};
            mamba2_status_t st = mamba2_rmsnorm_gated_backward(ctx, &g, &I.dout, &I.x, &I.z, &I.w, &I.bias,
                                                               NULL, &o, NULL, 0);
            if (!th_expect(st == MAMBA2_STATUS_OK, "mask %u: %s", mask, mamba2_last_error())) {
                inst_free(&I);
                continue;
            }
            char msg[256];
            th_expect(mem_ok(&I, msg, sizeof msg), "mask %u: %s", mask, msg);
            const int ids[4] = {R_DX, R_DZ, R_DW, R_DB};
            const mamba2_tensor_t *ts[4] = {&I.dx, &I.dz, &I.dw, &I.db};
            for (int k = 0; k < 4; k++) {
                if (!(mask & (1u << k))) continue;
                double *v = th_xmalloc(sizeof(double) * (size_t)want.n[ids[k]]);
                th_tensor_gather(ts[k], v);
                th_expect(!memcmp(v, want.v[ids[k]], sizeof(double) * (size_t)want.n[ids[k]]),
                          "mask %u: %s differs from the all-gradients run", mask, rname[ids[k]]);
                free(v);
            }
            inst_free(&I);
        }
        res_free(&want);
    done:
        inst_free(&full);
        data_free(&d);
        th_end();
    }
}

/* ------------------------------------------------------------- invalid arguments --- */

typedef struct api_env {
    float x[6 * 20], z[6 * 20], w[20], b[20], out[6 * 20], rstd[6 * 4], dout[6 * 20];
    float dx[6 * 20], dz[6 * 20], dw[20], db[20];
    double xd[6 * 20], wd[20], outd[6 * 20];
    mamba2_tensor_t tx, tz, tw, tb, tout, trstd, tdout, tdx, tdz, tdw, tdb;
} api_env;

static void api_env_init(api_env *e) {
    const int64_t md[2] = {6, 20}, d1[1] = {20}, mg[2] = {6, 4};
    for (int i = 0; i < 120; i++) e->x[i] = e->z[i] = e->dout[i] = (float)((i % 7) - 3) * 0.5f;
    for (int i = 0; i < 20; i++) e->w[i] = e->b[i] = 1.0f;
    memset(e->out, 0x5A, sizeof e->out);
    memset(e->dx, 0x5A, sizeof e->dx);
    memset(e->dw, 0x5A, sizeof e->dw);
    e->tx = mamba2_tensor_make(e->x, MAMBA2_DTYPE_F32, 2, md);
    e->tz = mamba2_tensor_make(e->z, MAMBA2_DTYPE_F32, 2, md);
    e->tw = mamba2_tensor_make(e->w, MAMBA2_DTYPE_F32, 1, d1);
    e->tb = mamba2_tensor_make(e->b, MAMBA2_DTYPE_F32, 1, d1);
    e->tout = mamba2_tensor_make(e->out, MAMBA2_DTYPE_F32, 2, md);
    e->trstd = mamba2_tensor_make(e->rstd, MAMBA2_DTYPE_F32, 2, mg);
    e->tdout = mamba2_tensor_make(e->dout, MAMBA2_DTYPE_F32, 2, md);
    e->tdx = mamba2_tensor_make(e->dx, MAMBA2_DTYPE_F32, 2, md);
    e->tdz = mamba2_tensor_make(e->dz, MAMBA2_DTYPE_F32, 2, md);
    e->tdw = mamba2_tensor_make(e->dw, MAMBA2_DTYPE_F32, 1, d1);
    e->tdb = mamba2_tensor_make(e->db, MAMBA2_DTYPE_F32, 1, d1);
}

/* The call failed with `want`, its message names every word in `words` (space-separated),
 * and out/dx/dw are untouched. */
static void api_expect(const char *unit, mamba2_status_t st, mamba2_status_t want, const char *words,
                       const api_env *e) {
    th_begin("api_%s", unit);
    const char *msg = mamba2_last_error();
    th_expect(st == want, "status %s, expected %s (%s)", mamba2_status_string(st), mamba2_status_string(want), msg);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", words);
    for (char *w = strtok(buf, " "); w; w = strtok(NULL, " "))
        th_expect(th_has_word(msg, w) || strstr(msg, w) != NULL, "message \"%s\" lacks \"%s\"", msg, w);
    unsigned char pat[sizeof e->out];
    memset(pat, 0x5A, sizeof pat);
    th_expect(!memcmp(e->out, pat, sizeof e->out) && !memcmp(e->dx, pat, sizeof e->dx) &&
                  !memcmp(e->dw, pat, sizeof e->dw),
              "an output was written by a failing call");
    th_note("msg=\"%s\"", msg);
    th_end();
}

static void test_api(mamba2_context_t *cpu, mamba2_context_t *ref) {
    api_env E, *e = &E;
    api_env_init(e);
    mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
    o.group_size = 5;
    mamba2_rmsnorm_gated_grads_t g = {0, &e->tdx, &e->tdz, &e->tdw, &e->tdb};
    mamba2_status_t st;
    const mamba2_status_t INV = MAMBA2_STATUS_INVALID_ARGUMENT;

#define FWD(ctx_, out_, rstd_, x_, z_, w_, b_, o_) \
    mamba2_rmsnorm_gated_forward(ctx_, out_, rstd_, x_, z_, w_, b_, o_, NULL, 0)
#define BWD(ctx_, g_, dout_, x_, z_, w_, b_, r_, o_) \
    mamba2_rmsnorm_gated_backward(ctx_, g_, dout_, x_, z_, w_, b_, r_, o_, NULL, 0)

    /* sanity: the valid call succeeds on both backends (then re-arm the outputs) */
    th_begin("api_valid_call");
    th_expect(FWD(cpu, &e->tout, &e->trstd, &e->tx, &e->tz, &e->tw, &e->tb, &o) == MAMBA2_STATUS_OK, "cpu forward: %s", mamba2_last_error());
    th_expect(BWD(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, &e->trstd, &o) == MAMBA2_STATUS_OK, "cpu backward: %s", mamba2_last_error());
    th_expect(FWD(ref, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, NULL) == MAMBA2_STATUS_OK, "ref forward: %s", mamba2_last_error());
    th_end();
    api_env_init(e);

    st = FWD(NULL, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, &o);
    api_expect("ctx_null", st, INV, "ctx", e);
    st = FWD(cpu, &e->tout, NULL, NULL, NULL, &e->tw, NULL, &o);
    api_expect("x_null", st, INV, "x NULL", e);
    st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, NULL, NULL, &o);
    api_expect("weight_null", st, INV, "weight NULL", e);
    st = FWD(cpu, NULL, NULL, &e->tx, NULL, &e->tw, NULL, &o);
    api_expect("out_null", st, INV, "out NULL", e);
    st = BWD(cpu, &g, NULL, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &o);
    api_expect("dout_null", st, INV, "dout NULL", e);
    st = BWD(cpu, NULL, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &o);
    api_expect("grads_null", st, INV, "grads NULL", e);
    {
        size_t *null_size = NULL;
        st = mamba2_rmsnorm_gated_forward_workspace_size(cpu, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, &o, null_size);
        api_expect("workspace_size_null", st, INV, "workspace_size", e);
    }

    /* ranks and shapes: expected vs actual */
    {
        mamba2_tensor_t t = e->tx;
        t.rank = 3;
        t.shape[2] = 1;
        t.stride[2] = 1;
        st = FWD(cpu, &e->tout, NULL, &t, NULL, &e->tw, NULL, &o);
        api_expect("x_rank", st, INV, "x rank", e);
    }
    {
        const int64_t sh[2] = {6, 21};
        float big[6 * 21];
        mamba2_tensor_t t = mamba2_tensor_make(big, MAMBA2_DTYPE_F32, 2, sh);
        st = FWD(cpu, &e->tout, NULL, &e->tx, &t, &e->tw, NULL, &o);
        api_expect("z_shape", st, INV, "z [6,21] [6,20]", e);
    }
    {
        mamba2_tensor_t t = e->tw;
        t.shape[0] = 19;
        st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, &t, NULL, &o);
        api_expect("weight_shape", st, INV, "weight [19] [20]", e);
        st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, &e->tw, &t, &o);
        api_expect("bias_shape", st, INV, "bias [19] [20]", e);
        st = BWD(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, &e->tout, &o);
        api_expect("rstd_in_shape", st, INV, "rstd [6,20] [6,4]", e);
    }
    {
        mamba2_tensor_t t = e->trstd;
        t.shape[1] = 5;
        st = FWD(cpu, &e->tout, &t, &e->tx, NULL, &e->tw, NULL, &o);
        api_expect("rstd_shape", st, INV, "rstd [6,5] [6,4]", e);
    }
    {
        mamba2_tensor_t t = e->tdout;
        t.shape[0] = 5;
        st = BWD(cpu, &g, &t, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &o);
        api_expect("dout_shape", st, INV, "dout [5,20] [6,20]", e);
    }

    /* options */
    {
        mamba2_rmsnorm_gated_options_t b = o;
        b.group_size = 6;
        st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, &b);
        api_expect("group_size_not_dividing", st, INV, "group_size 6 D=20", e);
        b.group_size = -4;
        st = BWD(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &b);
        api_expect("group_size_negative", st, INV, "group_size", e);
        b = o;
        b.eps = -1e-6;
        st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, &b);
        api_expect("eps_negative", st, INV, "eps", e);
        b.eps = NAN;
        st = FWD(ref, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, &b);
        api_expect("eps_nan", st, INV, "eps", e);
        b.eps = INFINITY;
        st = BWD(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &b);
        api_expect("eps_inf", st, INV, "eps", e);
    }

    /* strides */
    {
        const int64_t sh[2] = {6, 10}, sd[2] = {20, 2};
        mamba2_tensor_t t = mamba2_tensor_make_strided(e->x, MAMBA2_DTYPE_F32, 2, sh, sd);
        mamba2_tensor_t ot = mamba2_tensor_make_strided(e->out, MAMBA2_DTYPE_F32, 2, sh, sd);
        mamba2_tensor_t wt = e->tw;
        wt.shape[0] = 10;
        st = FWD(cpu, &ot, NULL, &t, NULL, &wt, NULL, NULL);
        api_expect("x_last_dim_not_contiguous", st, INV, "x contiguous", e);
        mamba2_tensor_t w2 = e->tw;
        w2.stride[0] = 2;
        w2.shape[0] = 10;
        mamba2_tensor_t xs = e->tx;
        xs.shape[1] = 10;
        mamba2_tensor_t os = e->tout;
        os.shape[1] = 10;
        st = FWD(cpu, &os, NULL, &xs, NULL, &w2, NULL, NULL);
        api_expect("weight_not_contiguous", st, INV, "weight contiguous", e);
        mamba2_tensor_t o2 = e->tout;
        o2.stride[0] = 10; /* rows of 20 overlapping each other */
        st = FWD(cpu, &o2, NULL, &e->tx, NULL, &e->tw, NULL, &o);
        api_expect("out_self_overlap", st, INV, "out overlap", e);
    }

    /* overlaps */
    {
        mamba2_tensor_t alias = e->tout;
        alias.data = e->x;
        st = FWD(cpu, &alias, NULL, &e->tx, NULL, &e->tw, NULL, &o);
        api_expect("out_overlaps_x", st, INV, "out x overlaps", e);
        alias = e->tout;
        alias.data = e->z;
        st = FWD(ref, &alias, NULL, &e->tx, &e->tz, &e->tw, NULL, &o);
        api_expect("out_overlaps_z", st, INV, "out z overlaps", e);
        mamba2_tensor_t dxa = e->tdx;
        dxa.data = e->dout + 1;
        mamba2_rmsnorm_gated_grads_t g2 = {0, &dxa, NULL, NULL, NULL};
        st = BWD(cpu, &g2, &e->tdout, &e->tx, NULL, &e->tw, NULL, NULL, &o);
        api_expect("dx_overlaps_dout", st, INV, "dx dout overlaps", e);
        mamba2_tensor_t dza = e->tdz;
        dza.data = e->dx;
        mamba2_rmsnorm_gated_grads_t g3 = {0, &e->tdx, &dza, NULL, NULL};
        st = BWD(cpu, &g3, &e->tdout, &e->tx, &e->tz, &e->tw, NULL, NULL, &o);
        api_expect("dz_overlaps_dx", st, INV, "dz dx overlaps", e);
        mamba2_tensor_t ra = e->trstd;
        ra.data = e->w;
        st = FWD(cpu, &e->tout, &ra, &e->tx, NULL, &e->tw, NULL, &o);
        api_expect("rstd_overlaps_weight", st, INV, "rstd weight overlaps", e);
    }

    /* gradients without their input */
    {
        mamba2_rmsnorm_gated_grads_t g2 = {0, &e->tdx, &e->tdz, NULL, NULL};
        st = BWD(cpu, &g2, &e->tdout, &e->tx, NULL, &e->tw, NULL, NULL, &o);
        api_expect("dz_without_z", st, INV, "dz z", e);
        mamba2_rmsnorm_gated_grads_t g3 = {0, &e->tdx, NULL, &e->tdw, &e->tdb};
        st = BWD(ref, &g3, &e->tdout, &e->tx, NULL, &e->tw, NULL, NULL, &o);
        api_expect("dbias_without_bias", st, INV, "dbias bias", e);
    }

    /* dtypes */
    {
        const int64_t md[2] = {6, 20}, d1[1] = {20};
        mamba2_tensor_t xd = mamba2_tensor_make(e->xd, MAMBA2_DTYPE_F64, 2, md);
        mamba2_tensor_t wd = mamba2_tensor_make(e->wd, MAMBA2_DTYPE_F64, 1, d1);
        mamba2_tensor_t od = mamba2_tensor_make(e->outd, MAMBA2_DTYPE_F64, 2, md);
        st = FWD(cpu, &od, NULL, &xd, NULL, &wd, NULL, &o);
        api_expect("f64_on_cpu", st, MAMBA2_STATUS_UNSUPPORTED, "f64 cpu", e);
        mamba2_tensor_t xb = e->tx;
        xb.dtype = MAMBA2_DTYPE_BF16;
        st = FWD(ref, &e->tout, NULL, &xb, NULL, &e->tw, NULL, &o);
        api_expect("bf16_on_ref", st, MAMBA2_STATUS_UNSUPPORTED, "bf16 ref", e);
        mamba2_tensor_t xi = e->tx;
        xi.dtype = MAMBA2_DTYPE_I32;
        st = FWD(ref, &e->tout, NULL, &xi, NULL, &e->tw, NULL, &o);
        api_expect("i32_x", st, INV, "x i32", e);
        st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, &wd, NULL, &o);
        api_expect("weight_f64_with_f32_x", st, INV, "weight f64 f32", e);
        st = FWD(ref, &e->tout, NULL, &xd, NULL, &wd, NULL, &o);
        api_expect("out_f32_with_f64_x", st, INV, "out f32 f64", e);
    }

    /* workspace too small */
    {
        size_t need = 0;
        st = mamba2_rmsnorm_gated_backward_workspace_size(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &o, &need);
        th_begin("api_workspace_query");
        th_expect(st == MAMBA2_STATUS_OK && need > 0, "backward workspace query: %s, %zu bytes", mamba2_status_string(st), need);
        th_end();
        unsigned char small[64];
        st = mamba2_rmsnorm_gated_backward(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &o, small,
                                           need ? need - 1 : 0);
        api_expect("workspace_too_small", st, MAMBA2_STATUS_WORKSPACE_TOO_SMALL, "workspace", e);
    }
#undef FWD
#undef BWD
}

/* ------------------------------------------------------------------------- bench --- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The copy peer: each of two threads memcpy's half of the buffer (STREAM-copy-like). */
struct copy_arg {
    float *dst;
    const float *src;
    size_t n;
};
static void *copy_half(void *a_) {
    struct copy_arg *a = a_;
    memcpy(a->dst, a->src, a->n * sizeof(float));
    return NULL;
}
static double copy2(float *dst, const float *src, size_t n) {
    pthread_t th;
    struct copy_arg a = {dst, src, n / 2}, b = {dst + n / 2, src + n / 2, n - n / 2};
    double t0 = now_s();
    pthread_create(&th, NULL, copy_half, &a);
    copy_half(&b);
    pthread_join(th, NULL);
    return now_s() - t0;
}

static float *falloc64(int64_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)n * sizeof(float)) != 0) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

/* A quick measurement: warm up once, then the best of `reps`. */
static int bench(int32_t nthreads) {
    const int64_t M = 2048, D = 5120, n = M * D;
    const int reps = 20;
    mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, nthreads, NULL);
    /* 64-byte aligned, as PyTorch's CPU allocator gives */
    float *x = falloc64(n), *z = falloc64(n), *out = falloc64(n), *dout = falloc64(n),
          *dx = falloc64(n), *dz = falloc64(n), *w = falloc64(D), *dw = falloc64(D),
          *rstd = falloc64(M);
    th_rng r;
    th_rng_seed(&r, 7);
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)th_rng_normal(&r);
        z[i] = (float)th_rng_normal(&r);
        dout[i] = (float)th_rng_normal(&r);
        out[i] = dx[i] = dz[i] = 0.0f;
    }
    for (int64_t i = 0; i < D; i++) w[i] = 1.0f;
    const int64_t md[2] = {M, D}, d1[1] = {D}, m1[2] = {M, 1};
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 2, md), tz = mamba2_tensor_make(z, MAMBA2_DTYPE_F32, 2, md),
                    to = mamba2_tensor_make(out, MAMBA2_DTYPE_F32, 2, md), td = mamba2_tensor_make(dout, MAMBA2_DTYPE_F32, 2, md),
                    tdx = mamba2_tensor_make(dx, MAMBA2_DTYPE_F32, 2, md), tdz = mamba2_tensor_make(dz, MAMBA2_DTYPE_F32, 2, md),
                    tw = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 1, d1), tdw = mamba2_tensor_make(dw, MAMBA2_DTYPE_F32, 1, d1),
                    tr = mamba2_tensor_make(rstd, MAMBA2_DTYPE_F32, 2, m1);
    mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
    o.group_size = D; /* ngroups = 1 */
    mamba2_rmsnorm_gated_grads_t g = {0, &tdx, &tdz, &tdw, NULL};
    size_t wsz = 0;
    mamba2_rmsnorm_gated_backward_workspace_size(ctx, &g, &td, &tx, &tz, &tw, NULL, &tr, &o, &wsz);
    void *ws = th_xmalloc(wsz ? wsz : 1);

    double tf = 1e30, tb = 1e30, tc = 1e30, tc2 = 1e30;
    for (int k = 0; k <= reps; k++) {
        double t0 = now_s();
        mamba2_status_t st = mamba2_rmsnorm_gated_forward(ctx, &to, &tr, &tx, &tz, &tw, NULL, &o, NULL, 0);
        double t1 = now_s();
        st |= mamba2_rmsnorm_gated_backward(ctx, &g, &td, &tx, &tz, &tw, NULL, &tr, &o, ws, wsz);
        double t2 = now_s();
        memcpy(dx, x, sizeof(float) * n);
        double t3 = now_s();
        double t2c = copy2(dz, x, (size_t)n);
        if (st) {
            printf("bench call failed: %s\n", mamba2_last_error());
            return 1;
        }
        if (k) { /* k == 0 warms up */
            if (t1 - t0 < tf) tf = t1 - t0;
            if (t2 - t1 < tb) tb = t2 - t1;
            if (t3 - t2 < tc) tc = t3 - t2;
            if (t2c < tc2) tc2 = t2c;
        }
    }
    const double e = sizeof(float);
    const double bf = (3.0 * n + D + M) * e;        /* read x, z, weight; write out, rstd        */
    const double bb = (5.0 * n + 2.0 * D + M) * e;  /* read x, z, dout, weight, rstd; write dx, dz, dweight */
    const double bc = 2.0 * n * e;                   /* memcpy: read + write                      */
    printf("rmsnorm_gated bench: M=%lld D=%lld group_size=%lld (ngroups=1), z, no bias, %d threads, isa %s; best of %d\n",
           (long long)M, (long long)D, (long long)D, (int)mamba2_context_get_num_threads(ctx),
           mamba2_context_get_isa(ctx), reps);
    printf("  forward : %8.3f ms  %6.2f GB/s  (%.0f MB moved)  %.0f%% of 2-thread memcpy\n", tf * 1e3, bf / tf * 1e-9,
           bf * 1e-6, 100.0 * (bf / tf) / (bc / tc2));
    printf("  backward: %8.3f ms  %6.2f GB/s  (%.0f MB moved)  %.0f%% of 2-thread memcpy\n", tb * 1e3, bb / tb * 1e-9,
           bb * 1e-6, 100.0 * (bb / tb) / (bc / tc2));
    printf("  memcpy  : %8.3f ms  %6.2f GB/s  (%.0f MB moved, 1 thread)\n", tc * 1e3, bc / tc * 1e-9, bc * 1e-6);
    printf("  memcpy  : %8.3f ms  %6.2f GB/s  (%.0f MB moved, 2 threads)\n", tc2 * 1e3, bc / tc2 * 1e-9, bc * 1e-6);
    free(x), free(z), free(out), free(dout), free(dx), free(dz), free(w), free(dw), free(rstd), free(ws);
    mamba2_context_destroy(ctx);
    return 0;
}

/* ------------------------------------------------------------------------- main --- */

static const rcase cases[] = {
    /* name                      M    D    S   z  b  nbg layout pad eps */
    {"D64_row_z_gatefirst",      33,  64,  0,  1, 0, 0, 0, 0, 1e-5, 0},
    {"D64_g16_z_gatefirst_bias", 33,  64, 16,  1, 1, 0, 0, 3, 1e-5, 0},
    {"D64_g16_z_normfirst_bias", 33,  64, 16,  1, 1, 1, 0, 3, 1e-5, 0},
    {"D64_row_noz",              20,  64,  0,  0, 0, 0, 0, 1, 1e-6, 0},
    {"D64_g16_noz_nbg_bias",     20,  64, 16,  0, 1, 1, 0, 0, 1e-6, 0},
    {"D60_g15_z_gatefirst_bias", 17,  60, 15,  1, 1, 0, 0, 5, 1e-5, 0},
    {"D60_g15_z_normfirst",      17,  60, 15,  1, 0, 1, 0, 5, 1e-5, 0},
    {"D60_row_z",                17,  60, 60,  1, 1, 0, 0, 0, 1e-5, 0},
    {"D44_M1_z_gatefirst",        1,  44,  0,  1, 1, 0, 0, 2, 1e-5, 0},
    {"D44_M1_z_normfirst",        1,  44, 11,  1, 1, 1, 0, 2, 1e-5, 0},
    {"D5_tiny_z",                 3,   5,  0,  1, 1, 0, 0, 1, 1e-5, 0},
    {"D3_group1",                 4,   3,  1,  1, 1, 1, 0, 0, 1e-3, 0}, /* S=1: dx ~ eps, keep it conditioned */
    {"D520_g130_many_blocks",   200, 520, 130, 1, 1, 0, 0, 7, 1e-5, 0},
    {"D256_g64_inproj_views",    50, 256, 64,  1, 1, 0, 1, 0, 1e-5, 0},
    {"D256_row_inproj_nbg",      50, 256,  0,  1, 0, 1, 1, 0, 1e-5, 0},
    {"D5120_row_mamba2",         24, 5120, 0,  1, 0, 0, 0, 0, 1e-5, 0},
    {"D5120_g640_mamba2_ng8",    24, 5120, 640, 1, 0, 0, 0, 0, 1e-5, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const rcase fd_cases[] = {
    {"gatefirst_g4_bias",  3, 24, 6, 1, 1, 0, 0, 0, 1e-5, 31},
    {"normfirst_g4_bias",  3, 24, 6, 1, 1, 1, 0, 0, 1e-5, 32},
    {"noz_row",            2, 20, 0, 0, 1, 0, 0, 0, 1e-5, 33},
    {"gatefirst_D15_row",  2, 15, 0, 1, 0, 0, 0, 0, 1e-5, 34},
    {"normfirst_g5_M1",    1, 15, 5, 1, 1, 1, 0, 0, 1e-6, 35},
};
#define NFD ((int)(sizeof fd_cases / sizeof fd_cases[0]))

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) return bench(i + 1 < argc ? atoi(argv[i + 1]) : 0);
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    }
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    mamba2_context_t *cpu[2][2] = {{th_ctx(MAMBA2_BACKEND_CPU, 1, NULL), th_ctx(MAMBA2_BACKEND_CPU, 2, NULL)},
                                   {th_ctx(MAMBA2_BACKEND_CPU, 1, "scalar"), th_ctx(MAMBA2_BACKEND_CPU, 2, "scalar")}};

    test_formula(ref);
    for (int i = 0; i < NFD; i++) test_fd(ref, &fd_cases[i]);
    for (int i = 0; i < NCASES; i++) test_case(ref, cpu, &cases[i]);
    test_empty(cpu[0][1], "cpu");
    test_empty(ref, "ref");
    test_grad_subsets(cpu[0][1], "cpu");
    test_grad_subsets(cpu[1][0], "cpu_scalar");
    test_grad_subsets(ref, "ref");
    test_threads(NULL);
    test_threads("scalar");
    test_api(cpu[0][1], ref);

    mamba2_context_destroy(ref);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) mamba2_context_destroy(cpu[i][j]);
    return th_finish();
}
