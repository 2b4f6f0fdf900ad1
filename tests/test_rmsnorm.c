/*
 * test_rmsnorm.c — the gated RMSNorm (SPEC §5): CPU backend against the float64 reference,
 * the reference against finite differences and against the equations written out here,
 * memory safety, argument validation and thread-count determinism.
 *
 * Units:
 *   formula_*   reference (f64) forward vs the SPEC §5 equations evaluated in this file, and
 *               per-group statistics vs whole-row ones (mamba_ssm's group_size = D/ngroups
 *               vs a norm over the whole row: must differ when ngroups > 1);
 *   fd_*        reference (f64) backward vs central finite differences of L = Σ out ∘ dout
 *               for dx, dz, dweight, dbias;
 *   <case>/...  each case on the CPU backend (both kernel sets, 1 and 2 threads, with and
 *               without rstd reuse) and on the reference fed f32, vs the f64 reference:
 *               out, rstd and every gradient within TH_TOL_F32; guard bytes, gaps of strided
 *               views and unchanged inputs checked; outputs pre-filled with NaN; results
 *               identical across thread counts and with/without rstd reuse;
 *   grad_subsets_*  any subset of {dx, dz, dweight, dbias} requested alone gives the same
 *               bits as all of them (CPU kernel sets and reference);
 *   api_*       invalid arguments: the status, a message naming the tensor, no output
 *               touched.
 * `test_rmsnorm --bench [threads]` instead times the CPU forward and backward at a Mamba-2 shape
 * (M = 2048, D = 5120) and a memcpy loop in the same run, and prints GB/s.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rmsnorm_inst.h"

/* ------------------------------------------------------------------ in-test formula --- */

static double silu(double s) { return s / (1.0 + exp(-s)); }

/* SPEC §5 written out for one row-major problem, in double. */
static void formula(const rcase *c, const rdata *d, double *out) {
    const int64_t S = c->S ? c->S : c->D;
    for (int64_t m = 0; m < c->M; m++)
        for (int64_t g0 = 0; g0 < c->D; g0 += S) {
            double ms = 0.0;
            for (int64_t k = g0; k < g0 + S; k++) {
                double x = d->x[m * c->D + k];
                double v = (c->z && !c->nbg) ? x * silu(d->z[m * c->D + k]) : x;
                ms += v * v / (double)S;
            }
            for (int64_t k = g0; k < g0 + S; k++) {
                double x = d->x[m * c->D + k];
                double v = (c->z && !c->nbg) ? x * silu(d->z[m * c->D + k]) : x;
                double o = v / sqrt(ms + c->eps) * d->w[k];
                if (c->bias) o += d->b[k];
                if (c->z && c->nbg) o *= silu(d->z[m * c->D + k]);
                out[m * c->D + k] = o;
            }
        }
}

static void ref_forward_f64(mamba2_context_t *ref, const rcase *c, const rdata *d, double *out) {
    inst I;
    inst_make(&I, c, d, MAMBA2_DTYPE_F64, 0);
    mamba2_status_t st = call_fwd(ref, &I, c, 0, 0);
    if (st != MAMBA2_STATUS_OK) th_fail("ref forward: %s: %s", mamba2_status_string(st), mamba2_last_error());
    th_tensor_gather(&I.out, out);
    inst_free(&I);
}

