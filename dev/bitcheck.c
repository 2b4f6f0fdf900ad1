/*
 * dev/bitcheck.c — an FNV-1a hash of every output and gradient of the CPU backend's fused SSD
 * forward and backward, over a fixed set of problems, kernel sets and thread counts: the
 * check that a refactor of src/cpu/ssd_cpu*.c changed no bit (save its output before the
 * change, diff after). A development tool, not a test: the hashes belong to one build.
 *
 *   cmake --build build -j2 --target mamba2c
 *   cc -O2 -Iinclude dev/bitcheck.c -Lbuild -lmamba2c -lm -Wl,-rpath,$PWD/build -o /tmp/bitcheck
 *   /tmp/bitcheck > /tmp/now.txt && diff dev/bitcheck_baseline.txt /tmp/now.txt
 *
 * (The ws_fwd / ws_bwd lines are the workspace queries: a layout change moves them without
 * changing a result; `grep -v ' ws_'` on both sides compares the hashes alone.)
 *
 * Problems: the three benchmark shapes (L shortened), one whose sequence the backend splits
 * across tasks (L not a multiple of 64, strong decays: the direct decay contraction), one
 * varlen (cu_seqlens; one sequence split) with odd P, N and state positions, one small one
 * without the optional tensors. Every option on otherwise (D, z, dt_bias, softplus, initial
 * and final state, all nine gradients and dinitial_state); the backward once with out_x (the
 * forward's) and, for float32, once without. float32 and bf16 storage; kernel sets avx2 and
 * avx512 (and scalar for the small ones); 1 and 2 threads. Each line: problem, dtype, ISA,
 * threads, tensor, hash.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mamba2c.h"

typedef struct prob {
    const char *name;
    int64_t B, L, H, P, N, Q, G;
    int opts;               /* 1: D [H,P], z, dt_bias, init; 2: D [H]; 0: none */
    double alo, ahi;        /* A uniform in [alo, ahi) */
    int64_t cu[5], ncu;     /* cu_seqlens (ncu entries), or ncu = 0 */
    int64_t pos[6], npos;   /* state positions */
    int scalar;             /* also the scalar kernel set */
} prob;

static const prob probs[] = {
    {"bench1", 4, 512, 16, 64, 128, 128, 4, 1, -0.5, -0.1, {0}, 0, {0}, 0, 0},
    {"bench2", 1, 1024, 32, 64, 64, 64, 8, 1, -0.5, -0.1, {0}, 0, {0}, 0, 0},
    {"bench3", 1, 2048, 24, 64, 128, 256, 1, 1, -0.5, -0.1, {0}, 0, {0}, 0, 0},
    {"split", 1, 8263, 4, 64, 64, 64, 2, 2, -12.0, -0.5, {0}, 0, {0}, 0, 0},
    {"varlen", 1, 9000, 2, 48, 40, 64, 1, 1, -0.5, -0.1, {0, 100, 2500, 9000}, 4,
     {5, 99, 100, 3000, 8999}, 5, 1},
    {"small", 2, 300, 6, 48, 40, 64, 3, 0, -0.5, -0.1, {0}, 0, {0}, 0, 1},
};

static uint64_t rng;
static double unif(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static float *fill(int64_t n, double sd, double lo, double hi) {
    float *p = malloc((size_t)n * 4 + 64);
    if (!p) exit(3);
    for (int64_t i = 0; i < n; i++)
        p[i] = sd != 0.0 ? (float)(sd * sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()))
                         : (float)(lo + (hi - lo) * unif());
    return p;
}
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static void *as(const float *src, int64_t n, mamba2_dtype_t dt) {
    if (dt == MAMBA2_DTYPE_F32) {
        float *p = malloc((size_t)n * 4 + 64);
        memcpy(p, src, (size_t)n * 4);
        return p;
    }
    uint16_t *p = malloc((size_t)n * 2 + 64);
    for (int64_t i = 0; i < n; i++) p[i] = to_bf16(src[i]);
    return p;
}
static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *c = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}
static void die(const char *what) {
    fprintf(stderr, "bitcheck: %s: %s\n", what, mamba2_last_error());
    exit(2);
}

