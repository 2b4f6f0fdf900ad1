/*
 * ssd_api.c — public SSD entry points: argument validation, workspace, dispatch.
 *
 * Every check a backend relies on happens here, once, before any output is touched:
 * ranks, shapes (derived from x and Bm, then required of every other tensor), dtypes,
 * strides (non-negative, last dimension contiguous, outputs not self-overlapping), data
 * pointers, outputs overlapping inputs or each other, option values and cu_seqlens. The
 * validated problem is handed to the context's backend as an m2_ssd_problem.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

/* ---- the SSD problem ---------------------------------------------------------------- */

typedef struct ssd_call {
    mamba2_context_t *ctx;
    const mamba2_ssd_options_t *opts;
    const mamba2_tensor_t *x, *dt, *A, *Bm, *Cm;
    const mamba2_tensor_t *out, *final_state;     /* forward outputs  */
    const mamba2_tensor_t *out_x;                 /* forward output, backward input */
    const mamba2_tensor_t *position_states;       /* forward output (with positions) */
    const mamba2_ssd_grads_t *grads;              /* backward outputs */
    const mamba2_tensor_t *dout, *dfinal;         /* backward inputs  */
    int backward;
    int query_only; /* a workspace query: state_positions may come without its output */
} ssd_call;

/* state_positions: rank 1, i32/i64, contiguous, strictly increasing, inside [0, ntok). */
static mamba2_status_t check_positions(const mamba2_tensor_t *t, int64_t ntok, int values,
                                       m2_ssd_problem *pr) {
    if (!t)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "position_states is given but opts->state_positions is NULL");
    if (t->rank != 1)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "state_positions has rank %d; expected rank 1 [npos]", (int)t->rank);
    if (t->dtype != MAMBA2_DTYPE_I32 && t->dtype != MAMBA2_DTYPE_I64)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "state_positions has dtype %s; expected i32 or i64", m2_dtype_name(t->dtype));
    const int64_t n = t->shape[0];
    if (n < 0 || n > MAX_DIM)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "state_positions has %lld entries",
                        (long long)n);
    if (n > 1 && t->stride[0] != 1)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "state_positions has stride %lld; it must be contiguous",
                        (long long)t->stride[0]);
    if (!values && n > ntok) /* device indices: what the unread values would imply */
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "state_positions has %lld entries; strictly increasing token indices "
                        "allow at most B*L=%lld",
                        (long long)n, (long long)ntok);
    if (n > 0 && !t->data)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "state_positions has a NULL data pointer");
    if (n > 0 && (uintptr_t)t->data % mamba2_dtype_size(t->dtype) != 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "state_positions has a data pointer not aligned to its elements");
    int64_t prev = -1;
    for (int64_t i = 0; values && i < n; i++) {
        int64_t v = t->dtype == MAMBA2_DTYPE_I32 ? ((const int32_t *)t->data)[i]
                                                 : ((const int64_t *)t->data)[i];
        if (v < 0 || v >= ntok)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "state_positions[%lld] is %lld; expected a flat token index in [0, "
                            "B*L=%lld)",
                            (long long)i, (long long)v, (long long)ntok);
        if (v <= prev)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "state_positions is not strictly increasing at index %lld (%lld after "
                            "%lld)",
                            (long long)i, (long long)v, (long long)prev);
        prev = v;
    }
    pr->positions = t->data;
    pr->pos_dtype = t->dtype;
    pr->npos = n;
    return MAMBA2_STATUS_OK;
}

