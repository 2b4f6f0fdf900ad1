/*
 * test_opencl_ops.c — conv1d (forward, backward), gated RMSNorm (forward, backward),
 * conv1d_step and ssd_step on the OpenCL backend (PoCL in CI), through the public API.
 *
 * Units, per case of each table:
 *  - oracle: the OpenCL result against the float64 reference backend on the same float32
 *    inputs, every output within TH_TOL_F32 (SPEC §8), no NaN/Inf where the reference is
 *    finite; outputs are pre-filled with NaN (an element never written shows up), guard bytes
 *    sit before and after every buffer, gaps of strided views (pad: row strides larger than
 *    the row) must stay untouched and inputs unchanged byte for byte;
 *  - determinism: a second OpenCL run bitwise identical to the first;
 *  - cpu: the OpenCL result against the CPU backend within TH_TOL_F32;
 *  - step cases: padding rows (negative slots) keep out, all_states and their cache slots
 *    bitwise;
 * plus NaN propagation (a NaN input gives NaN exactly where the reference has one) and bad
 * arguments (the status, and outputs untouched).
 * And the device-memory mode: mamba2_context_create_opencl on the test's own cl_context and
 * queue, every tensor in its own registered cl_mem (mamba2_opencl_register_buffer; index
 * tensors stay host arrays), the context's scratch arena: bitwise the host mode's results.
 * Exit code 77 (skipped) only when no OpenCL device or driver exists.
 * Usage: test_opencl_ops [--backend opencl|cuda] [-v]: cuda runs the same units on the CUDA
 * backend's host mode (without the OpenCL device-mode units; exit 77 when it has no device).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_loader.h"
#include "gt.h"
#include "harness.h"
#include "mamba2c.h"

#define MAXT 16 /* tensors of one op */

/* One tensor of an op: shape, role and logical values (inputs; in/out: the prior content). */
typedef struct spec {
    const char *name;
    int present, is_out, inout, rank;
    int64_t sh[6];
    mamba2_dtype_t dt;
    double *vals;
} spec;

typedef mamba2_status_t (*call_fn)(mamba2_context_t *ctx, const void *cs, gt *g);

static spec *add(spec *s, int id, const char *name, int rank, const int64_t *sh, int is_out) {
    memset(&s[id], 0, sizeof s[id]);
    s[id].name = name;
    s[id].present = 1;
    s[id].is_out = is_out;
    s[id].rank = rank;
    s[id].dt = MAMBA2_DTYPE_F32;
    for (int i = 0; i < rank; i++) s[id].sh[i] = sh[i];
    return &s[id];
}

/* float32-rounded normal(0,1) * scale + shift values for a spec */
static void fill(th_rng *r, spec *s, double scale, double shift) {
    const int64_t n = th_numel(s->rank, s->sh);
    s->vals = (double *)th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) s->vals[i] = (double)(float)(th_rng_normal(r) * scale + shift);
}

/* Run op `fn` on ctx: guarded tensors from specs (pad: strided views), call, check memory,
 * read every output into res[id] (malloc'ed; NULL when absent). Returns the status. */
static mamba2_status_t run(mamba2_context_t *ctx, spec *s, int n, int pad, call_fn fn,
                           const void *cs, double **res, const char *tag) {
    gt g[MAXT];
    memset(g, 0, sizeof g);
    for (int i = 0; i < n; i++) {
        if (!s[i].present) continue;
        const int p = pad && s[i].dt == MAMBA2_DTYPE_F32 && s[i].rank > 1;
        gt_make(&g[i], s[i].dt, s[i].rank, s[i].sh, p, s[i].is_out,
                s[i].is_out && !s[i].inout ? NULL : s[i].vals);
    }
    const mamba2_status_t st = fn(ctx, cs, g);
    char msg[256];
    for (int i = 0; i < n; i++) {
        res[i] = NULL;
        if (!s[i].present) continue;
        if (!gt_check(&g[i], s[i].name, msg, sizeof msg)) th_fail("%s: %s", tag, msg);
        if (s[i].is_out) res[i] = gt_values(&g[i]);
        gt_free(&g[i]);
    }
    return st;
}

static void free_res(double **res, int n) {
    for (int i = 0; i < n; i++) free(res[i]);
}

static mamba2_context_t *gpu, *ref, *cpu;
static const char *gpu_name = "opencl"; /* the backend's name in messages: opencl or cuda */

/* The three comparisons of one case, over every output. */
static void compare_all(spec *s, int n, int pad, call_fn fn, const void *cs) {
    double *rg[MAXT], *rg2[MAXT], *rr[MAXT], *rc[MAXT];
    mamba2_status_t st = run(gpu, s, n, pad, fn, cs, rg, "opencl");
    if (!th_expect(st == MAMBA2_STATUS_OK, "opencl: %s: %s", mamba2_status_string(st),
                   mamba2_last_error())) {
        free_res(rg, n);
        return;
    }
    st = run(gpu, s, n, !pad, fn, cs, rg2, "opencl (2nd run)");
    th_expect(st == MAMBA2_STATUS_OK, "opencl 2nd run: %s", mamba2_last_error());
    st = run(ref, s, n, 0, fn, cs, rr, "ref");
    th_expect(st == MAMBA2_STATUS_OK, "ref: %s", mamba2_last_error());
    st = run(cpu, s, n, 0, fn, cs, rc, "cpu");
    th_expect(st == MAMBA2_STATUS_OK, "cpu: %s", mamba2_last_error());
    char lab[96];
    for (int i = 0; i < n; i++) {
        if (!s[i].present || !s[i].is_out || !rg[i]) continue;
        const int64_t m = th_numel(s[i].rank, s[i].sh);
        if (rr[i]) gt_cmp(s[i].name, rg[i], rr[i], m, 0, TH_TOL_F32);
        snprintf(lab, sizeof lab, "%s:rerun", s[i].name);
        if (rg2[i]) th_expect(gt_bits_equal(rg[i], rg2[i], m), "%s not bitwise identical", lab);
        snprintf(lab, sizeof lab, "%s:cpu", s[i].name);
        if (rc[i]) th_metric(lab, th_nerr(rg[i], rc[i], m), TH_TOL_F32);
    }
    free_res(rg, n);
    free_res(rg2, n);
    free_res(rr, n);
    free_res(rc, n);
}

