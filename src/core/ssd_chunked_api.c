/*
 * ssd_chunked_api.c — public entry points of the staged SSD chunk pipeline (SPEC §3):
 * chunk_cumsum, bmm_chunk, chunk_state, state_passing, chunk_scan. Argument validation and
 * dispatch.
 *
 * Each stage is validated like the fused op (ssd_api.c): the sizes come from the stage's
 * leading tensor (dt, Bm, x or states) and, for G and N, from Bm / Cm; Q from
 * opts->chunk_size and K = ceil(L/Q) (state_passing, which sees no token tensor, takes K from
 * states); every other tensor must then match exactly. Ranks, shapes, dtypes, strides, data
 * pointers, option values and overlaps are all checked here, before anything is written. The
 * batch form only (mamba2_ssd_chunked_options_t has no cu_seqlens). The validated problem
 * goes to the context's backend as an m2_ssd_chunk_problem (core/ssd_chunked.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ssd_chunked.h"

typedef enum { ST_CUMSUM = 0, ST_BMM = 1, ST_STATE = 2, ST_PASSING = 3, ST_SCAN = 4 } stage_t;

static const char *const stage_name[5] = {"ssd_chunk_cumsum", "ssd_bmm_chunk", "ssd_chunk_state",
                                          "ssd_state_passing", "ssd_chunk_scan"};

typedef struct chunk_call {
    stage_t stage;
    mamba2_context_t *ctx;
    const mamba2_ssd_chunked_options_t *opts;
    const mamba2_tensor_t *x, *dt, *A, *Bm, *Cm;
    const mamba2_tensor_t *dt_out, *dA_cumsum, *CB, *states, *states_start, *final_state, *out;
} chunk_call;

/* The sizes of a tensor that defines some of the problem's sizes: rank, each in [0, 2^40]. */
static mamba2_status_t sizes_of(const char *name, const mamba2_tensor_t *t, int rank,
                                const char *layout) {
    if (t->rank != rank)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has rank %d; expected rank %d %s", name,
                        (int)t->rank, rank, layout);
    for (int i = 0; i < rank; i++)
        if (t->shape[i] < 0 || t->shape[i] > MAX_DIM) {
            char g[128];
            m2_fmt_dims(g, sizeof g, rank, t->shape);
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "%s has shape %s = %s: sizes must be in [0, 2^40]", name, g, layout);
        }
    return MAMBA2_STATUS_OK;
}

static mamba2_status_t at_least_1(const char *name, const mamba2_tensor_t *t, const char *layout,
                                  const char *which) {
    char g[128];
    m2_fmt_dims(g, sizeof g, t->rank, t->shape);
    return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has shape %s = %s: %s must be >= 1", name,
                    g, layout, which);
}

static mamba2_status_t validate(const chunk_call *c, m2_ssd_chunk_problem *pr) {
    memset(pr, 0, sizeof *pr);
    if (!c->ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx is NULL");
    const m2_backend_ops *ops = c->ctx->ops;
    const int have[5] = {ops->ssd_chunk_cumsum != NULL, ops->ssd_bmm_chunk != NULL,
                         ops->ssd_chunk_state != NULL, ops->ssd_state_passing != NULL,
                         ops->ssd_chunk_scan != NULL};
    const stage_t sg = c->stage;
    if (!have[sg])
        return m2_error(MAMBA2_STATUS_UNSUPPORTED, "the %s backend does not implement %s",
                        ops->name, stage_name[sg]);
    const mamba2_ssd_chunked_options_t *o = c->opts;
    M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_SSD_CHUNKED_OPTIONS, "opts", o->struct_size));

    /* required tensors of the stage */
    const char *rn[8];
    const mamba2_tensor_t *rt[8];
    int nr = 0;
