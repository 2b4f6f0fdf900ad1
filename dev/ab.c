/*
 * dev/ab.c — two builds of the library in one process, their SSD forward and backward called
 * in alternation on the same inputs: the per-call times of both (medians, and the median of
 * the paired ratios) and whether their outputs and gradients are bitwise equal.
 *
 * Why: this machine is a VM whose cores are shared; its speed swings by up to 1.6x for
 * minutes at a time, so two builds timed in separate runs cannot be told apart below a few
 * per cent. Called alternately (A B, B A, A B, ...) in one process, both see the same host
 * state (docs/cpu_ssd_history.md). A development tool, not a benchmark of the library
 * (bench/mamba2c-bench is that).
 *
 *   git worktree add /tmp/old <rev> && cmake -S /tmp/old -B /tmp/old/build && \
 *       cmake --build /tmp/old/build -j2 --target mamba2c
 *   cc -O2 -Iinclude dev/ab.c -ldl -lm -o /tmp/ab
 *   /tmp/ab /tmp/old/build/libmamba2c.so build/libmamba2c.so 4,2048,16,64,128,128,4 [reps]
 *
 * Every option is on (D [H,P], z, dt_bias, softplus, initial and final state; the backward
 * reads out_x, which each build's own training forward wrote, and writes all nine gradients
 * and dinitial_state), inputs as mamba2c-bench draws them. Environment: THREADS (default 2;
 * THREADS_A / THREADS_B per build: the same library with 1 and 2 threads is a scaling test),
 * ISA (passed to mamba2_context_force_isa, e.g. avx2), PASS=fwd|bwd (default both),
 * DTYPE_A / DTYPE_B = f32|bf16|f16 (the activations' storage of each build, default f32: the
 * same library twice with DTYPE_B=bf16 times bf16 against float32; outputs are then compared
 * as floats, relative to the largest |A|).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "mamba2c.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct api {
    void *so;
    __typeof__(mamba2_context_create) *context_create;
    __typeof__(mamba2_context_force_isa) *force_isa;
    __typeof__(mamba2_last_error) *last_error;
    __typeof__(mamba2_tensor_make) *tensor_make;
    __typeof__(mamba2_ssd_options_default) *options_default;
    __typeof__(mamba2_ssd_forward_workspace_size) *fwd_ws;
    __typeof__(mamba2_ssd_forward) *fwd;
    __typeof__(mamba2_ssd_backward_workspace_size) *bwd_ws;
    __typeof__(mamba2_ssd_backward) *bwd;
    mamba2_context_t *ctx;
} api;

enum { X, DT, AA, BM, CM, Z, DD, DTB, INIT, DOUT, DFIN, OUTX, /* inputs */
       OUT, FIN, DX, DDT, DA, DBM, DCM, DDD, DZ, DDTB, DINIT, NT };

/* activation tensors (the storage dtype applies), the rest float32 */
static const int is_act[NT] = {[X] = 1, [DT] = 1, [BM] = 1, [CM] = 1, [Z] = 1, [DOUT] = 1,
                               [OUTX] = 1, [OUT] = 1, [DX] = 1, [DDT] = 1, [DBM] = 1,
                               [DCM] = 1, [DZ] = 1};

typedef struct run {
    mamba2_tensor_t t[NT];
    mamba2_ssd_options_t o;
    mamba2_ssd_grads_t g;
} run;

static void *sym(void *so, const char *name) {
    void *p = dlsym(so, name);
    if (!p) {
        fprintf(stderr, "ab: %s: %s\n", name, dlerror());
        exit(2);
    }
    return p;
}

