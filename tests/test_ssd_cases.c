/*
 * test_ssd_cases.c — the SSD case table: every case, forward AND backward, on the optimized CPU
 * backend (default ISA; forced "avx2" too where the default is "avx512"; forced "scalar") and on
 * the reference fed float32, each compared with
 * the reference run on float64 copies of the same inputs (SPEC §8: normalised error <= 1e-5 for
 * out, final_state and every gradient). Guards, gaps, unchanged inputs, NaN/Inf and workspace
 * bounds are checked on every call. One log line per case and backend.
 *
 * Usage: test_ssd_cases [-q] [name-substring]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ssd_case_macros.h"

/* [B,L,H,P,N,Q,G]; for varlen L is derived from seqlen. */
static th_ssd_case cases[] = {
    /* degenerate and edge shapes */
    {"tiny_1x1x1x1x1x1x1", SH(1, 1, 1, 1, 1, 1, 1)},
    {"tiny_1x1x1x1x1x1x1_all", SH(1, 1, 1, 1, 1, 1, 1), .D_mode = 1, ALL_OPTS},
    {"basic", SH(2, 64, 4, 16, 16, 16, 1)},
    {"L_not_multiple_of_Q", SH(2, 50, 4, 8, 16, 16, 2), .final = 1},
    {"chunk_1", SH(1, 13, 2, 4, 8, 1, 1), STATES},
    {"chunk_gt_L", SH(2, 20, 2, 8, 8, 64, 1), .final = 1},
    {"Q7_odd_chunk", SH(1, 50, 3, 5, 7, 7, 1), .final = 1, .D_mode = 1},
    {"default_chunk_256_L300", SH(1, 300, 2, 16, 16, 256, 2), STATES},
    {"P3_N5_G3_H6", SH(2, 37, 6, 3, 5, 8, 3), STATES},
    {"P17_N9_tails", SH(2, 29, 3, 17, 9, 8, 3), .D_mode = 2, .z = 1},
    {"P1_N1_G_eq_H5", SH(2, 17, 5, 1, 1, 4, 5), STATES},
    {"P40_N4", SH(1, 33, 2, 40, 4, 16, 2), .final = 1},
    {"P4_N48", SH(1, 33, 2, 4, 48, 16, 1), .final = 1},
    {"G1_H4", SH(1, 40, 4, 8, 8, 16, 1), .final = 1},
    {"G_eq_H4", SH(1, 40, 4, 8, 8, 16, 4), .final = 1},
    {"G2_H6", SH(1, 40, 6, 8, 8, 16, 2), .final = 1},
    {"B3_H12_G4", SH(3, 45, 12, 4, 8, 16, 4), .init = 1, .final = 1},
    {"L1", SH(2, 1, 4, 8, 8, 16, 2)},
    {"L1_all", SH(2, 1, 4, 8, 8, 16, 2), .D_mode = 2, ALL_OPTS},
    {"L0", SH(2, 0, 4, 8, 8, 16, 2), .final = 1},
    {"L0_all", SH(2, 0, 4, 8, 8, 16, 2), .D_mode = 1, ALL_OPTS},
    /* every option alone */
    {"opt_D_per_head", SH(2, 33, 4, 8, 8, 16, 2), .D_mode = 1},
    {"opt_D_per_channel", SH(2, 33, 4, 8, 8, 16, 2), .D_mode = 2},
    {"opt_z", SH(2, 33, 4, 8, 8, 16, 2), .z = 1},
    {"opt_dt_bias", SH(2, 33, 4, 8, 8, 16, 2), .dt_bias = 1},
    {"opt_dt_softplus", SH(2, 33, 4, 8, 8, 16, 2), .softplus = 1},
    {"opt_dt_limit", SH(2, 33, 4, 8, 8, 16, 2), .limit = 1, .lo = 0.02, .hi = 0.08},
    {"opt_dt_limit_lo_only", SH(2, 33, 4, 8, 8, 16, 2), .limit = 1, .lo = 0.05, .hi = INF},
    {"opt_initial_state", SH(2, 33, 4, 8, 8, 16, 2), .init = 1},
    {"opt_final_state", SH(2, 33, 4, 8, 8, 16, 2), .final = 1},
    {"opt_final_state_dfinal", SH(2, 33, 4, 8, 8, 16, 2), .final = 1, .dfinal = 1},
    {"opt_init_dfinal", SH(2, 33, 4, 8, 8, 16, 2), .init = 1, .dfinal = 1},
    {"opt_init_final_dfinal", SH(2, 33, 4, 8, 8, 16, 2), STATES},
    /* all options together */
    {"all_options_DH", SH(2, 77, 4, 8, 16, 32, 2), .D_mode = 1, ALL_OPTS},
    {"all_options_DHP_P3_N5", SH(2, 45, 6, 3, 5, 16, 3), .D_mode = 2, ALL_OPTS},
    {"all_options_invsp_bias", SH(2, 40, 4, 8, 8, 8, 1), .D_mode = 2, ALL_BUT_LIMIT, .limit = 1,
     .lo = 0.001, .hi = 0.05, .dt_mode = TH_DT_INVSP},
    {"dt_all_clipped_to_0", SH(2, 30, 4, 8, 8, 8, 2), .D_mode = 1, .z = 1, STATES,
     .dt_mode = TH_DT_NEG},
    {"softplus_above_20", SH(1, 24, 2, 4, 4, 8, 1), .softplus = 1, STATES, .dt_mode = TH_DT_LARGE},
    /* varlen (cu_seqlens) */
    {"varlen_1seq_i32", SH(1, 0, 4, 8, 8, 8, 2), .nseq = 1, .seqlen = {29}, STATES},
    {"varlen_3seq_i64_len1", SH(1, 0, 4, 8, 8, 8, 2), .nseq = 3, .seqlen = {10, 1, 17}, .cu64 = 1,
     STATES},
    {"varlen_3seq_i32_plain", SH(1, 0, 4, 8, 8, 8, 4), .nseq = 3, .seqlen = {9, 1, 12}},
    {"varlen_7seq_i32_all", SH(1, 0, 4, 8, 8, 4, 1), .nseq = 7, .seqlen = {5, 1, 9, 16, 1, 3, 12},
     .D_mode = 2, ALL_OPTS},
    {"varlen_7seq_i64_all", SH(1, 0, 6, 3, 5, 16, 3), .nseq = 7, .seqlen = {1, 8, 2, 1, 20, 7, 3},
     .cu64 = 1, .D_mode = 1, ALL_OPTS},
    {"varlen_zero_length_seq", SH(1, 0, 4, 8, 8, 8, 2), .nseq = 3, .seqlen = {6, 0, 9}, STATES},
    {"varlen_L0", SH(1, 0, 2, 4, 4, 8, 1), .nseq = 2, .seqlen = {0, 0}, .D_mode = 1, STATES},
    /* strided views (Mamba-2 in_proj split) */
    {"view_xbc_z", SH(2, 40, 4, 8, 8, 16, 2), .z = 1, .layout = TH_LAYOUT_XBC},
    {"view_xbc_all", SH(2, 40, 4, 8, 8, 16, 2), .D_mode = 2, ALL_OPTS, .layout = TH_LAYOUT_XBC},
    {"view_xbc_chunk1", SH(1, 12, 2, 4, 4, 1, 1), .z = 1, STATES, .layout = TH_LAYOUT_XBC},
    {"view_zxbcdt_all", SH(2, 50, 4, 6, 10, 16, 2), .D_mode = 2, ALL_OPTS,
     .layout = TH_LAYOUT_ZXBCDT},
    /* head-major storage ([B,H,L,P] viewed as [B,L,H,P]): a head's tokens adjacent */
    {"view_headmajor_all", SH(2, 70, 4, 8, 16, 16, 2), .D_mode = 2, ALL_OPTS,
     .layout = TH_LAYOUT_HEADMAJOR},
    {"view_headmajor_wide_all", SH(1, 130, 4, 64, 64, 32, 2), .D_mode = 1, ALL_OPTS,
     .layout = TH_LAYOUT_HEADMAJOR},
    {"view_headmajor_varlen", SH(1, 0, 4, 8, 8, 8, 2), .nseq = 3, .seqlen = {30, 1, 25},
     .z = 1, STATES, .layout = TH_LAYOUT_HEADMAJOR},
    {"view_zxbcdt_varlen", SH(1, 0, 6, 3, 5, 8, 2), .nseq = 3, .seqlen = {7, 1, 12}, .D_mode = 1,
     ALL_OPTS, .layout = TH_LAYOUT_ZXBCDT},
    {"view_zxbcdt_L0", SH(2, 0, 2, 4, 4, 8, 1), .z = 1, STATES, .layout = TH_LAYOUT_ZXBCDT},
    /* subsets of gradients (each pointer may be NULL) */
    {"partial_grads_a", SH(2, 33, 4, 8, 8, 16, 2), .D_mode = 1, ALL_OPTS,
     .grad_mask = GBIT(TH_DX) | GBIT(TH_DA) | GBIT(TH_DCM) | GBIT(TH_DDTB)},
    {"partial_grads_b", SH(2, 33, 4, 8, 8, 16, 2), .D_mode = 2, ALL_OPTS,
     .grad_mask = GBIT(TH_DDT) | GBIT(TH_DBM) | GBIT(TH_DD) | GBIT(TH_DZ) | GBIT(TH_DINIT)},
    /* dz and dCm without the decay's gradients (ddt, dA, ddt_bias): the CPU backward added
     * the dCm rows' (r·u) B term a second time there (found by the differential fuzz mode) */
    {"partial_grads_dz_dcm", SH(2, 33, 4, 8, 8, 16, 2), .D_mode = 2, ALL_OPTS,
     .grad_mask = GBIT(TH_DCM) | GBIT(TH_DZ) | GBIT(TH_DD)},
    {"partial_grads_dz_dcm_1chunk", SH(3, 28, 1, 1, 15, 32, 1), .D_mode = 2, .z = 1, .init = 1,
     .softplus = 1, .grad_mask = GBIT(TH_DCM) | GBIT(TH_DZ)},
    /* realistic sizes */
    {"mamba2_dims_P64_N128", SH(1, 128, 4, 64, 128, 64, 1), .D_mode = 1, .z = 1, .dt_bias = 1,
     .softplus = 1, .final = 1},
    {"big_all_options", SH(2, 256, 8, 32, 64, 64, 2), .D_mode = 1, ALL_OPTS},
    /* shapes the CPU forward runs with its AVX-512 kernel set where it has one (P >= 64, or
     * P = 32 with N >= 64; ssd_cpu.c kernels_for): P and N tails of its 32 x 4 tile, varlen,
     * the strong-decay path of the backward and the chunk-parallel split */
    {"wide_P65_N9_tails_all", SH(2, 45, 3, 65, 9, 16, 3), .D_mode = 2, ALL_OPTS},
    {"wide_P32_N64_varlen_all", SH(1, 0, 4, 32, 66, 16, 2), .nseq = 3, .seqlen = {40, 1, 33},
     .D_mode = 1, ALL_OPTS},
    {"wide_P64_N5_strong_decay", SH(1, 300, 2, 64, 5, 256, 1), .softplus = 1, .D_mode = 1, STATES,
     .dt_mode = TH_DT_LARGE},
    {"wide_chunked_P64_L4500_all", SH(1, 4500, 1, 64, 12, 64, 1), .D_mode = 2, ALL_OPTS},
    /* the backward's AVX-512 rule reads N (its states are [P][N]: N >= 64, or N = 32 with
     * P >= 64; ssd_cpu.c bwd_kernels_for): N tails of its tile, P = 1, strong decay and the
     * chunk-parallel split with that set */
    {"wide_N65_P3_all", SH(2, 45, 3, 3, 65, 16, 3), .D_mode = 2, ALL_OPTS},
    {"wide_N97_P1_all", SH(1, 40, 2, 1, 97, 16, 1), .D_mode = 1, ALL_OPTS},
    {"wide_N64_strong_decay", SH(1, 300, 2, 16, 64, 256, 1), .softplus = 1, .D_mode = 1, STATES,
     .dt_mode = TH_DT_LARGE},
    {"wide_chunked_N64_L4500_all", SH(1, 4500, 1, 8, 64, 64, 1), .D_mode = 2, ALL_OPTS},
    /* numerics: error growth over a long sequence; strong decay inside one long chunk, where
     * exp(cs_i) underflows and exp(-cs_j) overflows in float32 if computed separately */
    {"long_L1024_Q256", SH(1, 1024, 4, 16, 32, 256, 2), .D_mode = 1, .z = 1, STATES},
    {"strong_decay_Q256", SH(1, 300, 2, 8, 8, 256, 1), .softplus = 1, .D_mode = 1, STATES,
     .dt_mode = TH_DT_LARGE},
    /* few (sequence, head) pairs and long sequences: the CPU backend splits a sequence into
     * chunks run in parallel (3 here), then carries the states across their boundaries */
    {"chunked_L6500_H2_all", SH(1, 6500, 2, 8, 16, 64, 1), .D_mode = 2, ALL_OPTS},
    {"chunked_varlen_split_and_not", SH(1, 0, 2, 4, 8, 64, 1), .nseq = 3,
     .seqlen = {6200, 40, 7000}, .D_mode = 1, ALL_OPTS},
    /* a Mamba-2 layer's real sizes (the demo's slice): long sums over time and P*N = 8192
     * state elements per head; caught a decay-gradient form that cancels (dA 1.8e-5) */
    {"layer_L2048_P64_N128_all", SH(1, 2048, 4, 64, 128, 128, 1), .D_mode = 2, ALL_OPTS},
    {"chunked_strong_decay", SH(1, 6200, 1, 4, 4, 64, 1), .softplus = 1, STATES,
     .dt_mode = TH_DT_LARGE},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct variant {
    const char *label;
    mamba2_backend_t backend;
    const char *isa;
} variant;

static double *alloc_read(const th_ssd_io *io, int id, int64_t *n) {
    int64_t shape[MAMBA2_MAX_RANK];
    const mamba2_tensor_t *t = &io->v[id].t;
    for (int i = 0; i < t->rank; i++) shape[i] = t->shape[i];
    int64_t cnt = th_numel(t->rank, shape);
    double *v = th_xmalloc((size_t)(cnt ? cnt : 1) * sizeof(double));
    th_ssd_io_read(io, id, v);
    *n = cnt;
    return v;
}

typedef struct results {
    double *v[TH_NT];
    int64_t n[TH_NT];
} results;

static void read_outputs(const th_ssd_io *io, results *r) {
    for (int id = TH_OUT; id < TH_NT; id++) {
        r->v[id] = NULL;
        r->n[id] = 0;
        if (io->v[id].present) r->v[id] = alloc_read(io, id, &r->n[id]);
    }
}

static void free_results(results *r) {
    for (int id = 0; id < TH_NT; id++) free(r->v[id]);
}

static int run_call(mamba2_context_t *ctx, th_ssd_io *io, int backward, int ws_mode) {
    mamba2_status_t st = backward ? th_ssd_io_backward(ctx, io, ws_mode) : th_ssd_io_forward(ctx, io, ws_mode);
    if (st != MAMBA2_STATUS_OK) {
        th_fail("%s (workspace %s) returned %s: %s", backward ? "backward" : "forward",
                ws_mode ? "given" : "NULL", mamba2_status_string(st), mamba2_last_error());
        return 0;
    }
    char msg[256];
    if (!th_ssd_io_check_memory(io, msg, sizeof msg)) {
        th_fail("after %s: %s", backward ? "backward" : "forward", msg);
        return 0;
    }
    return 1;
}

static int all_equal(const double *a, const double *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}
static int all_zero(const double *a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != 0.0) return 0;
    return 1;
}

