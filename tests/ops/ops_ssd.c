/*
 * ops_ssd.c — the fused SSD op (mamba2_ssd_forward, mamba2_ssd_backward) and the states at
 * chosen positions (mamba2_ssd_forward_states) for test_ops (ops.h): case tables, runners and
 * the error table.
 *
 *  - fused: forward and backward (every gradient, or a subset) on awkward shapes (L not a
 *    multiple of any chunk, P/N not multiples of the 16x16 tiles, G < H, G = H, L = 1, L = 0,
 *    varlen with empty and length-1 sequences, strided in_proj views, head-major views, every
 *    option) vs the reference on float64 copies; guards, gaps and unchanged inputs checked; a
 *    second forward + backward must give bitwise identical output buffers (determinism); on
 *    the GPU backends the forward's two scan forms (states on chip, and the three launches
 *    forced by MAMBA2C_GPU_SSD_FWD=staged) must give bitwise identical out and final_state.
 *    On CUDA with MAMBA2C_CUDA_TC=1 (tf32 tensor cores, a separate mode) the forward outputs
 *    are held to TOL_TC_TF32 and the two forms each to the reference; dx, dBm, dCm to
 *    TOL_TC_TF32_GRAD; the other gradients and determinism as ever.
 *  - positions: states at positions (batched, varlen, positions at chunk edges) vs the
 *    reference; out and final_state unchanged by asking for them; guards after the states.
 *  - errors: float64 storage (OK on the reference only), bad shapes, NULL tensors,
 *    wrong dtypes and overflowing sizes (INVALID_ARGUMENT everywhere), nothing written.
 * With MAMBA2C_TEST_REDUCED=1 (the emulated CUDA device, the AArch64 build under qemu) the
 * layer-sized fused case is left out unless a filter is given.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ssd_case_macros.h"


static th_ssd_case fused_cases[] = {
    {"tiny_1x1x1x1x1x1x1_all", SH(1, 1, 1, 1, 1, 1, 1), .D_mode = 1, ALL_OPTS},
    {"basic", SH(2, 64, 4, 16, 16, 16, 1)},
    {"L_not_multiple_of_Q", SH(2, 50, 4, 8, 16, 16, 2), .final = 1},
    {"L130_two_chunks_and_tail", SH(1, 130, 2, 16, 32, 64, 1), STATES, .D_mode = 1},
    {"P3_N5_G3_H6", SH(2, 37, 6, 3, 5, 8, 3), STATES},
    {"P17_N9_tails", SH(2, 29, 3, 17, 9, 8, 3), .D_mode = 2, .z = 1},
    {"P1_N1_G_eq_H5", SH(2, 17, 5, 1, 1, 4, 5), STATES},
    {"P40_N4", SH(1, 33, 2, 40, 4, 16, 2), .final = 1},
    {"B3_H12_G4", SH(3, 45, 12, 4, 8, 16, 4), .init = 1, .final = 1},
    {"L1_all", SH(2, 1, 4, 8, 8, 16, 2), .D_mode = 2, ALL_OPTS},
    {"L0_all", SH(2, 0, 4, 8, 8, 16, 2), .D_mode = 1, ALL_OPTS},
    {"opt_dt_limit_lo_only", SH(2, 33, 4, 8, 8, 16, 2), .limit = 1, .lo = 0.05, .hi = INF},
    {"all_options_DH", SH(2, 77, 4, 8, 16, 32, 2), .D_mode = 1, ALL_OPTS},
    {"all_options_invsp_bias", SH(2, 40, 4, 8, 8, 8, 1), .D_mode = 2, ALL_BUT_LIMIT, .limit = 1,
     .lo = 0.001, .hi = 0.05, .dt_mode = TH_DT_INVSP},
    {"dt_all_clipped_to_0", SH(2, 30, 4, 8, 8, 8, 2), .D_mode = 1, .z = 1, STATES,
     .dt_mode = TH_DT_NEG},
    {"softplus_above_20", SH(1, 24, 2, 4, 4, 8, 1), .softplus = 1, STATES, .dt_mode = TH_DT_LARGE},
    {"varlen_3seq_i64_len1", SH(1, 0, 4, 8, 8, 8, 2), .nseq = 3, .seqlen = {10, 1, 17}, .cu64 = 1,
     STATES},
    {"varlen_7seq_i32_all", SH(1, 0, 4, 8, 8, 4, 1), .nseq = 7, .seqlen = {5, 1, 9, 70, 1, 3, 12},
     .D_mode = 2, ALL_OPTS},
    {"varlen_zero_length_seq", SH(1, 0, 4, 8, 8, 8, 2), .nseq = 3, .seqlen = {6, 0, 9}, STATES},
    {"varlen_L0", SH(1, 0, 2, 4, 4, 8, 1), .nseq = 2, .seqlen = {0, 0}, .D_mode = 1, STATES},
    {"view_xbc_all", SH(2, 40, 4, 8, 8, 16, 2), .D_mode = 2, ALL_OPTS, .layout = TH_LAYOUT_XBC},
    {"view_zxbcdt_all", SH(2, 50, 4, 6, 10, 16, 2), .D_mode = 2, ALL_OPTS,
     .layout = TH_LAYOUT_ZXBCDT},
    {"view_headmajor_all", SH(2, 70, 4, 8, 16, 16, 2), .D_mode = 2, ALL_OPTS,
     .layout = TH_LAYOUT_HEADMAJOR},
    {"view_zxbcdt_varlen", SH(1, 0, 6, 3, 5, 8, 2), .nseq = 3, .seqlen = {7, 1, 12}, .D_mode = 1,
     ALL_OPTS, .layout = TH_LAYOUT_ZXBCDT},
    {"mamba2_dims_P64_N128", SH(1, 200, 2, 64, 128, 64, 1), .D_mode = 1, .z = 1, .dt_bias = 1,
     .softplus = 1, .final = 1},
    {"long_L1024", SH(1, 1024, 2, 16, 32, 256, 2), .D_mode = 1, .z = 1, STATES},
    {"strong_decay", SH(1, 300, 2, 8, 8, 256, 1), .softplus = 1, .D_mode = 1, STATES,
     .dt_mode = TH_DT_LARGE},
    {"N160_above_the_on_chip_scan", SH(1, 70, 2, 8, 160, 64, 1), .D_mode = 1, .z = 1, STATES},
    {"layer_L2048_P64_N128_all", SH(1, 2048, 4, 64, 128, 128, 1), .D_mode = 2, ALL_OPTS},
    {"partial_grads_a", SH(2, 33, 4, 8, 8, 16, 2), .D_mode = 1, ALL_OPTS,
     .grad_mask = GBIT(TH_DX) | GBIT(TH_DA) | GBIT(TH_DCM) | GBIT(TH_DDTB)},
    {"partial_grads_b", SH(2, 33, 4, 8, 8, 16, 2), .D_mode = 2, ALL_OPTS,
     .grad_mask = GBIT(TH_DDT) | GBIT(TH_DBM) | GBIT(TH_DD) | GBIT(TH_DZ) | GBIT(TH_DINIT)},
};
#define NFUSED ((int)(sizeof fused_cases / sizeof fused_cases[0]))

static void test_fused(const ops_be *be, th_ssd_case *c) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("ssd %-26s [%s] [%lld,%lld,%lld,%lld,%lld,%lld,%lld]", c->name, be->name,
             (long long)d.B, (long long)d.L, (long long)d.H, (long long)d.P, (long long)d.N,
             (long long)c->Q, (long long)d.G);
    th_ssd_io r, g, g2;
    th_ssd_io_make(&r, c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
    th_ssd_io_make(&g, c, &d, MAMBA2_DTYPE_F32, c->layout);
    th_ssd_io_make(&g2, c, &d, MAMBA2_DTYPE_F32, c->layout);
    mamba2_status_t st = th_ssd_io_forward(ops_ref, &r, 1);
    int ok = th_expect(st == MAMBA2_STATUS_OK, "reference: %s", mamba2_last_error());
    if (ok) {
        st = th_ssd_io_forward(be->ctx, &g, 1);
        ok = th_expect(st == MAMBA2_STATUS_OK, "%s: %s: %s", be->name, mamba2_status_string(st),
                       mamba2_last_error());
    }
    char msg[256];
    if (ok) ok = th_expect(th_ssd_io_check_memory(&g, msg, sizeof msg), "%s: %s", be->name, msg);
    static const int outs[] = {TH_OUT, TH_FINAL};
    for (int k = 0; ok && k < 2; k++) {
        if (!r.v[outs[k]].present) continue;
        int64_t n, n2;
        double *want = ops_read_all(&r, outs[k], &n), *got = ops_read_all(&g, outs[k], &n2);
        th_metric(th_tname[outs[k]], th_nerr(got, want, n), be->tol_fwd);
        free(want);
        free(got);
    }
    /* the backward: every gradient the case requests */
    if (ok) {
        ok = th_expect(th_ssd_io_backward(ops_ref, &r, 1) == MAMBA2_STATUS_OK,
                       "reference backward: %s", mamba2_last_error());
        if (ok) {
            st = th_ssd_io_backward(be->ctx, &g, 0);
            ok = th_expect(st == MAMBA2_STATUS_OK, "%s backward: %s: %s", be->name,
                           mamba2_status_string(st), mamba2_last_error());
        }
        if (ok) ok = th_expect(th_ssd_io_check_memory(&g, msg, sizeof msg), "backward: %s", msg);
        for (int id = TH_FIRST_GRAD; ok && id < TH_NT; id++) {
            if (!r.v[id].present) continue;
            int64_t n, n2;
            double *want = ops_read_all(&r, id, &n), *got = ops_read_all(&g, id, &n2);
            const int tf32 = id == TH_DX || id == TH_DBM || id == TH_DCM;
            th_metric(th_tname[id], th_nerr(got, want, n), tf32 ? be->tol_grad : TH_TOL_F32);
            free(want);
            free(got);
        }
    }
    if (ok) { /* run to run: the same bytes, gaps and guards included */
        st = th_ssd_io_forward(be->ctx, &g2, 0);
        if (st == MAMBA2_STATUS_OK) st = th_ssd_io_backward(be->ctx, &g2, 0);
        ok = th_expect(st == MAMBA2_STATUS_OK, "%s rerun: %s", be->name, mamba2_last_error());
        if (ok) th_expect(th_ssd_io_outputs_equal(&g, &g2, msg, sizeof msg), "rerun: %s", msg);
    }
    /* GPU: the three-launch scan (forced) vs the default (states on chip where they fit) */
    if (ok && be->gpu) {
        th_ssd_io g3;
        th_ssd_io_make(&g3, c, &d, MAMBA2_DTYPE_F32, c->layout);
        setenv("MAMBA2C_GPU_SSD_FWD", "staged", 1);
        st = th_ssd_io_forward(be->ctx, &g3, 0);
        unsetenv("MAMBA2C_GPU_SSD_FWD");
        if (th_expect(st == MAMBA2_STATUS_OK, "staged forward: %s", mamba2_last_error()))
            for (int k = 0; k < 2; k++) {
                if (!r.v[outs[k]].present) continue;
                int64_t n, n2;
                double *a1 = ops_read_all(&g, outs[k], &n), *a2 = ops_read_all(&g3, outs[k], &n2);
                if (be->tol_fwd == TH_TOL_F32) {
                    th_expect(n == 0 || !memcmp(a1, a2, (size_t)n * sizeof(double)),
                              "%s: the staged and on-chip scans differ", th_tname[outs[k]]);
                } else { /* tensor cores: the two forms round differently; each vs the reference */
                    double *want = ops_read_all(&r, outs[k], &n2);
                    char lab[64];
                    snprintf(lab, sizeof lab, "%s (staged form)", th_tname[outs[k]]);
                    th_metric(lab, th_nerr(a2, want, n), be->tol_fwd);
                    free(want);
                }
                free(a1);
                free(a2);
            }
        th_ssd_io_free(&g3);
    }
    th_ssd_io_free(&r);
    th_ssd_io_free(&g);
    th_ssd_io_free(&g2);
    th_ssd_data_free(&d);
    th_end();
}

