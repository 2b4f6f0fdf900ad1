/*
 * test_ssd_chunked.c — the staged SSD chunk pipeline (SPEC §3: chunk_cumsum, bmm_chunk,
 * chunk_state, state_passing, chunk_scan) and the chunking parities of the fused SSD forward.
 *
 * Units:
 *  - stages: every case of the table on the CPU backend (detected ISA and forced "scalar")
 *    and on the reference backend with f32 storage. The five stages run in a chain; each
 *    stage is also run by the reference on float64 copies of exactly the inputs the chain
 *    gave it, and its outputs must agree within TH_TOL_F32 (SPEC §8). Padding of the staged
 *    tensors is checked exactly (dt_out 0, dA_cumsum flat, CB 0); outputs are pre-filled with
 *    NaN, guards / gaps / inputs are checked after every call. The chain's out and
 *    final_state must equal the fused op's: against the float64 fused reference within
 *    TH_TOL_F32, and against the fused op on the same backend;
 *  - stages-f64: the reference's staged chain in float64 == its fused forward within
 *    TH_TOL_ORACLE (the chunked algorithm and the recurrence are the same math);
 *  - fused parities (mamba2_ssd_forward on the CPU): chunk sizes 1, 16, 64, 256 give the same
 *    result; a prefill split into two calls (final_state -> initial_state) == one call; packed
 *    varlen (cu_seqlens) == the sequences run one by one;
 *  - determinism: every stage's outputs bitwise identical for 1, 2 and 3 threads;
 *  - errors: invalid arguments give the right status and a message naming the tensor, and
 *    leave the outputs untouched.
 * Uses only the public API; prints one line per unit and "N passed, M failed".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "mamba2c.h"
#include "gt.h"

/* ================================================================ the problem === */

/* Every tensor of the pipeline. */
enum { X, DT, A_, BM, CM, D_, Z, DTB, INIT, DTO, DAC, CB, ST, SS, FIN, OUT, NID };
static const char *const tname[NID] = {"x",      "dt",           "A",
                                       "Bm",     "Cm",           "D",
                                       "z",      "dt_bias",      "initial_state",
                                       "dt_out", "dA_cumsum",    "CB",
                                       "states", "states_start", "final_state",
                                       "out"};
enum { S_CUMSUM, S_BMM, S_STATE, S_PASSING, S_SCAN, NSTAGE };
static const char *const sname[NSTAGE] = {"cumsum", "bmm", "state", "passing", "scan"};

typedef struct vals {
    double *v[NID]; /* logical (row-major) values; NULL if absent */
} vals;

static void vals_free(vals *a) {
    for (int i = 0; i < NID; i++) free(a->v[i]);
    memset(a, 0, sizeof *a);
}

/* The case is a th_ssd_case (the fused op's description; Q is the chunk size). */
static int64_t K_of(const th_ssd_case *c) { return (c->L + c->Q - 1) / c->Q; }

/* Rank and shape of tensor id. */
static int shape_of(const th_ssd_case *c, int id, int64_t *s) {
    const int64_t B = c->B, L = c->L, H = c->H, P = c->P, N = c->N, G = c->G, Q = c->Q, K = K_of(c);
    const int64_t tab[NID][6] = {
        /* rank, shape */
        [X] = {4, B, L, H, P},
        [Z] = {4, B, L, H, P},
        [OUT] = {4, B, L, H, P},
        [DT] = {3, B, L, H},
        [A_] = {1, H},
        [DTB] = {1, H},
        [BM] = {4, B, L, G, N},
        [CM] = {4, B, L, G, N},
        [D_] = {1, H, P},
        [INIT] = {4, B, H, P, N},
        [FIN] = {4, B, H, P, N},
        [DTO] = {4, B, H, K, Q},
        [DAC] = {4, B, H, K, Q},
        [CB] = {5, B, K, G, Q, Q},
        [ST] = {5, B, K, H, P, N},
        [SS] = {5, B, K, H, P, N},
    };
    const int rank = id == D_ && c->D_mode == 2 ? 2 : (int)tab[id][0];
    for (int i = 0; i < rank; i++) s[i] = tab[id][i + 1];
    return rank;
}

static int64_t numel_of(const th_ssd_case *c, int id) {
    int64_t s[MAMBA2_MAX_RANK];
    return th_numel(shape_of(c, id, s), s);
}

static double *copy_vals(const double *src, int64_t n) {
    double *v = th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (n > 0) memcpy(v, src, (size_t)n * sizeof(double));
    return v;
}

