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
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "gt.h"
#include "mamba2c.h"

/* ============================================================ guarded tensors === */

/* ================================================================= the problem === */

enum { X, WT, BIAS, INIT, CU, DOUT, DFINAL, OUT, FINAL, DX, DW, DB, DINIT, NT };
static const char *const tname[NT] = {"x",    "weight", "bias", "initial_conv_state",
                                      "cu_seqlens", "dout", "dfinal_conv_state", "out",
                                      "final_conv_state", "dx", "dweight", "dbias",
                                      "dinitial_conv_state"};
#define MAXSEQ 8

typedef struct cv_case {
    const char *name;
    int64_t B, L, C, W;
    int bias, silu, init, final, dfinal;
    int nseq; /* > 0: varlen (B = 1, L = sum of seqlen) */
    int64_t seqlen[MAXSEQ];
    int cu64;
    int pad;        /* strided views (the f32 runs; f64 oracle runs are contiguous) */
    int align64;    /* buffers on 64-byte boundaries (with C % 16 == 0: dx rows on whole lines,
                       the CPU backward's non-temporal path) */
    unsigned gmask; /* requested gradients: bit (id - DX); 0 = all that exist */
    uint64_t seed;
} cv_case;

typedef struct cv_data {
    int64_t S;
    double *v[NT];
    int64_t cu[MAXSEQ + 1];
} cv_data;

static int shape_of(const cv_case *c, const cv_data *d, int id, int64_t *sh) {
    switch (id) {
    case X: case DOUT: case OUT: case DX:
        sh[0] = c->B; sh[1] = c->L; sh[2] = c->C;
        return 3;
    case WT: case DW:
        sh[0] = c->C; sh[1] = c->W;
        return 2;
    case BIAS: case DB:
        sh[0] = c->C;
        return 1;
    case INIT: case DFINAL: case FINAL: case DINIT:
        sh[0] = d->S; sh[1] = c->C; sh[2] = c->W - 1;
        return 3;
    case CU:
        sh[0] = c->nseq + 1;
        return 1;
    }
    return 0;
}

static int present(const cv_case *c, int id) {
    switch (id) {
    case BIAS: return c->bias;
    case INIT: return c->init;
    case CU: return c->nseq > 0;
    case DFINAL: return c->dfinal;
    case FINAL: return c->final;
    case DB: return c->bias && (!c->gmask || (c->gmask >> (DB - DX) & 1));
    case DINIT: return c->init && (!c->gmask || (c->gmask >> (DINIT - DX) & 1));
    case DX: case DW: return !c->gmask || (c->gmask >> (id - DX) & 1);
    default: return 1;
    }
}

static int64_t numel_of(const cv_case *c, const cv_data *d, int id) {
    int64_t sh[3];
    int r = shape_of(c, d, id, sh);
    return th_numel(r, sh);
}

/* Inputs drawn as causal-conv1d's tests do (randn), rounded to float32. */
static void data_make(cv_data *d, cv_case *c) {
    memset(d, 0, sizeof *d);
    if (c->nseq > 0) {
        c->B = 1;
        c->L = 0;
        d->cu[0] = 0;
        for (int s = 0; s < c->nseq; s++) {
            c->L += c->seqlen[s];
            d->cu[s + 1] = c->L;
        }
    }
    d->S = c->nseq > 0 ? c->nseq : c->B;
    th_rng r;
    th_rng_seed(&r, c->seed ? c->seed : 12345);
    for (int id = X; id <= DFINAL; id++) {
        if (id == CU || !present(c, id)) continue;
        int64_t n = numel_of(c, d, id);
        d->v[id] = (double *)th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
        for (int64_t i = 0; i < n; i++) d->v[id][i] = (double)(float)th_rng_normal(&r);
    }
    if (c->nseq > 0) {
        d->v[CU] = (double *)th_xmalloc(sizeof(double) * (size_t)(c->nseq + 1));
        for (int s = 0; s <= c->nseq; s++) d->v[CU][s] = (double)d->cu[s];
    }
}

static void data_free(cv_data *d) {
    for (int i = 0; i < NT; i++) free(d->v[i]);
    memset(d, 0, sizeof *d);
}

typedef struct cv_inst {
    cv_case c;
    cv_data *d;
    mamba2_dtype_t dt;
    gt g[NT];
    mamba2_conv1d_options_t opts;
    mamba2_conv1d_grads_t grads;
    mamba2_activation_t act;
} cv_inst;

static void inst_make(cv_inst *in, const cv_case *c, cv_data *d, mamba2_dtype_t dt, int pad) {
    memset(in, 0, sizeof *in);
    in->c = *c;
    in->d = d;
    in->dt = dt;
    for (int id = 0; id < NT; id++) {
        if (!present(c, id)) continue;
        int64_t sh[3];
        int r = shape_of(c, d, id, sh);
        mamba2_dtype_t t = id == CU ? (c->cu64 ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32) : dt;
        gt_make_a(&in->g[id], t, r, sh, id == CU ? 0 : pad, id >= OUT, id >= OUT ? NULL : d->v[id],
                  c->align64);
    }
    in->opts = mamba2_conv1d_options_default();
    in->opts.bias = c->bias ? &in->g[BIAS].t : NULL;
    in->opts.initial_conv_state = c->init ? &in->g[INIT].t : NULL;
    in->opts.cu_seqlens = c->nseq > 0 ? &in->g[CU].t : NULL;
    in->opts.activation = c->silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    in->grads.dx = in->g[DX].present ? &in->g[DX].t : NULL;
    in->grads.dweight = in->g[DW].present ? &in->g[DW].t : NULL;
    in->grads.dbias = in->g[DB].present ? &in->g[DB].t : NULL;
    in->grads.dinitial_conv_state = in->g[DINIT].present ? &in->g[DINIT].t : NULL;
}

static void inst_free(cv_inst *in) {
    for (int id = 0; id < NT; id++) gt_free(&in->g[id]);
}

