/*
 * gpu_bench.c — SSD forward and forward + backward on the CUDA backend's device mode
 * (mamba2_context_create_cuda) over the 52-case shape matrix of the seed benchmarks
 * (../shared/bench_shapes.md), timed with CUDA events on the program's own stream.
 *
 * Inputs: float32, all options on (D [H,P], z, dt_bias, dt_softplus, initial state, final
 * state returned), the distributions of bench/side_by_side.py (x, z ~ N(0,1), dt ~ U(0.01,
 * 0.11), A = -U(0.1,0.5), B, C ~ 0.2 N(0,1), D ~ N(0,1), dt_bias ~ 0.1 N(0,1), init ~ 0.2
 * N(0,1)), tiled from fixed pools (seeded) so that filling large tensors stays cheap.
 * fwdbwd is one forward (saving out_x, as training does) then one backward, every gradient.
 *
 * Per case and mode: one untimed warm-up call (the context's device scratch is allocated
 * there), then up to --reps timed calls within --budget seconds (at least one); the median
 * is printed. Cases whose tensors do not fit in the device's free memory are skipped with a
 * SKIP line; so are the cases left when --deadline seconds have passed.
 *
 * Output, one tab-separated record per line (bench/gpu_check.sh turns it into the table):
 *   DEVICE  <name>  <total bytes>
 *   RESULT  <case>  <fwd|fwdbwd>  <median ms>  <reps>  <flops>  <bytes>  <B,L,H,P,N,Q,G>
 *   SKIP    <case>  <fwd|fwdbwd>  <reason>
 * flops: the recurrence's count of docs/flops.md (4·BLHPN forward, 14·BLHPN forward +
 * backward); bytes: the compulsory traffic, every tensor of the calls read or written once.
 * Exit 0; 77 when there is no CUDA build, driver or device (the message says which); 1 on a
 * failing call.
 *
 * Usage: gpu-bench [--cases all|std|stress|name,name...] [--modes fwd,fwdbwd] [--reps N]
 *                  [--budget S] [--deadline S] [--device K] [--list] [--profile FILE]
 * (--list: print the selected cases, name and B,L,H,P,N,Q,G, and exit)
 * --profile FILE: each case and mode in a context of its own, created with
 * MAMBA2C_CUDA_PROFILE=FILE, so that FILE gets, per case and mode, a "## case mode shape" line
 * and then the library's per-kernel table over the warm-up and timed calls (the events around
 * every launch perturb the RESULT times a little: run it as a pass of its own).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/cu_loader.h"
#include "mamba2c.h"

typedef struct bcase {
    const char *name;
    int64_t B, L, H, P, N, Q, G;
    int std, stress;
} bcase;

static const bcase cases[] = {
    {"tiny", 1, 128, 2, 64, 64, 64, 1, 1, 0},
    {"small", 2, 512, 8, 64, 64, 64, 1, 0, 0},
    {"medium", 4, 2048, 16, 64, 128, 128, 4, 0, 0},
    {"extreme", 8, 4096, 32, 64, 128, 128, 8, 0, 1},
    {"super_extreme", 8, 8192, 32, 64, 128, 128, 8, 0, 1},
    {"ultra_extreme", 8, 16384, 32, 64, 128, 128, 8, 0, 1},
    {"generic_tiny", 1, 16, 1, 8, 8, 8, 1, 1, 0},
    {"generic_tail_l65", 1, 65, 4, 16, 16, 32, 2, 1, 0},
    {"generic_tail_l513", 1, 513, 8, 32, 32, 64, 2, 1, 0},
    {"aligned_p16_n32", 1, 256, 8, 16, 32, 64, 2, 1, 0},
    {"aligned_p32_n64", 1, 256, 8, 32, 64, 64, 2, 1, 0},
    {"cube_n64_c64", 1, 512, 8, 64, 64, 64, 2, 1, 0},
    {"cube_n128_c128", 1, 512, 8, 64, 128, 128, 2, 1, 0},
    {"logical_chunk256", 1, 1024, 16, 64, 128, 256, 4, 1, 0},
    {"logical_chunk512", 1, 2048, 16, 64, 128, 512, 4, 1, 0},
    {"seq_512", 8, 512, 32, 64, 128, 128, 8, 0, 1},
    {"seq_1024", 8, 1024, 32, 64, 128, 128, 8, 1, 0},
    {"seq_2048", 8, 2048, 32, 64, 128, 128, 8, 0, 1},
    {"seq_4096", 8, 4096, 32, 64, 128, 128, 8, 1, 0},
    {"seq_8192", 8, 8192, 32, 64, 128, 128, 8, 0, 1},
    {"seq_16384", 8, 16384, 32, 64, 128, 128, 8, 0, 1},
    {"batch_1", 1, 2048, 16, 64, 128, 128, 4, 1, 0},
    {"batch_2", 2, 2048, 16, 64, 128, 128, 4, 0, 0},
    {"batch_4", 4, 2048, 16, 64, 128, 128, 4, 1, 0},
    {"batch_8", 8, 2048, 16, 64, 128, 128, 4, 0, 0},
    {"batch_16", 16, 2048, 16, 64, 128, 128, 4, 1, 0},
    {"head_4", 4, 2048, 4, 64, 128, 128, 4, 1, 0},
    {"head_8", 4, 2048, 8, 64, 128, 128, 4, 0, 0},
    {"head_16", 4, 2048, 16, 64, 128, 128, 4, 1, 0},
    {"head_32", 4, 2048, 32, 64, 128, 128, 4, 0, 0},
    {"head_64", 4, 2048, 64, 64, 128, 128, 4, 1, 0},
    {"group_1", 4, 2048, 16, 64, 128, 128, 1, 1, 0},
    {"group_2", 4, 2048, 16, 64, 128, 128, 2, 0, 0},
    {"group_4", 4, 2048, 16, 64, 128, 128, 4, 1, 0},
    {"group_8", 4, 2048, 16, 64, 128, 128, 8, 0, 0},
    {"group_16", 4, 2048, 16, 64, 128, 128, 16, 1, 0},
    {"headdim_16", 2, 1024, 16, 16, 64, 64, 4, 1, 0},
    {"headdim_32", 2, 1024, 16, 32, 64, 64, 4, 0, 0},
    {"headdim_64", 2, 1024, 16, 64, 64, 64, 4, 1, 0},
    {"headdim_128", 2, 1024, 16, 128, 64, 64, 4, 1, 0},
    {"dstate_16", 2, 1024, 16, 64, 16, 64, 4, 1, 0},
    {"dstate_32", 2, 1024, 16, 64, 32, 64, 4, 0, 0},
    {"dstate_64", 2, 1024, 16, 64, 64, 64, 4, 1, 0},
    {"dstate_128", 2, 1024, 16, 64, 128, 64, 4, 1, 0},
    {"chunk_16", 2, 2048, 16, 64, 128, 16, 4, 1, 0},
    {"chunk_32", 2, 2048, 16, 64, 128, 32, 4, 0, 0},
    {"chunk_64", 2, 2048, 16, 64, 128, 64, 4, 1, 0},
    {"chunk_128", 2, 2048, 16, 64, 128, 128, 4, 1, 0},
    {"chunk_256", 2, 2048, 16, 64, 128, 256, 4, 0, 0},
    {"chunk_512", 2, 2048, 16, 64, 128, 512, 4, 1, 0},
    {"heavy_h128", 8, 4096, 128, 64, 64, 64, 32, 0, 1},
    {"heavy_h256", 8, 4096, 256, 64, 64, 64, 64, 0, 1},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static tcu cu;

/* ---- input pools ---------------------------------------------------------------------- */

