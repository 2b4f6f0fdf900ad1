/*
 * test_nonfinite.c — NaN and Inf inputs (SPEC §9): every backend and kernel set, the fused
 * forward, the staged pipeline and the decode step propagate them as the reference does, so
 * prefill and decode agree; and large finite values the float32 kernels must not overflow on
 * (the gated RMSNorm's sum of squares).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static mamba2_tensor_t t1(float *p, int64_t a) { return mamba2_tensor_make(p, MAMBA2_DTYPE_F32, 1, &a); }
static mamba2_tensor_t tn(float *p, int r, int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t s[4] = {a, b, c, d};
    return mamba2_tensor_make(p, MAMBA2_DTYPE_F32, r, s);
}

/* The contexts every check runs on: the reference and each CPU kernel set this CPU has. */
#define NKIND 4
static mamba2_context_t *kind_ctx(int k, const char **name) {
    static const char *isa[NKIND] = {NULL, "avx512", "avx2", "scalar"};
    static const char *nm[NKIND] = {"ref", "cpu/avx512", "cpu/avx2", "cpu/scalar"};
    mamba2_context_t *ctx = NULL;
    if (mamba2_context_create(&ctx, k == 0 ? MAMBA2_BACKEND_REF : MAMBA2_BACKEND_CPU, 2) !=
        MAMBA2_STATUS_OK)
        return NULL;
    if (k > 0 && mamba2_context_force_isa(ctx, isa[k]) != MAMBA2_STATUS_OK) {
        mamba2_context_destroy(ctx);
        return NULL;
    }
    *name = nm[k];
    return ctx;
}

/* The contexts of the cases that cover the GPU kernels too: kind_ctx's, then OpenCL (one
 * context, created once: it compiles the kernels) where a device exists. kind_done releases
 * what kind_gpu_ctx gave. */
#define NKIND_GPU (NKIND + 1)
static mamba2_context_t *gpu_ctx;
static int gpu_tried;
static mamba2_context_t *kind_gpu_ctx(int k, const char **name) {
    if (k < NKIND) return kind_ctx(k, name);
    if (!gpu_tried) {
        gpu_tried = 1;
        if (mamba2_context_create(&gpu_ctx, MAMBA2_BACKEND_OPENCL, 1) != MAMBA2_STATUS_OK) {
            printf("note: no OpenCL device (%s): the GPU cases are not run\n", mamba2_last_error());
            gpu_ctx = NULL;
        }
    }
    *name = "opencl";
    return gpu_ctx;
}
static void kind_done(int k, mamba2_context_t *ctx) {
    if (k < NKIND) mamba2_context_destroy(ctx);
}

/* got vs the reference's ref[n] on the elements where ref is finite: finite there, and
 * within TH_TOL_F32 in normalised error over them */
static void cmp_finite(const char *what, const float *got, const double *ref, int64_t n) {
    double g[16], r[16];
    int64_t m = 0;
    for (int64_t i = 0; i < n && m < 16; i++)
        if (isfinite(ref[i])) {
            g[m] = got[i];
            r[m++] = ref[i];
        }
    if (m < n) th_note("%s: %lld of %lld non-finite in the reference", what, (long long)(n - m), (long long)n);
    th_metric(what, th_nerr(g, r, m), TH_TOL_F32);
}

/* [1,L,1,1] (L <= 8), Bm = Cm = dout = 1, dt_limit (lo, hi): the fused forward (out, final
 * state, and the states after every token) and backward (dx, ddt, dA, dBm, dCm) of every
 * backend against the reference where it is finite; want_out[L] (if given) on all of them. */
