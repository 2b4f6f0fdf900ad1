/*
 * ops_conv1d.c — host logic of the causal depthwise conv1d (SPEC §4) and its decode step
 * (SPEC §6) on a GPU backend (any m2g_dev): problem struct -> device tensors -> the launches
 * of src/gpu/kernels/conv1d.cl and step.cl.
 *
 * Forward: one launch for out, one for final_conv_state. Backward: one launch for dx and the
 * per-block partial sums of dweight/dbias (blocks of 64 tokens of a row, in device scratch),
 * one for dinitial_conv_state, one reducing the partials in block order; the block split
 * depends on the problem only, so the result is bitwise the same run to run and on any
 * device of one kind. Step: one launch, the cache and the output updated in place (padding
 * rows keep their values).
 */
#include "core/conv1d.h"
#include "gpu/ops_common.h"
#include "gpu_launch/conv1d.h"
#include "gpu_launch/step.h"

#define F4 sizeof(float)
#define CONV1D_TB 64 /* = CONV1D_TB in conv1d.cl */

typedef struct cv_dev {
    m2g_t x, w, bias, init;
    m2g_mem cu;
} cv_dev;

/* The inputs every conv1d kernel reads. */
static mamba2_status_t cv_inputs(m2g_call *c, const m2_conv1d_problem *pr, cv_dev *v) {
    const int64_t B = pr->B, L = pr->L, C = pr->C, W = pr->W, S = pr->nseq;
    M2_TRY(m2g_call_in(c, &pr->x, 3, (int64_t[]){B, L, C}, F4, &v->x));
    M2_TRY(m2g_call_in(c, &pr->weight, 2, (int64_t[]){C, W}, F4, &v->w));
    M2_TRY(m2g_call_in(c, &pr->bias, 1, (int64_t[]){C}, F4, &v->bias));
    M2_TRY(m2g_call_in(c, &pr->init, 3, (int64_t[]){S, C, W - 1}, F4, &v->init));
    return m2g_call_index(c, pr->cu_seqlens, pr->cu_dtype, pr->cu_seqlens ? S + 1 : 0, 1, 0, L,
                          &v->cu);
}

mamba2_status_t m2g_conv1d_forward(mamba2_context_t *ctx, const m2_conv1d_problem *pr) {
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_ops_f32(d, "conv1d", pr->act_dtype, pr->par_dtype));
    const int64_t B = pr->B, L = pr->L, C = pr->C, W = pr->W, S = pr->nseq;
    m2g_call c;
    m2g_call_begin(&c, d);
    cv_dev v;
    m2g_t out, fin;
    mamba2_status_t st = cv_inputs(&c, pr, &v);
    if (!st) st = m2g_call_out(&c, &pr->out, 3, (int64_t[]){B, L, C}, F4, &out);
    if (!st) st = m2g_call_out(&c, &pr->final, 3, (int64_t[]){S, C, W - 1}, F4, &fin);
    if (!st)
        st = M2G_LAUNCH(d, m2_conv1d_fwd_wi64, M2G_GRID64(B * L * C), .out = out, .x = v.x,
                        .w = v.w, .bias = v.bias, .has_bias = v.bias.present, .init = v.init,
                        .has_init = v.init.present, .cu = v.cu, .has_cu = pr->cu_seqlens != NULL,
                        .nseq = S, .B = B, .L = L, .C = C, .W = (int32_t)W, .silu = pr->silu);
    if (!st && fin.present)
        st = M2G_LAUNCH(d, m2_conv1d_final_wi64, M2G_GRID64(S * C * (W - 1)), .fin = fin,
                        .x = v.x, .init = v.init, .has_init = v.init.present, .cu = v.cu,
                        .has_cu = pr->cu_seqlens != NULL, .nseq = S, .L = L, .C = C,
                        .W = (int32_t)W);
    return m2g_call_end(&c, st);
}

