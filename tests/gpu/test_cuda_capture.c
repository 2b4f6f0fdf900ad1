/*
 * test_cuda_capture.c — the CUDA device mode as a CUDA graph needs it: with device index
 * tensors (mamba2_context_set_device_indices) and a caller's allocator
 * (mamba2_context_set_device_allocator), an op makes no allocation, host copy or
 * synchronisation of its own, so a stream capture (torch.cuda.graph) can record it.
 *
 * Each case (fused SSD forward + backward, batched, varlen with an empty sequence, bf16
 * storage; states at positions; conv1d forward + backward, varlen; gated RMSNorm forward +
 * backward; conv1d_step with slots and a circular cache; ssd_step with slots) runs once on a
 * host-mode CUDA context (host tensors) and then in device mode (every tensor, index tensors
 * included, in device memory): a warm-up call, the inputs restored, then the counted call.
 * On the emulated device (tests/cuda_emu: its m2emu_call_count) the counted call must make
 * zero cuMemAlloc / cuMemFree / cuMemHostAlloc, zero host<->device copies (sync or async)
 * and zero stream, context or event synchronisations; every buffer the op took from the
 * allocator must be back by the time it returns; and every output must be bitwise the host
 * mode's. Also: the setters' argument errors, and device index tensors holding nonsense
 * (decreasing, out-of-range cu_seqlens for the SSD and conv1d; positions out of order and
 * range; slots past the cache, negative cache lengths) run without a fault (the kernels
 * clamp; the results are unspecified; the sanitizer build checks every access). Without a GPU or the emulator: the argument
 * checks only, and BACKEND_UNAVAILABLE.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cu_loader.h"
#include "harness.h"

static tcu cu;
static tcu_handle stream;
static long (*emu_count)(const char *name); /* the emulator's call counters, or NULL */
static void (*emu_reset)(void);

/* ---- a stream-ordered pool as the caller's allocator: freed blocks are kept and handed out
 * again (smallest fit), so a call repeating an earlier call's sizes allocates nothing ---- */
#define POOL_MAX 128
static struct {
    tcu_ptr p[POOL_MAX];
    size_t bytes[POOL_MAX];
    int used[POOL_MAX], n;
    long allocs, frees;
    void *stream_seen;
} pool;

static void *pool_alloc(void *user, size_t bytes, void *s) {
    (void)user;
    pool.allocs++;
    pool.stream_seen = s;
    int best = -1;
    for (int i = 0; i < pool.n; i++)
        if (!pool.used[i] && pool.bytes[i] >= bytes &&
            (best < 0 || pool.bytes[i] < pool.bytes[best]))
            best = i;
    if (best < 0) {
        if (pool.n == POOL_MAX) return NULL;
        tcu_ptr p = 0;
        if (cu.cuMemAlloc_v2(&p, bytes)) return NULL;
        best = pool.n++;
        pool.p[best] = p;
        pool.bytes[best] = bytes;
    }
    pool.used[best] = 1;
    return (void *)(uintptr_t)pool.p[best];
}
static void pool_free(void *user, void *ptr, void *s) {
    (void)user;
    (void)s;
    pool.frees++;
    for (int i = 0; i < pool.n; i++)
        if (pool.p[i] == (tcu_ptr)(uintptr_t)ptr) pool.used[i] = 0;
}