static void ssd_small_case(const char *label, int64_t L, const float *x, const float *dt,
                           float A, double lo, double hi, const double *want_out) {
    double ref[8][8];
    int have_ref = 0;
    for (int k = 0; k < NKIND_GPU; k++) {
        const char *kn;
        mamba2_context_t *ctx = kind_gpu_ctx(k, &kn);
        if (!ctx) continue;
        th_begin("ssd_%s/%s", label, kn);
        float xv[8], dtv[8], Av[1] = {A}, one[8], out[8], fin[1], ps[8], dx[8], ddt[8], dA[1],
                                dB[8], dC[8];
        int64_t pos[8];
        for (int64_t t = 0; t < L; t++) xv[t] = x[t], dtv[t] = dt[t], one[t] = 1, pos[t] = t;
        mamba2_tensor_t tx = tn(xv, 4, 1, L, 1, 1), tdt = tn(dtv, 3, 1, L, 1, 0), tA = t1(Av, 1),
                        tB = tn(one, 4, 1, L, 1, 1), to = tn(out, 4, 1, L, 1, 1),
                        tf = tn(fin, 4, 1, 1, 1, 1), tps = tn(ps, 4, L, 1, 1, 1),
                        tdx = tn(dx, 4, 1, L, 1, 1), tddt = tn(ddt, 3, 1, L, 1, 0),
                        tdA = t1(dA, 1), tdB = tn(dB, 4, 1, L, 1, 1), tdC = tn(dC, 4, 1, L, 1, 1);
        mamba2_tensor_t tpos = mamba2_tensor_make(pos, MAMBA2_DTYPE_I64, 1, &L);
        mamba2_ssd_options_t o = mamba2_ssd_options_default();
        o.chunk_size = 2;
        o.dt_limit_lo = lo;
        o.dt_limit_hi = hi;
        mamba2_ssd_options_t op = o;
        op.state_positions = &tpos;
        mamba2_ssd_grads_t g;
        memset(&g, 0, sizeof g);
        g.dx = &tdx, g.ddt = &tddt, g.dA = &tdA, g.dBm = &tdB, g.dCm = &tdC;
        mamba2_status_t st =
            mamba2_ssd_forward_states(ctx, &to, NULL, &tf, &tps, &tx, &tdt, &tA, &tB, &tB, &op, NULL, 0);
        if (!st) st = mamba2_ssd_backward(ctx, &g, &tB, NULL, &tx, &tdt, &tA, &tB, &tB, NULL, &o, NULL, 0);
        if (th_expect(st == MAMBA2_STATUS_OK, "%s", mamba2_last_error())) {
            const float *got[8] = {out, fin, ps, dx, ddt, dA, dB, dC};
            static const char *nm[8] = {"out", "final", "pos_states", "dx", "ddt", "dA", "dBm", "dCm"};
            const int64_t n[8] = {L, 1, L, L, L, 1, L, L};
            if (want_out) cmp_finite("out:want", out, want_out, L);
            for (int i = 0; i < 8; i++) {
                if (!have_ref)
                    for (int64_t j = 0; j < n[i]; j++) ref[i][j] = got[i][j];
                else
                    cmp_finite(nm[i], got[i], ref[i], n[i]);
            }
            have_ref = 1;
        }
        th_end();
        kind_done(k, ctx);
    }
}

/* ok: v has the expected class: NaN for want = NaN, non-finite (NaN or ±inf, SPEC §9) for
 * want = ±inf, else about the value want */
static int same_class(float v, float want) {
    if (isnan(want)) return isnan(v);
    if (isinf(want)) return !isfinite(v);
    return fabsf(v - want) <= 1e-5f * (1.0f + fabsf(want));
}

/* [1,2,1,1], x = B = C = 1, A = -1, dt = [dt0, 0.5]: fused forward, staged pipeline and decode
 * step (one call with both tokens, and one call per token) give want0, want1. */
