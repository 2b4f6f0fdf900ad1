/*
 * ops_stages.c — the staged chunk pipeline (SPEC §3: chunk_cumsum, bmm_chunk, chunk_state,
 * state_passing, chunk_scan) for test_ops (ops.h): the five stages chained on the backend
 * under test; each stage's outputs vs the float64 reference run on exactly the inputs the
 * chain gave it, the chain's out (and final_state) vs the fused float64 reference; strided
 * (padded) views for the odd cases; padding of the staged tensors exact. Error table: bf16
 * storage of dt (UNSUPPORTED on every backend), bad shapes, NULL tensors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ssd_case_macros.h"

/* ---- staged stages ------------------------------------------------------------------------- */

enum { X, DT, A_, BM, CM, D_, Z, DTB, INIT, DTO, DAC, CB, ST, SS, FIN, OUT, NID };
static const char *const tname[NID] = {"x",  "dt",     "A",         "Bm",     "Cm",
                                       "D",  "z",      "dt_bias",   "initial_state",
                                       "dt_out", "dA_cumsum", "CB", "states", "states_start",
                                       "final_state", "out"};
enum { S_CUMSUM, S_BMM, S_STATE, S_PASSING, S_SCAN, NSTAGE };
static const char *const sname[NSTAGE] = {"cumsum", "bmm", "state", "passing", "scan"};
static const int stage_in[NSTAGE][8] = {{DT, A_, DTB, -1},          {BM, CM, -1},
                                        {X, BM, DTO, DAC, -1},      {ST, DAC, INIT, -1},
                                        {CB, X, DTO, DAC, CM, SS, D_, Z}};
static const int stage_out[NSTAGE][3] = {{DTO, DAC, -1}, {CB, -1}, {ST, -1}, {SS, FIN, -1},
                                         {OUT, -1}};

static int64_t K_of(const th_ssd_case *c) { return (c->L + c->Q - 1) / c->Q; }

static int shape_of(const th_ssd_case *c, int id, int64_t *s) {
    const int64_t B = c->B, L = c->L, H = c->H, P = c->P, N = c->N, G = c->G, Q = c->Q,
                  K = K_of(c);
    const int64_t tab[NID][6] = {
        [X] = {4, B, L, H, P},     [Z] = {4, B, L, H, P},     [OUT] = {4, B, L, H, P},
        [DT] = {3, B, L, H},       [A_] = {1, H},             [DTB] = {1, H},
        [BM] = {4, B, L, G, N},    [CM] = {4, B, L, G, N},    [D_] = {1, H, P},
        [INIT] = {4, B, H, P, N},  [FIN] = {4, B, H, P, N},   [DTO] = {4, B, H, K, Q},
        [DAC] = {4, B, H, K, Q},   [CB] = {5, B, K, G, Q, Q}, [ST] = {5, B, K, H, P, N},
        [SS] = {5, B, K, H, P, N},
    };
    const int rank = id == D_ && c->D_mode == 2 ? 2 : (int)tab[id][0];
    for (int i = 0; i < rank; i++) s[i] = tab[id][i + 1];
    return rank;
}

typedef struct vals {
    double *v[NID];
} vals;

typedef struct stage_io {
    gt g[NID];
    mamba2_ssd_chunked_options_t o;
} stage_io;

static void sio_make(stage_io *s, int sg, const th_ssd_case *c, const vals *in,
                     mamba2_dtype_t dt, int pad) {
    memset(s, 0, sizeof *s);
    int64_t sh[MAMBA2_MAX_RANK];
    for (int k = 0; k < 8 && stage_in[sg][k] >= 0; k++) {
        const int id = stage_in[sg][k];
        if (!in->v[id]) continue;
        gt_make(&s->g[id], dt, shape_of(c, id, sh), sh, id == A_ || id == DTB ? 0 : pad, 0,
                in->v[id]);
    }
    for (int k = 0; k < 3 && stage_out[sg][k] >= 0; k++) {
        const int id = stage_out[sg][k];
        if (id == FIN && !c->final) continue;
        gt_make(&s->g[id], dt, shape_of(c, id, sh), sh, pad, 1, NULL);
    }
    s->o = mamba2_ssd_chunked_options_default();
    s->o.chunk_size = c->Q;
    s->o.D = gt_t(&s->g[D_]);
    s->o.z = gt_t(&s->g[Z]);
    s->o.dt_bias = gt_t(&s->g[DTB]);
    s->o.initial_state = gt_t(&s->g[INIT]);
    s->o.dt_softplus = c->softplus;
    if (c->limit) {
        s->o.dt_limit_lo = c->lo;
        s->o.dt_limit_hi = c->hi;
    }
}