enum { X, DT, AA, BM, CM, Z, DD, DTB, INIT, DOUT, DFIN, OUTX, OUT, FIN, PST,
       DX, DDT, DA, DBM, DCM, DDD, DZ, DDTB, DINIT, NT };
static const char *names[NT] = {[OUT] = "out", [FIN] = "final", [PST] = "pos_states",
                                [OUTX] = "out_x", [DX] = "dx", [DDT] = "ddt", [DA] = "dA",
                                [DBM] = "dBm", [DCM] = "dCm", [DDD] = "dD", [DZ] = "dz",
                                [DDTB] = "ddt_bias", [DINIT] = "dinit"};
static const int is_act[NT] = {[X] = 1, [DT] = 1, [BM] = 1, [CM] = 1, [Z] = 1, [DOUT] = 1,
                               [OUTX] = 1, [OUT] = 1, [DX] = 1, [DDT] = 1, [DBM] = 1,
                               [DCM] = 1, [DZ] = 1};

static int64_t numel(const mamba2_tensor_t *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}
static void put(const char *pfx, const char *tag, const mamba2_tensor_t *t) {
    printf("%s %-10s %016llx\n", pfx, tag,
           (unsigned long long)fnv(t->data, (size_t)numel(t) * mamba2_dtype_size(t->dtype)));
}

