/*
 * conv1d_api.c — public entry points of the causal depthwise conv1d (SPEC §4) and its decode
 * step (SPEC §6): argument validation, workspace, dispatch.
 *
 * As in ssd_api.c, every check a backend relies on happens here, once, before any output is
 * touched: ranks, shapes (B, L, C from x; W from weight), dtypes, strides (non-negative, last
 * dimension contiguous, outputs not self-overlapping), data pointers, outputs overlapping
 * inputs or each other (the step's conv_cache is updated in place and is exempt only from
 * overlapping itself), the activation, cu_seqlens and state_indices. The validated problem is
 * handed to the context's backend as an m2_conv1d_problem (core/conv1d.h).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv1d.h"

typedef enum { CALL_FORWARD = 0, CALL_BACKWARD = 1, CALL_STEP = 2 } call_kind;

typedef struct conv_call {
    call_kind kind;
    mamba2_context_t *ctx;
    const mamba2_tensor_t *x, *weight;
    /* forward / backward */
    const mamba2_conv1d_options_t *opts;
    const mamba2_tensor_t *out, *final_state;  /* forward outputs  */
    const mamba2_conv1d_grads_t *grads;        /* backward outputs */
    const mamba2_tensor_t *dout, *dfinal;      /* backward inputs  */
    /* step */
    const mamba2_conv1d_step_options_t *sopts;
    const mamba2_tensor_t *cache;
} conv_call;

static const char *call_name(call_kind k) {
    return k == CALL_FORWARD ? "conv1d_forward" : k == CALL_BACKWARD ? "conv1d_backward"
                                                                     : "conv1d_step";
}