static void ssd_dt_case(const char *label, float dt0, int softplus, float want0, float want1) {
    for (int k = 0; k < NKIND; k++) {
        const char *kn;
        mamba2_context_t *ctx = kind_ctx(k, &kn);
        if (!ctx) continue;
        th_begin("ssd_dt_%s/%s", label, kn);
        float x[2] = {1, 1}, dt[2] = {dt0, 0.5f}, A[1] = {-1}, Bm[2] = {1, 1}, Cm[2] = {1, 1};
        float out[2] = {7, 7}, fin[1] = {7};
        mamba2_tensor_t tx = tn(x, 4, 1, 2, 1, 1), tdt = tn(dt, 3, 1, 2, 1, 0), tA = t1(A, 1),
                        tB = tn(Bm, 4, 1, 2, 1, 1), tC = tn(Cm, 4, 1, 2, 1, 1),
                        to = tn(out, 4, 1, 2, 1, 1), tf = tn(fin, 4, 1, 1, 1, 1);
        mamba2_ssd_options_t o = mamba2_ssd_options_default();
        o.dt_softplus = softplus;
        mamba2_status_t st = mamba2_ssd_forward(ctx, &to, NULL, &tf, &tx, &tdt, &tA, &tB, &tC, &o, NULL, 0);
        if (th_expect(st == MAMBA2_STATUS_OK, "forward: %s", mamba2_last_error())) {
            th_expect(same_class(out[0], want0) && same_class(out[1], want1) &&
                          same_class(fin[0], want1),
                      "forward gives [%g, %g] final %g; expected [%g, %g]", out[0], out[1], fin[0],
                      want0, want1);
        }
        /* staged: chunk_cumsum .. chunk_scan with Q = 2 */
        float dto[2], cs[2], CB[4], sts[1], ss[1], out2[2] = {7, 7};
        int64_t s5[5] = {1, 1, 1, 2, 2};
        mamba2_tensor_t tdto = tn(dto, 4, 1, 1, 1, 2), tcs = tn(cs, 4, 1, 1, 1, 2),
                        tCB = mamba2_tensor_make(CB, MAMBA2_DTYPE_F32, 5, s5);
        int64_t s5s[5] = {1, 1, 1, 1, 1};
        mamba2_tensor_t tst = mamba2_tensor_make(sts, MAMBA2_DTYPE_F32, 5, s5s),
                        tss = mamba2_tensor_make(ss, MAMBA2_DTYPE_F32, 5, s5s),
                        to2 = tn(out2, 4, 1, 2, 1, 1);
        mamba2_ssd_chunked_options_t co = mamba2_ssd_chunked_options_default();
        co.chunk_size = 2;
        co.dt_softplus = softplus;
        st = mamba2_ssd_chunk_cumsum(ctx, &tdto, &tcs, &tdt, &tA, &co);
        if (!st) st = mamba2_ssd_bmm_chunk(ctx, &tCB, &tB, &tC, &co);
        if (!st) st = mamba2_ssd_chunk_state(ctx, &tst, &tx, &tB, &tdto, &tcs, &co);
        if (!st) st = mamba2_ssd_state_passing(ctx, &tss, NULL, &tst, &tcs, &co);
        if (!st) st = mamba2_ssd_chunk_scan(ctx, &to2, &tCB, &tx, &tdto, &tcs, &tC, &tss, &co);
        if (th_expect(st == MAMBA2_STATUS_OK, "staged: %s", mamba2_last_error()))
            th_expect(same_class(out2[0], want0) && same_class(out2[1], want1),
                      "staged gives [%g, %g]; expected [%g, %g]", out2[0], out2[1], want0, want1);
        /* decode: both tokens in one call, then token by token */
        mamba2_ssd_step_options_t so = mamba2_ssd_step_options_default();
        so.dt_softplus = softplus;
        for (int by_token = 0; by_token < 2; by_token++) {
            float cache[1] = {0}, sout[2] = {7, 7};
            mamba2_tensor_t tc = tn(cache, 4, 1, 1, 1, 1);
            if (!by_token) {
                mamba2_tensor_t sx = tn(x, 4, 1, 2, 1, 1), sdt = tn(dt, 3, 1, 2, 1, 0),
                                sB = tn(Bm, 4, 1, 2, 1, 1), sC = tn(Cm, 4, 1, 2, 1, 1),
                                sy = tn(sout, 4, 1, 2, 1, 1);
                st = mamba2_ssd_step(ctx, &tc, &sy, NULL, &sx, &sdt, &tA, &sB, &sC, &so);
            } else {
                st = MAMBA2_STATUS_OK;
                for (int t = 0; t < 2 && !st; t++) {
                    mamba2_tensor_t sx = tn(x + t, 3, 1, 1, 1, 0), sdt = tn(dt + t, 2, 1, 1, 0, 0),
                                    sB = tn(Bm + t, 3, 1, 1, 1, 0), sC = tn(Cm + t, 3, 1, 1, 1, 0),
                                    sy = tn(sout + t, 3, 1, 1, 1, 0);
                    st = mamba2_ssd_step(ctx, &tc, &sy, NULL, &sx, &sdt, &tA, &sB, &sC, &so);
                }
            }
            if (th_expect(st == MAMBA2_STATUS_OK, "step: %s", mamba2_last_error()))
                th_expect(same_class(sout[0], want0) && same_class(sout[1], want1) &&
                              same_class(cache[0], want1),
                          "step (%s) gives [%g, %g] state %g; expected [%g, %g]",
                          by_token ? "token by token" : "T = 2", sout[0], sout[1], cache[0], want0,
                          want1);
        }
        th_end();
        mamba2_context_destroy(ctx);
    }
}

/* A NaN in x, Bm or Cm of one token of a larger problem: the fused CPU forward's NaN pattern
 * (out and final_state) equals the reference's, on every kernel set and shape class. */