static void run(const prob *pb, mamba2_dtype_t adt, const char *isa, int thr) {
    const int64_t B = pb->B, L = pb->L, H = pb->H, P = pb->P, N = pb->N, G = pb->G;
    const int64_t S = pb->ncu ? pb->ncu - 1 : B, np = pb->npos ? pb->npos : 1;
    const int64_t shx[4] = {B, L, H, P}, shdt[3] = {B, L, H}, shh[1] = {H},
                  shbc[4] = {B, L, G, N}, shd[2] = {H, P}, shst[4] = {S, H, P, N},
                  shps[4] = {np, H, P, N};
    const int64_t *shp[NT] = {shx, shdt, shh, shbc, shbc, shx, pb->opts == 2 ? shh : shd, shh,
                              shst, shx, shst, shx, shx, shst, shps,
                              shx, shdt, shh, shbc, shbc, pb->opts == 2 ? shh : shd, shx, shh, shst};
    const int rk[NT] = {4, 3, 1, 4, 4, 4, pb->opts == 2 ? 1 : 2, 1, 4, 4, 4, 4, 4, 4, 4,
                        4, 3, 1, 4, 4, pb->opts == 2 ? 1 : 2, 4, 1, 4};
    const double sd[OUTX] = {1, 0, 0, 0.2, 0.2, 1, 1, 0.1, 0.2, 1, 0.2};
    const double lo[OUTX] = {0, 0.01, pb->alo, 0, 0, 0, 0, 0, 0, 0, 0};
    const double hi[OUTX] = {0, 0.31, pb->ahi, 0, 0, 0, 0, 0, 0, 0, 0};
    mamba2_tensor_t t[NT];
    rng = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < NT; i++) {
        const int64_t n = numel(&(mamba2_tensor_t){.rank = rk[i], .shape = {shp[i][0],
                              rk[i] > 1 ? shp[i][1] : 0, rk[i] > 2 ? shp[i][2] : 0,
                              rk[i] > 3 ? shp[i][3] : 0}});
        const mamba2_dtype_t dt = is_act[i] ? adt : MAMBA2_DTYPE_F32;
        float *f = i < OUTX ? fill(n, sd[i], lo[i], hi[i]) : fill(n, 0, -1, 1); /* garbage */
        t[i] = mamba2_tensor_make(as(f, n, dt), dt, rk[i], shp[i]);
        free(f);
    }
    mamba2_context_t *ctx;
    if (mamba2_context_create(&ctx, MAMBA2_BACKEND_CPU, thr) != MAMBA2_STATUS_OK) die("context");
    if (mamba2_context_force_isa(ctx, isa) != MAMBA2_STATUS_OK) die(isa);
    int64_t cu[5];
    mamba2_tensor_t tcu, tpos;
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.chunk_size = pb->Q;
    o.dt_softplus = 1;
    if (pb->opts) {
        o.D = &t[DD];
        o.z = pb->opts == 1 ? &t[Z] : NULL;
        o.dt_bias = &t[DTB];
        o.initial_state = &t[INIT];
    }
    if (pb->ncu) {
        memcpy(cu, pb->cu, sizeof cu);
        tcu = mamba2_tensor_make(cu, MAMBA2_DTYPE_I64, 1, (int64_t[]){pb->ncu});
        o.cu_seqlens = &tcu;
    }
    int64_t pos[6];
    if (pb->npos) {
        memcpy(pos, pb->pos, sizeof pos);
        tpos = mamba2_tensor_make(pos, MAMBA2_DTYPE_I64, 1, (int64_t[]){pb->npos});
        o.state_positions = &tpos;
    }
    mamba2_ssd_grads_t g = {0, &t[DX], &t[DDT], &t[DA], &t[DBM], &t[DCM],
                            pb->opts ? &t[DDD] : NULL, pb->opts == 1 ? &t[DZ] : NULL,
                            pb->opts ? &t[DDTB] : NULL, pb->opts ? &t[DINIT] : NULL};
    const mamba2_tensor_t *ox = &t[OUTX]; /* the forward's out_x (ABI v1: an argument) */
    size_t wf, wb;
    if (mamba2_ssd_forward_workspace_size(ctx, &t[OUT], ox, &t[FIN], &t[X], &t[DT], &t[AA],
                                          &t[BM], &t[CM], &o, &wf) != MAMBA2_STATUS_OK)
        die("fwd ws");
    if (mamba2_ssd_backward_workspace_size(ctx, &g, &t[DOUT], &t[DFIN], &t[X], &t[DT], &t[AA],
                                           &t[BM], &t[CM], ox, &o, &wb) != MAMBA2_STATUS_OK)
        die("bwd ws");
    const size_t wsz = wf > wb ? wf : wb;
    void *ws = malloc(wsz + 64);
    char pfx[96];
    snprintf(pfx, sizeof pfx, "%-7s %-4s %-7s %d", pb->name, adt == MAMBA2_DTYPE_F32 ? "f32" : "bf16",
             isa, thr);
    printf("%s ws_fwd     %zu\n%s ws_bwd     %zu\n", pfx, wf, pfx, wb);
    if (mamba2_ssd_forward_states(ctx, &t[OUT], ox, &t[FIN], pb->npos ? &t[PST] : NULL, &t[X], &t[DT],
                                  &t[AA], &t[BM], &t[CM], &o, ws, wsz) != MAMBA2_STATUS_OK)
        die("fwd");
    put(pfx, "out", &t[OUT]);
    put(pfx, "out_x", &t[OUTX]);
    put(pfx, "final", &t[FIN]);
    if (pb->npos) put(pfx, "pos_states", &t[PST]);
    for (int v = 0; v < (adt == MAMBA2_DTYPE_F32 ? 2 : 1); v++) {
        if (mamba2_ssd_backward(ctx, &g, &t[DOUT], &t[DFIN], &t[X], &t[DT], &t[AA], &t[BM],
                                &t[CM], v ? NULL : ox, &o, ws, wsz) != MAMBA2_STATUS_OK)
            die("bwd");
        char p2[112];
        snprintf(p2, sizeof p2, "%s %s", pfx, v ? "-ox" : "+ox");
        const mamba2_tensor_t *gp[] = {g.dx, g.ddt, g.dA, g.dBm, g.dCm,
                                       g.dD, g.dz, g.ddt_bias, g.dinitial_state};
        for (int i = DX; i < NT; i++)
            if (gp[i - DX]) put(p2, names[i], &t[i]);
    }
    fflush(stdout);
    free(ws);
    for (int i = 0; i < NT; i++) free(t[i].data);
    mamba2_context_destroy(ctx);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    for (size_t k = 0; k < sizeof probs / sizeof probs[0]; k++) {
        if (only && strcmp(only, probs[k].name)) continue;
        for (int d = 0; d < 2; d++)
            for (int s = 0; s < 3; s++) {
                static const char *isas[3] = {"avx2", "avx512", "scalar"};
                if (s == 2 && !probs[k].scalar) continue;
                for (int thr = 1; thr <= 2; thr++)
                    run(&probs[k], d ? MAMBA2_DTYPE_BF16 : MAMBA2_DTYPE_F32, isas[s], thr);
            }
    }
    return 0;
}