#define POOL (1 << 20) /* elements per pool; tensors tile them */
enum { P_N1, P_N02, P_N01, P_DT, P_A, NPOOLS };
static float *pools[NPOOLS];

static uint64_t rng = 20260801u;
static double urand(void) { /* splitmix64 -> [0, 1) */
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void) {
    const double u = urand(), v = urand();
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}
static int make_pools(void) {
    for (int k = 0; k < NPOOLS; k++) {
        if (!(pools[k] = malloc(sizeof(float) * POOL))) return 0;
        for (int i = 0; i < POOL; i++) {
            double v;
            switch (k) {
            case P_N1: v = nrand(); break;
            case P_N02: v = 0.2 * nrand(); break;
            case P_N01: v = 0.1 * nrand(); break;
            case P_DT: v = 0.01 + 0.1 * urand(); break;
            default: v = -(0.1 + 0.4 * urand()); break;
            }
            pools[k][i] = (float)v;
        }
    }
    return 1;
}

/* ---- device tensors ------------------------------------------------------------------- */

enum { T_X, T_DT, T_A, T_B, T_C, T_D, T_Z, T_DTB, T_INIT, /* inputs */
       T_OUT, T_FINAL, T_OUTX, T_DOUT, T_DFINAL, /* forward outputs, backward inputs */
       T_DX, T_DDT, T_DA, T_DB, T_DC, T_DD, T_DZ, T_DDTB, T_DINIT, NT };