static void test_formula(mamba2_context_t *ref) {
    /* every combination of mode, z, bias on a grouped problem */
    for (int mode = 0; mode < 8; mode++) {
        rcase c = {"formula", 5, 48, 12, mode & 1, (mode >> 1) & 1, (mode >> 2) & 1, 0, 0, 1e-5, 11};
        th_begin("formula_z%d_bias%d_nbg%d", c.z, c.bias, c.nbg);
        rdata d;
        data_make(&d, &c);
        double *a = th_xmalloc(sizeof(double) * 240), *b = th_xmalloc(sizeof(double) * 240);
        formula(&c, &d, a);
        ref_forward_f64(ref, &c, &d, b);
        th_metric("out", th_nerr(b, a, 240), TH_TOL_ORACLE);
        free(a);
        free(b);
        data_free(&d);
        th_end();
    }

    /* Per-group statistics (mamba_ssm, group_size = D/ngroups) vs whole-row statistics (a norm
     * over the whole row, as ports that ignore ngroups compute): groups of very different
     * scale make the two clearly different, and only the grouped one matches the formula. */
    th_begin("formula_group_vs_row_stats");
    rcase cg = {"grp", 3, 64, 16, 1, 0, 0, 0, 0, 1e-5, 12};
    rdata d;
    data_make(&d, &cg);
    for (int64_t m = 0; m < cg.M; m++)
        for (int64_t k = 0; k < cg.D; k++) d.x[m * cg.D + k] = f32r(d.x[m * cg.D + k] * pow(10.0, (double)(k / 16)));
    double *grouped = th_xmalloc(sizeof(double) * 192), *row = th_xmalloc(sizeof(double) * 192),
           *want = th_xmalloc(sizeof(double) * 192);
    formula(&cg, &d, want);
    ref_forward_f64(ref, &cg, &d, grouped);
    rcase cr = cg;
    cr.S = 0; /* whole row */
    ref_forward_f64(ref, &cr, &d, row);
    double diff = th_nerr(row, grouped, 192);
    th_metric("grouped_vs_formula", th_nerr(grouped, want, 192), TH_TOL_ORACLE);
    th_note("grouped_vs_row=%.2e", diff);
    th_expect(diff > 0.1, "per-group and whole-row statistics agree (%.3e); groups not applied", diff);
    /* the first group (smallest scale) is crushed by the row statistics */
    double g0 = 0, r0 = 0;
    for (int k = 0; k < 16; k++) {
        g0 += fabs(grouped[k]);
        r0 += fabs(row[k]);
    }
    th_expect(r0 < 0.01 * g0, "row statistics should shrink the small-scale group (%.3e vs %.3e)", r0, g0);
    free(grouped);
    free(row);
    free(want);
    data_free(&d);
    th_end();
}

/* ------------------------------------------------------------ finite differences --- */

static double loss(mamba2_context_t *ref, const rcase *c, const rdata *d) {
    int64_t n = c->M * c->D;
    double *out = th_xmalloc(sizeof(double) * (size_t)(n + 1));
    ref_forward_f64(ref, c, d, out);
    double l = 0.0;
    for (int64_t i = 0; i < n; i++) l += out[i] * d->dout[i];
    free(out);
    return l;
}

static void test_fd(mamba2_context_t *ref, const rcase *c) {
    th_begin("fd_%s", c->name);
    rdata d;
    data_make(&d, c);
    inst I;
    inst_make(&I, c, &d, MAMBA2_DTYPE_F64, 0);
    mamba2_status_t st = call_bwd(ref, &I, c, 0, 1);
    if (st != MAMBA2_STATUS_OK) {
        th_fail("ref backward: %s: %s", mamba2_status_string(st), mamba2_last_error());
        inst_free(&I);
        data_free(&d);
        return;
    }
    res r;
    res_read(&r, &I);
    struct {
        int id;
        double *vals;
        int64_t n;
    } params[4] = {{R_DX, d.x, c->M * c->D}, {R_DZ, d.z, c->z ? c->M * c->D : 0},
                   {R_DW, d.w, c->D}, {R_DB, d.b, c->bias ? c->D : 0}};
    for (int p = 0; p < 4; p++) {
        if (!params[p].n) continue;
        double *fd = th_xmalloc(sizeof(double) * (size_t)params[p].n);
        for (int64_t i = 0; i < params[p].n; i++) {
            double v = params[p].vals[i], h = 1e-6 * (fabs(v) > 1.0 ? fabs(v) : 1.0);
            params[p].vals[i] = v + h;
            double lp = loss(ref, c, &d);
            params[p].vals[i] = v - h;
            double lm = loss(ref, c, &d);
            params[p].vals[i] = v;
            fd[i] = (lp - lm) / (2.0 * h);
        }
        th_metric(rname[params[p].id], th_nerr(r.v[params[p].id], fd, params[p].n), TH_TOL_FD);
        free(fd);
    }
    res_free(&r);
    inst_free(&I);
    data_free(&d);
    th_end();
}

/* -------------------------------------------------------------- CPU vs reference --- */

static void compare(const res *got, const res *want, int skip_rstd) {
    for (int i = 0; i < R_N; i++) {
        if (!want->v[i] || (skip_rstd && i == R_RSTD)) continue;
        th_metric(rname[i], th_nerr(got->v[i], want->v[i], want->n[i]), TH_TOL_F32);
    }
}

