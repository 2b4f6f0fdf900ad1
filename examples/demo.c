/*
 * demo.c — the main job: a real Mamba-2 SSD layer workload, forward + backward, on the CPU.
 *
 * Shape [B,L,H,P,N,Q,G] = [4,2048,16,64,128,128,4] with every option a Mamba-2 block uses:
 * D [H,P], z gating, dt_bias + softplus, an initial state, the final state returned and its
 * gradient fed back. It times the optimized CPU backend (median of repeated runs), then
 * checks one slice of the problem (batch 0, the heads of group 0) against the float64
 * reference backend, and prints the normalised errors, the time and GFLOP/s.
 *
 * Flop counts (docs/flops.md): forward 4·B·L·H·P·N, backward 10·B·L·H·P·N (the state
 * update, output, and the four gradient contractions of the reverse recurrence).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mamba2c.h"

#define CHECK(call)                                                                        \
    do {                                                                                   \
        mamba2_status_t st_ = (call);                                                      \
        if (st_ != MAMBA2_STATUS_OK) {                                                     \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,      \
                    mamba2_status_string(st_), mamba2_last_error());                       \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* ---- deterministic inputs (splitmix64 + Box-Muller) ---- */
static uint64_t rng_state = 20260801;
static double urand(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }
/* Tensors 64-byte aligned, as PyTorch allocates them: rows of P floats then start on cache
 * lines (malloc's 16-byte alignment costs the AVX-512 kernels a split line per row). */
static float *alloc_aligned(int64_t n) {
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}
static float *alloc_fill(int64_t n, double scale, double lo, double hi, int normal) {
    float *p = alloc_aligned(n);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(normal ? scale * nrand() : lo + (hi - lo) * urand());
    return p;
}
static float *alloc_zero(int64_t n) {
    float *p = alloc_aligned(n);
    memset(p, 0, (size_t)(n > 0 ? n : 1) * sizeof(float));
    return p;
}
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ‖a − b‖ / ‖b‖ over a strided 4-d view (element strides) of two buffers with equal layout. */
static double nerr4(const float *a, const float *b, const int64_t *shape, const int64_t *st) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < shape[0]; i++)
        for (int64_t j = 0; j < shape[1]; j++)
            for (int64_t k = 0; k < shape[2]; k++)
                for (int64_t l = 0; l < shape[3]; l++) {
                    int64_t o = i * st[0] + j * st[1] + k * st[2] + l * st[3];
                    double d = (double)a[o] - (double)b[o];
                    num += d * d;
                    den += (double)b[o] * b[o];
                }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct problem {
    int64_t B, L, H, P, N, Q, G;
    float *x, *dt, *A, *Bm, *Cm, *D, *z, *dt_bias, *init, *dout, *dfinal;
} problem;

/* Tensors of a (sub)problem that reads a window of the full buffers: batch rows [b0, b0+nb),
 * heads [h0, h0+nh), groups [g0, g0+ng). Strides are those of the full buffers. */
typedef struct views {
    mamba2_tensor_t x, dt, A, Bm, Cm, D, z, dt_bias, init, dout, dfinal;
    mamba2_tensor_t out, out_x, final, dx, ddt, dA, dBm, dCm, dD, dz, ddt_bias, dinit;
} views;

typedef struct outputs {
    float *out, *out_x, *final, *dx, *ddt, *dA, *dBm, *dCm, *dD, *dz, *ddt_bias, *dinit;
} outputs;