static void ssd_nan_pattern(const char *label, int64_t L, int64_t H, int64_t P, int64_t N,
                            int which, int64_t tok) {
    const int64_t nx = L * H * P, nb = L * N, ns = H * P * N;
    float *x = th_xmalloc(nx * 4), *dt = th_xmalloc(L * H * 4), *A = th_xmalloc(H * 4),
          *Bm = th_xmalloc(nb * 4), *Cm = th_xmalloc(nb * 4);
    th_rng r;
    th_rng_seed(&r, 7);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)th_rng_uniform(&r, -1, 1);
    for (int64_t i = 0; i < L * H; i++) dt[i] = (float)th_rng_uniform(&r, 0.01, 0.1);
    for (int64_t i = 0; i < H; i++) A[i] = (float)th_rng_uniform(&r, -1, -0.1);
    for (int64_t i = 0; i < nb; i++) Bm[i] = (float)th_rng_uniform(&r, -1, 1);
    for (int64_t i = 0; i < nb; i++) Cm[i] = (float)th_rng_uniform(&r, -1, 1);
    if (which == 0) x[tok * H * P + 1] = NAN;
    if (which == 1) Bm[tok * N] = NAN;
    if (which == 2) Cm[tok * N] = NAN;
    if (which == 3) dt[tok * H] = NAN;
    float *ref_out = NULL, *ref_fin = NULL;
    for (int k = 0; k < NKIND; k++) {
        const char *kn;
        mamba2_context_t *ctx = kind_ctx(k, &kn);
        if (!ctx) continue;
        th_begin("ssd_nan_%s/%s", label, kn);
        float *out = th_xmalloc(nx * 4), *fin = th_xmalloc(ns * 4);
        mamba2_tensor_t tx = tn(x, 4, 1, L, H, P), tdt = tn(dt, 3, 1, L, H, 0), tA = t1(A, H),
                        tB = tn(Bm, 4, 1, L, 1, N), tC = tn(Cm, 4, 1, L, 1, N),
                        to = tn(out, 4, 1, L, H, P), tf = tn(fin, 4, 1, H, P, N);
        mamba2_ssd_options_t o = mamba2_ssd_options_default();
        o.chunk_size = 16;
        mamba2_status_t st = mamba2_ssd_forward(ctx, &to, NULL, &tf, &tx, &tdt, &tA, &tB, &tC, &o, NULL, 0);
        if (th_expect(st == MAMBA2_STATUS_OK, "forward: %s", mamba2_last_error())) {
            if (!ref_out) {
                ref_out = out;
                ref_fin = fin;
                int64_t nn = 0;
                for (int64_t i = 0; i < nx; i++) nn += isnan(out[i]) != 0;
                th_expect(nn > 0, "the reference has no NaN in out");
                th_note("%lld NaN outputs", (long long)nn);
            } else {
                int64_t bad = -1;
                for (int64_t i = 0; i < nx && bad < 0; i++)
                    if (!isnan(ref_out[i]) != !isnan(out[i])) bad = i;
                th_expect(bad < 0, "out[%lld] is %g; the reference has %g", (long long)bad,
                          bad >= 0 ? out[bad] : 0.0, bad >= 0 ? ref_out[bad] : 0.0);
                bad = -1;
                for (int64_t i = 0; i < ns && bad < 0; i++)
                    if (!isnan(ref_fin[i]) != !isnan(fin[i])) bad = i;
                th_expect(bad < 0, "final_state[%lld] is %g; the reference has %g", (long long)bad,
                          bad >= 0 ? fin[bad] : 0.0, bad >= 0 ? ref_fin[bad] : 0.0);
                free(out);
                free(fin);
            }
        }
        th_end();
        mamba2_context_destroy(ctx);
    }
    free(ref_out);
    free(ref_fin);
    free(x), free(dt), free(A), free(Bm), free(Cm);
}

/* ---- SPEC §9's rule for gradients, on every backend ---------------------------------------
 * One NaN input (x, dt or Bm) at token tok of batch row 0, head 1 (x, dt) or group 0 (Bm), in
 * [B=2, L=37, H=4, P=5, N=6, G=2] with D[H], z, dt_bias, softplus, chunk 16. The gradient
 * elements that can depend on it (its cone: row 0 and the NaN's head, or every head of its
 * group for Bm; dA, dD, ddt_bias of those heads) may be NaN; the rule checked:
 *   - outside the cone: finite, and within TH_TOL_F32 of the NaN-free run (reference values);
 *   - inside: every element the reference makes NaN is NaN; a finite element is within
 *     TH_TOL_F32 (normalised over the finite ones) of the reference's finite value; an element
 *     the reference keeps finite may be NaN (the chunked forms reach it through a weight that
 *     is zero in exact arithmetic: exp(cs_i - cs_j) with the NaN in both sums, a masked or
 *     padded product). */
