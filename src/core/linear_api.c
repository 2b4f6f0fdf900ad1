/*
 * linear_api.c — the public decode linear layer (mamba2_linear_forward): argument validation
 * and dispatch.
 *
 * Every check a backend relies on happens here, once, before out is touched: ranks, shapes
 * (M and I from x, O from weight), dtypes, strides (m2_check_tensor; a Q8_0 weight has no
 * element size, so its rows and byte extent are checked here with checked arithmetic), the
 * Q8_0 rule that I and the row stride are multiples of 32, and out overlapping an input.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/internal.h"
#include "core/linear.h"

/* The byte range [lo, hi) of a Q8_0 weight [O,I] with row stride rs elements (both checked
 * by the caller: O, I <= 2^40, rs a multiple of 32 <= 2^40). */
static void q8_range(const mamba2_tensor_t *w, int64_t O, int64_t I, int64_t *lo, int64_t *hi) {
    const int64_t rs = O > 1 ? w->stride[0] : 0;
    *lo = (int64_t)(intptr_t)w->data;
    *hi = *lo + ((O - 1) * (rs / M2_Q8_0_BLOCK) + I / M2_Q8_0_BLOCK) * M2_Q8_0_BYTES;
}

static mamba2_status_t check_q8_weight(const mamba2_tensor_t *w, int64_t O, int64_t I) {
    char got[128];
    if (I % M2_Q8_0_BLOCK != 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "weight is q8_0 with I=%lld inputs per row; q8_0 needs I to be a multiple "
                        "of its 32-element block",
                        (long long)I);
    if (w->stride[0] < 0 || w->stride[1] < 0 || w->stride[0] > MAX_DIM) {
        m2_fmt_dims(got, sizeof got, 2, w->stride);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "weight has strides %s; expected non-negative strides up to 2^40", got);
    }
    if (I > 1 && w->stride[1] != 1) {
        m2_fmt_dims(got, sizeof got, 2, w->stride);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "weight has strides %s; its last dimension must be contiguous (stride 1)",
                        got);
    }
    if (O > 1 && w->stride[0] % M2_Q8_0_BLOCK != 0) {
        m2_fmt_dims(got, sizeof got, 2, w->stride);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "weight is q8_0 with strides %s; its row stride must be a multiple of the "
                        "32-element block",
                        got);
    }
    /* (O-1) * (rs/32) + I/32 blocks of 34 bytes: below 2^40 * 2^35 * 34, well inside int64,
     * but the whole extent must also be addressable like any other tensor's */
    int64_t lo, hi;
    if (O > 0 && I > 0) {
        q8_range(w, O, I, &lo, &hi);
        if (hi - lo > ((int64_t)1 << 58))
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "weight spans more memory than can be addressed (strides too large)");
        if (!w->data)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "weight has %lld x %lld elements but a NULL data pointer",
                            (long long)O, (long long)I);
    }
    return MAMBA2_STATUS_OK;
}

