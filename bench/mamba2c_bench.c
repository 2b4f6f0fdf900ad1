/*
 * mamba2c_bench.c — mamba2c-bench, the benchmark program of the mamba2c CPU backend.
 *
 * It measures this machine's ceilings once per run (FMA peak: peak.c, peak_avx2.c; STREAM
 * triad: stream.c), then times, through the public API only (include/mamba2c.h):
 *   - the fused SSD forward (and with --backward the backward: all nine gradients plus
 *     dfinal_state) on the 52-case shape matrix of shared/bench_shapes.md, or one --shape;
 *   - with --ops, the memory-bound ops at the sizes of a real model (Mamba-2 2.7B: d_model
 *     2560, d_inner 5120, H 80, P 64, N 128, G 1, conv width 4): conv1d and gated RMSNorm
 *     forward/backward at prefill (B 1, L 2048), ssd_step and conv1d_step at decode batch 1
 *     and 32 (hot: one cache reused; cold: rotating over caches larger than the STREAM
 *     arrays, as a model's many layers would).
 * Every time is the median of --reps samples after a warm-up; a sample of a call shorter
 * than 2 ms repeats the call enough times to last 2 ms. Workspaces are queried once per
 * case and allocated outside the timed loop. Flop and byte counts are analytic
 * (docs/flops.md, docs/benchmarks.md): SSD forward 4·B·L·H·P·N, backward 10·B·L·H·P·N;
 * bytes = every tensor read or written once.
 *
 * Usage: mamba2c-bench [--suite smoke|standard|all|training | --shape B,L,H,P,N,Q,G |
 *                       --case NAME[,NAME..]] [--features basic|all] [--backward]
 *                      [--dtype f32|bf16|f16] [--threads N] [--reps N] [--ops] [--no-ssd]
 *                      [--json FILE] [--stream-mib N]
 * Exit status: 0 when every case ran (or was reported unsupported), 1 otherwise, 2 on a
 * usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "bench.h"
#include "mamba2c.h"

#define SEED 20260801ull
#define MIN_SAMPLE_S 0.002 /* a sample lasts at least this long (short calls are repeated) */

/* ------------------------------------------------------------------------- */
/* The shape matrix (shared/bench_shapes.md)                                 */
/* ------------------------------------------------------------------------- */

enum { S_STD = 1, S_STRESS = 2, S_SMOKE = 4, S_TRAIN = 8 };

typedef struct bench_case {
    const char *name;
    int64_t s[7]; /* B, L, H, P, N, Q, G */
    unsigned flags;
} bench_case;

