/*
 * bench_run.h — the shared part of mamba2c-bench (mamba2c_bench.c: the case matrix, options
 * and main; bench_ssd.c: the SSD cases; bench_ops.c: the memory-bound ops): the run-wide
 * settings, the records of the measurements, the deterministic input generator, the buffer
 * pool, the median timer and the output (one line per measurement, the JSON list).
 */
#ifndef MAMBA2C_BENCH_RUN_H
#define MAMBA2C_BENCH_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "bench.h"
#include "mamba2c.h"

#define SEED 20260801ull
#define MIN_SAMPLE_S 0.002 /* a sample lasts at least this long (short calls are repeated) */

typedef struct settings {
    int reps, threads, backward, all_features, ops, ssd;
    mamba2_dtype_t dtype;
    const char *dtype_name;
    double peak_gflops, stream_gbps;
    const char *peak_isa; /* the FMA loop of peak_gflops: "avx512-fma", "avx2-fma", "scalar" */
} settings;

typedef struct record {
    char name[48];
    int64_t shape[8];
    int rank;
    const char *pass, *dtype;
    int ok; /* 0: unsupported or failed (numbers are written as null) */
    double ms, gflops, pct_peak, bytes, gbps, pct_stream;
    int has_stream;
} record;

extern record *g_records;
extern int g_nrec, g_failures;
extern int g_hugepages;     /* --hugepages */
extern int g_fill_threads;  /* threads fill() runs on */
extern uint64_t g_tensor_id; /* fill()'s stream counter: each case resets it to 0 */

/* Fill n elements of dst (dtype) with N(0, a²) (normal) or U(a, b), on all threads. Each
 * call draws from its own stream, keyed by SEED and a tensor id that every case resets to 0
 * before its first fill: a case gets the same inputs whatever ran before it. */
void fill(void *dst, mamba2_dtype_t dtype, size_t n, int normal, double a, double b);

/* 64-byte aligned, NULL-tolerant bookkeeping: every buffer of a case goes in one pool. */
typedef struct pool {
    void *p[48];
    int n, oom;
} pool;

void *pool_alloc(pool *pl, size_t bytes);
void pool_free(pool *pl);

/* One call of the op under test; `i` counts calls (the cold decode benchmarks use it to
 * pick the next cache). */
typedef mamba2_status_t (*call_fn)(void *arg, int64_t i);

/* Warm up (one call), calibrate the calls per sample so that a sample lasts MIN_SAMPLE_S,
 * then return the median seconds per call over `reps` samples. On a failed call returns its
 * status (and no time). */
mamba2_status_t time_median(call_fn fn, void *arg, int reps, double *sec_per_call);

void shape_str(char *buf, size_t cap, const int64_t *s, int rank);
void print_header(const char *first, const char *shape_what, int with_stream);
/* Records and prints one measurement (ok) or one unsupported/failed line (note). */
record *report(const settings *cfg, const char *name, const int64_t *shape, int rank,
               const char *pass, mamba2_status_t st, double sec, double flops, double bytes,
               int with_stream, const char *extra);
int write_json(const char *path, const settings *cfg);

/* bench_ssd.c: one SSD case (s = B, L, H, P, N, Q, G), forward and with `backward` backward */
void run_ssd_case(mamba2_context_t *ctx, const settings *cfg, const char *name, const int64_t *s,
                  int backward);
/* bench_ops.c: the memory-bound ops at Mamba-2 2.7B sizes (--ops) */
void run_ops(mamba2_context_t *ctx, const settings *cfg);

#endif /* MAMBA2C_BENCH_RUN_H */