enum { NG_B = 2, NG_L = 37, NG_H = 4, NG_P = 5, NG_N = 6, NG_G = 2, NG_NT = 8 };
static const char *const ng_name[NG_NT] = {"dx", "ddt", "dA", "dBm", "dCm", "dD", "dz", "ddt_bias"};
static const int64_t ng_len[NG_NT] = {NG_B * NG_L * NG_H * NG_P, NG_B * NG_L * NG_H, NG_H,
                                      NG_B * NG_L * NG_G * NG_N, NG_B * NG_L * NG_G * NG_N, NG_H,
                                      NG_B * NG_L * NG_H * NG_P, NG_H};

/* is element i of gradient k in the cone of a NaN at row 0, head h0 (all heads of group 0
 * when h0 < 0)? */
static int ng_cone(int k, int64_t i, int h0) {
    const int hpg = NG_H / NG_G;
    int64_t b, h, g;
    switch (k) {
    case 0: case 6: b = i / (NG_L * NG_H * NG_P), h = (i / NG_P) % NG_H; break;
    case 1: b = i / (NG_L * NG_H), h = i % NG_H; break;
    case 3: case 4: b = i / (NG_L * NG_G * NG_N), g = (i / NG_N) % NG_G; return b == 0 && g == 0;
    default: b = 0, h = i; break; /* per-head parameters */
    }
    return b == 0 && (h0 >= 0 ? h == h0 : h / hpg == 0);
}

/* the gradients of one backward run, or 0 when it failed */
static int ng_run(mamba2_context_t *ctx, const float *in[7], float *gr[NG_NT]) {
    float *x = (float *)in[0], *dt = (float *)in[1], *A = (float *)in[2], *Bm = (float *)in[3],
          *D = (float *)in[4], *z = (float *)in[5], *dtb = (float *)in[6];
    static float dout[NG_B * NG_L * NG_H * NG_P];
    for (int64_t i = 0; i < ng_len[0]; i++) dout[i] = (float)((i * 7 % 11) - 5) / 5.0f;
    mamba2_tensor_t tx = tn(x, 4, NG_B, NG_L, NG_H, NG_P), tdt = tn(dt, 3, NG_B, NG_L, NG_H, 0),
                    tA = t1(A, NG_H), tB = tn(Bm, 4, NG_B, NG_L, NG_G, NG_N),
                    tC = tn(Bm + ng_len[3], 4, NG_B, NG_L, NG_G, NG_N), tD = t1(D, NG_H),
                    tz = tn(z, 4, NG_B, NG_L, NG_H, NG_P), tb = t1(dtb, NG_H),
                    tdo = tn(dout, 4, NG_B, NG_L, NG_H, NG_P);
    mamba2_tensor_t tg[NG_NT] = {
        tn(gr[0], 4, NG_B, NG_L, NG_H, NG_P), tn(gr[1], 3, NG_B, NG_L, NG_H, 0), t1(gr[2], NG_H),
        tn(gr[3], 4, NG_B, NG_L, NG_G, NG_N), tn(gr[4], 4, NG_B, NG_L, NG_G, NG_N), t1(gr[5], NG_H),
        tn(gr[6], 4, NG_B, NG_L, NG_H, NG_P), t1(gr[7], NG_H)};
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.chunk_size = 16, o.D = &tD, o.z = &tz, o.dt_bias = &tb, o.dt_softplus = 1;
    mamba2_ssd_grads_t g;
    memset(&g, 0, sizeof g);
    g.dx = &tg[0], g.ddt = &tg[1], g.dA = &tg[2], g.dBm = &tg[3], g.dCm = &tg[4], g.dD = &tg[5],
    g.dz = &tg[6], g.ddt_bias = &tg[7];
    mamba2_status_t st =
        mamba2_ssd_backward(ctx, &g, &tdo, NULL, &tx, &tdt, &tA, &tB, &tC, NULL, &o, NULL, 0);
    return th_expect(st == MAMBA2_STATUS_OK, "backward: %s", mamba2_last_error());
}