static mamba2_status_t validate(const conv_call *c, m2_conv1d_problem *pr) {
    memset(pr, 0, sizeof *pr);
    if (!c->ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx is NULL");
    const m2_backend_ops *ops = c->ctx->ops;
    int have = c->kind == CALL_FORWARD    ? ops->conv1d_forward != NULL
               : c->kind == CALL_BACKWARD ? (ops->conv1d_backward != NULL &&
                                             ops->conv1d_backward_workspace != NULL)
                                          : ops->conv1d_step != NULL;
    if (!have)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED, "the %s backend does not implement %s", ops->name,
                        call_name(c->kind));

    const int step = c->kind == CALL_STEP;
    if (step)
        M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_CONV1D_STEP_OPTIONS, "opts", c->sopts->struct_size));
    else
        M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_CONV1D_OPTIONS, "opts", c->opts->struct_size));
    if (c->kind == CALL_BACKWARD && c->grads)
        M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_CONV1D_GRADS, "grads", c->grads->struct_size));
    const char *req_names[3] = {"x", "weight",
                                c->kind == CALL_FORWARD    ? "out"
                                : c->kind == CALL_BACKWARD ? "dout"
                                                           : "out"};
    const mamba2_tensor_t *req[3] = {c->x, c->weight,
                                     c->kind == CALL_BACKWARD ? c->dout : c->out};
    for (int i = 0; i < 3; i++)
        if (!req[i])
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s is NULL (required)", req_names[i]);
    if (c->kind == CALL_BACKWARD && !c->grads)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "grads is NULL (required)");
    if (step && !c->cache)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "conv_cache is NULL (required)");

    /* dtypes: x decides the activation dtype; the backend must support it */
    mamba2_dtype_t adt = c->x->dtype;
    const int step_kind = c->kind == CALL_STEP;
    M2_TRY(m2_check_act_dtype("x", adt,
                              ops->act_dtypes | (step_kind ? ops->step_extra_act_dtypes : 0u),
                              ops->name, call_name(c->kind)));
    mamba2_dtype_t pdt = adt == MAMBA2_DTYPE_F64 ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    const char *awhy = "the dtype of x";
    const char *pwhy = pdt == MAMBA2_DTYPE_F64 ? "weight and bias follow f64 activations"
                                               : "weight and bias are f32";
    const int half_act = adt == MAMBA2_DTYPE_BF16 || adt == MAMBA2_DTYPE_F16;
    if (half_act) {
        /* the step with half activations: weight (and bias) f32, or x's own dtype */
        if (c->weight && c->weight->dtype == adt) pdt = adt;
        pwhy = adt == MAMBA2_DTYPE_BF16 ? "weight and bias are f32, or bf16 like x, both alike"
                                        : "weight and bias are f32, or f16 like x, both alike";
    }

    /* sizes: B, L, C from x ([B,L,C]; the step also takes [B,C]), W from weight [C,W] */
    const int xrank = c->x->rank;
    if (!(xrank == 3 || (step && xrank == 2)))
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "x has rank %d; expected %s", xrank,
                        step ? "rank 2 [B,C] or rank 3 [B,T,C]" : "rank 3 [B,L,C]");
    for (int i = 0; i < xrank; i++) {
        if (c->x->shape[i] < 0 || c->x->shape[i] > MAX_DIM) {
            char g[128];
            m2_fmt_dims(g, sizeof g, xrank, c->x->shape);
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "x has shape %s: sizes must be in [0, 2^40]",
                            g);
        }
    }
    const int64_t B = c->x->shape[0];
    const int64_t L = xrank == 3 ? c->x->shape[1] : 1;
    const int64_t C = c->x->shape[xrank - 1];
    if (B < 1 || C < 1) {
        char g[128];
        m2_fmt_dims(g, sizeof g, xrank, c->x->shape);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "x has shape %s: B and C must be >= 1 (only %s may be 0)", g,
                        step ? "T" : "L");
    }
    if (c->weight->rank != 2)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "weight has rank %d; expected rank 2 [C,W]",
                        (int)c->weight->rank);
    const int64_t W = c->weight->shape[1];
    if (W < 1 || W > M2_CONV1D_MAX_W) {
        char g[128];
        m2_fmt_dims(g, sizeof g, 2, c->weight->shape);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "weight has shape %s = [C,W]; the kernel width W must be in 1..%d", g,
                        M2_CONV1D_MAX_W);
    }

    /* options */
    const mamba2_tensor_t *bias = step ? c->sopts->bias : c->opts->bias;
    const mamba2_activation_t act = step ? c->sopts->activation : c->opts->activation;
    if (act != MAMBA2_ACTIVATION_NONE && act != MAMBA2_ACTIVATION_SILU)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "activation is %d; expected MAMBA2_ACTIVATION_NONE (0) or "
                        "MAMBA2_ACTIVATION_SILU (1)",
                        (int)act);

    int64_t S = B;
    const mamba2_tensor_t *init = NULL, *cu = NULL;
    if (!step) {
        init = c->opts->initial_conv_state;
        cu = c->opts->cu_seqlens;
        if (cu) {
            M2_TRY(m2_check_cu_seqlens(cu, B, L, !c->ctx->device_indices, &S));
            pr->cu_seqlens = cu->data;
            pr->cu_dtype = cu->dtype;
        }
    }

    /* every tensor against its expected shape */
    const int64_t sh_x3[3] = {B, L, C}, sh_x2[2] = {B, C}, sh_w[2] = {C, W}, sh_c[1] = {C};
    const int64_t *sh_x = xrank == 3 ? sh_x3 : sh_x2;
    const char *x_layout = step ? (xrank == 3 ? "[B,T,C]" : "[B,C]") : "[B,L,C]";
    const char *st_layout = cu ? "[nseq,C,W-1]" : "[B,C,W-1]";
    int64_t n;
    span ins[12], outs[8];
    int nin = 0, nout = 0;
    M2_IN("x", c->x, xrank, sh_x, x_layout, adt, awhy);
    M2_IN("weight", c->weight, 2, sh_w, "[C,W]", pdt, pwhy);
    if (bias) M2_IN("bias", bias, 1, sh_c, "[C]", pdt, pwhy);

    if (c->kind == CALL_FORWARD) {
        const int64_t sh_st[3] = {S, C, W - 1};
        if (init) M2_IN("initial_conv_state", init, 3, sh_st, st_layout, adt, awhy);
        if (cu) ins[nin++] = (span){"cu_seqlens", cu, cu->shape[0]};
        M2_OUT("out", c->out, 3, sh_x, x_layout, adt, awhy);
        if (c->final_state) M2_OUT("final_conv_state", c->final_state, 3, sh_st, st_layout, adt, awhy);
    } else if (c->kind == CALL_BACKWARD) {
        const int64_t sh_st[3] = {S, C, W - 1};
        if (init) M2_IN("initial_conv_state", init, 3, sh_st, st_layout, adt, awhy);
        if (cu) ins[nin++] = (span){"cu_seqlens", cu, cu->shape[0]};
        M2_IN("dout", c->dout, 3, sh_x, x_layout, adt, awhy);
        if (c->dfinal) M2_IN("dfinal_conv_state", c->dfinal, 3, sh_st, st_layout, adt, awhy);
        const mamba2_conv1d_grads_t *g = c->grads;
        if (g->dx) M2_OUT("dx", g->dx, 3, sh_x, x_layout, adt, awhy);
        if (g->dweight) M2_OUT("dweight", g->dweight, 2, sh_w, "[C,W]", pdt, pwhy);
        if (g->dbias) {
            if (!bias)
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "dbias is requested but bias is not given");
            M2_OUT("dbias", g->dbias, 1, sh_c, "[C]", pdt, pwhy);
        }
        if (g->dinitial_conv_state) {
            if (!init)
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "dinitial_conv_state is requested but initial_conv_state is not given");
            M2_OUT("dinitial_conv_state", g->dinitial_conv_state, 3, sh_st, st_layout, adt, awhy);
        }
    } else {
        /* step: conv_cache[S,C,Lc] decides S and Lc (>= W-1; any strides); out has the
         * shape of x */
        const mamba2_tensor_t *cc = c->cache;
        if (cc->rank != 3)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "conv_cache has rank %d; expected rank 3 [S,C,Lc] with Lc >= W-1",
                            (int)cc->rank);
        S = cc->shape[0];
        if (S < 0 || S > MAX_DIM)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "conv_cache has %lld slots; expected 0..2^40",
                            (long long)S);
        const int64_t Lc = cc->shape[2];
        if (Lc < W - 1 || Lc > MAX_DIM) {
            char g[128];
            m2_fmt_dims(g, sizeof g, 3, cc->shape);
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "conv_cache has shape %s; expected [S,C,Lc] with C=%lld and "
                            "W-1=%lld <= Lc <= 2^40",
                            g, (long long)C, (long long)(W - 1));
        }
        const int64_t sh_cc[3] = {S, C, Lc};
        /* conv_cache is checked as an output (no self-overlap; any strides); it is read too */
        M2_TRY(m2_check_tensor_strided("conv_cache", cc, 3, sh_cc, "[S,C,Lc]", adt, awhy, 1, &n));
        const span cache_span = {"conv_cache", cc, n};
        const mamba2_tensor_t *ix = c->sopts->state_indices;
        if (ix) {
            M2_TRY(m2_check_state_indices(ix, B, S, !c->ctx->device_indices, "conv_cache"));
            ins[nin++] = (span){"state_indices", ix, B};
            pr->state_indices = ix->data;
            pr->idx_dtype = ix->dtype;
        } else if (B > S) {
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "x has batch B=%lld but conv_cache has only S=%lld slots; without "
                            "state_indices row b uses slot b, so B <= S is required",
                            (long long)B, (long long)S);
        }
        /* cache_seqlens (appended after v1: read only when struct_size covers it) */
        const mamba2_tensor_t *cs = NULL;
        const size_t cs_end = offsetof(mamba2_conv1d_step_options_t, cache_seqlens) +
                              sizeof(c->sopts->cache_seqlens);
        if (c->sopts->struct_size >= cs_end) cs = c->sopts->cache_seqlens;
        if (cs) {
            const int64_t sh_b[1] = {B};
            if (cs->dtype != MAMBA2_DTYPE_I32 && cs->dtype != MAMBA2_DTYPE_I64)
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "cache_seqlens has dtype %s; expected i32 or i64",
                                m2_dtype_name(cs->dtype));
            M2_IN("cache_seqlens", cs, 1, sh_b, "[B]", cs->dtype, "an index dtype");
            for (int64_t b = 0; !c->ctx->device_indices && b < B; b++) {
                const int64_t q = ix ? m2_index_at(ix, b) : b;
                if (q < 0) continue; /* padding row: not read */
                const int64_t v = m2_index_at(cs, b);
                if (v < 0)
                    return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                    "cache_seqlens[%lld] is %lld; expected >= 0 (the inputs row "
                                    "%lld has seen)",
                                    (long long)b, (long long)v, (long long)b);
            }
            pr->cache_seqlens = cs->data;
            pr->seq_dtype = cs->dtype;
        }
        pr->Lc = Lc;
        /* the cache may overlap nothing but itself; out overlaps nothing */
        for (int j = 0; j < nin; j++)
            if (cache_span.numel > 0 && ins[j].numel > 0 && m2_may_overlap(cc, ins[j].t))
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "conv_cache (updated in place) overlaps input %s in memory",
                                ins[j].name);
        ins[nin++] = cache_span;
        M2_OUT("out", c->out, xrank, sh_x, x_layout, adt, awhy);
    }

    /* no output may share memory with an input or another output */
    M2_TRY(m2_check_no_overlap(ins, nin, outs, nout, step ? "conv_cache" : NULL));

    pr->B = B;
    pr->L = L;
    pr->C = C;
    pr->W = W;
    pr->nseq = step ? 0 : S;
    pr->S = step ? S : 0;
    pr->act_dtype = adt;
    pr->par_dtype = pdt;
    pr->silu = act == MAMBA2_ACTIVATION_SILU;
    pr->x = m2_view_of(c->x);
    pr->weight = m2_view_of(c->weight);
    pr->bias = m2_view_of(bias);
    if (xrank == 2) { /* [B,C] as [B,1,C] */
        pr->x.s[2] = 0;
        pr->x.s[1] = 0;
    }
    if (c->kind == CALL_FORWARD) {
        pr->init = m2_view_of(init);
        pr->out = m2_view_of(c->out);
        pr->final = m2_view_of(c->final_state);
    } else if (c->kind == CALL_BACKWARD) {
        const mamba2_conv1d_grads_t *g = c->grads;
        pr->init = m2_view_of(init);
        pr->dout = m2_view_of(c->dout);
        pr->dfinal = m2_view_of(c->dfinal);
        pr->dx = m2_view_of(g->dx);
        pr->dweight = m2_view_of(g->dweight);
        pr->dbias = m2_view_of(g->dbias);
        pr->dinit = m2_view_of(g->dinitial_conv_state);
    } else {
        pr->cache = m2_view_of(c->cache);
        pr->out = m2_view_of(c->out);
        if (xrank == 2) {
            pr->out.s[1] = 0;
        }
    }
    return MAMBA2_STATUS_OK;
}