static void make_views(views *v, const problem *p, const outputs *o, int64_t nb, int64_t nh,
                       int64_t ng) {
    const int64_t L = p->L, H = p->H, P = p->P, N = p->N, G = p->G;
    const int64_t sx[4] = {L * H * P, H * P, P, 1}, sdt[3] = {L * H, H, 1}, sbc[4] = {L * G * N, G * N, N, 1},
                  sst[4] = {H * P * N, P * N, N, 1}, sd[2] = {P, 1}, s1[1] = {1};
    const int64_t shx[4] = {nb, L, nh, P}, shdt[3] = {nb, L, nh}, shbc[4] = {nb, L, ng, N},
                  shst[4] = {nb, nh, P, N}, shd[2] = {nh, P}, shh[1] = {nh};
    v->x = mamba2_tensor_make_strided(p->x, MAMBA2_DTYPE_F32, 4, shx, sx);
    v->dt = mamba2_tensor_make_strided(p->dt, MAMBA2_DTYPE_F32, 3, shdt, sdt);
    v->A = mamba2_tensor_make_strided(p->A, MAMBA2_DTYPE_F32, 1, shh, s1);
    v->Bm = mamba2_tensor_make_strided(p->Bm, MAMBA2_DTYPE_F32, 4, shbc, sbc);
    v->Cm = mamba2_tensor_make_strided(p->Cm, MAMBA2_DTYPE_F32, 4, shbc, sbc);
    v->D = mamba2_tensor_make_strided(p->D, MAMBA2_DTYPE_F32, 2, shd, sd);
    v->z = mamba2_tensor_make_strided(p->z, MAMBA2_DTYPE_F32, 4, shx, sx);
    v->dt_bias = mamba2_tensor_make_strided(p->dt_bias, MAMBA2_DTYPE_F32, 1, shh, s1);
    v->init = mamba2_tensor_make_strided(p->init, MAMBA2_DTYPE_F32, 4, shst, sst);
    v->dout = mamba2_tensor_make_strided(p->dout, MAMBA2_DTYPE_F32, 4, shx, sx);
    v->dfinal = mamba2_tensor_make_strided(p->dfinal, MAMBA2_DTYPE_F32, 4, shst, sst);
    v->out = mamba2_tensor_make_strided(o->out, MAMBA2_DTYPE_F32, 4, shx, sx);
    v->out_x = mamba2_tensor_make_strided(o->out_x, MAMBA2_DTYPE_F32, 4, shx, sx);
    v->final = mamba2_tensor_make_strided(o->final, MAMBA2_DTYPE_F32, 4, shst, sst);
    v->dx = mamba2_tensor_make_strided(o->dx, MAMBA2_DTYPE_F32, 4, shx, sx);
    v->ddt = mamba2_tensor_make_strided(o->ddt, MAMBA2_DTYPE_F32, 3, shdt, sdt);
    v->dA = mamba2_tensor_make_strided(o->dA, MAMBA2_DTYPE_F32, 1, shh, s1);
    v->dBm = mamba2_tensor_make_strided(o->dBm, MAMBA2_DTYPE_F32, 4, shbc, sbc);
    v->dCm = mamba2_tensor_make_strided(o->dCm, MAMBA2_DTYPE_F32, 4, shbc, sbc);
    v->dD = mamba2_tensor_make_strided(o->dD, MAMBA2_DTYPE_F32, 2, shd, sd);
    v->dz = mamba2_tensor_make_strided(o->dz, MAMBA2_DTYPE_F32, 4, shx, sx);
    v->ddt_bias = mamba2_tensor_make_strided(o->ddt_bias, MAMBA2_DTYPE_F32, 1, shh, s1);
    v->dinit = mamba2_tensor_make_strided(o->dinit, MAMBA2_DTYPE_F32, 4, shst, sst);
}

static void alloc_outputs(outputs *o, const problem *p) {
    const int64_t B = p->B, L = p->L, H = p->H, P = p->P, N = p->N, G = p->G;
    o->out = alloc_zero(B * L * H * P);
    o->out_x = alloc_zero(B * L * H * P);
    o->final = alloc_zero(B * H * P * N);
    o->dx = alloc_zero(B * L * H * P);
    o->ddt = alloc_zero(B * L * H);
    o->dA = alloc_zero(H);
    o->dBm = alloc_zero(B * L * G * N);
    o->dCm = alloc_zero(B * L * G * N);
    o->dD = alloc_zero(H * P);
    o->dz = alloc_zero(B * L * H * P);
    o->ddt_bias = alloc_zero(H);
    o->dinit = alloc_zero(B * H * P * N);
}
static void free_outputs(outputs *o) {
    float **f = (float **)o;
    for (size_t i = 0; i < sizeof *o / sizeof(float *); i++) free(f[i]);
}