#define REQ(nm, t) (rn[nr] = nm, rt[nr++] = t)
    switch (sg) {
    case ST_CUMSUM:
        REQ("dt_out", c->dt_out);
        REQ("dA_cumsum", c->dA_cumsum);
        REQ("dt", c->dt);
        REQ("A", c->A);
        break;
    case ST_BMM:
        REQ("CB", c->CB);
        REQ("Bm", c->Bm);
        REQ("Cm", c->Cm);
        break;
    case ST_STATE:
        REQ("states", c->states);
        REQ("x", c->x);
        REQ("Bm", c->Bm);
        REQ("dt_out", c->dt_out);
        REQ("dA_cumsum", c->dA_cumsum);
        break;
    case ST_PASSING:
        REQ("states_start", c->states_start);
        REQ("states", c->states);
        REQ("dA_cumsum", c->dA_cumsum);
        break;
    case ST_SCAN:
        REQ("out", c->out);
        REQ("CB", c->CB);
        REQ("x", c->x);
        REQ("dt_out", c->dt_out);
        REQ("dA_cumsum", c->dA_cumsum);
        REQ("Cm", c->Cm);
        REQ("states_start", c->states_start);
        break;
    }
#undef REQ
    for (int i = 0; i < nr; i++)
        if (!rt[i]) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s is NULL (required)", rn[i]);

    /* options */
    if (o->chunk_size < 1 || o->chunk_size > MAX_DIM)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "chunk_size is %lld; expected 1..2^40",
                        (long long)o->chunk_size);
    if (sg == ST_CUMSUM) {
        if (isnan(o->dt_limit_lo) || isnan(o->dt_limit_hi))
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "dt_limit is (%g, %g); NaN is not allowed", o->dt_limit_lo,
                            o->dt_limit_hi);
        if (o->dt_limit_lo > o->dt_limit_hi)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "dt_limit is (%g, %g); expected lo <= hi", o->dt_limit_lo,
                            o->dt_limit_hi);
    }

    /* dtypes: the stage's leading tensor decides; the backend must support it */
    const mamba2_tensor_t *lead = sg == ST_CUMSUM    ? c->dt
                                  : sg == ST_BMM     ? c->Bm
                                  : sg == ST_PASSING ? c->states
                                                     : c->x;
    const char *lead_name = sg == ST_CUMSUM    ? "dt"
                            : sg == ST_BMM     ? "Bm"
                            : sg == ST_PASSING ? "states"
                                               : "x";
    const mamba2_dtype_t ldt = lead->dtype;
    M2_TRY(m2_check_act_dtype(lead_name, ldt, ops->act_dtypes, ops->name, stage_name[sg]));
    const mamba2_dtype_t adt = ldt;
    const mamba2_dtype_t pdt = adt == MAMBA2_DTYPE_F64 ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    const char *awhy = sg == ST_PASSING ? "the dtype of states" : "the activation dtype";
    const char *pwhy = pdt == MAMBA2_DTYPE_F64 ? "staged tensors and parameters follow f64 "
                                                 "activations"
                                               : "staged tensors and parameters are f32";

    /* sizes */
    int64_t B = 0, L = 0, H = 0, P = 0, N = 0, G = 0, K = 0;
    const int64_t Q = o->chunk_size;
    if (sg == ST_CUMSUM) {
        M2_TRY(sizes_of("dt", c->dt, 3, "[B,L,H]"));
        B = c->dt->shape[0], L = c->dt->shape[1], H = c->dt->shape[2];
        if (B < 1 || H < 1) return at_least_1("dt", c->dt, "[B,L,H]", "B and H");
    } else if (sg == ST_BMM) {
        M2_TRY(sizes_of("Bm", c->Bm, 4, "[B,L,G,N]"));
        B = c->Bm->shape[0], L = c->Bm->shape[1], G = c->Bm->shape[2], N = c->Bm->shape[3];
        if (B < 1 || G < 1 || N < 1) return at_least_1("Bm", c->Bm, "[B,L,G,N]", "B, G and N");
    } else if (sg == ST_PASSING) {
        M2_TRY(sizes_of("states", c->states, 5, "[B,K,H,P,N]"));
        B = c->states->shape[0], K = c->states->shape[1], H = c->states->shape[2];
        P = c->states->shape[3], N = c->states->shape[4];
        if (B < 1 || H < 1 || P < 1 || N < 1)
            return at_least_1("states", c->states, "[B,K,H,P,N]", "B, H, P and N");
    } else {
        const mamba2_tensor_t *bc = sg == ST_STATE ? c->Bm : c->Cm;
        const char *bcn = sg == ST_STATE ? "Bm" : "Cm";
        M2_TRY(sizes_of("x", c->x, 4, "[B,L,H,P]"));
        M2_TRY(sizes_of(bcn, bc, 4, "[B,L,G,N]"));
        B = c->x->shape[0], L = c->x->shape[1], H = c->x->shape[2], P = c->x->shape[3];
        G = bc->shape[2], N = bc->shape[3];
        if (B < 1 || H < 1 || P < 1) return at_least_1("x", c->x, "[B,L,H,P]", "B, H and P");
        if (G < 1 || N < 1) return at_least_1(bcn, bc, "[B,L,G,N]", "G and N");
        if (H % G != 0)
            return m2_error(
                MAMBA2_STATUS_INVALID_ARGUMENT,
                "x has H=%lld heads and %s has G=%lld groups; H must be a multiple of G",
                (long long)H, bcn, (long long)G);
    }
    {
        const char *who = sg == ST_CUMSUM ? "dt" : sg == ST_BMM ? "Bm" : sg == ST_PASSING ? "states" : "x";
        M2_TRY(m2_check_ssd_sizes(who, sg == ST_BMM ? G : H, P > 0 ? P : 1, N > 0 ? N : 1));
    }
    if (sg != ST_PASSING) K = L / Q + (L % Q != 0);

    /* every tensor against its expected shape */
    const int64_t sh_x[4] = {B, L, H, P}, sh_dt[3] = {B, L, H}, sh_h[1] = {H}, sh_hp[2] = {H, P};
    const int64_t sh_bc[4] = {B, L, G, N}, sh_cs[4] = {B, H, K, Q}, sh_cb[5] = {B, K, G, Q, Q};
    const int64_t sh_st[5] = {B, K, H, P, N}, sh_s1[4] = {B, H, P, N};
    int64_t n;
    span ins[12], outs[4];
    int nin = 0, nout = 0;
    const char *cs_lay = "[B,H,K,Q] with K = ceil(L/Q)";
    const char *cb_lay = "[B,K,G,Q,Q] with K = ceil(L/Q)";
    const char *st_lay = "[B,K,H,P,N] with K = ceil(L/Q)";
    const mamba2_tensor_t *D = NULL, *z = NULL, *bias = NULL, *init = NULL;
    int D_per_channel = 0;
    switch (sg) {
    case ST_CUMSUM:
        bias = o->dt_bias;
        M2_IN("dt", c->dt, 3, sh_dt, "[B,L,H]", adt, awhy);
        M2_IN("A", c->A, 1, sh_h, "[H]", pdt, pwhy);
        if (bias) M2_IN("dt_bias", bias, 1, sh_h, "[H]", pdt, pwhy);
        M2_OUT("dt_out", c->dt_out, 4, sh_cs, cs_lay, pdt, pwhy);
        M2_OUT("dA_cumsum", c->dA_cumsum, 4, sh_cs, cs_lay, pdt, pwhy);
        break;
    case ST_BMM:
        M2_IN("Bm", c->Bm, 4, sh_bc, "[B,L,G,N]", adt, awhy);
        M2_IN("Cm", c->Cm, 4, sh_bc, "[B,L,G,N]", adt, awhy);
        M2_OUT("CB", c->CB, 5, sh_cb, cb_lay, pdt, pwhy);
        break;
    case ST_STATE:
        M2_IN("x", c->x, 4, sh_x, "[B,L,H,P]", adt, awhy);
        M2_IN("Bm", c->Bm, 4, sh_bc, "[B,L,G,N]", adt, awhy);
        M2_IN("dt_out", c->dt_out, 4, sh_cs, cs_lay, pdt, pwhy);
        M2_IN("dA_cumsum", c->dA_cumsum, 4, sh_cs, cs_lay, pdt, pwhy);
        M2_OUT("states", c->states, 5, sh_st, st_lay, pdt, pwhy);
        break;
    case ST_PASSING:
        init = o->initial_state;
        M2_IN("states", c->states, 5, sh_st, "[B,K,H,P,N]", pdt, pwhy);
        M2_IN("dA_cumsum", c->dA_cumsum, 4, sh_cs, "[B,H,K,Q] (K from states, Q = chunk_size)", pdt,
           pwhy);
        if (init) M2_IN("initial_state", init, 4, sh_s1, "[B,H,P,N]", pdt, pwhy);
        M2_OUT("states_start", c->states_start, 5, sh_st, "[B,K,H,P,N] (the shape of states)", pdt,
            pwhy);
        if (c->final_state) M2_OUT("final_state", c->final_state, 4, sh_s1, "[B,H,P,N]", pdt, pwhy);
        break;
    case ST_SCAN:
        D = o->D;
        z = o->z;
        M2_IN("x", c->x, 4, sh_x, "[B,L,H,P]", adt, awhy);
        M2_IN("Cm", c->Cm, 4, sh_bc, "[B,L,G,N]", adt, awhy);
        M2_IN("CB", c->CB, 5, sh_cb, cb_lay, pdt, pwhy);
        M2_IN("dt_out", c->dt_out, 4, sh_cs, cs_lay, pdt, pwhy);
        M2_IN("dA_cumsum", c->dA_cumsum, 4, sh_cs, cs_lay, pdt, pwhy);
        M2_IN("states_start", c->states_start, 5, sh_st, st_lay, pdt, pwhy);
        if (D) {
            if (D->rank == 2) {
                D_per_channel = 1;
                M2_IN("D", D, 2, sh_hp, "[H,P]", pdt, pwhy);
            } else {
                if (D->rank != 1)
                    return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                    "D has rank %d; expected [H] or [H,P]", (int)D->rank);
                M2_IN("D", D, 1, sh_h, "[H]", pdt, pwhy);
            }
        }
        if (z) M2_IN("z", z, 4, sh_x, "[B,L,H,P]", adt, awhy);
        M2_OUT("out", c->out, 4, sh_x, "[B,L,H,P]", adt, awhy);
        break;
    }

    /* no output may share memory with an input or another output */
    M2_TRY(m2_check_no_overlap(ins, nin, outs, nout, NULL));

    pr->B = B;
    pr->L = L;
    pr->H = H;
    pr->P = P;
    pr->N = N;
    pr->G = G;
    pr->Q = Q;
    pr->K = K;
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
    pr->D = m2_view_of(D);
    pr->z = m2_view_of(z);
    pr->dt_bias = m2_view_of(bias);
    pr->init = m2_view_of(init);
    pr->dt_out = m2_view_of(c->dt_out);
    pr->dA_cumsum = m2_view_of(c->dA_cumsum);
    pr->CB = m2_view_of(c->CB);
    pr->states = m2_view_of(c->states);
    pr->states_start = m2_view_of(c->states_start);
    pr->final = m2_view_of(c->final_state);
    pr->out = m2_view_of(c->out);
    return MAMBA2_STATUS_OK;
}