static void ssd_nan_grad_rule(const char *label, int which, int64_t tok) {
    static float x[NG_B * NG_L * NG_H * NG_P], dt[NG_B * NG_L * NG_H], A[NG_H],
        BC[2 * NG_B * NG_L * NG_G * NG_N], D[NG_H], z[NG_B * NG_L * NG_H * NG_P], dtb[NG_H];
    th_rng r;
    th_rng_seed(&r, 91);
    for (int64_t i = 0; i < ng_len[0]; i++) x[i] = (float)th_rng_uniform(&r, -1, 1);
    for (int64_t i = 0; i < ng_len[0]; i++) z[i] = (float)th_rng_uniform(&r, -1, 1);
    for (int64_t i = 0; i < ng_len[1]; i++) dt[i] = (float)th_rng_uniform(&r, -3, 0);
    for (int64_t i = 0; i < 2 * ng_len[3]; i++) BC[i] = (float)th_rng_uniform(&r, -1, 1);
    for (int i = 0; i < NG_H; i++)
        A[i] = (float)th_rng_uniform(&r, -1, -0.1), D[i] = (float)th_rng_uniform(&r, -1, 1),
        dtb[i] = (float)th_rng_uniform(&r, -0.5, 0.5);
    const float *in[7] = {x, dt, A, BC, D, z, dtb};
    float *clean[NG_NT], *ref[NG_NT], *got[NG_NT];
    for (int k = 0; k < NG_NT; k++)
        clean[k] = th_xmalloc(ng_len[k] * 4), ref[k] = th_xmalloc(ng_len[k] * 4),
        got[k] = th_xmalloc(ng_len[k] * 4);
    mamba2_context_t *rc = NULL;
    mamba2_context_create(&rc, MAMBA2_BACKEND_REF, 1);
    th_begin("ssd_nan_grads_%s/setup", label);
    int ok = rc && ng_run(rc, in, clean); /* the NaN-free gradients */
    const int h0 = which == 2 ? -1 : 1;
    if (which == 0) x[(tok * NG_H + 1) * NG_P + 2] = NAN;
    if (which == 1) dt[tok * NG_H + 1] = NAN;
    if (which == 2) BC[tok * NG_G * NG_N + 3] = NAN;
    ok = ok && ng_run(rc, in, ref);
    th_end();
    for (int kd = 0; ok && kd < NKIND_GPU; kd++) {
        const char *kn;
        mamba2_context_t *ctx = kind_gpu_ctx(kd, &kn);
        if (!ctx) continue;
        th_begin("ssd_nan_grads_%s/%s", label, kn);
        if (ng_run(ctx, in, got)) {
            int64_t nan_ref = 0, nan_got = 0;
            for (int k = 0; k < NG_NT; k++) {
                double *go = th_xmalloc(ng_len[k] * 8), *re = th_xmalloc(ng_len[k] * 8),
                       *gi = th_xmalloc(ng_len[k] * 8), *ri = th_xmalloc(ng_len[k] * 8);
                int64_t no = 0, ni = 0, bad = -1;
                for (int64_t i = 0; i < ng_len[k]; i++) {
                    const float gv = got[k][i], rv = ref[k][i];
                    nan_ref += isnan(rv) != 0, nan_got += isnan(gv) != 0;
                    if (!ng_cone(k, i, h0)) { /* outside: finite, the NaN-free value */
                        if (!isfinite(gv) && bad < 0) bad = i;
                        go[no] = gv, re[no++] = clean[k][i];
                    } else if (isnan(rv)) {
                        if (!isnan(gv) && bad < 0) bad = i;
                    } else if (!isnan(gv)) {
                        gi[ni] = gv, ri[ni++] = rv;
                    }
                }
                th_expect(bad < 0, "%s[%lld] = %g (reference %g, cone %d)", ng_name[k],
                          (long long)bad, bad >= 0 ? got[k][bad] : 0.0, bad >= 0 ? ref[k][bad] : 0.0,
                          bad >= 0 ? ng_cone(k, bad, h0) : 0);
                char lab[48];
                snprintf(lab, sizeof lab, "%s outside", ng_name[k]);
                if (no) th_metric(lab, th_nerr(go, re, no), TH_TOL_F32);
                snprintf(lab, sizeof lab, "%s inside", ng_name[k]);
                if (ni) th_metric(lab, th_nerr(gi, ri, ni), TH_TOL_F32);
                free(go), free(re), free(gi), free(ri);
            }
            th_note("NaN gradient elements: %lld (reference %lld)", (long long)nan_got, (long long)nan_ref);
        }
        th_end();
        kind_done(kd, ctx);
    }
    if (rc) mamba2_context_destroy(rc);
    for (int k = 0; k < NG_NT; k++) free(clean[k]), free(ref[k]), free(got[k]);
}

/* Gated RMSNorm of a [1,16] row of ones with one element `big`: out = v r w, r from the mean
 * square in a range float32 cannot square. */