static void free_specs(spec *s, int n) {
    for (int i = 0; i < n; i++) free(s[i].vals);
}

/* ================================================================== conv1d === */

enum { CX, CW, CB, CI, CCU, CDO, CDF, COUT, CFIN, CDX, CDW, CDB, CDI, CN };

typedef struct cv_case {
    const char *name;
    int64_t B, L, C, W;
    int bias, silu, init, nseq, cu64, pad;
} cv_case;

static mamba2_status_t cv_call(mamba2_context_t *ctx, const void *p, gt *g) {
    const cv_case *c = (const cv_case *)p;
    mamba2_conv1d_options_t o = mamba2_conv1d_options_default();
    o.bias = gt_t(&g[CB]);
    o.initial_conv_state = gt_t(&g[CI]);
    o.cu_seqlens = gt_t(&g[CCU]);
    o.activation = c->silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    mamba2_status_t st =
        mamba2_conv1d_forward(ctx, gt_t(&g[COUT]), gt_t(&g[CFIN]), gt_t(&g[CX]), gt_t(&g[CW]), &o);
    if (st) return st;
    mamba2_conv1d_grads_t gr = {0, gt_t(&g[CDX]), gt_t(&g[CDW]), gt_t(&g[CDB]), gt_t(&g[CDI])};
    return mamba2_conv1d_backward(ctx, &gr, gt_t(&g[CDO]), gt_t(&g[CDF]), gt_t(&g[CX]),
                                  gt_t(&g[CW]), &o, NULL, 0);
}

static int cv_specs(const cv_case *c, spec *s, uint64_t seed) {
    th_rng r;
    th_rng_seed(&r, seed);
    memset(s, 0, CN * sizeof *s);
    const int64_t B = c->nseq ? 1 : c->B, S = c->nseq ? c->nseq : B, L = c->L, C = c->C, W = c->W;
    const int64_t bl[3] = {B, L, C}, cw[2] = {C, W}, sc[3] = {S, C, W - 1};
    fill(&r, add(s, CX, "x", 3, bl, 0), 1, 0);
    fill(&r, add(s, CW, "weight", 2, cw, 0), 0.5, 0);
    if (c->bias) fill(&r, add(s, CB, "bias", 1, (int64_t[]){C}, 0), 0.5, 0);
    if (c->init) fill(&r, add(s, CI, "initial_conv_state", 3, sc, 0), 1, 0);
    if (c->nseq) {
        spec *cu = add(s, CCU, "cu_seqlens", 1, (int64_t[]){S + 1}, 0);
        cu->dt = c->cu64 ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32;
        cu->vals = (double *)th_xmalloc((size_t)(S + 1) * sizeof(double));
        /* awkward lengths: some empty, some shorter than W-1 */
        cu->vals[0] = 0;
        for (int64_t i = 1; i < S; i++)
            cu->vals[i] = (double)(int64_t)th_rng_uniform(&r, 0, (double)L + 1);
        cu->vals[S] = (double)L;
        for (int64_t i = 1; i < S; i++)
            for (int64_t j = i; j > 1 && cu->vals[j] < cu->vals[j - 1]; j--) {
                const double t = cu->vals[j];
                cu->vals[j] = cu->vals[j - 1];
                cu->vals[j - 1] = t;
            }
    }
    fill(&r, add(s, CDO, "dout", 3, bl, 0), 1, 0);
    if (W > 1) fill(&r, add(s, CDF, "dfinal_conv_state", 3, sc, 0), 1, 0);
    add(s, COUT, "out", 3, bl, 1);
    if (W > 1) add(s, CFIN, "final_conv_state", 3, sc, 1);
    add(s, CDX, "dx", 3, bl, 1);
    add(s, CDW, "dweight", 2, cw, 1);
    if (c->bias) add(s, CDB, "dbias", 1, (int64_t[]){C}, 1);
    if (c->init) add(s, CDI, "dinitial_conv_state", 3, sc, 1);
    return CN;
}

