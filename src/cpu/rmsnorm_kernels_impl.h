/*
 * rmsnorm_kernels_impl.h — the gated RMSNorm kernel text, compiled once per instruction set.
 *
 * Included only by rmsnorm_kernels_<isa>.c after it defines M2_SIMD_<ISA> and M2_KSUFFIX;
 * defines rms_fwd_group<suffix> and rms_bwd_group<suffix> for the table in that file.
 *
 * Structure: a group is walked twice, forward and backward. Pass 1 reads the inputs once
 * from memory and takes the sums that need the whole group: Σ v² (for r) and, in the
 * backward, Σ v w dy, since c1 = Σ xhat w dy / n = r Σ v w dy / n needs no r in advance.
 * What pass 2 would otherwise recompute with an exp is kept: v = x silu(z) in `out`
 * (forward), silu(z) or dy and silu'(z) in per-thread scratch (backward). Pass 2 applies r
 * and writes every output. A group of a Mamba-2 row is at most a few thousand floats, so
 * pass 2 reads L1/L2: memory traffic is one read of every input and one write of every
 * output. The backward's pass 2 runs two rows at once, sharing the loads of w, b and the
 * read-modify-write of the dw, db partial sums (the op is at the FMA-port limit in cache, so
 * every saved load and store shows). Every loop has a vector body and a scalar tail; a sum
 * over n uses two vector accumulators (pairs of vectors), then one, then lanes, then the
 * tail: an order fixed by n.
 */
#ifndef M2_KSUFFIX
#error "define M2_KSUFFIX before including rmsnorm_kernels_impl.h"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/rmsnorm_kernels.h"
#include "cpu/simd.h"

#define M2R_CAT2(a, b) a##b
#define M2R_CAT(a, b) M2R_CAT2(a, b)
#define M2R(name) M2R_CAT(name, M2_KSUFFIX)

/* σ(s) = 1 / (1 + e^-s); +0 below the exp's clamp (cpu/simd.h, "Saturation") */
M2_INLINE m2v sigm_v(m2v s) {
    const m2v one = m2v_set1(1.0f);
    return m2v_exp_sat(s, M2_EXP_NEG_LIM, m2v_zero(),
                       m2v_div(one, m2v_add(one, m2v_exp(m2v_sub(m2v_zero(), s)))));
}
M2_INLINE float sigm_s(float s) { return 1.0f / (1.0f + expf(-s)); }

/* Σ x[i]²: two vector accumulators, then one, then lanes, then the scalar tail. */
M2_INLINE float sumsq(int64_t n, const float *x) {
    m2v s0 = m2v_zero(), s1 = m2v_zero();
    int64_t i = 0;
    for (; i + 2 * M2V_LEN <= n; i += 2 * M2V_LEN) {
        const m2v a = m2v_load(x + i), b = m2v_load(x + i + M2V_LEN);
        s0 = m2v_fma(a, a, s0);
        s1 = m2v_fma(b, b, s1);
    }
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        const m2v a = m2v_load(x + i);
        s0 = m2v_fma(a, a, s0);
    }
    float s = m2v_reduce(m2v_add(s0, s1));
    for (; i < n; i++) s += x[i] * x[i];
    return s;
}

/* 1 / sqrt(ss / n + eps), rounded once to float */
M2_INLINE float rstd_of(float ss, int64_t n, double eps) {
    return (float)(1.0 / sqrt((double)ss / (double)n + eps));
}
M2_INLINE float rstd_of_d(double ss, int64_t n, double eps) {
    return (float)(1.0 / sqrt(ss / (double)n + eps));
}

/* Σ v² in double, v = x (s == NULL) or the float product x s: the fallback for a group whose
 * float32 sum overflowed (|v| beyond about 1.8e19; SPEC §9), so such a group keeps its
 * finite result. Groups whose float sum is finite keep the bits of the float sum. */
static double sumsq_d(int64_t n, const float *x, const float *s) {
    double a = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double v = s ? (double)(x[i] * s[i]) : (double)x[i];
        a += v * v;
    }
    return a;
}

/* ---- forward ------------------------------------------------------------------------ */