/* ---- a case: its tensors (host values; device copies) and the op over them -------------- */
enum { IN, OUT, INOUT };
#define MAXT 24
typedef struct tens {
    const char *name;
    int role;
    mamba2_tensor_t host, dev;
    size_t bytes;
    void *init, *result; /* initial contents (IN, INOUT), host-mode result (OUT, INOUT) */
    tcu_ptr mem;
} tens;
typedef struct tcase {
    const char *name;
    int n;
    tens t[MAXT];
    /* the op(s), on tensors t (host or device copies) */
    mamba2_status_t (*run)(mamba2_context_t *ctx, const mamba2_tensor_t *const *t, int bad);
} tcase;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* add a tensor; values uniform in [lo, hi) (floats), or copied from idx (index tensors) */
static int add(tcase *c, const char *name, int role, mamba2_dtype_t dt, int rank,
               const int64_t *shape, double lo, double hi, const int64_t *idx) {
    tens *t = &c->t[c->n];
    t->name = name;
    t->role = role;
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    t->bytes = (size_t)n * mamba2_dtype_size(dt);
    t->init = calloc(1, t->bytes + 1);
    t->result = calloc(1, t->bytes + 1);
    for (int64_t i = 0; i < n && role != OUT; i++) {
        const double v = idx ? 0 : lo + (hi - lo) * urand();
        if (dt == MAMBA2_DTYPE_F32) ((float *)t->init)[i] = (float)v;
        else if (dt == MAMBA2_DTYPE_BF16) ((uint16_t *)t->init)[i] = to_bf16((float)v);
        else if (dt == MAMBA2_DTYPE_I32) ((int32_t *)t->init)[i] = (int32_t)idx[i];
        else ((int64_t *)t->init)[i] = idx[i];
    }
    t->host = mamba2_tensor_make(t->init, dt, rank, shape);
    t->dev = t->host;
    return c->n++;
}
#define SHAPE(...) (const int64_t[]){__VA_ARGS__}

static void case_free(tcase *c) {
    for (int i = 0; i < c->n; i++) {
        if (c->t[i].mem) cu.cuMemFree_v2(c->t[i].mem);
        free(c->t[i].init);
        free(c->t[i].result);
    }
}

/* host mode: the inputs as they are, outputs into result (INOUT: a copy of init first) */
static int run_host(tcase *c, mamba2_context_t *host) {
    const mamba2_tensor_t *p[MAXT];
    mamba2_tensor_t t[MAXT];
    for (int i = 0; i < c->n; i++) {
        t[i] = c->t[i].host;
        if (c->t[i].role != IN) {
            if (c->t[i].role == INOUT) memcpy(c->t[i].result, c->t[i].init, c->t[i].bytes);
            t[i].data = c->t[i].result;
        }
        p[i] = &t[i];
    }
    const mamba2_status_t st = c->run(host, p, 0);
    return th_expect(st == MAMBA2_STATUS_OK, "host mode: %s: %s", mamba2_status_string(st),
                     mamba2_last_error());
}

/* device copies of every tensor: inputs and in/out tensors from init, outputs zeroed */
static int restore(tcase *c) {
    for (int i = 0; i < c->n; i++) {
        tens *t = &c->t[i];
        if (!t->mem) {
            if (cu.cuMemAlloc_v2(&t->mem, t->bytes + 1)) return 0;
            t->dev.data = (void *)(uintptr_t)t->mem;
        }
        if (t->role == OUT ? cu.cuMemsetD8_v2(t->mem, 0, t->bytes + 1)
                           : cu.cuMemcpyHtoD_v2(t->mem, t->init, t->bytes))
            return 0;
    }
    return 1;
}

static const char *const counted[] = {
    "cuMemAlloc_v2",       "cuMemFree_v2",         "cuMemHostAlloc",       "cuMemFreeHost",
    "cuMemcpyHtoD_v2",     "cuMemcpyDtoH_v2",      "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
    "cuStreamSynchronize", "cuCtxSynchronize",     "cuEventSynchronize"};
#define NCOUNTED (int)(sizeof counted / sizeof counted[0])

