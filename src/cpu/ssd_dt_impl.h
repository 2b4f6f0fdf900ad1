/*
 * ssd_dt_impl.h — the dt part of the fused SSD kernel set: dt processing (bias, softplus,
 * clamp) and the segment scales of a set of heads. Text of ssd_kernels_impl.h, included from
 * it once per kernel set (its M2K names, vector layer and includes apply); not a header of
 * its own.
 */
/* ---- dt processing and segment scales of a set of heads ------------------------------ */

/* The segment threshold (see ssd_cpu.h): a head's carried state is renormalized when its
 * accumulated log decay would fall below this. */
#define M2_SEG_LOG_MIN (-60.0)

/* For nh heads (one vector lane each) over T tokens, raw dt of token i at raw + i*ld
 * (the heads contiguous): SPEC §1 step 1 and the rescaled-segment scales.
 *   v = softplus(raw + bias) (or raw + bias; in double), d = clamp(v, lo, hi), gf = ∂d/∂raw
 *   c += d A (double; a head's log scale inside its segment, carried across blocks in c[]),
 *   restarting at 0 on the sequence's first token (seq_start, factor a_0 for the initial
 *   state) and where c would fall below M2_SEG_LOG_MIN (factor exp(c)): entry (i, factor)
 *   of the head's restart list.
 *   E = float(exp(c)), w = float(d / exp(c)), both from the double c.
 * Outputs per head j: d, E, w, gf (gf may be NULL) at j*ldo + i; restarts at ridx/rf + j*ldo,
 * their count in nr[j]. bias may be NULL; A, bias: nh floats. */
/* v = softplus(r) in double (r itself above 20, where the two agree in double), g = dv/dr;
 * without softplus v = r, g = 1 */
M2_INLINE m2vd dt_act(m2vd r, int softplus, m2vd *g) {
    *g = m2vd_set1(1.0);
    if (!softplus) return r;
    m2vd sg;
    const m2vd sp = m2vd_softplus(r, &sg);
    const m2vd_mask big = m2vd_gt(r, m2vd_set1(20.0));
    *g = m2vd_select(big, *g, sg);
    return m2vd_select(big, r, sp);
}

/* d = clamp(v, lo, hi), a NaN v passed through as NaN (SPEC §9; the reference's clamp), the
 * bits of min(max(v, lo), hi) otherwise */
M2_INLINE m2vd dt_clamp(m2vd v, m2vd lo, m2vd hi) {
    return m2vd_select(m2vd_ge(v, v), m2vd_min(m2vd_max(v, lo), hi), v);
}

/* dt_block for a few heads: each head's tokens along the vector lanes instead of the heads
 * (a set of 1-8 heads would fill 1-8 of 16 lanes). The same operations on every element in
 * the same order as the head-vectorized loop below (the segment scale token after token in
 * double), so the same bits. T <= M2_SW_TMAX. */