static mamba2_status_t validate(const ssd_call *c, m2_ssd_problem *pr) {
    memset(pr, 0, sizeof *pr);
    if (!c->ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx is NULL");
    const mamba2_ssd_options_t *o = c->opts;
    M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_SSD_OPTIONS, "opts", o->struct_size));
    if (c->backward && c->grads)
        M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_SSD_GRADS, "grads", c->grads->struct_size));
    const char *req_names[6] = {"x", "dt", "A", "Bm", "Cm", c->backward ? "dout" : "out"};
    const mamba2_tensor_t *req[6] = {c->x, c->dt, c->A, c->Bm, c->Cm,
                                     c->backward ? c->dout : c->out};
    for (int i = 0; i < 6; i++)
        if (!req[i]) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s is NULL (required)", req_names[i]);
    if (c->backward && !c->grads)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "grads is NULL (required)");

    /* dtypes: x decides the activation dtype; the backend must support it */
    mamba2_dtype_t adt = c->x->dtype;
    M2_TRY(m2_check_act_dtype("x", adt, c->ctx->ops->act_dtypes | c->ctx->ops->ssd_extra_act_dtypes,
                              c->ctx->ops->name, "the SSD op"));
    /* x, dt, Bm, Cm, z, out and the activation gradients share x's dtype; A, D, dt_bias, the
     * states and their gradients are f64 with f64 activations, else f32 (also for bf16/f16
     * activations: parameters and states are never stored in half precision) */
    mamba2_dtype_t pdt = adt == MAMBA2_DTYPE_F64 ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    const char *awhy = "the dtype of x";
    const char *pwhy = pdt == MAMBA2_DTYPE_F64 ? "parameters and states follow f64 activations"
                       : adt == MAMBA2_DTYPE_F32
                           ? "parameters and states are f32"
                           : "parameters and states are f32, also with half-precision activations";

    /* sizes from x [B,L,H,P] and Bm [B,L,G,N] */
    if (c->x->rank != 4)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "x has rank %d; expected rank 4 [B,L,H,P]",
                        (int)c->x->rank);
    if (c->Bm->rank != 4)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "Bm has rank %d; expected rank 4 [B,L,G,N]",
                        (int)c->Bm->rank);
    for (int i = 0; i < 4; i++) {
        if (c->x->shape[i] < 0 || c->x->shape[i] > MAX_DIM || c->Bm->shape[i] < 0 ||
            c->Bm->shape[i] > MAX_DIM) {
            char gx[128], gb[128];
            m2_fmt_dims(gx, sizeof gx, 4, c->x->shape);
            m2_fmt_dims(gb, sizeof gb, 4, c->Bm->shape);
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "x has shape %s and Bm has shape %s: sizes must be in [0, 2^40]", gx, gb);
        }
    }
    const int64_t B = c->x->shape[0], L = c->x->shape[1], H = c->x->shape[2], P = c->x->shape[3];
    const int64_t G = c->Bm->shape[2], N = c->Bm->shape[3];
    if (H < 1 || P < 1 || G < 1 || N < 1 || B < 1) {
        char gx[128], gb[128];
        m2_fmt_dims(gx, sizeof gx, 4, c->x->shape);
        m2_fmt_dims(gb, sizeof gb, 4, c->Bm->shape);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "x has shape %s and Bm %s: B, H, P, G and N must be >= 1 (only L may be 0)",
                        gx, gb);
    }
    if (H % G != 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "x has H=%lld heads and Bm has G=%lld groups; H must be a multiple of G",
                        (long long)H, (long long)G);
    M2_TRY(m2_check_ssd_sizes("x and Bm", H, P, N));

    /* options */
    if (o->chunk_size < 1)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "chunk_size is %lld; expected >= 1",
                        (long long)o->chunk_size);
    if (isnan(o->dt_limit_lo) || isnan(o->dt_limit_hi))
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "dt_limit is (%g, %g); NaN is not allowed",
                        o->dt_limit_lo, o->dt_limit_hi);
    if (o->dt_limit_lo > o->dt_limit_hi)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "dt_limit is (%g, %g); expected lo <= hi",
                        o->dt_limit_lo, o->dt_limit_hi);

    /* cu_seqlens */
    int64_t S = B;
    if (o->cu_seqlens) {
        const mamba2_tensor_t *cu = o->cu_seqlens;
        M2_TRY(m2_check_cu_seqlens(cu, B, L, !c->ctx->device_indices, &S));
        pr->cu_seqlens = cu->data;
        pr->cu_dtype = cu->dtype;
    }

    /* every tensor against its expected shape */
    const int64_t sh_x[4] = {B, L, H, P}, sh_dt[3] = {B, L, H}, sh_h[1] = {H},
                  sh_bc[4] = {B, L, G, N}, sh_st[4] = {S, H, P, N}, sh_hp[2] = {H, P};
    const char *st_layout = o->cu_seqlens ? "[nseq,H,P,N]" : "[B,H,P,N]";
    int64_t n;
    span ins[16], outs[16];
    int nin = 0, nout = 0;
    M2_IN("x", c->x, 4, sh_x, "[B,L,H,P]", adt, awhy);
    M2_IN("dt", c->dt, 3, sh_dt, "[B,L,H]", adt, awhy);
    M2_IN("A", c->A, 1, sh_h, "[H]", pdt, pwhy);
    M2_IN("Bm", c->Bm, 4, sh_bc, "[B,L,G,N]", adt, awhy);
    M2_IN("Cm", c->Cm, 4, sh_bc, "[B,L,G,N]", adt, awhy);
    int D_per_channel = 0;
    if (o->D) {
        if (o->D->rank == 2) {
            D_per_channel = 1;
            M2_IN("D", o->D, 2, sh_hp, "[H,P]", pdt, pwhy);
        } else {
            if (o->D->rank != 1)
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "D has rank %d; expected [H] or [H,P]", (int)o->D->rank);
            M2_IN("D", o->D, 1, sh_h, "[H]", pdt, pwhy);
        }
    }
    if (o->z) M2_IN("z", o->z, 4, sh_x, "[B,L,H,P]", adt, awhy);
    if (o->dt_bias) M2_IN("dt_bias", o->dt_bias, 1, sh_h, "[H]", pdt, pwhy);
    if (o->initial_state) M2_IN("initial_state", o->initial_state, 4, sh_st, st_layout, pdt, pwhy);
    if (o->cu_seqlens) ins[nin++] = (span){"cu_seqlens", o->cu_seqlens, o->cu_seqlens->shape[0]};

    if (!c->backward) {
        M2_OUT("out", c->out, 4, sh_x, "[B,L,H,P]", adt, awhy);
        if (c->out_x) M2_OUT("out_x", c->out_x, 4, sh_x, "[B,L,H,P]", adt, awhy);
        if (c->final_state) M2_OUT("final_state", c->final_state, 4, sh_st, st_layout, pdt, pwhy);
        if (c->position_states) {
            M2_TRY(check_positions(o->state_positions, B * L, !c->ctx->device_indices, pr));
            ins[nin++] = (span){"state_positions", o->state_positions, pr->npos};
            const int64_t sh_ps[4] = {pr->npos, H, P, N};
            M2_OUT("position_states", c->position_states, 4, sh_ps, "[npos,H,P,N]", pdt, pwhy);
        } else if (o->state_positions && !c->query_only) {
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "state_positions is given but position_states is NULL; use "
                            "mamba2_ssd_forward_states with an output for them");
        }
    } else {
        M2_IN("dout", c->dout, 4, sh_x, "[B,L,H,P]", adt, awhy);
        if (c->out_x) M2_IN("out_x", c->out_x, 4, sh_x, "[B,L,H,P]", adt, awhy);
        if (c->dfinal) M2_IN("dfinal_state", c->dfinal, 4, sh_st, st_layout, pdt, pwhy);
        const mamba2_ssd_grads_t *g = c->grads;
        if (g->dx) M2_OUT("dx", g->dx, 4, sh_x, "[B,L,H,P]", adt, awhy);
        if (g->ddt) M2_OUT("ddt", g->ddt, 3, sh_dt, "[B,L,H]", adt, awhy);
        if (g->dA) M2_OUT("dA", g->dA, 1, sh_h, "[H]", pdt, pwhy);
        if (g->dBm) M2_OUT("dBm", g->dBm, 4, sh_bc, "[B,L,G,N]", adt, awhy);
        if (g->dCm) M2_OUT("dCm", g->dCm, 4, sh_bc, "[B,L,G,N]", adt, awhy);
        if (g->dD) {
            if (!o->D)
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "dD is requested but D is not given");
            if (D_per_channel)
                M2_OUT("dD", g->dD, 2, sh_hp, "[H,P] (the shape of D)", pdt, pwhy);
            else
                M2_OUT("dD", g->dD, 1, sh_h, "[H] (the shape of D)", pdt, pwhy);
        }
        if (g->dz) {
            if (!o->z) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "dz is requested but z is not given");
            M2_OUT("dz", g->dz, 4, sh_x, "[B,L,H,P]", adt, awhy);
        }
        if (g->ddt_bias) {
            if (!o->dt_bias)
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "ddt_bias is requested but dt_bias is not given");
            M2_OUT("ddt_bias", g->ddt_bias, 1, sh_h, "[H]", pdt, pwhy);
        }
        if (g->dinitial_state) {
            if (!o->initial_state)
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "dinitial_state is requested but initial_state is not given");
            M2_OUT("dinitial_state", g->dinitial_state, 4, sh_st, st_layout, pdt, pwhy);
        }
    }

    /* no output may share memory with an input or another output */
    M2_TRY(m2_check_no_overlap(ins, nin, outs, nout, NULL));

    pr->B = B;
    pr->L = L;
    pr->H = H;
    pr->P = P;
    pr->N = N;
    pr->G = G;
    pr->Q = o->chunk_size;
    pr->nseq = S;
    pr->act_dtype = adt;
    pr->par_dtype = pdt;
    pr->dt_softplus = o->dt_softplus != 0;
    pr->dt_lo = o->dt_limit_lo;
    pr->dt_hi = o->dt_limit_hi;
    pr->D_per_channel = D_per_channel;
    pr->x = m2_view_of(c->x);
    pr->dt = m2_view_of(c->dt);
    pr->A = m2_view_of(c->A);
    pr->Bm = m2_view_of(c->Bm);
    pr->Cm = m2_view_of(c->Cm);
    pr->D = m2_view_of(o->D);
    pr->z = m2_view_of(o->z);
    pr->dt_bias = m2_view_of(o->dt_bias);
    pr->init = m2_view_of(o->initial_state);
    pr->out_x = m2_view_of(c->out_x);
    if (!c->backward) {
        pr->out = m2_view_of(c->out);
        pr->final = m2_view_of(c->final_state);
        pr->pos_states = m2_view_of(c->position_states);
    } else {
        const mamba2_ssd_grads_t *g = c->grads;
        pr->dout = m2_view_of(c->dout);
        pr->dfinal = m2_view_of(c->dfinal);
        pr->dx = m2_view_of(g->dx);
        pr->ddt = m2_view_of(g->ddt);
        pr->dA = m2_view_of(g->dA);
        pr->dBm = m2_view_of(g->dBm);
        pr->dCm = m2_view_of(g->dCm);
        pr->dD = m2_view_of(g->dD);
        pr->dz = m2_view_of(g->dz);
        pr->ddt_bias = m2_view_of(g->ddt_bias);
        pr->dinit = m2_view_of(g->dinitial_state);
    }
    return MAMBA2_STATUS_OK;
}

