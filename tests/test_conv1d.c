/*
 * test_conv1d.c — the causal depthwise conv1d (SPEC §4) and its decode step (SPEC §6).
 *
 * Units:
 *  - oracle: every case of the table on the CPU backend with every kernel set the CPU has
 *    (avx512, avx2, scalar; a set it lacks is skipped with a note) and on the reference
 *    backend with f32 storage, against the reference
 *    run on float64 copies of the same (float32-rounded) inputs: out, final state and every
 *    gradient within TH_TOL_F32 (SPEC §8). Outputs are pre-filled with NaN, guard bytes sit
 *    before and after every buffer, gaps of strided views must stay untouched and inputs
 *    unchanged byte for byte;
 *  - gradcheck: the float64 reference backward against central finite differences;
 *  - parity (per kernel set): one prefill == L decode steps; a prefill split in two (final -> initial state)
 *    == one call; packed varlen == sequences one by one; x[B,T,C] steps == the forward;
 *  - step: padding rows (negative indices) and permuted slots;
 *  - determinism: CPU results bitwise identical for 1, 2 and 5 threads, per kernel set;
 *  - errors: invalid arguments give the right status and a message naming the tensor, and
 *    leave the outputs untouched.
 * Uses only the public API; prints one line per unit and "N passed, M failed".
 * The units live in test_conv1d.c (oracle, gradcheck, determinism, main), conv1d_parity.c
 * (parity, step) and conv1d_errors.c (errors), on the shared problems of conv1d_inst.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv1d_inst.h"

/* ==================================================== oracle: backends vs float64 === */

