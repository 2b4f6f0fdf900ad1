/*
 * conv1d_ref.c — the float64 reference of the causal depthwise conv1d: forward and backward
 * (SPEC §4) and the decode step (SPEC §6, conv1d_step).
 *
 * Written for clarity, not speed (it is the oracle of the CPU backend's tests): one
 * (sequence, channel) at a time, every value widened to double on load, every sum in double
 * in a fixed order, each output rounded once when stored (F32 or F64 storage); single
 * thread. Scratch comes from malloc (freed on every path), so the workspace query reports 0.
 *
 * Notation, per sequence s (tokens [t0, t1) of batch row b, len = t1 - t0), channel c, with
 * positions r relative to the sequence start:
 *   u_r   = x[b, t0+r, c]                  for 0 <= r < len
 *         = init[s, c, W-1+r] (or 0)       for -(W-1) <= r < 0
 *   (1) pre_r = bias[c] + Σ_{k<W} weight[c,k] u_{r-W+1+k}           [pre, out: len values]
 *   (2) out_r = silu(pre_r) or pre_r
 *   (3) final[s, c, i] = u_{len-W+1+i},   i < W-1
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv1d.h"
#include "ref/ref_common.h"
#include "ref/ref.h"

/* silu(v) = v / (1 + exp(-v)) and its derivative sigmoid(v) (1 + v (1 - sigmoid(v))). */
static double silu(double v) { return v / (1.0 + exp(-v)); }
static double silu_grad(double v) {
    const double sg = 1.0 / (1.0 + exp(-v));
    return sg * (1.0 + v * (1.0 - sg));
}

/* x, out, dout, dx [B,L,C] at (b,t,c) */
static int64_t at_btc(const m2_view *v, int64_t b, int64_t t, int64_t c) {
    return b * v->s[0] + t * v->s[1] + c;
}
/* init, final, dfinal, dinit, cache [S,C,W-1] at (s,c,i) */
static int64_t at_sci(const m2_view *v, int64_t s, int64_t c, int64_t i) {
    return s * v->s[0] + c * v->s[1] + i;
}

/* u_r of sequence s (row b, start t0) at channel c, for -(W-1) <= r < len. */
static double u_at(const m2_conv1d_problem *pr, int64_t s, int64_t b, int64_t t0, int64_t c,
                   int64_t r) {
    if (r >= 0) return m2r_load(pr->x.p, pr->act_dtype, at_btc(&pr->x, b, t0 + r, c));
    if (!pr->init.p) return 0.0;
    return m2r_load(pr->init.p, pr->act_dtype, at_sci(&pr->init, s, c, pr->W - 1 + r));
}

/* weight[c,k] and bias[c] (0 without bias) */
static double w_at(const m2_conv1d_problem *pr, int64_t c, int64_t k) {
    return m2r_load(pr->weight.p, pr->par_dtype, c * pr->weight.s[0] + k);
}
static double bias_at(const m2_conv1d_problem *pr, int64_t c) {
    return pr->bias.p ? m2r_load(pr->bias.p, pr->par_dtype, c) : 0.0;
}

/* (1): pre_r */
static double pre_at(const m2_conv1d_problem *pr, int64_t s, int64_t b, int64_t t0, int64_t c,
                     int64_t r) {
    double acc = bias_at(pr, c);
    for (int64_t k = 0; k < pr->W; k++) acc += w_at(pr, c, k) * u_at(pr, s, b, t0, c, r - pr->W + 1 + k);
    return acc;
}

mamba2_status_t m2_ref_conv1d_forward(mamba2_context_t *ctx, const m2_conv1d_problem *pr) {
    const int64_t C = pr->C, W = pr->W;
    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_conv1d_seq(pr, s, &b, &t0, &t1);
        const int64_t len = t1 - t0;
        for (int64_t c = 0; c < C; c++) {
            for (int64_t r = 0; r < len; r++) {
                /* (1), (2) */
                const double pre = pre_at(pr, s, b, t0, c, r);
                m2r_store(pr->out.p, pr->act_dtype, at_btc(&pr->out, b, t0 + r, c),
                          pr->silu ? silu(pre) : pre);
            }
            /* (3) */
            if (pr->final.p)
                for (int64_t i = 0; i < W - 1; i++)
                    m2r_store(pr->final.p, pr->act_dtype, at_sci(&pr->final, s, c, i),
                              u_at(pr, s, b, t0, c, len - W + 1 + i));
        }
    }
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_ref_conv1d_backward_workspace(const mamba2_context_t *ctx,
                                                 const m2_conv1d_problem *pr, size_t *bytes) {
    *bytes = 0;
    return MAMBA2_STATUS_OK;
}