static const cv_case cv_cases[] = {
    /* name           B   L     C  W  bias silu init nseq cu64 pad */
    {"w1_plain",      2,  37,  19, 1, 0,   0,   0,   0,   0,   0},
    {"w2_silu_bias",  2,  37,  19, 2, 1,   1,   1,   0,   0,   1},
    {"w3_init",       3,  65,  70, 3, 0,   1,   1,   0,   0,   0},
    {"w4_mamba",      2, 130, 133, 4, 1,   1,   1,   0,   0,   1},
    {"w8_long",       1, 200,  33, 8, 1,   1,   1,   0,   0,   1},
    {"L1",            3,   1,   5, 4, 1,   1,   1,   0,   0,   1},
    {"L1_noinit",     2,   1,  65, 4, 1,   0,   0,   0,   0,   0},
    {"varlen_i32",    1, 150,  33, 4, 1,   1,   1,   5,   0,   1},
    {"varlen_i64",    1, 131,  20, 3, 0,   1,   0,   6,   1,   0},
    {"varlen_short",  1,   3,   7, 4, 1,   1,   1,   4,   1,   1},
    {"varlen_w8",     1, 190,  17, 8, 1,   0,   1,   7,   0,   1},
    {"L0",            2,   0,   9, 4, 1,   1,   1,   0,   0,   0},
    {"mamba2_xBC",    2, 777, 1280, 4, 1,  1,   1,   0,   0,   1}, /* d_inner 1024 + 2*128 */
};

/* ============================================================ gated RMSNorm === */

enum { RX, RZ, RW, RB, RDO, ROUT, RSTD, RDX, RDZ, RDW, RDB, RN };

typedef struct rn_case {
    const char *name;
    int64_t M, D, S;
    int z, nbg, bias, use_rstd, pad;
    double eps;
} rn_case;

static mamba2_status_t rn_call(mamba2_context_t *ctx, const void *p, gt *g) {
    const rn_case *c = (const rn_case *)p;
    mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
    o.eps = c->eps;
    o.group_size = c->S;
    o.norm_before_gate = c->nbg;
    mamba2_status_t st = mamba2_rmsnorm_gated_forward(ctx, gt_t(&g[ROUT]), gt_t(&g[RSTD]),
                                                      gt_t(&g[RX]), gt_t(&g[RZ]), gt_t(&g[RW]),
                                                      gt_t(&g[RB]), &o, NULL, 0);
    if (st) return st;
    /* the backward reads the forward's rstd when asked (it was just written) */
    mamba2_rmsnorm_gated_grads_t gr = {0, gt_t(&g[RDX]), gt_t(&g[RDZ]), gt_t(&g[RDW]), gt_t(&g[RDB])};
    return mamba2_rmsnorm_gated_backward(ctx, &gr, gt_t(&g[RDO]), gt_t(&g[RX]), gt_t(&g[RZ]),
                                         gt_t(&g[RW]), gt_t(&g[RB]),
                                         c->use_rstd ? gt_t(&g[RSTD]) : NULL, &o, NULL, 0);
}

static int rn_specs(const rn_case *c, spec *s, uint64_t seed) {
    th_rng r;
    th_rng_seed(&r, seed);
    memset(s, 0, RN * sizeof *s);
    const int64_t md[2] = {c->M, c->D}, d1[1] = {c->D}, mg[2] = {c->M, c->D / c->S};
    fill(&r, add(s, RX, "x", 2, md, 0), 1, 0);
    if (c->z) fill(&r, add(s, RZ, "z", 2, md, 0), 1, 0);
    /* groups of 1..4: |v| away from 0, where 1 - mean(xh²) = eps r² is smallest */
    for (int64_t i = 0; c->S <= 4 && i < c->M * c->D; i++) {
        double *xv = &s[RX].vals[i];
        *xv = (double)(float)(*xv < 0 ? *xv - 0.5 : *xv + 0.5);
        if (c->z) s[RZ].vals[i] = (double)(float)(fabs(s[RZ].vals[i]) + 1.0);
    }
    fill(&r, add(s, RW, "weight", 1, d1, 0), 0.5, 1);
    if (c->bias) fill(&r, add(s, RB, "bias", 1, d1, 0), 0.5, 0);
    fill(&r, add(s, RDO, "dout", 2, md, 0), 1, 0);
    add(s, ROUT, "out", 2, md, 1);
    add(s, RSTD, "rstd", 2, mg, 1);
    add(s, RDX, "dx", 2, md, 1);
    if (c->z) add(s, RDZ, "dz", 2, md, 1);
    add(s, RDW, "dweight", 1, d1, 1);
    if (c->bias) add(s, RDB, "dbias", 1, d1, 1);
    return RN;
}

static const rn_case rn_cases[] = {
    /* name                M     D    S    z nbg bias rstd pad eps */
    {"row_gatefirst",     33,   64,   64, 1, 0,  0,   0,  0, 1e-5},
    {"g16_gatefirst_b",   33,   64,   16, 1, 0,  1,   1,  1, 1e-5},
    {"g16_normfirst_b",   33,   64,   16, 1, 1,  1,   0,  1, 1e-5},
    {"noz_row",           20,   64,   64, 0, 0,  0,   1,  0, 1e-6},
    {"g15_odd",           17,   60,   15, 1, 0,  1,   0,  1, 1e-5},
    {"g130_many_rows",   200,  520,  130, 1, 0,  1,   1,  1, 1e-5},
    {"row_300_nbg",        3,  300,  300, 1, 1,  0,   0,  1, 1e-5},
    {"M1",                 1,   44,   11, 1, 1,  1,   1,  0, 1e-5},
    {"group1",             4,    3,    1, 1, 1,  1,   0,  0, 1e-3}, /* S=1: dx ~ eps */
    {"mamba2_ng8",        24, 5120,  640, 1, 0,  0,   0,  0, 1e-5},
    {"M0",                 0,   24,    8, 1, 0,  1,   0,  0, 1e-5},
    {"group1_eps1e-5",    16,    8,    1, 1, 0,  0,   0,  0, 1e-5}, /* 1 - mean(v²) r² = */
    {"group2_nbg_b",      16,    8,    2, 1, 1,  1,   1,  1, 1e-5}, /* eps r² must not    */
    {"group3_noz",        16,    9,    3, 0, 0,  0,   0,  0, 1e-5}, /* cancel             */
    {"group4_b",          16,    8,    4, 1, 0,  1,   1,  0, 1e-6},
};

