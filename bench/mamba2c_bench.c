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
 * This file holds the case matrix, the options and main; the SSD cases are in bench_ssd.c,
 * the memory-bound ops in bench_ops.c, the generator, pool, timer and output in bench_run.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_run.h"

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
