/*
 * gemv_bench.c — mamba2c-gemv-bench: the decode linear layer (mamba2_linear_forward) at the
 * matrix-vector shapes of a Mamba-2 decode step, as weight-streaming bandwidth and as a
 * fraction of the STREAM triad measured in the same run (stream.c).
 *
 * A decode step reads every layer's weights once, so what counts is the rate at which a
 * product streams its weight from memory. A single 370m-shaped in_proj (4384 x 1024) is
 * 18 MB in f32 but 4.8 MB in Q8_0, which an L3 may hold; the bench therefore keeps enough
 * copies of each weight to span at least the STREAM array size (4 x L3, >= 64 MiB) and
 * multiplies by them in turn, as the layers of a model follow each other. One trial is one
 * pass over all copies; GB/s = weight bytes of the pass / its time (x, out: a few KiB, not
 * counted). On a shared machine the available bandwidth drifts within seconds, so each trial
 * of a case is paired with a STREAM triad trial run just before it (stream.c, same thread
 * count): reported per (threads, shape, dtype) are the median and the best trial, each
 * against the median and the best of its paired triad trials (STREAM's own figure is its
 * best trial). Each trial is also paired with a read-only stream trial (bench_stream_read:
 * one array summed, the ceiling of a kernel that only reads), the "read" columns.
 *
 *   mamba2c-gemv-bench [--threads 1,2] [--trials 11] [--batch 1] [--vocab 50288]
 *                      [--d-model 1024] [--d-inner 2048] [--in-proj 4384] [--in-cache]
 *                      [--dtypes f32,bf16,q8_0,q8_0x]
 * q8_0x is the Q8_0 weight with integer activations (mamba2_linear_options_t.quantize_x: x
 * rounded to Q8_0 once per call, int8 dot products); its bytes are the Q8_0 weight's.
 * --in-cache keeps one copy of each weight (with small shapes: the kernels' speed from cache,
 * not a bandwidth figure; no triad trials, the "triad" columns read 1).
 * Prints one table row per case and, with --json FILE, writes the rows as JSON.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mamba2c.h"

typedef struct shape {
    const char *name;
    int64_t O, I;
} shape;

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* bytes of one [O,I] weight in dtype (Q8_0: 34 per 32) */
static size_t weight_bytes(mamba2_dtype_t dt, int64_t O, int64_t I) {
    if (dt == MAMBA2_DTYPE_Q8_0) return (size_t)(O * (I / 32) * 34);
    return (size_t)(O * I) * mamba2_dtype_size(dt);
}

/* random weights: floats in [-0.05, 0.05) (bf16: their top halves); Q8_0: scale 2^-9, any q */
static void fill(unsigned char *p, size_t bytes, mamba2_dtype_t dt) {
    if (dt == MAMBA2_DTYPE_Q8_0) {
        for (size_t b = 0; b + 34 <= bytes; b += 34) {
            const uint16_t h = (uint16_t)(6 << 10); /* f16 2^-9 */
            memcpy(p + b, &h, 2);
            for (int j = 0; j < 32; j++) p[b + 2 + j] = (unsigned char)(rnd() & 0xFF);
        }
        return;
    }
    if (dt == MAMBA2_DTYPE_F32) {
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
            const float v = ((float)(rnd() & 0xFFFF) / 65536.0f - 0.5f) * 0.1f;
            memcpy(p + i, &v, 4);
        }
        return;
    }
    for (size_t i = 0; i + 2 <= bytes; i += 2) {
        const float v = ((float)(rnd() & 0xFFFF) / 65536.0f - 0.5f) * 0.1f;
        uint32_t u;
        memcpy(&u, &v, 4);
        const uint16_t h = (uint16_t)(u >> 16);
        memcpy(p + i, &h, 2);
    }
}

typedef struct row {
    int threads;
    const char *shape, *dtype;
    int64_t O, I, M;
    double wbytes, med_gbps, best_gbps, triad_best, triad_med, read_med;
} row;