#define T_(s, id) gt_t(&(s)->g[id])
static mamba2_status_t sio_run(mamba2_context_t *ctx, int sg, stage_io *s) {
    switch (sg) {
    case S_CUMSUM:
        return mamba2_ssd_chunk_cumsum(ctx, T_(s, DTO), T_(s, DAC), T_(s, DT), T_(s, A_), &s->o);
    case S_BMM: return mamba2_ssd_bmm_chunk(ctx, T_(s, CB), T_(s, BM), T_(s, CM), &s->o);
    case S_STATE:
        return mamba2_ssd_chunk_state(ctx, T_(s, ST), T_(s, X), T_(s, BM), T_(s, DTO),
                                      T_(s, DAC), &s->o);
    case S_PASSING:
        return mamba2_ssd_state_passing(ctx, T_(s, SS), T_(s, FIN), T_(s, ST), T_(s, DAC), &s->o);
    default:
        return mamba2_ssd_chunk_scan(ctx, T_(s, OUT), T_(s, CB), T_(s, X), T_(s, DTO), T_(s, DAC),
                                     T_(s, CM), T_(s, SS), &s->o);
    }
}

/* Run stage sg; its outputs' values go to res. Guards, gaps, inputs and "every element
 * written" are checked. */
static int run_stage(int sg, mamba2_context_t *ctx, const th_ssd_case *c, mamba2_dtype_t dt,
                     int pad, const vals *in, vals *res) {
    stage_io s;
    sio_make(&s, sg, c, in, dt, pad);
    mamba2_status_t st = sio_run(ctx, sg, &s);
    int ok = th_expect(st == MAMBA2_STATUS_OK, "%s: %s: %s", sname[sg], mamba2_status_string(st),
                       mamba2_last_error());
    char msg[256];
    for (int i = 0; ok && i < NID; i++)
        if (!gt_check(&s.g[i], tname[i], msg, sizeof msg))
            ok = th_expect(0, "%s: %s", sname[sg], msg);
    for (int k = 0; ok && k < 3 && stage_out[sg][k] >= 0; k++) {
        const int id = stage_out[sg][k];
        if (!s.g[id].present) continue;
        free(res->v[id]);
        res->v[id] = gt_values(&s.g[id]);
        ok = th_expect(th_all_finite(res->v[id], s.g[id].n), "%s: %s has NaN/Inf (unwritten?)",
                       sname[sg], tname[id]);
    }
    for (int i = 0; i < NID; i++) gt_free(&s.g[i]);
    return ok;
}

typedef struct ck_case {
    th_ssd_case c;
    int pad;
} ck_case;

static ck_case staged_cases[] = {
    {{"basic", SH(2, 64, 4, 16, 16, 16, 1)}, 0},
    {{"L_not_multiple_of_Q", SH(2, 50, 4, 8, 16, 16, 2), .final = 1}, 1},
    {{"Q1", SH(1, 13, 2, 4, 8, 1, 1), .init = 1, .final = 1}, 0},
    {{"Q_gt_L", SH(2, 20, 2, 8, 8, 64, 1), .final = 1}, 1},
    {{"L1_all", SH(2, 1, 4, 8, 8, 16, 2), .D_mode = 1, ALL_OPTS}, 1},
    {{"P3_N5_G3_H6_all", SH(2, 37, 6, 3, 5, 8, 3), .D_mode = 2, ALL_OPTS}, 1},
    {{"P17_N9_Q7", SH(2, 29, 3, 17, 9, 7, 3), .D_mode = 2, .z = 1, .final = 1}, 1},
    {{"Q40_P33_N20", SH(1, 90, 2, 33, 20, 40, 1), .D_mode = 1, STATES}, 1},
    {{"P64_N128_Q128", SH(1, 150, 2, 64, 128, 128, 1), .D_mode = 1, .z = 1, .dt_bias = 1,
      .softplus = 1, .final = 1}, 0},
    {{"L0", SH(2, 0, 2, 4, 4, 8, 1), .D_mode = 1, .z = 1, .init = 1, .final = 1}, 1},
};
#define NSTAGED ((int)(sizeof staged_cases / sizeof staged_cases[0]))