/* v = x silu(z) into v; returns Σ v² (same order as sumsq) */
M2_INLINE float gate_mul_sumsq(int64_t n, const float *x, const float *z, float *v) {
    m2v s0 = m2v_zero(), s1 = m2v_zero();
    int64_t i = 0;
    for (; i + 2 * M2V_LEN <= n; i += 2 * M2V_LEN) {
        const m2v za = m2v_load(z + i), zb = m2v_load(z + i + M2V_LEN);
        const m2v a = m2v_mul(m2v_load(x + i), m2v_mul(za, sigm_v(za)));
        const m2v b = m2v_mul(m2v_load(x + i + M2V_LEN), m2v_mul(zb, sigm_v(zb)));
        m2v_store(v + i, a);
        m2v_store(v + i + M2V_LEN, b);
        s0 = m2v_fma(a, a, s0);
        s1 = m2v_fma(b, b, s1);
    }
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        const m2v za = m2v_load(z + i);
        const m2v a = m2v_mul(m2v_load(x + i), m2v_mul(za, sigm_v(za)));
        m2v_store(v + i, a);
        s0 = m2v_fma(a, a, s0);
    }
    float s = m2v_reduce(m2v_add(s0, s1));
    for (; i < n; i++) {
        v[i] = x[i] * (z[i] * sigm_s(z[i]));
        s += v[i] * v[i];
    }
    return s;
}

/* out = v r w (+ b) (* silu(z)); has_b and has_z are constants at each call site, so the
 * compiler emits one loop per combination. */
M2_INLINE void norm_out(int64_t n, float r, const float *v, const float *w, const float *b,
                        const float *z, float *out, const int has_b, const int has_z) {
    const m2v rv = m2v_set1(r);
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        m2v y = m2v_mul(m2v_mul(m2v_load(v + i), rv), m2v_load(w + i));
        if (has_b) y = m2v_add(y, m2v_load(b + i));
        if (has_z) {
            const m2v zz = m2v_load(z + i);
            y = m2v_mul(y, m2v_mul(zz, sigm_v(zz)));
        }
        m2v_store(out + i, y);
    }
    for (; i < n; i++) {
        float y = v[i] * r * w[i];
        if (has_b) y += b[i];
        if (has_z) y *= z[i] * sigm_s(z[i]);
        out[i] = y;
    }
}

static float M2R(rms_fwd_group)(int64_t n, double eps, int nbg, const float *x, const float *z,
                                const float *w, const float *b, float *out) {
    const float *v = x;
    float ss;
    if (z && !nbg) {
        ss = gate_mul_sumsq(n, x, z, out); /* out holds v until pass 2 overwrites it in place */
        v = out;
    } else {
        ss = sumsq(n, x);
    }
    const float r = isinf(ss) ? rstd_of_d(sumsq_d(n, v, NULL), n, eps) : rstd_of(ss, n, eps);
    const float *zafter = (z && nbg) ? z : NULL;
    if (b) {
        if (zafter) norm_out(n, r, v, w, b, zafter, out, 1, 1);
        else norm_out(n, r, v, w, b, NULL, out, 1, 0);
    } else {
        if (zafter) norm_out(n, r, v, w, NULL, zafter, out, 0, 1);
        else norm_out(n, r, v, w, NULL, NULL, out, 0, 0);
    }
    return r;
}

/* ---- backward ----------------------------------------------------------------------- */

/* The backward's modes: where the gate sits. */
enum { GATE_NONE = 0, GATE_FIRST = 1, GATE_AFTER = 2 };

/*
 * Pass 1, one vector of one row: with
 *   GATE_NONE:  v = x,          dy = dout
 *   GATE_FIRST: v = x silu(z),  dy = dout;          stores silu(z) to s0, silu'(z) to s1
 *   GATE_AFTER: v = x,          dy = dout silu(z);  stores dy to s0,      silu'(z) to s1
 * (silu(z) = z σ(z), silu'(z) = σ(z) (1 + z (1 - σ(z)))) adds v² to *q and v w dy to *d.
 */