/* ---- workspace and dispatch --------------------------------------------------------- */

static mamba2_status_t query(const conv_call *c, m2_conv1d_problem *pr, size_t *bytes) {
    M2_TRY(validate(c, pr));
    /* Batch rows without tokens (no cu_seqlens, L = 0) contribute nothing but their conv
     * states: with no per-row state to write (forward: final_conv_state; backward:
     * dinitial_conv_state; W = 1 makes both empty) they are all alike and one row stands for
     * them, so no backend loops over a huge B of empty tensors (dweight, dbias come out 0). */
    if (c->kind != CALL_STEP && !pr->cu_seqlens && pr->L == 0) {
        const m2_view *st = c->kind == CALL_FORWARD ? &pr->final : &pr->dinit;
        if (!(st->p && pr->W > 1)) pr->B = pr->nseq = 1;
    }
    size_t b = 0;
    if (c->kind == CALL_BACKWARD) M2_TRY(c->ctx->ops->conv1d_backward_workspace(c->ctx, pr, &b));
    M2_TRY(m2_workspace_padded(b, bytes));
    return MAMBA2_STATUS_OK;
}

static mamba2_status_t run_locked(const conv_call *c, void *workspace, size_t workspace_size) {
    m2_conv1d_problem pr;
    size_t need = 0;
    M2_TRY(query(c, &pr, &need));
    /* a step without tokens (T = 0) leaves every cache slot as it is: nothing to do, in O(1)
     * however many rows there are */
    if (c->kind == CALL_STEP && pr.L == 0) return MAMBA2_STATUS_OK;
    if (c->kind == CALL_FORWARD) return c->ctx->ops->conv1d_forward(c->ctx, &pr);
    if (c->kind == CALL_STEP) return c->ctx->ops->conv1d_step(c->ctx, &pr);
    void *ws, *owned;
    M2_TRY(m2_workspace_acquire(need, workspace, workspace_size, &ws, &owned));
    mamba2_status_t st = c->ctx->ops->conv1d_backward(c->ctx, &pr, ws);
    free(owned);
    return st;
}

