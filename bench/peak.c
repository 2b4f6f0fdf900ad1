/*
 * peak.c — the FMA peak of this machine, measured once per run: every thread runs the same
 * loop of independent FMA chains (peak_avx512.c, peak_avx2.c, or the portable loop below)
 * between two barriers; peak = total flops / wall time of the slowest thread, best of several
 * trials (a peak is a maximum: noise only ever lowers it).
 *
 * The caller names the widest instruction set its kernels use (the context's ISA), so that
 * pct_peak is a fraction of the ceiling of the code actually running: the 512-bit loop when
 * the library runs its AVX-512 kernels, the 256-bit one when it runs AVX2.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The portable fallback: 12 independent multiply-add chains (2 flops each per iteration).
 * The compiler may vectorise it for the baseline ISA; either way it is the ceiling of code
 * compiled without AVX2. */
#define SCALAR_CHAINS 12
static float fma_loop_scalar(int64_t iters, float seed) {
    float a[SCALAR_CHAINS];
    for (int k = 0; k < SCALAR_CHAINS; k++) a[k] = seed + 0.01f * (float)k;
    const float m = 0.999999f, c = 1e-3f;
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < SCALAR_CHAINS; k++) a[k] = a[k] * m + c;
    float s = 0;
    for (int k = 0; k < SCALAR_CHAINS; k++) s += a[k];
    return s;
}

enum { LOOP_SCALAR = 0, LOOP_AVX2 = 1, LOOP_AVX512 = 2 };

static int have_avx2_fma(void) {
#if defined(BENCH_HAVE_AVX2) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static int have_avx512f(void) {
#if defined(BENCH_HAVE_AVX2) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

static float run_loop(int loop, int64_t iters, float seed) {
#if defined(BENCH_HAVE_AVX2)
    if (loop == LOOP_AVX512) return bench_fma_loop_avx512(iters, seed);
    if (loop == LOOP_AVX2) return bench_fma_loop_avx2(iters, seed);
#else
    (void)loop;
#endif
    return fma_loop_scalar(iters, seed);
}

typedef struct peak_job {
    pthread_barrier_t *start, *stop;
    int64_t iters;
    int loop;
    float sink;
} peak_job;

static void *peak_worker(void *p) {
    peak_job *j = (peak_job *)p;
    pthread_barrier_wait(j->start);
    j->sink = run_loop(j->loop, j->iters, j->sink);
    pthread_barrier_wait(j->stop);
    return NULL;
}

/* One trial: wall seconds for every thread to run `iters` iterations (thread 0 is the caller). */
static double peak_trial(int nth, int loop, int64_t iters, float *sink) {
    pthread_barrier_t start, stop;
    pthread_barrier_init(&start, NULL, (unsigned)nth);
    pthread_barrier_init(&stop, NULL, (unsigned)nth);
    pthread_t *th = (pthread_t *)malloc(sizeof(pthread_t) * (size_t)nth);
    peak_job *jobs = (peak_job *)malloc(sizeof(peak_job) * (size_t)nth);
    for (int i = 0; i < nth; i++) {
        jobs[i] = (peak_job){&start, &stop, iters, loop, 0.5f + 0.001f * (float)i};
        if (i > 0) pthread_create(&th[i], NULL, peak_worker, &jobs[i]);
    }
    /* thread 0 runs inline so that it can read the clock right at both barriers */
    pthread_barrier_wait(&start);
    const double t0 = bench_now();
    jobs[0].sink = run_loop(loop, iters, jobs[0].sink);
    pthread_barrier_wait(&stop);
    const double t = bench_now() - t0;
    for (int i = 1; i < nth; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < nth; i++) *sink += jobs[i].sink;
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&stop);
    free(th);
    free(jobs);
    return t;
}

bench_peak bench_fma_peak(int nthreads, const char *isa) {
    bench_peak r;
    const int wide = isa != NULL && (strcmp(isa, "avx512") == 0 || strncmp(isa, "avx2", 4) == 0);
    int loop = LOOP_SCALAR;
    if (wide && have_avx2_fma()) loop = LOOP_AVX2;
    if (loop == LOOP_AVX2 && strcmp(isa, "avx512") == 0 && have_avx512f()) loop = LOOP_AVX512;
    const int nth = nthreads < 1 ? 1 : nthreads;
    static const char *const names[] = {"scalar", "avx2-fma", "avx512-fma"};
    static const int chains[] = {SCALAR_CHAINS, BENCH_AVX2_CHAINS, BENCH_AVX512_CHAINS};
    static const double lanes[] = {1.0, 8.0, 16.0};
    r.isa = names[loop];
    r.chains = chains[loop];
    const double flops_per_iter = (double)chains[loop] * lanes[loop] * 2.0;
    float sink = 0;
    /* calibrate: grow the loop until one trial takes >= 50 ms, then aim at ~150 ms */
    int64_t iters = 100000;
    double t = peak_trial(nth, loop, iters, &sink);
    while (t < 0.05 && iters < ((int64_t)1 << 40)) {
        iters *= 4;
        t = peak_trial(nth, loop, iters, &sink);
    }
    iters = (int64_t)((double)iters * 0.15 / t) + 1;
    double best = 0;
    for (int trial = 0; trial < 5; trial++) {
        t = peak_trial(nth, loop, iters, &sink);
        const double g = flops_per_iter * (double)iters * (double)nth / t * 1e-9;
        if (g > best) best = g;
    }
    if (sink == 12345.678f) fprintf(stderr, "(sink %g)\n", (double)sink); /* keep the loops alive */
    r.gflops = best;
    return r;
}