static void test_staged(const ops_be *be, ck_case *kc) {
    th_ssd_case *c = &kc->c;
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("stages %-26s [%s] [%lld,%lld,%lld,%lld,%lld,%lld,%lld]%s", c->name, be->name,
             (long long)c->B,
             (long long)c->L, (long long)c->H, (long long)c->P, (long long)c->N, (long long)c->Q,
             (long long)c->G, kc->pad ? " strided" : "");
    vals v;
    memset(&v, 0, sizeof v);
    static const int map[][2] = {{X, TH_X},   {DT, TH_DT},   {A_, TH_A},
                                 {BM, TH_BM}, {CM, TH_CM},   {D_, TH_D},
                                 {Z, TH_Z},   {DTB, TH_DTB}, {INIT, TH_INIT}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (!d.v[map[i][1]]) continue;
        int64_t sh[MAMBA2_MAX_RANK];
        const int64_t n = th_numel(shape_of(c, map[i][0], sh), sh);
        v.v[map[i][0]] = th_xmalloc((size_t)(n ? n : 1) * sizeof(double));
        if (n) memcpy(v.v[map[i][0]], d.v[map[i][1]], (size_t)n * sizeof(double));
    }
    int ok = 1;
    for (int sg = 0; ok && sg < NSTAGE; sg++) {
        vals want;
        memset(&want, 0, sizeof want);
        ok = run_stage(sg, ops_ref, c, MAMBA2_DTYPE_F64, 0, &v, &want) &&
             run_stage(sg, be->ctx, c, MAMBA2_DTYPE_F32, kc->pad, &v, &v);
        for (int k = 0; ok && k < 3 && stage_out[sg][k] >= 0; k++) {
            const int id = stage_out[sg][k];
            if (!want.v[id]) continue;
            int64_t sh[MAMBA2_MAX_RANK];
            const int64_t n = th_numel(shape_of(c, id, sh), sh);
            char label[32];
            snprintf(label, sizeof label, "%s.%s", sname[sg], tname[id]);
            th_metric(label, th_nerr(v.v[id], want.v[id], n), TH_TOL_F32);
        }
        for (int i = 0; i < NID; i++) free(want.v[i]);
    }
    /* padding of the staged tensors is exact: dt_out 0, dA_cumsum flat, CB 0 */
    const int64_t Q = c->Q, K = K_of(c);
    int bad = 0;
    for (int64_t k = 0; ok && k < K; k++) {
        const int64_t len = c->L - k * Q < Q ? c->L - k * Q : Q;
        for (int64_t bh = 0; bh < c->B * c->H; bh++) {
            const double *dd = v.v[DTO] + (bh * K + k) * Q, *cs = v.v[DAC] + (bh * K + k) * Q;
            for (int64_t i = len; i < Q; i++) bad |= dd[i] != 0.0 || cs[i] != cs[len - 1];
        }
        for (int64_t bg = 0; bg < c->B * c->G; bg++) {
            const double *cb = v.v[CB] + ((bg / c->G * K + k) * c->G + bg % c->G) * Q * Q;
            for (int64_t i = 0; i < Q; i++)
                for (int64_t j = 0; j < Q; j++)
                    if (i >= len || j >= len) bad |= cb[i * Q + j] != 0.0;
        }
    }
    th_expect(!bad, "padding of the staged tensors is not exact");
    if (ok) { /* the chain equals the fused float64 reference */
        th_ssd_io r;
        th_ssd_io_make(&r, c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
        if (th_expect(th_ssd_io_forward(ops_ref, &r, 1) == MAMBA2_STATUS_OK,
                      "fused reference failed")) {
            int64_t n;
            double *o = ops_read_all(&r, TH_OUT, &n);
            th_metric("chain.out", th_nerr(v.v[OUT], o, n), TH_TOL_F32);
            free(o);
            if (c->final) {
                o = ops_read_all(&r, TH_FINAL, &n);
                th_metric("chain.final", th_nerr(v.v[FIN], o, n), TH_TOL_F32);
                free(o);
            }
        }
        th_ssd_io_free(&r);
    }
    for (int i = 0; i < NID; i++) free(v.v[i]);
    th_ssd_data_free(&d);
    th_end();
}

/* ---- errors: {description, stage, mutation of a valid call, expected status} ------------ */

#define INV MAMBA2_STATUS_INVALID_ARGUMENT
#define UNS MAMBA2_STATUS_UNSUPPORTED
#define OK_ MAMBA2_STATUS_OK

typedef struct stage_err {
    const char *what;
    int stage;
    void (*mutate)(stage_io *s);
    ops_want want;
    const char *word; /* "$be": the backend's name */
} stage_err;

/* bf16 is 2 bytes: the float32 buffer covers it, so a wrong acceptance stays in bounds */
static void ke_dt_bf16(stage_io *s) { s->g[DT].t.dtype = MAMBA2_DTYPE_BF16; }
static void ke_dto_k(stage_io *s) { s->g[DTO].t.shape[2] -= 1; }
static void ke_cb_null(stage_io *s) { s->g[CB].present = 0; }
static void ke_x_i32(stage_io *s) { s->g[X].t.dtype = MAMBA2_DTYPE_I32; }
static void ke_ss_n(stage_io *s) { s->g[SS].t.shape[4] -= 1; }
static void ke_q0(stage_io *s) { s->o.chunk_size = 0; }
static void ke_dac_huge(stage_io *s) { s->g[DAC].t.shape[0] = (int64_t)1 << 41; }

static const stage_err stage_errs[] = {
    {"chunk_cumsum dt bf16", S_CUMSUM, ke_dt_bf16, {UNS, UNS, UNS}, "$be"},
    {"chunk_cumsum dt_out K - 1 chunks", S_CUMSUM, ke_dto_k, {INV, INV, INV}, "dt_out"},
    {"bmm_chunk CB NULL", S_BMM, ke_cb_null, {INV, INV, INV}, "CB"},
    {"chunk_state x int32", S_STATE, ke_x_i32, {INV, INV, INV}, "x"},
    {"state_passing states_start N - 1", S_PASSING, ke_ss_n, {INV, INV, INV}, "states_start"},
    {"chunk_scan chunk_size 0", S_SCAN, ke_q0, {INV, INV, INV}, "chunk_size"},
    {"chunk_scan dA_cumsum B = 2^41", S_SCAN, ke_dac_huge, {INV, INV, INV}, "dA_cumsum"},
};

static void stage_errors(const ops_be *be) {
    const th_ssd_case c = {"errors", SH(1, 20, 2, 4, 4, 8, 1), .final = 1};
    vals v; /* zeros: every call below fails before it reads a value, or only its status counts */
    for (int id = 0; id < NID; id++) {
        int64_t sh[MAMBA2_MAX_RANK];
        const int64_t n = th_numel(shape_of(&c, id, sh), sh);
        v.v[id] = (id == D_ || id == Z || id == DTB || id == INIT)
                      ? NULL
                      : calloc((size_t)(n ? n : 1), sizeof(double));
    }
    for (size_t r = 0; r < sizeof stage_errs / sizeof *stage_errs; r++) {
        const stage_err *e = &stage_errs[r];
        char name[128];
        snprintf(name, sizeof name, "errors stages %s", e->what);
        if (!ops_selected(name)) continue;
        th_begin("%s [%s]", name, be->name);
        stage_io s;
        sio_make(&s, e->stage, &c, &v, MAMBA2_DTYPE_F32, 1);
        gt saved[NID];
        memcpy(saved, s.g, sizeof saved);
        e->mutate(&s);
        const mamba2_status_t want = ops_want_for(be, e->want);
        const mamba2_status_t st = sio_run(be->ctx, e->stage, &s);
        const char *word = e->word && !strcmp(e->word, "$be") ? be->name : e->word;
        gt_expect_err(st, want, want == OK_ ? NULL : word, NULL);
        memcpy(s.g, saved, sizeof saved); /* the valid tensors again (a NULL one too) */
        char msg[256];
        for (int i = 0; i < NID; i++) {
            if (!s.g[i].present) continue;
            if (!gt_check(&s.g[i], tname[i], msg, sizeof msg)) th_fail("%s", msg);
            if (st == OK_ || !s.g[i].is_out) continue;
            const size_t bytes = s.g[i].bytes + 2 * TH_GUARD;
            th_expect(!memcmp(s.g[i].alloc, s.g[i].snap, bytes), "%s written by a failed call",
                      tname[i]);
        }
        for (int i = 0; i < NID; i++) gt_free(&s.g[i]);
        th_end();
    }
    for (int id = 0; id < NID; id++) free(v.v[id]);
}

void ops_ssd_stages(const ops_be *be) {
    for (int i = 0; i < NSTAGED; i++)
        if (ops_selected(staged_cases[i].c.name)) test_staged(be, &staged_cases[i]);
    stage_errors(be);
}

