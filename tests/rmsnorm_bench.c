/*
 * rmsnorm_bench.c — `test_rmsnorm --bench [threads]`: times the CPU gated RMSNorm forward and
 * backward at a Mamba-2 shape (M = 2048, D = 5120) and a memcpy loop in the same run (GB/s).
 */
#define _POSIX_C_SOURCE 200112L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rmsnorm_inst.h"

/* ------------------------------------------------------------------------- bench --- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The copy peer: each of two threads memcpy's half of the buffer (STREAM-copy-like). */
struct copy_arg {
    float *dst;
    const float *src;
    size_t n;
};
static void *copy_half(void *a_) {
    struct copy_arg *a = a_;
    memcpy(a->dst, a->src, a->n * sizeof(float));
    return NULL;
}
static double copy2(float *dst, const float *src, size_t n) {
    pthread_t th;
    struct copy_arg a = {dst, src, n / 2}, b = {dst + n / 2, src + n / 2, n - n / 2};
    double t0 = now_s();
    pthread_create(&th, NULL, copy_half, &a);
    copy_half(&b);
    pthread_join(th, NULL);
    return now_s() - t0;
}

static float *falloc64(int64_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)n * sizeof(float)) != 0) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

/* A quick measurement: warm up once, then the best of `reps`. */
int bench(int32_t nthreads) {
    const int64_t M = 2048, D = 5120, n = M * D;
    const int reps = 20;
    mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, nthreads, NULL);
    /* 64-byte aligned, as PyTorch's CPU allocator gives */
    float *x = falloc64(n), *z = falloc64(n), *out = falloc64(n), *dout = falloc64(n),
          *dx = falloc64(n), *dz = falloc64(n), *w = falloc64(D), *dw = falloc64(D),
          *rstd = falloc64(M);
    th_rng r;
    th_rng_seed(&r, 7);
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)th_rng_normal(&r);
        z[i] = (float)th_rng_normal(&r);
        dout[i] = (float)th_rng_normal(&r);
        out[i] = dx[i] = dz[i] = 0.0f;
    }
    for (int64_t i = 0; i < D; i++) w[i] = 1.0f;
    const int64_t md[2] = {M, D}, d1[1] = {D}, m1[2] = {M, 1};
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 2, md), tz = mamba2_tensor_make(z, MAMBA2_DTYPE_F32, 2, md),
                    to = mamba2_tensor_make(out, MAMBA2_DTYPE_F32, 2, md), td = mamba2_tensor_make(dout, MAMBA2_DTYPE_F32, 2, md),
                    tdx = mamba2_tensor_make(dx, MAMBA2_DTYPE_F32, 2, md), tdz = mamba2_tensor_make(dz, MAMBA2_DTYPE_F32, 2, md),
                    tw = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 1, d1), tdw = mamba2_tensor_make(dw, MAMBA2_DTYPE_F32, 1, d1),
                    tr = mamba2_tensor_make(rstd, MAMBA2_DTYPE_F32, 2, m1);
    mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
    o.group_size = D; /* ngroups = 1 */
    mamba2_rmsnorm_gated_grads_t g = {0, &tdx, &tdz, &tdw, NULL};
    size_t wsz = 0;
    mamba2_rmsnorm_gated_backward_workspace_size(ctx, &g, &td, &tx, &tz, &tw, NULL, &tr, &o, &wsz);
    void *ws = th_xmalloc(wsz ? wsz : 1);

    double tf = 1e30, tb = 1e30, tc = 1e30, tc2 = 1e30;
    for (int k = 0; k <= reps; k++) {
        double t0 = now_s();
        mamba2_status_t st = mamba2_rmsnorm_gated_forward(ctx, &to, &tr, &tx, &tz, &tw, NULL, &o, NULL, 0);
        double t1 = now_s();
        st |= mamba2_rmsnorm_gated_backward(ctx, &g, &td, &tx, &tz, &tw, NULL, &tr, &o, ws, wsz);
        double t2 = now_s();
        memcpy(dx, x, sizeof(float) * n);
        double t3 = now_s();
        double t2c = copy2(dz, x, (size_t)n);
        if (st) {
            printf("bench call failed: %s\n", mamba2_last_error());
            return 1;
        }
        if (k) { /* k == 0 warms up */
            if (t1 - t0 < tf) tf = t1 - t0;
            if (t2 - t1 < tb) tb = t2 - t1;
            if (t3 - t2 < tc) tc = t3 - t2;
            if (t2c < tc2) tc2 = t2c;
        }
    }
    const double e = sizeof(float);
    const double bf = (3.0 * n + D + M) * e;        /* read x, z, weight; write out, rstd        */
    const double bb = (5.0 * n + 2.0 * D + M) * e;  /* read x, z, dout, weight, rstd; write dx, dz, dweight */
    const double bc = 2.0 * n * e;                   /* memcpy: read + write                      */
    printf("rmsnorm_gated bench: M=%lld D=%lld group_size=%lld (ngroups=1), z, no bias, %d threads, isa %s; best of %d\n",
           (long long)M, (long long)D, (long long)D, (int)mamba2_context_get_num_threads(ctx),
           mamba2_context_get_isa(ctx), reps);
    printf("  forward : %8.3f ms  %6.2f GB/s  (%.0f MB moved)  %.0f%% of 2-thread memcpy\n", tf * 1e3, bf / tf * 1e-9,
           bf * 1e-6, 100.0 * (bf / tf) / (bc / tc2));
    printf("  backward: %8.3f ms  %6.2f GB/s  (%.0f MB moved)  %.0f%% of 2-thread memcpy\n", tb * 1e3, bb / tb * 1e-9,
           bb * 1e-6, 100.0 * (bb / tb) / (bc / tc2));
    printf("  memcpy  : %8.3f ms  %6.2f GB/s  (%.0f MB moved, 1 thread)\n", tc * 1e3, bc / tc * 1e-9, bc * 1e-6);
    printf("  memcpy  : %8.3f ms  %6.2f GB/s  (%.0f MB moved, 2 threads)\n", tc2 * 1e3, bc / tc2 * 1e-9, bc * 1e-6);
    free(x), free(z), free(out), free(dout), free(dx), free(dz), free(w), free(dw), free(rstd), free(ws);
    mamba2_context_destroy(ctx);
    return 0;
}