static cv_case g_cases[] = {
    /* name                B    L    C   W  bias silu init final dfinal */
    {"basic",              2,  37,  13, 4, 1, 1, 1, 1, 1, .seed = 1},
    {"noopt",              2,  19,  16, 4, 0, 0, 0, 0, 0, .seed = 2},
    {"final_no_init",      3,  23,  24, 3, 1, 0, 0, 1, 1, .seed = 3},
    {"C5_W2",              3,  11,   5, 2, 1, 1, 1, 1, 1, .seed = 4},
    {"W1",                 2,   9,  13, 1, 1, 1, 1, 1, 1, .seed = 5},
    {"W2_C40",             2,  25,  40, 2, 1, 1, 1, 1, 1, .seed = 29},
    {"W3_C24",             2,  17,  24, 3, 1, 1, 1, 1, 1, .seed = 6},
    {"W5_C67",             2,  21,  67, 5, 1, 1, 1, 1, 1, .seed = 7},
    {"W6_C13",             1,  30,  13, 6, 0, 1, 1, 1, 1, .seed = 8},
    {"W7_C9",              2,  15,   9, 7, 1, 0, 1, 1, 1, .seed = 9},
    {"W8_C70",             2,  33,  70, 8, 1, 1, 1, 1, 1, .seed = 10},
    {"L1",                 4,   1,  13, 4, 1, 1, 1, 1, 1, .seed = 11},
    {"L2_lt_W-1",          2,   2,  13, 6, 1, 1, 1, 1, 1, .seed = 12},
    {"L0",                 2,   0,  13, 4, 1, 1, 1, 1, 1, .seed = 13},
    {"L0_no_init",         2,   0,   8, 3, 0, 0, 0, 1, 1, .seed = 14},
    {"strided",            2,  40,  21, 4, 1, 1, 1, 1, 1, .pad = 1, .seed = 15},
    {"strided_W3_C72",     3,  29,  72, 3, 0, 1, 1, 1, 0, .pad = 1, .seed = 16},
    {"strided_W8_L3",      2,   3,  13, 8, 1, 1, 1, 1, 1, .pad = 1, .seed = 17},
    {"long_blocks",        1, 700, 150, 4, 1, 1, 1, 1, 1, .seed = 18},
    {"batch_blocks",       3, 300,  72, 4, 1, 1, 1, 1, 1, .pad = 1, .seed = 19},
    /* several channel blocks (the CPU backend blocks channels by 512) */
    {"wide_C1100",         2,  40, 1100, 4, 1, 1, 1, 1, 1, .pad = 1, .seed = 30},
    {"wide_varlen_C1030",  1,   0, 1030, 3, 1, 1, 1, 1, 1, .nseq = 3, .seqlen = {20, 1, 19}, .seed = 31},
    {"dinit_only",         2,  20,  13, 4, 1, 1, 1, 1, 1, .gmask = 1u << (DINIT - DX), .seed = 20},
    {"dw_db_only",         2,  20,  13, 4, 1, 1, 1, 1, 1, .gmask = (1u << (DW - DX)) | (1u << (DB - DX)), .seed = 21},
    {"varlen1",            1,   0,  13, 4, 1, 1, 1, 1, 1, .nseq = 1, .seqlen = {37}, .seed = 22},
    {"varlen3",            1,   0,  13, 4, 1, 1, 1, 1, 1, .nseq = 3, .seqlen = {1, 20, 9}, .seed = 23},
    {"varlen7",            1,   0,  13, 4, 1, 1, 1, 1, 1, .nseq = 7, .seqlen = {5, 1, 0, 30, 2, 11, 1}, .cu64 = 1, .seed = 24},
    {"varlen7_strided_W3", 1,   0,  19, 3, 1, 1, 1, 1, 1, .nseq = 7, .seqlen = {1, 4, 1, 1, 9, 2, 6}, .pad = 1, .seed = 25},
    {"varlen7_W6_short",   1,   0,  13, 6, 1, 1, 1, 1, 1, .nseq = 7, .seqlen = {1, 2, 3, 1, 7, 4, 1}, .seed = 26},
    /* starts at 127 and 254: block boundaries (128, 256) fall 1-2 tokens after a start */
    {"varlen_blocks",      1,   0,  80, 4, 1, 1, 1, 1, 1, .nseq = 7, .seqlen = {127, 127, 200, 3, 64, 1, 0}, .cu64 = 1, .seed = 27},
    {"varlen_no_init",     1,   0,  24, 4, 1, 1, 0, 1, 1, .nseq = 3, .seqlen = {3, 1, 40}, .seed = 28},
    /* dx 64-byte aligned, C % 16 == 0: the backward streams whole lines of dx (non-temporal
     * stores; 2 x 8 or 1 x 16 channels per column); several blocks and sequences */
    {"nt_C48",             2,  45,  48, 4, 1, 1, 1, 1, 1, .align64 = 1, .seed = 32},
    {"nt_C80_W3_noact",    3,  70,  80, 3, 1, 0, 1, 1, 1, .align64 = 1, .seed = 33},
    {"nt_C80_varlen",      1,   0,  80, 4, 1, 1, 1, 1, 1, .nseq = 4, .seqlen = {50, 2, 0, 81}, .align64 = 1, .seed = 34},
    {"nt_C1040_W8",        1,  60, 1040, 8, 0, 1, 0, 1, 1, .align64 = 1, .seed = 35},
    {"nt_C48_long",        1, 600,  48, 4, 1, 1, 1, 1, 1, .align64 = 1, .seed = 36},
};
#define NCASES (sizeof g_cases / sizeof g_cases[0])

typedef struct variant {
    const char *name;
    mamba2_backend_t backend;
    const char *isa;
    int threads;
} variant;

