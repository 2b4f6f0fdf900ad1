/*
 * bench_run.c — mamba2c-bench's settings and records, input generator, buffer pool, timer
 * and output (see bench_run.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "bench_run.h"

/* ------------------------------------------------------------------------- */
/* Run-wide settings and results                                             */
/* ------------------------------------------------------------------------- */

record *g_records;
int g_nrec, g_failures;
static int g_caprec;
int g_hugepages;

static record *new_record(void) {
    if (g_nrec == g_caprec) {
        g_caprec = g_caprec ? 2 * g_caprec : 64;
        record *r = (record *)realloc(g_records, sizeof(record) * (size_t)g_caprec);
        if (!r) {
            fprintf(stderr, "out of memory (results)\n");
            exit(1);
        }
        g_records = r;
    }
    record *r = &g_records[g_nrec++];
    memset(r, 0, sizeof *r);
    return r;
}

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* ------------------------------------------------------------------------- */
/* Deterministic inputs: a counter-based generator (splitmix64 of seed and index), so every
 * element is a pure function of (tensor, index) and filling runs on all threads.           */
/* ------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double u01(uint64_t key, uint64_t i) {
    return ((double)(mix64(key + i * 0x9E3779B97F4A7C15ull) >> 11) + 0.5) *
           (1.0 / 9007199254740992.0);
}

static uint16_t f32_to_bf16(float f) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static uint16_t f32_to_f16(float f) { /* round to nearest even, subnormals, inf */
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, e8 = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (e8 == 0xffu) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
    const int32_t e = (int32_t)e8 - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        const uint32_t shift = (uint32_t)(14 - e), mid = 1u << (shift - 1);
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1u);
        if (rem > mid || (rem == mid && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)h;
}

typedef struct fill_job {
    void *dst;
    mamba2_dtype_t dtype;
    size_t lo, hi;
    uint64_t key;
    int normal;
    double a, b; /* normal: scale; uniform: [a, b) */
} fill_job;

static void *fill_worker(void *p) {
    const fill_job *j = (const fill_job *)p;
    for (size_t i = j->lo; i < j->hi; i++) {
        double v;
        if (j->normal) /* Box-Muller on two uniforms of this element */
            v = j->a * sqrt(-2.0 * log(u01(j->key, 2 * i))) * cos(6.283185307179586 * u01(j->key, 2 * i + 1));
        else
            v = j->a + (j->b - j->a) * u01(j->key, i);
        const float f = (float)v;
        switch (j->dtype) {
        case MAMBA2_DTYPE_BF16: ((uint16_t *)j->dst)[i] = f32_to_bf16(f); break;
        case MAMBA2_DTYPE_F16: ((uint16_t *)j->dst)[i] = f32_to_f16(f); break;
        default: ((float *)j->dst)[i] = f; break;
        }
    }
    return NULL;
}

int g_fill_threads = 1;
uint64_t g_tensor_id;

/* Fill n elements of dst (dtype) with N(0, a²) (normal) or U(a, b), on all threads. Each
 * call draws from its own stream, keyed by SEED and a tensor id that every case resets to 0
 * before its first fill: a case gets the same inputs whatever ran before it. */
void fill(void *dst, mamba2_dtype_t dtype, size_t n, int normal, double a, double b) {
    const uint64_t key = mix64(SEED ^ (++g_tensor_id * 0xD1B54A32D192ED03ull));
    int nth = g_fill_threads;
    if (n < 65536) nth = 1;
    pthread_t th[64];
    fill_job jobs[64];
    if (nth > 64) nth = 64;
    const size_t per = (n + (size_t)nth - 1) / (size_t)nth;
    for (int i = 0; i < nth; i++) {
        const size_t lo = (size_t)i * per < n ? (size_t)i * per : n;
        jobs[i] = (fill_job){dst, dtype, lo, lo + per < n ? lo + per : n, key, normal, a, b};
        if (i > 0) pthread_create(&th[i], NULL, fill_worker, &jobs[i]);
    }
    fill_worker(&jobs[0]);
    for (int i = 1; i < nth; i++) pthread_join(th[i], NULL);
}