static const mamba2_tensor_t *T_(cv_inst *in, int id) { return in->g[id].present ? &in->g[id].t : NULL; }

static mamba2_status_t inst_forward(mamba2_context_t *ctx, cv_inst *in) {
    return mamba2_conv1d_forward(ctx, T_(in, OUT), T_(in, FINAL), T_(in, X), T_(in, WT), &in->opts);
}

/* ws_mode 0: the library allocates; 1: exactly the queried size, with a guarded tail. */
static mamba2_status_t inst_backward(mamba2_context_t *ctx, cv_inst *in, int ws_mode) {
    if (ws_mode == 0)
        return mamba2_conv1d_backward(ctx, &in->grads, T_(in, DOUT), T_(in, DFINAL), T_(in, X),
                                      T_(in, WT), &in->opts, NULL, 0);
    size_t need = 0;
    mamba2_status_t st = mamba2_conv1d_backward_workspace_size(
        ctx, &in->grads, T_(in, DOUT), T_(in, DFINAL), T_(in, X), T_(in, WT), &in->opts, &need);
    if (st != MAMBA2_STATUS_OK) return st;
    unsigned char *ws = (unsigned char *)th_xmalloc(need + TH_GUARD);
    memset(ws + need, TH_PAT_GUARD, TH_GUARD);
    st = mamba2_conv1d_backward(ctx, &in->grads, T_(in, DOUT), T_(in, DFINAL), T_(in, X),
                                T_(in, WT), &in->opts, need ? ws : NULL, need);
    for (size_t i = 0; i < TH_GUARD; i++)
        if (ws[need + i] != TH_PAT_GUARD) {
            th_fail("workspace written past its queried size (%zu bytes)", need);
            break;
        }
    free(ws);
    return st;
}

/* Every buffer's guards, gaps and inputs intact; fails the open unit otherwise. */
static int inst_check_memory(const cv_inst *in) {
    char msg[256];
    for (int id = 0; id < NT; id++)
        if (in->g[id].present && !gt_check(&in->g[id], tname[id], msg, sizeof msg)) {
            th_fail("%s", msg);
            return 0;
        }
    return 1;
}

static double *read_out(const cv_inst *in, int id) {
    double *v = (double *)th_xmalloc((size_t)(in->g[id].n > 0 ? in->g[id].n : 1) * sizeof(double));
    gt_read(&in->g[id], v);
    return v;
}

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

/* The CPU kernel sets under test: each one this CPU (and MAMBA2C_ISA) allows, widest first. */
static const char *g_isa[4];
static int g_nisa;

static void find_isas(void) {
    static const char *const all[4] = {"avx512", "avx2", "neon", "scalar"};
    mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, 1, NULL);
    for (int i = 0; i < 4; i++) {
        if (mamba2_context_force_isa(ctx, all[i]) == MAMBA2_STATUS_OK)
            g_isa[g_nisa++] = all[i];
        else
            printf("note: kernel set %s skipped: %s\n", all[i], mamba2_last_error());
    }
    mamba2_context_destroy(ctx);
}

/* The float64 reference results of a case: outputs by id (NULL if absent). */
typedef struct results {
    double *v[NT];
} results;

static void results_free(results *r) {
    for (int i = 0; i < NT; i++) free(r->v[i]);
}

static int run_case(mamba2_context_t *ctx, cv_inst *in, results *res, int ws_mode) {
    memset(res, 0, sizeof *res);
    mamba2_status_t st = inst_forward(ctx, in);
    if (!th_expect(st == MAMBA2_STATUS_OK, "forward: %s: %s", mamba2_status_string(st),
                   mamba2_last_error()))
        return 0;
    st = inst_backward(ctx, in, ws_mode);
    if (!th_expect(st == MAMBA2_STATUS_OK, "backward: %s: %s", mamba2_status_string(st),
                   mamba2_last_error()))
        return 0;
    if (!inst_check_memory(in)) return 0;
    for (int id = OUT; id < NT; id++)
        if (in->g[id].present) res->v[id] = read_out(in, id);
    return 1;
}

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

static int bits_equal(const double *a, const double *b, int64_t n) {
    return n == 0 || memcmp(a, b, (size_t)n * sizeof(double)) == 0;
}

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
                        th_expect(bits_equal(r[0].v[id], r[k].v[id], n),
                                  "%s differs between 1 and %d threads", tname[id], threads[k]);
                }
            for (int k = 0; k < 3; k++) results_free(&r[k]);
            th_end();
            data_free(&d);
        }
}

/* ===================================================================== parity === */

/* Copy rows [t0, t1) of sequence data (row b of a [B,L,C] array) into a [1, t1-t0, C] array. */
static void slice_rows(const double *src, int64_t L, int64_t C, int64_t b, int64_t t0, int64_t t1,
                       double *dst) {
    memcpy(dst, src + (b * L + t0) * C, (size_t)((t1 - t0) * C) * sizeof(double));
}

/* Compare n values bitwise (CPU paths doing the same float operations) or within tol. */
static void cmp(const char *label, const double *got, const double *want, int64_t n, int exact) {
    if (exact) {
        th_expect(th_all_finite(got, n), "%s has NaN/Inf", label);
        th_expect(bits_equal(got, want, n), "%s is not bitwise identical", label);
        th_metric(label, th_nerr(got, want, n), TH_TOL_EXACT);
    } else {
        th_metric(label, th_nerr(got, want, n), TH_TOL_F32);
    }
}

/* Guarded step tensors. */
typedef struct step_io {
    gt x, out, cache, idx, bias, w;
} step_io;

static mamba2_status_t do_step(mamba2_context_t *ctx, step_io *s, int has_idx, int silu) {
    mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
    o.bias = s->bias.present ? &s->bias.t : NULL;
    o.state_indices = has_idx ? &s->idx.t : NULL;
    o.activation = silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    return mamba2_conv1d_step(ctx, &s->out.t, &s->cache.t, &s->x.t, &s->w.t, &o);
}