/* The entry points' work, with the context held (m2_ctx_enter: BUSY while another call
 * runs on it). */
static mamba2_status_t run(const conv_call *c, void *workspace, size_t workspace_size) {
    M2_TRY(m2_ctx_enter(c->ctx));
    mamba2_status_t st = run_locked(c, workspace, workspace_size);
    m2_ctx_leave(c->ctx);
    return st;
}

static mamba2_status_t query_entry(const conv_call *c, m2_conv1d_problem *pr, size_t *bytes) {
    M2_TRY(m2_ctx_enter(c->ctx));
    mamba2_status_t st = query(c, pr, bytes);
    m2_ctx_leave(c->ctx);
    return st;
}

/* ---- public entry points ------------------------------------------------------------- */

mamba2_conv1d_options_t mamba2_conv1d_options_default(void) {
    mamba2_conv1d_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = (uint32_t)sizeof o;
    o.activation = MAMBA2_ACTIVATION_NONE;
    return o;
}

mamba2_conv1d_step_options_t mamba2_conv1d_step_options_default(void) {
    mamba2_conv1d_step_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = (uint32_t)sizeof o;
    o.activation = MAMBA2_ACTIVATION_NONE;
    return o;
}

mamba2_status_t mamba2_conv1d_forward(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                      const mamba2_tensor_t *final_conv_state,
                                      const mamba2_tensor_t *x, const mamba2_tensor_t *weight,
                                      const mamba2_conv1d_options_t *opts) {
    m2_clear_error();
    mamba2_conv1d_options_t defaults = mamba2_conv1d_options_default();
    conv_call c;
    memset(&c, 0, sizeof c);
    c.kind = CALL_FORWARD;
    c.ctx = ctx;
    c.opts = opts ? opts : &defaults;
    c.x = x;
    c.weight = weight;
    c.out = out;
    c.final_state = final_conv_state;
    return run(&c, NULL, 0);
}