/* The inputs of the fused op as pipeline values. */
static void vals_from_data(vals *a, const th_ssd_case *c, const th_ssd_data *d) {
    memset(a, 0, sizeof *a);
    static const int map[][2] = {{X, TH_X},   {DT, TH_DT},   {A_, TH_A},
                                 {BM, TH_BM}, {CM, TH_CM},   {D_, TH_D},
                                 {Z, TH_Z},   {DTB, TH_DTB}, {INIT, TH_INIT}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (d->v[map[i][1]]) a->v[map[i][0]] = copy_vals(d->v[map[i][1]], numel_of(c, map[i][0]));
}

/* ==================================================================== stages === */

static const int stage_in[NSTAGE][8] = {
    {DT, A_, DTB, -1},
    {BM, CM, -1},
    {X, BM, DTO, DAC, -1},
    {ST, DAC, INIT, -1},
    {CB, X, DTO, DAC, CM, SS, D_, Z}, /* exactly 8 */
};
static const int stage_out[NSTAGE][3] = {
    {DTO, DAC, -1}, {CB, -1}, {ST, -1}, {SS, FIN, -1}, {OUT, -1}};

static int n_in(int sg) {
    int n = 0;
    while (n < 8 && stage_in[sg][n] >= 0) n++;
    return n;
}

/* Tensors of one stage call: inputs from `in` (dtype dt; strided views when pad), outputs
 * NaN-filled. An optional input is present when its value array is. */
typedef struct stage_io {
    gt g[NID];
    mamba2_ssd_chunked_options_t o;
} stage_io;

static void sio_make(stage_io *s, int sg, const th_ssd_case *c, const vals *in, mamba2_dtype_t dt,
                     int pad) {
    memset(s, 0, sizeof *s);
    int64_t sh[MAMBA2_MAX_RANK];
    for (int k = 0; k < n_in(sg); k++) {
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

static void sio_free(stage_io *s) {
    for (int i = 0; i < NID; i++) gt_free(&s->g[i]);
}

#define T_(s, id) gt_t(&(s)->g[id])

static mamba2_status_t sio_run(mamba2_context_t *ctx, int sg, stage_io *s) {
    switch (sg) {
    case S_CUMSUM:
        return mamba2_ssd_chunk_cumsum(ctx, T_(s, DTO), T_(s, DAC), T_(s, DT), T_(s, A_), &s->o);
    case S_BMM: return mamba2_ssd_bmm_chunk(ctx, T_(s, CB), T_(s, BM), T_(s, CM), &s->o);
    case S_STATE:
        return mamba2_ssd_chunk_state(ctx, T_(s, ST), T_(s, X), T_(s, BM), T_(s, DTO), T_(s, DAC),
                                      &s->o);
    case S_PASSING:
        return mamba2_ssd_state_passing(ctx, T_(s, SS), T_(s, FIN), T_(s, ST), T_(s, DAC), &s->o);
    case S_SCAN:
        return mamba2_ssd_chunk_scan(ctx, T_(s, OUT), T_(s, CB), T_(s, X), T_(s, DTO), T_(s, DAC),
                                     T_(s, CM), T_(s, SS), &s->o);
    }
    return MAMBA2_STATUS_INTERNAL_ERROR;
}

/* Runs stage sg on ctx and stores its outputs' values into res (replacing what was there).
 * Checks guards, gaps, untouched inputs and that every output element was written (no NaN
 * left). Returns 1 on success. */
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
    sio_free(&s);
    return ok;
}

/* Exact padding of the staged tensors: dt_out 0, dA_cumsum flat, CB 0 outside len x len. */
static void check_padding(const th_ssd_case *c, const vals *v, int sg) {
    const int64_t Q = c->Q, K = K_of(c);
    int bad = 0;
    for (int64_t k = 0; k < K; k++) {
        const int64_t len = c->L - k * Q < Q ? c->L - k * Q : Q;
        if (sg == S_CUMSUM)
            for (int64_t bh = 0; bh < c->B * c->H; bh++) {
                const double *d = v->v[DTO] + (bh * K + k) * Q, *cs = v->v[DAC] + (bh * K + k) * Q;
                for (int64_t i = len; i < Q; i++) bad |= d[i] != 0.0 || cs[i] != cs[len - 1];
            }
        if (sg == S_BMM)
            for (int64_t b = 0; b < c->B; b++)
                for (int64_t g = 0; g < c->G; g++) {
                    const double *cb = v->v[CB] + ((b * K + k) * c->G + g) * Q * Q;
                    for (int64_t i = 0; i < Q; i++)
                        for (int64_t j = 0; j < Q; j++)
                            if (i >= len || j >= len) bad |= cb[i * Q + j] != 0.0;
                }
    }
    th_expect(!bad, "%s: padding of the staged tensors is not exact (0, or flat cumsum)",
              sname[sg]);
}

/* The fused forward of the case on ctx in dtype dt: out and final_state values. */
static int run_fused(mamba2_context_t *ctx, const th_ssd_case *c, const th_ssd_data *d,
                     mamba2_dtype_t dt, int layout, double **out, double **fin) {
    th_ssd_io io;
    th_ssd_io_make(&io, c, d, dt, layout);
    mamba2_status_t st = th_ssd_io_forward(ctx, &io, 1);
    int ok = th_expect(st == MAMBA2_STATUS_OK, "fused forward: %s", mamba2_last_error());
    char msg[256];
    if (ok && !th_ssd_io_check_memory(&io, msg, sizeof msg)) ok = th_expect(0, "fused: %s", msg);
    int64_t sh[MAMBA2_MAX_RANK];
    *out = th_xmalloc((size_t)(th_numel(th_ssd_shape(c, d, TH_OUT, sh), sh) + 1) * sizeof(double));
    th_ssd_io_read(&io, TH_OUT, *out);
    if (fin) {
        *fin = NULL;
        if (c->final) {
            *fin = th_xmalloc((size_t)(th_numel(th_ssd_shape(c, d, TH_FINAL, sh), sh) + 1) *
                              sizeof(double));
            th_ssd_io_read(&io, TH_FINAL, *fin);
        }
    }
    th_ssd_io_free(&io);
    return ok;
}

/* ===================================================================== cases === */

#define SH(b, l, h, p, n, q, g) .B = b, .L = l, .H = h, .P = p, .N = n, .Q = q, .G = g
#define OPTS_BUT_D                                                                                 \
    .z = 1, .dt_bias = 1, .softplus = 1, .limit = 1, .lo = 0.02, .hi = 0.08, .init = 1, .final = 1
#define ALL_OPTS .D_mode = 1, OPTS_BUT_D

typedef struct ck_case {
    th_ssd_case c;
    int pad; /* strided views for the f32 runs */
} ck_case;

static ck_case cases[] = {
    {{"basic", SH(2, 64, 4, 16, 16, 16, 1)}, 0},
    {{"L_not_multiple_of_Q", SH(2, 50, 4, 8, 16, 16, 2), .final = 1}, 1},
    {{"Q1", SH(1, 13, 2, 4, 8, 1, 1), .init = 1, .final = 1}, 0},
    {{"Q_gt_L", SH(2, 20, 2, 8, 8, 64, 1), .final = 1}, 1},
    {{"L1_all", SH(2, 1, 4, 8, 8, 16, 2), ALL_OPTS}, 1},
    {{"P3_N5_G3_H6_all", SH(2, 37, 6, 3, 5, 8, 3), .D_mode = 2, OPTS_BUT_D}, 1},
    {{"G_eq_H", SH(1, 40, 4, 8, 8, 16, 4), .final = 1}, 0},
    {{"P17_N9_Q7", SH(2, 29, 3, 17, 9, 7, 3), .D_mode = 2, .z = 1, .final = 1}, 1},
    {{"all_options_DH", SH(2, 77, 4, 8, 16, 32, 2), ALL_OPTS}, 1},
    {{"mamba2_dims_P64_N128_Q128", SH(1, 150, 2, 64, 128, 128, 1), .D_mode = 1, .z = 1,
      .dt_bias = 1, .softplus = 1, .final = 1},
     0},
    {{"Q300_gt_weight_block", SH(1, 350, 1, 4, 4, 300, 1), .D_mode = 1, .init = 1, .final = 1}, 0},
    {{"strong_decay_Q128", SH(1, 200, 2, 8, 8, 128, 1), .softplus = 1, .D_mode = 1, .init = 1,
      .final = 1, .dt_mode = TH_DT_LARGE},
     0},
    {{"dt_all_clipped_to_0", SH(2, 30, 4, 8, 8, 8, 2), .D_mode = 1, .z = 1, .init = 1, .final = 1,
      .dt_mode = TH_DT_NEG},
     0},
    {{"L0", SH(2, 0, 2, 4, 4, 8, 1), .D_mode = 1, .z = 1, .init = 1, .final = 1}, 1},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ==================================================================== oracle === */

static void test_stages(ck_case *kc) {
    th_ssd_case *c = &kc->c;
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);

    /* the fused float64 reference */
    double *out_r = NULL, *fin_r = NULL;
    const int fused_ok = run_fused(ref, c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG, &out_r, &fin_r);
    const int64_t nout = numel_of(c, OUT), nfin = numel_of(c, FIN);

    /* the reference's own chain in float64 == its fused forward (the same math) */
    th_begin("stages-f64 %-28s staged == fused (reference)", c->name);
    {
        vals ch;
        vals_from_data(&ch, c, &d);
        int ok = fused_ok;
        for (int sg = 0; ok && sg < NSTAGE; sg++)
            ok = run_stage(sg, ref, c, MAMBA2_DTYPE_F64, 0, &ch, &ch);
        if (ok) {
            gt_cmp("out", ch.v[OUT], out_r, nout, 0, TH_TOL_ORACLE);
            if (c->final) gt_cmp("final", ch.v[FIN], fin_r, nfin, 0, TH_TOL_ORACLE);
        }
        vals_free(&ch);
    }
    th_end();

    struct {
        const char *label;
        mamba2_backend_t be;
        const char *isa;
    } var[3] = {{"cpu", MAMBA2_BACKEND_CPU, NULL},
                {"cpu-scalar", MAMBA2_BACKEND_CPU, "scalar"},
                {"ref-f32", MAMBA2_BACKEND_REF, NULL}};
    for (int v = 0; v < 3; v++) {
        th_begin("stages %-28s %-10s", c->name, var[v].label);
        mamba2_context_t *ctx = th_ctx(var[v].be, 2, var[v].isa);
        vals ch;
        vals_from_data(&ch, c, &d);
        int ok = fused_ok;
        for (int sg = 0; ok && sg < NSTAGE; sg++) {
            vals r;
            memset(&r, 0, sizeof r);
            ok = run_stage(sg, ctx, c, MAMBA2_DTYPE_F32, kc->pad, &ch, &ch) &&
                 run_stage(sg, ref, c, MAMBA2_DTYPE_F64, 0, &ch, &r);
            if (ok) {
                char lab[64];
                for (int k = 0; k < 3 && stage_out[sg][k] >= 0; k++) {
                    const int id = stage_out[sg][k];
                    if (!r.v[id]) continue;
                    snprintf(lab, sizeof lab, "%s", tname[id]);
                    gt_cmp(lab, ch.v[id], r.v[id], numel_of(c, id), 0, TH_TOL_F32);
                }
                if (sg == S_CUMSUM || sg == S_BMM) check_padding(c, &ch, sg);
            }
            vals_free(&r);
        }
        if (ok) {
            double *out_f = NULL, *fin_f = NULL;
            gt_cmp("e2e_out", ch.v[OUT], out_r, nout, 0, TH_TOL_F32);
            if (c->final) gt_cmp("e2e_final", ch.v[FIN], fin_r, nfin, 0, TH_TOL_F32);
            if (run_fused(ctx, c, &d, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG, &out_f, &fin_f)) {
                gt_cmp("vs_fused_out", ch.v[OUT], out_f, nout, 0, TH_TOL_F32);
                if (c->final) gt_cmp("vs_fused_final", ch.v[FIN], fin_f, nfin, 0, TH_TOL_F32);
            }
            free(out_f);
            free(fin_f);
        }
        vals_free(&ch);
        mamba2_context_destroy(ctx);
        th_end();
    }
    free(out_r);
    free(fin_r);
    mamba2_context_destroy(ref);
    th_ssd_data_free(&d);
}

/* ============================================================ fused parities === */

/* The fused forward with chunk sizes 1, 16, 64, 256: each within TH_TOL_F32 of the float64
 * reference, and of each other. */
static void test_fused_chunk_sizes(const char *isa) {
    th_ssd_case c = {"chunk_sizes", SH(2, 300, 4, 16, 32, 256, 2), .D_mode = 2, OPTS_BUT_D};
    th_ssd_data d;
    th_ssd_data_make(&d, &c);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    mamba2_context_t *cpu = th_ctx(MAMBA2_BACKEND_CPU, 2, isa);
    double *out_r, *fin_r, *out0 = NULL, *fin0 = NULL;
    run_fused(ref, &c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG, &out_r, &fin_r);
    const int64_t nout = c.B * c.L * c.H * c.P, nfin = c.B * c.H * c.P * c.N;
    static const int64_t qs[4] = {256, 1, 16, 64};
    for (int i = 0; i < 4; i++) {
        th_begin("fused chunk_size %3lld == reference, == chunk_size 256 (cpu%s%s)",
                 (long long)qs[i], isa ? " " : "", isa ? isa : "");
        c.Q = qs[i];
        double *o, *f;
        if (run_fused(cpu, &c, &d, MAMBA2_DTYPE_F32, TH_LAYOUT_ZXBCDT, &o, &f)) {
            gt_cmp("out", o, out_r, nout, 0, TH_TOL_F32);
            gt_cmp("final", f, fin_r, nfin, 0, TH_TOL_F32);
            if (i == 0) {
                out0 = o;
                fin0 = f;
                continue;
            }
            gt_cmp("out_vs_Q256", o, out0, nout, 0, TH_TOL_F32);
            gt_cmp("final_vs_Q256", f, fin0, nfin, 0, TH_TOL_F32);
        }
        free(o);
        free(f);
    }
    th_end();
    free(out0);
    free(fin0);
    free(out_r);
    free(fin_r);
    mamba2_context_destroy(ref);
    mamba2_context_destroy(cpu);
    th_ssd_data_free(&d);
}

/* Tokens [t0, t1) of every [B,L,...] input of d (row length per token `w`). */
static double *slice_tokens(const double *v, int64_t B, int64_t L, int64_t w, int64_t t0,
                            int64_t t1) {
    double *s = th_xmalloc((size_t)(B * (t1 - t0) * w + 1) * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        memcpy(s + b * (t1 - t0) * w, v + (b * L + t0) * w,
               (size_t)((t1 - t0) * w) * sizeof(double));
    return s;
}

/* A fused prefill split into two calls (final_state -> initial_state) == one call. */
static void test_fused_split(mamba2_backend_t be, const char *isa) {
    th_ssd_case c = {"split", SH(2, 45, 4, 8, 16, 16, 2), ALL_OPTS};
    th_ssd_data d;
    th_ssd_data_make(&d, &c);
    const mamba2_dtype_t dt = be == MAMBA2_BACKEND_REF ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    const double tol = be == MAMBA2_BACKEND_REF ? TH_TOL_ORACLE : TH_TOL_F32;
    mamba2_context_t *ctx = th_ctx(be, 2, isa);
    const int64_t B = c.B, L = c.L, HP = c.H * c.P, GN = c.G * c.N, HPN = HP * c.N;
    th_begin("fused prefill split in two == one call (%s%s%s), split at 1, 16, 23, 44",
             be == MAMBA2_BACKEND_CPU ? "cpu" : "ref-f64", isa ? " " : "", isa ? isa : "");
    double *out1, *fin1;
    run_fused(ctx, &c, &d, dt, TH_LAYOUT_CONTIG, &out1, &fin1);
    static const int64_t sps[4] = {1, 16, 23, 44};
    double worst_o = 0.0, worst_f = 0.0;
    for (int k = 0; k < 4; k++) {
        const int64_t sp = sps[k];
        double *outp = th_xmalloc((size_t)(B * L * HP) * sizeof(double));
        double *fin = copy_vals(d.v[TH_INIT], B * HPN);
        for (int part = 0; part < 2; part++) {
            const int64_t t0 = part ? sp : 0, t1 = part ? L : sp;
            th_ssd_case pc = c;
            pc.L = t1 - t0;
            th_ssd_data pd = d; /* borrowed parameters; token tensors sliced */
            pd.L = pc.L;
            pd.v[TH_X] = slice_tokens(d.v[TH_X], B, L, HP, t0, t1);
            pd.v[TH_Z] = slice_tokens(d.v[TH_Z], B, L, HP, t0, t1);
            pd.v[TH_DT] = slice_tokens(d.v[TH_DT], B, L, c.H, t0, t1);
            pd.v[TH_BM] = slice_tokens(d.v[TH_BM], B, L, GN, t0, t1);
            pd.v[TH_CM] = slice_tokens(d.v[TH_CM], B, L, GN, t0, t1);
            pd.v[TH_INIT] = fin;
            double *o, *f;
            run_fused(ctx, &pc, &pd, dt, TH_LAYOUT_CONTIG, &o, &f);
            for (int64_t b = 0; b < B; b++)
                memcpy(outp + (b * L + t0) * HP, o + b * (t1 - t0) * HP,
                       (size_t)((t1 - t0) * HP) * sizeof(double));
            free(fin);
            fin = f;
            free(o);
            free(pd.v[TH_X]);
            free(pd.v[TH_Z]);
            free(pd.v[TH_DT]);
            free(pd.v[TH_BM]);
            free(pd.v[TH_CM]);
        }
        th_expect(th_all_finite(outp, B * L * HP) && th_all_finite(fin, B * HPN),
                  "split at %lld: NaN/Inf", (long long)sp);
        const double eo = th_nerr(outp, out1, B * L * HP), ef = th_nerr(fin, fin1, B * HPN);
        if (!(eo <= worst_o)) worst_o = eo;
        if (!(ef <= worst_f)) worst_f = ef;
        free(outp);
        free(fin);
    }
    th_metric("out", worst_o, tol);
    th_metric("final", worst_f, tol);
    th_end();
    free(out1);
    free(fin1);
    mamba2_context_destroy(ctx);
    th_ssd_data_free(&d);
}

/* Packed varlen (cu_seqlens) == the sequences run one by one. */
static void test_fused_varlen(mamba2_backend_t be, const char *isa) {
    th_ssd_case c = {"varlen",  SH(1, 0, 4, 8, 16, 8, 2), .D_mode = 2, OPTS_BUT_D,
                     .nseq = 4, .seqlen = {7, 1, 20, 12}, .cu64 = 1};
    th_ssd_data d;
    th_ssd_data_make(&d, &c);
    const mamba2_dtype_t dt = be == MAMBA2_BACKEND_REF ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    const double tol = be == MAMBA2_BACKEND_REF ? TH_TOL_ORACLE : TH_TOL_F32;
    mamba2_context_t *ctx = th_ctx(be, 2, isa);
    const int64_t L = c.L, HP = c.H * c.P, GN = c.G * c.N, HPN = HP * c.N;
    th_begin("fused packed varlen (4 seqs) == one by one (%s%s%s)",
             be == MAMBA2_BACKEND_CPU ? "cpu" : "ref-f64", isa ? " " : "", isa ? isa : "");
    double *outp, *finp;
    run_fused(ctx, &c, &d, dt, TH_LAYOUT_ZXBCDT, &outp, &finp);
    double *out1 = th_xmalloc((size_t)(L * HP) * sizeof(double));
    double *fin1 = th_xmalloc((size_t)(c.nseq * HPN) * sizeof(double));
    for (int s = 0; s < c.nseq; s++) {
        const int64_t t0 = d.cu[s], t1 = d.cu[s + 1];
        th_ssd_case sc = c;
        sc.nseq = 0;
        sc.L = t1 - t0;
        th_ssd_data sd = d;
        sd.L = sc.L;
        sd.S = 1;
        sd.v[TH_X] = slice_tokens(d.v[TH_X], 1, L, HP, t0, t1);
        sd.v[TH_Z] = slice_tokens(d.v[TH_Z], 1, L, HP, t0, t1);
        sd.v[TH_DT] = slice_tokens(d.v[TH_DT], 1, L, c.H, t0, t1);
        sd.v[TH_BM] = slice_tokens(d.v[TH_BM], 1, L, GN, t0, t1);
        sd.v[TH_CM] = slice_tokens(d.v[TH_CM], 1, L, GN, t0, t1);
        sd.v[TH_INIT] = d.v[TH_INIT] + s * HPN;
        double *o, *f;
        run_fused(ctx, &sc, &sd, dt, TH_LAYOUT_CONTIG, &o, &f);
        memcpy(out1 + t0 * HP, o, (size_t)((t1 - t0) * HP) * sizeof(double));
        memcpy(fin1 + s * HPN, f, (size_t)HPN * sizeof(double));
        free(o);
        free(f);
        free(sd.v[TH_X]);
        free(sd.v[TH_Z]);
        free(sd.v[TH_DT]);
        free(sd.v[TH_BM]);
        free(sd.v[TH_CM]);
    }
    gt_cmp("out", outp, out1, L * HP, 0, tol);
    gt_cmp("final", finp, fin1, c.nseq * HPN, 0, tol);
    th_end();
    free(outp);
    free(finp);
    free(out1);
    free(fin1);
    mamba2_context_destroy(ctx);
    th_ssd_data_free(&d);
}

/* ============================================================= determinism === */

static void test_determinism(void) {
    th_ssd_case c = {"det", SH(2, 150, 4, 12, 24, 32, 2), .D_mode = 2, OPTS_BUT_D};
    th_ssd_data d;
    th_ssd_data_make(&d, &c);
    th_begin("determinism stages cpu 1 vs 2 vs 3 threads, bitwise");
    vals ch[3];
    for (int k = 0; k < 3; k++) {
        mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, k + 1, NULL);
        vals_from_data(&ch[k], &c, &d);
        for (int sg = 0; sg < NSTAGE; sg++)
            run_stage(sg, ctx, &c, MAMBA2_DTYPE_F32, 1, &ch[k], &ch[k]);
        mamba2_context_destroy(ctx);
    }
    for (int k = 1; k < 3; k++)
        for (int id = DTO; id < NID; id++)
            th_expect(gt_bits_equal(ch[k].v[id], ch[0].v[id], numel_of(&c, id)),
                      "%s differs between 1 and %d threads", tname[id], k + 1);
    for (int k = 0; k < 3; k++) vals_free(&ch[k]);
    th_end();
    th_ssd_data_free(&d);
}

/* ================================================================== errors === */

static void test_errors(mamba2_backend_t be) {
    th_ssd_case c = {"err", SH(2, 20, 4, 8, 16, 8, 2), ALL_OPTS};
    th_ssd_data d;
    th_ssd_data_make(&d, &c);
    mamba2_context_t *ctx = th_ctx(be, 2, NULL);
    const mamba2_status_t INV = MAMBA2_STATUS_INVALID_ARGUMENT;
    const char *bn = be == MAMBA2_BACKEND_CPU ? "cpu" : "ref";
    /* every tensor, all inputs valid; outputs NaN */
    vals v;
    vals_from_data(&v, &c, &d);
    {
        mamba2_context_t *r = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
        for (int sg = 0; sg < NSTAGE; sg++) run_stage(sg, r, &c, MAMBA2_DTYPE_F32, 0, &v, &v);
        mamba2_context_destroy(r);
    }
    stage_io s[NSTAGE];
    for (int sg = 0; sg < NSTAGE; sg++) sio_make(&s[sg], sg, &c, &v, MAMBA2_DTYPE_F32, 0);
    stage_io *cu = &s[S_CUMSUM], *bm = &s[S_BMM], *cst = &s[S_STATE], *sp = &s[S_PASSING],
             *sc = &s[S_SCAN];
    mamba2_ssd_chunked_options_t o;
    mamba2_tensor_t t;

    /* the stages' calls with every argument valid except those given */
#define CUMSUM(dto, dac, dt_, A, o_)   mamba2_ssd_chunk_cumsum(ctx, dto, dac, dt_, A, o_)
#define BMM(cb, b_, c_, o_)            mamba2_ssd_bmm_chunk(ctx, cb, b_, c_, o_)
#define STATE(st, x, b_, dto, dac, o_) mamba2_ssd_chunk_state(ctx, st, x, b_, dto, dac, o_)
#define PASS(ss, fin, st, dac, o_)     mamba2_ssd_state_passing(ctx, ss, fin, st, dac, o_)
#define SCAN(out, cb, x, dto, dac, cm, ss, o_)                                                     \
    mamba2_ssd_chunk_scan(ctx, out, cb, x, dto, dac, cm, ss, o_)
    const mamba2_tensor_t *uDTO = T_(cu, DTO), *uDAC = T_(cu, DAC), *uDT = T_(cu, DT);
    const mamba2_tensor_t *uA = T_(cu, A_);
    const mamba2_tensor_t *mCB = T_(bm, CB), *mB = T_(bm, BM), *mC = T_(bm, CM);
    const mamba2_tensor_t *tST = T_(cst, ST), *tX = T_(cst, X), *tB = T_(cst, BM);
    const mamba2_tensor_t *tDTO = T_(cst, DTO), *tDAC = T_(cst, DAC);
    const mamba2_tensor_t *pSS = T_(sp, SS), *pFIN = T_(sp, FIN), *pST = T_(sp, ST);
    const mamba2_tensor_t *pDAC = T_(sp, DAC);
    const mamba2_tensor_t *cOUT = T_(sc, OUT), *cCB = T_(sc, CB), *cX = T_(sc, X);
    const mamba2_tensor_t *cDTO = T_(sc, DTO), *cDAC = T_(sc, DAC), *cCM = T_(sc, CM);
    const mamba2_tensor_t *cSS = T_(sc, SS);

    th_begin("errors %s: chunk_cumsum", bn);
    o = cu->o;
    gt_expect_err(mamba2_ssd_chunk_cumsum(NULL, uDTO, uDAC, uDT, uA, &o), INV, "ctx", NULL);
    gt_expect_err(CUMSUM(NULL, uDAC, uDT, uA, &o), INV, "dt_out", NULL);
    gt_expect_err(CUMSUM(uDTO, uDAC, uDT, NULL, &o), INV, "A", NULL);
    {
        /* a struct_size from another ABI (the options struct has no cu_seqlens: batch only) */
        o.struct_size = 12;
        gt_expect_err(CUMSUM(uDTO, uDAC, uDT, uA, &o), INV, "struct_size", NULL);
        o.struct_size = (uint32_t)sizeof o + 8;
        gt_expect_err(CUMSUM(uDTO, uDAC, uDT, uA, &o), INV, "mamba2_ssd_chunked_options_t", NULL);
        o = cu->o;
    }
    o.chunk_size = 0;
    gt_expect_err(CUMSUM(uDTO, uDAC, uDT, uA, &o), INV, "chunk_size", NULL);
    o.chunk_size = 16; /* K = 2, not 3 */
    gt_expect_err(CUMSUM(uDTO, uDAC, uDT, uA, &o), INV, "dt_out", "K");
    o = cu->o;
    o.dt_limit_lo = 0.5;
    o.dt_limit_hi = 0.1;
    gt_expect_err(CUMSUM(uDTO, uDAC, uDT, uA, &o), INV, "dt_limit", NULL);
    o = cu->o;
    t = *uDAC;
    t.shape[3] = 7;
    gt_expect_err(CUMSUM(uDTO, &t, uDT, uA, &o), INV, "dA_cumsum", "Q");
    t = *uDT;
    t.rank = 2;
    gt_expect_err(CUMSUM(uDTO, uDAC, &t, uA, &o), INV, "dt", NULL);
    {
        /* overlaps, with H = 1 so that dt_out [1,1,3,8] (24 floats) fits inside dt's buffer */
        mamba2_tensor_t dto = *uDTO, dac = *uDAC, dtt = *uDT, a1 = *uA;
        dto.data = cu->g[DT].t.data;
        dto.shape[0] = dto.shape[1] = 1;
        dac.shape[0] = dac.shape[1] = 1;
        dtt.shape[0] = dtt.shape[2] = 1;
        a1.shape[0] = 1;
        mamba2_ssd_chunked_options_t o1 = o;
        o1.dt_bias = NULL;
        gt_expect_err(CUMSUM(&dto, &dac, &dtt, &a1, &o1), INV, "dt_out", "dt");
        gt_expect_err(CUMSUM(&dac, &dac, &dtt, &a1, &o1), INV, "dA_cumsum", "dt_out");
    }
    if (be == MAMBA2_BACKEND_CPU) {
        t = *uDT;
        t.dtype = MAMBA2_DTYPE_F64;
        gt_expect_err(CUMSUM(uDTO, uDAC, &t, uA, &o), MAMBA2_STATUS_UNSUPPORTED, "dt", NULL);
    }

    th_begin("errors %s: bmm_chunk", bn);
    o = bm->o;
    gt_expect_err(BMM(NULL, mB, mC, &o), INV, "CB", NULL);
    t = *mCB;
    t.shape[4] = 9;
    gt_expect_err(BMM(&t, mB, mC, &o), INV, "CB", NULL);
    t = *mCB;
    t.dtype = MAMBA2_DTYPE_F64;
    gt_expect_err(BMM(&t, mB, mC, &o), INV, "CB", NULL);
    t = *mC;
    t.shape[2] = 1;
    gt_expect_err(BMM(mCB, mB, &t, &o), INV, "Cm", NULL);
    t = *mB;
    t.shape[3] = 0;
    gt_expect_err(BMM(mCB, &t, mC, &o), INV, "Bm", "N");

    th_begin("errors %s: chunk_state", bn);
    o = cst->o;
    gt_expect_err(STATE(tST, tX, tB, NULL, tDAC, &o), INV, "dt_out", NULL);
    t = *tST;
    t.shape[4] = 8;
    gt_expect_err(STATE(&t, tX, tB, tDTO, tDAC, &o), INV, "states", NULL);
    t = *tB;
    t.shape[2] = 3;
    gt_expect_err(STATE(tST, tX, &t, tDTO, tDAC, &o), INV, "H", "G");
    t = *tDTO;
    t.dtype = MAMBA2_DTYPE_F64;
    gt_expect_err(STATE(tST, tX, tB, &t, tDAC, &o), INV, "dt_out", NULL);
    t = *tX;
    t.stride[3] = 2;
    gt_expect_err(STATE(tST, &t, tB, tDTO, tDAC, &o), INV, "x", NULL);
    t = *tST;
    t.stride[1] = 0;
    gt_expect_err(STATE(&t, tX, tB, tDTO, tDAC, &o), INV, "states", NULL);

    th_begin("errors %s: state_passing", bn);
    o = sp->o;
    gt_expect_err(PASS(NULL, pFIN, pST, pDAC, &o), INV, "states_start", NULL);
    t = *pSS;
    t.shape[1] = 2;
    gt_expect_err(PASS(&t, pFIN, pST, pDAC, &o), INV, "states_start", NULL);
    t = *pDAC;
    t.shape[2] = 2;
    gt_expect_err(PASS(pSS, pFIN, pST, &t, &o), INV, "dA_cumsum", "K");
    o.chunk_size = 4;
    gt_expect_err(PASS(pSS, pFIN, pST, pDAC, &o), INV, "dA_cumsum", "Q");
    o = sp->o;
    t = *o.initial_state;
    t.shape[3] = 15;
    o.initial_state = &t;
    gt_expect_err(PASS(pSS, pFIN, pST, pDAC, &o), INV, "initial_state", NULL);
    o = sp->o;
    t = *pFIN;
    t.data = sp->g[SS].t.data; /* final_state inside states_start */
    gt_expect_err(PASS(pSS, &t, pST, pDAC, &o), INV, "final_state", "states_start");
    t = *pSS;
    t.data = sp->g[ST].t.data; /* states_start on states */
    gt_expect_err(PASS(&t, pFIN, pST, pDAC, &o), INV, "states_start", "states");
    if (be == MAMBA2_BACKEND_CPU) {
        t = *pST;
        t.dtype = MAMBA2_DTYPE_F64;
        gt_expect_err(PASS(pSS, pFIN, &t, pDAC, &o), MAMBA2_STATUS_UNSUPPORTED, "states", NULL);
    }

    th_begin("errors %s: chunk_scan", bn);
    o = sc->o;
    gt_expect_err(SCAN(cOUT, cCB, cX, cDTO, cDAC, cCM, NULL, &o), INV, "states_start", NULL);
    t = *o.D;
    t.shape[0] = 5;
    o.D = &t;
    gt_expect_err(SCAN(cOUT, cCB, cX, cDTO, cDAC, cCM, cSS, &o), INV, "D", NULL);
    o = sc->o;
    t = *o.z;
    t.shape[1] = 19;
    o.z = &t;
    gt_expect_err(SCAN(cOUT, cCB, cX, cDTO, cDAC, cCM, cSS, &o), INV, "z", NULL);
    o = sc->o;
    t = *cSS;
    t.shape[4] = 8;
    gt_expect_err(SCAN(cOUT, cCB, cX, cDTO, cDAC, cCM, &t, &o), INV, "states_start", NULL);
    t = *cOUT;
    t.data = sc->g[X].t.data; /* out on x */
    gt_expect_err(SCAN(&t, cCB, cX, cDTO, cDAC, cCM, cSS, &o), INV, "out", "x");
    o.chunk_size = 5; /* K = 4: every staged tensor is off; CB is checked first */
    gt_expect_err(SCAN(cOUT, cCB, cX, cDTO, cDAC, cCM, cSS, &o), INV, "CB", NULL);
    o = sc->o;
    o.struct_size = 1;
    gt_expect_err(SCAN(cOUT, cCB, cX, cDTO, cDAC, cCM, cSS, &o), INV, "struct_size", NULL);
#undef CUMSUM
#undef BMM
#undef STATE
#undef PASS
#undef SCAN

    /* no rejected call wrote anything: every output is still NaN, guards and inputs intact */
    {
        int bad = 0;
        char msg[256];
        for (int sg = 0; sg < NSTAGE; sg++)
            for (int id = 0; id < NID; id++) {
                const gt *g = &s[sg].g[id];
                if (!g->present) continue;
                if (!gt_check(g, tname[id], msg, sizeof msg)) {
                    th_fail("%s", msg);
                    bad = 1;
                }
                if (g->is_out)
                    for (int64_t i = 0; i < g->n; i++) bad |= !gt_unwritten(g, i);
            }
        th_expect(!bad, "a rejected call wrote to an output");
    }
    th_end();
    for (int sg = 0; sg < NSTAGE; sg++) sio_free(&s[sg]);
    vals_free(&v);
    mamba2_context_destroy(ctx);
    th_ssd_data_free(&d);
}

/* ====================================================================== main === */

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-q") == 0) th_set_verbose(0);
    for (int i = 0; i < NCASES; i++) test_stages(&cases[i]);
    test_fused_chunk_sizes(NULL);
    test_fused_chunk_sizes("scalar");
    for (int v = 0; v < 3; v++) {
        const mamba2_backend_t be = v == 2 ? MAMBA2_BACKEND_REF : MAMBA2_BACKEND_CPU;
        const char *isa = v == 1 ? "scalar" : NULL;
        test_fused_split(be, isa);
        test_fused_varlen(be, isa);
    }
    test_determinism();
    test_errors(MAMBA2_BACKEND_CPU);
    test_errors(MAMBA2_BACKEND_REF);
    return th_finish();
}