static void run_case(tcase *c, mamba2_context_t *host, mamba2_context_t *dev) {
    th_begin("capture %-20s", c->name);
    if (!run_host(c, host)) {
        th_end();
        return;
    }
    const mamba2_tensor_t *p[MAXT];
    for (int i = 0; i < c->n; i++) p[i] = &c->t[i].dev;
    int ok = th_expect(restore(c), "device buffers: cuMemAlloc / copy failed");
    /* warm-up: the allocator's pool and the context reach their sizes */
    mamba2_status_t st = ok ? c->run(dev, p, 0) : MAMBA2_STATUS_INTERNAL_ERROR;
    ok = ok && th_expect(st == MAMBA2_STATUS_OK, "warm-up: %s: %s", mamba2_status_string(st),
                         mamba2_last_error());
    ok = ok && th_expect(!cu.cuStreamSynchronize(stream) && restore(c) &&
                             !cu.cuStreamSynchronize(stream),
                         "restoring the inputs");
    if (!ok) {
        th_end();
        return;
    }
    const long a0 = pool.allocs, f0 = pool.frees;
    if (emu_reset) emu_reset();
    st = c->run(dev, p, 0);
    long calls[NCOUNTED];
    for (int k = 0; k < NCOUNTED && emu_count; k++) calls[k] = emu_count(counted[k]);
    const long launches = emu_count ? emu_count("cuLaunchKernel") : -1;
    th_expect(st == MAMBA2_STATUS_OK, "device mode: %s: %s", mamba2_status_string(st),
              mamba2_last_error());
    int zero = 1;
    for (int k = 0; k < NCOUNTED && emu_count; k++)
        zero &= th_expect(calls[k] == 0, "%s called %ld times inside the op", counted[k],
                          calls[k]);
    th_expect(pool.allocs > a0 && pool.allocs - a0 == pool.frees - f0,
              "the allocator: %ld allocations, %ld frees", pool.allocs - a0, pool.frees - f0);
    th_expect(pool.stream_seen == stream, "the allocator was not given the context's stream");
    cu.cuStreamSynchronize(stream);
    int same = 1;
    for (int i = 0; i < c->n; i++) {
        tens *t = &c->t[i];
        if (t->role == IN) continue;
        unsigned char *got = calloc(1, t->bytes + 1);
        cu.cuMemcpyDtoH_v2(got, t->mem, t->bytes);
        if (memcmp(got, t->result, t->bytes)) {
            th_fail("%s differs from host mode", t->name);
            same = 0;
        }
        free(got);
    }
    if (same && zero && st == MAMBA2_STATUS_OK)
        th_note("%ld launches; %s; %ld buffers from the allocator; bitwise host mode", launches,
                emu_count ? "0 allocations, copies, syncs" : "(driver calls not counted)",
                pool.allocs - a0);
    th_end();
}

/* ---- the ops ------------------------------------------------------------------------------- */

/* SSD: x dt A Bm Cm D z dt_bias init cu | out final | dout dfinal | dx ddt dA dBm dCm dD dz
 * ddt_bias dinit (indices below; cu absent for the batched form) */
enum { S_X, S_DT, S_A, S_BM, S_CM, S_D, S_Z, S_DTB, S_INIT, S_CU, S_OUT, S_FIN, S_DOUT,
       S_DFIN, S_DX, S_DDT, S_DA, S_DBM, S_DCM, S_DD, S_DZ, S_DDTB, S_DINIT, S_N };
