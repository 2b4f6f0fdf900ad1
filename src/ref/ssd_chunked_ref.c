/*
 * ssd_chunked_ref.c — the float64 reference of the staged SSD chunk pipeline (SPEC §3): one
 * function per stage, one loop nest per equation, every value widened to double on load and
 * rounded once when stored. Single-threaded; scratch from malloc.
 *
 * Notation, per row b, chunk k (tokens kQ .. kQ+len-1, len = min(Q, L - kQ)), head h,
 * group g = h / (H/G); i, j are positions in the chunk; d = dt_out[b,h,k,:],
 * cs = dA_cumsum[b,h,k,:], cs_last = cs[Q-1]:
 *   chunk_cumsum   d_i = clamp(softplus(dt[b,kQ+i,h] + dt_bias[h]), lo, hi)  (i < len; else 0)
 *                  cs_i = Σ_{j<=i} d_j A[h]                                  (flat over padding)
 *   bmm_chunk      CB[b,k,g,i,j] = Σ_n Cm[b,kQ+i,g,n] Bm[b,kQ+j,g,n]        (i, j < len; else 0)
 *   chunk_state    states[b,k,h] = Σ_{j<len} exp(cs_last - cs_j) d_j x_j ⊗ Bm_j          [P,N]
 *   state_passing  S_start[0] = init[b,h] (or 0); S_start[k+1] = exp(cs_last[k]) S_start[k]
 *                  + states[b,k,h]; final[b,h] = S_start[K]
 *   chunk_scan     y_i = Σ_{j<=i} CB[i,j] exp(cs_i - cs_j) d_j x_j + exp(cs_i) S_start[k] · Cm_i
 *                        + D ⊙ x_i;  out_i = y_i ⊙ silu(z_i)                              (i < len)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ssd_chunked.h"
#include "ref/ref_common.h"
#include "ref/ref.h"

static double silu(double v) { return v / (1.0 + exp(-v)); }

/* x, z, out [B,L,H,P] at (b,t,h,p); Bm, Cm [B,L,G,N] at (b,t,g,n); dt_out, dA_cumsum
 * [B,H,K,Q] at (b,h,k,i); init, final [B,H,P,N] at (b,h,p,n). */
static int64_t at4(const m2_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return i0 * v->s[0] + i1 * v->s[1] + i2 * v->s[2] + i3;
}
/* CB [B,K,G,Q,Q] at (b,k,g,i,j); states, states_start [B,K,H,P,N] at (b,k,h,p,n). */
static int64_t at5(const m2_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3, int64_t i4) {
    return i0 * v->s[0] + i1 * v->s[1] + i2 * v->s[2] + i3 * v->s[3] + i4;
}

/* ---- chunk_cumsum ------------------------------------------------------------------------ */

mamba2_status_t m2_ref_ssd_chunk_cumsum(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    (void)ctx;
    const mamba2_dtype_t at = pr->act_dtype, pt = pr->par_dtype;
    for (int64_t b = 0; b < pr->B; b++)
        for (int64_t h = 0; h < pr->H; h++) {
            const double A = m2r_load(pr->A.p, pt, h);
            const double bias = pr->dt_bias.p ? m2r_load(pr->dt_bias.p, pt, h) : 0.0;
            for (int64_t k = 0; k < pr->K; k++) {
                const int64_t len = m2_chunk_len(pr, k);
                double cs = 0.0;
                for (int64_t i = 0; i < pr->Q; i++) {
                    double d = 0.0; /* padding */
                    if (i < len) {
                        const int64_t t = k * pr->Q + i;
                        d = m2r_load(pr->dt.p, at, b * pr->dt.s[0] + t * pr->dt.s[1] + h) + bias;
                        if (pr->dt_softplus && d <= 20.0) d = log1p(exp(d));
                        if (d < pr->dt_lo) d = pr->dt_lo;
                        if (d > pr->dt_hi) d = pr->dt_hi;
                    }
                    cs += d * A;
                    m2r_store(pr->dt_out.p, pt, at4(&pr->dt_out, b, h, k, i), d);
                    m2r_store(pr->dA_cumsum.p, pt, at4(&pr->dA_cumsum, b, h, k, i), cs);
                }
            }
        }
    return MAMBA2_STATUS_OK;
}