static const int t_pool[T_DFINAL + 1] = {P_N1, P_DT, P_A, P_N02, P_N02, P_N1, P_N1, P_N01,
                                         P_N02, -1, -1, -1, P_N1, P_N02};

typedef struct tset {
    tcu_ptr mem[NT];
    mamba2_tensor_t t[NT];
    size_t bytes[NT];
} tset;

static void shapes(const bcase *c, int id, int *rank, int64_t s[4]) {
    const int64_t B = c->B, L = c->L, H = c->H, P = c->P, N = c->N, G = c->G;
    switch (id) {
    case T_X: case T_Z: case T_OUT: case T_OUTX: case T_DOUT: case T_DX: case T_DZ:
        *rank = 4, s[0] = B, s[1] = L, s[2] = H, s[3] = P; break;
    case T_DT: case T_DDT: *rank = 3, s[0] = B, s[1] = L, s[2] = H; break;
    case T_A: case T_DTB: case T_DA: case T_DDTB: *rank = 1, s[0] = H; break;
    case T_B: case T_C: case T_DB: case T_DC:
        *rank = 4, s[0] = B, s[1] = L, s[2] = G, s[3] = N; break;
    case T_D: case T_DD: *rank = 2, s[0] = H, s[1] = P; break;
    default: *rank = 4, s[0] = B, s[1] = H, s[2] = P, s[3] = N; break; /* states */
    }
}

static size_t case_bytes(const bcase *c, int nt) {
    size_t tot = 0;
    for (int id = 0; id < nt; id++) {
        int r;
        int64_t s[4];
        shapes(c, id, &r, s);
        size_t n = 4;
        for (int i = 0; i < r; i++) n *= (size_t)s[i];
        tot += n;
    }
    return tot;
}

static void free_set(tset *ts) {
    for (int id = 0; id < NT; id++)
        if (ts->mem[id]) cu.cuMemFree_v2(ts->mem[id]);
    memset(ts, 0, sizeof *ts);
}

