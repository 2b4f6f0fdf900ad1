/*
 * bench_ssd.c — mamba2c-bench's SSD cases: the fused forward (and the training forward and
 * backward with --backward) of one case of the shape matrix, with analytic flop and byte counts.
 */
#include <stdio.h>
#include <string.h>

#include "bench_run.h"

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

void run_ssd_case(mamba2_context_t *ctx, const settings *cfg, const char *name,
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