static void rms_big(float big, int gated, int nbg) {
    for (int k = 0; k < NKIND_GPU; k++) {
        const char *kn;
        mamba2_context_t *ctx = kind_gpu_ctx(k, &kn);
        if (!ctx) continue;
        th_begin("rmsnorm_big_%g_%s%s/%s", (double)big, gated ? "z" : "noz", nbg ? "_nbg" : "", kn);
        float x[16], z[16], w[16], out[16], rstd[1], dout[16], dx[16], dw[16];
        for (int i = 0; i < 16; i++) x[i] = 1, z[i] = 30, w[i] = 1, dout[i] = 1;
        x[5] = big;
        mamba2_tensor_t tx = tn(x, 2, 1, 16, 0, 0), tz = tn(z, 2, 1, 16, 0, 0), tw = t1(w, 16),
                        to = tn(out, 2, 1, 16, 0, 0), tr = tn(rstd, 2, 1, 1, 0, 0),
                        tdo = tn(dout, 2, 1, 16, 0, 0), tdx = tn(dx, 2, 1, 16, 0, 0),
                        tdw = t1(dw, 16);
        mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
        o.norm_before_gate = nbg;
        mamba2_status_t st = mamba2_rmsnorm_gated_forward(ctx, &to, &tr, &tx, gated ? &tz : NULL,
                                                          &tw, NULL, &o, NULL, 0);
        /* out[5] = big / sqrt((big^2 + 15) / 16) ~= 4, the others ~= 4 / big (times
         * silu(30) when the gate comes after the norm; before it, it scales v uniformly) */
        const double s30 = 30.0 / (1.0 + exp(-30.0));
        const double rr = 1.0 / sqrt(((double)big * big + 15.0) / 16.0) * (nbg ? s30 : 1.0);
        if (th_expect(st == MAMBA2_STATUS_OK, "forward: %s", mamba2_last_error())) {
            int ok = 1;
            for (int i = 0; i < 16; i++) {
                const double want = (i == 5 ? (double)big : 1.0) * rr;
                ok &= fabs(out[i] - want) <= 1e-5 * fabs(want);
            }
            th_expect(ok, "out[5] = %g out[0] = %g; expected %g and %g", out[5], out[0],
                      (double)big * rr, rr);
        }
        mamba2_rmsnorm_gated_grads_t g;
        memset(&g, 0, sizeof g);
        g.dx = &tdx;
        g.dweight = &tdw;
        st = mamba2_rmsnorm_gated_backward(ctx, &g, &tdo, &tx, gated ? &tz : NULL, &tw, NULL, NULL,
                                           &o, NULL, 0);
        if (th_expect(st == MAMBA2_STATUS_OK, "backward: %s", mamba2_last_error())) {
            int ok = 1;
            for (int i = 0; i < 16; i++) ok &= isfinite(dx[i]) && isfinite(dw[i]);
            th_expect(ok, "dx/dweight not finite: dx[5] = %g dweight[5] = %g", dx[5], dw[5]);
            th_expect(fabs(dw[5] - (double)big * rr) <= 1e-5 * (double)big * rr,
                      "dweight[5] = %g; expected %g", dw[5], (double)big * rr);
        }
        th_end();
        kind_done(k, ctx);
    }
}

/* The pair: x = [[3e38, 1]], weight = [1, 1], one group: out = [1.41421, 4.714e-39]
 * (r = 1/sqrt((9e76 + 1)/2), below float32's normal range), and the backward finite. */