static mamba2_status_t run_locked(chunk_call *c, const mamba2_ssd_chunked_options_t *opts) {
    const mamba2_ssd_chunked_options_t defaults = mamba2_ssd_chunked_options_default();
    c->opts = opts ? opts : &defaults;
    m2_ssd_chunk_problem pr;
    M2_TRY(validate(c, &pr));
    const m2_backend_ops *ops = c->ctx->ops;
    /* No chunks (K = 0): every output but state_passing's final_state is empty, so without
     * one there is nothing to do, in O(1) however large B is (no backend loops over empty
     * rows). */
    if (pr.K == 0 && (c->stage != ST_PASSING || !pr.final.p)) return MAMBA2_STATUS_OK;
    switch (c->stage) {
    case ST_CUMSUM: return ops->ssd_chunk_cumsum(c->ctx, &pr);
    case ST_BMM: return ops->ssd_bmm_chunk(c->ctx, &pr);
    case ST_STATE: return ops->ssd_chunk_state(c->ctx, &pr);
    case ST_PASSING: return ops->ssd_state_passing(c->ctx, &pr);
    case ST_SCAN: return ops->ssd_chunk_scan(c->ctx, &pr);
    }
    return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "unknown SSD stage");
}

mamba2_ssd_chunked_options_t mamba2_ssd_chunked_options_default(void) {
    mamba2_ssd_chunked_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = (uint32_t)sizeof o;
    o.chunk_size = 256;
    o.dt_limit_lo = 0.0;
    o.dt_limit_hi = INFINITY;
    return o;
}