static mamba2_status_t run_ssd(mamba2_context_t *ctx, const mamba2_tensor_t *const *t, int bad) {
    (void)bad;
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.D = t[S_D];
    o.z = t[S_Z];
    o.dt_bias = t[S_DTB];
    o.initial_state = t[S_INIT];
    o.cu_seqlens = t[S_CU]->rank ? t[S_CU] : NULL;
    o.dt_softplus = 1;
    mamba2_status_t st = mamba2_ssd_forward(ctx, t[S_OUT], NULL, t[S_FIN], t[S_X], t[S_DT],
                                            t[S_A], t[S_BM], t[S_CM], &o, NULL, 0);
    mamba2_ssd_grads_t g = {0,       t[S_DX], t[S_DDT], t[S_DA],   t[S_DBM],
                            t[S_DCM], t[S_DD], t[S_DZ],  t[S_DDTB], t[S_DINIT]};
    if (!st)
        st = mamba2_ssd_backward(ctx, &g, t[S_DOUT], t[S_DFIN], t[S_X], t[S_DT], t[S_A],
                                 t[S_BM], t[S_CM], NULL, &o, NULL, 0);
    return st;
}
static void ssd_case(tcase *c, const char *name, int64_t B, int64_t L, const int64_t *cu,
                     int64_t nseq, mamba2_dtype_t adt) {
    const int64_t H = 4, P = 8, N = 16, G = 2, S = cu ? nseq : B;
    const mamba2_dtype_t f = MAMBA2_DTYPE_F32;
    memset(c, 0, sizeof *c);
    c->name = name;
    c->run = run_ssd;
    add(c, "x", IN, adt, 4, SHAPE(B, L, H, P), -1, 1, NULL);
    add(c, "dt", IN, adt, 3, SHAPE(B, L, H), -1.5, 0.5, NULL);
    add(c, "A", IN, f, 1, SHAPE(H), -0.5, -0.1, NULL);
    add(c, "Bm", IN, adt, 4, SHAPE(B, L, G, N), -0.3, 0.3, NULL);
    add(c, "Cm", IN, adt, 4, SHAPE(B, L, G, N), -0.3, 0.3, NULL);
    add(c, "D", IN, f, 1, SHAPE(H), -1, 1, NULL);
    add(c, "z", IN, adt, 4, SHAPE(B, L, H, P), -1, 1, NULL);
    add(c, "dt_bias", IN, f, 1, SHAPE(H), -0.2, 0.2, NULL);
    add(c, "init", IN, f, 4, SHAPE(S, H, P, N), -0.2, 0.2, NULL);
    if (cu) add(c, "cu_seqlens", IN, MAMBA2_DTYPE_I32, 1, SHAPE(nseq + 1), 0, 0, cu);
    else add(c, "(no cu_seqlens)", IN, MAMBA2_DTYPE_I32, 0, SHAPE(1), 0, 0, SHAPE(0));
    add(c, "out", OUT, adt, 4, SHAPE(B, L, H, P), 0, 0, NULL);
    add(c, "final", OUT, f, 4, SHAPE(S, H, P, N), 0, 0, NULL);
    add(c, "dout", IN, adt, 4, SHAPE(B, L, H, P), -1, 1, NULL);
    add(c, "dfinal", IN, f, 4, SHAPE(S, H, P, N), -0.2, 0.2, NULL);
    add(c, "dx", OUT, adt, 4, SHAPE(B, L, H, P), 0, 0, NULL);
    add(c, "ddt", OUT, adt, 3, SHAPE(B, L, H), 0, 0, NULL);
    add(c, "dA", OUT, f, 1, SHAPE(H), 0, 0, NULL);
    add(c, "dBm", OUT, adt, 4, SHAPE(B, L, G, N), 0, 0, NULL);
    add(c, "dCm", OUT, adt, 4, SHAPE(B, L, G, N), 0, 0, NULL);
    add(c, "dD", OUT, f, 1, SHAPE(H), 0, 0, NULL);
    add(c, "dz", OUT, adt, 4, SHAPE(B, L, H, P), 0, 0, NULL);
    add(c, "ddt_bias", OUT, f, 1, SHAPE(H), 0, 0, NULL);
    add(c, "dinit", OUT, f, 4, SHAPE(S, H, P, N), 0, 0, NULL);
}

/* states at positions: x dt A Bm Cm cu pos | out final pstates */
static mamba2_status_t run_pos(mamba2_context_t *ctx, const mamba2_tensor_t *const *t, int bad) {
    (void)bad;
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.cu_seqlens = t[5];
    o.state_positions = t[6];
    return mamba2_ssd_forward_states(ctx, t[7], NULL, t[8], t[9], t[0], t[1], t[2], t[3], t[4],
                                     &o, NULL, 0);
}
static void pos_case(tcase *c) {
    const int64_t L = 100, H = 4, P = 8, N = 16, G = 2, S = 4;
    const mamba2_dtype_t f = MAMBA2_DTYPE_F32;
    memset(c, 0, sizeof *c);
    c->name = "positions_varlen";
    c->run = run_pos;
    add(c, "x", IN, f, 4, SHAPE(1, L, H, P), -1, 1, NULL);
    add(c, "dt", IN, f, 3, SHAPE(1, L, H), 0.01, 0.11, NULL);
    add(c, "A", IN, f, 1, SHAPE(H), -0.5, -0.1, NULL);
    add(c, "Bm", IN, f, 4, SHAPE(1, L, G, N), -0.3, 0.3, NULL);
    add(c, "Cm", IN, f, 4, SHAPE(1, L, G, N), -0.3, 0.3, NULL);
    add(c, "cu_seqlens", IN, MAMBA2_DTYPE_I64, 1, SHAPE(S + 1), 0, 0, SHAPE(0, 30, 30, 95, 100));
    add(c, "state_positions", IN, MAMBA2_DTYPE_I64, 1, SHAPE(6), 0, 0,
        SHAPE(0, 29, 30, 64, 94, 99));
    add(c, "out", OUT, f, 4, SHAPE(1, L, H, P), 0, 0, NULL);
    add(c, "final", OUT, f, 4, SHAPE(S, H, P, N), 0, 0, NULL);
    add(c, "position_states", OUT, f, 4, SHAPE(6, H, P, N), 0, 0, NULL);
}