/* Semantic checks on the float64 reference that need no second algorithm. */
static void check_reference_semantics(const th_ssd_case *c, const th_ssd_data *d, const results *r) {
    int64_t PN = d->H * d->P * d->N;
    for (int64_t s = 0; s < d->S; s++) {
        int64_t len = c->nseq ? c->seqlen[s] : d->L;
        int empty = len == 0 || c->dt_mode == TH_DT_NEG; /* no token, or every dt clipped to 0 */
        if (!empty) continue;
        if (r->v[TH_FINAL]) {
            const double *f = r->v[TH_FINAL] + s * PN;
            int ok = c->init ? all_equal(f, d->v[TH_INIT] + s * PN, PN) : all_zero(f, PN);
            th_expect(ok, "reference: sequence %lld has no effective step but final_state != initial_state",
                      (long long)s);
        }
        if (len == 0 && r->v[TH_DINIT]) {
            const double *g = r->v[TH_DINIT] + s * PN;
            int ok = c->dfinal ? all_equal(g, d->v[TH_DFINAL] + s * PN, PN) : all_zero(g, PN);
            th_expect(ok, "reference: empty sequence %lld but dinitial_state != dfinal_state", (long long)s);
        }
    }
    if (d->L == 0) {
        static const int zero_ids[] = {TH_DA, TH_DD, TH_DDTB};
        for (int k = 0; k < 3; k++)
            if (r->v[zero_ids[k]])
                th_expect(all_zero(r->v[zero_ids[k]], r->n[zero_ids[k]]),
                          "reference: L == 0 but %s is not zero", th_tname[zero_ids[k]]);
    }
    if (c->dt_mode == TH_DT_NEG) {
        static const int zero_ids[] = {TH_DDT, TH_DA, TH_DBM};
        for (int k = 0; k < 3; k++)
            if (r->v[zero_ids[k]])
                th_expect(all_zero(r->v[zero_ids[k]], r->n[zero_ids[k]]),
                          "reference: every dt clipped to 0 but %s is not zero", th_tname[zero_ids[k]]);
    }
    for (int id = TH_OUT; id < TH_NT; id++)
        if (r->v[id]) th_expect(th_all_finite(r->v[id], r->n[id]), "reference %s has NaN/Inf", th_tname[id]);
}

