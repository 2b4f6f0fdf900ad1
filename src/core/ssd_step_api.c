/*
 * ssd_step_api.c — public entry point of the SSD decode step (SPEC §6): argument validation
 * and dispatch.
 *
 * As in ssd_api.c and conv1d_api.c, every check a backend relies on happens here, once,
 * before anything is written: the token form (x[B,H,P] or x[B,T,H,P], and every activation of
 * the same form), ranks, shapes (B, T, H, P from x; G, N from Bm; S from state_cache), dtypes,
 * strides, data pointers, option values, state_indices, and memory overlap: state_cache is
 * updated in place and may share memory with no other tensor; out and all_states may share
 * memory with nothing. The validated problem goes to the context's backend as an
 * m2_ssd_step_problem (core/ssd_step.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ssd_step.h"

typedef struct step_call {
    mamba2_context_t *ctx;
    const mamba2_ssd_step_options_t *opts;
    const mamba2_tensor_t *cache, *out, *all_states;
    const mamba2_tensor_t *x, *dt, *A, *Bm, *Cm;
} step_call;

/* The view of a T = 1 form tensor as its multi-token form: a T dimension of stride 0 is
 * inserted after the batch dimension. */
static m2_view view_add_T(const mamba2_tensor_t *t) {
    m2_view v;
    memset(&v, 0, sizeof v);
    if (!t) return v;
    v.p = t->data;
    v.s[0] = t->stride[0];
    v.s[1] = 0;
    for (int i = 1; i < t->rank && i < 3; i++) v.s[i + 1] = t->stride[i];
    return v;
}