/* ============================================================ conv1d_step === */

enum { SX, SW, SB, SIX, SOUT, SCACHE, SN };

typedef struct cs_case {
    const char *name;
    int64_t B, T, C, W, S;
    int bias, silu, idx, pad_row, idx64, rank2, pad;
} cs_case;

static mamba2_status_t cs_call(mamba2_context_t *ctx, const void *p, gt *g) {
    const cs_case *c = (const cs_case *)p;
    mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
    o.bias = gt_t(&g[SB]);
    o.state_indices = gt_t(&g[SIX]);
    o.activation = c->silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    return mamba2_conv1d_step(ctx, gt_t(&g[SOUT]), gt_t(&g[SCACHE]), gt_t(&g[SX]), gt_t(&g[SW]),
                              &o);
}

/* slots: a permutation of B of the S slots (reversed, shifted), row pad_row - 1 padding */
static void slots(th_rng *r, spec *ix, int64_t B, int64_t S, int pad_row) {
    (void)r;
    ix->vals = (double *)th_xmalloc((size_t)B * sizeof(double));
    for (int64_t b = 0; b < B; b++) ix->vals[b] = (double)((S - 1 - b + S) % S);
    if (pad_row) ix->vals[pad_row - 1] = -1 - (pad_row % 3);
}

static int cs_specs(const cs_case *c, spec *s, uint64_t seed) {
    th_rng r;
    th_rng_seed(&r, seed);
    memset(s, 0, SN * sizeof *s);
    const int64_t x3[3] = {c->B, c->T, c->C}, x2[2] = {c->B, c->C}, cw[2] = {c->C, c->W};
    const int64_t sc[3] = {c->S, c->C, c->W - 1};
    fill(&r, add(s, SX, "x", c->rank2 ? 2 : 3, c->rank2 ? x2 : x3, 0), 1, 0);
    fill(&r, add(s, SW, "weight", 2, cw, 0), 0.5, 0);
    if (c->bias) fill(&r, add(s, SB, "bias", 1, (int64_t[]){c->C}, 0), 0.5, 0);
    if (c->idx) {
        spec *ix = add(s, SIX, "state_indices", 1, (int64_t[]){c->B}, 0);
        ix->dt = c->idx64 ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32;
        slots(&r, ix, c->B, c->S, c->pad_row);
    }
    spec *o = add(s, SOUT, "out", c->rank2 ? 2 : 3, c->rank2 ? x2 : x3, 1);
    o->inout = 1; /* padding rows keep these values */
    fill(&r, o, 1, 0);
    spec *ca = add(s, SCACHE, "conv_cache", 3, sc, 1);
    ca->inout = 1;
    fill(&r, ca, 1, 0);
    return SN;
}

static const cs_case cs_cases[] = {
    /* name            B  T   C  W  S  bias silu idx pad_row idx64 rank2 pad */
    {"w4_decode",      5, 1,  21, 4, 7, 1,   1,   1,  3,      0,    1,    1},
    {"w4_identity",    4, 1, 130, 4, 4, 0,   1,   0,  0,      0,    1,    0},
    {"w2_T3",          3, 3,  67, 2, 5, 1,   0,   1,  1,      1,    0,    1},
    {"w1",             2, 2,  10, 1, 3, 1,   1,   1,  0,      0,    0,    0},
    {"w8_T5",          3, 5,  33, 8, 4, 0,   1,   1,  2,      1,    0,    1},
    {"T0",             2, 0,   9, 4, 2, 1,   1,   0,  0,      0,    0,    0},
};

/* ============================================================== ssd_step === */

enum { TX, TDT, TA, TBM, TCM, TD, TZ, TDTB, TIX, TSC, TOUT, TAS, TN };

typedef struct st_case {
    const char *name;
    int64_t B, T, H, P, N, G, S;
    int D_mode, z, dtb, softplus, idx, pad_row, as, rank_t1, pad;
    double hi;
} st_case;

static mamba2_status_t st_call(mamba2_context_t *ctx, const void *p, gt *g) {
    const st_case *c = (const st_case *)p;
    mamba2_ssd_step_options_t o = mamba2_ssd_step_options_default();
    o.D = gt_t(&g[TD]);
    o.z = gt_t(&g[TZ]);
    o.dt_bias = gt_t(&g[TDTB]);
    o.state_indices = gt_t(&g[TIX]);
    o.dt_softplus = c->softplus;
    if (c->hi > 0) o.dt_limit_hi = c->hi;
    return mamba2_ssd_step(ctx, gt_t(&g[TSC]), gt_t(&g[TOUT]), gt_t(&g[TAS]), gt_t(&g[TX]),
                           gt_t(&g[TDT]), gt_t(&g[TA]), gt_t(&g[TBM]), gt_t(&g[TCM]), &o);
}

