/*
 * ops_spec.c — the spec-row machinery of test_ops (ops.h): guarded tensors from spec rows,
 * the three comparisons of one case, the padding-row check of the step ops, NaN propagation
 * and the error-table runner shared by conv1d, RMSNorm, conv1d_step and ssd_step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

spec *spec_add(spec *s, int id, const char *name, int rank, const int64_t *sh, int is_out) {
    memset(&s[id], 0, sizeof s[id]);
    s[id].name = name;
    s[id].present = 1;
    s[id].is_out = is_out;
    s[id].rank = rank;
    s[id].dt = MAMBA2_DTYPE_F32;
    for (int i = 0; i < rank; i++) s[id].sh[i] = sh[i];
    return &s[id];
}

void spec_fill(th_rng *r, spec *s, double scale, double shift) {
    const int64_t n = th_numel(s->rank, s->sh);
    s->vals = (double *)th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) s->vals[i] = (double)(float)(th_rng_normal(r) * scale + shift);
}

void spec_free(spec *s, int n) {
    for (int i = 0; i < n; i++) free(s[i].vals);
}

void res_free(double **res, int n) {
    for (int i = 0; i < n; i++) free(res[i]);
}

static void make_gts(gt *g, const spec *s, int n, int pad, int f64) {
    memset(g, 0, (size_t)n * sizeof *g);
    for (int i = 0; i < n; i++) {
        if (!s[i].present) continue;
        const int fl = s[i].dt == MAMBA2_DTYPE_F32;
        const mamba2_dtype_t dt = fl && f64 ? MAMBA2_DTYPE_F64 : s[i].dt;
        gt_make(&g[i], dt, s[i].rank, s[i].sh, pad && fl && s[i].rank > 1, s[i].is_out,
                s[i].is_out && !s[i].inout ? NULL : s[i].vals);
    }
}

mamba2_status_t run_spec(mamba2_context_t *ctx, spec *s, int n, int pad, int f64, call_fn fn,
                         const void *cs, double **res, const char *tag, mutate_fn mut) {
    gt g[MAXT];
    make_gts(g, s, n, pad, f64);
    if (mut) mut(g, (void *)cs);
    const mamba2_status_t st = fn(ctx, cs, g);
    char msg[256];
    for (int i = 0; i < n; i++) {
        res[i] = NULL;
        if (!g[i].present) continue;
        if (!gt_check(&g[i], s[i].name, msg, sizeof msg)) th_fail("%s: %s", tag, msg);
        if (s[i].is_out) res[i] = gt_values(&g[i]);
        gt_free(&g[i]);
    }
    return st;
}

void compare_spec(const ops_be *be, spec *s, int n, int pad, call_fn fn, const void *cs) {
    double *rg[MAXT], *rg2[MAXT], *rr[MAXT], *rc[MAXT];
    mamba2_status_t st = run_spec(be->ctx, s, n, pad, 0, fn, cs, rg, be->name, NULL);
    if (!th_expect(st == MAMBA2_STATUS_OK, "%s: %s: %s", be->name, mamba2_status_string(st),
                   mamba2_last_error())) {
        res_free(rg, n);
        return;
    }
    st = run_spec(be->ctx, s, n, !pad, 0, fn, cs, rg2, "2nd run", NULL);
    th_expect(st == MAMBA2_STATUS_OK, "%s 2nd run: %s", be->name, mamba2_last_error());
    st = run_spec(ops_ref, s, n, 0, 1, fn, cs, rr, "ref f64", NULL);
    th_expect(st == MAMBA2_STATUS_OK, "ref f64: %s", mamba2_last_error());
    const int cross = be->kind != OB_CPU;
    if (cross) {
        st = run_spec(ops_cpu, s, n, 0, 0, fn, cs, rc, "cpu", NULL);
        th_expect(st == MAMBA2_STATUS_OK, "cpu: %s", mamba2_last_error());
    }
    char lab[96];
    for (int i = 0; i < n; i++) {
        if (!s[i].present || !s[i].is_out || !rg[i]) continue;
        const int64_t m = th_numel(s[i].rank, s[i].sh);
        if (rr[i]) gt_cmp(s[i].name, rg[i], rr[i], m, 0, TH_TOL_F32);
        snprintf(lab, sizeof lab, "%s:rerun", s[i].name);
        if (rg2[i]) th_expect(gt_bits_equal(rg[i], rg2[i], m), "%s not bitwise identical", lab);
        snprintf(lab, sizeof lab, "%s:cpu", s[i].name);
        if (cross && rc[i]) th_metric(lab, th_nerr(rg[i], rc[i], m), TH_TOL_F32);
    }
    res_free(rg, n);
    res_free(rg2, n);
    res_free(rr, n);
    if (cross) res_free(rc, n);
}

void check_padding(const ops_be *be, spec *s, int out_id, int as_id, int ix_id, int n,
                   call_fn fn, const void *cs) {
    if (!s[ix_id].present) return;
    double *rg[MAXT];
    if (run_spec(be->ctx, s, n, 1, 0, fn, cs, rg, be->name, NULL) != MAMBA2_STATUS_OK) {
        res_free(rg, n);
        return;
    }
    const int64_t B = s[ix_id].sh[0];
    for (int id = out_id; id <= as_id; id++) {
        if (!s[id].present || !rg[id]) continue;
        const int64_t per = th_numel(s[id].rank, s[id].sh) / B;
        for (int64_t b = 0; b < B; b++)
            if (s[ix_id].vals[b] < 0)
                th_expect(gt_bits_equal(rg[id] + b * per, s[id].vals + b * per, per),
                          "%s row %lld (padding) changed", s[id].name, (long long)b);
    }
    res_free(rg, n);
}

void nan_pattern(const ops_be *be, const char *what, spec *s, int n, call_fn fn, const void *cs) {
    th_begin("nan %s [%s]", what, be->name);
    double *rg[MAXT], *rr[MAXT];
    mamba2_status_t st = run_spec(be->ctx, s, n, 0, 0, fn, cs, rg, be->name, NULL);
    th_expect(st == MAMBA2_STATUS_OK, "%s: %s", be->name, mamba2_last_error());
    st = run_spec(ops_ref, s, n, 0, 1, fn, cs, rr, "ref f64", NULL);
    th_expect(st == MAMBA2_STATUS_OK, "ref f64: %s", mamba2_last_error());
    int nans = 0;
    for (int i = 0; i < n; i++) {
        if (!s[i].present || !s[i].is_out || !rg[i] || !rr[i]) continue;
        const int64_t m = th_numel(s[i].rank, s[i].sh);
        int64_t bad = 0;
        for (int64_t k = 0; k < m; k++) {
            bad += isnan(rg[i][k]) != isnan(rr[i][k]);
            nans += isnan(rr[i][k]) != 0;
        }
        th_expect(bad == 0, "%s: %lld elements differ in NaN-ness from the reference", s[i].name,
                  (long long)bad);
    }
    th_expect(nans > 0, "the reference shows no NaN");
    res_free(rg, n);
    res_free(rr, n);
    th_end();
}

mamba2_status_t ops_want_for(const ops_be *be, ops_want w) {
    return be->gpu ? w.gpu : be->kind == OB_CPU ? w.cpu : w.ref;
}

void run_spec_errors(const ops_be *be, const char *op, const spec_err *rows, int nrows,
                     int (*make)(const void *cs, spec *s, uint64_t seed), const void *cs,
                     size_t cs_size, call_fn fn) {
    for (int r = 0; r < nrows; r++) {
        const spec_err *e = &rows[r];
        char name[128];
        snprintf(name, sizeof name, "errors %s %s", op, e->what);
        if (!ops_selected(name)) continue;
        th_begin("%s [%s]", name, be->name);
        unsigned char cbuf[256];
        memcpy(cbuf, cs, cs_size < sizeof cbuf ? cs_size : sizeof cbuf);
        spec s[MAXT];
        const int n = make(cbuf, s, 5 + (uint64_t)r);
        gt g[MAXT];
        make_gts(g, s, n, 1, e->f64);
        if (e->mutate) e->mutate(g, cbuf);
        const mamba2_status_t want = ops_want_for(be, e->want);
        const mamba2_status_t st = fn(be->ctx, cbuf, g);
        const char *word = e->word && !strcmp(e->word, "$be") ? be->name : e->word;
        gt_expect_err(st, want, want == MAMBA2_STATUS_OK ? NULL : word, NULL);
        char msg[256];
        for (int i = 0; i < n; i++) {
            if (!g[i].present) continue;
            if (!gt_check(&g[i], s[i].name, msg, sizeof msg)) th_fail("%s", msg);
            if (want == MAMBA2_STATUS_OK || !s[i].is_out) continue;
            /* a failed call writes nothing: every byte as armed (outputs unset, in/out ones
             * their prior values) */
            const int changed = memcmp(g[i].alloc, g[i].snap, g[i].bytes + 2 * TH_GUARD) != 0;
            th_expect(!changed, "%s was written by a failed call", s[i].name);
        }
        for (int i = 0; i < n; i++) gt_free(&g[i]);
        spec_free(s, n);
        th_end();
    }
}