static void compare(const results *got, const results *ref) {
    for (int id = TH_OUT; id < TH_NT; id++) {
        if (!ref->v[id]) continue;
        if (!got->v[id]) {
            th_fail("%s missing", th_tname[id]);
            continue;
        }
        if (!th_all_finite(got->v[id], got->n[id])) th_fail("%s has NaN/Inf", th_tname[id]);
        th_metric(th_tname[id], th_nerr(got->v[id], ref->v[id], ref->n[id]), TH_TOL_F32);
    }
}

int main(int argc, char **argv) {
    const char *filter = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
        else filter = argv[i];
    }
    mamba2_context_t *ref_ctx = th_ctx(MAMBA2_BACKEND_REF, 2, NULL);
    /* the CPU backend's default kernel set, the AVX2 one forced where the default is wider
     * (AVX-512: both sets stay tested on such a machine), the portable scalar one */
    variant vars[4] = {{NULL, MAMBA2_BACKEND_CPU, NULL},
                       {"cpu[avx2+fma]", MAMBA2_BACKEND_CPU, "avx2"},
                       {"cpu[scalar]", MAMBA2_BACKEND_CPU, "scalar"},
                       {"ref-f32", MAMBA2_BACKEND_REF, NULL}};
    mamba2_context_t *ctxs[4];
    ctxs[0] = th_ctx(vars[0].backend, 2, vars[0].isa);
    int nvar = 4;
    if (strcmp(mamba2_context_get_isa(ctxs[0]), "avx512") != 0) { /* no wider default */
        vars[1] = vars[2];
        vars[2] = vars[3];
        nvar = 3;
    }
    /* a scalar default (MAMBA2C_ISA=scalar): the forced scalar variant would repeat it */
    if (!strcmp(mamba2_context_get_isa(ctxs[0]), "scalar")) {
        for (int v = 1; v + 1 < nvar; v++) vars[v] = vars[v + 1];
        nvar--;
    }
    /* reduced (emulated) runs: the reference backend in float32 is the same C on every target */
    if (th_reduced() && vars[nvar - 1].backend == MAMBA2_BACKEND_REF) nvar--;
    for (int v = 1; v < nvar; v++) ctxs[v] = th_ctx(vars[v].backend, 2, vars[v].isa);
    static char label0[64];
    snprintf(label0, sizeof label0, "cpu[%s]", mamba2_context_get_isa(ctxs[0]));
    vars[0].label = label0;
    printf("mamba2c %s; default CPU kernel set: %s; %d cases x (", mamba2_version_string(),
           mamba2_context_get_isa(ctxs[0]), NCASES);
    for (int v = 0; v < nvar; v++) printf("%s%s", v ? ", " : "", vars[v].label);
    printf(") vs reference f64\n");

    int ncase_run = 0;
    for (int ci = 0; ci < NCASES; ci++) {
        th_ssd_case *c = &cases[ci];
        if (filter && !strstr(c->name, filter)) continue;
        /* reduced: the layer-sized case (its paths run in the smaller cases; the demo test
         * checks a layer slice) */
        if (th_reduced() && !filter && !strncmp(c->name, "layer_", 6)) continue;
        ncase_run++;
        th_ssd_data d;
        th_ssd_data_make(&d, c);

        /* float64 reference */
        th_begin("%-28s %-15s [%lld,%lld,%lld,%lld,%lld,%lld,%lld]", c->name, "ref-f64",
                 (long long)d.B, (long long)d.L, (long long)d.H, (long long)d.P, (long long)d.N,
                 (long long)c->Q, (long long)d.G);
        th_ssd_io ref;
        th_ssd_io_make(&ref, c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
        results rr;
        int ok = run_call(ref_ctx, &ref, 0, 1) && run_call(ref_ctx, &ref, 1, 1);
        read_outputs(&ref, &rr);
        if (ok) check_reference_semantics(c, &d, &rr);
        th_end();

        for (int v = 0; v < nvar; v++) {
            th_begin("%-28s %-15s", c->name, vars[v].label);
            if (!ok) {
                th_fail("skipped: the reference failed");
                th_end();
                continue;
            }
            th_ssd_io io;
            th_ssd_io_make(&io, c, &d, MAMBA2_DTYPE_F32, c->layout);
            int ws_mode = (ci + v) % 2; /* alternate caller workspace and library allocation */
            results gr;
            if (run_call(ctxs[v], &io, 0, ws_mode) && run_call(ctxs[v], &io, 1, !ws_mode)) {
                read_outputs(&io, &gr);
                compare(&gr, &rr);
                free_results(&gr);
            }
            th_ssd_io_free(&io);
            th_end();
        }
        free_results(&rr);
        th_ssd_io_free(&ref);
        th_ssd_data_free(&d);
    }
    printf("%d SSD cases run\n", ncase_run);
    for (int v = 0; v < nvar; v++) mamba2_context_destroy(ctxs[v]);
    mamba2_context_destroy(ref_ctx);
    return th_finish();
}