static int step_check_memory(const step_io *s) {
    char msg[256];
    const gt *g[6] = {&s->x, &s->out, &s->cache, &s->idx, &s->bias, &s->w};
    const char *nm[6] = {"x", "out", "conv_cache", "state_indices", "bias", "weight"};
    for (int i = 0; i < 6; i++)
        if (g[i]->present && !gt_check(g[i], nm[i], msg, sizeof msg)) {
            th_fail("%s", msg);
            return 0;
        }
    return 1;
}

static void step_free(step_io *s) {
    gt_free(&s->x);
    gt_free(&s->out);
    gt_free(&s->cache);
    gt_free(&s->idx);
    gt_free(&s->bias);
    gt_free(&s->w);
}

/* One prefill over L tokens == L steps of one token (and == steps of T tokens), on every
 * backend: out and final state. On the CPU the step runs the very same float operations. */
static void test_prefill_vs_steps(mamba2_backend_t be, const char *isa, int64_t T, int64_t C_) {
    cv_case c = {"steps", 3, 13, C_, 4, 1, 1, 1, 1, 0, .seed = 301};
    cv_data d;
    data_make(&d, &c);
    mamba2_context_t *ctx = th_ctx(be, 2, isa);
    const int exact = be == MAMBA2_BACKEND_CPU;
    th_begin("parity prefill == %lld steps of %lld token%s (%s%s%s) C=%lld",
             (long long)((c.L + T - 1) / T), (long long)T, T > 1 ? "s" : "",
             be == MAMBA2_BACKEND_CPU ? "cpu" : "ref", isa ? " " : "", isa ? isa : "",
             (long long)C_);
    cv_inst in;
    inst_make(&in, &c, &d, MAMBA2_DTYPE_F32, 0);
    mamba2_status_t st = inst_forward(ctx, &in);
    th_expect(st == MAMBA2_STATUS_OK, "forward: %s", mamba2_last_error());
    double *out_ref = read_out(&in, OUT), *fin_ref = read_out(&in, FINAL);
    const int64_t B = c.B, L = c.L, C = c.C, W = c.W;
    double *out_steps = (double *)th_xmalloc((size_t)(B * L * C) * sizeof(double));
    step_io s;
    memset(&s, 0, sizeof s);
    const int64_t sh_c[3] = {B, C, W - 1}, sh_w[2] = {C, W}, sh_b[1] = {C};
    gt_make(&s.cache, MAMBA2_DTYPE_F32, 3, sh_c, 1, 1, d.v[INIT]);
    gt_make(&s.w, MAMBA2_DTYPE_F32, 2, sh_w, 0, 0, d.v[WT]);
    gt_make(&s.bias, MAMBA2_DTYPE_F32, 1, sh_b, 0, 0, d.v[BIAS]);
    double *xs = (double *)th_xmalloc((size_t)(B * T * C) * sizeof(double));
    double *os = (double *)th_xmalloc((size_t)(B * T * C) * sizeof(double));
    for (int64_t t0 = 0; t0 < L; t0 += T) {
        const int64_t nt = t0 + T <= L ? T : L - t0;
        for (int64_t b = 0; b < B; b++) slice_rows(d.v[X], L, C, b, t0, t0 + nt, xs + b * nt * C);
        const int64_t sh3[3] = {B, nt, C}, sh2[2] = {B, C};
        const int rank = T == 1 ? 2 : 3;
        gt_make(&s.x, MAMBA2_DTYPE_F32, rank, rank == 2 ? sh2 : sh3, 1, 0, xs);
        gt_make(&s.out, MAMBA2_DTYPE_F32, rank, rank == 2 ? sh2 : sh3, 1, 1, NULL);
        memcpy(s.cache.snap, s.cache.alloc, s.cache.bytes + 2 * TH_GUARD);
        st = do_step(ctx, &s, 0, c.silu);
        th_expect(st == MAMBA2_STATUS_OK, "step: %s", mamba2_last_error());
        step_check_memory(&s);
        gt_read(&s.out, os);
        for (int64_t b = 0; b < B; b++)
            memcpy(out_steps + (b * L + t0) * C, os + b * nt * C, (size_t)(nt * C) * sizeof(double));
        gt_free(&s.x);
        gt_free(&s.out);
    }
    double *fin_steps = (double *)th_xmalloc((size_t)(B * C * (W - 1)) * sizeof(double));
    gt_read(&s.cache, fin_steps);
    cmp("out", out_steps, out_ref, B * L * C, exact);
    cmp("final", fin_steps, fin_ref, B * C * (W - 1), exact);
    th_end();
    free(out_steps);
    free(fin_steps);
    free(out_ref);
    free(fin_ref);
    free(xs);
    free(os);
    step_free(&s);
    inst_free(&in);
    mamba2_context_destroy(ctx);
    data_free(&d);
}