static void run_fwd(mamba2_context_t *ctx, views *v, const mamba2_ssd_options_t *opt, void *ws,
                    size_t wsz) {
    /* training: the forward also writes the output before the gate (out_x), which the
     * backward reads instead of recomputing (mamba_ssm's saved out_x) */
    CHECK(mamba2_ssd_forward(ctx, &v->out, &v->out_x, &v->final, &v->x, &v->dt, &v->A, &v->Bm,
                             &v->Cm, opt, ws, wsz));
}
static void run_bwd(mamba2_context_t *ctx, views *v, const mamba2_ssd_options_t *opt, void *ws,
                    size_t wsz) {
    mamba2_ssd_grads_t g = {sizeof g, &v->dx, &v->ddt, &v->dA, &v->dBm, &v->dCm, &v->dD, &v->dz,
                            &v->ddt_bias, &v->dinit};
    CHECK(mamba2_ssd_backward(ctx, &g, &v->dout, &v->dfinal, &v->x, &v->dt, &v->A, &v->Bm, &v->Cm,
                              &v->out_x, opt, ws, wsz));
}

static mamba2_ssd_options_t options_for(views *v, int64_t Q) {
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.chunk_size = Q;
    o.D = &v->D;
    o.z = &v->z;
    o.dt_bias = &v->dt_bias;
    o.initial_state = &v->init;
    o.dt_softplus = 1;
    return o;
}