/* A stage with the context held (m2_ctx_enter: BUSY while another call runs on it). */
static mamba2_status_t run(chunk_call *c, const mamba2_ssd_chunked_options_t *opts) {
    m2_clear_error();
    M2_TRY(m2_ctx_enter(c->ctx));
    mamba2_status_t st = run_locked(c, opts);
    m2_ctx_leave(c->ctx);
    return st;
}

/* ---- public entry points ------------------------------------------------------------- */

mamba2_status_t mamba2_ssd_chunk_cumsum(mamba2_context_t *ctx, const mamba2_tensor_t *dt_out,
                                        const mamba2_tensor_t *dA_cumsum, const mamba2_tensor_t *dt,
                                        const mamba2_tensor_t *A,
                                        const mamba2_ssd_chunked_options_t *opts) {
    chunk_call c = {
        .stage = ST_CUMSUM, .ctx = ctx, .dt_out = dt_out, .dA_cumsum = dA_cumsum, .dt = dt, .A = A};
    return run(&c, opts);
}

mamba2_status_t mamba2_ssd_bmm_chunk(mamba2_context_t *ctx, const mamba2_tensor_t *CB,
                                     const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
                                     const mamba2_ssd_chunked_options_t *opts) {
    chunk_call c = {
        .stage = ST_BMM, .ctx = ctx, .CB = CB, .Bm = Bm, .Cm = Cm};
    return run(&c, opts);
}