static void load(api *a, const char *path, int threads) {
    a->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!a->so) {
        fprintf(stderr, "ab: %s\n", dlerror());
        exit(2);
    }
    /* both builds must speak this header's ABI (a pre-v1 build has no mamba2_abi_version) */
    uint32_t (*abi)(void) = (uint32_t(*)(void))dlsym(a->so, "mamba2_abi_version");
    if (!abi || abi() != MAMBA2C_ABI_VERSION) {
        fprintf(stderr, "ab: %s is not an ABI %d build of mamba2c\n", path, MAMBA2C_ABI_VERSION);
        exit(2);
    }
    a->context_create = sym(a->so, "mamba2_context_create");
    a->force_isa = sym(a->so, "mamba2_context_force_isa");
    a->last_error = sym(a->so, "mamba2_last_error");
    a->tensor_make = sym(a->so, "mamba2_tensor_make");
    a->options_default = sym(a->so, "mamba2_ssd_options_default");
    a->fwd_ws = sym(a->so, "mamba2_ssd_forward_workspace_size");
    a->fwd = sym(a->so, "mamba2_ssd_forward");
    a->bwd_ws = sym(a->so, "mamba2_ssd_backward_workspace_size");
    a->bwd = sym(a->so, "mamba2_ssd_backward");
    if (a->context_create(&a->ctx, MAMBA2_BACKEND_CPU, threads) != MAMBA2_STATUS_OK ||
        (getenv("ISA") && a->force_isa(a->ctx, getenv("ISA")) != MAMBA2_STATUS_OK)) {
        fprintf(stderr, "ab: %s: %s\n", path, a->last_error());
        exit(2);
    }
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double unif(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
/* n values: normal(0, sd) when sd != 0, else uniform [lo, hi) */
static float *fill(int64_t n, double sd, double lo, double hi) {
    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
    if (!p) exit(3);
    for (int64_t i = 0; i < n; i++)
        p[i] = sd != 0.0 ? (float)(sd * sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()))
                         : (float)(lo + (hi - lo) * unif());
    return p;
}