/* ---- states at chosen positions ------------------------------------------------------------ */

static mamba2_status_t forward_states(mamba2_context_t *ctx, th_ssd_io *io, mamba2_tensor_t *pos,
                                      mamba2_tensor_t *ps) {
    const mamba2_tensor_t *t[TH_NT];
    for (int i = 0; i < TH_NT; i++) t[i] = io->v[i].present ? &io->v[i].t : NULL;
    io->opts.state_positions = pos;
    mamba2_status_t st = mamba2_ssd_forward_states(ctx, t[TH_OUT], NULL, t[TH_FINAL], ps, t[TH_X],
                                                   t[TH_DT], t[TH_A], t[TH_BM], t[TH_CM],
                                                   &io->opts, NULL, 0);
    io->opts.state_positions = NULL;
    return st;
}

static void test_positions(const ops_be *be, th_ssd_case *c,
                           int npos, const int64_t *pos) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("positions %-26s [%s] %d positions", c->name, be->name, npos);
    th_ssd_io r, g, g0;
    th_ssd_io_make(&r, c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
    th_ssd_io_make(&g, c, &d, MAMBA2_DTYPE_F32, c->layout);
    th_ssd_io_make(&g0, c, &d, MAMBA2_DTYPE_F32, c->layout);
    const int64_t n = (int64_t)npos * d.H * d.P * d.N, psh[1] = {npos};
    const int64_t ssh[4] = {npos, d.H, d.P, d.N};
    double *sr = th_xmalloc((size_t)n * sizeof(double) + 8);
    float *sg = th_xmalloc((size_t)(n + 16) * sizeof(float));
    for (int64_t i = 0; i < n + 16; i++) sg[i] = i < n ? NAN : 12345.0f;
    int64_t pv[16];
    memcpy(pv, pos, (size_t)npos * sizeof(int64_t));
    mamba2_tensor_t tp = mamba2_tensor_make(pv, MAMBA2_DTYPE_I64, 1, psh);
    mamba2_tensor_t tr = mamba2_tensor_make(sr, MAMBA2_DTYPE_F64, 4, ssh);
    mamba2_tensor_t tg = mamba2_tensor_make(sg, MAMBA2_DTYPE_F32, 4, ssh);
    mamba2_status_t st = forward_states(ops_ref, &r, &tp, &tr);
    int ok = th_expect(st == MAMBA2_STATUS_OK, "reference: %s", mamba2_last_error());
    if (ok) {
        st = forward_states(be->ctx, &g, &tp, &tg);
        ok = th_expect(st == MAMBA2_STATUS_OK, "%s: %s: %s", be->name, mamba2_status_string(st),
                       mamba2_last_error());
    }
    if (ok) {
        double *gd = th_xmalloc((size_t)n * sizeof(double) + 8);
        int guard = 1;
        for (int64_t i = 0; i < n; i++) gd[i] = sg[i];
        for (int64_t i = n; i < n + 16; i++) guard &= sg[i] == 12345.0f;
        th_expect(guard, "the guard after the position states was written");
        th_metric("position_states", th_nerr(gd, sr, n), be->tol_fwd);
        free(gd);
        char msg[256];
        th_expect(th_ssd_io_check_memory(&g, msg, sizeof msg), "%s: %s", be->name, msg);
        /* asking for states changes nothing else (on the tensor cores, states at positions
         * take the two-kernel form, which rounds differently from the on-chip scan: there
         * out and final_state with states are each checked against the reference) */
        st = th_ssd_io_forward(be->ctx, &g0, 0);
        if (th_expect(st == MAMBA2_STATUS_OK, "plain forward: %s", mamba2_last_error())) {
            if (be->tol_fwd == TH_TOL_F32) {
                th_expect(th_ssd_io_outputs_equal(&g, &g0, msg, sizeof msg), "with states: %s",
                          msg);
            } else {
                static const int outs[] = {TH_OUT, TH_FINAL};
                for (int k = 0; k < 2; k++) {
                    if (!r.v[outs[k]].present) continue;
                    int64_t m, m2;
                    double *want = ops_read_all(&r, outs[k], &m),
                           *got = ops_read_all(&g, outs[k], &m2);
                    char lab[64];
                    snprintf(lab, sizeof lab, "%s (with states)", th_tname[outs[k]]);
                    th_metric(lab, th_nerr(got, want, m), be->tol_fwd);
                    free(want);
                    free(got);
                }
            }
        }
    }
    free(sr);
    free(sg);
    th_ssd_io_free(&r);
    th_ssd_io_free(&g);
    th_ssd_io_free(&g0);
    th_ssd_data_free(&d);
    th_end();
}

