/*
 * test_cuda_grid.c — the CUDA launch's grid fold (src/cuda/cuda.c, src/gpu/kernels/common.h
 * "Grid folding") on the emulated device: a z extent (chunks, sequences, positions) past the
 * device's grid.z limit is folded into grid.x, and the results must not change by a bit.
 *
 * The stand-in driver (fake_libcuda.cpp) reads M2EMU_MAX_GRID_X/_Y/_Z at every attribute
 * query and launch. A "narrow" context is created (and run) with M2EMU_MAX_GRID_Z=3, so every
 * problem here with more than 3 chunks, sequences or positions needs the fold; a "wide" one
 * with the H200's 65535. Units:
 *  - the fold is needed: the wide context run under the narrow limit fails (the driver refuses
 *    the unfolded grid; nothing is computed silently);
 *  - fused SSD forward + backward (the on-chip scan and the staged form), exact float32 and
 *    the tensor-core mode: narrow bitwise equal to wide, and within SPEC §8 of the float64
 *    reference (TH_TOL_F32; the tensor-core mode's tf32 outputs within the 2e-3 of
 *    tests/gpu/test_opencl_ssd.c);
 *  - states at positions (7 and 8 positions), and the five staged stages chained: the same;
 *  - conv1d forward and backward, gated RMSNorm forward and backward, conv1d_step, ssd_step
 *    (one-dimensional grids, never folded): the same;
 *  - limits the fold cannot meet are UNSUPPORTED with a message naming the grid: a y extent
 *    (heads) past M2EMU_MAX_GRID_Y, and a fold whose x would pass M2EMU_MAX_GRID_X.
 * Usage: test_cuda_grid [-q]. Exit 77 when no CUDA device (emulated or real) exists.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt.h"
#include "harness.h"
#include "ssd_case_macros.h"

#define ZMAX "3"
/* the tensor-core mode's tf32 tolerance (tests/gpu/test_opencl_ssd.c: TOL_TC_TF32) */
#define TOL_TC_TF32 2e-3

/* The driver's limits for the next calls: narrow (z <= 3) or the device's own. */
static void limits(int narrow) {
    if (narrow) setenv("M2EMU_MAX_GRID_Z", ZMAX, 1);
    else unsetenv("M2EMU_MAX_GRID_Z");
}

static mamba2_context_t *cuda_ctx(int narrow, int tc) {
    mamba2_context_t *c = NULL;
    limits(narrow);
    setenv("MAMBA2C_CUDA_TC", tc ? "1" : "0", 1);
    const mamba2_status_t st = mamba2_context_create(&c, MAMBA2_BACKEND_CUDA, 1);
    limits(0);
    return st == MAMBA2_STATUS_OK ? c : NULL;
}

static double *io_values(const th_ssd_io *io, int id, int64_t *n) {
    const mamba2_tensor_t *t = &io->v[id].t;
    *n = th_numel(t->rank, t->shape);
    double *v = th_xmalloc((size_t)(*n ? *n : 1) * sizeof(double));
    th_ssd_io_read(io, id, v);
    return v;
}

/* ---- fused SSD ------------------------------------------------------------------------------ */

static mamba2_status_t fwd_bwd(mamba2_context_t *ctx, int narrow, th_ssd_io *io, int staged) {
    limits(narrow);
    if (staged) setenv("MAMBA2C_GPU_SSD_FWD", "staged", 1);
    mamba2_status_t st = th_ssd_io_forward(ctx, io, 0);
    unsetenv("MAMBA2C_GPU_SSD_FWD");
    if (st == MAMBA2_STATUS_OK && !staged) st = th_ssd_io_backward(ctx, io, 0);
    limits(0);
    return st;
}

