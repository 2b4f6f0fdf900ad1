/*
 * test_silu_saturation.c — SiLU, its gradient and the silu gate over the whole float range,
 * on every kernel set the CPU has (avx512, avx2, neon, scalar) and on the reference.
 *
 * The vector exponentials clamp their argument, so below the clamp (v < -88) the vector
 * silu(v) = v / (1 + e^-v) once grew with |v| (silu(-1e36) = -0.0061, silu(-3e38) = -1.82
 * with AVX2 and AVX-512) where the true value underflows to -0; the gate (v z) σ(z) could
 * also overflow to -inf * 0. Each op that applies SiLU gets one row of 37 values (vector
 * bodies and scalar tails in every set) from -3e38 to 3e38 through the clamps, and is
 * checked against silu / silu' evaluated here in double:
 *   conv1d forward (W = 1, weight 1: out = silu(x)), conv1d backward (dx = silu'(x)),
 *   conv1d_step (W = 2, weights (0, 1)), gated RMSNorm forward and backward (gate after the
 *   norm, x = 1, eps = 0: out = silu(z), dz = silu'(z)), ssd_step, the fused SSD forward and
 *   backward and chunk_scan (Bm = Cm = 0, D = 1, x = 8: out = 8 silu(z), dz = 8 silu'(z);
 *   8 z overflows for z = -3e38, the product the SSD gate forms first).
 * Tolerance: 4e-6 relative (20e-6 for silu') plus 2e-36 absolute (times the gate's 8), the
 * size of silu(v) just below the clamps (the sets return -0 or a value that small there);
 * a value beyond the float range must be that infinity.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "mamba2c.h"

#define NV 37
static const float g_v[NV] = {
    -3e38f, -1e38f, -1e36f, -1e20f, -1e10f, -1e4f, -200.0f, -104.0f, -100.0f, -89.0f, -88.5f,
    -88.1f, -88.0f, -87.5f, -87.1f, -87.0f, -86.0f, -50.0f, -20.0f, -5.0f, -2.5f, -1.0f, -0.5f,
    -1e-3f, 0.0f, 1e-3f, 0.5f, 1.0f, 5.0f, 20.0f, 50.0f, 87.0f, 88.0f, 100.0f, 1e10f, 1e36f, 3e38f};

static double silu_d(double v) { return v / (1.0 + exp(-v)); }
static double dsilu_d(double v) {
    const double s = 1.0 / (1.0 + exp(-v));
    return s * (1.0 + v * (1.0 - s));
}

/* got[i] against scale * f(g_v[i]) */
static void check(const char *what, const float *got, double (*f)(double), double scale,
                  double rel) {
    double worst = 0.0;
    for (int i = 0; i < NV; i++) {
        double want = scale * f((double)g_v[i]);
        if (fabs(want) > 3.4028234663852886e38) want = want > 0 ? INFINITY : -INFINITY;
        const double err = want == (double)got[i] ? 0.0 : fabs((double)got[i] - want);
        const double tol = rel * fabs(want) + 2e-36 * scale;
        if (!(err <= tol)) {
            th_fail("%s: v = %g gives %.9g, want %.9g", what, (double)g_v[i], (double)got[i], want);
            return;
        }
        if (err / tol > worst) worst = err / tol;
    }
    th_metric(what, worst, 1.0);
}

static mamba2_tensor_t T(float *p, int rank, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e) {
    const int64_t s[5] = {a, b, c, d, e};
    return mamba2_tensor_make(p, MAMBA2_DTYPE_F32, rank, s);
}

static void *ws_alloc(size_t n) { return n ? th_xmalloc(n) : NULL; }

static int ok(mamba2_status_t st, const char *call) {
    return th_expect(st == MAMBA2_STATUS_OK, "%s: %s: %s", call, mamba2_status_string(st),
                     mamba2_last_error());
}

static void fill(float *p, int n, float v) {
    for (int i = 0; i < n; i++) p[i] = v;
}

