/*
 * conv1d_parity.c — test_conv1d's parity and step units, on each CPU kernel set and the
 * reference: one prefill == L decode steps (and steps of T tokens); a prefill split in two
 * (final -> initial state) == one call; packed varlen == the sequences one by one; the step
 * with padding rows and permuted slots against the float64 reference step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv1d_inst.h"

/* Copy rows [t0, t1) of sequence data (row b of a [B,L,C] array) into a [1, t1-t0, C] array. */
static void slice_rows(const double *src, int64_t L, int64_t C, int64_t b, int64_t t0, int64_t t1,
                       double *dst) {
    memcpy(dst, src + (b * L + t0) * C, (size_t)((t1 - t0) * C) * sizeof(double));
}

/* One prefill over L tokens == L steps of one token (and == steps of T tokens), on every
 * backend: out and final state. On the CPU the step runs the very same float operations. */
void test_prefill_vs_steps(mamba2_backend_t be, const char *isa, int64_t T, int64_t C_) {
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
    gt_cmp("out", out_steps, out_ref, B * L * C, exact, TH_TOL_F32);
    gt_cmp("final", fin_steps, fin_ref, B * C * (W - 1), exact, TH_TOL_F32);
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
void test_split_prefill(mamba2_backend_t be, const char *isa) {
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
                    th_expect(gt_bits_equal(out2, out_ref, B * L * C), "split at %lld: out differs", (long long)sp);
                    th_expect(gt_bits_equal(f, fin_ref, B * C * (W - 1)), "split at %lld: final differs", (long long)sp);
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
void test_varlen_vs_separate(mamba2_backend_t be, const char *isa) {
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
                gt_cmp(lab, sr.v[OUT], pr.v[OUT] + t0 * C, n * C, exact, TH_TOL_F32);
                snprintf(lab, sizeof lab, "seq%d.final", s);
                gt_cmp(lab, sr.v[FINAL], pr.v[FINAL] + s * C * W1, C * W1, exact, TH_TOL_F32);
                snprintf(lab, sizeof lab, "seq%d.dx", s);
                gt_cmp(lab, sr.v[DX], pr.v[DX] + t0 * C, n * C, exact, TH_TOL_F32);
                snprintf(lab, sizeof lab, "seq%d.dinit", s);
                gt_cmp(lab, sr.v[DINIT], pr.v[DINIT] + s * C * W1, C * W1, exact, TH_TOL_F32);
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
void test_step_indices(mamba2_backend_t be, const char *isa, int T, int i64) {
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
            th_expect(gt_bits_equal(gc + q * C * W1, cache + q * C * W1, C * W1),
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