static conv_call bwd_call(mamba2_context_t *ctx, const mamba2_conv1d_grads_t *grads,
                          const mamba2_tensor_t *dout, const mamba2_tensor_t *dfinal,
                          const mamba2_tensor_t *x, const mamba2_tensor_t *weight,
                          const mamba2_conv1d_options_t *opts, const mamba2_conv1d_options_t *defaults) {
    conv_call c;
    memset(&c, 0, sizeof c);
    c.kind = CALL_BACKWARD;
    c.ctx = ctx;
    c.opts = opts ? opts : defaults;
    c.x = x;
    c.weight = weight;
    c.grads = grads;
    c.dout = dout;
    c.dfinal = dfinal;
    return c;
}

mamba2_status_t mamba2_conv1d_backward_workspace_size(
    mamba2_context_t *ctx, const mamba2_conv1d_grads_t *grads, const mamba2_tensor_t *dout,
    const mamba2_tensor_t *dfinal_conv_state, const mamba2_tensor_t *x,
    const mamba2_tensor_t *weight, const mamba2_conv1d_options_t *opts, size_t *workspace_size) {
    m2_clear_error();
    if (!workspace_size) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "workspace_size is NULL");
    *workspace_size = 0;
    mamba2_conv1d_options_t defaults = mamba2_conv1d_options_default();
    conv_call c = bwd_call(ctx, grads, dout, dfinal_conv_state, x, weight, opts, &defaults);
    m2_conv1d_problem pr;
    return query_entry(&c, &pr, workspace_size);
}

mamba2_status_t mamba2_conv1d_backward(mamba2_context_t *ctx, const mamba2_conv1d_grads_t *grads,
                                       const mamba2_tensor_t *dout,
                                       const mamba2_tensor_t *dfinal_conv_state,
                                       const mamba2_tensor_t *x, const mamba2_tensor_t *weight,
                                       const mamba2_conv1d_options_t *opts, void *workspace,
                                       size_t workspace_size) {
    m2_clear_error();
    mamba2_conv1d_options_t defaults = mamba2_conv1d_options_default();
    conv_call c = bwd_call(ctx, grads, dout, dfinal_conv_state, x, weight, opts, &defaults);
    return run(&c, workspace, workspace_size);
}

mamba2_status_t mamba2_conv1d_step(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                   const mamba2_tensor_t *conv_cache, const mamba2_tensor_t *x,
                                   const mamba2_tensor_t *weight,
                                   const mamba2_conv1d_step_options_t *opts) {
    m2_clear_error();
    mamba2_conv1d_step_options_t defaults = mamba2_conv1d_step_options_default();
    conv_call c;
    memset(&c, 0, sizeof c);
    c.kind = CALL_STEP;
    c.ctx = ctx;
    c.sopts = opts ? opts : &defaults;
    c.x = x;
    c.weight = weight;
    c.out = out;
    c.cache = conv_cache;
    return run(&c, NULL, 0);
}

/* The step's checks without the context bracket (block_step_api.c). */
mamba2_status_t m2_conv1d_step_prepare(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                       const mamba2_tensor_t *conv_cache,
                                       const mamba2_tensor_t *x, const mamba2_tensor_t *weight,
                                       const mamba2_conv1d_step_options_t *opts,
                                       m2_conv1d_problem *pr) {
    conv_call c;
    memset(&c, 0, sizeof c);
    c.kind = CALL_STEP;
    c.ctx = ctx;
    c.sopts = opts;
    c.x = x;
    c.weight = weight;
    c.out = out;
    c.cache = conv_cache;
    return validate(&c, pr);
}
