/*
 * ops_steps.c — the case tables of the decode steps, conv1d_step and ssd_step, for test_ops
 * (ops.h), their NaN-propagation units and error tables.
 *
 * Per case and backend: compare_spec (every output and the updated cache against the float64
 * reference within TH_TOL_F32, guards, gaps, unchanged inputs, bitwise rerun, the CPU
 * cross-check), and padding rows (a negative slot in state_indices) keep out, all_states and
 * their cache slots bitwise.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

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

static int cs_specs(const void *p, spec *s, uint64_t seed) {
    const cs_case *c = (const cs_case *)p;
    th_rng r;
    th_rng_seed(&r, seed);
    memset(s, 0, SN * sizeof *s);
    const int64_t x3[3] = {c->B, c->T, c->C}, x2[2] = {c->B, c->C}, cw[2] = {c->C, c->W};
    const int64_t sc[3] = {c->S, c->C, c->W - 1};
    spec_fill(&r, spec_add(s, SX, "x", c->rank2 ? 2 : 3, c->rank2 ? x2 : x3, 0), 1, 0);
    spec_fill(&r, spec_add(s, SW, "weight", 2, cw, 0), 0.5, 0);
    if (c->bias) spec_fill(&r, spec_add(s, SB, "bias", 1, (int64_t[]){c->C}, 0), 0.5, 0);
    if (c->idx) {
        spec *ix = spec_add(s, SIX, "state_indices", 1, (int64_t[]){c->B}, 0);
        ix->dt = c->idx64 ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32;
        slots(&r, ix, c->B, c->S, c->pad_row);
    }
    spec *o = spec_add(s, SOUT, "out", c->rank2 ? 2 : 3, c->rank2 ? x2 : x3, 1);
    o->inout = 1; /* padding rows keep these values */
    spec_fill(&r, o, 1, 0);
    spec *ca = spec_add(s, SCACHE, "conv_cache", 3, sc, 1);
    ca->inout = 1;
    spec_fill(&r, ca, 1, 0);
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