static int st_specs(const st_case *c, spec *s, uint64_t seed) {
    th_rng r;
    th_rng_seed(&r, seed);
    memset(s, 0, TN * sizeof *s);
    const int64_t B = c->B, T = c->T, H = c->H, P = c->P, N = c->N, G = c->G;
    const int t1 = c->rank_t1; /* the x[B,H,P] form (T = 1) */
    int64_t xs[4], ds[3], bs[4], as[5];
    const int xr = t1 ? 3 : 4, dr = t1 ? 2 : 3, br = t1 ? 3 : 4, ar = t1 ? 4 : 5;
    if (t1) {
        memcpy(xs, (int64_t[]){B, H, P}, 3 * sizeof(int64_t));
        memcpy(ds, (int64_t[]){B, H}, 2 * sizeof(int64_t));
        memcpy(bs, (int64_t[]){B, G, N}, 3 * sizeof(int64_t));
        memcpy(as, (int64_t[]){B, H, P, N}, 4 * sizeof(int64_t));
    } else {
        memcpy(xs, (int64_t[]){B, T, H, P}, 4 * sizeof(int64_t));
        memcpy(ds, (int64_t[]){B, T, H}, 3 * sizeof(int64_t));
        memcpy(bs, (int64_t[]){B, T, G, N}, 4 * sizeof(int64_t));
        memcpy(as, (int64_t[]){B, T, H, P, N}, 5 * sizeof(int64_t));
    }
    fill(&r, add(s, TX, "x", xr, xs, 0), 1, 0);
    spec *dt = add(s, TDT, "dt", dr, ds, 0);
    const int64_t ndt = th_numel(dr, ds);
    dt->vals = (double *)th_xmalloc((size_t)(ndt > 0 ? ndt : 1) * sizeof(double));
    for (int64_t i = 0; i < ndt; i++) /* U(0.01, 0.11), some negative (clamped to 0) */
        dt->vals[i] = (double)(float)(th_rng_uniform(&r, 0.01, 0.11) - (i % 7 == 3 ? 0.2 : 0));
    spec *A = add(s, TA, "A", 1, (int64_t[]){H}, 0);
    A->vals = (double *)th_xmalloc((size_t)H * sizeof(double));
    for (int64_t h = 0; h < H; h++) A->vals[h] = (double)(float)-th_rng_uniform(&r, 0.1, 0.5);
    fill(&r, add(s, TBM, "Bm", br, bs, 0), 0.2, 0);
    fill(&r, add(s, TCM, "Cm", br, bs, 0), 0.2, 0);
    if (c->D_mode == 1) fill(&r, add(s, TD, "D", 1, (int64_t[]){H}, 0), 1, 0);
    if (c->D_mode == 2) fill(&r, add(s, TD, "D", 2, (int64_t[]){H, P}, 0), 1, 0);
    if (c->z) fill(&r, add(s, TZ, "z", xr, xs, 0), 1, 0);
    if (c->dtb) fill(&r, add(s, TDTB, "dt_bias", 1, (int64_t[]){H}, 0), 0.1, 0);
    if (c->idx) {
        spec *ix = add(s, TIX, "state_indices", 1, (int64_t[]){B}, 0);
        ix->dt = (c->pad_row & 1) ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32;
        slots(&r, ix, B, c->S, c->pad_row);
    }
    spec *sc = add(s, TSC, "state_cache", 4, (int64_t[]){c->S, H, P, N}, 1);
    sc->inout = 1;
    fill(&r, sc, 0.2, 0);
    spec *o = add(s, TOUT, "out", xr, xs, 1);
    o->inout = 1;
    fill(&r, o, 1, 0);
    if (c->as) {
        spec *a = add(s, TAS, "all_states", ar, as, 1);
        a->inout = 1;
        fill(&r, a, 1, 0);
    }
    return TN;
}

static const st_case st_cases[] = {
    /* name          B  T  H   P    N  G  S  D z dtb sp idx pad as t1 pad hi */
    {"decode_t1",    3, 1, 4,  16,  32, 2, 5, 1, 1, 1, 1, 1,  2, 1, 1,  1, 0},
    {"T3_odd",       2, 3, 3,   7,  45, 1, 3, 2, 0, 1, 0, 1,  0, 1, 0,  0, 0},
    {"P64_N128",     4, 2, 2,  64, 128, 2, 6, 2, 1, 1, 1, 1,  1, 0, 0,  1, 0.5},
    {"P1_N1",        1, 5, 1,   1,   1, 1, 1, 1, 1, 0, 0, 0,  0, 1, 0,  0, 0},
    {"identity",     3, 2, 6,  10,  33, 3, 3, 0, 0, 0, 1, 0,  0, 1, 0,  1, 0},
    {"T0",           2, 0, 2,   4,   8, 1, 2, 1, 1, 1, 1, 1,  1, 0, 0,  0, 0},
    {"mamba2_decode", 8, 1, 24, 64, 128, 1, 9, 1, 1, 1, 1, 1,  5, 0, 1,  1, 0},
};

/* ============================================================ extra checks === */

static mamba2_status_t fwd_only_cv(mamba2_context_t *ctx, const void *p, gt *g) {
    const cv_case *c = (const cv_case *)p;
    mamba2_conv1d_options_t o = mamba2_conv1d_options_default();
    o.activation = c->silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    return mamba2_conv1d_forward(ctx, gt_t(&g[COUT]), NULL, gt_t(&g[CX]), gt_t(&g[CW]), &o);
}