/* Allocate tensors 0..nt-1 and fill the inputs; 0 when the device is out of memory. */
static int alloc_set(const bcase *c, int nt, tset *ts, unsigned salt) {
    memset(ts, 0, sizeof *ts);
    for (int id = 0; id < nt; id++) {
        int r;
        int64_t s[4];
        shapes(c, id, &r, s);
        size_t n = 1;
        for (int i = 0; i < r; i++) n *= (size_t)s[i];
        ts->bytes[id] = n * 4;
        if (cu.cuMemAlloc_v2(&ts->mem[id], n * 4 + 256)) {
            ts->mem[id] = 0;
            free_set(ts);
            return 0;
        }
        ts->t[id] = mamba2_tensor_make((void *)(uintptr_t)ts->mem[id], MAMBA2_DTYPE_F32, r, s);
        if (id > T_DFINAL || t_pool[id] < 0) continue;
        const float *pool = pools[t_pool[id]];
        size_t at = 0, start = ((size_t)id * 7919u + salt * 104729u) % (POOL / 2);
        while (at < n) { /* tile the pool, from a tensor-dependent start */
            const size_t k = n - at < (size_t)POOL - start ? n - at : (size_t)POOL - start;
            cu.cuMemcpyHtoD_v2(ts->mem[id] + at * 4, pool + start, k * 4);
            at += k;
            start = 0;
        }
    }
    return 1;
}

/* ---- timing ------------------------------------------------------------------------------ */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static mamba2_status_t call(mamba2_context_t *ctx, const bcase *c, tset *ts, int bwd,
                            int use_outx) {
    const mamba2_tensor_t *t = ts->t;
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.chunk_size = c->Q;
    o.D = &t[T_D];
    o.z = &t[T_Z];
    o.dt_bias = &t[T_DTB];
    o.initial_state = &t[T_INIT];
    o.dt_softplus = 1;
    const mamba2_tensor_t *outx = bwd && use_outx ? &t[T_OUTX] : NULL;
    mamba2_status_t st = mamba2_ssd_forward(ctx, &t[T_OUT], outx, &t[T_FINAL], &t[T_X], &t[T_DT],
                                            &t[T_A], &t[T_B], &t[T_C], &o, NULL, 0);
    if (st != MAMBA2_STATUS_OK || !bwd) return st;
    mamba2_ssd_grads_t g = {sizeof g,  &t[T_DX], &t[T_DDT], &t[T_DA],   &t[T_DB],
                            &t[T_DC],  &t[T_DD], &t[T_DZ],  &t[T_DDTB], &t[T_DINIT]};
    return mamba2_ssd_backward(ctx, &g, &t[T_DOUT], &t[T_DFINAL], &t[T_X], &t[T_DT], &t[T_A],
                               &t[T_B], &t[T_C], outx, &o, NULL, 0);
}

/* Median ms of up to reps timed calls within budget_s (after one warm-up); -1 on failure. */
static double time_case(mamba2_context_t *ctx, tcu_handle stream, const bcase *c, tset *ts,
                        int bwd, int reps, double budget_s, int *nrep, int *use_outx) {
    tcu_handle e0 = NULL, e1 = NULL;
    cu.cuEventCreate(&e0, 0);
    cu.cuEventCreate(&e1, 0);
    float *ms = malloc(sizeof(float) * (size_t)(reps > 0 ? reps : 1));
    double med = -1;
    const double t0 = now_s();
    mamba2_status_t st = call(ctx, c, ts, bwd, *use_outx);
    if (st != MAMBA2_STATUS_OK && bwd && *use_outx) { /* without out_x: y recomputed */
        *use_outx = 0;
        st = call(ctx, c, ts, bwd, 0);
    }
    cu.cuStreamSynchronize(stream);
    const double warm = now_s() - t0;
    int n = 0;
    if (st == MAMBA2_STATUS_OK && ms) {
        double spent = 0;
        for (n = 0; n < reps && (n == 0 || spent + warm <= budget_s);) {
            cu.cuEventRecord(e0, stream);
            st = call(ctx, c, ts, bwd, *use_outx);
            cu.cuEventRecord(e1, stream);
            if (st != MAMBA2_STATUS_OK) break;
            cu.cuEventSynchronize(e1);
            cu.cuEventElapsedTime(&ms[n], e0, e1);
            spent += ms[n++] * 1e-3;
        }
        if (st == MAMBA2_STATUS_OK && n > 0) {
            qsort(ms, (size_t)n, sizeof *ms, cmp_f);
            med = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
        }
    }
    if (st != MAMBA2_STATUS_OK)
        fprintf(stderr, "gpu-bench: %s %s: %s: %s\n", c->name, bwd ? "fwdbwd" : "fwd",
                mamba2_status_string(st), mamba2_last_error());
    cu.cuEventDestroy_v2(e0);
    cu.cuEventDestroy_v2(e1);
    free(ms);
    *nrep = n;
    return med;
}