/* Groups of 1..4 channels: |v| pushed away from 0 (|x| + 0.5, z + 1 > 0 where given), where
 * 1 - mean(xh²) = eps r² is smallest, so a backward that forms it by cancellation fails. */
static void small_group_data(rdata *d, const rcase *c) {
    for (int64_t i = 0; i < c->M * c->D; i++) {
        d->x[i] = f32r(d->x[i] < 0 ? d->x[i] - 0.5 : d->x[i] + 0.5);
        d->z[i] = f32r(fabs(d->z[i]) + 1.0);
    }
}

static void test_case(mamba2_context_t *ref, mamba2_context_t *cpu[2][2], const rcase *c) {
    rdata d;
    data_make(&d, c);
    if (c->S >= 1 && c->S <= 4) small_group_data(&d, c);

    /* the oracle: reference in f64, contiguous, statistics recomputed in the backward */
    inst R;
    inst_make(&R, c, &d, MAMBA2_DTYPE_F64, 0);
    res want;
    th_begin("%s/ref_f64", c->name);
    run_both(ref, &R, c, 0, 1);
    res_read(&want, &R);
    for (int i = 0; i < R_N; i++)
        if (want.v[i]) th_expect(th_all_finite(want.v[i], want.n[i]), "reference %s not finite", rname[i]);
    th_end();

    /* the reference fed f32 (strided layout) */
    {
        inst I;
        inst_make(&I, c, &d, MAMBA2_DTYPE_F32, c->layout);
        th_begin("%s/ref_f32", c->name);
        if (run_both(ref, &I, c, 1, 0)) {
            res got;
            res_read(&got, &I);
            compare(&got, &want, 0);
            res_free(&got);
        }
        th_end();
        inst_free(&I);
    }

    /* CPU: both kernel sets, 1 and 2 threads, rstd reused or recomputed */
    for (int isa = 0; isa < 2; isa++) {
        inst base;
        inst_make(&base, c, &d, MAMBA2_DTYPE_F32, c->layout);
        th_begin("%s/cpu_%s_1thr", c->name, isa ? "scalar" : mamba2_context_get_isa(cpu[isa][0]));
        int ok = run_both(cpu[isa][0], &base, c, 1, 1);
        if (ok) {
            res got;
            res_read(&got, &base);
            compare(&got, &want, 0);
            res_free(&got);
        }
        th_end();
        if (!ok) {
            inst_free(&base);
            continue;
        }
        th_begin("%s/cpu_%s_same_bits", c->name, isa ? "scalar" : mamba2_context_get_isa(cpu[isa][0]));
        char msg[256];
        inst other;
        inst_make(&other, c, &d, MAMBA2_DTYPE_F32, c->layout);
        /* 2 threads, library-allocated workspace, statistics recomputed: same bits */
        if (run_both(cpu[isa][1], &other, c, 0, 0))
            th_expect(outs_equal(&base, &other, msg, sizeof msg), "2 threads, rstd recomputed: %s", msg);
        /* again on the same context: same bits */
        if (run_both(cpu[isa][1], &other, c, 1, 1))
            th_expect(outs_equal(&base, &other, msg, sizeof msg), "2 threads, repeated: %s", msg);
        th_end();
        inst_free(&other);
        inst_free(&base);
    }
    res_free(&want);
    inst_free(&R);
    data_free(&d);
}

/* M == 0: nothing to normalise; dweight and dbias are sums over no rows (0). */
static void test_empty(mamba2_context_t *ctx, const char *name) {
    th_begin("M0/%s", name);
    rcase c = {"M0", 0, 24, 8, 1, 1, 0, 0, 0, 1e-5, 1};
    rdata d;
    data_make(&d, &c);
    inst I;
    inst_make(&I, &c, &d, MAMBA2_DTYPE_F32, 0);
    if (run_both(ctx, &I, &c, 1, 1)) {
        double v[24], zero[24] = {0};
        th_tensor_gather(&I.dw, v);
        th_metric("dweight", th_nerr(v, zero, 24), TH_TOL_EXACT);
        th_tensor_gather(&I.db, v);
        th_metric("dbias", th_nerr(v, zero, 24), TH_TOL_EXACT);
    }
    inst_free(&I);
    data_free(&d);
    th_end();
}