/* A prefill split at every point Lsplit (final state -> initial state) == one call. */
static void test_split_prefill(mamba2_backend_t be, const char *isa) {
    cv_case c = {"split", 2, 17, 19, 4, 1, 1, 1, 1, 0, .seed = 302};
    cv_data d;
    data_make(&d, &c);
    mamba2_context_t *ctx = th_ctx(be, 3, isa);
    const int exact = be == MAMBA2_BACKEND_CPU;
    const int64_t B = c.B, L = c.L, C = c.C, W = c.W;
    th_begin("parity prefill split in two == one call (%s%s%s), every split point",
             be == MAMBA2_BACKEND_CPU ? "cpu" : "ref", isa ? " " : "", isa ? isa : "");
    cv_inst whole;
    inst_make(&whole, &c, &d, MAMBA2_DTYPE_F32, 0);
    th_expect(inst_forward(ctx, &whole) == MAMBA2_STATUS_OK, "forward: %s", mamba2_last_error());
    double *out_ref = read_out(&whole, OUT), *fin_ref = read_out(&whole, FINAL);
    double *out2 = (double *)th_xmalloc((size_t)(B * L * C) * sizeof(double));
    double worst_out = 0.0, worst_fin = 0.0;
    for (int64_t sp = 0; sp <= L; sp++) {
        double *fin1 = NULL;
        for (int part = 0; part < 2; part++) {
            const int64_t t0 = part ? sp : 0, t1 = part ? L : sp;
            cv_case pc = c;
            pc.L = t1 - t0;
            cv_data pd = d; /* borrowed arrays, replaced where the part differs */
            double *xs = (double *)th_xmalloc((size_t)(B * (t1 - t0) * C + 1) * sizeof(double));
            for (int64_t b = 0; b < B; b++) slice_rows(d.v[X], L, C, b, t0, t1, xs + b * (t1 - t0) * C);
            pd.v[X] = xs;
            pd.v[DOUT] = NULL;
            if (part) pd.v[INIT] = fin1;
            pc.dfinal = 0;
            cv_inst in;
            inst_make(&in, &pc, &pd, MAMBA2_DTYPE_F32, part);
            th_expect(inst_forward(ctx, &in) == MAMBA2_STATUS_OK, "forward part %d: %s", part,
                      mamba2_last_error());
            inst_check_memory(&in);
            double *o = read_out(&in, OUT);
            for (int64_t b = 0; b < B; b++)
                memcpy(out2 + (b * L + t0) * C, o + b * (t1 - t0) * C, (size_t)((t1 - t0) * C) * sizeof(double));
            free(o);
            if (part == 0) {
                fin1 = read_out(&in, FINAL);
            } else {
                double *f = read_out(&in, FINAL);
                if (exact) {
                    th_expect(bits_equal(out2, out_ref, B * L * C), "split at %lld: out differs", (long long)sp);
                    th_expect(bits_equal(f, fin_ref, B * C * (W - 1)), "split at %lld: final differs", (long long)sp);
                }
                const double eo = th_nerr(out2, out_ref, B * L * C), ef = th_nerr(f, fin_ref, B * C * (W - 1));
                worst_out = eo != eo || eo > worst_out ? eo : worst_out;
                worst_fin = ef != ef || ef > worst_fin ? ef : worst_fin;
                free(f);
            }
            inst_free(&in);
            free(xs);
        }
        free(fin1);
    }
    th_metric("out", worst_out, exact ? TH_TOL_EXACT : TH_TOL_F32);
    th_metric("final", worst_fin, exact ? TH_TOL_EXACT : TH_TOL_F32);
    th_end();
    free(out2);
    free(out_ref);
    free(fin_ref);
    inst_free(&whole);
    mamba2_context_destroy(ctx);
    data_free(&d);
}

/* Packed varlen (forward and backward) == the sequences run one by one. */
static void test_varlen_vs_separate(mamba2_backend_t be, const char *isa) {
    cv_case c = {"packed", 1, 0, 29, 4, 1, 1, 1, 1, 1, .nseq = 7,
                 .seqlen = {70, 1, 2, 0, 130, 1, 9}, .seed = 303};
    cv_data d;
    data_make(&d, &c);
    mamba2_context_t *ctx = th_ctx(be, 4, isa);
    const int exact = be == MAMBA2_BACKEND_CPU;
    const int64_t C = c.C, W = c.W, W1 = W - 1;
    th_begin("parity packed varlen == sequences one by one (%s%s%s)",
             be == MAMBA2_BACKEND_CPU ? "cpu" : "ref", isa ? " " : "", isa ? isa : "");
    cv_inst pk;
    results pr;
    inst_make(&pk, &c, &d, MAMBA2_DTYPE_F32, 1);
    memset(&pr, 0, sizeof pr);
    if (run_case(ctx, &pk, &pr, 1)) {
        double *dw = (double *)calloc((size_t)(C * W), sizeof(double));
        double *db = (double *)calloc((size_t)C, sizeof(double));
        for (int s = 0; s < c.nseq; s++) {
            const int64_t t0 = d.cu[s], t1 = d.cu[s + 1], n = t1 - t0;
            cv_case sc = c;
            sc.nseq = 0;
            sc.B = 1;
            sc.L = n;
            cv_data sd;
            memset(&sd, 0, sizeof sd);
            sd.S = 1;
            sd.v[X] = d.v[X] + t0 * C;
            sd.v[DOUT] = d.v[DOUT] + t0 * C;
            sd.v[WT] = d.v[WT];
            sd.v[BIAS] = d.v[BIAS];
            sd.v[INIT] = d.v[INIT] + s * C * W1;
            sd.v[DFINAL] = d.v[DFINAL] + s * C * W1;
            cv_inst si;
            results sr;
            inst_make(&si, &sc, &sd, MAMBA2_DTYPE_F32, 0);
            if (run_case(ctx, &si, &sr, 0)) {
                char lab[64];
                snprintf(lab, sizeof lab, "seq%d.out", s);
                cmp(lab, sr.v[OUT], pr.v[OUT] + t0 * C, n * C, exact);
                snprintf(lab, sizeof lab, "seq%d.final", s);
                cmp(lab, sr.v[FINAL], pr.v[FINAL] + s * C * W1, C * W1, exact);
                snprintf(lab, sizeof lab, "seq%d.dx", s);
                cmp(lab, sr.v[DX], pr.v[DX] + t0 * C, n * C, exact);
                snprintf(lab, sizeof lab, "seq%d.dinit", s);
                cmp(lab, sr.v[DINIT], pr.v[DINIT] + s * C * W1, C * W1, exact);
                for (int64_t i = 0; i < C * W; i++) dw[i] += sr.v[DW][i];
                for (int64_t i = 0; i < C; i++) db[i] += sr.v[DB][i];
            }
            results_free(&sr);
            inst_free(&si);
        }
        /* dweight / dbias: the sums group differently; equal within the f32 tolerance */
        th_metric("dweight", th_nerr(pr.v[DW], dw, C * W), TH_TOL_F32);
        th_metric("dbias", th_nerr(pr.v[DB], db, C), TH_TOL_F32);
        free(dw);
        free(db);
    }
    results_free(&pr);
    th_end();
    inst_free(&pk);
    mamba2_context_destroy(ctx);
    data_free(&d);
}

