/*
 * bench_ops.c — mamba2c-bench --ops: the memory-bound ops at the sizes of a real model
 * (Mamba-2 2.7B): conv1d and gated RMSNorm forward/backward at prefill, ssd_step and
 * conv1d_step at decode batch 1 and 32, hot and cold caches.
 */
#include <stdio.h>
#include <string.h>

#include "bench_run.h"

/* ------------------------------------------------------------------------- */
/* Memory-bound ops at the sizes of a real model (--ops)                     */
/* ------------------------------------------------------------------------- */

/* After the allocations of an op: on out of memory prints "<what>: out of memory", counts a
 * failure and frees the pool (returns 1). */
static int pool_failed(pool *pl, const char *what) {
    if (!pl->oom) return 0;
    printf("%s: out of memory\n", what);
    g_failures++;
    pool_free(pl);
    return 1;
}

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
    if (pool_failed(&pl, "conv1d")) return;
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
    if (pool_failed(&pl, "rmsnorm")) return;
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

/* A step_run over ncache caches of cache_bytes each, the first allocated from pl. */
static void step_run_init(step_run *r, pool *pl, mamba2_context_t *ctx, size_t cache_bytes, int64_t ncache) {
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->cache_base = (char *)pool_alloc(pl, cache_bytes * (size_t)ncache);
    r->cache_stride = cache_bytes;
    r->ncache = ncache;
}

/* report() of a decode step; the cold runs note their number of caches. */
static void step_report(const settings *cfg, const char *name, const int64_t *shape, int rank,
                        mamba2_status_t st, double t, double flops, double bytes, int cold, int64_t ncache) {
    char extra[64] = "";
    if (cold) snprintf(extra, sizeof extra, "(%lld caches)", (long long)ncache);
    report(cfg, name, shape, rank, "fwd", st, t, flops, bytes, 1, cold ? extra : NULL);
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
    step_run_init(&r, &pl, ctx, cache_bytes, ncache);
    void *x = pool_alloc(&pl, (size_t)(B * H * P) * ae), *out = pool_alloc(&pl, (size_t)(B * H * P) * ae);
    void *dt = pool_alloc(&pl, (size_t)(B * H) * ae);
    void *Bm = pool_alloc(&pl, (size_t)(B * G * N) * ae), *Cm = pool_alloc(&pl, (size_t)(B * G * N) * ae);
    float *A = (float *)pool_alloc(&pl, (size_t)H * 4), *D = (float *)pool_alloc(&pl, (size_t)H * 4);
    float *dt_bias = (float *)pool_alloc(&pl, (size_t)H * 4);
    char name[48];
    snprintf(name, sizeof name, "ssd_step_b%lld%s", (long long)B, cold ? "_cold" : "");
    const int64_t shape[4] = {B, H, P, N};
    if (pool_failed(&pl, name)) return;
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
    step_report(cfg, name, shape, 4, st, t, 4.0 * (double)(B * H * P * N), bytes, cold, ncache);
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
    step_run_init(&r, &pl, ctx, cache_bytes, ncache);
    void *x = pool_alloc(&pl, (size_t)(B * C) * ae), *out = pool_alloc(&pl, (size_t)(B * C) * ae);
    float *w = (float *)pool_alloc(&pl, (size_t)(C * W) * 4), *bias = (float *)pool_alloc(&pl, (size_t)C * 4);
    char name[48];
    snprintf(name, sizeof name, "conv1d_step_b%lld%s", (long long)B, cold ? "_cold" : "");
    const int64_t shape[3] = {B, C, W};
    if (pool_failed(&pl, name)) return;
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
    step_report(cfg, name, shape, 3, st, t, 2.0 * (double)(B * C * W), bytes, cold, ncache);
    pool_free(&pl);
}

void run_ops(mamba2_context_t *ctx, const settings *cfg) {
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