static void test_fused(mamba2_context_t *wide, mamba2_context_t *narrow, int tc,
                       mamba2_context_t *ref, th_ssd_case *c) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("fused%s %-22s [%lld,%lld,%lld,%lld,%lld,%lld,%lld]", tc ? " tc" : "   ", c->name,
             (long long)d.B, (long long)d.L, (long long)d.H, (long long)d.P, (long long)d.N,
             (long long)c->Q, (long long)d.G);
    th_ssd_io r, w, n, ws, ns;
    th_ssd_io_make(&r, c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
    th_ssd_io_make(&w, c, &d, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
    th_ssd_io_make(&n, c, &d, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
    th_ssd_io_make(&ws, c, &d, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
    th_ssd_io_make(&ns, c, &d, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
    mamba2_status_t st = th_ssd_io_forward(ref, &r, 0);
    if (st == MAMBA2_STATUS_OK) st = th_ssd_io_backward(ref, &r, 0);
    int ok = th_expect(st == MAMBA2_STATUS_OK, "reference: %s", mamba2_last_error());
    const char *what[4] = {"wide", "narrow", "wide staged", "narrow staged"};
    th_ssd_io *ios[4] = {&w, &n, &ws, &ns};
    for (int k = 0; ok && k < 4; k++) {
        st = fwd_bwd(k & 1 ? narrow : wide, k & 1, ios[k], k >= 2);
        ok = th_expect(st == MAMBA2_STATUS_OK, "%s: %s: %s", what[k], mamba2_status_string(st),
                       mamba2_last_error());
    }
    char msg[256];
    if (ok) {
        th_expect(th_ssd_io_check_memory(&n, msg, sizeof msg), "narrow: %s", msg);
        th_expect(th_ssd_io_outputs_equal(&w, &n, msg, sizeof msg), "narrow vs wide: %s", msg);
        th_expect(th_ssd_io_outputs_equal(&ws, &ns, msg, sizeof msg), "staged: %s", msg);
        for (int id = TH_OUT; id < TH_NT; id++) {
            if (!r.v[id].present) continue;
            int64_t m, m2;
            double *want = io_values(&r, id, &m), *got = io_values(&n, id, &m2);
            const int tf32 = tc && (id <= TH_FINAL || id == TH_DX || id == TH_DBM || id == TH_DCM);
            th_metric(th_tname[id], th_nerr(got, want, m), tf32 ? TOL_TC_TF32 : TH_TOL_F32);
            free(want);
            free(got);
        }
    }
    th_ssd_io_free(&r);
    th_ssd_io_free(&w);
    th_ssd_io_free(&n);
    th_ssd_io_free(&ws);
    th_ssd_io_free(&ns);
    th_ssd_data_free(&d);
    th_end();
}

/* ---- states at positions -------------------------------------------------------------------- */

static mamba2_status_t fwd_states(mamba2_context_t *ctx, int narrow, th_ssd_io *io,
                                  const mamba2_tensor_t *pos, const mamba2_tensor_t *ps) {
    const mamba2_tensor_t *t[TH_NT];
    for (int i = 0; i < TH_NT; i++) t[i] = io->v[i].present ? &io->v[i].t : NULL;
    io->opts.state_positions = pos;
    limits(narrow);
    const mamba2_status_t st =
        mamba2_ssd_forward_states(ctx, t[TH_OUT], NULL, t[TH_FINAL], ps, t[TH_X], t[TH_DT],
                                  t[TH_A], t[TH_BM], t[TH_CM], &io->opts, NULL, 0);
    limits(0);
    io->opts.state_positions = NULL;
    return st;
}

static void test_positions(mamba2_context_t *wide, mamba2_context_t *narrow, int tc,
                           mamba2_context_t *ref, th_ssd_case *c, int npos, const int64_t *pos) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("states%s %-21s %d positions", tc ? " tc" : "   ", c->name, npos);
    const int64_t psh[1] = {npos}, ssh[4] = {npos, d.H, d.P, d.N};
    int64_t pv[16];
    memcpy(pv, pos, (size_t)npos * sizeof(int64_t));
    mamba2_tensor_t tp = mamba2_tensor_make(pv, MAMBA2_DTYPE_I64, 1, psh);
    th_ssd_io io[3];
    gt s[3];
    int ok = 1;
    for (int k = 0; k < 3; k++) { /* reference, wide, narrow */
        th_ssd_io_make(&io[k], c, &d, k ? MAMBA2_DTYPE_F32 : MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
        gt_make(&s[k], k ? MAMBA2_DTYPE_F32 : MAMBA2_DTYPE_F64, 4, ssh, 0, 1, NULL);
        const mamba2_status_t st =
            ok ? fwd_states(k ? (k == 1 ? wide : narrow) : ref, k == 2, &io[k], &tp, gt_t(&s[k]))
               : MAMBA2_STATUS_OK;
        ok = ok && th_expect(st == MAMBA2_STATUS_OK, "run %d: %s: %s", k,
                             mamba2_status_string(st), mamba2_last_error());
    }
    char msg[256];
    if (ok) {
        th_expect(gt_check(&s[2], "position_states", msg, sizeof msg), "%s", msg);
        th_expect(th_ssd_io_outputs_equal(&io[1], &io[2], msg, sizeof msg), "narrow: %s", msg);
        double *want = gt_values(&s[0]), *a = gt_values(&s[1]), *b = gt_values(&s[2]);
        th_expect(gt_bits_equal(a, b, s[0].n), "position_states: narrow differs from wide");
        th_metric("position_states", th_nerr(b, want, s[0].n), tc ? TOL_TC_TF32 : TH_TOL_F32);
        free(want);
        free(a);
        free(b);
    }
    for (int k = 0; k < 3; k++) {
        th_ssd_io_free(&io[k]);
        gt_free(&s[k]);
    }
    th_ssd_data_free(&d);
    th_end();
}

/* ---- generic ops: tensors described once, run on each context ------------------------------- */

#define MAXT 12
enum { IN = 0, OUT = 1, INOUT = 2 };
typedef struct op {
    const char *name;
    int nt;
    const char *tn[MAXT];
    int kind[MAXT];
    int rank[MAXT];
    int64_t shape[MAXT][5];
    double *val[MAXT]; /* IN and INOUT: the values (NULL: the tensor is absent) */
    int present[MAXT];
    mamba2_status_t (*run)(mamba2_context_t *ctx, const mamba2_tensor_t *const *t,
                           const struct op *o);
    int64_t iarg[4];
} op;

static int64_t op_numel(const op *o, int i) { return th_numel(o->rank[i], o->shape[i]); }

/* Runs o on ctx in dtype; res[i] gets the values of every OUT / INOUT tensor. */
static int op_run(const op *o, mamba2_context_t *ctx, int narrow, mamba2_dtype_t dt,
                  double **res) {
    gt g[MAXT];
    const mamba2_tensor_t *t[MAXT];
    for (int i = 0; i < o->nt; i++) {
        memset(&g[i], 0, sizeof g[i]);
        t[i] = NULL;
        if (!o->present[i]) continue;
        gt_make(&g[i], dt, o->rank[i], o->shape[i], 0, o->kind[i] != IN, o->val[i]);
        t[i] = gt_t(&g[i]);
    }
    limits(narrow);
    const mamba2_status_t st = o->run(ctx, t, o);
    limits(0);
    int ok = th_expect(st == MAMBA2_STATUS_OK, "%s (%s): %s: %s", o->name,
                       narrow ? "narrow" : dt == MAMBA2_DTYPE_F64 ? "reference" : "wide",
                       mamba2_status_string(st), mamba2_last_error());
    char msg[256];
    for (int i = 0; i < o->nt; i++) {
        if (ok && !gt_check(&g[i], o->tn[i], msg, sizeof msg)) ok = th_expect(0, "%s", msg);
        res[i] = ok && o->present[i] && o->kind[i] != IN ? gt_values(&g[i]) : NULL;
        gt_free(&g[i]);
    }
    return ok;
}

static void test_op(const op *o, mamba2_context_t *wide, mamba2_context_t *narrow,
                    mamba2_context_t *ref) {
    th_begin("op     %s", o->name);
    double *r[MAXT], *w[MAXT], *n[MAXT];
    if (op_run(o, ref, 0, MAMBA2_DTYPE_F64, r) && op_run(o, wide, 0, MAMBA2_DTYPE_F32, w) &&
        op_run(o, narrow, 1, MAMBA2_DTYPE_F32, n)) {
        for (int i = 0; i < o->nt; i++) {
            if (!r[i]) continue;
            th_expect(gt_bits_equal(w[i], n[i], op_numel(o, i)), "%s: narrow differs from wide",
                      o->tn[i]);
            th_metric(o->tn[i], th_nerr(n[i], r[i], op_numel(o, i)), TH_TOL_F32);
            free(r[i]);
            free(w[i]);
            free(n[i]);
        }
    }
    th_end();
}

static th_rng rng;
/* n values: N(0,1) * scale, or U(lo, hi) when scale == 0; float32-rounded */
static double *draw(int64_t n, double scale, double lo, double hi) {
    double *v = th_xmalloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)(scale ? scale * th_rng_normal(&rng) : th_rng_uniform(&rng, lo, hi));
    return v;
}
static void op_t(op *o, const char *name, int kind, int rank, const int64_t *shape, double scale,
                 double lo, double hi) {
    const int i = o->nt++;
    o->tn[i] = name;
    o->kind[i] = kind;
    o->rank[i] = rank;
    memcpy(o->shape[i], shape, (size_t)rank * sizeof(int64_t));
    o->present[i] = 1;
    o->val[i] = kind == OUT ? NULL : draw(op_numel(o, i), scale, lo, hi);
}
static void op_free(op *o) {
    for (int i = 0; i < o->nt; i++) free(o->val[i]);
}

/* conv1d: x, w, bias, init | out, fin  ;  backward: dout, dfin | dx, dw, db, dinit */
static mamba2_status_t run_conv(mamba2_context_t *ctx, const mamba2_tensor_t *const *t,
                                const op *o) {
    mamba2_conv1d_options_t opt = mamba2_conv1d_options_default();
    opt.bias = t[2];
    opt.initial_conv_state = t[3];
    opt.activation = MAMBA2_ACTIVATION_SILU;
    mamba2_status_t st = mamba2_conv1d_forward(ctx, t[4], t[5], t[0], t[1], &opt);
    if (st || !o->iarg[0]) return st;
    mamba2_conv1d_grads_t g = {0, t[8], t[9], t[10], t[11]};
    return mamba2_conv1d_backward(ctx, &g, t[6], t[7], t[0], t[1], &opt, NULL, 0);
}
/* rmsnorm: x, z, w | out, rstd  ;  backward: dout | dx, dz, dw */
static mamba2_status_t run_rms(mamba2_context_t *ctx, const mamba2_tensor_t *const *t,
                               const op *o) {
    mamba2_rmsnorm_gated_options_t opt = mamba2_rmsnorm_gated_options_default();
    opt.group_size = o->iarg[0];
    mamba2_status_t st =
        mamba2_rmsnorm_gated_forward(ctx, t[3], t[4], t[0], t[1], t[2], NULL, &opt, NULL, 0);
    if (st) return st;
    mamba2_rmsnorm_gated_grads_t g = {0, t[6], t[7], t[8], NULL};
    return mamba2_rmsnorm_gated_backward(ctx, &g, t[5], t[0], t[1], t[2], NULL, t[4], &opt,
                                         NULL, 0);
}
/* conv1d_step: x, w, bias | out, cache (in/out) */
static mamba2_status_t run_cstep(mamba2_context_t *ctx, const mamba2_tensor_t *const *t,
                                 const op *o) {
    (void)o;
    mamba2_conv1d_step_options_t opt = mamba2_conv1d_step_options_default();
    opt.bias = t[2];
    opt.activation = MAMBA2_ACTIVATION_SILU;
    return mamba2_conv1d_step(ctx, t[3], t[4], t[0], t[1], &opt);
}
/* ssd_step: x, dt, A, Bm, Cm, D, z, dt_bias | out, state_cache (in/out) */
static mamba2_status_t run_sstep(mamba2_context_t *ctx, const mamba2_tensor_t *const *t,
                                 const op *o) {
    (void)o;
    mamba2_ssd_step_options_t opt = mamba2_ssd_step_options_default();
    opt.D = t[5];
    opt.z = t[6];
    opt.dt_bias = t[7];
    opt.dt_softplus = 1;
    return mamba2_ssd_step(ctx, t[9], t[8], NULL, t[0], t[1], t[2], t[3], t[4], &opt);
}

static void test_small_ops(mamba2_context_t *wide, mamba2_context_t *narrow,
                           mamba2_context_t *ref) {
    const int64_t B = 3, L = 37, C = 20, W = 4, M = 23, D = 24, H = 5, P = 6, N = 8, G = 1;
    op o;
    memset(&o, 0, sizeof o);
    o.name = "conv1d forward + backward [3,37,20] W4";
    o.run = run_conv;
    o.iarg[0] = 1;
    op_t(&o, "x", IN, 3, (int64_t[]){B, L, C}, 1, 0, 0);
    op_t(&o, "weight", IN, 2, (int64_t[]){C, W}, 0.5, 0, 0);
    op_t(&o, "bias", IN, 1, (int64_t[]){C}, 0.5, 0, 0);
    op_t(&o, "initial", IN, 3, (int64_t[]){B, C, W - 1}, 1, 0, 0);
    op_t(&o, "out", OUT, 3, (int64_t[]){B, L, C}, 0, 0, 0);
    op_t(&o, "final", OUT, 3, (int64_t[]){B, C, W - 1}, 0, 0, 0);
    op_t(&o, "dout", IN, 3, (int64_t[]){B, L, C}, 1, 0, 0);
    op_t(&o, "dfinal", IN, 3, (int64_t[]){B, C, W - 1}, 1, 0, 0);
    op_t(&o, "dx", OUT, 3, (int64_t[]){B, L, C}, 0, 0, 0);
    op_t(&o, "dweight", OUT, 2, (int64_t[]){C, W}, 0, 0, 0);
    op_t(&o, "dbias", OUT, 1, (int64_t[]){C}, 0, 0, 0);
    op_t(&o, "dinitial", OUT, 3, (int64_t[]){B, C, W - 1}, 0, 0, 0);
    test_op(&o, wide, narrow, ref);
    op_free(&o);

    memset(&o, 0, sizeof o);
    o.name = "rmsnorm_gated forward + backward [23,24] groups of 8";
    o.run = run_rms;
    o.iarg[0] = 8;
    op_t(&o, "x", IN, 2, (int64_t[]){M, D}, 1, 0, 0);
    op_t(&o, "z", IN, 2, (int64_t[]){M, D}, 1, 0, 0);
    op_t(&o, "weight", IN, 1, (int64_t[]){D}, 0, 0.5, 1.5);
    op_t(&o, "out", OUT, 2, (int64_t[]){M, D}, 0, 0, 0);
    op_t(&o, "rstd", OUT, 2, (int64_t[]){M, D / 8}, 0, 0, 0);
    op_t(&o, "dout", IN, 2, (int64_t[]){M, D}, 1, 0, 0);
    op_t(&o, "dx", OUT, 2, (int64_t[]){M, D}, 0, 0, 0);
    op_t(&o, "dz", OUT, 2, (int64_t[]){M, D}, 0, 0, 0);
    op_t(&o, "dweight", OUT, 1, (int64_t[]){D}, 0, 0, 0);
    /* rstd is an input of the backward: the op writes it first, so it stays an output */
    test_op(&o, wide, narrow, ref);
    op_free(&o);

    memset(&o, 0, sizeof o);
    o.name = "conv1d_step [3,20] W4";
    o.run = run_cstep;
    op_t(&o, "x", IN, 2, (int64_t[]){B, C}, 1, 0, 0);
    op_t(&o, "weight", IN, 2, (int64_t[]){C, W}, 0.5, 0, 0);
    op_t(&o, "bias", IN, 1, (int64_t[]){C}, 0.5, 0, 0);
    op_t(&o, "out", OUT, 2, (int64_t[]){B, C}, 0, 0, 0);
    op_t(&o, "conv_cache", INOUT, 3, (int64_t[]){B, C, W - 1}, 1, 0, 0);
    test_op(&o, wide, narrow, ref);
    op_free(&o);

    memset(&o, 0, sizeof o);
    o.name = "ssd_step [3,5,6] N8";
    o.run = run_sstep;
    op_t(&o, "x", IN, 3, (int64_t[]){B, H, P}, 1, 0, 0);
    op_t(&o, "dt", IN, 2, (int64_t[]){B, H}, 0, -4.6, -2.2);
    op_t(&o, "A", IN, 1, (int64_t[]){H}, 0, -0.5, -0.1);
    op_t(&o, "Bm", IN, 3, (int64_t[]){B, G, N}, 0.2, 0, 0);
    op_t(&o, "Cm", IN, 3, (int64_t[]){B, G, N}, 0.2, 0, 0);
    op_t(&o, "D", IN, 1, (int64_t[]){H}, 1, 0, 0);
    op_t(&o, "z", IN, 3, (int64_t[]){B, H, P}, 1, 0, 0);
    op_t(&o, "dt_bias", IN, 1, (int64_t[]){H}, 0.1, 0, 0);
    op_t(&o, "out", OUT, 3, (int64_t[]){B, H, P}, 0, 0, 0);
    op_t(&o, "state_cache", INOUT, 4, (int64_t[]){B, H, P, N}, 0.2, 0, 0);
    test_op(&o, wide, narrow, ref);
    op_free(&o);
}

/* ---- the five staged stages, chained ------------------------------------------------------- */

/* th_ssd_data inputs -> cumsum -> bmm -> chunk_state -> state_passing -> chunk_scan on ctx;
 * res gets dt_out, dA_cumsum, CB, states, states_start, final_state, out (7 arrays) */
static int chain(mamba2_context_t *ctx, int narrow, mamba2_dtype_t dt, const th_ssd_case *c,
                 const th_ssd_data *d, double **res) {
    const int64_t B = c->B, L = c->L, H = c->H, P = c->P, N = c->N, G = c->G, Q = c->Q;
    const int64_t K = (L + Q - 1) / Q;
    const int64_t sx[4] = {B, L, H, P}, sdt[3] = {B, L, H}, sh[1] = {H}, sbc[4] = {B, L, G, N};
    const int64_t sk[4] = {B, H, K, Q}, scb[5] = {B, K, G, Q, Q}, sst[5] = {B, K, H, P, N};
    const int64_t sfin[4] = {B, H, P, N};
    enum { X, DT, A, BM, CM, DD, Z, DTB, INIT, DTO, DAC, CB, ST, SS, FIN, OUTT, NG };
    gt g[NG];
    memset(g, 0, sizeof g);
    gt_make(&g[X], dt, 4, sx, 0, 0, d->v[TH_X]);
    gt_make(&g[DT], dt, 3, sdt, 0, 0, d->v[TH_DT]);
    gt_make(&g[A], dt, 1, sh, 0, 0, d->v[TH_A]);
    gt_make(&g[BM], dt, 4, sbc, 0, 0, d->v[TH_BM]);
    gt_make(&g[CM], dt, 4, sbc, 0, 0, d->v[TH_CM]);
    gt_make(&g[DD], dt, 1, sh, 0, 0, d->v[TH_D]);
    gt_make(&g[Z], dt, 4, sx, 0, 0, d->v[TH_Z]);
    gt_make(&g[DTB], dt, 1, sh, 0, 0, d->v[TH_DTB]);
    gt_make(&g[INIT], dt, 4, sfin, 0, 0, d->v[TH_INIT]);
    gt_make(&g[DTO], dt, 4, sk, 0, 1, NULL);
    gt_make(&g[DAC], dt, 4, sk, 0, 1, NULL);
    gt_make(&g[CB], dt, 5, scb, 0, 1, NULL);
    gt_make(&g[ST], dt, 5, sst, 0, 1, NULL);
    gt_make(&g[SS], dt, 5, sst, 0, 1, NULL);
    gt_make(&g[FIN], dt, 4, sfin, 0, 1, NULL);
    gt_make(&g[OUTT], dt, 4, sx, 0, 1, NULL);
    mamba2_ssd_chunked_options_t o = mamba2_ssd_chunked_options_default();
    o.chunk_size = Q;
    o.D = gt_t(&g[DD]);
    o.z = gt_t(&g[Z]);
    o.dt_bias = gt_t(&g[DTB]);
    o.initial_state = gt_t(&g[INIT]);
    o.dt_softplus = 1;
#define T(i) gt_t(&g[i])
    limits(narrow);
    mamba2_status_t st = mamba2_ssd_chunk_cumsum(ctx, T(DTO), T(DAC), T(DT), T(A), &o);
    if (!st) st = mamba2_ssd_bmm_chunk(ctx, T(CB), T(BM), T(CM), &o);
    if (!st) st = mamba2_ssd_chunk_state(ctx, T(ST), T(X), T(BM), T(DTO), T(DAC), &o);
    if (!st) st = mamba2_ssd_state_passing(ctx, T(SS), T(FIN), T(ST), T(DAC), &o);
    if (!st)
        st = mamba2_ssd_chunk_scan(ctx, T(OUTT), T(CB), T(X), T(DTO), T(DAC), T(CM), T(SS), &o);
#undef T
    limits(0);
    int ok = th_expect(st == MAMBA2_STATUS_OK, "stages (%s): %s: %s",
                       narrow ? "narrow" : dt == MAMBA2_DTYPE_F64 ? "reference" : "wide",
                       mamba2_status_string(st), mamba2_last_error());
    char msg[256];
    for (int i = 0; i < NG; i++) {
        if (ok && !gt_check(&g[i], "stage tensor", msg, sizeof msg)) ok = th_expect(0, "%s", msg);
        if (i >= DTO) res[i - DTO] = ok ? gt_values(&g[i]) : NULL;
        gt_free(&g[i]);
    }
    return ok;
}

static void test_stages(mamba2_context_t *wide, mamba2_context_t *narrow, mamba2_context_t *ref,
                        th_ssd_case *c) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("stages %-26s [%lld,%lld,%lld,%lld,%lld,%lld,%lld]", c->name, (long long)c->B,
             (long long)c->L, (long long)c->H, (long long)c->P, (long long)c->N, (long long)c->Q,
             (long long)c->G);
    static const char *const nm[7] = {"dt_out", "dA_cumsum", "CB", "states", "states_start",
                                      "final_state", "out"};
    const int64_t K = (c->L + c->Q - 1) / c->Q;
    const int64_t cnt[7] = {c->B * c->H * K * c->Q, c->B * c->H * K * c->Q,
                            c->B * K * c->G * c->Q * c->Q, c->B * K * c->H * c->P * c->N,
                            c->B * K * c->H * c->P * c->N, c->B * c->H * c->P * c->N,
                            c->B * c->L * c->H * c->P};
    double *r[7], *w[7], *n[7];
    if (chain(ref, 0, MAMBA2_DTYPE_F64, c, &d, r) && chain(wide, 0, MAMBA2_DTYPE_F32, c, &d, w) &&
        chain(narrow, 1, MAMBA2_DTYPE_F32, c, &d, n)) {
        for (int i = 0; i < 7; i++) {
            th_expect(gt_bits_equal(w[i], n[i], cnt[i]), "%s: narrow differs from wide", nm[i]);
            th_metric(nm[i], th_nerr(n[i], r[i], cnt[i]), TH_TOL_F32);
            free(r[i]);
            free(w[i]);
            free(n[i]);
        }
    }
    th_ssd_data_free(&d);
    th_end();
}

/* ---- limits the fold cannot meet ------------------------------------------------------------ */

static void test_refusals(mamba2_context_t *wide, th_ssd_case *c) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_ssd_io io;
    th_ssd_io_make(&io, c, &d, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
    th_begin("refuse unfolded: a context made with z <= 65535 run under z <= " ZMAX);
    mamba2_status_t st = fwd_bwd(wide, 1, &io, 0);
    th_expect(st != MAMBA2_STATUS_OK, "the driver took a grid past its z limit");
    th_note("%s", mamba2_last_error());
    th_end();
    static const struct {
        const char *var, *val, *what;
    } lim[2] = {{"M2EMU_MAX_GRID_Y", "1", "y (heads) past the limit"},
                {"M2EMU_MAX_GRID_X", "4", "a fold whose x passes the limit"}};
    for (int k = 0; k < 2; k++) {
        th_begin("refuse %s", lim[k].what);
        setenv(lim[k].var, lim[k].val, 1);
        mamba2_context_t *ctx = NULL;
        setenv("MAMBA2C_CUDA_TC", "0", 1);
        limits(k == 1); /* x: the context must want to fold */
        st = mamba2_context_create(&ctx, MAMBA2_BACKEND_CUDA, 1);
        limits(0);
        if (th_expect(st == MAMBA2_STATUS_OK, "create: %s", mamba2_last_error())) {
            th_ssd_io_reset_outputs(&io);
            st = fwd_bwd(ctx, k == 1, &io, 0);
            th_expect(st == MAMBA2_STATUS_UNSUPPORTED && strstr(mamba2_last_error(), "grid"),
                      "%s: %s", mamba2_status_string(st), mamba2_last_error());
            th_note("%s", mamba2_last_error());
        }
        mamba2_context_destroy(ctx);
        unsetenv(lim[k].var);
        th_end();
    }
    th_ssd_io_free(&io);
    th_ssd_data_free(&d);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-q")) th_set_verbose(0);
    th_rng_seed(&rng, 26);
    mamba2_context_t *wide[2] = {cuda_ctx(0, 0), cuda_ctx(0, 1)};
    mamba2_context_t *narrow[2] = {cuda_ctx(1, 0), cuda_ctx(1, 1)};
    if (!wide[0] || !wide[1] || !narrow[0] || !narrow[1]) {
        printf("SKIP: no CUDA device (%s)\n", mamba2_last_error());
        return 77;
    }
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    /* chunks (z of the chunk kernels) 30 = 10 x 3 and sequences 5 (prime: folded 5 x 1);
     * varlen: 7 sequences and 16 chunks; P, N not multiples of the tiles */
    static th_ssd_case fused[] = {
        {"B5_30_chunks_all", SH(5, 45, 2, 8, 16, 8, 1), .D_mode = 2, ALL_OPTS},
        {"varlen_7seq_all", SH(1, 0, 4, 8, 8, 4, 2), .nseq = 7, .seqlen = {5, 1, 9, 30, 1, 3, 12},
         .D_mode = 1, ALL_OPTS},
        {"B4_P17_N9_G2", SH(4, 29, 2, 17, 9, 8, 2), .D_mode = 1, .z = 1, STATES},
    };
    for (int tc = 0; tc < 2; tc++)
        for (int i = 0; i < 3; i++) test_fused(wide[tc], narrow[tc], tc, ref, &fused[i]);
    static th_ssd_case pc[] = {
        {"batched_B2_L37", SH(2, 37, 4, 5, 7, 8, 2), .D_mode = 1, ALL_OPTS},
        {"varlen_3seq", SH(1, 0, 3, 4, 9, 16, 3), .nseq = 3, .seqlen = {1, 14, 85}, STATES},
    };
    static const int64_t pos[2][8] = {{0, 5, 31, 36, 37, 50, 73}, {0, 1, 14, 15, 20, 78, 79, 99}};
    for (int tc = 0; tc < 2; tc++)
        for (int i = 0; i < 2; i++)
            test_positions(wide[tc], narrow[tc], tc, ref, &pc[i], 7 + i, pos[i]);
    static th_ssd_case sc = {"B4_L50_Q8_all", SH(4, 50, 2, 8, 16, 8, 1), .D_mode = 1, .z = 1,
                             .dt_bias = 1, .softplus = 1, .init = 1, .final = 1};
    test_stages(wide[0], narrow[0], ref, &sc);
    test_small_ops(wide[0], narrow[0], ref);
    test_refusals(wide[0], &fused[0]);
    for (int k = 0; k < 2; k++) {
        mamba2_context_destroy(wide[k]);
        mamba2_context_destroy(narrow[k]);
    }
    mamba2_context_destroy(ref);
    return th_finish();
}