M2_INLINE void p1_vec(int64_t j, const float *x, const float *z, const float *w,
                      const float *dout, float *s0, float *s1, m2v *q, m2v *d, const int mode) {
    const m2v one = m2v_set1(1.0f);
    m2v v = m2v_load(x + j), g = m2v_load(dout + j);
    if (mode != GATE_NONE) {
        const m2v zz = m2v_load(z + j), s = sigm_v(zz), sl = m2v_mul(zz, s);
        m2v_store(s1 + j, m2v_mul(s, m2v_fma(zz, m2v_sub(one, s), one)));
        if (mode == GATE_FIRST) {
            v = m2v_mul(v, sl);
            m2v_store(s0 + j, sl);
        } else {
            g = m2v_mul(g, sl);
            m2v_store(s0 + j, g);
        }
    }
    *q = m2v_fma(v, v, *q);
    *d = m2v_fma(m2v_mul(v, m2v_load(w + j)), g, *d);
}

/* p1_vec for one element (the scalar tail) */
M2_INLINE void p1_one(int64_t j, const float *x, const float *z, const float *w,
                      const float *dout, float *s0, float *s1, float *q, float *d, const int mode) {
    float v = x[j], g = dout[j];
    if (mode != GATE_NONE) {
        const float s = sigm_s(z[j]), sl = z[j] * s;
        s1[j] = s * (z[j] * (1.0f - s) + 1.0f);
        if (mode == GATE_FIRST) {
            v = v * sl;
            s0[j] = sl;
        } else {
            g = g * sl;
            s0[j] = g;
        }
    }
    *q += v * v;
    *d += (v * w[j]) * g;
}

/* Pass 1 over one row: Σ v² into *ss, Σ v w dy into *svd. Two accumulators (even and odd
 * vectors of each pair), then one, then lanes, then the scalar tail: an order fixed by n. */
M2_INLINE void bwd_pass1(int64_t n, const float *x, const float *z, const float *w,
                         const float *dout, float *s0, float *s1, float *ss, float *svd,
                         const int mode) {
    m2v q0 = m2v_zero(), q1 = m2v_zero(), d0 = m2v_zero(), d1 = m2v_zero();
    int64_t i = 0;
    for (; i + 2 * M2V_LEN <= n; i += 2 * M2V_LEN) {
        p1_vec(i, x, z, w, dout, s0, s1, &q0, &d0, mode);
        p1_vec(i + M2V_LEN, x, z, w, dout, s0, s1, &q1, &d1, mode);
    }
    for (; i + M2V_LEN <= n; i += M2V_LEN) p1_vec(i, x, z, w, dout, s0, s1, &q0, &d0, mode);
    float a = m2v_reduce(m2v_add(q0, q1)), c = m2v_reduce(m2v_add(d0, d1));
    for (; i < n; i++) p1_one(i, x, z, w, dout, s0, s1, &a, &c, mode);
    *ss = a;
    *svd = c;
}

/* One row of pass 2: its pointers, its scratch rows s0, s1 and its constants r, c1. */
typedef struct bwd_rowc {
    const m2_rms_row *R;
    const float *s0, *s1;
    float r, c1;
} bwd_rowc;

/*
 * Pass 2, one vector of one row. With xh = v r and dv = (w dy - xh c1) r:
 *   GATE_NONE:  v = x, dy = dout:              dx = dv
 *   GATE_FIRST: v = x silu(z), dy = dout:      dx = dv silu(z),  dz = dv x silu'(z)
 *   GATE_AFTER: v = x, dy = dout silu(z):      dx = dv,          dz = dout (xh w + b) silu'(z)
 * and the row's dw, db terms are added to the accumulators: gw += dy xh, gb += dy.
 */
