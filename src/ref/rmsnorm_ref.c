/*
 * rmsnorm_ref.c — the float64 reference of the gated RMSNorm (SPEC §5): the math, written
 * out one loop per equation, single thread, F32 or F64 storage, every value in double.
 *
 * Per row m and group g (channels c in [g*S, (g+1)*S)), silu(s) = s / (1 + e^-s):
 *   v_c  = x_c * silu(z_c)   (norm_before_gate == 0 and z given), else x_c
 *   r    = 1 / sqrt(Σ_c v_c² / S + eps)
 *   y_c  = v_c * r * w_c (+ b_c)
 *   out_c = y_c * silu(z_c)  (norm_before_gate == 1 and z given), else y_c
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/rmsnorm.h"
#include "ref/ref.h"
#include "ref/ref_common.h"

static double silu(double s) { return s / (1.0 + exp(-s)); }
/* silu'(s) = σ(s) (1 + s (1 - σ(s))) */
static double dsilu(double s) {
    const double sg = 1.0 / (1.0 + exp(-s));
    return sg * (1.0 + s * (1.0 - sg));
}

/* workspace: v[S] (forward), v[S] dy[S] dw[D] db[D] (backward), all double */
mamba2_status_t m2_ref_rmsnorm_forward_workspace(const mamba2_context_t *ctx,
                                                 const m2_rmsnorm_problem *pr, size_t *bytes) {
    (void)ctx;
    const int64_t f[2] = {pr->S, (int64_t)sizeof(double)};
    if (!m2_size_prod(bytes, 2, f))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "rmsnorm reference: workspace too large");
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_ref_rmsnorm_backward_workspace(const mamba2_context_t *ctx,
                                                  const m2_rmsnorm_problem *pr, size_t *bytes) {
    (void)ctx;
    size_t n;
    const int64_t f[2] = {2, (int64_t)sizeof(double)};
    if (!m2_size_add((size_t)pr->S, (size_t)pr->D, &n) || !m2_size_prod(bytes, 2, f) ||
        !m2_size_mul(n, *bytes, bytes))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "rmsnorm reference: workspace too large");
    return MAMBA2_STATUS_OK;
}

/* v[S] of row m, group g; returns r (from rstd_in when given, else computed) */
static double group_stats(const m2_rmsnorm_problem *pr, int64_t m, int64_t g, const m2_view *rstd_in,
                          double *v) {
    const mamba2_dtype_t at = pr->act_dtype;
    const int gate_first = pr->z.p && !pr->norm_before_gate;
    double ss = 0.0;
    for (int64_t k = 0; k < pr->S; k++) {
        const int64_t c = g * pr->S + k;
        const double x = m2r_load(pr->x.p, at, m * pr->x.s[0] + c); /* x[M,D] */
        v[k] = gate_first ? x * silu(m2r_load(pr->z.p, at, m * pr->z.s[0] + c)) : x;
        ss += v[k] * v[k];
    }
    if (rstd_in && rstd_in->p) return m2r_load(rstd_in->p, pr->par_dtype, m * rstd_in->s[0] + g);
    return 1.0 / sqrt(ss / (double)pr->S + pr->eps);
}