static mamba2_status_t validate(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                const mamba2_tensor_t *x, const mamba2_tensor_t *w,
                                const mamba2_linear_options_t *o, m2_linear_problem *pr) {
    memset(pr, 0, sizeof *pr);
    const m2_backend_ops *ops = ctx->ops;
    if (!ops->linear_forward)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                        "the %s backend does not implement the linear layer "
                        "(mamba2_linear_forward runs on the cpu and ref backends)",
                        ops->name);
    M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_LINEAR_OPTIONS, "opts", o->struct_size));
    if (!out) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "out is NULL (required)");
    if (!x) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "x is NULL (required)");
    if (!w) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "weight is NULL (required)");

    const mamba2_dtype_t adt = x->dtype;
    M2_TRY(m2_check_act_dtype("x", adt, ops->act_dtypes, ops->name, "the linear layer"));
    if (x->rank != 2)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "x has rank %d; expected rank 2 [M,I]",
                        (int)x->rank);
    if (w->rank != 2)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "weight has rank %d; expected rank 2 [O,I]", (int)w->rank);
    const int64_t M = x->shape[0], I = x->shape[1], O = w->shape[0];
    char g1[128], g2[128];
    if (M < 0 || M > MAX_DIM || I < 0 || I > MAX_DIM || O < 0 || O > MAX_DIM) {
        m2_fmt_dims(g1, sizeof g1, 2, x->shape);
        m2_fmt_dims(g2, sizeof g2, 2, w->shape);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "x has shape %s and weight %s; expected x [M,I], weight [O,I] with every "
                        "size in 0..2^40",
                        g1, g2);
    }
    if (w->shape[1] != I) {
        m2_fmt_dims(g1, sizeof g1, 2, x->shape);
        m2_fmt_dims(g2, sizeof g2, 2, w->shape);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "weight has shape %s; expected [O,I] with I=%lld (x has shape %s)", g2,
                        (long long)I, g1);
    }
    const mamba2_dtype_t wdt = w->dtype;
    if (wdt != MAMBA2_DTYPE_F32 && wdt != MAMBA2_DTYPE_BF16 && wdt != MAMBA2_DTYPE_Q8_0)
        return m2_error(wdt == MAMBA2_DTYPE_F16 || wdt == MAMBA2_DTYPE_F64
                            ? MAMBA2_STATUS_UNSUPPORTED /* a float, just not one we take */
                            : MAMBA2_STATUS_INVALID_ARGUMENT,
                        "weight has dtype %s; the linear layer takes f32, bf16 or q8_0 weights",
                        m2_dtype_name(wdt));

    const char *awhy = "the dtype of x";
    const int64_t sh_mi[2] = {M, I}, sh_mo[2] = {M, O}, sh_oi[2] = {O, I}, sh_o[1] = {O};
    int64_t n;
    span ins[3], outs[1];
    int nin = 0, nout = 0;
    M2_IN("x", x, 2, sh_mi, "[M,I]", adt, awhy);
    if (o->bias) M2_IN("bias", o->bias, 1, sh_o, "[O]", adt, awhy);
    if (wdt == MAMBA2_DTYPE_Q8_0) {
        M2_TRY(check_q8_weight(w, O, I));
    } else {
        M2_IN("weight", w, 2, sh_oi, "[O,I]", wdt, "the weight's own dtype");
    }
    M2_OUT("out", out, 2, sh_mo, "[M,O]", adt, awhy);
    M2_TRY(m2_check_no_overlap(ins, nin, outs, nout, NULL));
    if (wdt == MAMBA2_DTYPE_Q8_0 && M > 0 && O > 0 && I > 0) {
        /* no element size for the span machinery: compare byte ranges (conservative) */
        int64_t wlo, whi, olo, ohi;
        q8_range(w, O, I, &wlo, &whi);
        olo = (int64_t)(intptr_t)out->data;
        ohi = olo + ((M - 1) * out->stride[0] + (O - 1) * out->stride[1] + 1) *
                        (int64_t)mamba2_dtype_size(adt);
        if (!(ohi <= wlo || whi <= olo))
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "output out overlaps input weight in memory");
    }

    pr->M = M;
    pr->O = O;
    pr->I = I;
    pr->act_dtype = adt;
    pr->w_dtype = wdt;
    pr->accumulate = o->accumulate != 0;
    /* quantize_x (appended after v1: read only when struct_size covers it) */
    const size_t qx_end = offsetof(mamba2_linear_options_t, quantize_x) + sizeof o->quantize_x;
    pr->quantize_x = wdt == MAMBA2_DTYPE_Q8_0 && o->struct_size >= qx_end && o->quantize_x != 0;
    pr->w_row_bytes = wdt == MAMBA2_DTYPE_Q8_0
                          ? (O > 1 ? w->stride[0] / M2_Q8_0_BLOCK * M2_Q8_0_BYTES : 0)
                          : w->stride[0] * (int64_t)mamba2_dtype_size(wdt);
    pr->x = m2_view_of(x);
    pr->w = m2_view_of(w);
    pr->bias = m2_view_of(o->bias);
    pr->out = m2_view_of(out);
    return MAMBA2_STATUS_OK;
}

mamba2_linear_options_t mamba2_linear_options_default(void) {
    mamba2_linear_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = (uint32_t)sizeof o;
    return o;
}

mamba2_status_t mamba2_linear_forward(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                      const mamba2_tensor_t *x, const mamba2_tensor_t *weight,
                                      const mamba2_linear_options_t *opts) {
    m2_clear_error();
    const mamba2_linear_options_t defaults = mamba2_linear_options_default();
    M2_TRY(m2_ctx_enter(ctx));
    m2_linear_problem pr;
    mamba2_status_t st = validate(ctx, out, x, weight, opts ? opts : &defaults, &pr);
    if (st == MAMBA2_STATUS_OK && pr.M > 0 && pr.O > 0) st = ctx->ops->linear_forward(ctx, &pr);
    m2_ctx_leave(ctx);
    return st;
}

/* The checks without the context bracket (block_step_api.c). */
mamba2_status_t m2_linear_prepare(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                  const mamba2_tensor_t *x, const mamba2_tensor_t *weight,
                                  const mamba2_linear_options_t *opts, m2_linear_problem *pr) {
    return validate(ctx, out, x, weight, opts, pr);
}