static void M2K(dt_heads)(int64_t nh, int64_t T, int64_t ldo, const float *raw, int64_t ld,
                          const float *bias, const float *A, int softplus, double lo, double hi,
                          int seq_start, double *c, float *d, float *E, float *w, float *gf,
                          int *nr, int32_t *ridx, float *rf) {
    enum { TM = M2_SW_TMAX + M2VD_LEN };
    const int64_t Tv = (T + M2VD_LEN - 1) / M2VD_LEN * M2VD_LEN;
    for (int64_t j = 0; j < nh; j++) {
        float rr[TM], vv[TM], gg[TM], dd[TM], ev[TM], wv[TM];
        double la[TM], cc[TM];
        const double bj = bias ? (double)bias[j] : 0.0, aj = (double)A[j];
        for (int64_t i = 0; i < Tv; i++) rr[i] = i < T ? raw[i * ld + j] : 0.0f;
        for (int64_t i = 0; i < Tv; i += M2VD_LEN) {
            m2vd g;
            const m2vd v = dt_act(m2vd_add(m2vd_load_ps(rr + i), m2vd_set1(bj)), softplus, &g);
            m2vd_store_ps(vv + i, v);
            m2vd_store_ps(gg + i, g);
            m2vd_store_ps(dd + i, dt_clamp(m2vd_load_ps(vv + i), m2vd_set1(lo), m2vd_set1(hi)));
            m2vd_store(la + i, m2vd_mul(m2vd_load_ps(dd + i), m2vd_set1(aj))); /* exact */
        }
        /* the segment scale, token after token; restarts where dt_block finds them */
        double cj = c[j];
        int n = 0;
        for (int64_t i = 0; i < T; i++) {
            double cn = cj + la[i];
            if ((i == 0 && seq_start) || cn < M2_SEG_LOG_MIN) {
                double fa[M2VD_LEN];
                m2vd_store(fa, m2vd_exp(m2vd_set1(i == 0 && seq_start ? la[i] : cn)));
                ridx[j * ldo + n] = (int32_t)i;
                rf[j * ldo + n] = (float)fa[0];
                n++;
                cn = 0.0;
            }
            cc[i] = cj = cn;
        }
        for (int64_t i = T; i < Tv; i++) cc[i] = 0.0;
        nr[j] = n;
        c[j] = cj;
        for (int64_t i = 0; i < Tv; i += M2VD_LEN) {
            const m2vd ee = m2vd_exp(m2vd_load(cc + i));
            m2vd_store_ps(ev + i, ee);
            m2vd_store_ps(wv + i, m2vd_div(m2vd_load_ps(dd + i), ee));
        }
        for (int64_t i = 0; i < T; i++) {
            d[j * ldo + i] = dd[i];
            E[j * ldo + i] = ev[i];
            w[j * ldo + i] = wv[i];
            if (gf) gf[j * ldo + i] = ((double)vv[i] >= lo && (double)vv[i] <= hi) ? gg[i] : 0.0f;
        }
    }
}

