/*
 * rmsnorm_kernels_impl.h — the gated RMSNorm kernel text, compiled once per instruction set.
 *
 * Included only by rmsnorm_kernels_<isa>.c after it defines M2_SIMD_<ISA> and M2_KSUFFIX;
 * defines rms_fwd_group<suffix> and rms_bwd_group<suffix> for the table in that file.
 *
 * Structure: a group is walked twice, forward and backward. Pass 1 reads the inputs once
 * from memory and takes the sums that need the whole group: Σ v² (for r) and, in the
 * backward, Σ v w dy, since c1 = Σ xhat w dy / n = r Σ v w dy / n needs no r in advance.
 * Values pass 2 would recompute with an exp (v = x silu(z), σ(z), dy) are kept in `out` or
 * in per-thread scratch. Pass 2 applies r and writes every output. A group of a Mamba-2 row
 * is at most a few thousand floats, so pass 2 reads L1/L2: memory traffic is one read of
 * every input and one write of every output. Every loop has a vector body and a scalar
 * tail; a sum over n uses two vector accumulators (pairs of vectors), then one, then lanes,
 * then the tail: an order fixed by n.
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

/* σ(s) = 1 / (1 + e^-s) */
M2_INLINE m2v sigm_v(m2v s) {
    const m2v one = m2v_set1(1.0f);
    return m2v_div(one, m2v_add(one, m2v_exp(m2v_sub(m2v_zero(), s))));
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
    const float r = rstd_of(ss, n, eps);
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
 * Pass 1: Σ v² into *ss and Σ v w dy into *svd, where
 *   GATE_NONE:  v = x, dy = dout;
 *   GATE_FIRST: v = x silu(z) (stored to sv), dy = dout; σ(z) stored to sg;
 *   GATE_AFTER: v = x, dy = dout silu(z) (stored to sv); σ(z) stored to sg.
 */
M2_INLINE void bwd_pass1(int64_t n, const float *x, const float *z, const float *w,
                         const float *dout, float *sv, float *sg, float *ss, float *svd,
                         const int mode) {
    m2v q0 = m2v_zero(), q1 = m2v_zero(), d0 = m2v_zero(), d1 = m2v_zero();
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        m2v v = m2v_load(x + i), g = m2v_load(dout + i);
        if (mode != GATE_NONE) {
            const m2v zz = m2v_load(z + i), s = sigm_v(zz), sl = m2v_mul(zz, s);
            m2v_store(sg + i, s);
            if (mode == GATE_FIRST) {
                v = m2v_mul(v, sl);
                m2v_store(sv + i, v);
            } else {
                g = m2v_mul(g, sl);
                m2v_store(sv + i, g);
            }
        }
        /* two accumulators, alternating by vector index: order fixed by n */
        if (((i / M2V_LEN) & 1) == 0) {
            q0 = m2v_fma(v, v, q0);
            d0 = m2v_fma(m2v_mul(v, m2v_load(w + i)), g, d0);
        } else {
            q1 = m2v_fma(v, v, q1);
            d1 = m2v_fma(m2v_mul(v, m2v_load(w + i)), g, d1);
        }
    }
    float a = m2v_reduce(m2v_add(q0, q1)), c = m2v_reduce(m2v_add(d0, d1));
    for (; i < n; i++) {
        float v = x[i], g = dout[i];
        if (mode != GATE_NONE) {
            const float s = sigm_s(z[i]), sl = z[i] * s;
            sg[i] = s;
            if (mode == GATE_FIRST) {
                v = v * sl;
                sv[i] = v;
            } else {
                g = g * sl;
                sv[i] = g;
            }
        }
        a += v * v;
        c += (v * w[i]) * g;
    }
    *ss = a;
    *svd = c;
}

/*
 * Pass 2, with xh = v r, dv = (w dy - xh c1) r, silu'(z) = σ (1 + z (1 - σ)):
 *   dw += dy xh, db += dy (each when non-NULL);
 *   GATE_NONE:  dx = dv;
 *   GATE_FIRST: dx = dv silu(z), dz = dv x silu'(z);
 *   GATE_AFTER: dx = dv, dz = dout (xh w + b) silu'(z).
 * v and dy are x or sv, dout or sv, as pass 1 left them.
 */