/* ---- workspace and dispatch --------------------------------------------------------- */

static mamba2_status_t query(const ssd_call *c, m2_ssd_problem *pr, size_t *bytes) {
    M2_TRY(validate(c, pr));
    /* Batch rows without tokens (no cu_seqlens, L = 0) contribute nothing but their states:
     * with no per-row state to write (forward: final_state; backward: dinitial_state), they
     * are all alike and one row stands for them, so no backend loops over a huge B of empty
     * tensors (dA, dD, ddt_bias still come out +0). */
    const int state_out = c->backward ? pr->dinit.p != NULL : pr->final.p != NULL;
    if (!pr->cu_seqlens && pr->L == 0 && !state_out) pr->B = pr->nseq = 1;
    size_t b = 0;
    M2_TRY(c->backward ? c->ctx->ops->ssd_backward_workspace(c->ctx, pr, &b)
                    : c->ctx->ops->ssd_forward_workspace(c->ctx, pr, &b));
    M2_TRY(m2_workspace_padded(b, bytes));
    return MAMBA2_STATUS_OK;
}

static mamba2_status_t run_locked(const ssd_call *c, void *workspace, size_t workspace_size) {
    m2_ssd_problem pr;
    size_t need = 0;
    M2_TRY(query(c, &pr, &need));
    void *ws, *owned;
    M2_TRY(m2_workspace_acquire(need, workspace, workspace_size, &ws, &owned));
    mamba2_status_t st = c->backward ? c->ctx->ops->ssd_backward(c->ctx, &pr, ws)
                                     : c->ctx->ops->ssd_forward(c->ctx, &pr, ws);
    free(owned);
    return st;
}

