/*
 * rmsnorm_api.c — public gated RMSNorm entry points (SPEC §5): argument validation,
 * workspace, dispatch.
 *
 * Every check a backend relies on happens here, once, before any output is touched: ranks,
 * shapes (M and D come from x, G from the options), dtypes, strides (through
 * m2_check_tensor), option values, gradients asked for without their input, and outputs
 * overlapping inputs or each other. The validated problem goes to the context's backend as
 * an m2_rmsnorm_problem (core/rmsnorm.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/rmsnorm.h"

typedef struct rms_call {
    mamba2_context_t *ctx;
    const mamba2_rmsnorm_gated_options_t *opts;
    const mamba2_tensor_t *x, *z, *weight, *bias;
    const mamba2_tensor_t *out, *rstd;              /* forward outputs  */
    const mamba2_rmsnorm_gated_grads_t *grads;      /* backward outputs */
    const mamba2_tensor_t *dout, *rstd_in;          /* backward inputs  */
    int backward;
} rms_call;

static mamba2_status_t validate(const rms_call *c, m2_rmsnorm_problem *pr) {
    memset(pr, 0, sizeof *pr);
    if (!c->ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx is NULL");
    const m2_backend_ops *ops = c->ctx->ops;
    if (c->backward ? (!ops->rmsnorm_backward || !ops->rmsnorm_backward_workspace)
                    : (!ops->rmsnorm_forward || !ops->rmsnorm_forward_workspace))
        return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                        "the %s backend does not implement the gated RMSNorm %s", ops->name,
                        c->backward ? "backward" : "forward");
    const mamba2_rmsnorm_gated_options_t *o = c->opts;
    M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_RMSNORM_OPTIONS, "opts", o->struct_size));
    if (c->backward && c->grads)
        M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_RMSNORM_GRADS, "grads", c->grads->struct_size));
    if (!c->x) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "x is NULL (required)");
    if (!c->weight) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "weight is NULL (required)");
    if (!c->backward && !c->out)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "out is NULL (required)");
    if (c->backward && !c->dout)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "dout is NULL (required)");
    if (c->backward && !c->grads)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "grads is NULL (required)");

    /* dtypes: x decides the activation dtype; the backend must support it */
    mamba2_dtype_t adt = c->x->dtype;
    M2_TRY(m2_check_act_dtype("x", adt, ops->act_dtypes, ops->name, "the gated RMSNorm"));
    mamba2_dtype_t pdt = adt == MAMBA2_DTYPE_F64 ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    const char *awhy = "the dtype of x";
    const char *pwhy = pdt == MAMBA2_DTYPE_F64 ? "weight, bias and rstd follow f64 activations"
                                               : "weight, bias and rstd are f32";

    /* sizes from x [M,D] */
    if (c->x->rank != 2)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "x has rank %d; expected rank 2 [M,D]",
                        (int)c->x->rank);
    const int64_t M = c->x->shape[0], D = c->x->shape[1];
    if (M < 0 || M > MAX_DIM || D < 1 || D > MAX_DIM) {
        char gx[128];
        m2_fmt_dims(gx, sizeof gx, 2, c->x->shape);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "x has shape %s; expected [M,D] with 0 <= M and 1 <= D, both <= 2^40", gx);
    }

    /* options */
    if (isnan(o->eps) || o->eps < 0.0 || isinf(o->eps))
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "eps is %g; expected a finite value >= 0",
                        o->eps);
    if (o->group_size < 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "group_size is %lld; expected >= 1 (or 0 for the whole row D=%lld)",
                        (long long)o->group_size, (long long)D);
    const int64_t S = o->group_size == 0 ? D : o->group_size;
    if (D % S != 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "group_size is %lld, which does not divide x's channel count D=%lld",
                        (long long)S, (long long)D);
    const int64_t G = D / S;

    /* every tensor against its expected shape */
    const int64_t sh_md[2] = {M, D}, sh_d[1] = {D}, sh_mg[2] = {M, G};
    int64_t n;
    span ins[8], outs[8];
    int nin = 0, nout = 0;
    M2_IN("x", c->x, 2, sh_md, "[M,D]", adt, awhy);
    if (c->z) M2_IN("z", c->z, 2, sh_md, "[M,D] (the shape of x)", adt, awhy);
    M2_IN("weight", c->weight, 1, sh_d, "[D]", pdt, pwhy);
    if (c->bias) M2_IN("bias", c->bias, 1, sh_d, "[D]", pdt, pwhy);
    if (!c->backward) {
        M2_OUT("out", c->out, 2, sh_md, "[M,D] (the shape of x)", adt, awhy);
        if (c->rstd) M2_OUT("rstd", c->rstd, 2, sh_mg, "[M,D/group_size]", pdt, pwhy);
    } else {
        M2_IN("dout", c->dout, 2, sh_md, "[M,D] (the shape of x)", adt, awhy);
        if (c->rstd_in) M2_IN("rstd", c->rstd_in, 2, sh_mg, "[M,D/group_size]", pdt, pwhy);
        const mamba2_rmsnorm_gated_grads_t *g = c->grads;
        if (g->dx) M2_OUT("dx", g->dx, 2, sh_md, "[M,D] (the shape of x)", adt, awhy);
        if (g->dz) {
            if (!c->z) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "dz is requested but z is not given");
            M2_OUT("dz", g->dz, 2, sh_md, "[M,D] (the shape of z)", adt, awhy);
        }
        if (g->dweight) M2_OUT("dweight", g->dweight, 1, sh_d, "[D]", pdt, pwhy);
        if (g->dbias) {
            if (!c->bias)
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "dbias is requested but bias is not given");
            M2_OUT("dbias", g->dbias, 1, sh_d, "[D]", pdt, pwhy);
        }
    }

    /* no output may share memory with an input or another output */
    M2_TRY(m2_check_no_overlap(ins, nin, outs, nout, NULL));

    pr->M = M;
    pr->D = D;
    pr->S = S;
    pr->G = G;
    pr->eps = o->eps;
    pr->norm_before_gate = o->norm_before_gate != 0;
    pr->act_dtype = adt;
    pr->par_dtype = pdt;
    pr->x = m2_view_of(c->x);
    pr->z = m2_view_of(c->z);
    pr->weight = m2_view_of(c->weight);
    pr->bias = m2_view_of(c->bias);
    if (!c->backward) {
        pr->out = m2_view_of(c->out);
        pr->rstd = m2_view_of(c->rstd);
    } else {
        pr->dout = m2_view_of(c->dout);
        pr->rstd_in = m2_view_of(c->rstd_in);
        pr->dx = m2_view_of(c->grads->dx);
        pr->dz = m2_view_of(c->grads->dz);
        pr->dweight = m2_view_of(c->grads->dweight);
        pr->dbias = m2_view_of(c->grads->dbias);
    }
    return MAMBA2_STATUS_OK;
}