/* Step with padding rows and permuted slots, x[B,C] and x[B,T,C], i32 and i64 indices:
 * against the float64 reference step; padding rows of out and unused slots untouched. */
static void test_step_indices(mamba2_backend_t be, const char *isa, int T, int i64) {
    const int64_t B = 6, S = 9, C = 13, W = 4, W1 = W - 1;
    const int64_t idx[6] = {3, -1, 7, 0, -5, 8};
    th_rng r;
    th_rng_seed(&r, 401 + (uint64_t)T);
    double *x = (double *)th_xmalloc((size_t)(B * T * C) * sizeof(double));
    double *cache = (double *)th_xmalloc((size_t)(S * C * W1) * sizeof(double));
    double w[13 * 4], bias[13];
    for (int64_t i = 0; i < B * T * C; i++) x[i] = (float)th_rng_normal(&r);
    for (int64_t i = 0; i < S * C * W1; i++) cache[i] = (float)th_rng_normal(&r);
    for (int64_t i = 0; i < C * W; i++) w[i] = (float)th_rng_normal(&r);
    for (int64_t i = 0; i < C; i++) bias[i] = (float)th_rng_normal(&r);
    double idxv[6];
    for (int i = 0; i < 6; i++) idxv[i] = (double)idx[i];
    th_begin("step padding+permuted slots %s%s%s T=%d %s", be == MAMBA2_BACKEND_CPU ? "cpu" : "ref",
             isa ? " " : "", isa ? isa : "", T, i64 ? "i64" : "i32");
    const int rank = T == 1 ? 2 : 3;
    const int64_t sh2[2] = {B, C}, sh3[3] = {B, T, C}, shc[3] = {S, C, W1}, shw[2] = {C, W},
                  shb[1] = {C}, shi[1] = {B};
    /* the oracle: the float64 reference on copies */
    step_io o, s;
    memset(&o, 0, sizeof o);
    memset(&s, 0, sizeof s);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    mamba2_context_t *ctx = th_ctx(be, 3, isa);
    const mamba2_dtype_t it = i64 ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32;
    gt_make(&o.x, MAMBA2_DTYPE_F64, rank, rank == 2 ? sh2 : sh3, 0, 0, x);
    gt_make(&o.out, MAMBA2_DTYPE_F64, rank, rank == 2 ? sh2 : sh3, 0, 1, NULL);
    gt_make(&o.cache, MAMBA2_DTYPE_F64, 3, shc, 0, 1, cache);
    gt_make(&o.w, MAMBA2_DTYPE_F64, 2, shw, 0, 0, w);
    gt_make(&o.bias, MAMBA2_DTYPE_F64, 1, shb, 0, 0, bias);
    gt_make(&o.idx, it, 1, shi, 0, 0, idxv);
    gt_make(&s.x, MAMBA2_DTYPE_F32, rank, rank == 2 ? sh2 : sh3, 1, 0, x);
    gt_make(&s.out, MAMBA2_DTYPE_F32, rank, rank == 2 ? sh2 : sh3, 1, 1, NULL);
    gt_make(&s.cache, MAMBA2_DTYPE_F32, 3, shc, 1, 1, cache);
    gt_make(&s.w, MAMBA2_DTYPE_F32, 2, shw, 1, 0, w);
    gt_make(&s.bias, MAMBA2_DTYPE_F32, 1, shb, 0, 0, bias);
    gt_make(&s.idx, it, 1, shi, 0, 0, idxv);
    mamba2_status_t st = do_step(ref, &o, 1, 1);
    th_expect(st == MAMBA2_STATUS_OK, "reference step: %s", mamba2_last_error());
    st = do_step(ctx, &s, 1, 1);
    th_expect(st == MAMBA2_STATUS_OK, "step: %s", mamba2_last_error());
    step_check_memory(&s);
    double *go = (double *)th_xmalloc((size_t)(B * T * C) * sizeof(double));
    double *ro = (double *)th_xmalloc((size_t)(B * T * C) * sizeof(double));
    double *gc = (double *)th_xmalloc((size_t)(S * C * W1) * sizeof(double));
    double *rc = (double *)th_xmalloc((size_t)(S * C * W1) * sizeof(double));
    gt_read(&s.out, go);
    gt_read(&o.out, ro);
    gt_read(&s.cache, gc);
    gt_read(&o.cache, rc);
    /* padding rows: still the NaN pattern; live rows: against the oracle */
    double num = 0, den = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < T * C; i++) {
            const double g = go[b * T * C + i], rv = ro[b * T * C + i];
            if (idx[b] < 0) {
                th_expect(isnan(g), "out row %lld (padding) was written", (long long)b);
                if (!isnan(g)) break;
            } else {
                num += (g - rv) * (g - rv);
                den += rv * rv;
                if (!isfinite(g)) num = NAN;
            }
        }
    th_metric("out", sqrt(num) / sqrt(den), TH_TOL_F32);
    /* slots: used ones updated like the oracle, the others unchanged */
    int used[9] = {0};
    for (int b = 0; b < 6; b++)
        if (idx[b] >= 0) used[idx[b]] = 1;
    for (int64_t q = 0; q < S; q++)
        if (!used[q])
            th_expect(bits_equal(gc + q * C * W1, cache + q * C * W1, C * W1),
                      "conv_cache slot %lld (not referenced) changed", (long long)q);
    th_metric("conv_cache", th_nerr(gc, rc, S * C * W1), TH_TOL_F32);
    th_end();
    free(go);
    free(ro);
    free(gc);
    free(rc);
    free(x);
    free(cache);
    step_free(&o);
    step_free(&s);
    mamba2_context_destroy(ref);
    mamba2_context_destroy(ctx);
}

/* ===================================================================== errors === */

