/*
 * ssd_step_ref.c — the float64 reference of the SSD decode step (SPEC §6 ssd_step): the
 * documentation of its math and the oracle of its tests.
 *
 * Per batch row b with slot q = state_indices[b] (or b; the row is skipped when q < 0), per
 * head h (group g = h / (H/G)), starting from S = state_cache[q,h] ([P,N], widened to double),
 * for each of the row's tokens t = 0 .. T-1 in order (the steps of SPEC §1):
 *   (1) d = clamp(softplus(dt[b,t,h] + dt_bias[h]), lo, hi)      (softplus only if asked)
 *   (2) S = exp(d A[h]) S + d x[b,t,h,:] ⊗ Bm[b,t,g,:]
 *   (3) y = S · Cm[b,t,g,:] + D[h,:] ⊙ x[b,t,h,:]                (D[h] broadcast if per head)
 *   (4) out[b,t,h,:] = y ⊙ silu(z[b,t,h,:])                        (y without z)
 *       all_states[b,t,h] = S                                      (when requested)
 * and finally state_cache[q,h] = S. With an F32/F64 state_cache the state stays in double
 * across the T tokens and is rounded once when stored. With a BF16/F16 state_cache the state
 * is rounded to that dtype after every token (after y used the unrounded one), as storing it
 * and reloading it for the next token would: T calls of one token and one call of T tokens
 * agree exactly. Single-threaded; scratch from malloc.
 */
#include <math.h>
#include <stdlib.h>

#include "core/ssd_step.h"
#include "ref/ref_common.h"
#include "ref/ref.h"

/* silu(v) = v / (1 + exp(-v)), as SPEC §1 step 4 writes it. */
static double silu(double v) { return v / (1.0 + exp(-v)); }

/* SPEC §1 step 1: clamp(softplus(raw + bias), lo, hi); softplus(v) = v for v > 20. */
static double dt_process(const m2_ssd_step_problem *pr, double bias, double raw) {
    double d = raw + bias;
    if (pr->dt_softplus && d <= 20.0) d = log1p(exp(d));
    if (d < pr->dt_lo) d = pr->dt_lo;
    if (d > pr->dt_hi) d = pr->dt_hi;
    return d;
}

/* v rounded once (to nearest even) to a BF16/F16 state dtype; v itself otherwise. */
static double state_round(double v, mamba2_dtype_t sdt) {
    if (sdt != MAMBA2_DTYPE_BF16 && sdt != MAMBA2_DTYPE_F16) return v;
    uint16_t h;
    m2r_store(&h, sdt, 0, v);
    return m2r_load(&h, sdt, 0);
}

/* Element offsets: x, z, out [B,T,H,P] at (b,t,h,p); Bm, Cm [B,T,G,N] at (b,t,g,n);
 * state_cache [S,H,P,N] at (q,h,p,n); all_states [B,T,H,P,N] at (b,t,h,p,n). */
static int64_t at4(const m2_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return i0 * v->s[0] + i1 * v->s[1] + i2 * v->s[2] + i3;
}
static int64_t at5(const m2_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3, int64_t i4) {
    return i0 * v->s[0] + i1 * v->s[1] + i2 * v->s[2] + i3 * v->s[3] + i4;
}

mamba2_status_t m2_ref_ssd_step(mamba2_context_t *ctx, const m2_ssd_step_problem *pr) {
    (void)ctx;
    const int64_t H = pr->H, P = pr->P, N = pr->N, hpg = pr->H / pr->G;
    const mamba2_dtype_t at = pr->act_dtype, pt = pr->par_dtype, sdt = pr->state_dtype;
    double *S = m2r_zeros(m2r_mul(P, N));                           /* [P,N] the state  */
    double *vec = m2r_zeros(m2r_add(m2r_mul(2, P), m2r_mul(2, N))); /* x, D [P]; B, C [N] */
    if (!S || !vec) {
        free(S);
        free(vec);
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                        "ssd_step reference: cannot allocate scratch for P=%lld, N=%lld",
                        (long long)P, (long long)N);
    }
    double *x = vec, *D = vec + P, *Bv = vec + 2 * P, *Cv = vec + 2 * P + N;

    for (int64_t b = 0; b < pr->B; b++) {
        const int64_t q = m2_ssd_step_slot(pr, b);
        if (q < 0) continue; /* padding row: nothing is read or written */
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / hpg;
            const double A = m2r_load(pr->A.p, pt, h);
            const double bias = pr->dt_bias.p ? m2r_load(pr->dt_bias.p, pt, h) : 0.0;
            for (int64_t p = 0; p < P; p++)
                D[p] = !pr->D.p            ? 0.0
                       : pr->D_per_channel ? m2r_load(pr->D.p, pt, h * pr->D.s[0] + p)
                                           : m2r_load(pr->D.p, pt, h);
            for (int64_t p = 0; p < P; p++)
                for (int64_t n = 0; n < N; n++)
                    S[p * N + n] = m2r_load(pr->cache.p, sdt, at4(&pr->cache, q, h, p, n));
            for (int64_t t = 0; t < pr->T; t++) {
                /* (1) the processed step and the decay */
                const double d = dt_process(
                    pr, bias, m2r_load(pr->dt.p, at, b * pr->dt.s[0] + t * pr->dt.s[1] + h));
                const double a = exp(d * A);
                for (int64_t p = 0; p < P; p++)
                    x[p] = m2r_load(pr->x.p, at, at4(&pr->x, b, t, h, p));
                for (int64_t n = 0; n < N; n++) {
                    Bv[n] = m2r_load(pr->Bm.p, at, at4(&pr->Bm, b, t, g, n));
                    Cv[n] = m2r_load(pr->Cm.p, at, at4(&pr->Cm, b, t, g, n));
                }
                /* (2) S = a S + d x ⊗ B */
                for (int64_t p = 0; p < P; p++)
                    for (int64_t n = 0; n < N; n++)
                        S[p * N + n] = a * S[p * N + n] + d * x[p] * Bv[n];
                /* (3), (4) */
                for (int64_t p = 0; p < P; p++) {
                    double y = 0.0;
                    for (int64_t n = 0; n < N; n++) y += S[p * N + n] * Cv[n];
                    y += D[p] * x[p];
                    if (pr->z.p) y *= silu(m2r_load(pr->z.p, at, at4(&pr->z, b, t, h, p)));
                    m2r_store(pr->out.p, at, at4(&pr->out, b, t, h, p), y);
                }
                if (pr->all_states.p)
                    for (int64_t p = 0; p < P; p++)
                        for (int64_t n = 0; n < N; n++)
                            m2r_store(pr->all_states.p, sdt, at5(&pr->all_states, b, t, h, p, n),
                                      S[p * N + n]);
                /* a half state holds its stored (rounded) value between tokens */
                if (sdt != pt)
                    for (int64_t e = 0; e < P * N; e++) S[e] = state_round(S[e], sdt);
            }
            for (int64_t p = 0; p < P; p++)
                for (int64_t n = 0; n < N; n++)
                    m2r_store(pr->cache.p, sdt, at4(&pr->cache, q, h, p, n), S[p * N + n]);
        }
    }
    free(S);
    free(vec);
    return MAMBA2_STATUS_OK;
}