static void M2K(dt_block)(int64_t nh, int64_t T, int64_t ldo, const float *raw, int64_t ld,
                          const float *bias, const float *A, int softplus, double lo, double hi,
                          int seq_start, double *c, float *d, float *E, float *w, float *gf,
                          int *nr, int32_t *ridx, float *rf) {
    /* whole vectors of heads below; a remainder of at most half a vector per head (their
     * results are the same either way) */
    const int64_t full = nh / M2V_LEN * M2V_LEN;
    if (M2VD_LEN > 1 && T <= M2_SW_TMAX && nh - full > 0 && 2 * (nh - full) <= M2V_LEN) {
        M2K(dt_heads)(nh - full, T, ldo, raw + full, ld, bias ? bias + full : NULL, A + full,
                      softplus, lo, hi, seq_start, c + full, d + full * ldo, E + full * ldo,
                      w + full * ldo, gf ? gf + full * ldo : NULL, nr + full, ridx + full * ldo,
                      rf + full * ldo);
        nh = full;
    }
    for (int64_t j0 = 0; j0 < nh; j0 += M2V_LEN) {
        const int64_t nl = nh - j0 < M2V_LEN ? nh - j0 : M2V_LEN;
        /* lanes past nh compute on zeros and are dropped: every head sees the same
         * operations whatever its lane */
        float bv[M2V_LEN], rr[M2V_LEN], ev[M2V_LEN], wv[M2V_LEN];
        float dd[M2_SW_TMAX * M2V_LEN], gg[M2_SW_TMAX * M2V_LEN];
        double av[M2V_LEN], cv[M2V_LEN], fa[M2V_LEN];
        double la[M2_SW_TMAX * M2V_LEN], cn[M2_SW_TMAX * M2V_LEN];
        for (int64_t l = 0; l < M2V_LEN; l++) {
            bv[l] = l < nl && bias ? bias[j0 + l] : 0.0f;
            av[l] = l < nl ? (double)A[j0 + l] : 0.0;
            cv[l] = l < nl ? c[j0 + l] : 0.0;
            if (l < nl) nr[j0 + l] = 0;
        }
        for (int64_t i0 = 0; i0 < T; i0 += M2_SW_TMAX) {
            /* three loops over the tokens (up to M2_SW_TMAX at a time): the activation
             * (independent per token, so the long double-precision chains of consecutive
             * tokens overlap), the cumulated log decay with its segment restarts (the one
             * sequential part), the scales (independent again); the same operations per
             * element as one loop would do. Rows [i - i0][lane] in gg (gf), dd (float) and
             * la, cn (double). */
            const int64_t i1 = T - i0 < M2_SW_TMAX ? T : i0 + M2_SW_TMAX;
            for (int64_t i = i0; i < i1; i++) {
                const int64_t o = (i - i0) * M2V_LEN;
                float *gi = gg + o, *di = dd + o;
                const float *ri = rr;
                if (nl == M2V_LEN) {
                    ri = raw + i * ld + j0;
                } else {
                    for (int64_t l = 0; l < M2V_LEN; l++)
                        rr[l] = l < nl ? raw[i * ld + j0 + l] : 0.0f;
                }
                /* softplus in double (m2vd_softplus): its rounding in float would otherwise
                 * bias the decay gradients, whose sums over time (ddt_bias, dA) amplify any
                 * systematic error. gf: g where the activation, rounded to float, is
                 * inside [lo, hi] (ordered compares: 0 for a NaN), else 0. */
                for (int64_t k = 0; k < M2V_LEN; k += M2VD_LEN) {
                    m2vd g;
                    const m2vd v =
                        dt_act(m2vd_add(m2vd_load_ps(ri + k), m2vd_load_ps(bv + k)), softplus, &g);
                    float vf[M2VD_LEN];
                    m2vd_store_ps(vf, v);
                    const m2vd vd = m2vd_load_ps(vf), vlo = m2vd_set1(lo), vhi = m2vd_set1(hi);
                    m2vd_store_ps(di + k, dt_clamp(vd, vlo, vhi));
                    g = m2vd_select(m2vd_ge(vd, vlo), g, m2vd_set1(0.0));
                    m2vd_store_ps(gi + k, m2vd_select(m2vd_ge(vhi, vd), g, m2vd_set1(0.0)));
                    /* exact */
                    m2vd_store(la + o + k, m2vd_mul(m2vd_load_ps(di + k), m2vd_load(av + k)));
                }
            }
            for (int64_t i = i0; i < i1; i++) {
                const int64_t o = (i - i0) * M2V_LEN;
                const double *li = la + o;
                double *ci = cn + o;
                for (int64_t k = 0; k < M2V_LEN; k += M2VD_LEN)
                    m2vd_store(ci + k, m2vd_add(m2vd_load(cv + k), m2vd_load(li + k)));
                /* segment restarts (rare except on the first token; lanes past nl hold 0) */
                int any = i == 0 && seq_start;
                for (int64_t k = 0; k < M2V_LEN; k += M2VD_LEN)
                    any |= m2vd_any(m2vd_gt(m2vd_set1(M2_SEG_LOG_MIN), m2vd_load(ci + k)));
                if (any) {
                    for (int64_t l = 0; l < M2V_LEN; l++)
                        fa[l] = i == 0 && seq_start ? li[l] : ci[l];
                    for (int64_t k = 0; k < M2V_LEN; k += M2VD_LEN)
                        m2vd_store(fa + k, m2vd_exp(m2vd_load(fa + k)));
                    for (int64_t l = 0; l < nl; l++)
                        if ((i == 0 && seq_start) || ci[l] < M2_SEG_LOG_MIN) {
                            const int64_t j = j0 + l;
                            ridx[j * ldo + nr[j]] = (int32_t)i;
                            rf[j * ldo + nr[j]] = (float)fa[l];
                            nr[j]++;
                            ci[l] = 0.0;
                        }
                }
                for (int64_t k = 0; k < M2V_LEN; k += M2VD_LEN)
                    m2vd_store(cv + k, m2vd_load(ci + k));
            }
            for (int64_t i = i0; i < i1; i++) {
                const int64_t o = (i - i0) * M2V_LEN;
                const float *gi = gg + o, *di = dd + o;
                for (int64_t k = 0; k < M2V_LEN; k += M2VD_LEN) {
                    const m2vd ee = m2vd_exp(m2vd_load(cn + o + k));
                    m2vd_store_ps(ev + k, ee);
                    m2vd_store_ps(wv + k, m2vd_div(m2vd_load_ps(di + k), ee));
                }
                for (int64_t l = 0; l < nl; l++) {
                    const int64_t j = j0 + l;
                    d[j * ldo + i] = di[l];
                    E[j * ldo + i] = ev[l];
                    w[j * ldo + i] = wv[l];
                    if (gf) gf[j * ldo + i] = gi[l];
                }
            }
        }
        for (int64_t l = 0; l < nl; l++) c[j0 + l] = cv[l];
    }
}