void *pool_alloc(pool *pl, size_t bytes) {
    if (pl->oom || pl->n == (int)(sizeof pl->p / sizeof pl->p[0])) {
        pl->oom = 1;
        return NULL;
    }
    /* 2 MiB pages for large tensors when asked (--hugepages): x, z, out rows of
     * consecutive tokens are H*P floats apart, a new 4 KiB page per token otherwise */
    const size_t huge = (size_t)2 << 20;
    const int use_huge = g_hugepages && bytes >= huge;
    const size_t al = use_huge ? huge : 64;
    const size_t sz = (bytes + al - 1) / al * al;
    void *p = aligned_alloc(al, sz ? sz : 64);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p && use_huge) madvise(p, sz, MADV_HUGEPAGE);
#endif
    if (!p) {
        pl->oom = 1;
        return NULL;
    }
    memset(p, 0, sz ? sz : 64); /* touch every page now, outside the timed loop */
    pl->p[pl->n++] = p;
    return p;
}
void pool_free(pool *pl) {
    for (int i = 0; i < pl->n; i++) free(pl->p[i]);
    pl->n = 0;
}

/* ------------------------------------------------------------------------- */
/* Timing                                                                    */
/* ------------------------------------------------------------------------- */

/* Warm up (one call), calibrate the calls per sample so that a sample lasts MIN_SAMPLE_S,
 * then return the median seconds per call over `reps` samples. On a failed call returns its
 * status (and no time). */
mamba2_status_t time_median(call_fn fn, void *arg, int reps, double *sec_per_call) {
    int64_t calls = 0;
    mamba2_status_t st = fn(arg, calls++);
    if (st != MAMBA2_STATUS_OK) return st;
    double t0 = bench_now();
    if ((st = fn(arg, calls++)) != MAMBA2_STATUS_OK) return st;
    double t1 = bench_now() - t0;
    int64_t inner = 1;
    if (t1 < MIN_SAMPLE_S) {
        /* a better estimate of a short call first: time a batch of them */
        const int64_t probe = t1 > 0 ? (int64_t)(MIN_SAMPLE_S / 4 / t1) + 1 : 100;
        t0 = bench_now();
        for (int64_t k = 0; k < probe; k++)
            if ((st = fn(arg, calls++)) != MAMBA2_STATUS_OK) return st;
        t1 = (bench_now() - t0) / (double)probe;
        inner = (int64_t)ceil(MIN_SAMPLE_S / (t1 > 1e-9 ? t1 : 1e-9));
        if (inner > 1000000) inner = 1000000;
    }
    double *ts = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!ts) return MAMBA2_STATUS_OUT_OF_MEMORY;
    for (int r = 0; r < reps; r++) {
        t0 = bench_now();
        for (int64_t k = 0; k < inner; k++)
            if ((st = fn(arg, calls++)) != MAMBA2_STATUS_OK) {
                free(ts);
                return st;
            }
        ts[r] = (bench_now() - t0) / (double)inner;
    }
    qsort(ts, (size_t)reps, sizeof(double), cmp_double);
    *sec_per_call = reps % 2 ? ts[reps / 2] : 0.5 * (ts[reps / 2 - 1] + ts[reps / 2]);
    free(ts);
    return MAMBA2_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Output: one line per measurement and the JSON list                        */
/* ------------------------------------------------------------------------- */

