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
    return m2g_ops_index(c, pr->cu_seqlens, pr->cu_dtype, pr->cu_seqlens ? S + 1 : 0, &v->cu);
}

static void cv_args_x(m2g_args *a, const cv_dev *v) { m2g_arg_t(a, &v->x, 2); }
static void cv_args_wb(m2g_args *a, const cv_dev *v) {
    m2g_arg_t(a, &v->w, 1);
    m2g_arg_t(a, &v->bias, 0);
    m2g_arg_i32(a, v->bias.present);
}
static void cv_args_cu(m2g_args *a, const m2_conv1d_problem *pr, const cv_dev *v) {
    m2g_arg_mem(a, v->cu);
    m2g_arg_i32(a, pr->cu_seqlens != NULL);
    m2g_arg_i64(a, pr->nseq);
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
    if (!st) {
        m2g_args a = {0};
        m2g_arg_t(&a, &out, 2);
        cv_args_x(&a, &v);
        cv_args_wb(&a, &v);
        m2g_arg_t(&a, &v.init, 2);
        m2g_arg_i32(&a, v.init.present);
        cv_args_cu(&a, pr, &v);
        m2g_arg_i64(&a, B);
        m2g_arg_i64(&a, L);
        m2g_arg_i64(&a, C);
        m2g_arg_i32(&a, (int32_t)W);
        m2g_arg_i32(&a, pr->silu);
        st = m2g_ops_launch1d(d, M2G_K_m2_conv1d_fwd_wi64, B * L * C, &a);
    }
    if (!st && fin.present) {
        m2g_args a = {0};
        m2g_arg_t(&a, &fin, 2);
        cv_args_x(&a, &v);
        m2g_arg_t(&a, &v.init, 2);
        m2g_arg_i32(&a, v.init.present);
        cv_args_cu(&a, pr, &v);
        m2g_arg_i64(&a, L);
        m2g_arg_i64(&a, C);
        m2g_arg_i32(&a, (int32_t)W);
        st = m2g_ops_launch1d(d, M2G_K_m2_conv1d_final_wi64, S * C * (W - 1), &a);
    }
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
    if (!st && (dx.present || part.present)) {
        m2g_args a = {0};
        m2g_arg_t(&a, &dx, 2);
        m2g_arg_i32(&a, dx.present);
        m2g_arg_t(&a, &part, 0);
        m2g_arg_i32(&a, part.present);
        m2g_arg_t(&a, &dout, 2);
        m2g_arg_t(&a, &dfin, 2);
        m2g_arg_i32(&a, dfin.present);
        cv_args_x(&a, &v);
        cv_args_wb(&a, &v);
        m2g_arg_t(&a, &v.init, 2);
        m2g_arg_i32(&a, v.init.present);
        cv_args_cu(&a, pr, &v);
        m2g_arg_i64(&a, B);
        m2g_arg_i64(&a, L);
        m2g_arg_i64(&a, C);
        m2g_arg_i32(&a, (int32_t)W);
        m2g_arg_i32(&a, pr->silu);
        st = m2g_ops_launch1d(d, M2G_K_m2_conv1d_bwd_t64_wi64, nblk * C, &a);
    }
    if (!st && dinit.present) {
        m2g_args a = {0};
        m2g_arg_t(&a, &dinit, 2);
        m2g_arg_t(&a, &dout, 2);
        m2g_arg_t(&a, &dfin, 2);
        m2g_arg_i32(&a, dfin.present);
        cv_args_x(&a, &v);
        cv_args_wb(&a, &v);
        m2g_arg_t(&a, &v.init, 2);
        cv_args_cu(&a, pr, &v);
        m2g_arg_i64(&a, L);
        m2g_arg_i64(&a, C);
        m2g_arg_i32(&a, (int32_t)W);
        m2g_arg_i32(&a, pr->silu);
        st = m2g_ops_launch1d(d, M2G_K_m2_conv1d_bwd_dinit_wi64, W > 1 ? S * C : 0, &a);
    }
    if (!st && want_sums) {
        m2g_args a = {0};
        m2g_arg_t(&a, &dw, 1);
        m2g_arg_i32(&a, dw.present);
        m2g_arg_t(&a, &db, 0);
        m2g_arg_i32(&a, db.present);
        m2g_arg_t(&a, &part, 0);
        m2g_arg_i64(&a, part.present ? nblk : 0);
        m2g_arg_i64(&a, C);
        m2g_arg_i32(&a, (int32_t)W);
        st = m2g_ops_launch1d(d, M2G_K_m2_conv1d_bwd_reduce_wi64, C * (W + 1), &a);
    }
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
        st = m2g_ops_index(&c, pr->state_indices, pr->idx_dtype, pr->state_indices ? B : 0, &idx);
    if (!st)
        st = m2g_ops_index(&c, pr->cache_seqlens, pr->seq_dtype, pr->cache_seqlens ? B : 0, &seql);
    if (!st) {
        m2g_args a = {0};
        m2g_arg_t(&a, &out, 2);
        m2g_arg_t(&a, &cache, 3); /* s0, s1 and the Lc stride (1 in the rank-3 form) */
        m2g_arg_i64(&a, Lc);
        m2g_arg_t(&a, &x, 2);
        m2g_arg_t(&a, &w, 1);
        m2g_arg_t(&a, &bias, 0);
        m2g_arg_i32(&a, bias.present);
        m2g_arg_mem(&a, idx);
        m2g_arg_i32(&a, pr->state_indices != NULL);
        m2g_arg_mem(&a, seql);
        m2g_arg_i32(&a, pr->cache_seqlens != NULL);
        m2g_arg_i64(&a, B);
        m2g_arg_i64(&a, T);
        m2g_arg_i64(&a, C);
        m2g_arg_i32(&a, (int32_t)W);
        m2g_arg_i32(&a, pr->silu);
        st = m2g_ops_launch1d(d, M2G_K_m2_conv1d_step_wi64, T > 0 ? B * C : 0, &a);
    }
    return m2g_call_end(&c, st);
}