static mamba2_status_t validate(const step_call *c, m2_ssd_step_problem *pr) {
    memset(pr, 0, sizeof *pr);
    if (!c->ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx is NULL");
    const m2_backend_ops *ops = c->ctx->ops;
    if (!ops->ssd_step)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED, "the %s backend does not implement ssd_step",
                        ops->name);
    const mamba2_ssd_step_options_t *o = c->opts;
    M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_SSD_STEP_OPTIONS, "opts", o->struct_size));
    const char *req_names[7] = {"state_cache", "out", "x", "dt", "A", "Bm", "Cm"};
    const mamba2_tensor_t *req[7] = {c->cache, c->out, c->x, c->dt, c->A, c->Bm, c->Cm};
    for (int i = 0; i < 7; i++)
        if (!req[i])
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s is NULL (required)", req_names[i]);

    /* dtypes: x decides the activation dtype; the backend must support it */
    const mamba2_dtype_t adt = c->x->dtype;
    M2_TRY(m2_check_act_dtype("x", adt, ops->act_dtypes | ops->step_extra_act_dtypes, ops->name,
                              "ssd_step"));
    const mamba2_dtype_t pdt = adt == MAMBA2_DTYPE_F64 ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    const char *awhy = "the dtype of x";
    const char *pwhy = pdt == MAMBA2_DTYPE_F64 ? "parameters and states follow f64 activations"
                                               : "parameters and states are f32";

    /* the form: x[B,H,P] (one token) or x[B,T,H,P]; sizes from x, Bm and state_cache */
    const int xr = c->x->rank;
    if (xr != 3 && xr != 4)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "x has rank %d; expected rank 3 [B,H,P] (one token) or rank 4 [B,T,H,P]",
                        xr);
    const int multi = xr == 4;
    const char *x_lay = multi ? "[B,T,H,P]" : "[B,H,P]";
    const char *dt_lay = multi ? "[B,T,H]" : "[B,H]";
    const char *bc_lay = multi ? "[B,T,G,N]" : "[B,G,N]";
    const char *as_lay = multi ? "[B,T,H,P,N]" : "[B,H,P,N]";
    if (c->Bm->rank != xr)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "Bm has rank %d; expected rank %d %s (the token form of x %s)",
                        (int)c->Bm->rank, xr, bc_lay, x_lay);
    if (c->cache->rank != 4)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "state_cache has rank %d; expected rank 4 [S,H,P,N]", (int)c->cache->rank);
    for (int i = 0; i < xr; i++) {
        if (c->x->shape[i] < 0 || c->x->shape[i] > MAX_DIM || c->Bm->shape[i] < 0 ||
            c->Bm->shape[i] > MAX_DIM) {
            char gx[128], gb[128];
            m2_fmt_dims(gx, sizeof gx, xr, c->x->shape);
            m2_fmt_dims(gb, sizeof gb, xr, c->Bm->shape);
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "x has shape %s and Bm has shape %s: sizes must be in [0, 2^40]", gx,
                            gb);
        }
    }
    const int64_t B = c->x->shape[0], T = multi ? c->x->shape[1] : 1;
    const int64_t H = c->x->shape[xr - 2], P = c->x->shape[xr - 1];
    const int64_t G = c->Bm->shape[xr - 2], N = c->Bm->shape[xr - 1];
    if (B < 1 || H < 1 || P < 1 || G < 1 || N < 1) {
        char gx[128], gb[128];
        m2_fmt_dims(gx, sizeof gx, xr, c->x->shape);
        m2_fmt_dims(gb, sizeof gb, xr, c->Bm->shape);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "x has shape %s and Bm %s: B, H, P, G and N must be >= 1%s", gx, gb,
                        multi ? " (only T may be 0)" : "");
    }
    if (H % G != 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "x has H=%lld heads and Bm has G=%lld groups; H must be a multiple of G",
                        (long long)H, (long long)G);
    M2_TRY(m2_check_ssd_sizes("x and Bm", H, P, N));
    const int64_t S = c->cache->shape[0];
    if (S < 0 || S > MAX_DIM)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "state_cache has %lld slots; expected 0..2^40", (long long)S);

    /* options */
    if (isnan(o->dt_limit_lo) || isnan(o->dt_limit_hi))
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "dt_limit is (%g, %g); NaN is not allowed",
                        o->dt_limit_lo, o->dt_limit_hi);
    if (o->dt_limit_lo > o->dt_limit_hi)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "dt_limit is (%g, %g); expected lo <= hi",
                        o->dt_limit_lo, o->dt_limit_hi);

    /* every tensor against its expected shape */
    const int64_t sh_x4[4] = {B, T, H, P}, sh_x3[3] = {B, H, P};
    const int64_t sh_dt3[3] = {B, T, H}, sh_dt2[2] = {B, H};
    const int64_t sh_bc4[4] = {B, T, G, N}, sh_bc3[3] = {B, G, N};
    const int64_t sh_as5[5] = {B, T, H, P, N}, sh_as4[4] = {B, H, P, N};
    const int64_t sh_h[1] = {H}, sh_hp[2] = {H, P}, sh_cache[4] = {S, H, P, N};
    const int64_t *sh_x = multi ? sh_x4 : sh_x3, *sh_dt = multi ? sh_dt3 : sh_dt2;
    const int64_t *sh_bc = multi ? sh_bc4 : sh_bc3, *sh_as = multi ? sh_as5 : sh_as4;
    int64_t n;
    span ins[12], outs[4];
    int nin = 0, nout = 0;
    M2_IN("x", c->x, xr, sh_x, x_lay, adt, awhy);
    M2_IN("dt", c->dt, xr - 1, sh_dt, dt_lay, adt, awhy);
    M2_IN("A", c->A, 1, sh_h, "[H]", pdt, pwhy);
    M2_IN("Bm", c->Bm, xr, sh_bc, bc_lay, adt, awhy);
    M2_IN("Cm", c->Cm, xr, sh_bc, bc_lay, adt, awhy);
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
    if (o->z) M2_IN("z", o->z, xr, sh_x, x_lay, adt, awhy);
    if (o->dt_bias) M2_IN("dt_bias", o->dt_bias, 1, sh_h, "[H]", pdt, pwhy);
    const mamba2_tensor_t *ix = o->state_indices;
    if (ix) {
        M2_TRY(m2_check_state_indices(ix, B, S, !c->ctx->device_indices, "state_cache"));
        ins[nin++] = (span){"state_indices", ix, B};
        pr->state_indices = ix->data;
        pr->idx_dtype = ix->dtype;
    } else if (B > S) {
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "x has batch B=%lld but state_cache has only S=%lld slots; without "
                        "state_indices row b uses slot b, so B <= S is required",
                        (long long)B, (long long)S);
    }

    /* state_cache: checked as an output (no self-overlap); it is read too. It may overlap no
     * input; the outputs are checked against it below. */
    /* state storage: the parameters' dtype, or BF16/F16 with F32/BF16/F16 activations */
    mamba2_dtype_t sdt = pdt;
    const char *swhy = pwhy;
    if (pdt == MAMBA2_DTYPE_F32 &&
        (c->cache->dtype == MAMBA2_DTYPE_BF16 || c->cache->dtype == MAMBA2_DTYPE_F16)) {
        sdt = c->cache->dtype;
    } else if (c->cache->dtype != pdt && (unsigned)c->cache->dtype <= (unsigned)MAMBA2_DTYPE_I64) {
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "state_cache has dtype %s; expected %s", m2_dtype_name(c->cache->dtype),
                        pdt == MAMBA2_DTYPE_F32 ? "f32, bf16 or f16 (with f32, bf16 or f16 "
                                                  "activations)"
                                                : "f64 (it follows f64 activations)");
    }
    if (sdt != pdt) swhy = "all_states has state_cache's dtype";
    M2_TRY(m2_check_tensor("state_cache", c->cache, 4, sh_cache, "[S,H,P,N]", sdt, pwhy, 1, &n));
    const span cache_span = {"state_cache", c->cache, n};
    for (int j = 0; j < nin; j++)
        if (cache_span.numel > 0 && ins[j].numel > 0 && m2_may_overlap(c->cache, ins[j].t))
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "state_cache (updated in place) overlaps input %s in memory",
                            ins[j].name);
    ins[nin++] = cache_span;

    M2_OUT("out", c->out, xr, sh_x, x_lay, adt, awhy);
    if (c->all_states) {
        if (c->all_states->rank != xr + 1)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "all_states has rank %d; expected rank %d %s (the token form of x %s)",
                            (int)c->all_states->rank, xr + 1, as_lay, x_lay);
        M2_OUT("all_states", c->all_states, xr + 1, sh_as, as_lay, sdt, swhy);
    }

    /* no output may share memory with an input or another output */
    M2_TRY(m2_check_no_overlap(ins, nin, outs, nout, "state_cache"));

    pr->B = B;
    pr->T = T;
    pr->H = H;
    pr->P = P;
    pr->N = N;
    pr->G = G;
    pr->S = S;
    pr->act_dtype = adt;
    pr->par_dtype = pdt;
    pr->state_dtype = sdt;
    pr->dt_softplus = o->dt_softplus != 0;
    pr->dt_lo = o->dt_limit_lo;
    pr->dt_hi = o->dt_limit_hi;
    pr->D_per_channel = D_per_channel;
    pr->A = m2_view_of(c->A);
    pr->D = m2_view_of(o->D);
    pr->dt_bias = m2_view_of(o->dt_bias);
    pr->cache = m2_view_of(c->cache);
    if (multi) {
        pr->x = m2_view_of(c->x);
        pr->dt = m2_view_of(c->dt);
        pr->Bm = m2_view_of(c->Bm);
        pr->Cm = m2_view_of(c->Cm);
        pr->z = m2_view_of(o->z);
        pr->out = m2_view_of(c->out);
        pr->all_states = m2_view_of(c->all_states); /* the four outer strides of the rank-5 tensor */
    } else {
        pr->x = view_add_T(c->x);
        pr->dt = view_add_T(c->dt);
        pr->Bm = view_add_T(c->Bm);
        pr->Cm = view_add_T(c->Cm);
        pr->z = view_add_T(o->z);
        pr->out = view_add_T(c->out);
        pr->all_states = view_add_T(c->all_states);
    }
    return MAMBA2_STATUS_OK;
}