M2_INLINE void p2_vec(int64_t j, const bwd_rowc *k, m2v wv, m2v bv, m2v *gw, m2v *gb,
                      const int mode) {
    const m2_rms_row *R = k->R;
    const m2v r = m2v_set1(k->r), c1 = m2v_set1(k->c1);
    const m2v xv = m2v_load(R->x + j);
    m2v v = xv, dy, sl = m2v_zero();
    if (mode == GATE_FIRST) {
        sl = m2v_load(k->s0 + j);
        v = m2v_mul(xv, sl);
    }
    dy = mode == GATE_AFTER ? m2v_load(k->s0 + j) : m2v_load(R->dout + j);
    const m2v xh = m2v_mul(v, r);
    *gw = m2v_fma(dy, xh, *gw);
    *gb = m2v_add(*gb, dy);
    const m2v dv = m2v_mul(m2v_sub(m2v_mul(wv, dy), m2v_mul(xh, c1)), r);
    if (mode == GATE_FIRST) {
        if (R->dx) m2v_store(R->dx + j, m2v_mul(dv, sl));
        if (R->dz) m2v_store(R->dz + j, m2v_mul(m2v_mul(dv, xv), m2v_load(k->s1 + j)));
    } else {
        if (R->dx) m2v_store(R->dx + j, dv);
        if (mode == GATE_AFTER && R->dz) {
            const m2v y = m2v_add(m2v_mul(xh, wv), bv);
            m2v_store(R->dz + j, m2v_mul(m2v_mul(m2v_load(R->dout + j), y), m2v_load(k->s1 + j)));
        }
    }
}

/* p2_vec for one element (the scalar tail); dv_in, when given, replaces its dv */
M2_INLINE void p2_one(int64_t j, const bwd_rowc *k, float wv, float bv, float *gw, float *gb,
                      const float *dv_in, const int mode) {
    const m2_rms_row *R = k->R;
    const float xv = R->x[j];
    float v = xv, sl = 0.0f;
    if (mode == GATE_FIRST) {
        sl = k->s0[j];
        v = xv * sl;
    }
    const float dy = mode == GATE_AFTER ? k->s0[j] : R->dout[j];
    const float xh = v * k->r;
    *gw = dy * xh + *gw;
    *gb = *gb + dy;
    const float dv = dv_in ? *dv_in : (wv * dy - xh * k->c1) * k->r;
    if (mode == GATE_FIRST) {
        if (R->dx) R->dx[j] = dv * sl;
        if (R->dz) R->dz[j] = (dv * xv) * k->s1[j];
    } else {
        if (R->dx) R->dx[j] = dv;
        if (mode == GATE_AFTER && R->dz) R->dz[j] = (R->dout[j] * (xh * wv + bv)) * k->s1[j];
    }
}

/* Pass 2 over NR rows (1 or 2) sharing the loads of w, b and the update of dw, db; row 0's
 * terms are added before row 1's, as two single-row calls in row order would add them. */
M2_INLINE void bwd_pass2(int64_t n, const bwd_rowc *k, const float *w, const float *b, float *dw,
                         float *db, const int NR, const int mode) {
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        const m2v wv = m2v_load(w + i);
        const m2v bv = b ? m2v_load(b + i) : m2v_zero();
        m2v gw = dw ? m2v_load(dw + i) : m2v_zero();
        m2v gb = db ? m2v_load(db + i) : m2v_zero();
        for (int q = 0; q < NR; q++) p2_vec(i, &k[q], wv, bv, &gw, &gb, mode);
        if (dw) m2v_store(dw + i, gw);
        if (db) m2v_store(db + i, gb);
    }
    for (; i < n; i++) {
        const float wv = w[i], bv = b ? b[i] : 0.0f;
        float gw = dw ? dw[i] : 0.0f, gb = db ? db[i] : 0.0f;
        for (int q = 0; q < NR; q++) p2_one(i, &k[q], wv, bv, &gw, &gb, NULL, mode);
        if (dw) dw[i] = gw;
        if (db) db[i] = gb;
    }
}

/*
 * Groups of at most M2_RMS_SMALL channels: dv = (u - xh c1) r with u = w dy cancels there
 * (for n = 1 it is u r (1 - xh²), and 1 - xh² = eps r² is far below float32's rounding of
 * xh²), so dv takes the form with no cancelling terms, from 1 = mean(xh²) + eps r²:
 *   dv_k = r (eps r² u_k + Σ_{j != k} xh_j (xh_j u_k - xh_k u_j) / n)
 * dv[q][i] for row q; the rest of pass 2 (dx, dz, dw, db) is bwd_pass2's scalar tail.
 */
#define M2_RMS_SMALL 4