/* Determinism across 1, 2 and 3 threads on a problem with many backward blocks. */
static void test_threads(const char *isa) {
    th_begin("threads_1_2_3_%s", isa ? isa : "default");
    rcase c = {"thr", 300, 136, 34, 1, 1, 0, 0, 3, 1e-5, 21};
    rdata d;
    data_make(&d, &c);
    inst I[3];
    const int32_t nt[3] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, nt[k], isa);
        inst_make(&I[k], &c, &d, MAMBA2_DTYPE_F32, 0);
        run_both(ctx, &I[k], &c, k == 1, 1);
        mamba2_context_destroy(ctx);
    }
    char msg[256];
    th_expect(outs_equal(&I[0], &I[1], msg, sizeof msg), "1 vs 2 threads: %s", msg);
    th_expect(outs_equal(&I[0], &I[2], msg, sizeof msg), "1 vs 3 threads: %s", msg);
    for (int k = 0; k < 3; k++) inst_free(&I[k]);
    data_free(&d);
    th_end();
}

/* Requesting a subset of the gradients gives the same bits as requesting them all. */
static void test_grad_subsets(mamba2_context_t *ctx, const char *isa) {
    rcase c = {"subsets", 19, 40, 10, 1, 1, 0, 0, 2, 1e-5, 41};
    for (int nbg = 0; nbg < 2; nbg++) {
        c.nbg = nbg;
        th_begin("grad_subsets_nbg%d_%s", nbg, isa);
        rdata d;
        data_make(&d, &c);
        inst full;
        inst_make(&full, &c, &d, MAMBA2_DTYPE_F32, 0);
        if (!run_both(ctx, &full, &c, 0, 1)) goto done; /* statistics recomputed, as below */
        res want;
        res_read(&want, &full);
        /* bit k of mask: dx, dz, dweight, dbias */
        for (unsigned mask = 1; mask < 15; mask++) {
            inst I;
            inst_make(&I, &c, &d, MAMBA2_DTYPE_F32, 0);
            arm(&I);
            mamba2_rmsnorm_gated_options_t o = opts_of(&c);
            mamba2_rmsnorm_gated_grads_t g = {0, (mask & 1) ? &I.dx : NULL, (mask & 2) ? &I.dz : NULL,
                                              (mask & 4) ? &I.dw : NULL, (mask & 8) ? &I.db : NULL};
            mamba2_status_t st = mamba2_rmsnorm_gated_backward(ctx, &g, &I.dout, &I.x, &I.z, &I.w, &I.bias,
                                                               NULL, &o, NULL, 0);
            if (!th_expect(st == MAMBA2_STATUS_OK, "mask %u: %s", mask, mamba2_last_error())) {
                inst_free(&I);
                continue;
            }
            char msg[256];
            th_expect(mem_ok(&I, msg, sizeof msg), "mask %u: %s", mask, msg);
            const int ids[4] = {R_DX, R_DZ, R_DW, R_DB};
            const mamba2_tensor_t *ts[4] = {&I.dx, &I.dz, &I.dw, &I.db};
            for (int k = 0; k < 4; k++) {
                if (!(mask & (1u << k))) continue;
                double *v = th_xmalloc(sizeof(double) * (size_t)want.n[ids[k]]);
                th_tensor_gather(ts[k], v);
                th_expect(!memcmp(v, want.v[ids[k]], sizeof(double) * (size_t)want.n[ids[k]]),
                          "mask %u: %s differs from the all-gradients run", mask, rname[ids[k]]);
                free(v);
            }
            inst_free(&I);
        }
        res_free(&want);
    done:
        inst_free(&full);
        data_free(&d);
        th_end();
    }
}

/* ------------------------------------------------------------------------- main --- */