int main(int argc, char **argv) {
    problem p;
    memset(&p, 0, sizeof p);
    p.B = 4, p.L = 2048, p.H = 16, p.P = 64, p.N = 128, p.Q = 128, p.G = 4;
    int reps = 5, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            long long s[7];
            if (sscanf(argv[++i], "%lld,%lld,%lld,%lld,%lld,%lld,%lld", &s[0], &s[1], &s[2], &s[3],
                       &s[4], &s[5], &s[6]) != 7) {
                fprintf(stderr, "--shape expects B,L,H,P,N,Q,G\n");
                return 2;
            }
            p.B = s[0], p.L = s[1], p.H = s[2], p.P = s[3], p.N = s[4], p.Q = s[5], p.G = s[6];
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--shape B,L,H,P,N,Q,G] [--reps N] [--threads N]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (p.B < 1 || p.L < 1 || p.H < 1 || p.P < 1 || p.N < 1 || p.Q < 1 || p.G < 1 ||
        p.H % p.G != 0) {
        fprintf(stderr, "bad shape: need all sizes >= 1 and H %% G == 0\n");
        return 2;
    }
    const int64_t B = p.B, L = p.L, H = p.H, P = p.P, N = p.N, G = p.G;
    printf("mamba2c %s demo: Mamba-2 SSD forward + backward, fp32\n", mamba2_version_string());
    printf("shape [B,L,H,P,N,Q,G] = [%lld,%lld,%lld,%lld,%lld,%lld,%lld]; D [H,P], z, dt_bias, "
           "softplus, initial + final state\n",
           (long long)B, (long long)L, (long long)H, (long long)P, (long long)N, (long long)p.Q,
           (long long)G);

    /* inputs drawn as SPEC §8 (mamba_ssm's tests) */
    p.x = alloc_fill(B * L * H * P, 1.0, 0, 0, 1);
    p.dt = alloc_fill(B * L * H, 0, 0.01, 0.11, 0);
    p.A = alloc_fill(H, 0, -0.5, -0.1, 0);
    p.Bm = alloc_fill(B * L * G * N, 0.2, 0, 0, 1);
    p.Cm = alloc_fill(B * L * G * N, 0.2, 0, 0, 1);
    p.D = alloc_fill(H * P, 1.0, 0, 0, 1);
    p.z = alloc_fill(B * L * H * P, 1.0, 0, 0, 1);
    p.dt_bias = alloc_fill(H, 0.1, 0, 0, 1);
    p.init = alloc_fill(B * H * P * N, 0.2, 0, 0, 1);
    p.dout = alloc_fill(B * L * H * P, 1.0, 0, 0, 1);
    p.dfinal = alloc_fill(B * H * P * N, 0.2, 0, 0, 1);

    mamba2_context_t *cpu = NULL, *ref = NULL;
    CHECK(mamba2_context_create(&cpu, MAMBA2_BACKEND_CPU, threads));
    CHECK(mamba2_context_create(&ref, MAMBA2_BACKEND_REF, 1));
    printf("cpu backend: %s, %d threads\n", mamba2_context_get_isa(cpu),
           (int)mamba2_context_get_num_threads(cpu));

    /* ---- full problem on the optimized backend, timed ---- */
    outputs full;
    alloc_outputs(&full, &p);
    views v;
    make_views(&v, &p, &full, B, H, G);
    mamba2_ssd_options_t opt = options_for(&v, p.Q);
    size_t wf = 0, wb = 0;
    mamba2_ssd_grads_t g = {sizeof g, &v.dx, &v.ddt, &v.dA, &v.dBm, &v.dCm,
                            &v.dD, &v.dz, &v.ddt_bias, &v.dinit};
    CHECK(mamba2_ssd_forward_workspace_size(cpu, &v.out, &v.out_x, &v.final, &v.x, &v.dt, &v.A,
                                            &v.Bm, &v.Cm, &opt, &wf));
    CHECK(mamba2_ssd_backward_workspace_size(cpu, &g, &v.dout, &v.dfinal, &v.x, &v.dt, &v.A, &v.Bm,
                                             &v.Cm, &v.out_x, &opt, &wb));
    size_t wmax = wf > wb ? wf : wb;
    void *ws = wmax ? malloc(wmax) : NULL;
    if (wmax && !ws) {
        fprintf(stderr, "out of memory for a %zu-byte workspace\n", wmax);
        return 1;
    }
    printf("workspace: forward %.1f MiB, backward %.1f MiB\n", wf / 1048576.0, wb / 1048576.0);

    double *tf = malloc(sizeof(double) * reps), *tb = malloc(sizeof(double) * reps);
    run_fwd(cpu, &v, &opt, ws, wmax); /* warm-up */
    run_bwd(cpu, &v, &opt, ws, wmax);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        run_fwd(cpu, &v, &opt, ws, wmax);
        double t1 = now_s();
        run_bwd(cpu, &v, &opt, ws, wmax);
        double t2 = now_s();
        tf[r] = t1 - t0;
        tb[r] = t2 - t1;
    }
    qsort(tf, reps, sizeof(double), cmp_double);
    qsort(tb, reps, sizeof(double), cmp_double);
    double mf = tf[reps / 2], mb = tb[reps / 2];
    double unit = (double)B * L * H * P * N;

    /* ---- one slice (batch 0, the heads of group 0) on the float64 reference ---- */
    const int64_t hpg = H / G;
    outputs sref, scpu;
    alloc_outputs(&sref, &p);
    alloc_outputs(&scpu, &p);
    views vr, vc;
    make_views(&vr, &p, &sref, 1, hpg, 1);
    make_views(&vc, &p, &scpu, 1, hpg, 1);
    mamba2_ssd_options_t optr = options_for(&vr, p.Q), optc = options_for(&vc, p.Q);
    double t0 = now_s();
    run_fwd(ref, &vr, &optr, NULL, 0);
    run_bwd(ref, &vr, &optr, NULL, 0);
    double tref = now_s() - t0;
    /* the slice on the optimized backend too, for the per-head sums (dA, dD, ddt_bias) */
    run_fwd(cpu, &vc, &optc, NULL, 0);
    run_bwd(cpu, &vc, &optc, NULL, 0);

    const int64_t sx[4] = {L * H * P, H * P, P, 1}, shx[4] = {1, L, hpg, P};
    const int64_t sdt[4] = {0, L * H, H, 1}, shdt[4] = {1, 1, L, hpg};
    const int64_t sbc[4] = {0, L * G * N, G * N, 1}, shbc[4] = {1, 1, L, N};
    const int64_t sst[4] = {H * P * N, P * N, N, 1}, shst[4] = {1, hpg, P, N};
    const int64_t sp[4] = {0, 0, P, 1}, shp[4] = {1, 1, hpg, P}, sh1[4] = {1, 1, 1, hpg}, s1[4] = {0, 0, 0, 1};
    struct {
        const char *name;
        double e;
    } errs[] = {
        {"out", nerr4(full.out, sref.out, shx, sx)},
        {"out_x", nerr4(full.out_x, sref.out_x, shx, sx)},
        {"final_state", nerr4(full.final, sref.final, shst, sst)},
        {"dx", nerr4(full.dx, sref.dx, shx, sx)},
        {"ddt", nerr4(full.ddt, sref.ddt, shdt, sdt)},
        {"dA", nerr4(scpu.dA, sref.dA, sh1, s1)},
        {"dBm", nerr4(full.dBm, sref.dBm, shbc, sbc)},
        {"dCm", nerr4(full.dCm, sref.dCm, shbc, sbc)},
        {"dD", nerr4(scpu.dD, sref.dD, shp, sp)},
        {"dz", nerr4(full.dz, sref.dz, shx, sx)},
        {"ddt_bias", nerr4(scpu.ddt_bias, sref.ddt_bias, sh1, s1)},
        {"dinitial_state", nerr4(full.dinit, sref.dinit, shst, sst)},
    };
    double worst = 0;
    printf("\naccuracy vs float64 reference (batch 0, heads 0..%lld), normalised error "
           "||cpu-ref||/||ref||, limit 1e-5:\n",
           (long long)hpg - 1);
    int bad = 0;
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        printf("  %-15s %.2e\n", errs[i].name, errs[i].e);
        if (errs[i].e > worst || isnan(errs[i].e)) worst = errs[i].e;
        if (!(errs[i].e <= 1e-5)) bad = 1;
    }
    printf("  worst           %.2e  %s  (reference slice took %.2f s)\n", worst,
           bad ? "FAIL" : "ok", tref);

    printf("\nspeed, median of %d runs:\n", reps);
    printf("  forward   %9.2f ms  %7.1f GFLOP/s  (4*B*L*H*P*N = %.2f GFLOP; training: also "
           "writes out_x)\n",
           mf * 1e3, 4 * unit / mf * 1e-9, 4 * unit * 1e-9);
    printf("  backward  %9.2f ms  %7.1f GFLOP/s  (10*B*L*H*P*N = %.2f GFLOP), %.2fx forward\n",
           mb * 1e3, 10 * unit / mb * 1e-9, 10 * unit * 1e-9, mb / mf);
    printf("  fwd+bwd   %9.2f ms  %7.1f tokens/ms\n", (mf + mb) * 1e3, B * L / ((mf + mb) * 1e3));

    free(tf);
    free(tb);
    free(ws);
    free_outputs(&full);
    free_outputs(&sref);
    free_outputs(&scpu);
    float *in[] = {p.x, p.dt, p.A, p.Bm, p.Cm, p.D, p.z, p.dt_bias, p.init, p.dout, p.dfinal};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) free(in[i]);
    mamba2_context_destroy(cpu);
    mamba2_context_destroy(ref);
    return bad ? 1 : 0;
}