/* ---- workspace and dispatch --------------------------------------------------------- */

static mamba2_status_t query(const rms_call *c, m2_rmsnorm_problem *pr, size_t *bytes) {
    M2_TRY(validate(c, pr));
    size_t b = 0;
    M2_TRY(c->backward ? c->ctx->ops->rmsnorm_backward_workspace(c->ctx, pr, &b)
                    : c->ctx->ops->rmsnorm_forward_workspace(c->ctx, pr, &b));
    M2_TRY(m2_workspace_padded(b, bytes));
    return MAMBA2_STATUS_OK;
}

static mamba2_status_t run_locked(const rms_call *c, void *workspace, size_t workspace_size) {
    m2_rmsnorm_problem pr;
    size_t need = 0;
    M2_TRY(query(c, &pr, &need));
    void *ws, *owned;
    M2_TRY(m2_workspace_acquire(need, workspace, workspace_size, &ws, &owned));
    mamba2_status_t st = c->backward ? c->ctx->ops->rmsnorm_backward(c->ctx, &pr, ws)
                                     : c->ctx->ops->rmsnorm_forward(c->ctx, &pr, ws);
    free(owned);
    return st;
}

/* The entry points' work, with the context held (m2_ctx_enter: BUSY while another call
 * runs on it). */
static mamba2_status_t run(const rms_call *c, void *workspace, size_t workspace_size) {
    M2_TRY(m2_ctx_enter(c->ctx));
    mamba2_status_t st = run_locked(c, workspace, workspace_size);
    m2_ctx_leave(c->ctx);
    return st;
}

static mamba2_status_t query_entry(const rms_call *c, m2_rmsnorm_problem *pr, size_t *bytes) {
    M2_TRY(m2_ctx_enter(c->ctx));
    mamba2_status_t st = query(c, pr, bytes);
    m2_ctx_leave(c->ctx);
    return st;
}

mamba2_rmsnorm_gated_options_t mamba2_rmsnorm_gated_options_default(void) {
    mamba2_rmsnorm_gated_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = (uint32_t)sizeof o;
    o.eps = 1e-5;
    o.group_size = 0;
    o.norm_before_gate = 0;
    return o;
}

static rms_call fwd_call(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                         const mamba2_tensor_t *rstd, const mamba2_tensor_t *x,
                         const mamba2_tensor_t *z, const mamba2_tensor_t *weight,
                         const mamba2_tensor_t *bias, const mamba2_rmsnorm_gated_options_t *opts,
                         mamba2_rmsnorm_gated_options_t *defaults) {
    rms_call c;
    memset(&c, 0, sizeof c);
    *defaults = mamba2_rmsnorm_gated_options_default();
    c.ctx = ctx;
    c.opts = opts ? opts : defaults;
    c.x = x;
    c.z = z;
    c.weight = weight;
    c.bias = bias;
    c.out = out;
    c.rstd = rstd;
    return c;
}

