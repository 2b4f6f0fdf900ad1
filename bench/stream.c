/*
 * stream.c — STREAM triad bandwidth, measured once per run as the ceiling of the
 * memory-bound ops (their pct_stream is a fraction of it).
 *
 * a[i] = b[i] + s * c[i] over three float arrays, each much larger than the last-level cache
 * (4 x L3 by default), split into one contiguous slice per thread; each thread first-touches
 * its own slices. Bytes per trial = 3 x array bytes (STREAM's convention: the write-allocate
 * read of a[] is not counted). The reported figure is STREAM's: the best trial; the median
 * is kept too, since on a shared machine it says what a typical moment looks like.
 *
 * bench_stream_read is the read-only counterpart, the ceiling of a kernel that only streams
 * (a decode step's matrix-vector products read their weights and write a few KiB): each
 * thread sums its slice of one array; bytes per trial = 1 x array bytes. One core that
 * reads alone can sustain less than the triad's figure (fewer streams in flight).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static size_t l3_size(void) {
    /* Linux sysfs; index3 is the unified L3 on x86 and most arm64 servers */
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    size_t bytes = 0;
    if (f) {
        unsigned long v = 0;
        char unit = 0;
        if (fscanf(f, "%lu%c", &v, &unit) >= 1)
            bytes = (size_t)v * (unit == 'K' ? 1024u : unit == 'M' ? 1048576u : 1u);
        fclose(f);
    }
    return bytes ? bytes : (size_t)32 << 20; /* unknown: assume a 32 MiB L3 */
}

size_t bench_stream_default_bytes(size_t *l3_bytes) {
    const size_t l3 = l3_size();
    size_t bytes = 4 * l3;
    if (bytes < ((size_t)64 << 20)) bytes = (size_t)64 << 20;
    const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) {
        const size_t cap = (size_t)pages * (size_t)psz / 16;
        if (bytes > cap) bytes = cap;
    }
    if (l3_bytes) *l3_bytes = l3;
    return bytes & ~(size_t)4095;
}

typedef struct triad_job {
    float *a, *b, *c;
    size_t lo, hi;
    int init, read; /* read: sum b[] (bench_stream_read) instead of the triad */
    uint32_t sum;
    pthread_barrier_t *start, *stop;
} triad_job;

static void triad_slice(triad_job *j) {
    if (j->read) { /* the float bits summed as integers: a reduction the compiler vectorizes */
        const uint32_t *restrict b = (const uint32_t *)j->b;
        uint32_t s = 0;
        for (size_t i = j->lo; i < j->hi; i++) s += b[i];
        j->sum = s;
        return;
    }
    float *restrict a = j->a;
    const float *restrict b = j->b, *restrict c = j->c;
    const float s = 3.0f;
    for (size_t i = j->lo; i < j->hi; i++) a[i] = b[i] + s * c[i];
}

static void *triad_worker(void *p) {
    triad_job *j = (triad_job *)p;
    if (j->init) { /* first touch by the thread that will stream the slice */
        for (size_t i = j->lo; i < j->hi; i++) {
            j->a[i] = 0.0f;
            j->b[i] = 1.0f;
            j->c[i] = 2.0f;
        }
        return NULL;
    }
    pthread_barrier_wait(j->start);
    triad_slice(j);
    pthread_barrier_wait(j->stop);
    return NULL;
}

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static bench_stream stream_run(int nthreads, size_t array_bytes, int trials, int read) {
    bench_stream r;
    memset(&r, 0, sizeof r);
    const int nth = nthreads < 1 ? 1 : nthreads;
    size_t l3 = 0;
    const size_t dflt = bench_stream_default_bytes(&l3);
    r.l3_bytes = l3;
    if (array_bytes == 0) array_bytes = dflt;
    const size_t n = array_bytes / sizeof(float);
    r.array_bytes = n * sizeof(float);
    if (trials < 1) trials = 1;
    float *a = (float *)aligned_alloc(4096, n * sizeof(float));
    float *b = (float *)aligned_alloc(4096, n * sizeof(float));
    float *c = (float *)aligned_alloc(4096, n * sizeof(float));
    pthread_t *th = (pthread_t *)malloc(sizeof(pthread_t) * (size_t)nth);
    triad_job *jobs = (triad_job *)malloc(sizeof(triad_job) * (size_t)nth);
    double *ts = (double *)malloc(sizeof(double) * (size_t)(trials + 1));
    if (!a || !b || !c || !th || !jobs || !ts) goto done;

    /* slices of whole 64-byte lines */
    const size_t per = (n / (size_t)nth + 15) / 16 * 16;
    pthread_barrier_t start, stop;
    pthread_barrier_init(&start, NULL, (unsigned)nth);
    pthread_barrier_init(&stop, NULL, (unsigned)nth);
    for (int i = 0; i < nth; i++) {
        const size_t lo = (size_t)i * per < n ? (size_t)i * per : n;
        const size_t hi = lo + per < n ? lo + per : n;
        jobs[i] = (triad_job){a, b, c, lo, hi, 1, read, 0, &start, &stop};
        pthread_create(&th[i], NULL, triad_worker, &jobs[i]);
    }
    for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);

    /* one warm-up trial, then `trials` timed ones */
    for (int t = 0; t <= trials; t++) {
        for (int i = 0; i < nth; i++) {
            jobs[i].init = 0;
            if (i > 0) pthread_create(&th[i], NULL, triad_worker, &jobs[i]);
        }
        pthread_barrier_wait(&start);
        const double t0 = bench_now();
        triad_slice(&jobs[0]);
        pthread_barrier_wait(&stop);
        ts[t] = bench_now() - t0;
        for (int i = 1; i < nth; i++) pthread_join(th[i], NULL);
    }
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&stop);
    qsort(ts + 1, (size_t)trials, sizeof(double), cmp_double);
    const double bytes = (read ? 1.0 : 3.0) * (double)r.array_bytes;
    r.best_gbps = bytes / ts[1] * 1e-9;
    r.median_gbps = bytes / ts[1 + trials / 2] * 1e-9;
    uint32_t one; /* the bits of 1.0f, summed over the first slice */
    memcpy(&one, &(float){1.0f}, sizeof one);
    if (read ? jobs[0].sum != (uint32_t)((jobs[0].hi - jobs[0].lo) * one)
             : a[n / 2] != 1.0f + 3.0f * 2.0f)
        r.best_gbps = r.median_gbps = 0; /* the loop did not run */
done:
    free(a);
    free(b);
    free(c);
    free(th);
    free(jobs);
    free(ts);
    return r;
}

bench_stream bench_stream_triad(int nthreads, size_t array_bytes, int trials) {
    return stream_run(nthreads, array_bytes, trials, 0);
}

bench_stream bench_stream_read(int nthreads, size_t array_bytes, int trials) {
    return stream_run(nthreads, array_bytes, trials, 1);
}