static void rms_pair(void) {
    for (int k = 0; k < NKIND_GPU; k++) {
        const char *kn;
        mamba2_context_t *ctx = kind_gpu_ctx(k, &kn);
        if (!ctx) continue;
        th_begin("rmsnorm_pair_3e38/%s", kn);
        float x[2] = {3e38f, 1}, w[2] = {1, 1}, out[2] = {7, 7}, dout[2] = {1, 1}, dx[2], dw[2];
        mamba2_tensor_t tx = tn(x, 2, 1, 2, 0, 0), tw = t1(w, 2), to = tn(out, 2, 1, 2, 0, 0),
                        tdo = tn(dout, 2, 1, 2, 0, 0), tdx = tn(dx, 2, 1, 2, 0, 0), tdw = t1(dw, 2);
        mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
        const double r = 1.0 / sqrt(((double)x[0] * x[0] + 1.0) / 2.0 + o.eps);
        const double want[2] = {(double)x[0] * r, r}, dwant[2] = {(double)x[0] * r, r};
        mamba2_status_t st =
            mamba2_rmsnorm_gated_forward(ctx, &to, NULL, &tx, NULL, &tw, NULL, &o, NULL, 0);
        if (th_expect(st == MAMBA2_STATUS_OK, "forward: %s", mamba2_last_error()))
            th_expect(fabs(out[0] - want[0]) <= 1e-5 * want[0] &&
                          fabs(out[1] - want[1]) <= 1e-5 * want[1],
                      "out = [%g, %g]; expected [%g, %g]", out[0], out[1], want[0], want[1]);
        mamba2_rmsnorm_gated_grads_t g;
        memset(&g, 0, sizeof g);
        g.dx = &tdx;
        g.dweight = &tdw;
        st = mamba2_rmsnorm_gated_backward(ctx, &g, &tdo, &tx, NULL, &tw, NULL, NULL, &o, NULL, 0);
        if (th_expect(st == MAMBA2_STATUS_OK, "backward: %s", mamba2_last_error()))
            th_expect(isfinite(dx[0]) && isfinite(dx[1]) && fabs(dw[0] - dwant[0]) <= 1e-5 * dwant[0] &&
                          fabs(dw[1] - dwant[1]) <= 1e-5 * dwant[1],
                      "dx = [%g, %g], dweight = [%g, %g]; expected dweight [%g, %g]", dx[0], dx[1],
                      dw[0], dw[1], dwant[0], dwant[1]);
        th_end();
        kind_done(k, ctx);
    }
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    /* d = [NaN, 0.5]: y_0 = NaN and the NaN state carries into y_1 */
    ssd_dt_case("nan", NAN, 0, NAN, NAN);
    ssd_dt_case("nan_softplus", NAN, 1, NAN, NAN);
    /* finite control: d = [0 (clamped), 0.5]: y = [0, 0.5] */
    ssd_dt_case("neg", -1.0f, 0, 0.0f, 0.5f);
    /* d = +inf: non-finite from that token on (the recurrence gives inf, the chunked form
     * exp(cs_i - cs_j) = exp(-inf + inf) = NaN) */
    ssd_dt_case("inf", INFINITY, 0, INFINITY, INFINITY);
    static const char *what[4] = {"x", "Bm", "Cm", "dt"};
    for (int w = 0; w < 4; w++) {
        char lab[64];
        snprintf(lab, sizeof lab, "%s_P8_N16", what[w]);
        ssd_nan_pattern(lab, 70, 4, 8, 16, w, 33);
        snprintf(lab, sizeof lab, "%s_P64_N64", what[w]);
        ssd_nan_pattern(lab, 130, 4, 64, 64, w, 77);
    }
    /* A = -inf (and d A overflowing to -inf): the full decay, y_t = d_t x_t, as the
     * recurrence gives, on the chunked GPU kernels too (exp(-inf - -inf) would be NaN) */
    const float x3[3] = {1, 2, 3}, dt05[3] = {0.5f, 0.5f, 0.5f}, dtbig[3] = {1e30f, 1e30f, 1e30f};
    const double want_ninf[3] = {0.5, 1, 1.5}, want_big[3] = {1e30, 2e30, 3e30};
    ssd_small_case("A_ninf", 3, x3, dt05, -INFINITY, 0.0, INFINITY, want_ninf);
    ssd_small_case("dtA_overflow", 3, x3, dtbig, -1e10f, 0.0, INFINITY, want_big);
    /* ddt at the dt_limit edges: d = 0.4f is above hi = 0.4 and 0.7f below lo = 0.7 (as
     * doubles), so the clamp's derivative is 0 there (token 0); token 1 is inside */
    const float dthi[2] = {0.4f, 0.2f}, dtlo[2] = {0.7f, 0.9f};
    ssd_small_case("ddt_edge_hi", 2, x3, dthi, -1.0f, 0.0, 0.4, NULL);
    ssd_small_case("ddt_edge_lo", 2, x3, dtlo, -1.0f, 0.7, 1.0, NULL);
    /* SPEC §9's gradient rule: a NaN mid-chunk (token 21) and at a chunk's first token (16) */
    ssd_nan_grad_rule("x_tok21", 0, 21);
    ssd_nan_grad_rule("dt_tok21", 1, 21);
    ssd_nan_grad_rule("dt_tok16", 1, 16);
    ssd_nan_grad_rule("Bm_tok21", 2, 21);
    rms_big(2e19f, 0, 0);
    rms_big(2e19f, 1, 0);
    rms_big(2e19f, 1, 1);
    rms_big(3e38f, 0, 0);
    rms_pair();
    if (gpu_ctx) mamba2_context_destroy(gpu_ctx);
    return th_finish();
}