static const bench_case CASES[] = {
    {"tiny", {1, 128, 2, 64, 64, 64, 1}, S_STD | S_SMOKE},
    {"small", {2, 512, 8, 64, 64, 64, 1}, 0},
    {"medium", {4, 2048, 16, 64, 128, 128, 4}, 0},
    {"extreme", {8, 4096, 32, 64, 128, 128, 8}, S_STRESS},
    {"super_extreme", {8, 8192, 32, 64, 128, 128, 8}, S_STRESS},
    {"ultra_extreme", {8, 16384, 32, 64, 128, 128, 8}, S_STRESS},
    {"generic_tiny", {1, 16, 1, 8, 8, 8, 1}, S_STD | S_SMOKE},
    {"generic_tail_l65", {1, 65, 4, 16, 16, 32, 2}, S_STD | S_SMOKE},
    {"generic_tail_l513", {1, 513, 8, 32, 32, 64, 2}, S_STD},
    {"aligned_p16_n32", {1, 256, 8, 16, 32, 64, 2}, S_STD},
    {"aligned_p32_n64", {1, 256, 8, 32, 64, 64, 2}, S_STD},
    {"cube_n64_c64", {1, 512, 8, 64, 64, 64, 2}, S_STD},
    {"cube_n128_c128", {1, 512, 8, 64, 128, 128, 2}, S_STD | S_SMOKE},
    {"logical_chunk256", {1, 1024, 16, 64, 128, 256, 4}, S_STD},
    {"logical_chunk512", {1, 2048, 16, 64, 128, 512, 4}, S_STD},
    {"seq_512", {8, 512, 32, 64, 128, 128, 8}, S_STRESS},
    {"seq_1024", {8, 1024, 32, 64, 128, 128, 8}, S_STD},
    {"seq_2048", {8, 2048, 32, 64, 128, 128, 8}, S_STRESS},
    {"seq_4096", {8, 4096, 32, 64, 128, 128, 8}, S_STD},
    {"seq_8192", {8, 8192, 32, 64, 128, 128, 8}, S_STRESS},
    {"seq_16384", {8, 16384, 32, 64, 128, 128, 8}, S_STRESS},
    {"batch_1", {1, 2048, 16, 64, 128, 128, 4}, S_STD},
    {"batch_2", {2, 2048, 16, 64, 128, 128, 4}, 0},
    {"batch_4", {4, 2048, 16, 64, 128, 128, 4}, S_STD},
    {"batch_8", {8, 2048, 16, 64, 128, 128, 4}, 0},
    {"batch_16", {16, 2048, 16, 64, 128, 128, 4}, S_STD},
    {"head_4", {4, 2048, 4, 64, 128, 128, 4}, S_STD},
    {"head_8", {4, 2048, 8, 64, 128, 128, 4}, 0},
    {"head_16", {4, 2048, 16, 64, 128, 128, 4}, S_STD},
    {"head_32", {4, 2048, 32, 64, 128, 128, 4}, 0},
    {"head_64", {4, 2048, 64, 64, 128, 128, 4}, S_STD},
    {"group_1", {4, 2048, 16, 64, 128, 128, 1}, S_STD},
    {"group_2", {4, 2048, 16, 64, 128, 128, 2}, 0},
    {"group_4", {4, 2048, 16, 64, 128, 128, 4}, S_STD},
    {"group_8", {4, 2048, 16, 64, 128, 128, 8}, 0},
    {"group_16", {4, 2048, 16, 64, 128, 128, 16}, S_STD},
    {"headdim_16", {2, 1024, 16, 16, 64, 64, 4}, S_STD},
    {"headdim_32", {2, 1024, 16, 32, 64, 64, 4}, 0},
    {"headdim_64", {2, 1024, 16, 64, 64, 64, 4}, S_STD},
    {"headdim_128", {2, 1024, 16, 128, 64, 64, 4}, S_STD},
    {"dstate_16", {2, 1024, 16, 64, 16, 64, 4}, S_STD},
    {"dstate_32", {2, 1024, 16, 64, 32, 64, 4}, 0},
    {"dstate_64", {2, 1024, 16, 64, 64, 64, 4}, S_STD},
    {"dstate_128", {2, 1024, 16, 64, 128, 64, 4}, S_STD},
    {"chunk_16", {2, 2048, 16, 64, 128, 16, 4}, S_STD},
    {"chunk_32", {2, 2048, 16, 64, 128, 32, 4}, 0},
    {"chunk_64", {2, 2048, 16, 64, 128, 64, 4}, S_STD},
    {"chunk_128", {2, 2048, 16, 64, 128, 128, 4}, S_STD},
    {"chunk_256", {2, 2048, 16, 64, 128, 256, 4}, 0},
    {"chunk_512", {2, 2048, 16, 64, 128, 512, 4}, S_STD},
    {"heavy_h128", {8, 4096, 128, 64, 64, 64, 32}, S_STRESS},
    {"heavy_h256", {8, 4096, 256, 64, 64, 64, 64}, S_STRESS},
    /* the training (forward + backward) cases, P = N = chunk = 64; not part of `all` */
    {"m1_small", {1, 128, 4, 64, 64, 64, 2}, S_TRAIN},
    {"m1_medium", {2, 1024, 8, 64, 64, 64, 2}, S_TRAIN},
    {"m1_large", {4, 2048, 16, 64, 64, 64, 4}, S_TRAIN},
    {"m1_extreme", {8, 4096, 32, 64, 64, 64, 8}, S_TRAIN},
    {"h256", {8, 4096, 256, 64, 64, 64, 64}, S_TRAIN},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

/* ------------------------------------------------------------------------- */
/* Run-wide settings and results                                             */
/* ------------------------------------------------------------------------- */

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

static record *g_records;
static int g_nrec, g_caprec, g_failures;
static int g_hugepages; /* --hugepages */

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

static int g_fill_threads = 1;
static uint64_t g_tensor_id;

/* Fill n elements of dst (dtype) with N(0, a²) (normal) or U(a, b), on all threads. Each
 * call draws from its own stream, keyed by SEED and a tensor id that every case resets to 0
 * before its first fill: a case gets the same inputs whatever ran before it. */
static void fill(void *dst, mamba2_dtype_t dtype, size_t n, int normal, double a, double b) {
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

/* 64-byte aligned, NULL-tolerant bookkeeping: every buffer of a case goes in one pool. */
typedef struct pool {
    void *p[48];
    int n, oom;
} pool;

static void *pool_alloc(pool *pl, size_t bytes) {
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
static void pool_free(pool *pl) {
    for (int i = 0; i < pl->n; i++) free(pl->p[i]);
    pl->n = 0;
}

/* ------------------------------------------------------------------------- */
/* Timing                                                                    */
/* ------------------------------------------------------------------------- */

/* One call of the op under test; `i` counts calls (the cold decode benchmarks use it to
 * pick the next cache). */
typedef mamba2_status_t (*call_fn)(void *arg, int64_t i);

/* Warm up (one call), calibrate the calls per sample so that a sample lasts MIN_SAMPLE_S,
 * then return the median seconds per call over `reps` samples. On a failed call returns its
 * status (and no time). */
static mamba2_status_t time_median(call_fn fn, void *arg, int reps, double *sec_per_call) {
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

static void shape_str(char *buf, size_t cap, const int64_t *s, int rank) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? "," : "", (long long)s[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static void print_header(const char *first, const char *shape_what, int with_stream) {
    printf("%-22s %-28s %-4s %-5s %10s %9s %7s %9s%s\n", first, shape_what, "pass", "dtype",
           "ms", "GFLOP/s", "%peak", "GB/s", with_stream ? "  %stream" : "");
}

/* Records and prints one measurement (ok) or one unsupported/failed line (note). */
static record *report(const settings *cfg, const char *name, const int64_t *shape, int rank,
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

static int write_json(const char *path, const settings *cfg) {
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

/* ------------------------------------------------------------------------- */
/* SSD fused forward / backward                                              */
/* ------------------------------------------------------------------------- */

typedef struct ssd_run {
    mamba2_context_t *ctx;
    mamba2_tensor_t x, dt, A, Bm, Cm, D, z, dt_bias, init, out, out_x, final, dout, dfinal;
    mamba2_tensor_t dx, ddt, dA, dBm, dCm, dD, dz, ddt_bias, dinit;
    mamba2_ssd_options_t opts;
    mamba2_ssd_grads_t grads;
    const mamba2_tensor_t *bx; /* out_x for the backward (and the training forward), or NULL */
    int all; /* all features */
    void *ws;
    size_t ws_size;
} ssd_run;

static mamba2_status_t ssd_fwd_call(void *p, int64_t i) {
    ssd_run *r = (ssd_run *)p;
    return mamba2_ssd_forward(r->ctx, &r->out, NULL, r->all ? &r->final : NULL, &r->x, &r->dt,
                              &r->A, &r->Bm, &r->Cm, &r->opts, r->ws, r->ws_size);
}
/* the training forward: also writes out_x (the output before the gate), which the backward
 * reads instead of recomputing it, as mamba_ssm's autograd function saves it */
static mamba2_status_t ssd_fwd_train_call(void *p, int64_t i) {
    ssd_run *r = (ssd_run *)p;
    return mamba2_ssd_forward(r->ctx, &r->out, &r->out_x, r->all ? &r->final : NULL, &r->x,
                              &r->dt, &r->A, &r->Bm, &r->Cm, &r->opts, r->ws, r->ws_size);
}
static mamba2_status_t ssd_bwd_call(void *p, int64_t i) {
    ssd_run *r = (ssd_run *)p;
    return mamba2_ssd_backward(r->ctx, &r->grads, &r->dout, r->all ? &r->dfinal : NULL, &r->x,
                               &r->dt, &r->A, &r->Bm, &r->Cm, r->bx, &r->opts, r->ws,
                               r->ws_size);
}

static void run_ssd_case(mamba2_context_t *ctx, const settings *cfg, const char *name,
                         const int64_t *s, int backward) {
    const int64_t B = s[0], L = s[1], H = s[2], P = s[3], N = s[4], Q = s[5], G = s[6];
    const mamba2_dtype_t adt = cfg->dtype;
    const size_t ae = mamba2_dtype_size(adt);
    const int all = cfg->all_features;
    const int64_t nx = B * L * H * P, ndt = B * L * H, nbc = B * L * G * N, nst = B * H * P * N;
    pool pl = {0};
    ssd_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.all = all;

    /* inputs as SPEC §8 (mamba_ssm's tests): x, z ~ N(0,1); dt ~ U(0.01,0.11) before the
     * bias; A ~ -U(0.1,0.5); Bm, Cm ~ N(0,1)/5; D ~ N(0,1); dt_bias ~ 0.1 N(0,1);
     * initial state ~ N(0,1)/5; dout ~ N(0,1), dfinal_state ~ N(0,1)/5 */
    void *x = pool_alloc(&pl, (size_t)nx * ae), *dt = pool_alloc(&pl, (size_t)ndt * ae);
    void *Bm = pool_alloc(&pl, (size_t)nbc * ae), *Cm = pool_alloc(&pl, (size_t)nbc * ae);
    void *out = pool_alloc(&pl, (size_t)nx * ae);
    float *A = (float *)pool_alloc(&pl, (size_t)H * 4);
    void *z = NULL, *dout = NULL, *dx = NULL, *ddt = NULL, *dBm = NULL, *dCm = NULL, *dz = NULL;
    float *D = NULL, *dt_bias = NULL, *init = NULL, *final = NULL, *dfinal = NULL, *dA = NULL,
          *dD = NULL, *ddt_bias = NULL, *dinit = NULL;
    if (all) {
        z = pool_alloc(&pl, (size_t)nx * ae);
        D = (float *)pool_alloc(&pl, (size_t)(H * P) * 4);
        dt_bias = (float *)pool_alloc(&pl, (size_t)H * 4);
        init = (float *)pool_alloc(&pl, (size_t)nst * 4);
        final = (float *)pool_alloc(&pl, (size_t)nst * 4);
    }
    void *out_x = NULL;
    if (backward) {
        if (all) out_x = pool_alloc(&pl, (size_t)nx * ae);
        dout = pool_alloc(&pl, (size_t)nx * ae);
        dx = pool_alloc(&pl, (size_t)nx * ae);
        ddt = pool_alloc(&pl, (size_t)ndt * ae);
        dBm = pool_alloc(&pl, (size_t)nbc * ae);
        dCm = pool_alloc(&pl, (size_t)nbc * ae);
        dA = (float *)pool_alloc(&pl, (size_t)H * 4);
        if (all) {
            dfinal = (float *)pool_alloc(&pl, (size_t)nst * 4);
            dz = pool_alloc(&pl, (size_t)nx * ae);
            dD = (float *)pool_alloc(&pl, (size_t)(H * P) * 4);
            ddt_bias = (float *)pool_alloc(&pl, (size_t)H * 4);
            dinit = (float *)pool_alloc(&pl, (size_t)nst * 4);
        }
    }
    char sh[96];
    shape_str(sh, sizeof sh, s, 7);
    if (pl.oom) {
        printf("%-22s %-28s skipped: out of memory for the case's tensors\n", name, sh);
        g_failures++;
        pool_free(&pl);
        return;
    }
    const int64_t shx[4] = {B, L, H, P}, shdt[3] = {B, L, H}, shh[1] = {H}, shbc[4] = {B, L, G, N},
                  shd[2] = {H, P}, shst[4] = {B, H, P, N};
    const mamba2_dtype_t f32 = MAMBA2_DTYPE_F32;
    r.x = mamba2_tensor_make(x, adt, 4, shx);
    r.dt = mamba2_tensor_make(dt, adt, 3, shdt);
    r.A = mamba2_tensor_make(A, f32, 1, shh);
    r.Bm = mamba2_tensor_make(Bm, adt, 4, shbc);
    r.Cm = mamba2_tensor_make(Cm, adt, 4, shbc);
    r.out = mamba2_tensor_make(out, adt, 4, shx);
    r.opts = mamba2_ssd_options_default();
    r.opts.chunk_size = Q;
    if (all) {
        r.z = mamba2_tensor_make(z, adt, 4, shx);
        r.D = mamba2_tensor_make(D, f32, 2, shd);
        r.dt_bias = mamba2_tensor_make(dt_bias, f32, 1, shh);
        r.init = mamba2_tensor_make(init, f32, 4, shst);
        r.final = mamba2_tensor_make(final, f32, 4, shst);
        r.opts.D = &r.D;
        r.opts.z = &r.z;
        r.opts.dt_bias = &r.dt_bias;
        r.opts.initial_state = &r.init;
        r.opts.dt_softplus = 1;
    }
    if (backward) {
        r.dout = mamba2_tensor_make(dout, adt, 4, shx);
        r.dx = mamba2_tensor_make(dx, adt, 4, shx);
        r.ddt = mamba2_tensor_make(ddt, adt, 3, shdt);
        r.dA = mamba2_tensor_make(dA, f32, 1, shh);
        r.dBm = mamba2_tensor_make(dBm, adt, 4, shbc);
        r.dCm = mamba2_tensor_make(dCm, adt, 4, shbc);
        r.grads.dx = &r.dx;
        r.grads.ddt = &r.ddt;
        r.grads.dA = &r.dA;
        r.grads.dBm = &r.dBm;
        r.grads.dCm = &r.dCm;
        if (all) {
            r.out_x = mamba2_tensor_make(out_x, adt, 4, shx);
            r.bx = &r.out_x; /* read by the backward (ssd_fwd_train_call writes it) */
            r.dfinal = mamba2_tensor_make(dfinal, f32, 4, shst);
            r.dz = mamba2_tensor_make(dz, adt, 4, shx);
            r.dD = mamba2_tensor_make(dD, f32, 2, shd);
            r.ddt_bias = mamba2_tensor_make(ddt_bias, f32, 1, shh);
            r.dinit = mamba2_tensor_make(dinit, f32, 4, shst);
            r.grads.dD = &r.dD;
            r.grads.dz = &r.dz;
            r.grads.ddt_bias = &r.ddt_bias;
            r.grads.dinitial_state = &r.dinit;
        }
    }

    /* the workspace: queried once, the larger of the two passes, allocated outside timing */
    size_t wf = 0, wb = 0;
    mamba2_status_t st = mamba2_ssd_forward_workspace_size(ctx, &r.out, r.bx,
                                                           all ? &r.final : NULL, &r.x, &r.dt,
                                                           &r.A, &r.Bm, &r.Cm, &r.opts, &wf);
    if (st == MAMBA2_STATUS_OK && backward)
        st = mamba2_ssd_backward_workspace_size(ctx, &r.grads, &r.dout, all ? &r.dfinal : NULL,
                                                &r.x, &r.dt, &r.A, &r.Bm, &r.Cm, r.bx, &r.opts,
                                                &wb);
    r.ws_size = wf > wb ? wf : wb;
    if (st == MAMBA2_STATUS_OK && r.ws_size) {
        r.ws = pool_alloc(&pl, r.ws_size);
        if (!r.ws) st = MAMBA2_STATUS_OUT_OF_MEMORY;
    }

    /* analytic counts (docs/flops.md; bytes: every tensor read or written once) */
    const double unit = (double)B * (double)L * (double)H * (double)P * (double)N;
    /* forward: x, dt, Bm, Cm, A read, out written; all features: + z, D, dt_bias,
     * initial_state read, final_state written.
     * backward: dout, x, dt, Bm, Cm, A read, dx, ddt, dBm, dCm, dA written; all features:
     * + z, out_x, D, dt_bias, initial_state, dfinal_state read, dz, dD, ddt_bias,
     * dinitial_state written. */
    double bf = (double)ae * (2.0 * nx + ndt + 2.0 * nbc) + 4.0 * H;
    double bb = (double)ae * (3.0 * nx + 2.0 * ndt + 4.0 * nbc) + 4.0 * 2.0 * H;
    if (all) {
        bf += (double)ae * nx + 4.0 * (H * P + H + 2.0 * nst);
        bb += (double)ae * 3.0 * nx + 4.0 * (2.0 * H * P + 2.0 * H + 3.0 * nst);
    }

    /* inputs (only once the library has accepted the case) */
    if (st == MAMBA2_STATUS_OK) {
        g_tensor_id = 0; /* a case's inputs depend only on the seed, not on the run order */
        fill(x, adt, (size_t)nx, 1, 1.0, 0);
        fill(dt, adt, (size_t)ndt, 0, 0.01, 0.11);
        fill(A, MAMBA2_DTYPE_F32, (size_t)H, 0, -0.5, -0.1);
        fill(Bm, adt, (size_t)nbc, 1, 0.2, 0);
        fill(Cm, adt, (size_t)nbc, 1, 0.2, 0);
        if (all) {
            fill(z, adt, (size_t)nx, 1, 1.0, 0);
            fill(D, MAMBA2_DTYPE_F32, (size_t)(H * P), 1, 1.0, 0);
            fill(dt_bias, MAMBA2_DTYPE_F32, (size_t)H, 1, 0.1, 0);
            fill(init, MAMBA2_DTYPE_F32, (size_t)nst, 1, 0.2, 0);
        }
        if (backward) {
            fill(dout, adt, (size_t)nx, 1, 1.0, 0);
            if (all) fill(dfinal, MAMBA2_DTYPE_F32, (size_t)nst, 1, 0.2, 0);
        }
    }

    double tf = 0, tb = 0, tft = 0;
    /* the inference forward (no out_x) */
    if (st == MAMBA2_STATUS_OK) st = time_median(ssd_fwd_call, &r, cfg->reps, &tf);
    if (st == MAMBA2_STATUS_OUT_OF_MEMORY) {
        printf("%-22s %-28s skipped: out of memory for a %.1f MiB workspace\n", name, sh,
               (double)r.ws_size / 1048576.0);
        g_failures++;
    } else {
        report(cfg, name, s, 7, "fwd", st, tf, 4.0 * unit, bf, 0, NULL);
    }
    if (backward && st == MAMBA2_STATUS_OK) {
        /* with z the training forward writes out_x for the backward: time it (its cost is
         * the out_x stores) and run it before the backward so out_x holds its values */
        if (all) st = time_median(ssd_fwd_train_call, &r, cfg->reps, &tft);
        if (st == MAMBA2_STATUS_OK) st = time_median(ssd_bwd_call, &r, cfg->reps, &tb);
        char extra[96];
        if (all)
            snprintf(extra, sizeof extra, "bwd/fwd %.2f (training fwd, +out_x: %.2f ms, %.2f)",
                     tf > 0 ? tb / tf : 0.0, tft * 1e3, tft > 0 ? tb / tft : 0.0);
        else
            snprintf(extra, sizeof extra, "bwd/fwd %.2f", tf > 0 ? tb / tf : 0.0);
        report(cfg, name, s, 7, "bwd", st, tb, 10.0 * unit, bb, 0, st == MAMBA2_STATUS_OK ? extra : NULL);
    } else if (backward && st == MAMBA2_STATUS_UNSUPPORTED) {
        report(cfg, name, s, 7, "bwd", st, 0, 10.0 * unit, bb, 0, NULL);
    }
    pool_free(&pl);
}

/* ------------------------------------------------------------------------- */
/* Memory-bound ops at the sizes of a real model (--ops)                     */
/* ------------------------------------------------------------------------- */

/* Mamba-2 2.7B: d_model 2560, expand 2 */
enum {
    M_DINNER = 5120,
    M_H = 80,
    M_P = 64,
    M_N = 128,
    M_G = 1,
    M_W = 4,
    M_CONV_C = M_DINNER + 2 * M_G * M_N, /* 5376: the xBC channels the conv runs over */
    M_PREFILL_L = 2048
};

typedef struct conv_run {
    mamba2_context_t *ctx;
    mamba2_tensor_t x, w, bias, out, fstate, dout, dx, dw, dbias;
    mamba2_conv1d_options_t opts;
    mamba2_conv1d_grads_t grads;
    void *ws;
    size_t ws_size;
} conv_run;

static mamba2_status_t conv_fwd_call(void *p, int64_t i) {
    conv_run *r = (conv_run *)p;
    return mamba2_conv1d_forward(r->ctx, &r->out, &r->fstate, &r->x, &r->w, &r->opts);
}
static mamba2_status_t conv_bwd_call(void *p, int64_t i) {
    conv_run *r = (conv_run *)p;
    return mamba2_conv1d_backward(r->ctx, &r->grads, &r->dout, NULL, &r->x, &r->w, &r->opts, r->ws,
                                  r->ws_size);
}

static void ops_conv1d(mamba2_context_t *ctx, const settings *cfg) {
    const int64_t B = 1, L = M_PREFILL_L, C = M_CONV_C, W = M_W;
    const mamba2_dtype_t adt = cfg->dtype;
    const size_t ae = mamba2_dtype_size(adt);
    const int64_t n = B * L * C;
    pool pl = {0};
    conv_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    void *x = pool_alloc(&pl, (size_t)n * ae), *out = pool_alloc(&pl, (size_t)n * ae);
    void *fs = pool_alloc(&pl, (size_t)(B * C * (W - 1)) * ae);
    void *dout = pool_alloc(&pl, (size_t)n * ae), *dx = pool_alloc(&pl, (size_t)n * ae);
    float *w = (float *)pool_alloc(&pl, (size_t)(C * W) * 4), *bias = (float *)pool_alloc(&pl, (size_t)C * 4);
    float *dw = (float *)pool_alloc(&pl, (size_t)(C * W) * 4), *dbias = (float *)pool_alloc(&pl, (size_t)C * 4);
    const int64_t shape[4] = {B, L, C, W};
    if (pl.oom) {
        printf("conv1d: out of memory\n");
        g_failures++;
        pool_free(&pl);
        return;
    }
    g_tensor_id = 0;
    fill(x, adt, (size_t)n, 1, 1.0, 0);
    fill(dout, adt, (size_t)n, 1, 1.0, 0);
    fill(w, MAMBA2_DTYPE_F32, (size_t)(C * W), 1, 0.5, 0);
    fill(bias, MAMBA2_DTYPE_F32, (size_t)C, 1, 0.1, 0);
    const int64_t shx[3] = {B, L, C}, shw[2] = {C, W}, shc[1] = {C}, shs[3] = {B, C, W - 1};
    r.x = mamba2_tensor_make(x, adt, 3, shx);
    r.out = mamba2_tensor_make(out, adt, 3, shx);
    r.fstate = mamba2_tensor_make(fs, adt, 3, shs);
    r.dout = mamba2_tensor_make(dout, adt, 3, shx);
    r.dx = mamba2_tensor_make(dx, adt, 3, shx);
    r.w = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 2, shw);
    r.bias = mamba2_tensor_make(bias, MAMBA2_DTYPE_F32, 1, shc);
    r.dw = mamba2_tensor_make(dw, MAMBA2_DTYPE_F32, 2, shw);
    r.dbias = mamba2_tensor_make(dbias, MAMBA2_DTYPE_F32, 1, shc);
    r.opts = mamba2_conv1d_options_default();
    r.opts.bias = &r.bias;
    r.opts.activation = MAMBA2_ACTIVATION_SILU;
    r.grads.dx = &r.dx;
    r.grads.dweight = &r.dw;
    r.grads.dbias = &r.dbias;

    double t = 0;
    mamba2_status_t st = time_median(conv_fwd_call, &r, cfg->reps, &t);
    /* reads x, weight, bias; writes out, final_conv_state */
    double bytes = (double)ae * (2.0 * n + (double)(B * C * (W - 1))) + 4.0 * (double)(C * W + C);
    report(cfg, "conv1d_prefill", shape, 4, "fwd", st, t, 2.0 * (double)n * W, bytes, 1, NULL);

    st = mamba2_conv1d_backward_workspace_size(ctx, &r.grads, &r.dout, NULL, &r.x, &r.w, &r.opts,
                                               &r.ws_size);
    if (st == MAMBA2_STATUS_OK && r.ws_size && !(r.ws = pool_alloc(&pl, r.ws_size)))
        st = MAMBA2_STATUS_OUT_OF_MEMORY;
    if (st == MAMBA2_STATUS_OK) st = time_median(conv_bwd_call, &r, cfg->reps, &t);
    /* reads dout, x, weight, bias; writes dx, dweight, dbias */
    bytes = (double)ae * 3.0 * n + 4.0 * 2.0 * (double)(C * W + C);
    report(cfg, "conv1d_prefill", shape, 4, "bwd", st, t, 4.0 * (double)n * W, bytes, 1, NULL);
    pool_free(&pl);
}

typedef struct norm_run {
    mamba2_context_t *ctx;
    mamba2_tensor_t x, z, w, out, rstd, dout, dx, dz, dw;
    mamba2_rmsnorm_gated_options_t opts;
    mamba2_rmsnorm_gated_grads_t grads;
    void *ws_f, *ws_b;
    size_t wsf, wsb;
} norm_run;

static mamba2_status_t norm_fwd_call(void *p, int64_t i) {
    norm_run *r = (norm_run *)p;
    return mamba2_rmsnorm_gated_forward(r->ctx, &r->out, &r->rstd, &r->x, &r->z, &r->w, NULL,
                                        &r->opts, r->ws_f, r->wsf);
}
static mamba2_status_t norm_bwd_call(void *p, int64_t i) {
    norm_run *r = (norm_run *)p;
    return mamba2_rmsnorm_gated_backward(r->ctx, &r->grads, &r->dout, &r->x, &r->z, &r->w, NULL,
                                         &r->rstd, &r->opts, r->ws_b, r->wsb);
}

static void ops_rmsnorm(mamba2_context_t *ctx, const settings *cfg) {
    /* the norm before out_proj: M = B*L rows of d_inner channels, gated by z, one group */
    const int64_t M = M_PREFILL_L, D = M_DINNER, ng = M_G;
    const mamba2_dtype_t adt = cfg->dtype;
    const size_t ae = mamba2_dtype_size(adt);
    const int64_t n = M * D;
    pool pl = {0};
    norm_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    void *x = pool_alloc(&pl, (size_t)n * ae), *z = pool_alloc(&pl, (size_t)n * ae);
    void *out = pool_alloc(&pl, (size_t)n * ae), *dout = pool_alloc(&pl, (size_t)n * ae);
    void *dx = pool_alloc(&pl, (size_t)n * ae), *dz = pool_alloc(&pl, (size_t)n * ae);
    float *w = (float *)pool_alloc(&pl, (size_t)D * 4), *dw = (float *)pool_alloc(&pl, (size_t)D * 4);
    float *rstd = (float *)pool_alloc(&pl, (size_t)(M * ng) * 4);
    const int64_t shape[2] = {M, D};
    if (pl.oom) {
        printf("rmsnorm: out of memory\n");
        g_failures++;
        pool_free(&pl);
        return;
    }
    g_tensor_id = 0;
    fill(x, adt, (size_t)n, 1, 1.0, 0);
    fill(z, adt, (size_t)n, 1, 1.0, 0);
    fill(dout, adt, (size_t)n, 1, 1.0, 0);
    fill(w, MAMBA2_DTYPE_F32, (size_t)D, 0, 0.5, 1.5);
    const int64_t shx[2] = {M, D}, shw[1] = {D}, shr[2] = {M, ng};
    r.x = mamba2_tensor_make(x, adt, 2, shx);
    r.z = mamba2_tensor_make(z, adt, 2, shx);
    r.out = mamba2_tensor_make(out, adt, 2, shx);
    r.dout = mamba2_tensor_make(dout, adt, 2, shx);
    r.dx = mamba2_tensor_make(dx, adt, 2, shx);
    r.dz = mamba2_tensor_make(dz, adt, 2, shx);
    r.w = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 1, shw);
    r.dw = mamba2_tensor_make(dw, MAMBA2_DTYPE_F32, 1, shw);
    r.rstd = mamba2_tensor_make(rstd, MAMBA2_DTYPE_F32, 2, shr);
    r.opts = mamba2_rmsnorm_gated_options_default();
    r.opts.group_size = D / ng;
    r.grads.dx = &r.dx;
    r.grads.dz = &r.dz;
    r.grads.dweight = &r.dw;

    double t = 0;
    mamba2_status_t st = mamba2_rmsnorm_gated_forward_workspace_size(ctx, &r.out, &r.rstd, &r.x, &r.z,
                                                                     &r.w, NULL, &r.opts, &r.wsf);
    if (st == MAMBA2_STATUS_OK && r.wsf && !(r.ws_f = pool_alloc(&pl, r.wsf))) st = MAMBA2_STATUS_OUT_OF_MEMORY;
    if (st == MAMBA2_STATUS_OK) st = time_median(norm_fwd_call, &r, cfg->reps, &t);
    /* reads x, z, weight; writes out, rstd */
    double bytes = (double)ae * 3.0 * n + 4.0 * (double)(D + M * ng);
    report(cfg, "rmsnorm_gated_prefill", shape, 2, "fwd", st, t, 4.0 * (double)n, bytes, 1, NULL);

    if (st == MAMBA2_STATUS_OK)
        st = mamba2_rmsnorm_gated_backward_workspace_size(ctx, &r.grads, &r.dout, &r.x, &r.z, &r.w,
                                                          NULL, &r.rstd, &r.opts, &r.wsb);
    if (st == MAMBA2_STATUS_OK && r.wsb && !(r.ws_b = pool_alloc(&pl, r.wsb))) st = MAMBA2_STATUS_OUT_OF_MEMORY;
    if (st == MAMBA2_STATUS_OK) st = time_median(norm_bwd_call, &r, cfg->reps, &t);
    /* reads dout, x, z, weight, rstd; writes dx, dz, dweight */
    bytes = (double)ae * 5.0 * n + 4.0 * (double)(2 * D + M * ng);
    report(cfg, "rmsnorm_gated_prefill", shape, 2, "bwd", st, t, 8.0 * (double)n, bytes, 1, NULL);
    pool_free(&pl);
}

/* Decode: one call per token against a cache. `hot` reuses one cache (it stays in the
 * caches of the CPU when it fits); `cold` rotates over ncache caches that together exceed
 * the STREAM arrays, as one token's pass over a model's many layers would. */
typedef struct step_run {
    mamba2_context_t *ctx;
    mamba2_tensor_t cache, x, dt, A, Bm, Cm, D, dt_bias, out, w, bias;
    mamba2_ssd_step_options_t sopts;
    mamba2_conv1d_step_options_t copts;
    char *cache_base;
    size_t cache_stride; /* bytes between caches */
    int64_t ncache;
} step_run;

static mamba2_status_t ssd_step_call(void *p, int64_t i) {
    step_run *r = (step_run *)p;
    r->cache.data = r->cache_base + (size_t)(i % r->ncache) * r->cache_stride;
    return mamba2_ssd_step(r->ctx, &r->cache, &r->out, NULL, &r->x, &r->dt, &r->A, &r->Bm, &r->Cm,
                           &r->sopts);
}
static mamba2_status_t conv_step_call(void *p, int64_t i) {
    step_run *r = (step_run *)p;
    r->cache.data = r->cache_base + (size_t)(i % r->ncache) * r->cache_stride;
    return mamba2_conv1d_step(r->ctx, &r->out, &r->cache, &r->x, &r->w, &r->copts);
}

/* Copies the first cache (bytes) into the other n - 1 (cheaper than drawing them all). */
static void replicate(char *base, size_t bytes, int64_t n) {
    for (int64_t k = 1; k < n; k++) memcpy(base + (size_t)k * bytes, base, bytes);
}

static int64_t n_cold_caches(const settings *cfg, size_t cache_bytes) {
    /* as many caches as fill one default STREAM array (4 x L3), whatever --stream-mib says */
    const size_t total = bench_stream_default_bytes(NULL);
    int64_t k = (int64_t)((total + cache_bytes - 1) / cache_bytes);
    if (k < 2) k = 2;
    return k;
}

static void ops_ssd_step(mamba2_context_t *ctx, const settings *cfg, int64_t B, int cold) {
    const int64_t H = M_H, P = M_P, N = M_N, G = M_G;
    const mamba2_dtype_t adt = cfg->dtype;
    const size_t ae = mamba2_dtype_size(adt);
    const size_t cache_bytes = (size_t)(B * H * P * N) * 4;
    const int64_t ncache = cold ? n_cold_caches(cfg, cache_bytes) : 1;
    pool pl = {0};
    step_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.cache_base = (char *)pool_alloc(&pl, cache_bytes * (size_t)ncache);
    r.cache_stride = cache_bytes;
    r.ncache = ncache;
    void *x = pool_alloc(&pl, (size_t)(B * H * P) * ae), *out = pool_alloc(&pl, (size_t)(B * H * P) * ae);
    void *dt = pool_alloc(&pl, (size_t)(B * H) * ae);
    void *Bm = pool_alloc(&pl, (size_t)(B * G * N) * ae), *Cm = pool_alloc(&pl, (size_t)(B * G * N) * ae);
    float *A = (float *)pool_alloc(&pl, (size_t)H * 4), *D = (float *)pool_alloc(&pl, (size_t)H * 4);
    float *dt_bias = (float *)pool_alloc(&pl, (size_t)H * 4);
    char name[48];
    snprintf(name, sizeof name, "ssd_step_b%lld%s", (long long)B, cold ? "_cold" : "");
    const int64_t shape[4] = {B, H, P, N};
    if (pl.oom) {
        printf("%s: out of memory\n", name);
        g_failures++;
        pool_free(&pl);
        return;
    }
    g_tensor_id = 0;
    fill(r.cache_base, MAMBA2_DTYPE_F32, cache_bytes / 4, 1, 0.2, 0);
    replicate(r.cache_base, cache_bytes, ncache);
    fill(x, adt, (size_t)(B * H * P), 1, 1.0, 0);
    fill(dt, adt, (size_t)(B * H), 0, 0.01, 0.11);
    fill(Bm, adt, (size_t)(B * G * N), 1, 0.2, 0);
    fill(Cm, adt, (size_t)(B * G * N), 1, 0.2, 0);
    fill(A, MAMBA2_DTYPE_F32, (size_t)H, 0, -0.5, -0.1);
    fill(D, MAMBA2_DTYPE_F32, (size_t)H, 1, 1.0, 0);
    fill(dt_bias, MAMBA2_DTYPE_F32, (size_t)H, 1, 0.1, 0);
    const int64_t shc[4] = {B, H, P, N}, shx[3] = {B, H, P}, shdt[2] = {B, H}, shh[1] = {H},
                  shb[3] = {B, G, N};
    r.cache = mamba2_tensor_make(r.cache_base, MAMBA2_DTYPE_F32, 4, shc);
    r.x = mamba2_tensor_make(x, adt, 3, shx);
    r.out = mamba2_tensor_make(out, adt, 3, shx);
    r.dt = mamba2_tensor_make(dt, adt, 2, shdt);
    r.Bm = mamba2_tensor_make(Bm, adt, 3, shb);
    r.Cm = mamba2_tensor_make(Cm, adt, 3, shb);
    r.A = mamba2_tensor_make(A, MAMBA2_DTYPE_F32, 1, shh);
    r.D = mamba2_tensor_make(D, MAMBA2_DTYPE_F32, 1, shh);
    r.dt_bias = mamba2_tensor_make(dt_bias, MAMBA2_DTYPE_F32, 1, shh);
    /* Mamba-2's decode: D [H], dt_bias, softplus; z goes to the gated norm instead */
    r.sopts = mamba2_ssd_step_options_default();
    r.sopts.D = &r.D;
    r.sopts.dt_bias = &r.dt_bias;
    r.sopts.dt_softplus = 1;
    double t = 0;
    mamba2_status_t st = time_median(ssd_step_call, &r, cfg->reps, &t);
    /* the state read + written; x, dt, B, C read, out written; A, D, dt_bias read */
    const double bytes = 2.0 * (double)cache_bytes +
                         (double)ae * (double)(2 * B * H * P + B * H + 2 * B * G * N) + 4.0 * 3.0 * H;
    char extra[64] = "";
    if (cold) snprintf(extra, sizeof extra, "(%lld caches)", (long long)ncache);
    report(cfg, name, shape, 4, "fwd", st, t, 4.0 * (double)(B * H * P * N), bytes, 1, cold ? extra : NULL);
    pool_free(&pl);
}

static void ops_conv1d_step(mamba2_context_t *ctx, const settings *cfg, int64_t B, int cold) {
    const int64_t C = M_CONV_C, W = M_W;
    const mamba2_dtype_t adt = cfg->dtype;
    const size_t ae = mamba2_dtype_size(adt);
    const size_t cache_bytes = (size_t)(B * C * (W - 1)) * ae;
    const int64_t ncache = cold ? n_cold_caches(cfg, cache_bytes) : 1;
    pool pl = {0};
    step_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.cache_base = (char *)pool_alloc(&pl, cache_bytes * (size_t)ncache);
    r.cache_stride = cache_bytes;
    r.ncache = ncache;
    void *x = pool_alloc(&pl, (size_t)(B * C) * ae), *out = pool_alloc(&pl, (size_t)(B * C) * ae);
    float *w = (float *)pool_alloc(&pl, (size_t)(C * W) * 4), *bias = (float *)pool_alloc(&pl, (size_t)C * 4);
    char name[48];
    snprintf(name, sizeof name, "conv1d_step_b%lld%s", (long long)B, cold ? "_cold" : "");
    const int64_t shape[3] = {B, C, W};
    if (pl.oom) {
        printf("%s: out of memory\n", name);
        g_failures++;
        pool_free(&pl);
        return;
    }
    g_tensor_id = 0;
    fill(r.cache_base, adt, cache_bytes / ae, 1, 1.0, 0);
    replicate(r.cache_base, cache_bytes, ncache);
    fill(x, adt, (size_t)(B * C), 1, 1.0, 0);
    fill(w, MAMBA2_DTYPE_F32, (size_t)(C * W), 1, 0.5, 0);
    fill(bias, MAMBA2_DTYPE_F32, (size_t)C, 1, 0.1, 0);
    const int64_t shc[3] = {B, C, W - 1}, shx[2] = {B, C}, shw[2] = {C, W}, shb[1] = {C};
    r.cache = mamba2_tensor_make(r.cache_base, adt, 3, shc);
    r.x = mamba2_tensor_make(x, adt, 2, shx);
    r.out = mamba2_tensor_make(out, adt, 2, shx);
    r.w = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 2, shw);
    r.bias = mamba2_tensor_make(bias, MAMBA2_DTYPE_F32, 1, shb);
    r.copts = mamba2_conv1d_step_options_default();
    r.copts.bias = &r.bias;
    r.copts.activation = MAMBA2_ACTIVATION_SILU;
    double t = 0;
    mamba2_status_t st = time_median(conv_step_call, &r, cfg->reps, &t);
    /* the cache read + written; x read, out written; weight, bias read */
    const double bytes = 2.0 * (double)cache_bytes + (double)ae * 2.0 * (double)(B * C) + 4.0 * (double)(C * W + C);
    char extra[64] = "";
    if (cold) snprintf(extra, sizeof extra, "(%lld caches)", (long long)ncache);
    report(cfg, name, shape, 3, "fwd", st, t, 2.0 * (double)(B * C * W), bytes, 1, cold ? extra : NULL);
    pool_free(&pl);
}

static void run_ops(mamba2_context_t *ctx, const settings *cfg) {
    printf("\nmemory-bound ops at Mamba-2 2.7B sizes (d_inner %d, H %d, P %d, N %d, G %d, conv "
           "channels %d, width %d); GB/s from analytic bytes, %%stream of the triad above\n",
           M_DINNER, M_H, M_P, M_N, M_G, M_CONV_C, M_W);
    print_header("op", "shape", 1);
    ops_conv1d(ctx, cfg);
    ops_rmsnorm(ctx, cfg);
    for (int cold = 0; cold < 2; cold++) {
        ops_ssd_step(ctx, cfg, 1, cold);
        ops_ssd_step(ctx, cfg, 32, cold);
        ops_conv1d_step(ctx, cfg, 1, cold);
        ops_conv1d_step(ctx, cfg, 32, cold);
    }
}

/* ------------------------------------------------------------------------- */
/* main                                                                      */
/* ------------------------------------------------------------------------- */

static void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s [options]\n"
            "  --suite NAME        smoke | standard (31 std cases) | all (52) | training (5, fwd+bwd)\n"
            "  --shape B,L,H,P,N,Q,G  a custom case (repeatable; with or instead of a suite)\n"
            "  --case NAME[,NAME]  named cases of the matrix\n"
            "  --features F        all (default: D [H,P], z, dt_bias, softplus, initial + final\n"
            "                      state) | basic (x, dt, A, B, C only)\n"
            "  --backward          also time the backward (all gradients + dfinal_state)\n"
            "  --dtype T           f32 (default) | bf16 | f16 (activation storage)\n"
            "  --threads N         threads (default: one per online CPU)\n"
            "  --reps N            timed samples per case, median reported (default 5)\n"
            "  --ops               also time the memory-bound ops (conv1d, gated RMSNorm,\n"
            "                      ssd_step, conv1d_step) at real-model sizes\n"
            "  --no-ssd            skip the SSD cases (with --ops: ops only)\n"
            "  --hugepages         tensors of 2 MiB and more on 2 MiB pages (madvise), as\n"
            "                      PyTorch's THP_MEM_ALLOC_ENABLE=1 does\n"
            "  --json FILE         write the results as a JSON list\n"
            "  --stream-mib N      STREAM array size in MiB (default 4 x L3)\n",
            argv0);
}

static int parse_int(const char *s, long long *v) {
    char *end;
    *v = strtoll(s, &end, 10);
    return end != s && *end == 0;
}

int main(int argc, char **argv) {
    settings cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.reps = 5;
    cfg.all_features = 1;
    cfg.ssd = 1;
    cfg.dtype = MAMBA2_DTYPE_F32;
    cfg.dtype_name = "f32";
    const char *suite = NULL, *json = NULL, *case_list = NULL;
    int have_shape = 0; /* the number of --shape cases */
    int64_t shape[16][7];
    long long stream_mib = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, argv[0]);
            return 0;
        } else if (!strcmp(a, "--backward")) {
            cfg.backward = 1;
        } else if (!strcmp(a, "--ops")) {
            cfg.ops = 1;
        } else if (!strcmp(a, "--no-ssd")) {
            cfg.ssd = 0;
        } else if (!strcmp(a, "--hugepages")) {
            g_hugepages = 1;
        } else if (!v) {
            fprintf(stderr, "%s: unknown option or missing value: %s\n", argv[0], a);
            usage(stderr, argv[0]);
            return 2;
        } else if (!strcmp(a, "--suite")) {
            suite = argv[++i];
        } else if (!strcmp(a, "--case")) {
            case_list = argv[++i];
        } else if (!strcmp(a, "--json")) {
            json = argv[++i];
        } else if (!strcmp(a, "--shape")) {
            long long s[7];
            char tail;
            if (sscanf(argv[++i], "%lld,%lld,%lld,%lld,%lld,%lld,%lld%c", &s[0], &s[1], &s[2], &s[3],
                       &s[4], &s[5], &s[6], &tail) != 7) {
                fprintf(stderr, "--shape expects B,L,H,P,N,Q,G (seven integers)\n");
                return 2;
            }
            if (have_shape == 16) {
                fprintf(stderr, "at most 16 --shape options\n");
                return 2;
            }
            for (int k = 0; k < 7; k++) shape[have_shape][k] = s[k];
            have_shape++;
        } else if (!strcmp(a, "--features")) {
            ++i;
            if (!strcmp(v, "all")) cfg.all_features = 1;
            else if (!strcmp(v, "basic")) cfg.all_features = 0;
            else {
                fprintf(stderr, "--features expects basic or all\n");
                return 2;
            }
        } else if (!strcmp(a, "--dtype")) {
            ++i;
            if (!strcmp(v, "f32")) cfg.dtype = MAMBA2_DTYPE_F32;
            else if (!strcmp(v, "bf16")) cfg.dtype = MAMBA2_DTYPE_BF16;
            else if (!strcmp(v, "f16")) cfg.dtype = MAMBA2_DTYPE_F16;
            else {
                fprintf(stderr, "--dtype expects f32, bf16 or f16\n");
                return 2;
            }
            cfg.dtype_name = v;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "--reps") || !strcmp(a, "--stream-mib")) {
            ++i;
            if (!parse_int(v, &n) || n < (!strcmp(a, "--threads") ? 0 : 1) || n > 1000000) {
                fprintf(stderr, "%s expects a %s integer\n", a,
                        !strcmp(a, "--threads") ? "non-negative" : "positive");
                return 2;
            }
            if (!strcmp(a, "--threads")) cfg.threads = (int)n;
            else if (!strcmp(a, "--reps")) cfg.reps = (int)n;
            else stream_mib = n;
        } else {
            fprintf(stderr, "%s: unknown option: %s\n", argv[0], a);
            usage(stderr, argv[0]);
            return 2;
        }
    }

    /* the cases to run */
    unsigned want = 0;
    int training = 0;
    if (suite) {
        if (!strcmp(suite, "smoke")) want = S_SMOKE;
        else if (!strcmp(suite, "standard")) want = S_STD;
        else if (!strcmp(suite, "all")) want = ~(unsigned)S_TRAIN;
        else if (!strcmp(suite, "training")) want = S_TRAIN, training = 1;
        else {
            fprintf(stderr, "--suite expects smoke, standard, all or training\n");
            return 2;
        }
    }
    int selected[NCASES];
    int nsel = 0;
    for (int c = 0; c < NCASES; c++) {
        int take = 0;
        if (suite) {
            if (want == ~(unsigned)S_TRAIN) take = !(CASES[c].flags & S_TRAIN);
            else take = (CASES[c].flags & want) != 0;
        }
        if (case_list) {
            const size_t len = strlen(CASES[c].name);
            for (const char *p = case_list; p && *p;) {
                const char *comma = strchr(p, ',');
                const size_t l = comma ? (size_t)(comma - p) : strlen(p);
                if (l == len && !strncmp(p, CASES[c].name, l)) take = 1;
                p = comma ? comma + 1 : NULL;
            }
        }
        if (take) selected[nsel++] = c;
    }
    if (case_list) { /* every listed name must exist */
        for (const char *p = case_list; p && *p;) {
            const char *comma = strchr(p, ',');
            const size_t l = comma ? (size_t)(comma - p) : strlen(p);
            int found = 0;
            for (int c = 0; c < NCASES; c++)
                if (strlen(CASES[c].name) == l && !strncmp(p, CASES[c].name, l)) found = 1;
            if (!found) {
                fprintf(stderr, "unknown case: %.*s\n", (int)l, p);
                return 2;
            }
            p = comma ? comma + 1 : NULL;
        }
    }
    for (int k = 0; k < have_shape; k++) {
        const int64_t *x = shape[k];
        if (x[0] < 1 || x[1] < 0 || x[2] < 1 || x[3] < 1 || x[4] < 1 || x[5] < 1 || x[6] < 1 ||
            x[2] % x[6]) {
            fprintf(stderr, "--shape: need B,H,P,N,Q,G >= 1, L >= 0 and H %% G == 0\n");
            return 2;
        }
    }
    if (!suite && !case_list && !have_shape && !cfg.ops) {
        fprintf(stderr, "nothing to run: give --suite, --case, --shape or --ops\n");
        usage(stderr, argv[0]);
        return 2;
    }
    if (training) cfg.backward = 1;

    mamba2_context_t *ctx = NULL;
    mamba2_status_t st = mamba2_context_create(&ctx, MAMBA2_BACKEND_CPU, cfg.threads);
    if (st != MAMBA2_STATUS_OK) {
        fprintf(stderr, "mamba2_context_create: %s: %s\n", mamba2_status_string(st), mamba2_last_error());
        return 1;
    }
    const int nth = (int)mamba2_context_get_num_threads(ctx);
    g_fill_threads = nth;

    /* the ceilings, measured now on the same threads */
    /* pct_peak is a fraction of the ceiling of the widest vectors the kernels of this run
     * use (the context's ISA); under AVX-512 the AVX2 peak is printed too, for reference */
    const char *isa = mamba2_context_get_isa(ctx);
    const bench_peak pk = bench_fma_peak(nth, isa);
    bench_peak pk2 = {0, NULL, 0};
    if (strcmp(pk.isa, "avx512-fma") == 0) pk2 = bench_fma_peak(nth, "avx2");
    const bench_stream sm = bench_stream_triad(nth, (size_t)stream_mib << 20, 5);
    cfg.peak_gflops = pk.gflops;
    cfg.peak_isa = pk.isa;
    cfg.stream_gbps = sm.best_gbps;
    printf("mamba2c %s bench: cpu backend, isa %s, %d threads\n", mamba2_version_string(),
           mamba2_context_get_isa(ctx), nth);
    printf("peak:   %.1f GFLOP/s FMA (%s, %d independent chains per thread, %d threads, best of 5)\n",
           pk.gflops, pk.isa, pk.chains, nth);
    if (pk2.isa != NULL)
        printf("        %.1f GFLOP/s FMA (%s, for reference; %%peak is of the %s line)\n", pk2.gflops,
               pk2.isa, pk.isa);
    if (sm.best_gbps > 0)
        printf("stream: %.1f GB/s triad (best of 5; median %.1f), 3 arrays x %.0f MiB (L3 %.0f MiB), "
               "%d threads\n",
               sm.best_gbps, sm.median_gbps, (double)sm.array_bytes / 1048576.0,
               (double)sm.l3_bytes / 1048576.0, nth);
    else
        printf("stream: not measured (out of memory for 3 x %.0f MiB)\n", (double)sm.array_bytes / 1048576.0);
    printf("inputs: %s, seed %llu, features %s%s; median of %d samples after warm-up\n\n",
           cfg.dtype_name, (unsigned long long)SEED,
           cfg.all_features ? "all (D [H,P], z, dt_bias, softplus, initial + final state)" : "basic",
           cfg.backward ? ", forward + backward" : ", forward", cfg.reps);

    if (cfg.ssd && (nsel > 0 || have_shape)) {
        print_header("case", "shape [B,L,H,P,N,Q,G]", 0);
        for (int k = 0; k < nsel; k++) run_ssd_case(ctx, &cfg, CASES[selected[k]].name, CASES[selected[k]].s, cfg.backward);
        for (int k = 0; k < have_shape; k++) {
            char nm[24];
            snprintf(nm, sizeof nm, have_shape > 1 ? "custom%d" : "custom", k + 1);
            run_ssd_case(ctx, &cfg, nm, shape[k], cfg.backward);
        }
    }
    if (cfg.ops) run_ops(ctx, &cfg);

    int rc = g_failures ? 1 : 0;
    if (json && write_json(json, &cfg)) rc = 1;
    if (g_failures) printf("\n%d measurement(s) failed\n", g_failures);
    mamba2_context_destroy(ctx);
    free(g_records);
    return rc;
}