/* conv1d: x w bias init cu | out final | dout | dx dw db dinit */
static mamba2_status_t run_conv(mamba2_context_t *ctx, const mamba2_tensor_t *const *t, int bad) {
    (void)bad;
    mamba2_conv1d_options_t o = mamba2_conv1d_options_default();
    o.bias = t[2];
    o.initial_conv_state = t[3];
    o.cu_seqlens = t[4];
    o.activation = MAMBA2_ACTIVATION_SILU;
    mamba2_status_t st = mamba2_conv1d_forward(ctx, t[5], t[6], t[0], t[1], &o);
    mamba2_conv1d_grads_t g = {0, t[8], t[9], t[10], t[11]};
    if (!st) st = mamba2_conv1d_backward(ctx, &g, t[7], NULL, t[0], t[1], &o, NULL, 0);
    return st;
}
static void conv_case(tcase *c) {
    const int64_t L = 90, C = 24, W = 4, S = 3;
    const mamba2_dtype_t f = MAMBA2_DTYPE_F32;
    memset(c, 0, sizeof *c);
    c->name = "conv1d_varlen";
    c->run = run_conv;
    add(c, "x", IN, f, 3, SHAPE(1, L, C), -1, 1, NULL);
    add(c, "weight", IN, f, 2, SHAPE(C, W), -1, 1, NULL);
    add(c, "bias", IN, f, 1, SHAPE(C), -1, 1, NULL);
    add(c, "init", IN, f, 3, SHAPE(S, C, W - 1), -1, 1, NULL);
    add(c, "cu_seqlens", IN, MAMBA2_DTYPE_I64, 1, SHAPE(S + 1), 0, 0, SHAPE(0, 2, 40, 90));
    add(c, "out", OUT, f, 3, SHAPE(1, L, C), 0, 0, NULL);
    add(c, "final", OUT, f, 3, SHAPE(S, C, W - 1), 0, 0, NULL);
    add(c, "dout", IN, f, 3, SHAPE(1, L, C), -1, 1, NULL);
    add(c, "dx", OUT, f, 3, SHAPE(1, L, C), 0, 0, NULL);
    add(c, "dweight", OUT, f, 2, SHAPE(C, W), 0, 0, NULL);
    add(c, "dbias", OUT, f, 1, SHAPE(C), 0, 0, NULL);
    add(c, "dinit", OUT, f, 3, SHAPE(S, C, W - 1), 0, 0, NULL);
}

/* rmsnorm: x z w | out rstd | dout | dx dz dw */
static mamba2_status_t run_norm(mamba2_context_t *ctx, const mamba2_tensor_t *const *t, int bad) {
    (void)bad;
    mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
    o.group_size = 16;
    mamba2_status_t st =
        mamba2_rmsnorm_gated_forward(ctx, t[3], t[4], t[0], t[1], t[2], NULL, &o, NULL, 0);
    mamba2_rmsnorm_gated_grads_t g = {0, t[6], t[7], t[8], NULL};
    if (!st)
        st = mamba2_rmsnorm_gated_backward(ctx, &g, t[5], t[0], t[1], t[2], NULL, NULL, &o,
                                           NULL, 0);
    return st;
}
static void norm_case(tcase *c) {
    const int64_t M = 37, D = 64;
    const mamba2_dtype_t f = MAMBA2_DTYPE_F32;
    memset(c, 0, sizeof *c);
    c->name = "rmsnorm_gated";
    c->run = run_norm;
    add(c, "x", IN, f, 2, SHAPE(M, D), -1, 1, NULL);
    add(c, "z", IN, f, 2, SHAPE(M, D), -1, 1, NULL);
    add(c, "weight", IN, f, 1, SHAPE(D), 0.5, 1.5, NULL);
    add(c, "out", OUT, f, 2, SHAPE(M, D), 0, 0, NULL);
    add(c, "rstd", OUT, f, 2, SHAPE(M, D / 16), 0, 0, NULL);
    add(c, "dout", IN, f, 2, SHAPE(M, D), -1, 1, NULL);
    add(c, "dx", OUT, f, 2, SHAPE(M, D), 0, 0, NULL);
    add(c, "dz", OUT, f, 2, SHAPE(M, D), 0, 0, NULL);
    add(c, "dweight", OUT, f, 1, SHAPE(D), 0, 0, NULL);
}