/* NaN propagation: one NaN input; every output NaN exactly where the reference's is. */
static void nan_pattern(const char *what, spec *s, int n, call_fn fn, const void *cs) {
    th_begin("nan: %s", what);
    double *rg[MAXT], *rr[MAXT];
    mamba2_status_t st = run(gpu, s, n, 0, fn, cs, rg, "opencl");
    th_expect(st == MAMBA2_STATUS_OK, "opencl: %s", mamba2_last_error());
    st = run(ref, s, n, 0, fn, cs, rr, "ref");
    th_expect(st == MAMBA2_STATUS_OK, "ref: %s", mamba2_last_error());
    int nans = 0;
    for (int i = 0; i < n; i++) {
        if (!s[i].present || !s[i].is_out || !rg[i] || !rr[i]) continue;
        const int64_t m = th_numel(s[i].rank, s[i].sh);
        int64_t bad = 0;
        for (int64_t k = 0; k < m; k++) {
            bad += isnan(rg[i][k]) != isnan(rr[i][k]);
            nans += isnan(rr[i][k]) != 0;
        }
        th_expect(bad == 0, "%s: %lld elements differ in NaN-ness from the reference", s[i].name,
                  (long long)bad);
    }
    th_expect(nans > 0, "the reference shows no NaN");
    free_res(rg, n);
    free_res(rr, n);
    th_end();
}

static void nan_checks(void) {
    spec s[MAXT];
    {
        const cv_case c = {"nan", 1, 150, 9, 4, 1, 1, 1, 3, 0, 0};
        cv_specs(&c, s, 99);
        s[CX].vals[70 * 9 + 3] = NAN; /* a NaN input: later tokens must not see it */
        nan_pattern("conv1d x[0,70,3]", s, CN, cv_call, &c);
        free_specs(s, CN);
    }
    {
        const cs_case c = {"nan", 3, 6, 21, 4, 5, 1, 1, 1, 0, 0, 0, 0};
        cs_specs(&c, s, 98);
        s[SX].vals[1 * 6 * 21 + 1 * 21 + 4] = NAN; /* row 1, token 1: tokens 5.. clean */
        nan_pattern("conv1d_step x[1,1,4]", s, SN, cs_call, &c);
        free_specs(s, SN);
    }
    {
        const st_case c = st_cases[1];
        st_specs(&c, s, 97);
        s[TX].vals[(1 * 3 + 1) * 3 * 7 + 2 * 7 + 5] = NAN; /* row 1, token 1, head 2, p 5 */
        nan_pattern("ssd_step x[1,1,2,5]", s, TN, st_call, &c);
        free_specs(s, TN);
    }
    {
        const rn_case c = rn_cases[2];
        rn_specs(&c, s, 96);
        s[RZ].vals[5 * 64 + 17] = NAN;
        nan_pattern("rmsnorm z[5,17]", s, RN, rn_call, &c);
        free_specs(s, RN);
    }
}

/* Bad arguments reach the OpenCL context's checks: status, and outputs untouched. */
static void error_checks(void) {
    th_begin("errors: F64 activations are UNSUPPORTED on %s", gpu_name);
    {
        double x[8] = {0}, w[4] = {0}, out[8];
        for (int i = 0; i < 8; i++) out[i] = 7.0;
        mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F64, 3, (int64_t[]){1, 4, 2});
        mamba2_tensor_t tw = mamba2_tensor_make(w, MAMBA2_DTYPE_F64, 2, (int64_t[]){2, 2});
        mamba2_tensor_t to = mamba2_tensor_make(out, MAMBA2_DTYPE_F64, 3, (int64_t[]){1, 4, 2});
        mamba2_status_t st = mamba2_conv1d_forward(gpu, &to, NULL, &tx, &tw, NULL);
        gt_expect_err(st, MAMBA2_STATUS_UNSUPPORTED, gpu_name, NULL);
        th_expect(out[0] == 7.0 && out[7] == 7.0, "out was written");
    }
    th_end();
    th_begin("errors: conv1d weight shape");
    {
        const cv_case c = {"bad", 2, 10, 6, 4, 0, 0, 0, 0, 0, 0};
        spec s[CN];
        cv_specs(&c, s, 5);
        s[CW].sh[0] = 5; /* weight [5,4] for C = 6 */
        free(s[CW].vals);
        fill(&(th_rng){{1, 2, 3, 4}}, &s[CW], 1, 0);
        for (int i = CFIN; i < CN; i++) s[i].present = 0;
        s[CDO].present = s[CDF].present = 0;
        double *rg[CN];
        mamba2_status_t st = run(gpu, s, CN, 1, fwd_only_cv, &c, rg, "opencl");
        gt_expect_err(st, MAMBA2_STATUS_INVALID_ARGUMENT, "weight", NULL);
        int64_t n = th_numel(3, s[COUT].sh), untouched = 1;
        for (int64_t i = 0; i < n; i++) untouched &= isnan(rg[COUT][i]);
        th_expect(untouched, "out was written on a failed call");
        free_res(rg, CN);
        free_specs(s, CN);
    }
    th_end();
    th_begin("errors: ssd_step duplicate slots");
    {
        st_case c = st_cases[0];
        spec s[TN];
        st_specs(&c, s, 6);
        s[TIX].vals[1] = s[TIX].vals[0] = 2;
        double *rg[TN];
        mamba2_status_t st = run(gpu, s, TN, 0, st_call, &c, rg, "opencl");
        gt_expect_err(st, MAMBA2_STATUS_INVALID_ARGUMENT, "state_indices", NULL);
        const int64_t n = th_numel(s[TSC].rank, s[TSC].sh);
        th_expect(gt_bits_equal(rg[TSC], s[TSC].vals, n), "state_cache changed on a failed call");
        free_res(rg, TN);
        free_specs(s, TN);
    }
    th_end();
    th_begin("errors: rmsnorm group_size does not divide D");
    {
        rn_case c = rn_cases[1];
        spec s[RN];
        rn_specs(&c, s, 8);
        s[RSTD].present = 0;
        c.S = 7;
        double *rg[RN];
        mamba2_status_t st = run(gpu, s, RN, 0, rn_call, &c, rg, "opencl");
        gt_expect_err(st, MAMBA2_STATUS_INVALID_ARGUMENT, "group_size", NULL);
        free_res(rg, RN);
        free_specs(s, RN);
    }
    th_end();
}