/*
 * Backward, per (sequence, channel), with g_r = ∂loss/∂pre_r:
 *   (2) out_r = act(pre_r)           ->  g_r = dout_r * act'(pre_r)
 *   (1) pre_r = bias + Σ_k w_k u_{r-W+1+k}
 *                                    ->  dbias += Σ_r g_r
 *                                        dweight[k] += Σ_r g_r u_{r-W+1+k}
 *                                        du_j += Σ_k g_{j+W-1-k} w_k   (0 <= j+W-1-k < len)
 *   (3) final_i = u_{len-W+1+i}      ->  du_{len-W+1+i} += dfinal_i
 *   du_j is dx at t0+j for j >= 0 and dinit[W-1+j] for j < 0.
 * dweight and dbias sum over all sequences in sequence order.
 */
mamba2_status_t m2_ref_conv1d_backward(mamba2_context_t *ctx, const m2_conv1d_problem *pr,
                                       void *ws) {
    const int64_t C = pr->C, W = pr->W;
    int64_t maxlen = 0;
    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_conv1d_seq(pr, s, &b, &t0, &t1);
        if (t1 - t0 > maxlen) maxlen = t1 - t0;
    }
    double *g = m2r_zeros(maxlen);                  /* [len]     g_r              */
    double *du = m2r_zeros(m2r_add(maxlen, W - 1)); /* [W-1+len] du_j at W-1+j     */
    double *dw = m2r_zeros(m2r_mul(C, W));          /* [C,W]     dweight sums      */
    double *db = m2r_zeros(C);                      /* [C]       dbias sums        */
    if (!g || !du || !dw || !db) {
        free(g);
        free(du);
        free(dw);
        free(db);
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "conv1d reference backward: out of memory");
    }
    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_conv1d_seq(pr, s, &b, &t0, &t1);
        const int64_t len = t1 - t0;
        for (int64_t c = 0; c < C; c++) {
            /* g_r = dout_r act'(pre_r) */
            for (int64_t r = 0; r < len; r++) {
                const double dout = m2r_load(pr->dout.p, pr->act_dtype, at_btc(&pr->dout, b, t0 + r, c));
                g[r] = pr->silu ? dout * silu_grad(pre_at(pr, s, b, t0, c, r)) : dout;
            }
            /* dbias, dweight */
            for (int64_t r = 0; r < len; r++) {
                db[c] += g[r];
                for (int64_t k = 0; k < W; k++)
                    dw[c * W + k] += g[r] * u_at(pr, s, b, t0, c, r - W + 1 + k);
            }
            /* du_j = Σ_k g_{j+W-1-k} w_k, then the final state's gradient */
            for (int64_t j = -(W - 1); j < len; j++) {
                double acc = 0.0;
                for (int64_t k = 0; k < W; k++) {
                    const int64_t r = j + W - 1 - k;
                    if (r >= 0 && r < len) acc += g[r] * w_at(pr, c, k);
                }
                du[W - 1 + j] = acc;
            }
            if (pr->dfinal.p)
                for (int64_t i = 0; i < W - 1; i++)
                    du[W - 1 + len - W + 1 + i] +=
                        m2r_load(pr->dfinal.p, pr->act_dtype, at_sci(&pr->dfinal, s, c, i));
            if (pr->dx.p)
                for (int64_t r = 0; r < len; r++)
                    m2r_store(pr->dx.p, pr->act_dtype, at_btc(&pr->dx, b, t0 + r, c), du[W - 1 + r]);
            if (pr->dinit.p)
                for (int64_t i = 0; i < W - 1; i++)
                    m2r_store(pr->dinit.p, pr->act_dtype, at_sci(&pr->dinit, s, c, i), du[i]);
        }
    }
    for (int64_t c = 0; c < C; c++) {
        if (pr->dbias.p) m2r_store(pr->dbias.p, pr->par_dtype, c, db[c]);
        if (pr->dweight.p)
            for (int64_t k = 0; k < W; k++)
                m2r_store(pr->dweight.p, pr->par_dtype, c * pr->dweight.s[0] + k, dw[c * W + k]);
    }
    free(g);
    free(du);
    free(dw);
    free(db);
    return MAMBA2_STATUS_OK;
}