/* The entry points' work, with the context held (m2_ctx_enter: BUSY while another call
 * runs on it). */
static mamba2_status_t run(const ssd_call *c, void *workspace, size_t workspace_size) {
    M2_TRY(m2_ctx_enter(c->ctx));
    mamba2_status_t st = run_locked(c, workspace, workspace_size);
    m2_ctx_leave(c->ctx);
    return st;
}

static mamba2_status_t query_entry(const ssd_call *c, m2_ssd_problem *pr, size_t *bytes) {
    M2_TRY(m2_ctx_enter(c->ctx));
    mamba2_status_t st = query(c, pr, bytes);
    m2_ctx_leave(c->ctx);
    return st;
}

mamba2_ssd_options_t mamba2_ssd_options_default(void) {
    mamba2_ssd_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = (uint32_t)sizeof o;
    o.chunk_size = 256;
    o.dt_limit_lo = 0.0;
    o.dt_limit_hi = INFINITY;
    return o;
}

static ssd_call fwd_call(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                         const mamba2_tensor_t *out_x, const mamba2_tensor_t *final_state,
                         const mamba2_tensor_t *x, const mamba2_tensor_t *dt,
                         const mamba2_tensor_t *A, const mamba2_tensor_t *Bm,
                         const mamba2_tensor_t *Cm, const mamba2_ssd_options_t *opts,
                         mamba2_ssd_options_t *defaults) {
    ssd_call c;
    memset(&c, 0, sizeof c);
    *defaults = mamba2_ssd_options_default();
    c.ctx = ctx;
    c.opts = opts ? opts : defaults;
    c.x = x;
    c.dt = dt;
    c.A = A;
    c.Bm = Bm;
    c.Cm = Cm;
    c.out = out;
    c.out_x = out_x;
    c.final_state = final_state;
    return c;
}