void ops_ssd_positions(const ops_be *be) {
    static th_ssd_case pc[] = {
        {"batched_B2_L37", SH(2, 37, 4, 5, 7, 8, 2), .D_mode = 1, ALL_OPTS},
        {"batched_L150_chunk_edges", SH(1, 150, 2, 16, 32, 64, 1), .z = 1, STATES},
        {"varlen_3seq", SH(1, 0, 3, 4, 9, 16, 3), .nseq = 3, .seqlen = {1, 14, 85}, STATES},
        {"view_zxbcdt_B2_L45", SH(2, 45, 4, 6, 10, 16, 2), .D_mode = 2, ALL_OPTS,
         .layout = TH_LAYOUT_ZXBCDT},
        {"L1_B3", SH(3, 1, 2, 4, 4, 8, 1), STATES},
    };
    static const int64_t pos[][8] = {{0, 5, 31, 36, 37, 73},
                                     {0, 63, 64, 65, 127, 128, 149},
                                     {0, 1, 14, 15, 20, 78, 79, 99},
                                     {0, 15, 16, 44, 45, 60, 89},
                                     {0, 1, 2}};
    static const int np[] = {6, 7, 8, 7, 3};
    for (int i = 0; i < (int)(sizeof np / sizeof np[0]); i++)
        if (ops_selected(pc[i].name)) test_positions(be, &pc[i], np[i], pos[i]);
}


