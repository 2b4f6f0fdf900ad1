/*
 * test_opencl_ssd.c — the SSD ops on the OpenCL backend (PoCL in CI) against the float64
 * reference, SPEC §8 tolerances (TH_TOL_F32, never loosened).
 *
 * Units:
 *  - fused: mamba2_ssd_forward and mamba2_ssd_backward (every gradient, or a subset) on awkward shapes (L not a multiple of any chunk, P/N not
 *    multiples of the 16x16 tiles, G < H, G = H, L = 1, L = 0, varlen with empty and length-1
 *    sequences, strided in_proj views, head-major views, every option) vs the reference on
 *    float64 copies; guards, gaps and unchanged inputs checked; a second forward + backward
 *    must give bitwise identical output buffers (determinism); the forward's two scan forms
 *    (states on chip, and the three launches forced by MAMBA2C_GPU_SSD_FWD=staged) must give
 *    bitwise identical out and final_state.
 *  - stages: the five staged ops chained on OpenCL; each stage's outputs vs the float64
 *    reference run on exactly the inputs the chain gave it, the chain's out vs the fused
 *    float64 reference; strided (padded) views for the odd cases; padding of the staged
 *    tensors exact.
 *  - positions: mamba2_ssd_forward_states (batched, varlen, positions at chunk edges) vs the
 *    reference; out and final_state unchanged by asking for them; guards after the states.
 *  - errors: what is not implemented is UNSUPPORTED with a message naming it
 *    (float64 storage, bf16 in the staged stages; bf16/f16 of the fused op
 *    is tested by test_ssd_half --backend opencl), bad arguments are INVALID_ARGUMENT, an
 *    unknown MAMBA2C_OPENCL_DEVICE is BACKEND_UNAVAILABLE.
 * The same units run on the CUDA backend where a GPU and driver exist (elsewhere its context
 * must report BACKEND_UNAVAILABLE with a message).
 * Without MAMBA2C_CUDA_TC the test sets it to 0 (the exact float32 tier: the default, auto,
 * would put large shapes on the tensor cores on a small GPU). With MAMBA2C_CUDA_TC=1 the CUDA
 * context runs the fused forward and the backward's matmuls on the tensor cores (tf32 for
 * this test's float32 storage; docs/gpu.md §3a, §3b): a separate mode whose
 * forward outputs (out, final_state, states at positions) are checked against TOL_TC_TF32
 * instead of TH_TOL_F32, and its two forms (the on-chip scan, and the two-kernel form forced
 * by MAMBA2C_GPU_SSD_FWD=staged) each against the reference instead of bitwise to each other;
 * the backward's dx, dBm, dCm (from its tf32 kernels) against TOL_TC_TF32_GRAD; everything
 * else (the other gradients, the stages, bitwise run-to-run determinism) is held to the same
 * tolerances as ever.
 * Exit code 77 (ctest SKIP_RETURN_CODE) only when no OpenCL (and no CUDA) device exists.
 * With MAMBA2C_TEST_REDUCED=1 (the emulated CUDA device of tests/ops_cuda_emu.cmake) the
 * layer-sized fused case is left out unless a filter names it.
 * Usage: test_opencl_ssd [--backend opencl|cuda|all] [-q] [name-substring]
 * (all, the default: both where they exist; opencl or cuda: only that one, exit 77 when it has
 * no device)
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gt.h"
#include "harness.h"
#include "ssd_case_macros.h"

/* The CUDA tensor-core forward's tf32 mode (not a SPEC §8 dtype: tf32 keeps 10 mantissa
 * bits, unit roundoff 2^-11 = 4.9e-4; the host emulation tests/gpu/test_tc_tiles.c measures
 * 3e-4 .. 5e-4 per chunk), so 2e-3. tol_fwd is TH_TOL_F32 except on a CUDA context with
 * MAMBA2C_CUDA_TC=1. */
#define TOL_TC_TF32 2e-3
/* The tensor-core backward's tf32 mode (MAMBA2C_CUDA_TC=1): dx, dBm and dCm come from one
 * tf32 tile product each (src/cuda/ssd_tc_bwd.cuh: operands rounded to tf32, u = 2^-11 =
 * 4.9e-4 relative each, float32 accumulate), so 4u = 2e-3 as the forward (the emulated device
 * measures <= 5.0e-4, docs/gpu.md §3b). The products behind ddt, dA and ddt_bias (the
 * per-token sums, E, the recomputed CB and chunk states, chunk_state mode 1) run in split tf32
 * (~21 bits): those and the other gradients stay at TH_TOL_F32. tol_grad is
 * TH_TOL_F32 except on a CUDA context with MAMBA2C_CUDA_TC=1. */