mamba2_status_t mamba2_ssd_forward_workspace_size(
    mamba2_context_t *ctx, const mamba2_tensor_t *out, const mamba2_tensor_t *out_x,
    const mamba2_tensor_t *final_state, const mamba2_tensor_t *x, const mamba2_tensor_t *dt,
    const mamba2_tensor_t *A, const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
    const mamba2_ssd_options_t *opts, size_t *workspace_size) {
    m2_clear_error();
    if (!workspace_size) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "workspace_size is NULL");
    *workspace_size = 0;
    mamba2_ssd_options_t defaults;
    ssd_call c = fwd_call(ctx, out, out_x, final_state, x, dt, A, Bm, Cm, opts, &defaults);
    c.query_only = 1;
    m2_ssd_problem pr;
    return query_entry(&c, &pr, workspace_size);
}

mamba2_status_t mamba2_ssd_forward(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                   const mamba2_tensor_t *out_x,
                                   const mamba2_tensor_t *final_state, const mamba2_tensor_t *x,
                                   const mamba2_tensor_t *dt, const mamba2_tensor_t *A,
                                   const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
                                   const mamba2_ssd_options_t *opts, void *workspace,
                                   size_t workspace_size) {
    m2_clear_error();
    mamba2_ssd_options_t defaults;
    ssd_call c = fwd_call(ctx, out, out_x, final_state, x, dt, A, Bm, Cm, opts, &defaults);
    return run(&c, workspace, workspace_size);
}