/* ---- bmm_chunk ------------------------------------------------------------------------------ */

mamba2_status_t m2_ref_ssd_bmm_chunk(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    (void)ctx;
    const mamba2_dtype_t at = pr->act_dtype, pt = pr->par_dtype;
    const int64_t Q = pr->Q;
    for (int64_t b = 0; b < pr->B; b++)
        for (int64_t k = 0; k < pr->K; k++) {
            const int64_t len = m2_chunk_len(pr, k);
            for (int64_t g = 0; g < pr->G; g++)
                for (int64_t i = 0; i < Q; i++)
                    for (int64_t j = 0; j < Q; j++) {
                        double acc = 0.0;
                        if (i < len && j < len)
                            for (int64_t n = 0; n < pr->N; n++)
                                acc += m2r_load(pr->Cm.p, at, at4(&pr->Cm, b, k * Q + i, g, n)) *
                                       m2r_load(pr->Bm.p, at, at4(&pr->Bm, b, k * Q + j, g, n));
                        m2r_store(pr->CB.p, pt, at5(&pr->CB, b, k, g, i, j), acc);
                    }
        }
    return MAMBA2_STATUS_OK;
}

/* ---- chunk_state ---------------------------------------------------------------------------- */

mamba2_status_t m2_ref_ssd_chunk_state(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    (void)ctx;
    const mamba2_dtype_t at = pr->act_dtype, pt = pr->par_dtype;
    const int64_t P = pr->P, N = pr->N, Q = pr->Q, hpg = pr->H / pr->G;
    double *S = m2r_zeros(m2r_mul(P, N)); /* [P,N] the chunk's state */
    if (!S)
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "ssd_chunk_state reference: out of memory");
    for (int64_t b = 0; b < pr->B; b++)
        for (int64_t k = 0; k < pr->K; k++) {
            const int64_t len = m2_chunk_len(pr, k);
            for (int64_t h = 0; h < pr->H; h++) {
                const int64_t g = h / hpg;
                const double cs_last =
                    m2r_load(pr->dA_cumsum.p, pt, at4(&pr->dA_cumsum, b, h, k, Q - 1));
                memset(S, 0, (size_t)(P * N) * sizeof(double));
                for (int64_t j = 0; j < len; j++) {
                    const int64_t t = k * Q + j;
                    const double cs =
                        m2r_load(pr->dA_cumsum.p, pt, at4(&pr->dA_cumsum, b, h, k, j));
                    const double d = m2r_load(pr->dt_out.p, pt, at4(&pr->dt_out, b, h, k, j));
                    const double w = exp(cs_last - cs) * d;
                    for (int64_t p = 0; p < P; p++) {
                        const double xw = w * m2r_load(pr->x.p, at, at4(&pr->x, b, t, h, p));
                        for (int64_t n = 0; n < N; n++)
                            S[p * N + n] += xw * m2r_load(pr->Bm.p, at, at4(&pr->Bm, b, t, g, n));
                    }
                }
                for (int64_t p = 0; p < P; p++)
                    for (int64_t n = 0; n < N; n++)
                        m2r_store(pr->states.p, pt, at5(&pr->states, b, k, h, p, n), S[p * N + n]);
            }
        }
    free(S);
    return MAMBA2_STATUS_OK;
}

/* ---- state_passing -------------------------------------------------------------------------- */