static const rcase cases[] = {
    /* name                      M    D    S   z  b  nbg layout pad eps */
    {"D64_row_z_gatefirst",      33,  64,  0,  1, 0, 0, 0, 0, 1e-5, 0},
    {"D64_g16_z_gatefirst_bias", 33,  64, 16,  1, 1, 0, 0, 3, 1e-5, 0},
    {"D64_g16_z_normfirst_bias", 33,  64, 16,  1, 1, 1, 0, 3, 1e-5, 0},
    {"D64_row_noz",              20,  64,  0,  0, 0, 0, 0, 1, 1e-6, 0},
    {"D64_g16_noz_nbg_bias",     20,  64, 16,  0, 1, 1, 0, 0, 1e-6, 0},
    {"D60_g15_z_gatefirst_bias", 17,  60, 15,  1, 1, 0, 0, 5, 1e-5, 0},
    {"D60_g15_z_normfirst",      17,  60, 15,  1, 0, 1, 0, 5, 1e-5, 0},
    {"D60_row_z",                17,  60, 60,  1, 1, 0, 0, 0, 1e-5, 0},
    {"D44_M1_z_gatefirst",        1,  44,  0,  1, 1, 0, 0, 2, 1e-5, 0},
    {"D44_M1_z_normfirst",        1,  44, 11,  1, 1, 1, 0, 2, 1e-5, 0},
    {"D5_tiny_z",                 3,   5,  0,  1, 1, 0, 0, 1, 1e-5, 0},
    {"D3_group1",                 4,   3,  1,  1, 1, 1, 0, 0, 1e-3, 0}, /* S=1: dx ~ eps, keep it conditioned */
    {"D520_g130_many_blocks",   200, 520, 130, 1, 1, 0, 0, 7, 1e-5, 0},
    {"D256_g64_inproj_views",    50, 256, 64,  1, 1, 0, 1, 0, 1e-5, 0},
    {"D256_row_inproj_nbg",      50, 256,  0,  1, 0, 1, 1, 0, 1e-5, 0},
    {"D5120_row_mamba2",         24, 5120, 0,  1, 0, 0, 0, 0, 1e-5, 0},
    {"D5120_g640_mamba2_ng8",    24, 5120, 640, 1, 0, 0, 0, 0, 1e-5, 0},
    /* groups of 1..4 at the default eps: 1 - mean(v²) r² = eps r² must not cancel */
    {"D8_group1_eps1e-5",        16,   8,  1,  1, 0, 0, 0, 0, 1e-5, 0},
    {"D8_group2_nbg_bias",       16,   8,  2,  1, 1, 1, 0, 1, 1e-5, 0},
    {"D9_group3_noz",            16,   9,  3,  0, 0, 0, 0, 0, 1e-5, 0},
    {"D8_group4_bias",           16,   8,  4,  1, 1, 0, 0, 2, 1e-6, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const rcase fd_cases[] = {
    {"gatefirst_g4_bias",  3, 24, 6, 1, 1, 0, 0, 0, 1e-5, 31},
    {"normfirst_g4_bias",  3, 24, 6, 1, 1, 1, 0, 0, 1e-5, 32},
    {"noz_row",            2, 20, 0, 0, 1, 0, 0, 0, 1e-5, 33},
    {"gatefirst_D15_row",  2, 15, 0, 1, 0, 0, 0, 0, 1e-5, 34},
    {"normfirst_g5_M1",    1, 15, 5, 1, 1, 1, 0, 0, 1e-6, 35},
};
#define NFD ((int)(sizeof fd_cases / sizeof fd_cases[0]))

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) return bench(i + 1 < argc ? atoi(argv[i + 1]) : 0);
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    }
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    mamba2_context_t *cpu[2][2] = {{th_ctx(MAMBA2_BACKEND_CPU, 1, NULL), th_ctx(MAMBA2_BACKEND_CPU, 2, NULL)},
                                   {th_ctx(MAMBA2_BACKEND_CPU, 1, "scalar"), th_ctx(MAMBA2_BACKEND_CPU, 2, "scalar")}};

    test_formula(ref);
    for (int i = 0; i < NFD; i++) test_fd(ref, &fd_cases[i]);
    for (int i = 0; i < NCASES; i++) test_case(ref, cpu, &cases[i]);
    test_empty(cpu[0][1], "cpu");
    test_empty(ref, "ref");
    test_grad_subsets(cpu[0][1], "cpu");
    test_grad_subsets(cpu[1][0], "cpu_scalar");
    test_grad_subsets(ref, "ref");
    test_threads(NULL);
    test_threads("scalar");
    test_api(cpu[0][1], ref);

    mamba2_context_destroy(ref);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) mamba2_context_destroy(cpu[i][j]);
    return th_finish();
}