/* name is one of the comma-separated items of list */
static int has_item(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

static int selected(const bcase *c, const char *sel) {
    if (!strcmp(sel, "all")) return 1;
    if (!strcmp(sel, "std")) return c->std;
    if (!strcmp(sel, "stress")) return c->stress;
    return has_item(sel, c->name);
}

int main(int argc, char **argv) {
    const char *sel = "all", *modes = "fwd,fwdbwd";
    int reps = 20, device = 0, list = 0;
    const char *profile = NULL;
    double budget = 1.0, deadline = 240;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--list")) {
            list = 1;
        } else if (v && !strcmp(a, "--cases")) sel = v, i++;
        else if (v && !strcmp(a, "--modes")) modes = v, i++;
        else if (v && !strcmp(a, "--reps")) reps = atoi(v), i++;
        else if (v && !strcmp(a, "--budget")) budget = atof(v), i++;
        else if (v && !strcmp(a, "--deadline")) deadline = atof(v), i++;
        else if (v && !strcmp(a, "--device")) device = atoi(v), i++;
        else if (v && !strcmp(a, "--profile")) profile = v, i++;
        else {
            fprintf(stderr, "usage: gpu-bench [--cases all|std|stress|a,b] [--modes fwd,fwdbwd] "
                            "[--reps N] [--budget S] [--deadline S] [--device K] [--list] "
                            "[--profile FILE]\n");
            return 2;
        }
    }
    if (list) { /* the selected cases, name and shape: bench/gpu_check.sh's case list */
        for (int k = 0; k < NCASES; k++)
            if (selected(&cases[k], sel))
                printf("%s\t%lld,%lld,%lld,%lld,%lld,%lld,%lld\n", cases[k].name,
                       (long long)cases[k].B, (long long)cases[k].L, (long long)cases[k].H,
                       (long long)cases[k].P, (long long)cases[k].N, (long long)cases[k].Q,
                       (long long)cases[k].G);
        return 0;
    }
    if (reps < 1) reps = 1;
    const int do_fwd = has_item(modes, "fwd"), do_bwd = has_item(modes, "fwdbwd");
    /* the library first: its message says whether CUDA is built in, a driver or a device is
     * missing */
    mamba2_context_t *probe = NULL;
    mamba2_status_t st = mamba2_context_create_cuda(&probe, device, NULL);
    if (st != MAMBA2_STATUS_OK) {
        printf("%s: %s\n", mamba2_status_string(st), mamba2_last_error());
        return st == MAMBA2_STATUS_BACKEND_UNAVAILABLE ? 77 : 1;
    }
    mamba2_context_destroy(probe);
    if (!tcu_open(&cu, device)) {
        printf("BACKEND_UNAVAILABLE: the program's own driver calls (libcuda.so.1) failed\n");
        return 77;
    }
    tcu_handle stream = NULL;
    mamba2_context_t *ctx = NULL;
    if (cu.cuStreamCreate(&stream, 1) ||
        (st = mamba2_context_create_cuda(&ctx, device, stream)) != MAMBA2_STATUS_OK) {
        printf("setup failed: %s\n", mamba2_last_error());
        return 1;
    }
    if (!make_pools()) {
        printf("setup failed: out of host memory\n");
        return 1;
    }
    char name[128] = "";
    size_t total = 0;
    cu.cuDeviceGetName(name, (int)sizeof name - 1, cu.device);
    cu.cuDeviceTotalMem_v2(&total, cu.device);
    printf("DEVICE\t%s\t%zu\n", name, total);
    if (profile) setenv("MAMBA2C_CUDA_PROFILE", profile, 1); /* the contexts made from here on */
    fflush(stdout);
    const double start = now_s();
    int failed = 0;
    for (int k = 0; k < NCASES; k++) {
        const bcase *c = &cases[k];
        if (!selected(c, sel)) continue;
        const int nt = do_bwd ? NT : T_OUTX;
        const int64_t BLHPN = c->B * c->L * c->H * c->P * c->N;
        size_t fr = 0, tot = 0;
        cu.cuMemGetInfo_v2(&fr, &tot);
        const size_t need = case_bytes(c, nt);
        const char *skip = NULL;
        if (now_s() - start > deadline) skip = "deadline of the run passed";
        /* tensors, plus as much again for the context's scratch (a bound, not a measurement) */
        else if (need > fr / 2) skip = "tensors + scratch may not fit in free device memory";
        tset ts;
        if (!skip && !alloc_set(c, nt, &ts, (unsigned)k)) skip = "out of device memory";
        for (int bwd = 0; bwd < 2; bwd++) {
            if (!(bwd ? do_bwd : do_fwd)) continue;
            const char *mode = bwd ? "fwdbwd" : "fwd";
            if (skip) {
                printf("SKIP\t%s\t%s\t%s\n", c->name, mode, skip);
                continue;
            }
            int n = 0, use_outx = 1;
            mamba2_context_t *run = ctx;
            if (profile) { /* a context of its own: its report is this case's */
                FILE *f = fopen(profile, "a");
                if (f) {
                    const char *tc = getenv("MAMBA2C_CUDA_TC");
                    fprintf(f, "## %s %s %lld,%lld,%lld,%lld,%lld,%lld,%lld MAMBA2C_CUDA_TC=%s\n",
                            c->name, mode, (long long)c->B, (long long)c->L, (long long)c->H,
                            (long long)c->P, (long long)c->N, (long long)c->Q, (long long)c->G,
                            tc ? tc : "");
                    fclose(f);
                }
                if ((st = mamba2_context_create_cuda(&run, device, stream)) != MAMBA2_STATUS_OK) {
                    printf("SKIP\t%s\t%s\tprofile context: %s\n", c->name, mode,
                           mamba2_last_error());
                    failed = 1;
                    continue;
                }
            }
            const double med = time_case(run, stream, c, &ts, bwd, reps, budget, &n, &use_outx);
            if (run != ctx) mamba2_context_destroy(run);
            if (med < 0) {
                printf("SKIP\t%s\t%s\tthe call failed (see stderr)\n", c->name, mode);
                failed = 1;
                continue;
            }
            /* compulsory bytes: forward reads its 9 inputs, writes out + final; forward +
             * backward also writes out_x (when saved), reads the inputs again with dout,
             * dfinal (and out_x) and writes every gradient */
            size_t bytes = case_bytes(c, T_OUTX);
            if (bwd) bytes += case_bytes(c, T_OUTX) - case_bytes(c, T_OUT) /* inputs again */ +
                              (case_bytes(c, NT) - case_bytes(c, T_DX)) /* gradients */ +
                              (case_bytes(c, T_DFINAL + 1) - case_bytes(c, T_DOUT)) +
                              (use_outx ? 2 * (case_bytes(c, T_DOUT) - case_bytes(c, T_OUTX)) : 0);
            printf("RESULT\t%s\t%s\t%.4f\t%d\t%.6g\t%zu\t%lld,%lld,%lld,%lld,%lld,%lld,%lld\n",
                   c->name, mode, med, n, (double)(bwd ? 14 : 4) * (double)BLHPN, bytes,
                   (long long)c->B, (long long)c->L, (long long)c->H, (long long)c->P,
                   (long long)c->N, (long long)c->Q, (long long)c->G);
            fflush(stdout);
        }
        if (!skip) free_set(&ts);
    }
    mamba2_context_destroy(ctx);
    cu.cuStreamDestroy_v2(stream);
    for (int k = 0; k < NPOOLS; k++) free(pools[k]);
    return failed;
}