/* ---- errors: {description, mutation of a valid call, expected status} ------------------- */

#define INV MAMBA2_STATUS_INVALID_ARGUMENT
#define UNS MAMBA2_STATUS_UNSUPPORTED
#define OK_ MAMBA2_STATUS_OK

typedef struct ssd_err {
    const char *what;
    void (*mutate)(th_ssd_io *io);
    ops_want want;
    const char *word; /* "$be": the backend's name */
    int f64;          /* float64 storage of the whole call */
    int backward;     /* the call is the backward (else the forward) */
} ssd_err;

static void se_cm_n(th_ssd_io *io) { io->v[TH_CM].t.shape[3] = 5; } /* N = 4 */
static void se_x_null(th_ssd_io *io) { io->v[TH_X].present = 0; }
static void se_dt_i32(th_ssd_io *io) { io->v[TH_DT].t.dtype = MAMBA2_DTYPE_I32; }
static void se_x_huge(th_ssd_io *io) { io->v[TH_X].t.shape[1] = (int64_t)1 << 41; }
static void se_g3(th_ssd_io *io) { io->v[TH_BM].t.shape[2] = io->v[TH_CM].t.shape[2] = 3; }
static void se_x_stride(th_ssd_io *io) { io->v[TH_X].t.stride[3] = 2; }
static void se_dout_p(th_ssd_io *io) { io->v[TH_DOUT].t.shape[3] = 3; } /* P = 4 */
static void se_dfinal_null(th_ssd_io *io) { io->v[TH_DFINAL].t.data = NULL; }