M2_INLINE void bwd_pass2(int64_t n, float r, float c1, const float *x, const float *z,
                         const float *w, const float *b, const float *dout, const float *sv,
                         const float *sg, float *dx, float *dz, float *dw, float *db,
                         const int mode) {
    const float *vp = mode == GATE_FIRST ? sv : x;
    const float *dyp = mode == GATE_AFTER ? sv : dout;
    const m2v rv = m2v_set1(r), cv = m2v_set1(c1), one = m2v_set1(1.0f);
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        const m2v xh = m2v_mul(m2v_load(vp + i), rv), dy = m2v_load(dyp + i), wv = m2v_load(w + i);
        if (dw) m2v_store(dw + i, m2v_fma(dy, xh, m2v_load(dw + i)));
        if (db) m2v_store(db + i, m2v_add(m2v_load(db + i), dy));
        const m2v dv = m2v_mul(m2v_sub(m2v_mul(wv, dy), m2v_mul(xh, cv)), rv);
        if (mode == GATE_NONE) {
            if (dx) m2v_store(dx + i, dv);
        } else {
            const m2v zz = m2v_load(z + i), s = m2v_load(sg + i);
            const m2v ds = m2v_mul(s, m2v_fma(zz, m2v_sub(one, s), one));
            if (mode == GATE_FIRST) {
                if (dx) m2v_store(dx + i, m2v_mul(dv, m2v_mul(zz, s)));
                if (dz) m2v_store(dz + i, m2v_mul(m2v_mul(dv, m2v_load(x + i)), ds));
            } else {
                if (dx) m2v_store(dx + i, dv);
                if (dz) {
                    m2v y = m2v_mul(xh, wv);
                    if (b) y = m2v_add(y, m2v_load(b + i));
                    m2v_store(dz + i, m2v_mul(m2v_mul(m2v_load(dout + i), y), ds));
                }
            }
        }
    }
    for (; i < n; i++) {
        const float xh = vp[i] * r, dy = dyp[i];
        if (dw) dw[i] = dy * xh + dw[i];
        if (db) db[i] = db[i] + dy;
        const float dv = (w[i] * dy - xh * c1) * r;
        if (mode == GATE_NONE) {
            if (dx) dx[i] = dv;
        } else {
            const float s = sg[i], ds = s * (z[i] * (1.0f - s) + 1.0f);
            if (mode == GATE_FIRST) {
                if (dx) dx[i] = dv * (z[i] * s);
                if (dz) dz[i] = (dv * x[i]) * ds;
            } else {
                if (dx) dx[i] = dv;
                if (dz) {
                    float y = xh * w[i];
                    if (b) y += b[i];
                    dz[i] = (dout[i] * y) * ds;
                }
            }
        }
    }
}

M2_INLINE void bwd_mode(int64_t n, double eps, const float *r_in, const float *x, const float *z,
                        const float *w, const float *b, const float *dout, float *dx, float *dz,
                        float *dw, float *db, float *scr, const int mode) {
    float ss, svd;
    float *sv = scr, *sg = scr + n;
    bwd_pass1(n, x, z, w, dout, sv, sg, &ss, &svd, mode);
    const float r = r_in ? *r_in : rstd_of(ss, n, eps);
    const float c1 = r * svd / (float)n; /* Σ xh w dy / n */
    bwd_pass2(n, r, c1, x, z, w, b, dout, sv, sg, dx, dz, dw, db, mode);
}

static void M2R(rms_bwd_group)(int64_t n, double eps, int nbg, const float *r_in, const float *x,
                               const float *z, const float *w, const float *b, const float *dout,
                               float *dx, float *dz, float *dw, float *db, float *scr) {
    if (!z)
        bwd_mode(n, eps, r_in, x, NULL, w, b, dout, dx, NULL, dw, db, scr, GATE_NONE);
    else if (!nbg)
        bwd_mode(n, eps, r_in, x, z, w, b, dout, dx, dz, dw, db, scr, GATE_FIRST);
    else
        bwd_mode(n, eps, r_in, x, z, w, b, dout, dx, dz, dw, db, scr, GATE_AFTER);
}
