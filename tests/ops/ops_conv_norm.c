/*
 * ops_conv_norm.c — the case tables of conv1d (forward and backward) and gated RMSNorm
 * (forward and backward) for test_ops (ops.h), their NaN-propagation units and error tables.
 *
 * Per case and backend (compare_spec): every output against the float64 reference within
 * TH_TOL_F32 (SPEC §8) with no NaN/Inf, outputs pre-filled with NaN, guard bytes around every
 * buffer, gaps of strided views (pad) untouched and inputs unchanged byte for byte; a second
 * run (the other layout) bitwise identical; the GPU backends and the reference fed float32
 * also against the CPU backend within TH_TOL_F32.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

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

static int cv_specs(const void *p, spec *s, uint64_t seed) {
    const cv_case *c = (const cv_case *)p;
    th_rng r;
    th_rng_seed(&r, seed);
    memset(s, 0, CN * sizeof *s);
    const int64_t B = c->nseq ? 1 : c->B, S = c->nseq ? c->nseq : B, L = c->L, C = c->C, W = c->W;
    const int64_t bl[3] = {B, L, C}, cw[2] = {C, W}, sc[3] = {S, C, W - 1};
    spec_fill(&r, spec_add(s, CX, "x", 3, bl, 0), 1, 0);
    spec_fill(&r, spec_add(s, CW, "weight", 2, cw, 0), 0.5, 0);
    if (c->bias) spec_fill(&r, spec_add(s, CB, "bias", 1, (int64_t[]){C}, 0), 0.5, 0);
    if (c->init) spec_fill(&r, spec_add(s, CI, "initial_conv_state", 3, sc, 0), 1, 0);
    if (c->nseq) {
        spec *cu = spec_add(s, CCU, "cu_seqlens", 1, (int64_t[]){S + 1}, 0);
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
    spec_fill(&r, spec_add(s, CDO, "dout", 3, bl, 0), 1, 0);
    if (W > 1) spec_fill(&r, spec_add(s, CDF, "dfinal_conv_state", 3, sc, 0), 1, 0);
    spec_add(s, COUT, "out", 3, bl, 1);
    if (W > 1) spec_add(s, CFIN, "final_conv_state", 3, sc, 1);
    spec_add(s, CDX, "dx", 3, bl, 1);
    spec_add(s, CDW, "dweight", 2, cw, 1);
    if (c->bias) spec_add(s, CDB, "dbias", 1, (int64_t[]){C}, 1);
    if (c->init) spec_add(s, CDI, "dinitial_conv_state", 3, sc, 1);
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
    mamba2_rmsnorm_gated_grads_t gr = {0, gt_t(&g[RDX]), gt_t(&g[RDZ]), gt_t(&g[RDW]),
                                       gt_t(&g[RDB])};
    return mamba2_rmsnorm_gated_backward(ctx, &gr, gt_t(&g[RDO]), gt_t(&g[RX]), gt_t(&g[RZ]),
                                         gt_t(&g[RW]), gt_t(&g[RB]),
                                         c->use_rstd ? gt_t(&g[RSTD]) : NULL, &o, NULL, 0);
}

static int rn_specs(const void *p, spec *s, uint64_t seed) {
    const rn_case *c = (const rn_case *)p;
    th_rng r;
    th_rng_seed(&r, seed);
    memset(s, 0, RN * sizeof *s);
    const int64_t md[2] = {c->M, c->D}, d1[1] = {c->D}, mg[2] = {c->M, c->D / c->S};
    spec_fill(&r, spec_add(s, RX, "x", 2, md, 0), 1, 0);
    if (c->z) spec_fill(&r, spec_add(s, RZ, "z", 2, md, 0), 1, 0);
    /* groups of 1..4: |v| away from 0, where 1 - mean(xh²) = eps r² is smallest */
    for (int64_t i = 0; c->S <= 4 && i < c->M * c->D; i++) {
        double *xv = &s[RX].vals[i];
        *xv = (double)(float)(*xv < 0 ? *xv - 0.5 : *xv + 0.5);
        if (c->z) s[RZ].vals[i] = (double)(float)(fabs(s[RZ].vals[i]) + 1.0);
    }
    spec_fill(&r, spec_add(s, RW, "weight", 1, d1, 0), 0.5, 1);
    if (c->bias) spec_fill(&r, spec_add(s, RB, "bias", 1, d1, 0), 0.5, 0);
    spec_fill(&r, spec_add(s, RDO, "dout", 2, md, 0), 1, 0);
    spec_add(s, ROUT, "out", 2, md, 1);
    spec_add(s, RSTD, "rstd", 2, mg, 1);
    spec_add(s, RDX, "dx", 2, md, 1);
    if (c->z) spec_add(s, RDZ, "dz", 2, md, 1);
    spec_add(s, RDW, "dweight", 1, d1, 1);
    if (c->bias) spec_add(s, RDB, "dbias", 1, d1, 1);
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

const ops_sample ops_conv1d_sample = {"conv1d varlen_i32", cv_specs, cv_call, &cv_cases[7], 107};
const ops_sample ops_rmsnorm_sample = {"rmsnorm g130_many_rows", rn_specs, rn_call, &rn_cases[5],
                                       205};

/* ---- conv1d: runner, NaN, errors ------------------------------------------------------ */

#define INV MAMBA2_STATUS_INVALID_ARGUMENT
#define UNS MAMBA2_STATUS_UNSUPPORTED
#define OK_ MAMBA2_STATUS_OK