M2_INLINE void small_dv(int64_t n, double eps, const bwd_rowc *k, const float *w, float *dv,
                        const int mode) {
    const m2_rms_row *R = k->R;
    float xh[M2_RMS_SMALL], u[M2_RMS_SMALL];
    for (int64_t i = 0; i < n; i++) {
        const float v = mode == GATE_FIRST ? R->x[i] * k->s0[i] : R->x[i];
        const float dy = mode == GATE_AFTER ? k->s0[i] : R->dout[i];
        xh[i] = v * k->r;
        u[i] = w[i] * dy;
    }
    const float er2 = (float)(eps * (double)k->r * (double)k->r);
    for (int64_t i = 0; i < n; i++) {
        float t = 0.0f;
        for (int64_t j = 0; j < n; j++)
            if (j != i) t += xh[j] * (xh[j] * u[i] - xh[i] * u[j]);
        dv[i] = (er2 * u[i] + t / (float)n) * k->r;
    }
}

/* bwd_pass2 for n <= M2_RMS_SMALL: its scalar tail, with dv from small_dv */
M2_INLINE void bwd_pass2_small(int64_t n, double eps, const bwd_rowc *k, const float *w,
                               const float *b, float *dw, float *db, const int NR,
                               const int mode) {
    float dv[2][M2_RMS_SMALL];
    for (int q = 0; q < NR; q++) small_dv(n, eps, &k[q], w, dv[q], mode);
    for (int64_t i = 0; i < n; i++) {
        const float wv = w[i], bv = b ? b[i] : 0.0f;
        float gw = dw ? dw[i] : 0.0f, gb = db ? db[i] : 0.0f;
        for (int q = 0; q < NR; q++) p2_one(i, &k[q], wv, bv, &gw, &gb, &dv[q][i], mode);
        if (dw) dw[i] = gw;
        if (db) db[i] = gb;
    }
}

M2_INLINE void bwd_mode(int64_t n, double eps, int nrows, const m2_rms_row *rows, const float *w,
                        const float *b, float *dw, float *db, const int mode) {
    bwd_rowc k[2];
    for (int q = 0; q < nrows; q++) {
        const m2_rms_row *R = &rows[q];
        float ss, svd;
        k[q].R = R;
        k[q].s0 = R->scr;
        k[q].s1 = R->scr + n;
        bwd_pass1(n, R->x, R->z, w, R->dout, R->scr, R->scr + n, &ss, &svd, mode);
        if (isinf(ss) || isinf(svd)) {
            /* a float sum overflowed: both in double (the forward's fallback) */
            const float *vs = mode == GATE_FIRST ? R->scr : NULL;
            const float *g = mode == GATE_AFTER ? R->scr : R->dout;
            double a = 0.0;
            for (int64_t i = 0; i < n; i++)
                a += (vs ? (double)(R->x[i] * vs[i]) : (double)R->x[i]) * (double)w[i] * g[i];
            k[q].r = R->r_in ? *R->r_in : rstd_of_d(sumsq_d(n, R->x, vs), n, eps);
            k[q].c1 = (float)((double)k[q].r * a / (double)n);
        } else {
            k[q].r = R->r_in ? *R->r_in : rstd_of(ss, n, eps);
            k[q].c1 = k[q].r * svd / (float)n; /* Σ xh w dy / n */
        }
    }
    if (n <= M2_RMS_SMALL)
        bwd_pass2_small(n, eps, k, w, b, dw, db, nrows, mode);
    else if (nrows == 2)
        bwd_pass2(n, k, w, b, dw, db, 2, mode);
    else
        bwd_pass2(n, k, w, b, dw, db, 1, mode);
}

static void M2R(rms_bwd_group)(int64_t n, double eps, int nbg, int nrows, const m2_rms_row *rows,
                               const float *w, const float *b, float *dw, float *db) {
    if (!rows[0].z)
        bwd_mode(n, eps, nrows, rows, w, b, dw, db, GATE_NONE);
    else if (!nbg)
        bwd_mode(n, eps, nrows, rows, w, b, dw, db, GATE_FIRST);
    else
        bwd_mode(n, eps, nrows, rows, w, b, dw, db, GATE_AFTER);
}