mamba2_status_t m2_ref_rmsnorm_forward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                       void *ws) {
    (void)ctx;
    const mamba2_dtype_t at = pr->act_dtype, pt = pr->par_dtype;
    const int gate_after = pr->z.p && pr->norm_before_gate;
    double *v = (double *)ws; /* [S] */
    for (int64_t m = 0; m < pr->M; m++) {
        for (int64_t g = 0; g < pr->G; g++) {
            /* r = 1/sqrt(mean(v²) + eps) */
            const double r = group_stats(pr, m, g, NULL, v);
            for (int64_t k = 0; k < pr->S; k++) {
                const int64_t c = g * pr->S + k;
                /* y = v r w (+ b) */
                double y = v[k] * r * m2r_load(pr->weight.p, pt, c);
                if (pr->bias.p) y += m2r_load(pr->bias.p, pt, c);
                /* out = y silu(z) when the gate comes after the norm */
                if (gate_after) y *= silu(m2r_load(pr->z.p, at, m * pr->z.s[0] + c));
                m2r_store(pr->out.p, at, m * pr->out.s[0] + c, y);
            }
            if (pr->rstd.p) m2r_store(pr->rstd.p, pt, m * pr->rstd.s[0] + g, r);
        }
    }
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_ref_rmsnorm_backward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                        void *ws) {
    (void)ctx;
    const mamba2_dtype_t at = pr->act_dtype, pt = pr->par_dtype;
    const int64_t S = pr->S, D = pr->D;
    const int gate_first = pr->z.p && !pr->norm_before_gate;
    const int gate_after = pr->z.p && pr->norm_before_gate;
    double *v = (double *)ws;  /* [S] */
    double *dy = v + S;        /* [S] gradient w.r.t. y */
    double *dw = dy + S;       /* [D] Σ_m of dweight    */
    double *db = dw + D;       /* [D] Σ_m of dbias      */
    memset(dw, 0, (size_t)(2 * D) * sizeof(double));
    for (int64_t m = 0; m < pr->M; m++) {
        for (int64_t g = 0; g < pr->G; g++) {
            const double r = group_stats(pr, m, g, &pr->rstd_in, v);
            /* out = y silu(z)  =>  dz = dout y silu'(z),  dy = dout silu(z) (gate after) */
            for (int64_t k = 0; k < S; k++) {
                const int64_t c = g * S + k;
                const double dout = m2r_load(pr->dout.p, at, m * pr->dout.s[0] + c);
                dy[k] = dout;
                if (gate_after) {
                    const double z = m2r_load(pr->z.p, at, m * pr->z.s[0] + c);
                    double y = v[k] * r * m2r_load(pr->weight.p, pt, c);
                    if (pr->bias.p) y += m2r_load(pr->bias.p, pt, c);
                    if (pr->dz.p) m2r_store(pr->dz.p, at, m * pr->dz.s[0] + c, dout * y * dsilu(z));
                    dy[k] = dout * silu(z);
                }
            }
            /* y = xh w + b, xh = v r  =>  dw += dy xh, db += dy;
             * c1 = Σ_k xh_k w_k dy_k / S  (through r = (mean(v²)+eps)^-1/2);
             * one = mean(xh²) + eps r², which is 1 */
            double c1 = 0.0, one = 0.0;
            for (int64_t k = 0; k < S; k++) {
                const int64_t c = g * S + k;
                const double xh = v[k] * r;
                dw[c] += dy[k] * xh;
                db[c] += dy[k];
                c1 += xh * m2r_load(pr->weight.p, pt, c) * dy[k];
                one += xh * xh;
            }
            c1 /= (double)S;
            one = one / (double)S + pr->eps * r * r;
            /* dv = (w dy - xh c1) r, written (w dy one - xh c1) r: for a small group the
             * difference is about eps r² w dy, and a stored float32 r (rstd_in) rounds
             * 1 - mean(xh²) to its own error, while "one" keeps that rounding out of it */
            for (int64_t k = 0; k < S; k++) {
                const int64_t c = g * S + k;
                const double xh = v[k] * r;
                const double dv = (m2r_load(pr->weight.p, pt, c) * dy[k] * one - xh * c1) * r;
                double dx = dv;
                if (gate_first) {
                    /* v = x silu(z)  =>  dx = dv silu(z),  dz = dv x silu'(z) */
                    const double x = m2r_load(pr->x.p, at, m * pr->x.s[0] + c);
                    const double z = m2r_load(pr->z.p, at, m * pr->z.s[0] + c);
                    dx = dv * silu(z);
                    if (pr->dz.p) m2r_store(pr->dz.p, at, m * pr->dz.s[0] + c, dv * x * dsilu(z));
                }
                if (pr->dx.p) m2r_store(pr->dx.p, at, m * pr->dx.s[0] + c, dx);
            }
        }
    }
    for (int64_t c = 0; c < D; c++) {
        if (pr->dweight.p) m2r_store(pr->dweight.p, pt, c, dw[c]);
        if (pr->dbias.p) m2r_store(pr->dbias.p, pt, c, db[c]);
    }
    return MAMBA2_STATUS_OK;
}