/* conv1d_step: x w bias idx seqlens | out cache(inout); bad: slots and lengths out of range */
static mamba2_status_t run_cstep(mamba2_context_t *ctx, const mamba2_tensor_t *const *t, int bad) {
    mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
    o.bias = t[2];
    o.state_indices = t[3];
    o.cache_seqlens = t[4];
    o.activation = MAMBA2_ACTIVATION_SILU;
    (void)bad;
    return mamba2_conv1d_step(ctx, t[5], t[6], t[0], t[1], &o);
}
static void cstep_case(tcase *c, int bad) {
    const int64_t B = 3, C = 16, W = 4, S = 4, Lc = 5;
    const mamba2_dtype_t f = MAMBA2_DTYPE_F32;
    memset(c, 0, sizeof *c);
    c->name = bad ? "conv1d_step_bad_indices" : "conv1d_step";
    c->run = run_cstep;
    add(c, "x", IN, f, 2, SHAPE(B, C), -1, 1, NULL);
    add(c, "weight", IN, f, 2, SHAPE(C, W), -1, 1, NULL);
    add(c, "bias", IN, f, 1, SHAPE(C), -1, 1, NULL);
    add(c, "state_indices", IN, MAMBA2_DTYPE_I32, 1, SHAPE(B), 0, 0,
        bad ? SHAPE(7, -9, 1000000) : SHAPE(2, -1, 0));
    add(c, "cache_seqlens", IN, MAMBA2_DTYPE_I64, 1, SHAPE(B), 0, 0,
        bad ? SHAPE(-5, 3, -1000000007) : SHAPE(5, 3, 7));
    add(c, "out", INOUT, f, 2, SHAPE(B, C), -1, 1, NULL);
    add(c, "conv_cache", INOUT, f, 3, SHAPE(S, C, Lc), -1, 1, NULL);
}

/* ssd_step: x dt A Bm Cm D z dt_bias idx | out(inout) cache(inout) */
static mamba2_status_t run_sstep(mamba2_context_t *ctx, const mamba2_tensor_t *const *t, int bad) {
    (void)bad;
    mamba2_ssd_step_options_t o = mamba2_ssd_step_options_default();
    o.D = t[5];
    o.z = t[6];
    o.dt_bias = t[7];
    o.state_indices = t[8];
    o.dt_softplus = 1;
    return mamba2_ssd_step(ctx, t[10], t[9], NULL, t[0], t[1], t[2], t[3], t[4], &o);
}
static void sstep_case(tcase *c) {
    const int64_t B = 3, H = 4, P = 8, N = 16, G = 2, S = 4;
    const mamba2_dtype_t f = MAMBA2_DTYPE_F32;
    memset(c, 0, sizeof *c);
    c->name = "ssd_step";
    c->run = run_sstep;
    add(c, "x", IN, f, 3, SHAPE(B, H, P), -1, 1, NULL);
    add(c, "dt", IN, f, 2, SHAPE(B, H), -1.5, 0.5, NULL);
    add(c, "A", IN, f, 1, SHAPE(H), -0.5, -0.1, NULL);
    add(c, "Bm", IN, f, 3, SHAPE(B, G, N), -0.3, 0.3, NULL);
    add(c, "Cm", IN, f, 3, SHAPE(B, G, N), -0.3, 0.3, NULL);
    add(c, "D", IN, f, 1, SHAPE(H), -1, 1, NULL);
    add(c, "z", IN, f, 3, SHAPE(B, H, P), -1, 1, NULL);
    add(c, "dt_bias", IN, f, 1, SHAPE(H), -0.2, 0.2, NULL);
    add(c, "state_indices", IN, MAMBA2_DTYPE_I64, 1, SHAPE(B), 0, 0, SHAPE(3, -1, 1));
    add(c, "out", INOUT, f, 3, SHAPE(B, H, P), -1, 1, NULL);
    add(c, "state_cache", INOUT, f, 4, SHAPE(S, H, P, N), -0.2, 0.2, NULL);
}