static int st_specs(const void *p, spec *s, uint64_t seed) {
    const st_case *c = (const st_case *)p;
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
    spec_fill(&r, spec_add(s, TX, "x", xr, xs, 0), 1, 0);
    spec *dt = spec_add(s, TDT, "dt", dr, ds, 0);
    const int64_t ndt = th_numel(dr, ds);
    dt->vals = (double *)th_xmalloc((size_t)(ndt > 0 ? ndt : 1) * sizeof(double));
    for (int64_t i = 0; i < ndt; i++) /* U(0.01, 0.11), some negative (clamped to 0) */
        dt->vals[i] = (double)(float)(th_rng_uniform(&r, 0.01, 0.11) - (i % 7 == 3 ? 0.2 : 0));
    spec *A = spec_add(s, TA, "A", 1, (int64_t[]){H}, 0);
    A->vals = (double *)th_xmalloc((size_t)H * sizeof(double));
    for (int64_t h = 0; h < H; h++) A->vals[h] = (double)(float)-th_rng_uniform(&r, 0.1, 0.5);
    spec_fill(&r, spec_add(s, TBM, "Bm", br, bs, 0), 0.2, 0);
    spec_fill(&r, spec_add(s, TCM, "Cm", br, bs, 0), 0.2, 0);
    if (c->D_mode == 1) spec_fill(&r, spec_add(s, TD, "D", 1, (int64_t[]){H}, 0), 1, 0);
    if (c->D_mode == 2) spec_fill(&r, spec_add(s, TD, "D", 2, (int64_t[]){H, P}, 0), 1, 0);
    if (c->z) spec_fill(&r, spec_add(s, TZ, "z", xr, xs, 0), 1, 0);
    if (c->dtb) spec_fill(&r, spec_add(s, TDTB, "dt_bias", 1, (int64_t[]){H}, 0), 0.1, 0);
    if (c->idx) {
        spec *ix = spec_add(s, TIX, "state_indices", 1, (int64_t[]){B}, 0);
        ix->dt = (c->pad_row & 1) ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32;
        slots(&r, ix, B, c->S, c->pad_row);
    }
    spec *sc = spec_add(s, TSC, "state_cache", 4, (int64_t[]){c->S, H, P, N}, 1);
    sc->inout = 1;
    spec_fill(&r, sc, 0.2, 0);
    spec *o = spec_add(s, TOUT, "out", xr, xs, 1);
    o->inout = 1;
    spec_fill(&r, o, 1, 0);
    if (c->as) {
        spec *a = spec_add(s, TAS, "all_states", ar, as, 1);
        a->inout = 1;
        spec_fill(&r, a, 1, 0);
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

const ops_sample ops_conv1d_step_sample = {"conv1d_step w4_decode", cs_specs, cs_call,
                                           &cs_cases[0], 300};
const ops_sample ops_ssd_step_sample = {"ssd_step decode_t1", st_specs, st_call, &st_cases[0], 400};

#define INV MAMBA2_STATUS_INVALID_ARGUMENT
#define UNS MAMBA2_STATUS_UNSUPPORTED
#define OK_ MAMBA2_STATUS_OK

/* ---- conv1d_step: runner, NaN, errors ------------------------------------------------- */

/* an input element changed after arming: re-snapshot so that the check sees the new value */
static void set_index(gt *g, int id, int64_t i, double v) {
    gt_put(g[id].t.data, g[id].t.dtype, g[id].off[i], v);
    memcpy(g[id].snap, g[id].alloc, g[id].bytes + 2 * TH_GUARD);
}
static void cs_cache_null(gt *g, void *c) { (void)c, gt_free(&g[SCACHE]); }
static void cs_slot_range(gt *g, void *c) { set_index(g, SIX, 0, (double)((cs_case *)c)->S); }
static void cs_slot_dup(gt *g, void *c) {
    (void)c, set_index(g, SIX, 1, 6), set_index(g, SIX, 0, 6);
}
static void cs_x_i32(gt *g, void *c) { (void)c, g[SX].t.dtype = MAMBA2_DTYPE_I32; }
static void cs_cache_width(gt *g, void *c) { (void)c, g[SCACHE].t.shape[2] = 2; } /* W-1 = 3 */

static const spec_err cs_errs[] = {
    {"F64 activations", NULL, {OK_, UNS, UNS}, "$be", 1},
    {"conv_cache NULL", cs_cache_null, {INV, INV, INV}, "conv_cache", 0},
    {"state_indices slot S (out of range)", cs_slot_range, {INV, INV, INV}, "state_indices", 0},
    {"state_indices duplicate slots", cs_slot_dup, {INV, INV, INV}, "state_indices", 0},
    {"x int32", cs_x_i32, {INV, INV, INV}, "x", 0},
    {"conv_cache [S,C,2] for W = 4", cs_cache_width, {INV, INV, INV}, "conv_cache", 0},
};

void ops_conv1d_step(const ops_be *be) {
    spec s[MAXT];
    for (size_t i = 0; i < sizeof cs_cases / sizeof *cs_cases; i++) {
        const cs_case *c = &cs_cases[i];
        char name[96];
        snprintf(name, sizeof name, "conv1d_step %s", c->name);
        if (!ops_selected(name)) continue;
        th_begin("%s [%s] [B=%lld T=%lld C=%lld W=%lld]", name, be->name, (long long)c->B,
                 (long long)c->T, (long long)c->C, (long long)c->W);
        const int n = cs_specs(c, s, 300 + i);
        compare_spec(be, s, n, c->pad, cs_call, c);
        check_padding(be, s, SOUT, SOUT, SIX, n, cs_call, c);
        spec_free(s, n);
        th_end();
    }
    if (ops_selected("nan conv1d_step x[1,1,4]")) {
        const cs_case c = {"nan", 3, 6, 21, 4, 5, 1, 1, 1, 0, 0, 0, 0};
        cs_specs(&c, s, 98);
        s[SX].vals[1 * 6 * 21 + 1 * 21 + 4] = NAN; /* row 1, token 1: tokens 5.. clean */
        nan_pattern(be, "conv1d_step x[1,1,4]", s, SN, cs_call, &c);
        spec_free(s, SN);
    }
    run_spec_errors(be, "conv1d_step", cs_errs, (int)(sizeof cs_errs / sizeof *cs_errs), cs_specs,
                    &cs_cases[0], sizeof cs_cases[0], cs_call);
}

/* ---- ssd_step: runner, NaN, errors ---------------------------------------------------- */

static void st_slot_dup(gt *g, void *c) {
    (void)c, set_index(g, TIX, 1, 2), set_index(g, TIX, 0, 2);
}
static void st_a_short(gt *g, void *c) { (void)c, g[TA].t.shape[0] = 3; } /* H = 4 */
static void st_g_not_div(gt *g, void *c) { (void)c, g[TBM].t.shape[1] = g[TCM].t.shape[1] = 3; }
static void st_x_null(gt *g, void *c) { (void)c, gt_free(&g[TX]); }
static void st_cache_i32(gt *g, void *c) { (void)c, g[TSC].t.dtype = MAMBA2_DTYPE_I32; }
static void st_cache_huge(gt *g, void *c) { (void)c, g[TSC].t.shape[0] = (int64_t)1 << 41; }

static const spec_err st_errs[] = {
    {"state_indices duplicate slots", st_slot_dup, {INV, INV, INV}, "state_indices", 0},
    {"F64 activations", NULL, {OK_, UNS, UNS}, "$be", 1},
    {"A [3] for H = 4", st_a_short, {INV, INV, INV}, "A", 0},
    {"Bm, Cm G = 3 for H = 4", st_g_not_div, {INV, INV, INV}, "Bm", 0},
    {"x NULL", st_x_null, {INV, INV, INV}, "x", 0},
    {"state_cache int32", st_cache_i32, {INV, INV, INV}, "state_cache", 0},
    {"state_cache S = 2^41", st_cache_huge, {INV, INV, INV}, "state_cache", 0},
};

void ops_ssd_step(const ops_be *be) {
    spec s[MAXT];
    for (size_t i = 0; i < sizeof st_cases / sizeof *st_cases; i++) {
        const st_case *c = &st_cases[i];
        char name[96];
        snprintf(name, sizeof name, "ssd_step %s", c->name);
        if (!ops_selected(name)) continue;
        th_begin("%s [%s] [B=%lld T=%lld H=%lld P=%lld N=%lld G=%lld]", name, be->name,
                 (long long)c->B, (long long)c->T, (long long)c->H, (long long)c->P,
                 (long long)c->N, (long long)c->G);
        const int n = st_specs(c, s, 400 + i);
        compare_spec(be, s, n, c->pad, st_call, c);
        check_padding(be, s, TOUT, TAS, TIX, n, st_call, c);
        spec_free(s, n);
        th_end();
    }
    if (ops_selected("nan ssd_step x[1,1,2,5]")) {
        const st_case c = st_cases[1];
        st_specs(&c, s, 97);
        s[TX].vals[(1 * 3 + 1) * 3 * 7 + 2 * 7 + 5] = NAN; /* row 1, token 1, head 2, p 5 */
        nan_pattern(be, "ssd_step x[1,1,2,5]", s, TN, st_call, &c);
        spec_free(s, TN);
    }
    run_spec_errors(be, "ssd_step", st_errs, (int)(sizeof st_errs / sizeof *st_errs), st_specs,
                    &st_cases[0], sizeof st_cases[0], st_call);
}