mamba2_status_t m2_ref_ssd_state_passing(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    (void)ctx;
    const mamba2_dtype_t pt = pr->par_dtype;
    const int64_t P = pr->P, N = pr->N, Q = pr->Q;
    double *S = m2r_zeros(m2r_mul(P, N)); /* [P,N] the running state */
    if (!S)
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "ssd_state_passing reference: out of memory");
    for (int64_t b = 0; b < pr->B; b++)
        for (int64_t h = 0; h < pr->H; h++) {
            for (int64_t p = 0; p < P; p++)
                for (int64_t n = 0; n < N; n++)
                    S[p * N + n] =
                        pr->init.p ? m2r_load(pr->init.p, pt, at4(&pr->init, b, h, p, n)) : 0.0;
            for (int64_t k = 0; k < pr->K; k++) {
                const double decay =
                    exp(m2r_load(pr->dA_cumsum.p, pt, at4(&pr->dA_cumsum, b, h, k, Q - 1)));
                for (int64_t p = 0; p < P; p++)
                    for (int64_t n = 0; n < N; n++) {
                        m2r_store(pr->states_start.p, pt, at5(&pr->states_start, b, k, h, p, n),
                                  S[p * N + n]);
                        S[p * N + n] = decay * S[p * N + n] +
                                       m2r_load(pr->states.p, pt, at5(&pr->states, b, k, h, p, n));
                    }
            }
            if (pr->final.p)
                for (int64_t p = 0; p < P; p++)
                    for (int64_t n = 0; n < N; n++)
                        m2r_store(pr->final.p, pt, at4(&pr->final, b, h, p, n), S[p * N + n]);
        }
    free(S);
    return MAMBA2_STATUS_OK;
}

/* ---- chunk_scan ------------------------------------------------------------------------------ */

mamba2_status_t m2_ref_ssd_chunk_scan(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    (void)ctx;
    const mamba2_dtype_t at = pr->act_dtype, pt = pr->par_dtype;
    const int64_t P = pr->P, N = pr->N, Q = pr->Q, hpg = pr->H / pr->G;
    for (int64_t b = 0; b < pr->B; b++)
        for (int64_t k = 0; k < pr->K; k++) {
            const int64_t len = m2_chunk_len(pr, k);
            for (int64_t h = 0; h < pr->H; h++) {
                const int64_t g = h / hpg;
                for (int64_t i = 0; i < len; i++) {
                    const int64_t ti = k * Q + i;
                    const double cs_i =
                        m2r_load(pr->dA_cumsum.p, pt, at4(&pr->dA_cumsum, b, h, k, i));
                    for (int64_t p = 0; p < P; p++) {
                        /* the chunk's own tokens */
                        double y_diag = 0.0;
                        for (int64_t j = 0; j <= i; j++) {
                            const double cs_j =
                                m2r_load(pr->dA_cumsum.p, pt, at4(&pr->dA_cumsum, b, h, k, j));
                            const double d_j =
                                m2r_load(pr->dt_out.p, pt, at4(&pr->dt_out, b, h, k, j));
                            const double cb = m2r_load(pr->CB.p, pt, at5(&pr->CB, b, k, g, i, j));
                            y_diag += cb * exp(cs_i - cs_j) * d_j *
                                      m2r_load(pr->x.p, at, at4(&pr->x, b, k * Q + j, h, p));
                        }
                        /* the state entering the chunk */
                        double cs_dot = 0.0;
                        for (int64_t n = 0; n < N; n++)
                            cs_dot += m2r_load(pr->states_start.p, pt,
                                               at5(&pr->states_start, b, k, h, p, n)) *
                                      m2r_load(pr->Cm.p, at, at4(&pr->Cm, b, ti, g, n));
                        const double xi = m2r_load(pr->x.p, at, at4(&pr->x, b, ti, h, p));
                        const double Dp = !pr->D.p ? 0.0
                                          : pr->D_per_channel
                                              ? m2r_load(pr->D.p, pt, h * pr->D.s[0] + p)
                                              : m2r_load(pr->D.p, pt, h);
                        double y = y_diag + exp(cs_i) * cs_dot + Dp * xi;
                        if (pr->z.p) y *= silu(m2r_load(pr->z.p, at, at4(&pr->z, b, ti, h, p)));
                        m2r_store(pr->out.p, at, at4(&pr->out, b, ti, h, p), y);
                    }
                }
            }
        }
    return MAMBA2_STATUS_OK;
}