/* nonsense in device index tensors: the call runs, nothing faults (results unspecified) */
static void bad_values(mamba2_context_t *dev) {
    th_begin("capture bad index values");
    tcase c;
    ssd_case(&c, "ssd_bad_cu", 1, 50, SHAPE(0, 40, 7, 200, -3, 50), 5, MAMBA2_DTYPE_F32);
    const mamba2_tensor_t *p[MAXT];
    for (int i = 0; i < c.n; i++) p[i] = &c.t[i].dev;
    int ok = th_expect(restore(&c), "device buffers");
    mamba2_status_t st = ok ? run_ssd(dev, p, 1) : MAMBA2_STATUS_INTERNAL_ERROR;
    th_expect(st == MAMBA2_STATUS_OK, "SSD with a nonsense cu_seqlens: %s: %s",
              mamba2_status_string(st), mamba2_last_error());
    tcase s;
    cstep_case(&s, 1);
    const mamba2_tensor_t *q[MAXT];
    for (int i = 0; i < s.n; i++) q[i] = &s.t[i].dev;
    ok = th_expect(restore(&s), "device buffers");
    st = ok ? run_cstep(dev, q, 1) : MAMBA2_STATUS_INTERNAL_ERROR;
    th_expect(st == MAMBA2_STATUS_OK, "conv1d_step with slots past the cache: %s: %s",
              mamba2_status_string(st), mamba2_last_error());
    tcase ps;
    pos_case(&ps); /* positions decreasing and out of range; cu_seqlens past L */
    int64_t *pv = ps.t[6].init, *cv = ps.t[5].init;
    pv[0] = 99, pv[1] = -7, pv[2] = 1000, pv[3] = 3, pv[4] = 3, pv[5] = -1;
    cv[1] = 500, cv[2] = -4;
    const mamba2_tensor_t *r[MAXT];
    for (int i = 0; i < ps.n; i++) r[i] = &ps.t[i].dev;
    ok = th_expect(restore(&ps), "device buffers");
    st = ok ? run_pos(dev, r, 1) : MAMBA2_STATUS_INTERNAL_ERROR;
    th_expect(st == MAMBA2_STATUS_OK, "states at nonsense positions: %s: %s",
              mamba2_status_string(st), mamba2_last_error());
    tcase cv1;
    conv_case(&cv1); /* cu_seqlens decreasing, past L */
    int64_t *cc = cv1.t[4].init;
    cc[1] = 70, cc[2] = 5, cc[3] = 1 << 20;
    const mamba2_tensor_t *q2[MAXT];
    for (int i = 0; i < cv1.n; i++) q2[i] = &cv1.t[i].dev;
    ok = th_expect(restore(&cv1), "device buffers");
    st = ok ? run_conv(dev, q2, 1) : MAMBA2_STATUS_INTERNAL_ERROR;
    th_expect(st == MAMBA2_STATUS_OK, "conv1d with a nonsense cu_seqlens: %s: %s",
              mamba2_status_string(st), mamba2_last_error());
    th_expect(!cu.cuStreamSynchronize(stream), "the stream reports a fault");
    case_free(&c);
    case_free(&s);
    case_free(&ps);
    case_free(&cv1);
    th_end();
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-q")) th_set_verbose(0);
    th_begin("capture: setter arguments");
    th_expect(mamba2_context_set_device_indices(NULL, 1) == MAMBA2_STATUS_INVALID_ARGUMENT,
              "set_device_indices(NULL) must be INVALID_ARGUMENT");
    th_expect(mamba2_context_set_device_allocator(NULL, pool_alloc, pool_free, NULL) ==
                  MAMBA2_STATUS_INVALID_ARGUMENT,
              "set_device_allocator(NULL) must be INVALID_ARGUMENT");
    mamba2_context_t *cpu = NULL;
    if (mamba2_context_create(&cpu, MAMBA2_BACKEND_CPU, 1) == MAMBA2_STATUS_OK) {
        th_expect(mamba2_context_set_device_allocator(cpu, pool_alloc, pool_free, NULL) ==
                          MAMBA2_STATUS_INVALID_ARGUMENT &&
                      strstr(mamba2_last_error(), "device-mode CUDA"),
                  "a CPU context: %s", mamba2_last_error());
        th_expect(mamba2_context_set_device_indices(cpu, 1) == MAMBA2_STATUS_INVALID_ARGUMENT,
                  "set_device_indices on a CPU context must be INVALID_ARGUMENT");
    }
    mamba2_context_destroy(cpu);
    th_end();
    mamba2_context_t *dev = NULL, *host = NULL;
    const int have_gpu = tcu_open(&cu, 0);
    if (have_gpu && cu.cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */)) stream = NULL;
    const mamba2_status_t st = mamba2_context_create_cuda(&dev, 0, stream);
    if (!have_gpu) {
        th_begin("capture: no GPU");
        th_expect(st == MAMBA2_STATUS_BACKEND_UNAVAILABLE, "without a GPU: %s",
                  mamba2_status_string(st));
        th_end();
        return th_finish();
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib) {
        *(void **)&emu_count = dlsym(lib, "m2emu_call_count");
        *(void **)&emu_reset = dlsym(lib, "m2emu_reset_counts");
        if (!emu_count || !emu_reset) emu_count = NULL, emu_reset = NULL;
    }
    th_begin("capture: contexts and setters");
    th_expect(st == MAMBA2_STATUS_OK &&
                  mamba2_context_create(&host, MAMBA2_BACKEND_CUDA, 1) == MAMBA2_STATUS_OK,
              "create: %s", mamba2_last_error());
    th_expect(dev && mamba2_context_set_device_allocator(dev, pool_alloc, NULL, NULL) ==
                         MAMBA2_STATUS_INVALID_ARGUMENT,
              "alloc without free must be INVALID_ARGUMENT");
    th_expect(host && mamba2_context_set_device_indices(host, 1) ==
                          MAMBA2_STATUS_INVALID_ARGUMENT,
              "a host-mode CUDA context must be INVALID_ARGUMENT");
    const int ok = dev && host &&
                   th_expect(mamba2_context_set_device_allocator(dev, pool_alloc, pool_free,
                                                                 NULL) == MAMBA2_STATUS_OK &&
                                 mamba2_context_set_device_indices(dev, 1) == MAMBA2_STATUS_OK,
                             "setters: %s", mamba2_last_error());
    if (!emu_count) th_note("not the emulated device: driver calls not counted");
    th_end();
    if (ok) {
        tcase c;
        ssd_case(&c, "ssd_batched", 2, 77, NULL, 0, MAMBA2_DTYPE_F32);
        run_case(&c, host, dev);
        case_free(&c);
        /* an empty sequence: fewer chunks than the bound ceil(L/Q) + nseq the device sizes */
        ssd_case(&c, "ssd_varlen", 1, 150, SHAPE(0, 10, 10, 11, 81, 150), 5, MAMBA2_DTYPE_F32);
        run_case(&c, host, dev);
        case_free(&c);
        ssd_case(&c, "ssd_batched_bf16", 2, 40, NULL, 0, MAMBA2_DTYPE_BF16);
        run_case(&c, host, dev);
        case_free(&c);
        pos_case(&c);
        run_case(&c, host, dev);
        case_free(&c);
        conv_case(&c);
        run_case(&c, host, dev);
        case_free(&c);
        norm_case(&c);
        run_case(&c, host, dev);
        case_free(&c);
        cstep_case(&c, 0);
        run_case(&c, host, dev);
        case_free(&c);
        sstep_case(&c);
        run_case(&c, host, dev);
        case_free(&c);
        bad_values(dev);
    }
    mamba2_context_destroy(dev);
    mamba2_context_destroy(host);
    for (int i = 0; i < pool.n; i++) cu.cuMemFree_v2(pool.p[i]);
    if (stream) cu.cuStreamDestroy_v2(stream);
    return th_finish();
}