static void test_oracle(void) {
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    variant vars[4];
    char names[3][32];
    int nv = 0;
    for (int i = 0; i < g_nisa; i++) {
        snprintf(names[i], sizeof names[i], "cpu-%s", g_isa[i]);
        vars[nv++] = (variant){names[i], MAMBA2_BACKEND_CPU, g_isa[i], 4 - i % 2};
    }
    vars[nv++] = (variant){"ref-f32", MAMBA2_BACKEND_REF, NULL, 1};
    mamba2_context_t *ctxs[4];
    for (int v = 0; v < nv; v++) ctxs[v] = th_ctx(vars[v].backend, vars[v].threads, vars[v].isa);
    for (size_t ci = 0; ci < NCASES; ci++) {
        cv_case c = g_cases[ci];
        cv_data d;
        data_make(&d, &c);
        cv_inst oin;
        results ores;
        inst_make(&oin, &c, &d, MAMBA2_DTYPE_F64, 0);
        th_begin("oracle %-20s ref-f64 B=%lld L=%lld C=%lld W=%lld", c.name, (long long)c.B,
                 (long long)c.L, (long long)c.C, (long long)c.W);
        int ok = run_case(ref, &oin, &ores, 0);
        if (ok)
            for (int id = OUT; id < NT; id++)
                if (ores.v[id] && !th_all_finite(ores.v[id], oin.g[id].n)) {
                    th_fail("reference %s is not finite", tname[id]);
                    ok = 0;
                }
        th_end();
        for (int v = 0; ok && v < nv; v++) {
            cv_inst in;
            results res;
            inst_make(&in, &c, &d, MAMBA2_DTYPE_F32, c.pad);
            th_begin("oracle %-20s %s%s", c.name, vars[v].name, c.pad ? " strided" : "");
            if (run_case(ctxs[v], &in, &res, v % 2 == 0))
                for (int id = OUT; id < NT; id++)
                    if (res.v[id]) th_metric(tname[id], th_nerr(res.v[id], ores.v[id], in.g[id].n), TH_TOL_F32);
            results_free(&res);
            th_end();
            inst_free(&in);
        }
        results_free(&ores);
        inst_free(&oin);
        data_free(&d);
    }
    for (int v = 0; v < nv; v++) mamba2_context_destroy(ctxs[v]);
    mamba2_context_destroy(ref);
}

/* ========================================== gradcheck: finite differences (f64) === */

/* loss = Σ out·dout + Σ final·dfinal, evaluated by the float64 reference forward. */
static double fd_loss(mamba2_context_t *ref, const cv_case *c, cv_data *d) {
    cv_inst in;
    inst_make(&in, c, d, MAMBA2_DTYPE_F64, 0);
    double loss = NAN;
    if (inst_forward(ref, &in) == MAMBA2_STATUS_OK) {
        loss = 0.0;
        double *o = read_out(&in, OUT);
        for (int64_t i = 0; i < in.g[OUT].n; i++) loss += o[i] * d->v[DOUT][i];
        free(o);
        if (c->final && c->dfinal) {
            double *f = read_out(&in, FINAL);
            for (int64_t i = 0; i < in.g[FINAL].n; i++) loss += f[i] * d->v[DFINAL][i];
            free(f);
        }
    }
    inst_free(&in);
    return loss;
}

static void test_gradcheck(void) {
    static cv_case gc[] = {
        {"gc_silu_init", 2, 6, 3, 4, 1, 1, 1, 1, 1, .seed = 101},
        {"gc_short_W5", 2, 2, 3, 5, 1, 1, 1, 1, 1, .seed = 102},
        {"gc_noact", 1, 7, 2, 3, 1, 0, 1, 1, 1, .seed = 103},
        {"gc_varlen", 1, 0, 3, 4, 1, 1, 1, 1, 1, .nseq = 4, .seqlen = {2, 0, 5, 1}, .seed = 104},
    };
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    for (size_t ci = 0; ci < sizeof gc / sizeof gc[0]; ci++) {
        cv_case c = gc[ci];
        cv_data d;
        data_make(&d, &c);
        th_begin("gradcheck %s (float64 reference vs central differences)", c.name);
        cv_inst in;
        results res;
        inst_make(&in, &c, &d, MAMBA2_DTYPE_F64, 0);
        if (run_case(ref, &in, &res, 0)) {
            const int ins[4] = {X, WT, BIAS, INIT}, grads[4] = {DX, DW, DB, DINIT};
            for (int q = 0; q < 4; q++) {
                if (!res.v[grads[q]]) continue;
                const int64_t n = numel_of(&c, &d, ins[q]);
                double *fd = (double *)th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
                for (int64_t i = 0; i < n; i++) {
                    const double v0 = d.v[ins[q]][i], h = 1e-6 * (fabs(v0) > 1 ? fabs(v0) : 1);
                    d.v[ins[q]][i] = v0 + h;
                    const double lp = fd_loss(ref, &c, &d);
                    d.v[ins[q]][i] = v0 - h;
                    const double lm = fd_loss(ref, &c, &d);
                    d.v[ins[q]][i] = v0;
                    fd[i] = (lp - lm) / (2 * h);
                }
                th_metric(tname[grads[q]], th_nerr(res.v[grads[q]], fd, n), TH_TOL_FD);
                free(fd);
            }
        }
        results_free(&res);
        th_end();
        inst_free(&in);
        data_free(&d);
    }
    mamba2_context_destroy(ref);
}