int main(int argc, char **argv) {
    char threads_arg[64] = "1,2";
    int trials = 11, M = 1;
    int64_t vocab = 50288, d_model = 1024, d_inner = 2048, in_proj = 4384;
    const char *json = NULL;
    int in_cache = 0; /* --in-cache: one copy of each weight (kernel speed from cache) */
    char dtypes_arg[64] = "f32,bf16,q8_0,q8_0x";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--threads") && v) snprintf(threads_arg, sizeof threads_arg, "%s", v), i++;
        else if (!strcmp(a, "--trials") && v) trials = atoi(v), i++;
        else if (!strcmp(a, "--batch") && v) M = atoi(v), i++;
        else if (!strcmp(a, "--vocab") && v) vocab = atoll(v), i++;
        else if (!strcmp(a, "--d-model") && v) d_model = atoll(v), i++;
        else if (!strcmp(a, "--d-inner") && v) d_inner = atoll(v), i++;
        else if (!strcmp(a, "--in-proj") && v) in_proj = atoll(v), i++;
        else if (!strcmp(a, "--json") && v) json = v, i++;
        else if (!strcmp(a, "--in-cache")) in_cache = 1;
        else if (!strcmp(a, "--dtypes") && v) snprintf(dtypes_arg, sizeof dtypes_arg, "%s", v), i++;
        else {
            fprintf(stderr, "usage: %s [--threads 1,2] [--trials N] [--batch M] [--vocab V] "
                            "[--d-model D] [--d-inner E] [--in-proj P] [--in-cache] "
                            "[--dtypes f32,bf16,q8_0,q8_0x] [--json FILE]\n", argv[0]);
            return 2;
        }
    }
    if (trials < 3) trials = 3;
    if (M < 1) M = 1;
    const shape shapes[3] = {{"in_proj", in_proj, d_model},
                             {"out_proj", d_model, d_inner},
                             {"lm_head", vocab, d_model}};
    const mamba2_dtype_t dts[4] = {MAMBA2_DTYPE_F32, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_Q8_0,
                                   MAMBA2_DTYPE_Q8_0};
    const char *dtn[4] = {"f32", "bf16", "q8_0", "q8_0x"};
    int use[4] = {0, 0, 0, 0};
    for (int di = 0; di < 4; di++) { /* whole names in the comma-separated list */
        const size_t n = strlen(dtn[di]);
        for (const char *q = dtypes_arg; (q = strstr(q, dtn[di])) != NULL; q += n)
            if ((q == dtypes_arg || q[-1] == ',') && (q[n] == ',' || q[n] == 0)) use[di] = 1;
    }
    size_t l3 = 0;
    const size_t span = bench_stream_default_bytes(&l3);

    row rows[64];
    int nrows = 0;
    printf("mamba2c-gemv-bench: batch M=%d, %d trials, weights cycled over >= %.0f MiB (L3 %.0f MiB)\n",
           M, trials, (double)span / 1048576.0, (double)l3 / 1048576.0);
    printf("%-3s %-9s %-5s %13s %9s %9s %9s %9s %9s %10s %10s %9s %9s\n", "thr", "shape",
           "dtype", "O x I", "MB/w", "GB/s med", "GB/s best", "triad med", "triad max",
           "med/triad", "best/triad", "read med", "med/read");
    char *save = NULL;
    for (char *tok = strtok_r(threads_arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const int nt = atoi(tok);
        mamba2_context_t *ctx = NULL;
        if (mamba2_context_create(&ctx, MAMBA2_BACKEND_CPU, nt) != MAMBA2_STATUS_OK) {
            fprintf(stderr, "context: %s\n", mamba2_last_error());
            return 1;
        }
        const int row0 = nrows;
        for (int si = 0; si < 3; si++)
            for (int di = 0; di < 4; di++) {
                if (!use[di]) continue;
                const shape *sh = &shapes[si];
                mamba2_linear_options_t lo = mamba2_linear_options_default();
                lo.quantize_x = di == 3;
                const size_t wb = weight_bytes(dts[di], sh->O, sh->I);
                int copies = (int)((span + wb - 1) / wb);
                if (copies < 1 || in_cache) copies = 1;
                unsigned char *w = malloc(wb * (size_t)copies);
                float *x = malloc(sizeof(float) * (size_t)(M * sh->I));
                float *out = malloc(sizeof(float) * (size_t)(M * sh->O));
                if (!w || !x || !out) {
                    fprintf(stderr, "out of memory\n");
                    return 1;
                }
                fill(w, wb * (size_t)copies, dts[di]);
                for (int64_t i = 0; i < M * sh->I; i++) x[i] = (float)(rnd() & 0xFF) / 256.0f - 0.5f;
                const int64_t xsh[2] = {M, sh->I}, osh[2] = {M, sh->O}, wsh[2] = {sh->O, sh->I};
                mamba2_tensor_t xt = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 2, xsh);
                mamba2_tensor_t ot = mamba2_tensor_make(out, MAMBA2_DTYPE_F32, 2, osh);
                double *t = malloc(sizeof(double) * (size_t)trials);
                double *tri = malloc(sizeof(double) * (size_t)trials);
                double *rd = malloc(sizeof(double) * (size_t)trials);
                for (int tr = -1; tr < trials; tr++) { /* trial -1: warm-up */
                    if (tr >= 0) { /* --in-cache: kernel speed, no bandwidth to compare with */
                        tri[tr] = in_cache ? 1.0 : bench_stream_triad(nt, 0, 1).best_gbps;
                        rd[tr] = in_cache ? 1.0 : bench_stream_read(nt, 0, 1).best_gbps;
                    }
                    const double t0 = bench_now();
                    for (int c = 0; c < copies; c++) {
                        mamba2_tensor_t wt = mamba2_tensor_make(w + (size_t)c * wb, dts[di], 2, wsh);
                        if (mamba2_linear_forward(ctx, &ot, &xt, &wt, &lo) != MAMBA2_STATUS_OK) {
                            fprintf(stderr, "linear: %s\n", mamba2_last_error());
                            return 1;
                        }
                    }
                    if (tr >= 0) t[tr] = bench_now() - t0;
                }
                qsort(t, (size_t)trials, sizeof(double), cmp_d);
                qsort(tri, (size_t)trials, sizeof(double), cmp_d);
                qsort(rd, (size_t)trials, sizeof(double), cmp_d);
                const double bytes = (double)wb * copies;
                row *r = &rows[nrows++];
                r->threads = nt;
                r->shape = sh->name;
                r->dtype = dtn[di];
                r->O = sh->O;
                r->I = sh->I;
                r->M = M;
                r->wbytes = (double)wb;
                r->med_gbps = bytes / t[trials / 2] / 1e9;
                r->best_gbps = bytes / t[0] / 1e9;
                r->triad_med = tri[trials / 2];
                r->triad_best = tri[trials - 1];
                r->read_med = rd[trials / 2];
                free(t);
                free(tri);
                free(rd);
                free(w);
                free(x);
                free(out);
            }
        for (int k = row0; k < nrows; k++) {
            const row *r = &rows[k];
            char dims[32];
            snprintf(dims, sizeof dims, "%lldx%lld", (long long)r->O, (long long)r->I);
            printf("%-3d %-9s %-5s %13s %9.2f %9.2f %9.2f %9.2f %9.2f %9.1f%% %9.1f%% %9.2f "
                   "%8.1f%%\n", nt, r->shape, r->dtype, dims, r->wbytes / 1e6, r->med_gbps,
                   r->best_gbps, r->triad_med, r->triad_best, 100.0 * r->med_gbps / r->triad_med,
                   100.0 * r->best_gbps / r->triad_best, r->read_med,
                   100.0 * r->med_gbps / r->read_med);
        }
        mamba2_context_destroy(ctx);
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "cannot write %s\n", json);
            return 1;
        }
        fprintf(f, "[\n");
        for (int k = 0; k < nrows; k++) {
            const row *r = &rows[k];
            fprintf(f,
                    "  {\"threads\": %d, \"shape\": \"%s\", \"dtype\": \"%s\", \"O\": %lld, "
                    "\"I\": %lld, \"M\": %lld, \"weight_bytes\": %.0f, \"gbps_median\": %.3f, "
                    "\"gbps_best\": %.3f, \"triad_best\": %.3f, \"triad_median\": %.3f, "
                    "\"read_median\": %.3f}%s\n",
                    r->threads, r->shape, r->dtype, (long long)r->O, (long long)r->I,
                    (long long)r->M, r->wbytes, r->med_gbps, r->best_gbps, r->triad_best,
                    r->triad_med, r->read_med, k + 1 < nrows ? "," : "");
        }
        fprintf(f, "]\n");
        fclose(f);
    }
    return 0;
}