/* Device scratch is the context's (gpu.h): nothing from the caller's workspace. */
mamba2_status_t m2g_conv1d_backward_workspace(const mamba2_context_t *ctx,
                                              const m2_conv1d_problem *pr, size_t *bytes) {
    (void)ctx;
    (void)pr;
    *bytes = 0;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_conv1d_backward(mamba2_context_t *ctx, const m2_conv1d_problem *pr,
                                    void *ws) {
    (void)ws;
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_ops_f32(d, "conv1d", pr->act_dtype, pr->par_dtype));
    const int64_t B = pr->B, L = pr->L, C = pr->C, W = pr->W, S = pr->nseq;
    const int64_t nblk = B * m2g_cdiv(L, CONV1D_TB);
    const int want_sums = pr->dweight.p || pr->dbias.p;
    m2g_call c;
    m2g_call_begin(&c, d);
    cv_dev v;
    m2g_t dout, dfin, dx, dw, db, dinit, part = {0};
    mamba2_status_t st = cv_inputs(&c, pr, &v);
    if (!st) st = m2g_call_in(&c, &pr->dout, 3, (int64_t[]){B, L, C}, F4, &dout);
    if (!st) st = m2g_call_in(&c, &pr->dfinal, 3, (int64_t[]){S, C, W - 1}, F4, &dfin);
    if (!st) st = m2g_call_out(&c, &pr->dx, 3, (int64_t[]){B, L, C}, F4, &dx);
    if (!st) st = m2g_call_out(&c, &pr->dweight, 2, (int64_t[]){C, W}, F4, &dw);
    if (!st) st = m2g_call_out(&c, &pr->dbias, 1, (int64_t[]){C}, F4, &db);
    if (!st) st = m2g_call_out(&c, &pr->dinit, 3, (int64_t[]){S, C, W - 1}, F4, &dinit);
    part.mem = d->dummy;
    if (!st && want_sums && nblk > 0) {
        size_t n = 0;
        if (!m2_size_prod(&n, 4, (int64_t[]){nblk, C, W + 1, (int64_t)F4}))
            st = m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: conv1d scratch too large",
                          d->api);
        if (!st) st = m2g_call_tmp(&c, n, &part.mem, &part.off, F4);
        part.present = 1;
    }
    if (!st && (dx.present || part.present)) /* dx, and the partial sums per block */
        st = M2G_LAUNCH(d, m2_conv1d_bwd_t64_wi64, M2G_GRID64(nblk * C), .dx = dx,
                        .has_dx = dx.present, .part = part, .has_part = part.present,
                        .dout = dout, .dfin = dfin, .has_dfin = dfin.present, .x = v.x,
                        .w = v.w, .bias = v.bias, .has_bias = v.bias.present, .init = v.init,
                        .has_init = v.init.present, .cu = v.cu, .has_cu = pr->cu_seqlens != NULL,
                        .nseq = S, .B = B, .L = L, .C = C, .W = (int32_t)W, .silu = pr->silu);
    if (!st && dinit.present)
        st = M2G_LAUNCH(d, m2_conv1d_bwd_dinit_wi64, M2G_GRID64(W > 1 ? S * C : 0),
                        .dinit = dinit, .dout = dout, .dfin = dfin, .has_dfin = dfin.present,
                        .x = v.x, .w = v.w, .bias = v.bias, .has_bias = v.bias.present,
                        .init = v.init, .cu = v.cu, .has_cu = pr->cu_seqlens != NULL,
                        .nseq = S, .L = L, .C = C, .W = (int32_t)W, .silu = pr->silu);
    if (!st && want_sums) /* the blocks reduced in block order */
        st = M2G_LAUNCH(d, m2_conv1d_bwd_reduce_wi64, M2G_GRID64(C * (W + 1)), .dw = dw,
                        .has_dw = dw.present, .db = db, .has_db = db.present, .part = part,
                        .nblk = part.present ? nblk : 0, .C = C, .W = (int32_t)W);
    return m2g_call_end(&c, st);
}

mamba2_status_t m2g_conv1d_step(mamba2_context_t *ctx, const m2_conv1d_problem *pr) {
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_ops_f32(d, "conv1d_step", pr->act_dtype, pr->par_dtype));
    const int64_t B = pr->B, T = pr->L, C = pr->C, W = pr->W, S = pr->S, Lc = pr->Lc;
    m2g_call c;
    m2g_call_begin(&c, d);
    m2g_t out, cache, x, w, bias;
    m2g_mem idx = d->dummy, seql = d->dummy;
    /* the cache may have any strides: a non-unit last stride travels as a 4th dimension of
     * size 1 ([S,C,Lc,1], strides s0, s1, s2, 1), so the call layer's "last dimension
     * contiguous" holds and the kernel gets all three strides either way */
    m2_view cv = pr->cache;
    const int crank = cv.s[2] == 1 || Lc <= 1 ? 3 : 4;
    if (crank == 3) cv.s[2] = 1;
    else cv.s[3] = 1;
    mamba2_status_t st = m2g_ops_inout(&c, &pr->out, 3, (int64_t[]){B, T, C}, F4, &out);
    if (!st) st = m2g_ops_inout(&c, &cv, crank, (int64_t[]){S, C, Lc, 1}, F4, &cache);
    if (!st) st = m2g_call_in(&c, &pr->x, 3, (int64_t[]){B, T, C}, F4, &x);
    if (!st) st = m2g_call_in(&c, &pr->weight, 2, (int64_t[]){C, W}, F4, &w);
    if (!st) st = m2g_call_in(&c, &pr->bias, 1, (int64_t[]){C}, F4, &bias);
    if (!st)
        st = m2g_call_index(&c, pr->state_indices, pr->idx_dtype, pr->state_indices ? B : 0, 0,
                            -1, S - 1, &idx);
    if (!st) /* circular positions: >= 0, far from overflow in cache_seqlens + t */
        st = m2g_call_index(&c, pr->cache_seqlens, pr->seq_dtype, pr->cache_seqlens ? B : 0, 0,
                            0, (int64_t)1 << 62, &seql);
    if (!st) /* cache: s0, s1 and the Lc stride (1 in the rank-3 form) */
        st = M2G_LAUNCH(d, m2_conv1d_step_wi64, M2G_GRID64(T > 0 ? B * C : 0), .out = out,
                        .cache = cache, .Lc = Lc, .x = x, .w = w, .bias = bias,
                        .has_bias = bias.present, .idx = idx,
                        .has_idx = pr->state_indices != NULL, .seql = seql,
                        .circular = pr->cache_seqlens != NULL, .B = B, .T = T, .C = C,
                        .W = (int32_t)W, .silu = pr->silu);
    return m2g_call_end(&c, st);
}