mamba2_status_t mamba2_ssd_forward_states(
    mamba2_context_t *ctx, const mamba2_tensor_t *out, const mamba2_tensor_t *out_x,
    const mamba2_tensor_t *final_state, const mamba2_tensor_t *position_states,
    const mamba2_tensor_t *x, const mamba2_tensor_t *dt, const mamba2_tensor_t *A,
    const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm, const mamba2_ssd_options_t *opts,
    void *workspace, size_t workspace_size) {
    m2_clear_error();
    mamba2_ssd_options_t defaults;
    ssd_call c = fwd_call(ctx, out, out_x, final_state, x, dt, A, Bm, Cm, opts, &defaults);
    c.position_states = position_states;
    return run(&c, workspace, workspace_size);
}

static ssd_call bwd_call(mamba2_context_t *ctx, const mamba2_ssd_grads_t *grads,
                         const mamba2_tensor_t *dout, const mamba2_tensor_t *dfinal_state,
                         const mamba2_tensor_t *x, const mamba2_tensor_t *dt,
                         const mamba2_tensor_t *A, const mamba2_tensor_t *Bm,
                         const mamba2_tensor_t *Cm, const mamba2_tensor_t *out_x,
                         const mamba2_ssd_options_t *opts, mamba2_ssd_options_t *defaults) {
    ssd_call c = fwd_call(ctx, NULL, out_x, NULL, x, dt, A, Bm, Cm, opts, defaults);
    c.backward = 1;
    c.grads = grads;
    c.dout = dout;
    c.dfinal = dfinal_state;
    return c;
}

mamba2_status_t mamba2_ssd_backward_workspace_size(
    mamba2_context_t *ctx, const mamba2_ssd_grads_t *grads, const mamba2_tensor_t *dout,
    const mamba2_tensor_t *dfinal_state, const mamba2_tensor_t *x, const mamba2_tensor_t *dt,
    const mamba2_tensor_t *A, const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
    const mamba2_tensor_t *out_x, const mamba2_ssd_options_t *opts, size_t *workspace_size) {
    m2_clear_error();
    if (!workspace_size) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "workspace_size is NULL");
    *workspace_size = 0;
    mamba2_ssd_options_t defaults;
    ssd_call c = bwd_call(ctx, grads, dout, dfinal_state, x, dt, A, Bm, Cm, out_x, opts, &defaults);
    m2_ssd_problem pr;
    return query_entry(&c, &pr, workspace_size);
}

mamba2_status_t mamba2_ssd_backward(mamba2_context_t *ctx, const mamba2_ssd_grads_t *grads,
                                    const mamba2_tensor_t *dout,
                                    const mamba2_tensor_t *dfinal_state, const mamba2_tensor_t *x,
                                    const mamba2_tensor_t *dt, const mamba2_tensor_t *A,
                                    const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
                                    const mamba2_tensor_t *out_x,
                                    const mamba2_ssd_options_t *opts, void *workspace,
                                    size_t workspace_size) {
    m2_clear_error();
    mamba2_ssd_options_t defaults;
    ssd_call c = bwd_call(ctx, grads, dout, dfinal_state, x, dt, A, Bm, Cm, out_x, opts, &defaults);
    return run(&c, workspace, workspace_size);
}