/*
 * Step, per row b with slot q = state_indices[b] (skipped when q < 0), channel c, over the
 * T tokens of the row: the window v = [h_0 .. h_{W-2}, x[b,0..T-1,c]] (W-1+T values), where
 * the history h_j = cache[q,c,pos(j)] (core/conv1d.h m2_conv1d_cache_pos: shift mode
 * Lc-W+1+j, circular mode (cache_seqlens[b] - W+1 + j) mod Lc),
 *   out[b,t,c] = act(bias[c] + Σ_k weight[c,k] v[t+k])
 * and then (after every output of the row and channel is computed) the update:
 *   shift:    cache[q,c,i] = [cache[q,c,0..Lc-1], x[b,0..T-1,c]][T+i]     i = 0 .. Lc-1
 *   circular: cache[q,c,(cache_seqlens[b] + t) mod Lc] = x[b,t,c]          t = 0 .. T-1
 * i.e. the forward with the history as initial state.
 */
static int64_t at_cache(const m2_view *v, int64_t q, int64_t c, int64_t i) {
    return q * v->s[0] + c * v->s[1] + i * v->s[2];
}

mamba2_status_t m2_ref_conv1d_step(mamba2_context_t *ctx, const m2_conv1d_problem *pr) {
    (void)ctx;
    const int64_t C = pr->C, W = pr->W, T = pr->L, Lc = pr->Lc;
    double *v = m2r_zeros(m2r_add(T, W - 1)); /* [W-1+T] the window */
    double *old = m2r_zeros(Lc);              /* [Lc] the slot before the update */
    if (!v || !old) {
        free(v);
        free(old);
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "conv1d reference step: out of memory");
    }
    const mamba2_dtype_t dt = pr->act_dtype;
    for (int64_t b = 0; b < pr->B; b++) {
        const int64_t q = m2_conv1d_slot(pr, b);
        if (q < 0) continue; /* padding row */
        const int64_t sl = pr->cache_seqlens ? m2_conv1d_seqlen(pr, b) : 0;
        for (int64_t c = 0; c < C; c++) {
            for (int64_t i = 0; i < Lc; i++) old[i] = m2r_load(pr->cache.p, dt, at_cache(&pr->cache, q, c, i));
            for (int64_t j = 0; j < W - 1; j++) v[j] = old[m2_conv1d_cache_pos(pr, sl, j)];
            for (int64_t t = 0; t < T; t++)
                v[W - 1 + t] = m2r_load(pr->x.p, dt, at_btc(&pr->x, b, t, c));
            for (int64_t t = 0; t < T; t++) {
                double acc = bias_at(pr, c);
                for (int64_t k = 0; k < W; k++) acc += w_at(pr, c, k) * v[t + k];
                m2r_store(pr->out.p, dt, at_btc(&pr->out, b, t, c), pr->silu ? silu(acc) : acc);
            }
            if (pr->cache_seqlens) {
                for (int64_t t = 0; t < T && Lc > 0; t++)
                    m2r_store(pr->cache.p, dt, at_cache(&pr->cache, q, c, (sl % Lc + t) % Lc),
                              v[W - 1 + t]);
            } else {
                for (int64_t i = 0; i < Lc; i++) {
                    const int64_t j = T + i; /* index into [old slot (Lc), x (T)] */
                    m2r_store(pr->cache.p, dt, at_cache(&pr->cache, q, c, i),
                              j < Lc ? old[j] : v[W - 1 + j - Lc]);
                }
            }
        }
    }
    free(v);
    free(old);
    return MAMBA2_STATUS_OK;
}