mamba2_ssd_step_options_t mamba2_ssd_step_options_default(void) {
    mamba2_ssd_step_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = (uint32_t)sizeof o;
    o.dt_limit_lo = 0.0;
    o.dt_limit_hi = INFINITY;
    return o;
}

mamba2_status_t mamba2_ssd_step(mamba2_context_t *ctx, const mamba2_tensor_t *state_cache,
                                const mamba2_tensor_t *out, const mamba2_tensor_t *all_states,
                                const mamba2_tensor_t *x, const mamba2_tensor_t *dt,
                                const mamba2_tensor_t *A, const mamba2_tensor_t *Bm,
                                const mamba2_tensor_t *Cm, const mamba2_ssd_step_options_t *opts) {
    m2_clear_error();
    const mamba2_ssd_step_options_t defaults = mamba2_ssd_step_options_default();
    step_call c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.opts = opts ? opts : &defaults;
    c.cache = state_cache;
    c.out = out;
    c.all_states = all_states;
    c.x = x;
    c.dt = dt;
    c.A = A;
    c.Bm = Bm;
    c.Cm = Cm;
    m2_ssd_step_problem pr;
    M2_TRY(m2_ctx_enter(ctx));
    mamba2_status_t st = validate(&c, &pr);
    if (st == MAMBA2_STATUS_OK) st = ctx->ops->ssd_step(ctx, &pr);
    m2_ctx_leave(ctx);
    return st;
}

/* The step's checks without the context bracket (block_step_api.c). */
mamba2_status_t m2_ssd_step_prepare(mamba2_context_t *ctx, const mamba2_tensor_t *state_cache,
                                    const mamba2_tensor_t *out, const mamba2_tensor_t *x,
                                    const mamba2_tensor_t *dt, const mamba2_tensor_t *A,
                                    const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
                                    const mamba2_ssd_step_options_t *opts,
                                    m2_ssd_step_problem *pr) {
    step_call c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.opts = opts;
    c.cache = state_cache;
    c.out = out;
    c.x = x;
    c.dt = dt;
    c.A = A;
    c.Bm = Bm;
    c.Cm = Cm;
    return validate(&c, pr);
}