static void run(mamba2_context_t *ctx, const char *label) {
    float v[NV], out[NV], one[NV], dx[NV], zero[4 * NV], w2[2 * NV];
    memcpy(v, g_v, sizeof v);
    fill(one, NV, 1.0f);
    fill(zero, 4 * NV, 0.0f);
    size_t wsz = 0;
    void *ws = NULL;

    /* conv1d: x [1,1,37], weight [37,1] */
    th_begin("conv1d %s", label);
    {
        mamba2_tensor_t x = T(v, 3, 1, 1, NV, 0, 0), w = T(one, 2, NV, 1, 0, 0, 0);
        mamba2_tensor_t o = T(out, 3, 1, 1, NV, 0, 0), dout = T(one, 3, 1, 1, NV, 0, 0);
        mamba2_tensor_t dxt = T(dx, 3, 1, 1, NV, 0, 0);
        mamba2_conv1d_options_t opts = mamba2_conv1d_options_default();
        opts.activation = MAMBA2_ACTIVATION_SILU;
        if (ok(mamba2_conv1d_forward(ctx, &o, NULL, &x, &w, &opts), "conv1d_forward"))
            check("fwd silu", out, silu_d, 1.0, 4e-6);
        mamba2_conv1d_grads_t g = {.dx = &dxt};
        if (ok(mamba2_conv1d_backward_workspace_size(ctx, &g, &dout, NULL, &x, &w, &opts, &wsz),
               "conv1d_backward_workspace_size")) {
            ws = ws_alloc(wsz);
            if (ok(mamba2_conv1d_backward(ctx, &g, &dout, NULL, &x, &w, &opts, ws, wsz),
                   "conv1d_backward"))
                check("bwd silu'", dx, dsilu_d, 1.0, 20e-6);
            free(ws);
        }
        /* the step: cache [1,37,1] of zeros, weights (0, 1) per channel */
        for (int i = 0; i < NV; i++) w2[2 * i] = 0.0f, w2[2 * i + 1] = 1.0f;
        float cache[NV];
        fill(cache, NV, 0.0f);
        mamba2_tensor_t xs = T(v, 2, 1, NV, 0, 0, 0), os = T(out, 2, 1, NV, 0, 0, 0);
        mamba2_tensor_t cc = T(cache, 3, 1, NV, 1, 0, 0), ws2 = T(w2, 2, NV, 2, 0, 0, 0);
        mamba2_conv1d_step_options_t so = mamba2_conv1d_step_options_default();
        so.activation = MAMBA2_ACTIVATION_SILU;
        if (ok(mamba2_conv1d_step(ctx, &os, &cc, &xs, &ws2, &so), "conv1d_step"))
            check("step silu", out, silu_d, 1.0, 4e-6);
    }
    th_end();

    /* gated RMSNorm, gate after the norm: x = 1, w = 1, eps = 0 -> rstd = 1 */
    th_begin("rmsnorm_gated %s", label);
    {
        mamba2_tensor_t x = T(one, 2, 1, NV, 0, 0, 0), z = T(v, 2, 1, NV, 0, 0, 0);
        mamba2_tensor_t w = T(one, 1, NV, 0, 0, 0, 0), o = T(out, 2, 1, NV, 0, 0, 0);
        mamba2_tensor_t dz = T(dx, 2, 1, NV, 0, 0, 0), dout = T(one, 2, 1, NV, 0, 0, 0);
        mamba2_rmsnorm_gated_options_t opts = mamba2_rmsnorm_gated_options_default();
        opts.eps = 0.0;
        opts.norm_before_gate = 1;
        if (ok(mamba2_rmsnorm_gated_forward_workspace_size(ctx, &o, NULL, &x, &z, &w, NULL, &opts,
                                                           &wsz),
               "rmsnorm_gated_forward_workspace_size")) {
            ws = ws_alloc(wsz);
            if (ok(mamba2_rmsnorm_gated_forward(ctx, &o, NULL, &x, &z, &w, NULL, &opts, ws, wsz),
                   "rmsnorm_gated_forward"))
                check("fwd silu", out, silu_d, 1.0, 4e-6);
            free(ws);
        }
        mamba2_rmsnorm_gated_grads_t g = {.dz = &dz};
        if (ok(mamba2_rmsnorm_gated_backward_workspace_size(ctx, &g, &dout, &x, &z, &w, NULL, NULL,
                                                            &opts, &wsz),
               "rmsnorm_gated_backward_workspace_size")) {
            ws = ws_alloc(wsz);
            if (ok(mamba2_rmsnorm_gated_backward(ctx, &g, &dout, &x, &z, &w, NULL, NULL, &opts, ws,
                                                 wsz),
                   "rmsnorm_gated_backward"))
                check("bwd dz silu'", dx, dsilu_d, 1.0, 20e-6);
            free(ws);
        }
    }
    th_end();

    /* SSD with one head of P = 37, N = 4: Bm = Cm = 0 leave y = 0, out = D x silu(z) */
    float xk[NV], dt1 = 0.1f, A1 = -1.0f, D1 = 1.0f, dt_out = 0.1f, dA = -0.1f;
    fill(xk, NV, 8.0f);
    th_begin("ssd gate %s", label);
    {
        float state[4 * NV];
        fill(state, 4 * NV, 0.0f);
        mamba2_tensor_t st = T(state, 4, 1, 1, NV, 4, 0), A = T(&A1, 1, 1, 0, 0, 0, 0);
        mamba2_tensor_t D = T(&D1, 1, 1, 0, 0, 0, 0);
        /* decode step: x [1,1,37], dt [1,1], Bm, Cm [1,1,4] */
        mamba2_tensor_t x = T(xk, 3, 1, 1, NV, 0, 0), z = T(v, 3, 1, 1, NV, 0, 0);
        mamba2_tensor_t o = T(out, 3, 1, 1, NV, 0, 0), dt = T(&dt1, 2, 1, 1, 0, 0, 0);
        mamba2_tensor_t bc = T(zero, 3, 1, 1, 4, 0, 0);
        mamba2_ssd_step_options_t so = mamba2_ssd_step_options_default();
        so.D = &D;
        so.z = &z;
        if (ok(mamba2_ssd_step(ctx, &st, &o, NULL, &x, &dt, &A, &bc, &bc, &so), "ssd_step"))
            check("step gate", out, silu_d, 8.0, 4e-6);
        /* fused forward and backward: x, z [1,1,1,37], dt [1,1,1], Bm, Cm [1,1,1,4] */
        mamba2_tensor_t x4 = T(xk, 4, 1, 1, 1, NV, 0), z4 = T(v, 4, 1, 1, 1, NV, 0);
        mamba2_tensor_t o4 = T(out, 4, 1, 1, 1, NV, 0), dt3 = T(&dt1, 3, 1, 1, 1, 0, 0);
        mamba2_tensor_t bc4 = T(zero, 4, 1, 1, 1, 4, 0), dout = T(one, 4, 1, 1, 1, NV, 0);
        mamba2_tensor_t dz = T(dx, 4, 1, 1, 1, NV, 0);
        mamba2_ssd_options_t opts = mamba2_ssd_options_default();
        opts.chunk_size = 1;
        opts.D = &D;
        opts.z = &z4;
        if (ok(mamba2_ssd_forward_workspace_size(ctx, &o4, NULL, NULL, &x4, &dt3, &A, &bc4, &bc4, &opts,
                                                 &wsz),
               "ssd_forward_workspace_size")) {
            ws = ws_alloc(wsz);
            if (ok(mamba2_ssd_forward(ctx, &o4, NULL, NULL, &x4, &dt3, &A, &bc4, &bc4, &opts, ws, wsz),
                   "ssd_forward"))
                check("fused fwd gate", out, silu_d, 8.0, 4e-6);
            free(ws);
        }
        mamba2_ssd_grads_t g = {0};
        g.dz = &dz;
        if (ok(mamba2_ssd_backward_workspace_size(ctx, &g, &dout, NULL, &x4, &dt3, &A, &bc4, &bc4,
                                                  NULL, &opts, &wsz),
               "ssd_backward_workspace_size")) {
            ws = ws_alloc(wsz);
            if (ok(mamba2_ssd_backward(ctx, &g, &dout, NULL, &x4, &dt3, &A, &bc4, &bc4, NULL, &opts,
                                       ws, wsz),
                   "ssd_backward"))
                check("fused bwd dz", dx, dsilu_d, 8.0, 20e-6);
            free(ws);
        }
        /* chunk_scan with Q = 1: CB [1,1,1,1,1], dt_out / dA_cumsum [1,1,1,1], states_start
         * [1,1,1,37,4] of zeros */
        float cb = 0.0f;
        mamba2_tensor_t CB = T(&cb, 5, 1, 1, 1, 1, 1), dto = T(&dt_out, 4, 1, 1, 1, 1, 0);
        mamba2_tensor_t dac = T(&dA, 4, 1, 1, 1, 1, 0), ss = T(state, 5, 1, 1, 1, NV, 4);
        fill(state, 4 * NV, 0.0f);
        mamba2_ssd_chunked_options_t co = mamba2_ssd_chunked_options_default();
        co.chunk_size = 1;
        co.D = &D;
        co.z = &z4;
        if (ok(mamba2_ssd_chunk_scan(ctx, &o4, &CB, &x4, &dto, &dac, &bc4, &ss, &co),
               "ssd_chunk_scan"))
            check("chunk_scan gate", out, silu_d, 8.0, 4e-6);
    }
    th_end();
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    static const char *const isas[4] = {"avx512", "avx2", "neon", "scalar"};
    for (int i = 0; i < 4; i++) {
        mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, 2, NULL);
        if (mamba2_context_force_isa(ctx, isas[i]) == MAMBA2_STATUS_OK) {
            char label[32];
            snprintf(label, sizeof label, "cpu[%s]", isas[i]);
            run(ctx, label);
        } else {
            printf("note: kernel set %s skipped: %s\n", isas[i], mamba2_last_error());
        }
        mamba2_context_destroy(ctx);
    }
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    run(ref, "ref");
    mamba2_context_destroy(ref);
    return th_finish();
}