static void cv_weight_rows(gt *g, void *c) { (void)c, g[CW].t.shape[0] = 5; } /* C = 6 */
static void cv_x_null(gt *g, void *c) { (void)c, gt_free(&g[CX]); }
static void cv_x_i32(gt *g, void *c) { (void)c, g[CX].t.dtype = MAMBA2_DTYPE_I32; }
static void cv_x_huge(gt *g, void *c) { (void)c, g[CX].t.shape[1] = (int64_t)1 << 41; }
static void cv_x_stride(gt *g, void *c) { (void)c, g[CX].t.stride[2] = 2; }
static void cv_w_width(gt *g, void *c) { (void)c, g[CW].t.shape[1] = 0; }

static const spec_err cv_errs[] = {
    {"F64 activations", NULL, {OK_, UNS, UNS}, "$be", 1},
    {"weight [5,4] for C = 6", cv_weight_rows, {INV, INV, INV}, "weight", 0},
    {"x NULL", cv_x_null, {INV, INV, INV}, "x", 0},
    {"x int32", cv_x_i32, {INV, INV, INV}, "x", 0},
    {"x L = 2^41", cv_x_huge, {INV, INV, INV}, "x", 0},
    {"x last-dim stride 2", cv_x_stride, {INV, INV, INV}, "x", 0},
    {"weight width 0", cv_w_width, {INV, INV, INV}, "weight", 0},
};

void ops_conv1d(const ops_be *be) {
    spec s[MAXT];
    for (size_t i = 0; i < sizeof cv_cases / sizeof *cv_cases; i++) {
        const cv_case *c = &cv_cases[i];
        char name[96];
        snprintf(name, sizeof name, "conv1d %s", c->name);
        if (!ops_selected(name)) continue;
        th_begin("%s [%s] [B=%lld L=%lld C=%lld W=%lld]%s", name, be->name, (long long)c->B,
                 (long long)c->L, (long long)c->C, (long long)c->W, c->pad ? " strided" : "");
        const int n = cv_specs(c, s, 100 + i);
        compare_spec(be, s, n, c->pad, cv_call, c);
        spec_free(s, n);
        th_end();
    }
    if (ops_selected("nan conv1d x[0,70,3]")) {
        const cv_case c = {"nan", 1, 150, 9, 4, 1, 1, 1, 3, 0, 0};
        cv_specs(&c, s, 99);
        s[CX].vals[70 * 9 + 3] = NAN; /* a NaN input: later tokens must not see it */
        nan_pattern(be, "conv1d x[0,70,3]", s, CN, cv_call, &c);
        spec_free(s, CN);
    }
    const cv_case base = {"errors", 2, 10, 6, 4, 1, 1, 1, 0, 0, 0};
    run_spec_errors(be, "conv1d", cv_errs, (int)(sizeof cv_errs / sizeof *cv_errs), cv_specs,
                    &base, sizeof base, cv_call);
}

/* ---- gated RMSNorm: runner, NaN, errors ----------------------------------------------- */

static void rn_group7(gt *g, void *c) { /* group_size 7 does not divide D = 64 */
    gt_free(&g[RSTD]);
    ((rn_case *)c)->S = 7;
}
static void rn_z_short(gt *g, void *c) { (void)c, g[RZ].t.shape[1] = 63; }
static void rn_w_null(gt *g, void *c) { (void)c, gt_free(&g[RW]); }
static void rn_x_i32(gt *g, void *c) { (void)c, g[RX].t.dtype = MAMBA2_DTYPE_I32; }
static void rn_x_huge(gt *g, void *c) { (void)c, g[RX].t.shape[0] = (int64_t)1 << 41; }
static void rn_eps_neg(gt *g, void *c) { (void)g, ((rn_case *)c)->eps = -1.0; }

static const spec_err rn_errs[] = {
    {"group_size 7 does not divide D", rn_group7, {INV, INV, INV}, "group_size", 0},
    {"F64 activations", NULL, {OK_, UNS, UNS}, "$be", 1},
    {"z [33,63] for x [33,64]", rn_z_short, {INV, INV, INV}, "z", 0},
    {"weight NULL", rn_w_null, {INV, INV, INV}, "weight", 0},
    {"x int32", rn_x_i32, {INV, INV, INV}, "x", 0},
    {"x M = 2^41", rn_x_huge, {INV, INV, INV}, "x", 0},
    {"eps < 0", rn_eps_neg, {INV, INV, INV}, "eps", 0},
};

void ops_rmsnorm(const ops_be *be) {
    spec s[MAXT];
    for (size_t i = 0; i < sizeof rn_cases / sizeof *rn_cases; i++) {
        const rn_case *c = &rn_cases[i];
        char name[96];
        snprintf(name, sizeof name, "rmsnorm %s", c->name);
        if (!ops_selected(name)) continue;
        th_begin("%s [%s] [M=%lld D=%lld S=%lld]%s", name, be->name, (long long)c->M,
                 (long long)c->D, (long long)c->S, c->pad ? " strided" : "");
        const int n = rn_specs(c, s, 200 + i);
        compare_spec(be, s, n, c->pad, rn_call, c);
        spec_free(s, n);
        th_end();
    }
    if (ops_selected("nan rmsnorm z[5,17]")) {
        const rn_case c = rn_cases[2];
        rn_specs(&c, s, 96);
        s[RZ].vals[5 * 64 + 17] = NAN;
        nan_pattern(be, "rmsnorm z[5,17]", s, RN, rn_call, &c);
        spec_free(s, RN);
    }
    run_spec_errors(be, "rmsnorm", rn_errs, (int)(sizeof rn_errs / sizeof *rn_errs), rn_specs,
                    &rn_cases[1], sizeof rn_cases[1], rn_call);
}