static rms_call bwd_call(mamba2_context_t *ctx, const mamba2_rmsnorm_gated_grads_t *grads,
                         const mamba2_tensor_t *dout, const mamba2_tensor_t *x,
                         const mamba2_tensor_t *z, const mamba2_tensor_t *weight,
                         const mamba2_tensor_t *bias, const mamba2_tensor_t *rstd,
                         const mamba2_rmsnorm_gated_options_t *opts,
                         mamba2_rmsnorm_gated_options_t *defaults) {
    rms_call c = fwd_call(ctx, NULL, NULL, x, z, weight, bias, opts, defaults);
    c.backward = 1;
    c.grads = grads;
    c.dout = dout;
    c.rstd_in = rstd;
    return c;
}

mamba2_status_t mamba2_rmsnorm_gated_forward_workspace_size(
    mamba2_context_t *ctx, const mamba2_tensor_t *out, const mamba2_tensor_t *rstd,
    const mamba2_tensor_t *x, const mamba2_tensor_t *z, const mamba2_tensor_t *weight,
    const mamba2_tensor_t *bias, const mamba2_rmsnorm_gated_options_t *opts,
    size_t *workspace_size) {
    m2_clear_error();
    if (!workspace_size) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "workspace_size is NULL");
    *workspace_size = 0;
    mamba2_rmsnorm_gated_options_t defaults;
    rms_call c = fwd_call(ctx, out, rstd, x, z, weight, bias, opts, &defaults);
    m2_rmsnorm_problem pr;
    return query_entry(&c, &pr, workspace_size);
}

mamba2_status_t mamba2_rmsnorm_gated_forward(
    mamba2_context_t *ctx, const mamba2_tensor_t *out, const mamba2_tensor_t *rstd,
    const mamba2_tensor_t *x, const mamba2_tensor_t *z, const mamba2_tensor_t *weight,
    const mamba2_tensor_t *bias, const mamba2_rmsnorm_gated_options_t *opts, void *workspace,
    size_t workspace_size) {
    m2_clear_error();
    mamba2_rmsnorm_gated_options_t defaults;
    rms_call c = fwd_call(ctx, out, rstd, x, z, weight, bias, opts, &defaults);
    return run(&c, workspace, workspace_size);
}

mamba2_status_t mamba2_rmsnorm_gated_backward_workspace_size(
    mamba2_context_t *ctx, const mamba2_rmsnorm_gated_grads_t *grads,
    const mamba2_tensor_t *dout, const mamba2_tensor_t *x, const mamba2_tensor_t *z,
    const mamba2_tensor_t *weight, const mamba2_tensor_t *bias, const mamba2_tensor_t *rstd,
    const mamba2_rmsnorm_gated_options_t *opts, size_t *workspace_size) {
    m2_clear_error();
    if (!workspace_size) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "workspace_size is NULL");
    *workspace_size = 0;
    mamba2_rmsnorm_gated_options_t defaults;
    rms_call c = bwd_call(ctx, grads, dout, x, z, weight, bias, rstd, opts, &defaults);
    m2_rmsnorm_problem pr;
    return query_entry(&c, &pr, workspace_size);
}

mamba2_status_t mamba2_rmsnorm_gated_backward(
    mamba2_context_t *ctx, const mamba2_rmsnorm_gated_grads_t *grads,
    const mamba2_tensor_t *dout, const mamba2_tensor_t *x, const mamba2_tensor_t *z,
    const mamba2_tensor_t *weight, const mamba2_tensor_t *bias, const mamba2_tensor_t *rstd,
    const mamba2_rmsnorm_gated_options_t *opts, void *workspace, size_t workspace_size) {
    m2_clear_error();
    mamba2_rmsnorm_gated_options_t defaults;
    rms_call c = bwd_call(ctx, grads, dout, x, z, weight, bias, rstd, opts, &defaults);
    return run(&c, workspace, workspace_size);
}

/* The forward's checks and workspace query without the context bracket, for an entry point
 * that composes ops on a context it already holds (block_step_api.c). */
mamba2_status_t m2_rmsnorm_forward_prepare(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                           const mamba2_tensor_t *x, const mamba2_tensor_t *z,
                                           const mamba2_tensor_t *weight,
                                           const mamba2_rmsnorm_gated_options_t *opts,
                                           m2_rmsnorm_problem *pr, size_t *bytes) {
    mamba2_rmsnorm_gated_options_t defaults;
    rms_call c = fwd_call(ctx, out, NULL, x, z, weight, NULL, opts, &defaults);
    return query(&c, pr, bytes);
}