static const ssd_err ssd_errs[] = {
    {"float64 storage", NULL, {OK_, UNS, UNS}, "$be", 1, 0},
    {"Cm N = 5 for N = 4", se_cm_n, {INV, INV, INV}, "Cm", 0, 0},
    {"x NULL", se_x_null, {INV, INV, INV}, "x", 0, 0},
    {"dt int32", se_dt_i32, {INV, INV, INV}, "dt", 0, 0},
    {"x L = 2^41", se_x_huge, {INV, INV, INV}, "x", 0, 0},
    {"Bm, Cm G = 3 for H = 2", se_g3, {INV, INV, INV}, "Bm", 0, 0},
    {"x last-dim stride 2", se_x_stride, {INV, INV, INV}, "x", 0, 0},
    {"backward dout P = 3 for P = 4", se_dout_p, {INV, INV, INV}, "dout", 0, 1},
    {"backward dfinal_state data NULL", se_dfinal_null, {INV, INV, INV}, "dfinal_state", 0, 1},
};

static void ops_ssd_errors(const ops_be *be) {
    th_ssd_case c = {"errors", SH(1, 20, 2, 4, 4, 8, 1), .final = 1, .dfinal = 1};
    th_ssd_data d;
    th_ssd_data_make(&d, &c);
    for (size_t r = 0; r < sizeof ssd_errs / sizeof *ssd_errs; r++) {
        const ssd_err *e = &ssd_errs[r];
        char name[128];
        snprintf(name, sizeof name, "errors ssd %s", e->what);
        if (!ops_selected(name)) continue;
        th_begin("%s [%s]", name, be->name);
        th_ssd_io io;
        th_ssd_io_make(&io, &c, &d, e->f64 ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32,
                       TH_LAYOUT_CONTIG);
        th_view saved[TH_NT];
        memcpy(saved, io.v, sizeof saved);
        if (e->mutate) e->mutate(&io);
        const mamba2_status_t want = ops_want_for(be, e->want);
        const mamba2_status_t st =
            e->backward ? th_ssd_io_backward(be->ctx, &io, 0) : th_ssd_io_forward(be->ctx, &io, 0);
        const char *word = e->word && !strcmp(e->word, "$be") ? be->name : e->word;
        gt_expect_err(st, want, want == OK_ ? NULL : word, NULL);
        memcpy(io.v, saved, sizeof saved); /* the valid tensors again: reads and checks */
        if (st != OK_) { /* nothing written */
            static const int fwd_outs[] = {TH_OUT, TH_FINAL}, bwd_outs[] = {TH_DX, TH_DDT, TH_DA,
                                                                          TH_DBM, TH_DCM, TH_DINIT};
            const int *o = e->backward ? bwd_outs : fwd_outs, no = e->backward ? 6 : 2;
            for (int k = 0; k < no; k++) {
                if (!io.v[o[k]].present) continue;
                int64_t n;
                double *v = ops_read_all(&io, o[k], &n);
                int64_t written = 0;
                for (int64_t i = 0; i < n; i++) written += !isnan(v[i]);
                th_expect(!written, "%s: %lld elements written by a failed call", th_tname[o[k]],
                          (long long)written);
                free(v);
            }
        }
        char msg[256];
        th_expect(th_ssd_io_check_memory(&io, msg, sizeof msg), "%s", msg);
        th_ssd_io_free(&io);
        th_end();
    }
    th_ssd_data_free(&d);
}

/* ---- the fused op's runner and error table --------------------------------------------- */

void ops_ssd_fused(const ops_be *be) {
    for (int i = 0; i < NFUSED; i++) {
        /* reduced (MAMBA2C_TEST_REDUCED=1: the emulated CUDA device, the AArch64 build under
         * qemu): the layer-sized case repeats the paths of mamba2_dims_P64_N128 and long_L1024
         * at 10x the cost */
        if (th_reduced() && !ops_filter && !strncmp(fused_cases[i].name, "layer_", 6)) continue;
        if (ops_selected(fused_cases[i].name)) test_fused(be, &fused_cases[i]);
    }
    ops_ssd_errors(be);
}