#define TOL_TC_TF32_GRAD 2e-3
static double tol_fwd = TH_TOL_F32, tol_grad = TH_TOL_F32;

/* ---- fused forward ----------------------------------------------------------------------- */

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

static double *read_all(const th_ssd_io *io, int id, int64_t *n) {
    const mamba2_tensor_t *t = &io->v[id].t;
    int64_t cnt = th_numel(t->rank, t->shape);
    double *v = th_xmalloc((size_t)(cnt ? cnt : 1) * sizeof(double));
    th_ssd_io_read(io, id, v);
    *n = cnt;
    return v;
}

static void test_fused(mamba2_context_t *gpu, mamba2_context_t *ref, th_ssd_case *c) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("fused  %-26s [%lld,%lld,%lld,%lld,%lld,%lld,%lld]", c->name, (long long)d.B,
             (long long)d.L, (long long)d.H, (long long)d.P, (long long)d.N, (long long)c->Q,
             (long long)d.G);
    th_ssd_io r, g, g2;
    th_ssd_io_make(&r, c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
    th_ssd_io_make(&g, c, &d, MAMBA2_DTYPE_F32, c->layout);
    th_ssd_io_make(&g2, c, &d, MAMBA2_DTYPE_F32, c->layout);
    mamba2_status_t st = th_ssd_io_forward(ref, &r, 1);
    int ok = th_expect(st == MAMBA2_STATUS_OK, "reference: %s", mamba2_last_error());
    if (ok) {
        st = th_ssd_io_forward(gpu, &g, 1);
        ok = th_expect(st == MAMBA2_STATUS_OK, "gpu: %s: %s", mamba2_status_string(st),
                       mamba2_last_error());
    }
    char msg[256];
    if (ok) ok = th_expect(th_ssd_io_check_memory(&g, msg, sizeof msg), "opencl: %s", msg);
    static const int outs[] = {TH_OUT, TH_FINAL};
    for (int k = 0; ok && k < 2; k++) {
        if (!r.v[outs[k]].present) continue;
        int64_t n, n2;
        double *want = read_all(&r, outs[k], &n), *got = read_all(&g, outs[k], &n2);
        th_metric(th_tname[outs[k]], th_nerr(got, want, n), tol_fwd);
        free(want);
        free(got);
    }
    /* the backward: every gradient the case requests */
    if (ok) {
        ok = th_expect(th_ssd_io_backward(ref, &r, 1) == MAMBA2_STATUS_OK, "reference backward: %s",
                       mamba2_last_error());
        if (ok) {
            st = th_ssd_io_backward(gpu, &g, 0);
            ok = th_expect(st == MAMBA2_STATUS_OK, "gpu backward: %s: %s",
                           mamba2_status_string(st), mamba2_last_error());
        }
        if (ok) ok = th_expect(th_ssd_io_check_memory(&g, msg, sizeof msg), "backward: %s", msg);
        for (int id = TH_FIRST_GRAD; ok && id < TH_NT; id++) {
            if (!r.v[id].present) continue;
            int64_t n, n2;
            double *want = read_all(&r, id, &n), *got = read_all(&g, id, &n2);
            const int tf32 = id == TH_DX || id == TH_DBM || id == TH_DCM;
            th_metric(th_tname[id], th_nerr(got, want, n), tf32 ? tol_grad : TH_TOL_F32);
            free(want);
            free(got);
        }
    }
    if (ok) { /* run to run: the same bytes, gaps and guards included */
        st = th_ssd_io_forward(gpu, &g2, 0);
        if (st == MAMBA2_STATUS_OK) st = th_ssd_io_backward(gpu, &g2, 0);
        ok = th_expect(st == MAMBA2_STATUS_OK, "gpu rerun: %s", mamba2_last_error());
        if (ok) th_expect(th_ssd_io_outputs_equal(&g, &g2, msg, sizeof msg), "rerun: %s", msg);
    }
    if (ok) { /* the three-launch scan (forced) vs the default (states on chip where they fit) */
        th_ssd_io g3;
        th_ssd_io_make(&g3, c, &d, MAMBA2_DTYPE_F32, c->layout);
        setenv("MAMBA2C_GPU_SSD_FWD", "staged", 1);
        st = th_ssd_io_forward(gpu, &g3, 0);
        unsetenv("MAMBA2C_GPU_SSD_FWD");
        if (th_expect(st == MAMBA2_STATUS_OK, "staged forward: %s", mamba2_last_error()))
            for (int k = 0; k < 2; k++) {
                if (!r.v[outs[k]].present) continue;
                int64_t n, n2;
                double *a1 = read_all(&g, outs[k], &n), *a2 = read_all(&g3, outs[k], &n2);
                if (tol_fwd == TH_TOL_F32) {
                    th_expect(n == 0 || !memcmp(a1, a2, (size_t)n * sizeof(double)),
                              "%s: the staged and on-chip scans differ", th_tname[outs[k]]);
                } else { /* tensor cores: the two forms round differently; each vs the reference */
                    double *want = read_all(&r, outs[k], &n2);
                    char lab[64];
                    snprintf(lab, sizeof lab, "%s (staged form)", th_tname[outs[k]]);
                    th_metric(lab, th_nerr(a2, want, n), tol_fwd);
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
        if (!gt_check(&s.g[i], tname[i], msg, sizeof msg)) ok = th_expect(0, "%s: %s", sname[sg], msg);
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

static void test_staged(mamba2_context_t *gpu, mamba2_context_t *ref, ck_case *kc) {
    th_ssd_case *c = &kc->c;
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("stages %-26s [%lld,%lld,%lld,%lld,%lld,%lld,%lld]%s", c->name, (long long)c->B,
             (long long)c->L, (long long)c->H, (long long)c->P, (long long)c->N, (long long)c->Q,
             (long long)c->G, kc->pad ? " strided" : "");
    vals v;
    memset(&v, 0, sizeof v);
    static const int map[][2] = {{X, TH_X},   {DT, TH_DT}, {A_, TH_A},   {BM, TH_BM},    {CM, TH_CM},
                                 {D_, TH_D}, {Z, TH_Z},   {DTB, TH_DTB}, {INIT, TH_INIT}};
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
        ok = run_stage(sg, ref, c, MAMBA2_DTYPE_F64, 0, &v, &want) &&
             run_stage(sg, gpu, c, MAMBA2_DTYPE_F32, kc->pad, &v, &v);
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
        if (th_expect(th_ssd_io_forward(ref, &r, 1) == MAMBA2_STATUS_OK, "fused reference failed")) {
            int64_t n;
            double *o = read_all(&r, TH_OUT, &n);
            th_metric("chain.out", th_nerr(v.v[OUT], o, n), TH_TOL_F32);
            free(o);
            if (c->final) {
                o = read_all(&r, TH_FINAL, &n);
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

static void test_positions(mamba2_context_t *gpu, mamba2_context_t *ref, th_ssd_case *c,
                           int npos, const int64_t *pos) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("states %-26s %d positions", c->name, npos);
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
    mamba2_status_t st = forward_states(ref, &r, &tp, &tr);
    int ok = th_expect(st == MAMBA2_STATUS_OK, "reference: %s", mamba2_last_error());
    if (ok) {
        st = forward_states(gpu, &g, &tp, &tg);
        ok = th_expect(st == MAMBA2_STATUS_OK, "gpu: %s: %s", mamba2_status_string(st),
                       mamba2_last_error());
    }
    if (ok) {
        double *gd = th_xmalloc((size_t)n * sizeof(double) + 8);
        int guard = 1;
        for (int64_t i = 0; i < n; i++) gd[i] = sg[i];
        for (int64_t i = n; i < n + 16; i++) guard &= sg[i] == 12345.0f;
        th_expect(guard, "the guard after the position states was written");
        th_metric("position_states", th_nerr(gd, sr, n), tol_fwd);
        free(gd);
        char msg[256];
        th_expect(th_ssd_io_check_memory(&g, msg, sizeof msg), "gpu: %s", msg);
        /* asking for states changes nothing else (on the tensor cores, states at positions
         * take the two-kernel form, which rounds differently from the on-chip scan: there
         * out and final_state with states are each checked against the reference) */
        st = th_ssd_io_forward(gpu, &g0, 0);
        if (th_expect(st == MAMBA2_STATUS_OK, "plain forward: %s", mamba2_last_error())) {
            if (tol_fwd == TH_TOL_F32) {
                th_expect(th_ssd_io_outputs_equal(&g, &g0, msg, sizeof msg), "with states: %s",
                          msg);
            } else {
                static const int outs[] = {TH_OUT, TH_FINAL};
                for (int k = 0; k < 2; k++) {
                    if (!r.v[outs[k]].present) continue;
                    int64_t m, m2;
                    double *want = read_all(&r, outs[k], &m), *got = read_all(&g, outs[k], &m2);
                    char lab[64];
                    snprintf(lab, sizeof lab, "%s (with states)", th_tname[outs[k]]);
                    th_metric(lab, th_nerr(got, want, m), tol_fwd);
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

static void run_positions(mamba2_context_t *gpu, mamba2_context_t *ref, const char *filter) {
    static th_ssd_case pc[] = {
        {"batched_B2_L37", SH(2, 37, 4, 5, 7, 8, 2), .D_mode = 1, ALL_OPTS},
        {"batched_L150_chunk_edges", SH(1, 150, 2, 16, 32, 64, 1), .z = 1, STATES},
        {"varlen_3seq", SH(1, 0, 3, 4, 9, 16, 3), .nseq = 3, .seqlen = {1, 14, 85}, STATES},
    };
    static const int64_t pos[3][8] = {{0, 5, 31, 36, 37, 73}, {0, 63, 64, 65, 127, 128, 149},
                                      {0, 1, 14, 15, 20, 78, 79, 99}};
    static const int np[3] = {6, 7, 8};
    for (int i = 0; i < 3; i++)
        if (!filter || strstr(pc[i].name, filter)) test_positions(gpu, ref, &pc[i], np[i], pos[i]);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void expect_status(mamba2_status_t got, mamba2_status_t want, const char *word,
                          const char *what) {
    th_expect(got == want, "%s: got %s, want %s (%s)", what, mamba2_status_string(got),
              mamba2_status_string(want), mamba2_last_error());
    if (got == want && word)
        th_expect(strstr(mamba2_last_error(), word) != NULL, "%s: message \"%s\" lacks \"%s\"",
                  what, mamba2_last_error(), word);
}

static void test_errors(mamba2_context_t *gpu) {
    th_ssd_case c = {"errors", SH(1, 20, 2, 4, 4, 8, 1), .final = 1};
    th_ssd_data d;
    th_ssd_data_make(&d, &c);
    th_ssd_io io;


    th_begin("errors bf16 staged stages are UNSUPPORTED");
    {
        uint16_t dtb[1 * 16 * 2] = {0};
        float A[2] = {-0.5f, -0.3f}, o1[2 * 2 * 8], o2[2 * 2 * 8];
        const int64_t shd[3] = {1, 16, 2}, sha[1] = {2}, sho[4] = {1, 2, 2, 8};
        mamba2_tensor_t tdt = mamba2_tensor_make(dtb, MAMBA2_DTYPE_BF16, 3, shd);
        mamba2_tensor_t tA = mamba2_tensor_make(A, MAMBA2_DTYPE_F32, 1, sha);
        mamba2_tensor_t t1 = mamba2_tensor_make(o1, MAMBA2_DTYPE_F32, 4, sho);
        mamba2_tensor_t t2 = mamba2_tensor_make(o2, MAMBA2_DTYPE_F32, 4, sho);
        mamba2_ssd_chunked_options_t o = mamba2_ssd_chunked_options_default();
        o.chunk_size = 8;
        expect_status(mamba2_ssd_chunk_cumsum(gpu, &t1, &t2, &tdt, &tA, &o),
                      MAMBA2_STATUS_UNSUPPORTED, "opencl", "bf16 chunk_cumsum");
    }
    th_end();

    th_begin("errors float64 storage is UNSUPPORTED");
    th_ssd_io_make(&io, &c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
    expect_status(th_ssd_io_forward(gpu, &io, 0), MAMBA2_STATUS_UNSUPPORTED, "opencl", "f64");
    th_ssd_io_free(&io);
    th_end();

    th_begin("errors wrong shape is INVALID_ARGUMENT");
    th_ssd_io_make(&io, &c, &d, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
    io.v[TH_CM].t.shape[3] = 5; /* N mismatch */
    expect_status(th_ssd_io_forward(gpu, &io, 0), MAMBA2_STATUS_INVALID_ARGUMENT, "Cm", "Cm");
    io.v[TH_CM].t.shape[3] = 4;
    th_ssd_io_free(&io);
    th_end();

    th_begin("errors unknown device is BACKEND_UNAVAILABLE");
    {
        setenv("MAMBA2C_OPENCL_DEVICE", "no such device anywhere", 1);
        mamba2_context_t *x = NULL;
        expect_status(mamba2_context_create(&x, MAMBA2_BACKEND_OPENCL, 1),
                      MAMBA2_STATUS_BACKEND_UNAVAILABLE, "MAMBA2C_OPENCL_DEVICE", "device");
        th_expect(x == NULL, "ctx not NULL after a failed create");
        unsetenv("MAMBA2C_OPENCL_DEVICE");
        setenv("MAMBA2C_OPENCL_DEVICE", "0", 1); /* by index: the first device */
        expect_status(mamba2_context_create(&x, MAMBA2_BACKEND_OPENCL, 1), MAMBA2_STATUS_OK, NULL,
                      "device 0");
        mamba2_context_destroy(x);
        unsetenv("MAMBA2C_OPENCL_DEVICE");
    }
    th_end();
    th_ssd_data_free(&d);
}

/* A GPU context of `be`, or NULL (with a note) when that backend has no device here. */
static mamba2_context_t *open_gpu(mamba2_backend_t be, const char *name) {
    mamba2_context_t *ctx = NULL;
    th_begin("%s context", name);
    mamba2_status_t st = mamba2_context_create(&ctx, be, 1);
    if (st == MAMBA2_STATUS_BACKEND_UNAVAILABLE) {
        th_expect(mamba2_last_error()[0] != 0, "BACKEND_UNAVAILABLE without a message");
        th_note("unavailable here: %s", mamba2_last_error());
    } else {
        th_expect(st == MAMBA2_STATUS_OK, "%s: %s", mamba2_status_string(st), mamba2_last_error());
    }
    th_end();
    return st == MAMBA2_STATUS_OK ? ctx : NULL;
}

int main(int argc, char **argv) {
    const char *filter = NULL, *which = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) which = argv[++i];
        else filter = argv[i];
    }
    const int want_cl = !strcmp(which, "all") || !strcmp(which, "opencl");
    const int want_cu = !strcmp(which, "all") || !strcmp(which, "cuda");
    if (!want_cl && !want_cu) {
        printf("usage: test_opencl_ssd [--backend opencl|cuda|all] [-q] [name-substring]\n");
        return 2;
    }
    const char *tc_env = getenv("MAMBA2C_CUDA_TC");
    if (!tc_env || !*tc_env || !strcmp(tc_env, "auto")) setenv("MAMBA2C_CUDA_TC", "0", 1);
    /* the OpenCL backend (PoCL in CI), and the CUDA backend where a GPU and driver exist: the
     * same kernels through the other device layer */
    mamba2_context_t *gpus[2] = {want_cl ? open_gpu(MAMBA2_BACKEND_OPENCL, "opencl") : NULL,
                                 want_cu ? open_gpu(MAMBA2_BACKEND_CUDA, "cuda") : NULL};
    if (!gpus[0] && !gpus[1]) {
        printf("SKIP: no %s device\n", want_cl && want_cu ? "OpenCL or CUDA"
                                         : want_cl          ? "OpenCL"
                                                            : "CUDA");
        return 77;
    }
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    for (int g = 0; g < 2; g++) {
        if (!gpus[g]) continue;
        const char *tc = getenv("MAMBA2C_CUDA_TC");
        tol_fwd = g && tc && !strcmp(tc, "1") ? TOL_TC_TF32 : TH_TOL_F32;
        tol_grad = g && tc && !strcmp(tc, "1") ? TOL_TC_TF32_GRAD : TH_TOL_F32;
        printf("backend %s%s\n", g ? "cuda" : "opencl",
               tol_fwd != TH_TOL_F32 ? " (tensor cores, tf32: forward outputs, dx, dBm, dCm "
                                       "within 2e-3, a separate mode)"
                                     : "");
        for (int i = 0; i < NFUSED; i++) {
            /* reduced (MAMBA2C_TEST_REDUCED=1: the emulated CUDA device): the layer-sized
             * case repeats the paths of mamba2_dims_P64_N128 and long_L1024 at 10x the cost */
            if (th_reduced() && !filter && !strncmp(fused_cases[i].name, "layer_", 6)) continue;
            if (!filter || strstr(fused_cases[i].name, filter))
                test_fused(gpus[g], ref, &fused_cases[i]);
        }
        for (int i = 0; i < NSTAGED; i++)
            if (!filter || strstr(staged_cases[i].c.name, filter))
                test_staged(gpus[g], ref, &staged_cases[i]);
        run_positions(gpus[g], ref, filter);
    }
    if (gpus[0] && (!filter || strstr("errors", filter))) test_errors(gpus[0]);
    mamba2_context_destroy(gpus[0]);
    mamba2_context_destroy(gpus[1]);
    mamba2_context_destroy(ref);
    return th_finish();
}