typedef struct err_env {
    mamba2_context_t *cpu, *ref;
    cv_case c;
    cv_data d;
    cv_inst in;
} err_env;

static void expect_err(mamba2_status_t st, mamba2_status_t want, const char *w1, const char *w2) {
    const char *msg = mamba2_last_error();
    th_expect(st == want, "status %s, expected %s (message: %s)", mamba2_status_string(st),
              mamba2_status_string(want), msg);
    if (w1) th_expect(th_has_word(msg, w1), "message \"%s\" does not name %s", msg, w1);
    if (w2) th_expect(th_has_word(msg, w2), "message \"%s\" does not name %s", msg, w2);
    th_note("[%s]", msg);
}

/* The outputs of an instance still hold exactly what they held before the call. */
static void expect_untouched(const cv_inst *in) {
    for (int id = OUT; id < NT; id++)
        if (in->g[id].present)
            th_expect(memcmp(in->g[id].alloc, in->g[id].snap, in->g[id].bytes + 2 * TH_GUARD) == 0,
                      "%s was written by a failed call", tname[id]);
}

static void test_errors(void) {
    mamba2_context_t *cpu = th_ctx(MAMBA2_BACKEND_CPU, 2, NULL);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    cv_case c = {"err", 2, 7, 13, 4, 1, 1, 1, 1, 1, .seed = 501};
    cv_data d;
    data_make(&d, &c);
    cv_inst in;
    inst_make(&in, &c, &d, MAMBA2_DTYPE_F32, 0);
    mamba2_status_t st;
    const mamba2_status_t INV = MAMBA2_STATUS_INVALID_ARGUMENT;
    mamba2_tensor_t t;

#define FWD(ctx_) mamba2_conv1d_forward(ctx_, T_(&in, OUT), T_(&in, FINAL), T_(&in, X), T_(&in, WT), &in.opts)
#define BWD(ctx_) mamba2_conv1d_backward(ctx_, &in.grads, T_(&in, DOUT), T_(&in, DFINAL), T_(&in, X), T_(&in, WT), &in.opts, NULL, 0)

    th_begin("errors: valid call succeeds");
    expect_err(FWD(cpu), MAMBA2_STATUS_OK, NULL, NULL);
    expect_err(BWD(cpu), MAMBA2_STATUS_OK, NULL, NULL);
    for (int id = OUT; id < NT; id++)
        if (in.g[id].present) gt_arm(&in.g[id], NULL);

    th_begin("errors: NULL x / weight / out / ctx");
    st = mamba2_conv1d_forward(cpu, T_(&in, OUT), NULL, NULL, T_(&in, WT), &in.opts);
    expect_err(st, INV, "x", NULL);
    st = mamba2_conv1d_forward(cpu, T_(&in, OUT), NULL, T_(&in, X), NULL, &in.opts);
    expect_err(st, INV, "weight", NULL);
    st = mamba2_conv1d_forward(cpu, NULL, NULL, T_(&in, X), T_(&in, WT), &in.opts);
    expect_err(st, INV, "out", NULL);
    st = mamba2_conv1d_forward(NULL, T_(&in, OUT), NULL, T_(&in, X), T_(&in, WT), &in.opts);
    expect_err(st, INV, "ctx", NULL);
    st = mamba2_conv1d_backward(cpu, NULL, T_(&in, DOUT), NULL, T_(&in, X), T_(&in, WT), &in.opts, NULL, 0);
    expect_err(st, INV, "grads", NULL);
    expect_untouched(&in);

    th_begin("errors: W out of 1..8");
    {
        const mamba2_tensor_t w0 = in.g[WT].t;
        int64_t sh[2] = {13, 9};
        float *buf = (float *)calloc(13 * 9, sizeof(float));
        in.g[WT].t = mamba2_tensor_make(buf, MAMBA2_DTYPE_F32, 2, sh);
        expect_err(FWD(cpu), INV, "weight", "W");
        sh[1] = 0;
        in.g[WT].t = mamba2_tensor_make(buf, MAMBA2_DTYPE_F32, 2, sh);
        expect_err(FWD(cpu), INV, "weight", "W");
        in.g[WT].t = w0;
        free(buf);
    }
    expect_untouched(&in);

    th_begin("errors: wrong rank / shape");
    t = in.g[X].t;
    in.g[X].t.rank = 2;
    expect_err(FWD(cpu), INV, "x", NULL);
    in.g[X].t = t;
    t = in.g[WT].t;
    in.g[WT].t.shape[0] = 12;
    expect_err(FWD(cpu), INV, "weight", NULL);
    in.g[WT].t = t;
    t = in.g[BIAS].t;
    in.g[BIAS].t.shape[0] = 14;
    expect_err(FWD(cpu), INV, "bias", NULL);
    in.g[BIAS].t = t;
    t = in.g[INIT].t;
    in.g[INIT].t.shape[2] = 4;
    expect_err(FWD(cpu), INV, "initial_conv_state", NULL);
    in.g[INIT].t = t;
    t = in.g[FINAL].t;
    in.g[FINAL].t.shape[0] = 3;
    expect_err(FWD(cpu), INV, "final_conv_state", NULL);
    in.g[FINAL].t = t;
    t = in.g[OUT].t;
    in.g[OUT].t.shape[1] = 6;
    expect_err(FWD(cpu), INV, "out", NULL);
    in.g[OUT].t = t;
    t = in.g[DOUT].t;
    in.g[DOUT].t.shape[2] = 12;
    expect_err(BWD(cpu), INV, "dout", NULL);
    in.g[DOUT].t = t;
    t = in.g[DFINAL].t;
    in.g[DFINAL].t.rank = 2;
    expect_err(BWD(cpu), INV, "dfinal_conv_state", NULL);
    in.g[DFINAL].t = t;
    t = in.g[DW].t;
    in.g[DW].t.shape[1] = 3;
    expect_err(BWD(cpu), INV, "dweight", NULL);
    in.g[DW].t = t;
    t = in.g[DINIT].t;
    in.g[DINIT].t.shape[1] = 12;
    expect_err(BWD(cpu), INV, "dinitial_conv_state", NULL);
    in.g[DINIT].t = t;
    expect_untouched(&in);

    th_begin("errors: last dim not contiguous, negative stride");
    t = in.g[X].t;
    in.g[X].t.stride[2] = 2;
    expect_err(FWD(cpu), INV, "x", NULL);
    in.g[X].t = t;
    t = in.g[OUT].t;
    in.g[OUT].t.stride[2] = 2;
    expect_err(FWD(cpu), INV, "out", NULL);
    in.g[OUT].t = t;
    t = in.g[X].t;
    in.g[X].t.stride[1] = -13;
    expect_err(FWD(cpu), INV, "x", NULL);
    in.g[X].t = t;
    expect_untouched(&in);

    th_begin("errors: dtypes");
    {
        cv_inst i64;
        inst_make(&i64, &c, &d, MAMBA2_DTYPE_F64, 0);
        st = mamba2_conv1d_forward(cpu, T_(&i64, OUT), NULL, T_(&i64, X), T_(&i64, WT), &i64.opts);
        expect_err(st, MAMBA2_STATUS_UNSUPPORTED, "x", NULL);
        st = mamba2_conv1d_forward(ref, T_(&i64, OUT), NULL, T_(&i64, X), T_(&i64, WT), &i64.opts);
        expect_err(st, MAMBA2_STATUS_OK, NULL, NULL);
        /* f32 x with f64 weight */
        st = mamba2_conv1d_forward(ref, T_(&in, OUT), NULL, T_(&in, X), T_(&i64, WT), &in.opts);
        expect_err(st, INV, "weight", NULL);
        /* f32 x with f64 initial state */
        mamba2_conv1d_options_t o = in.opts;
        o.initial_conv_state = T_(&i64, INIT);
        st = mamba2_conv1d_forward(ref, T_(&in, OUT), NULL, T_(&in, X), T_(&in, WT), &o);
        expect_err(st, INV, "initial_conv_state", NULL);
        t = in.g[X].t;
        in.g[X].t.dtype = MAMBA2_DTYPE_I32;
        expect_err(FWD(cpu), INV, "x", NULL);
        in.g[X].t.dtype = MAMBA2_DTYPE_BF16;
        expect_err(FWD(cpu), MAMBA2_STATUS_UNSUPPORTED, "x", NULL);
        in.g[X].t = t;
        inst_free(&i64);
    }
    expect_untouched(&in);

    th_begin("errors: outputs overlapping inputs or each other");
    t = in.g[OUT].t;
    in.g[OUT].t.data = in.g[X].t.data;
    expect_err(FWD(cpu), INV, "out", "x");
    in.g[OUT].t = t;
    t = in.g[FINAL].t;
    in.g[FINAL].t.data = in.g[INIT].t.data;
    expect_err(FWD(cpu), INV, "final_conv_state", "initial_conv_state");
    in.g[FINAL].t = t;
    t = in.g[DX].t;
    in.g[DX].t.data = in.g[DOUT].t.data;
    expect_err(BWD(cpu), INV, "dx", "dout");
    in.g[DX].t = t;
    t = in.g[DB].t;
    in.g[DB].t.data = in.g[DW].t.data;
    expect_err(BWD(cpu), INV, "dbias", "dweight");
    in.g[DB].t = t;
    t = in.g[OUT].t;
    in.g[OUT].t.stride[1] = 1; /* rows overlapping each other */
    expect_err(FWD(cpu), INV, "out", NULL);
    in.g[OUT].t = t;
    expect_untouched(&in);

    th_begin("errors: options");
    {
        mamba2_conv1d_options_t o = in.opts;
        o.activation = (mamba2_activation_t)7;
        st = mamba2_conv1d_forward(cpu, T_(&in, OUT), NULL, T_(&in, X), T_(&in, WT), &o);
        expect_err(st, INV, "activation", NULL);
        o = in.opts;
        o.bias = NULL;
        st = mamba2_conv1d_backward(cpu, &in.grads, T_(&in, DOUT), NULL, T_(&in, X), T_(&in, WT), &o, NULL, 0);
        expect_err(st, INV, "dbias", NULL);
        o = in.opts;
        o.initial_conv_state = NULL;
        st = mamba2_conv1d_backward(cpu, &in.grads, T_(&in, DOUT), NULL, T_(&in, X), T_(&in, WT), &o, NULL, 0);
        expect_err(st, INV, "dinitial_conv_state", NULL);
        size_t need = 0;
        st = mamba2_conv1d_backward_workspace_size(cpu, &in.grads, T_(&in, DOUT), NULL, T_(&in, X),
                                                   T_(&in, WT), &in.opts, NULL);
        expect_err(st, INV, "workspace_size", NULL);
        st = mamba2_conv1d_backward_workspace_size(cpu, &in.grads, T_(&in, DOUT), NULL, T_(&in, X),
                                                   T_(&in, WT), &in.opts, &need);
        expect_err(st, MAMBA2_STATUS_OK, NULL, NULL);
        th_expect(need > 0, "the CPU backward with dweight needs a workspace");
        unsigned char small[16];
        st = mamba2_conv1d_backward(cpu, &in.grads, T_(&in, DOUT), NULL, T_(&in, X), T_(&in, WT),
                                    &in.opts, small, need > 1 ? need - 1 : 0);
        expect_err(st, MAMBA2_STATUS_WORKSPACE_TOO_SMALL, "workspace", NULL);
    }
    expect_untouched(&in);

    th_begin("errors: cu_seqlens");
    {
        int32_t cu[4] = {0, 3, 5, 7};
        int64_t sh[1] = {4};
        mamba2_tensor_t cut = mamba2_tensor_make(cu, MAMBA2_DTYPE_I32, 1, sh);
        mamba2_conv1d_options_t o = in.opts;
        o.cu_seqlens = &cut;
        o.initial_conv_state = NULL;
        /* B = 2 */
        st = mamba2_conv1d_forward(cpu, T_(&in, OUT), NULL, T_(&in, X), T_(&in, WT), &o);
        expect_err(st, INV, "cu_seqlens", NULL);
        /* B = 1 views of x / out */
        mamba2_tensor_t x1 = in.g[X].t, o1 = in.g[OUT].t;
        x1.shape[0] = 1;
        o1.shape[0] = 1;
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, MAMBA2_STATUS_OK, NULL, NULL);
        cu[3] = 6; /* does not end at L */
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, INV, "cu_seqlens", "L");
        cu[3] = 7;
        cu[2] = 2; /* decreasing */
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, INV, "cu_seqlens", NULL);
        cu[2] = 5;
        cu[0] = 1;
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, INV, "cu_seqlens", NULL);
        cu[0] = 0;
        cut.dtype = MAMBA2_DTYPE_F32;
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, INV, "cu_seqlens", NULL);
        cut.dtype = MAMBA2_DTYPE_I32;
        /* states must have nseq = 3 rows, not B */
        o.initial_conv_state = T_(&in, INIT); /* [2,13,3] */
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, INV, "initial_conv_state", "nseq");
    }
    for (int id = OUT; id < NT; id++)
        if (in.g[id].present) gt_arm(&in.g[id], NULL);

    th_begin("errors: conv1d_step");
    {
        const int64_t B = 3, S = 4, C = 13, W = 4;
        float xb[3 * 13], ob[3 * 13], cb[4 * 13 * 3], wb[13 * 4];
        memset(xb, 0, sizeof xb);
        memset(cb, 0, sizeof cb);
        memset(wb, 0, sizeof wb);
        for (size_t i = 0; i < sizeof ob / sizeof ob[0]; i++) ob[i] = NAN;
        const int64_t shx[2] = {B, C}, shc[3] = {S, C, W - 1}, shw[2] = {C, W}, shi[1] = {B};
        mamba2_tensor_t xt = mamba2_tensor_make(xb, MAMBA2_DTYPE_F32, 2, shx);
        mamba2_tensor_t ot = mamba2_tensor_make(ob, MAMBA2_DTYPE_F32, 2, shx);
        mamba2_tensor_t ct = mamba2_tensor_make(cb, MAMBA2_DTYPE_F32, 3, shc);
        mamba2_tensor_t wt = mamba2_tensor_make(wb, MAMBA2_DTYPE_F32, 2, shw);
        int32_t ix[3] = {2, -1, 0};
        mamba2_tensor_t it = mamba2_tensor_make(ix, MAMBA2_DTYPE_I32, 1, shi);
        mamba2_conv1d_step_options_t so = mamba2_conv1d_step_options_default();
        so.state_indices = &it;
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), MAMBA2_STATUS_OK, NULL, NULL);
        th_expect(isnan(ob[C]), "padding row 1 of out was written");
        ix[2] = 4; /* >= S */
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), INV, "state_indices", "S");
        ix[2] = 2; /* duplicate */
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), INV, "state_indices", NULL);
        ix[2] = 0;
        it.dtype = MAMBA2_DTYPE_F32;
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), INV, "state_indices", NULL);
        it.dtype = MAMBA2_DTYPE_I32;
        it.shape[0] = 2;
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), INV, "state_indices", NULL);
        it.shape[0] = 3;
        /* identity slots need B <= S */
        mamba2_tensor_t c2 = ct;
        c2.shape[0] = 2;
        expect_err(mamba2_conv1d_step(cpu, &ot, &c2, &xt, &wt, NULL), INV, "conv_cache", "B");
        c2 = ct;
        c2.shape[2] = 2;
        expect_err(mamba2_conv1d_step(cpu, &ot, &c2, &xt, &wt, &so), INV, "conv_cache", NULL);
        expect_err(mamba2_conv1d_step(cpu, &ot, NULL, &xt, &wt, &so), INV, "conv_cache", NULL);
        /* out overlapping the cache or x; the cache overlapping x */
        mamba2_tensor_t o2 = ot;
        o2.data = cb;
        expect_err(mamba2_conv1d_step(cpu, &o2, &ct, &xt, &wt, &so), INV, "out", "conv_cache");
        o2.data = xb;
        expect_err(mamba2_conv1d_step(cpu, &o2, &ct, &xt, &wt, &so), INV, "out", "x");
        c2 = ct;
        c2.data = xb;
        c2.shape[0] = 1;
        expect_err(mamba2_conv1d_step(cpu, &ot, &c2, &xt, &wt, NULL), INV, "conv_cache", "B");
        ix[0] = 0; ix[1] = -1; ix[2] = -1;
        expect_err(mamba2_conv1d_step(cpu, &ot, &c2, &xt, &wt, &so), INV, "conv_cache", "x");
        ix[0] = 2; ix[2] = 0;
        /* out of another rank than x */
        const int64_t sho[3] = {B, 1, C};
        o2 = mamba2_tensor_make(ob, MAMBA2_DTYPE_F32, 3, sho);
        expect_err(mamba2_conv1d_step(cpu, &o2, &ct, &xt, &wt, &so), INV, "out", NULL);
        /* x of rank 1, W = 9 */
        mamba2_tensor_t x1 = xt;
        x1.rank = 1;
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &x1, &wt, &so), INV, "x", NULL);
        float w9[13 * 9];
        const int64_t shw9[2] = {C, 9};
        mamba2_tensor_t w9t = mamba2_tensor_make(w9, MAMBA2_DTYPE_F32, 2, shw9);
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &w9t, &so), INV, "weight", "W");
        so.activation = (mamba2_activation_t)-1;
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), INV, "activation", NULL);
    }
#undef FWD
#undef BWD
    th_end();
    inst_free(&in);
    data_free(&d);
    mamba2_context_destroy(cpu);
    mamba2_context_destroy(ref);
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