/* Padding rows of the step ops keep out (and all_states) bitwise. */
static void check_padding(spec *s, int out_id, int as_id, int ix_id, int n, call_fn fn,
                          const void *cs) {
    if (!s[ix_id].present) return;
    double *rg[MAXT];
    if (run(gpu, s, n, 1, fn, cs, rg, "opencl") != MAMBA2_STATUS_OK) return;
    const int64_t B = s[ix_id].sh[0];
    for (int id = out_id; id <= as_id; id++) {
        if (!s[id].present || !rg[id]) continue;
        const int64_t per = th_numel(s[id].rank, s[id].sh) / B;
        for (int64_t b = 0; b < B; b++)
            if (s[ix_id].vals[b] < 0)
                th_expect(gt_bits_equal(rg[id] + b * per, s[id].vals + b * per, per),
                          "%s row %lld (padding) changed", s[id].name, (long long)b);
    }
    free_res(rg, n);
}

/* ========================================================== device memory === */

static tcl cl;
static cl_context dcl_ctx;
static cl_command_queue dcl_q;
static mamba2_context_t *dgpu;

/* 0 when the device mode cannot be set up (reported as a failure by the caller). */
static int device_open(void) {
    cl_platform_id pf[8];
    cl_uint np = 0, nd = 0;
    cl_device_id dev;
    cl_int e = 0;
    if (!tcl_load(&cl) || cl.clGetPlatformIDs(8, pf, &np) != CL_SUCCESS || !np) return 0;
    for (cl_uint i = 0; i < np && !nd; i++)
        if (cl.clGetDeviceIDs(pf[i], CL_DEVICE_TYPE_ALL, 1, &dev, &nd) != CL_SUCCESS) nd = 0;
    if (!nd) return 0;
    dcl_ctx = cl.clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    if (!dcl_ctx || e) return 0;
    dcl_q = cl.clCreateCommandQueue(dcl_ctx, dev, 0, &e);
    if (!dcl_q || e) return 0;
    return mamba2_context_create_opencl(&dgpu, dcl_ctx, dev, dcl_q) == MAMBA2_STATUS_OK;
}

/* The op on cl_mem tensors (contiguous; index tensors stay host arrays) == the host mode. */
static void device_unit(const char *what, spec *s, int n, call_fn fn, const void *cs) {
    th_begin("device mode: %s", what);
    if (!th_expect(dgpu != NULL, "no device-mode context (%s)", mamba2_last_error())) {
        th_end();
        return;
    }
    double *rh[MAXT];
    mamba2_status_t st = run(gpu, s, n, 0, fn, cs, rh, "opencl host");
    th_expect(st == MAMBA2_STATUS_OK, "host mode: %s", mamba2_last_error());
    gt g[MAXT];
    cl_mem m[MAXT] = {0};
    memset(g, 0, sizeof g);
    for (int i = 0; i < n; i++) {
        if (!s[i].present) continue;
        if (s[i].dt != MAMBA2_DTYPE_F32) { /* an index tensor: host memory */
            gt_make(&g[i], s[i].dt, s[i].rank, s[i].sh, 0, 0, s[i].vals);
            continue;
        }
        const int64_t k = th_numel(s[i].rank, s[i].sh);
        float *h = (float *)th_xmalloc((size_t)(k > 0 ? k : 1) * sizeof(float));
        for (int64_t j = 0; j < k; j++)
            h[j] = s[i].is_out && !s[i].inout ? NAN : (float)s[i].vals[j];
        cl_int e = 0;
        m[i] = cl.clCreateBuffer(dcl_ctx, CL_MEM_READ_WRITE, (size_t)(k > 0 ? k : 1) * 4, NULL, &e);
        if (k > 0)
            cl.clEnqueueWriteBuffer(dcl_q, m[i], CL_TRUE, 0, (size_t)k * 4, h, 0, NULL, NULL);
        free(h);
        void *base = NULL;
        st = mamba2_opencl_register_buffer(dgpu, m[i], (size_t)(k > 0 ? k : 1) * 4, &base);
        th_expect(st == MAMBA2_STATUS_OK, "register_buffer: %s", mamba2_last_error());
        g[i].present = 1;
        g[i].t = mamba2_tensor_make(base, MAMBA2_DTYPE_F32, s[i].rank, s[i].sh);
    }
    st = fn(dgpu, cs, g);
    th_expect(st == MAMBA2_STATUS_OK, "device mode: %s", mamba2_last_error());
    cl.clFinish(dcl_q);
    for (int i = 0; i < n; i++) {
        if (!s[i].present) continue;
        if (!m[i]) {
            gt_free(&g[i]);
            continue;
        }
        const int64_t k = th_numel(s[i].rank, s[i].sh);
        if (s[i].is_out && k > 0 && rh[i]) {
            float *h = (float *)th_xmalloc((size_t)k * sizeof(float));
            double *v = (double *)th_xmalloc((size_t)k * sizeof(double));
            cl.clEnqueueReadBuffer(dcl_q, m[i], CL_TRUE, 0, (size_t)k * 4, h, 0, NULL, NULL);
            for (int64_t j = 0; j < k; j++) v[j] = h[j];
            th_expect(gt_bits_equal(v, rh[i], k), "%s differs from the host mode", s[i].name);
            free(h);
            free(v);
        }
        mamba2_opencl_unregister_buffer(dgpu, m[i]);
        cl.clReleaseMemObject(m[i]);
    }
    free_res(rh, n);
    th_end();
}

