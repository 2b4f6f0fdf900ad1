/*
 * bench_ssd_step.c — memory bandwidth of the CPU SSD decode step (mamba2_ssd_step) against a
 * memcpy of the same state size measured in the same run.
 *
 * A decode step reads and writes the whole state cache once (2 multiply-adds per element), so
 * its speed is its bandwidth: bytes = 2 * B*H*P*N*4 (state read + written) + the small
 * per-token tensors (x, dt, B, C, out). The peer is memcpy of a buffer of B*H*P*N*4 bytes
 * (which also moves 2x that many bytes), split over as many threads as the context uses.
 * Shapes are those of a real Mamba-2 layer (mamba2-2.7b: H 80, P 64, N 128, G 1), with D,
 * dt_bias and softplus as in decode. Repeated calls on one cache: a cache that fits in the
 * last-level cache (B = 1, and B = 32 on a CPU with a large L3) measures cache bandwidth.
 *
 * Build (not wired into CMake):
 *   cc -O2 -std=c11 -I include bench/bench_ssd_step.c build/libmamba2c.a -lpthread -lm
 * Usage: a.out [B ...]   (default: 1 32 128)
 * Reports the median of the repeats (after a warm-up) and the ratio to memcpy.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mamba2c.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return v[n / 2];
}

static float *alloc_f(size_t n, float v) {
    float *p = (float *)aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) {
        printf("out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = v;
    return p;
}

/* memcpy of n floats split over nth threads (the peer). */
typedef struct cpy_arg {
    float *dst;
    const float *src;
    size_t n;
} cpy_arg;

static void *cpy_main(void *p) {
    cpy_arg *a = (cpy_arg *)p;
    memcpy(a->dst, a->src, a->n * sizeof(float));
    return NULL;
}

static void par_memcpy(float *dst, const float *src, size_t n, int nth) {
    pthread_t th[64];
    cpy_arg args[64];
    if (nth > 64) nth = 64;
    const size_t per = (n / (size_t)nth + 15) / 16 * 16;
    for (int i = 0; i < nth; i++) {
        const size_t lo = (size_t)i * per < n ? (size_t)i * per : n;
        const size_t hi = lo + per < n ? lo + per : n;
        args[i] = (cpy_arg){dst + lo, src + lo, hi - lo};
        if (i > 0) pthread_create(&th[i], NULL, cpy_main, &args[i]);
    }
    cpy_main(&args[0]);
    for (int i = 1; i < nth; i++) pthread_join(th[i], NULL);
}