/* ================================================================ determinism === */

static void test_determinism(void) {
    static cv_case dc[] = {
        {"det_long", 1, 1500, 100, 4, 1, 1, 1, 1, 1, .seed = 201},
        {"det_varlen", 1, 0, 77, 3, 1, 1, 1, 1, 1, .nseq = 5, .seqlen = {400, 1, 333, 0, 90}, .seed = 202},
        {"det_batch", 5, 200, 40, 5, 1, 0, 1, 1, 1, .pad = 1, .seed = 203},
        {"det_wide", 1, 300, 1043, 4, 1, 1, 1, 1, 1, .seed = 204},
        {"det_nt", 2, 400, 1040, 4, 1, 1, 1, 1, 1, .align64 = 1, .seed = 205}, /* streamed dx */
    };
    const int threads[3] = {1, 2, 5};
    for (int isa = 0; isa < g_nisa; isa++)
        for (size_t ci = 0; ci < sizeof dc / sizeof dc[0]; ci++) {
            cv_case c = dc[ci];
            cv_data d;
            data_make(&d, &c);
            th_begin("determinism %s %s: 1 vs 2 vs 5 threads, bitwise", c.name, g_isa[isa]);
            results r[3];
            memset(r, 0, sizeof r);
            int ok = 1;
            for (int k = 0; k < 3; k++) {
                mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, threads[k], g_isa[isa]);
                cv_inst in;
                inst_make(&in, &c, &d, MAMBA2_DTYPE_F32, c.pad);
                ok = ok && run_case(ctx, &in, &r[k], k & 1);
                inst_free(&in);
                mamba2_context_destroy(ctx);
            }
            if (ok)
                for (int id = OUT; id < NT; id++) {
                    if (!r[0].v[id]) continue;
                    const int64_t n = numel_of(&c, &d, id);
                    for (int k = 1; k < 3; k++)
                        th_expect(gt_bits_equal(r[0].v[id], r[k].v[id], n),
                                  "%s differs between 1 and %d threads", tname[id], threads[k]);
                }
            for (int k = 0; k < 3; k++) results_free(&r[k]);
            th_end();
            data_free(&d);
        }
}

/* ======================================================================= main === */

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-q") == 0) th_set_verbose(0);
    find_isas();
    test_oracle();
    test_gradcheck();
    test_determinism();
    for (int v = 0; v <= g_nisa; v++) { /* each CPU kernel set, then the reference */
        const mamba2_backend_t be = v == g_nisa ? MAMBA2_BACKEND_REF : MAMBA2_BACKEND_CPU;
        const char *isa = v < g_nisa ? g_isa[v] : NULL;
        test_prefill_vs_steps(be, isa, 1, 21);
        test_prefill_vs_steps(be, isa, 3, 21);
        test_prefill_vs_steps(be, isa, 1, 530);
        test_split_prefill(be, isa);
        test_varlen_vs_separate(be, isa);
        test_step_indices(be, isa, 1, 0);
        test_step_indices(be, isa, 2, 1);
    }
    test_errors();
    return th_finish();
}