static void device_checks(void) {
    spec s[MAXT];
    const int ok = device_open();
    if (!ok) {
        th_begin("device mode: setup");
        th_fail("cannot create a device-mode context: %s", mamba2_last_error());
        th_end();
        return;
    }
    int n = cv_specs(&cv_cases[7], s, 107);
    device_unit("conv1d varlen_i32", s, n, cv_call, &cv_cases[7]);
    free_specs(s, n);
    n = rn_specs(&rn_cases[5], s, 205);
    device_unit("rmsnorm g130_many_rows", s, n, rn_call, &rn_cases[5]);
    free_specs(s, n);
    n = cs_specs(&cs_cases[0], s, 300);
    device_unit("conv1d_step w4_decode", s, n, cs_call, &cs_cases[0]);
    free_specs(s, n);
    n = st_specs(&st_cases[0], s, 400);
    device_unit("ssd_step decode_t1", s, n, st_call, &st_cases[0]);
    free_specs(s, n);
    mamba2_context_destroy(dgpu);
    cl.clReleaseCommandQueue(dcl_q);
    cl.clReleaseContext(dcl_ctx);
}

int main(int argc, char **argv) {
    int cuda = 0; /* --backend cuda: the same units on the CUDA backend (host mode) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) th_set_verbose(2);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            const char *b = argv[++i];
            if (strcmp(b, "opencl") && strcmp(b, "cuda")) {
                printf("usage: test_opencl_ops [--backend opencl|cuda] [-v]\n");
                return 2;
            }
            cuda = !strcmp(b, "cuda");
            gpu_name = b;
        }
    }
    const char *api = cuda ? "CUDA" : "OpenCL";
    mamba2_status_t st =
        mamba2_context_create(&gpu, cuda ? MAMBA2_BACKEND_CUDA : MAMBA2_BACKEND_OPENCL, 0);
    if (st == MAMBA2_STATUS_BACKEND_UNAVAILABLE) {
        printf("skipped: no %s device (%s)\n", api, mamba2_last_error());
        return 77;
    }
    if (st != MAMBA2_STATUS_OK) {
        printf("setup: %s context: %s: %s\n0 passed, 1 failed\n", api, mamba2_status_string(st),
               mamba2_last_error());
        return 1;
    }
    ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    cpu = th_ctx(MAMBA2_BACKEND_CPU, 2, NULL);
    spec s[MAXT];
    for (size_t i = 0; i < sizeof cv_cases / sizeof *cv_cases; i++) {
        const cv_case *c = &cv_cases[i];
        th_begin("conv1d %s [B=%lld L=%lld C=%lld W=%lld]%s", c->name, (long long)c->B,
                 (long long)c->L, (long long)c->C, (long long)c->W, c->pad ? " strided" : "");
        const int n = cv_specs(c, s, 100 + i);
        compare_all(s, n, c->pad, cv_call, c);
        free_specs(s, n);
        th_end();
    }
    for (size_t i = 0; i < sizeof rn_cases / sizeof *rn_cases; i++) {
        const rn_case *c = &rn_cases[i];
        th_begin("rmsnorm %s [M=%lld D=%lld S=%lld]%s", c->name, (long long)c->M, (long long)c->D,
                 (long long)c->S, c->pad ? " strided" : "");
        const int n = rn_specs(c, s, 200 + i);
        compare_all(s, n, c->pad, rn_call, c);
        free_specs(s, n);
        th_end();
    }
    for (size_t i = 0; i < sizeof cs_cases / sizeof *cs_cases; i++) {
        const cs_case *c = &cs_cases[i];
        th_begin("conv1d_step %s [B=%lld T=%lld C=%lld W=%lld]", c->name, (long long)c->B,
                 (long long)c->T, (long long)c->C, (long long)c->W);
        const int n = cs_specs(c, s, 300 + i);
        compare_all(s, n, c->pad, cs_call, c);
        check_padding(s, SOUT, SOUT, SIX, n, cs_call, c);
        free_specs(s, n);
        th_end();
    }
    for (size_t i = 0; i < sizeof st_cases / sizeof *st_cases; i++) {
        const st_case *c = &st_cases[i];
        th_begin("ssd_step %s [B=%lld T=%lld H=%lld P=%lld N=%lld G=%lld]", c->name,
                 (long long)c->B, (long long)c->T, (long long)c->H, (long long)c->P,
                 (long long)c->N, (long long)c->G);
        const int n = st_specs(c, s, 400 + i);
        compare_all(s, n, c->pad, st_call, c);
        check_padding(s, TOUT, TAS, TIX, n, st_call, c);
        free_specs(s, n);
        th_end();
    }
    nan_checks();
    error_checks();
    if (!cuda) device_checks(); /* OpenCL device mode (cl_mem buffers); CUDA's: test_cuda_device */
    mamba2_context_destroy(gpu);
    mamba2_context_destroy(ref);
    mamba2_context_destroy(cpu);
    return th_finish();
}