static mamba2_dtype_t dtype_env(const char *name) {
    const char *v = getenv(name);
    if (!v || !strcmp(v, "f32")) return MAMBA2_DTYPE_F32;
    if (!strcmp(v, "bf16")) return MAMBA2_DTYPE_BF16;
    if (!strcmp(v, "f16")) return MAMBA2_DTYPE_F16;
    fprintf(stderr, "ab: %s=%s: f32, bf16 or f16\n", name, v);
    exit(2);
}
static uint16_t to_bf16(float f) { /* round to nearest even (no NaN among the inputs) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static float from_half(const void *p, int64_t i, mamba2_dtype_t dt) {
    if (dt == MAMBA2_DTYPE_F32) return ((const float *)p)[i];
    if (dt == MAMBA2_DTYPE_F16) return (float)((const _Float16 *)p)[i];
    const uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* src (float32) in dtype dt, in a new buffer */
static void *convert(const float *src, int64_t n, mamba2_dtype_t dt) {
    if (dt == MAMBA2_DTYPE_F32) return (void *)src;
    uint16_t *p = aligned_alloc(64, (size_t)((n * 2 + 63) / 64 * 64));
    if (!p) exit(3);
    for (int64_t i = 0; i < n; i++) {
        if (dt == MAMBA2_DTYPE_BF16) {
            p[i] = to_bf16(src[i]);
        } else {
            const _Float16 h = (_Float16)src[i];
            memcpy(&p[i], &h, 2);
        }
    }
    return p;
}

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static size_t elsize(mamba2_dtype_t dt) { return dt == MAMBA2_DTYPE_F32 ? 4 : 2; }

static int64_t numel(const mamba2_tensor_t *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s LIB_A.so LIB_B.so B,L,H,P,N,Q,G [reps]\n", argv[0]);
        return 2;
    }
    int64_t s[7];
    if (sscanf(argv[3], "%ld,%ld,%ld,%ld,%ld,%ld,%ld", &s[0], &s[1], &s[2], &s[3], &s[4], &s[5],
               &s[6]) != 7) {
        fprintf(stderr, "ab: shape B,L,H,P,N,Q,G\n");
        return 2;
    }
    const int reps = argc > 4 ? atoi(argv[4]) : 11;
    const int threads = getenv("THREADS") ? atoi(getenv("THREADS")) : 2;
    const int thr[2] = {getenv("THREADS_A") ? atoi(getenv("THREADS_A")) : threads,
                        getenv("THREADS_B") ? atoi(getenv("THREADS_B")) : threads};
    const char *pass = getenv("PASS") ? getenv("PASS") : "both";
    const int do_f = strcmp(pass, "bwd") != 0, do_b = strcmp(pass, "fwd") != 0;
    const int64_t B = s[0], L = s[1], H = s[2], P = s[3], N = s[4], G = s[6];
    const int64_t shx[4] = {B, L, H, P}, shdt[3] = {B, L, H}, shh[1] = {H}, shbc[4] = {B, L, G, N},
                  shd[2] = {H, P}, shst[4] = {B, H, P, N};
    const int64_t *shp[NT] = {shx, shdt, shh, shbc, shbc, shx, shd, shh, shst, shx, shst, shx,
                              shx, shst, shx, shdt, shh, shbc, shbc, shd, shx, shh, shst};
    const int rk[NT] = {4, 3, 1, 4, 4, 4, 2, 1, 4, 4, 4, 4, 4, 4, 4, 3, 1, 4, 4, 2, 4, 1, 4};
    api lib[2];
    load(&lib[0], argv[1], thr[0]);
    load(&lib[1], argv[2], thr[1]);

    /* inputs drawn once (float32, then stored in each build's dtype), outputs per build;
     * distributions as mamba2c-bench's */
    run r[2];
    const mamba2_dtype_t adt[2] = {dtype_env("DTYPE_A"), dtype_env("DTYPE_B")};
    const double sd[OUT] = {1, 0, 0, 0.2, 0.2, 1, 1, 0.1, 0.2, 1, 0.2, 0};
    const double lo[OUT] = {0, 0.01, -0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    const double hi[OUT] = {0, 0.11, -0.1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < NT; i++) {
        int64_t n = 1;
        for (int d = 0; d < rk[i]; d++) n *= shp[i][d];
        const float *in = i < OUTX ? fill(n, sd[i], lo[i], hi[i]) : NULL;
        for (int v = 0; v < 2; v++) {
            const mamba2_dtype_t dt = is_act[i] ? adt[v] : MAMBA2_DTYPE_F32;
            /* outputs and out_x: garbage until written */
            void *p = in ? convert(in, n, dt) : convert(fill(n, 0, -1, 1), n, dt);
            r[v].t[i] = lib[0].tensor_make(p, dt, rk[i], shp[i]);
        }
    }
    size_t wsz = 0;
    for (int v = 0; v < 2; v++) {
        mamba2_tensor_t *t = r[v].t;
        r[v].o = lib[v].options_default();
        r[v].o.chunk_size = s[5];
        r[v].o.D = &t[DD];
        r[v].o.z = &t[Z];
        r[v].o.dt_bias = &t[DTB];
        r[v].o.initial_state = &t[INIT];
        r[v].o.dt_softplus = 1;
        r[v].g = (mamba2_ssd_grads_t){sizeof r[v].g, &t[DX], &t[DDT], &t[DA], &t[DBM], &t[DCM],
                                      &t[DDD], &t[DZ], &t[DDTB], &t[DINIT]};
        size_t wf = 0, wb = 0;
        if (lib[v].fwd_ws(lib[v].ctx, &t[OUT], &t[OUTX], &t[FIN], &t[X], &t[DT], &t[AA], &t[BM],
                          &t[CM], &r[v].o, &wf) != MAMBA2_STATUS_OK ||
            lib[v].bwd_ws(lib[v].ctx, &r[v].g, &t[DOUT], &t[DFIN], &t[X], &t[DT], &t[AA], &t[BM],
                          &t[CM], &t[OUTX], &r[v].o, &wb) != MAMBA2_STATUS_OK) {
            fprintf(stderr, "ab: %s\n", lib[v].last_error());
            return 2;
        }
        if (wf > wsz) wsz = wf;
        if (wb > wsz) wsz = wb;
    }
    void *ws = aligned_alloc(64, (wsz + 63) / 64 * 64 + 64);
    /* out_x, an input of the backward: each build's training forward */
    for (int v = 0; v < 2; v++) {
        mamba2_tensor_t *t = r[v].t;
        if (lib[v].fwd(lib[v].ctx, &t[OUT], &t[OUTX], &t[FIN], &t[X], &t[DT], &t[AA], &t[BM],
                       &t[CM], &r[v].o, ws, wsz) != MAMBA2_STATUS_OK) {
            fprintf(stderr, "ab: %s\n", lib[v].last_error());
            return 2;
        }
    }
    /* timed below: the inference forward (no out_x), the backward reading out_x */

    double *tm[2][2], *ratio[2];
    for (int p = 0; p < 2; p++) {
        ratio[p] = calloc((size_t)reps, sizeof(double));
        for (int v = 0; v < 2; v++) tm[p][v] = calloc((size_t)reps, sizeof(double));
    }
    for (int i = -1; i < reps; i++) /* i = -1: warm-up */
        for (int p = 0; p < 2; p++) {
            if ((p == 0 && !do_f) || (p == 1 && !do_b)) continue;
            for (int k = 0; k < 2; k++) {
                const int v = (i & 1) ? 1 - k : k; /* A B, B A, ... */
                mamba2_tensor_t *t = r[v].t;
                mamba2_ssd_options_t o = r[v].o;
                mamba2_status_t st;
                const double t0 = now();
                if (p == 0) {
                    st = lib[v].fwd(lib[v].ctx, &t[OUT], NULL, &t[FIN], &t[X], &t[DT], &t[AA],
                                    &t[BM], &t[CM], &o, ws, wsz);
                } else {
                    st = lib[v].bwd(lib[v].ctx, &r[v].g, &t[DOUT], &t[DFIN], &t[X], &t[DT], &t[AA],
                                    &t[BM], &t[CM], &t[OUTX], &o, ws, wsz);
                }
                const double dtm = now() - t0;
                if (st != MAMBA2_STATUS_OK) {
                    fprintf(stderr, "ab: %s\n", lib[v].last_error());
                    return 2;
                }
                if (i >= 0) tm[p][v][i] = dtm * 1e3;
            }
            if (i >= 0) ratio[p][i] = tm[p][1][i] / tm[p][0][i];
        }

    static const char *names[NT] = {[OUT] = "out", [FIN] = "final", [DX] = "dx", [DDT] = "ddt",
                                    [DA] = "dA", [DBM] = "dBm", [DCM] = "dCm", [DDD] = "dD",
                                    [DZ] = "dz", [DDTB] = "ddt_bias", [DINIT] = "dinit"};
    static const char *dn[4] = {"f32", "f64", "bf16", "f16"};
    printf("A %s (%s, %d threads)\nB %s (%s, %d threads)\nshape [%s], %d alternating pairs\n",
           argv[1], dn[adt[0]], thr[0], argv[2], dn[adt[1]], thr[1], argv[3], reps);
    for (int p = 0; p < 2; p++) {
        if ((p == 0 && !do_f) || (p == 1 && !do_b)) continue;
        const double ma = median(tm[p][0], reps), mb = median(tm[p][1], reps);
        printf("%s  A %8.3f ms  B %8.3f ms  B/A %.4f (median of paired ratios %.4f)\n",
               p ? "bwd" : "fwd", ma, mb, mb / ma, median(ratio[p], reps));
        const int i0 = p ? DX : OUT, i1 = p ? NT : DX;
        for (int i = i0; i < i1; i++) {
            const mamba2_tensor_t *ta = &r[0].t[i], *tb = &r[1].t[i];
            const int64_t n = numel(ta);
            double dmax = 0, amax = 0;
            for (int64_t e = 0; e < n; e++) {
                const double a = from_half(ta->data, e, ta->dtype);
                const double d = fabs(a - (double)from_half(tb->data, e, tb->dtype));
                dmax = d > dmax || d != d ? d : dmax;
                amax = fabs(a) > amax ? fabs(a) : amax;
            }
            if (ta->dtype == tb->dtype &&
                memcmp(ta->data, tb->data, (size_t)n * elsize(ta->dtype)) == 0)
                printf("   %-8s bitwise equal\n", names[i]);
            else
                printf("   %-8s differs: max |A-B| %.3g, relative to max |A| %.3g\n", names[i], dmax,
                       amax > 0 ? dmax / amax : dmax);
        }
    }
    return 0;
}