static void run(mamba2_context_t *ctx, int64_t B) {
    const int nth = (int)mamba2_context_get_num_threads(ctx);
    const int64_t H = 80, P = 64, N = 128, G = 1;
    const size_t state = (size_t)(B * H * P * N);
    float *cache = alloc_f(state, 0.01f), *x = alloc_f((size_t)(B * H * P), 0.5f);
    float *dt = alloc_f((size_t)(B * H), 0.05f), *A = alloc_f((size_t)H, -0.3f);
    float *Bm = alloc_f((size_t)(B * G * N), 0.1f), *Cm = alloc_f((size_t)(B * G * N), 0.1f);
    float *D = alloc_f((size_t)H, 1.0f), *bias = alloc_f((size_t)H, 0.1f);
    float *out = alloc_f((size_t)(B * H * P), 0.0f);
    const int64_t shc[4] = {B, H, P, N}, shx[3] = {B, H, P}, shdt[2] = {B, H}, shh[1] = {H},
                  shb[3] = {B, G, N};
    mamba2_tensor_t tc = mamba2_tensor_make(cache, MAMBA2_DTYPE_F32, 4, shc);
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 3, shx);
    mamba2_tensor_t to = mamba2_tensor_make(out, MAMBA2_DTYPE_F32, 3, shx);
    mamba2_tensor_t tdt = mamba2_tensor_make(dt, MAMBA2_DTYPE_F32, 2, shdt);
    mamba2_tensor_t tA = mamba2_tensor_make(A, MAMBA2_DTYPE_F32, 1, shh);
    mamba2_tensor_t tD = mamba2_tensor_make(D, MAMBA2_DTYPE_F32, 1, shh);
    mamba2_tensor_t tbias = mamba2_tensor_make(bias, MAMBA2_DTYPE_F32, 1, shh);
    mamba2_tensor_t tB = mamba2_tensor_make(Bm, MAMBA2_DTYPE_F32, 3, shb);
    mamba2_tensor_t tC = mamba2_tensor_make(Cm, MAMBA2_DTYPE_F32, 3, shb);
    mamba2_ssd_step_options_t o = mamba2_ssd_step_options_default();
    o.D = &tD;
    o.dt_bias = &tbias;
    o.dt_softplus = 1;

    const double bytes =
        2.0 * (double)state * 4.0 + 4.0 * (double)(2 * B * H * P + B * H + 2 * B * G * N + 3 * H);
    const int reps = B <= 4 ? 200 : B <= 32 ? 30 : 10;
    double *ts = (double *)malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < 3; i++) mamba2_ssd_step(ctx, &tc, &to, NULL, &tx, &tdt, &tA, &tB, &tC, &o);
    for (int i = 0; i < reps; i++) {
        const double t0 = now();
        mamba2_status_t st = mamba2_ssd_step(ctx, &tc, &to, NULL, &tx, &tdt, &tA, &tB, &tC, &o);
        ts[i] = now() - t0;
        if (st != MAMBA2_STATUS_OK) {
            printf("ssd_step failed: %s\n", mamba2_last_error());
            exit(1);
        }
    }
    const double t_step = median(ts, reps);

    /* the peer: memcpy of the state size (reads + writes 2x state bytes) */
    float *src = alloc_f(state, 1.0f), *dst = alloc_f(state, 0.0f);
    for (int i = 0; i < 3; i++) par_memcpy(dst, src, state, nth);
    for (int i = 0; i < reps; i++) {
        const double t0 = now();
        par_memcpy(i & 1 ? src : dst, i & 1 ? dst : src, state, nth);
        ts[i] = now() - t0;
    }
    const double t_cpy = median(ts, reps);
    const double gbs = bytes / t_step * 1e-9, gbs_cpy = 2.0 * (double)state * 4.0 / t_cpy * 1e-9;
    printf("B=%-4lld H=%lld P=%lld N=%lld  state %7.1f MB  step %8.3f ms  %6.1f GB/s   memcpy "
           "%8.3f ms "
           "%6.1f GB/s   step/memcpy %.2f\n",
           (long long)B, (long long)H, (long long)P, (long long)N, (double)state * 4.0 / 1e6,
           t_step * 1e3, gbs, t_cpy * 1e3, gbs_cpy, gbs / gbs_cpy);
    free(ts);
    free(src);
    free(dst);
    free(cache);
    free(x);
    free(dt);
    free(A);
    free(Bm);
    free(Cm);
    free(D);
    free(bias);
    free(out);
}

int main(int argc, char **argv) {
    mamba2_context_t *ctx = NULL;
    if (mamba2_context_create(&ctx, MAMBA2_BACKEND_CPU, 0) != MAMBA2_STATUS_OK) {
        printf("context: %s\n", mamba2_last_error());
        return 1;
    }
    printf("mamba2_ssd_step, cpu backend, %s, %d threads; median of repeats\n",
           mamba2_context_get_isa(ctx), (int)mamba2_context_get_num_threads(ctx));
    if (argc > 1)
        for (int i = 1; i < argc; i++) run(ctx, atoll(argv[i]));
    else {
        run(ctx, 1);
        run(ctx, 32);
        run(ctx, 128);
    }
    mamba2_context_destroy(ctx);
    return 0;
}