void shape_str(char *buf, size_t cap, const int64_t *s, int rank) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? "," : "", (long long)s[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

void print_header(const char *first, const char *shape_what, int with_stream) {
    printf("%-22s %-28s %-4s %-5s %10s %9s %7s %9s%s\n", first, shape_what, "pass", "dtype",
           "ms", "GFLOP/s", "%peak", "GB/s", with_stream ? "  %stream" : "");
}

/* Records and prints one measurement (ok) or one unsupported/failed line (note). */
record *report(const settings *cfg, const char *name, const int64_t *shape, int rank,
                      const char *pass, mamba2_status_t st, double sec, double flops,
                      double bytes, int with_stream, const char *extra) {
    record *r = new_record();
    snprintf(r->name, sizeof r->name, "%s", name);
    memcpy(r->shape, shape, sizeof(int64_t) * (size_t)rank);
    r->rank = rank;
    r->pass = pass;
    r->dtype = cfg->dtype_name;
    r->bytes = bytes;
    r->has_stream = with_stream;
    char sh[96];
    shape_str(sh, sizeof sh, shape, rank);
    if (st != MAMBA2_STATUS_OK) {
        r->ok = 0;
        if (st == MAMBA2_STATUS_UNSUPPORTED) {
            printf("%-22s %-28s %-4s %-5s unsupported: %s\n", name, sh, pass, cfg->dtype_name,
                   mamba2_last_error());
        } else {
            printf("%-22s %-28s %-4s %-5s FAILED (%s): %s\n", name, sh, pass, cfg->dtype_name,
                   mamba2_status_string(st), mamba2_last_error());
            g_failures++;
        }
        fflush(stdout);
        return r;
    }
    r->ok = 1;
    r->ms = sec * 1e3;
    r->gflops = flops / sec * 1e-9;
    r->pct_peak = cfg->peak_gflops > 0 ? 100.0 * r->gflops / cfg->peak_gflops : 0;
    r->gbps = bytes / sec * 1e-9;
    r->pct_stream = cfg->stream_gbps > 0 ? 100.0 * r->gbps / cfg->stream_gbps : 0;
    char st_buf[16] = "";
    if (with_stream) snprintf(st_buf, sizeof st_buf, " %7.1f%%", r->pct_stream);
    char ms_buf[24];
    snprintf(ms_buf, sizeof ms_buf, r->ms >= 100 ? "%.1f" : r->ms >= 1 ? "%.3f" : "%.4f", r->ms);
    printf("%-22s %-28s %-4s %-5s %10s %9.1f %6.1f%% %9.2f%s%s%s\n", name, sh, pass,
           cfg->dtype_name, ms_buf, r->gflops, r->pct_peak, r->gbps, st_buf, extra ? "  " : "",
           extra ? extra : "");
    fflush(stdout);
    return r;
}

static void json_num(FILE *f, const char *key, double v, int ok, int last) {
    if (ok && isfinite(v))
        fprintf(f, "\"%s\": %.6g%s", key, v, last ? "" : ", ");
    else
        fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

int write_json(const char *path, const settings *cfg) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    fprintf(f, "[\n");
    for (int i = 0; i < g_nrec; i++) {
        const record *r = &g_records[i];
        fprintf(f, "  {\"case\": \"%s\", \"shape\": [", r->name);
        for (int k = 0; k < r->rank; k++) fprintf(f, "%s%lld", k ? ", " : "", (long long)r->shape[k]);
        fprintf(f, "], \"impl\": \"mamba2c-cpu\", \"pass\": \"%s\", \"dtype\": \"%s\", ", r->pass,
                r->dtype);
        json_num(f, "ms", r->ms, r->ok, 0);
        json_num(f, "gflops", r->gflops, r->ok, 0);
        json_num(f, "pct_peak", r->pct_peak, r->ok, 0);
        json_num(f, "peak_gflops", cfg->peak_gflops, 1, 0);
        fprintf(f, "\"peak_isa\": \"%s\", ", cfg->peak_isa ? cfg->peak_isa : "");
        fprintf(f, "\"bytes_moved\": %.0f, ", r->bytes);
        json_num(f, "gbps", r->gbps, r->ok, !r->has_stream);
        if (r->has_stream) json_num(f, "pct_stream", r->pct_stream, r->ok, 1);
        fprintf(f, "}%s\n", i + 1 < g_nrec ? "," : "");
    }
    fprintf(f, "]\n");
    fclose(f);
    return 0;
}