mamba2_status_t mamba2_ssd_chunk_state(mamba2_context_t *ctx, const mamba2_tensor_t *states,
                                       const mamba2_tensor_t *x, const mamba2_tensor_t *Bm,
                                       const mamba2_tensor_t *dt_out,
                                       const mamba2_tensor_t *dA_cumsum,
                                       const mamba2_ssd_chunked_options_t *opts) {
    chunk_call c = {
        .stage = ST_STATE, .ctx = ctx, .states = states, .x = x, .Bm = Bm, .dt_out = dt_out,
        .dA_cumsum = dA_cumsum};
    return run(&c, opts);
}

mamba2_status_t mamba2_ssd_state_passing(mamba2_context_t *ctx, const mamba2_tensor_t *states_start,
                                         const mamba2_tensor_t *final_state,
                                         const mamba2_tensor_t *states,
                                         const mamba2_tensor_t *dA_cumsum,
                                         const mamba2_ssd_chunked_options_t *opts) {
    chunk_call c = {
        .stage = ST_PASSING, .ctx = ctx, .states_start = states_start, .final_state = final_state,
        .states = states, .dA_cumsum = dA_cumsum};
    return run(&c, opts);
}

mamba2_status_t mamba2_ssd_chunk_scan(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                      const mamba2_tensor_t *CB, const mamba2_tensor_t *x,
                                      const mamba2_tensor_t *dt_out,
                                      const mamba2_tensor_t *dA_cumsum, const mamba2_tensor_t *Cm,
                                      const mamba2_tensor_t *states_start,
                                      const mamba2_ssd_chunked_options_t *opts) {
    chunk_call c = {
        .stage = ST_SCAN, .ctx = ctx, .out = out, .CB = CB, .x = x, .dt_out = dt_out,
        .dA_cumsum = dA_cumsum, .Cm = Cm, .states_start = states_start};
    return run(&c, opts);
}
