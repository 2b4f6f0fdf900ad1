/*
 * ssd_kernels_impl.h — the SSD kernel text, compiled once per instruction set.
 *
 * Included only by ssd_kernels_<isa>.c, after cpu/simd.h has mapped m2v_* onto that ISA and
 * M2_KSUFFIX names it (e.g. __avx2). It defines static kernels named <kernel><M2_KSUFFIX>;
 * the .c file puts them in its m2_cpu_kernels table.
 *
 * Structure (why it looks like this):
 *  - The state recurrence is tiled 4 rows of P at a time with the token loop inside the
 *    tile (fwd_tile4): a 4 x N tile (2 KiB at N = 128) stays in L1 for a whole block of
 *    tokens while B_t and C_t (shared by the 4 rows, loaded once per vector) stream past.
 *  - The backward (bwd_block) works on the same tiles: the rows of S and of G evolve
 *    independently, so per tile it recomputes the block's states from the checkpoint into
 *    an L1-sized buffer and runs the reverse recurrence (rev_tile4) right after; only the
 *    sums over p (dBm, dCm, the decay gradient) combine tiles, in p order.
 *  - A near-peak kernel (register tile, rescaled state, or the chunked GEMM form) can
 *    replace fwd_block / bwd_block without touching the planner in ssd_cpu.c.
 *  - N is the vector dimension: rows of the state, B_t and C_t are contiguous over N. Every
 *    loop over N has a vector body and a scalar tail (N = 5 runs the tail only); rows of P
 *    left over from the 4-row tiles go through a 1-row version of the same loop.
 *  - Dot products over N keep one accumulator per row and reduce it once per token
 *    (m2v_reduce4), so every reduction has one fixed order: the tiling depends only on P.
 */
#ifndef M2_KSUFFIX
#error "define M2_KSUFFIX before including ssd_kernels_impl.h"
#endif

#include <stddef.h>
#include <stdint.h>

#include "cpu/kernels.h"
#include "cpu/simd.h"

#define M2_CAT2(a, b) a##b
#define M2_CAT(a, b) M2_CAT2(a, b)
#define M2K(name) M2_CAT(name, M2_KSUFFIX)

/* ---- forward recurrence: one tile of rows over a block of tokens -------------------- */

/* 4 state rows (row stride N) over T tokens:
 *   S_t = a[t] S_{t-1} + xd_t ⊗ B_t,   y[t*ldy + r] = S_t[r,:] · C_t (when want_y)
 * S_{-1} rows are S0 + r*N; S_t rows are written to So + t*st + r*N (st = 0 with So == S0:
 * in place). xd and y point at the tile's first column. want_y is a compile-time constant
 * at every call site, so the compiler emits one loop with the C_t dot product and one
 * without (the backward's checkpoint pass needs no y). */
M2_INLINE void fwd_tile4(int64_t T, int64_t N, const float *a, const float *xd, int64_t ldx,
                         const float *Bp, const float *Cp, const float *S0, float *So, int64_t st,
                         float *y, int64_t ldy, const int want_y) {
    for (int64_t t = 0; t < T; t++) {
        const float *b = Bp + t * N;
        const float *c = want_y ? Cp + t * N : NULL;
        /* in place the previous and the new rows are the same memory, so each iteration
         * loads all four rows before it stores any */
        const float *s = t == 0 ? S0 : So + (t - 1) * st;
        float *o = So + t * st;
        const float *xt = xd + t * ldx;
        const float as = a[t], x0 = xt[0], x1 = xt[1], x2 = xt[2], x3 = xt[3];
        const m2v va = m2v_set1(as);
        const m2v vx0 = m2v_set1(x0), vx1 = m2v_set1(x1), vx2 = m2v_set1(x2), vx3 = m2v_set1(x3);
        m2v y0 = m2v_zero(), y1 = m2v_zero(), y2 = m2v_zero(), y3 = m2v_zero();
        int64_t n = 0;
        for (; n + M2V_LEN <= N; n += M2V_LEN) {
            const m2v vb = m2v_load(b + n);
            const m2v v0 = m2v_fma(vx0, vb, m2v_mul(va, m2v_load(s + n)));
            const m2v v1 = m2v_fma(vx1, vb, m2v_mul(va, m2v_load(s + N + n)));
            const m2v v2 = m2v_fma(vx2, vb, m2v_mul(va, m2v_load(s + 2 * N + n)));
            const m2v v3 = m2v_fma(vx3, vb, m2v_mul(va, m2v_load(s + 3 * N + n)));
            m2v_store(o + n, v0);
            m2v_store(o + N + n, v1);
            m2v_store(o + 2 * N + n, v2);
            m2v_store(o + 3 * N + n, v3);
            if (want_y) {
                const m2v vc = m2v_load(c + n);
                y0 = m2v_fma(v0, vc, y0);
                y1 = m2v_fma(v1, vc, y1);
                y2 = m2v_fma(v2, vc, y2);
                y3 = m2v_fma(v3, vc, y3);
            }
        }
        float ys[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (want_y) m2v_reduce4(y0, y1, y2, y3, ys);
        for (; n < N; n++) { /* scalar tail of N */
            const float bn = b[n];
            const float v0 = x0 * bn + as * s[n];
            const float v1 = x1 * bn + as * s[N + n];
            const float v2 = x2 * bn + as * s[2 * N + n];
            const float v3 = x3 * bn + as * s[3 * N + n];
            o[n] = v0;
            o[N + n] = v1;
            o[2 * N + n] = v2;
            o[3 * N + n] = v3;
            if (want_y) {
                const float cn = c[n];
                ys[0] += v0 * cn;
                ys[1] += v1 * cn;
                ys[2] += v2 * cn;
                ys[3] += v3 * cn;
            }
        }
        if (want_y) {
            float *yt = y + t * ldy;
            yt[0] = ys[0];
            yt[1] = ys[1];
            yt[2] = ys[2];
            yt[3] = ys[3];
        }
    }
}

/* The same for one row (rows of P left over from the 4-row tiles). */
M2_INLINE void fwd_tile1(int64_t T, int64_t N, const float *a, const float *xd, int64_t ldx,
                         const float *Bp, const float *Cp, const float *S0, float *So, int64_t st,
                         float *y, int64_t ldy, const int want_y) {
    for (int64_t t = 0; t < T; t++) {
        const float *b = Bp + t * N;
        const float *c = want_y ? Cp + t * N : NULL;
        const float *s = t == 0 ? S0 : So + (t - 1) * st;
        float *o = So + t * st;
        const float as = a[t], x0 = xd[t * ldx];
        const m2v va = m2v_set1(as), vx0 = m2v_set1(x0);
        m2v y0 = m2v_zero();
        int64_t n = 0;
        for (; n + M2V_LEN <= N; n += M2V_LEN) {
            const m2v v0 = m2v_fma(vx0, m2v_load(b + n), m2v_mul(va, m2v_load(s + n)));
            m2v_store(o + n, v0);
            if (want_y) y0 = m2v_fma(v0, m2v_load(c + n), y0);
        }
        float ys = want_y ? m2v_reduce(y0) : 0.0f;
        for (; n < N; n++) {
            const float v0 = x0 * b[n] + as * s[n];
            o[n] = v0;
            if (want_y) ys += v0 * c[n];
        }
        if (want_y) y[t * ldy] = ys;
    }
}

M2_INLINE void fwd_block_impl(int64_t T, int64_t P, int64_t N, const float *a, const float *xd,
                              const float *Bp, const float *Cp, const float *S0, float *Sout,
                              int64_t st, float *y, const int want_y) {
    int64_t p = 0;
    for (; p + 4 <= P; p += 4)
        fwd_tile4(T, N, a, xd + p, P, Bp, Cp, S0 + p * N, Sout + p * N, st, want_y ? y + p : NULL,
                  P, want_y);
    for (; p < P; p++)
        fwd_tile1(T, N, a, xd + p, P, Bp, Cp, S0 + p * N, Sout + p * N, st, want_y ? y + p : NULL,
                  P, want_y);
}

static void M2K(fwd_block_4xN)(int64_t T, int64_t P, int64_t N, const float *a, const float *xd,
                               const float *Bp, const float *Cp, const float *S0, float *Sout,
                               int64_t st, float *y) {
    if (y)
        fwd_block_impl(T, P, N, a, xd, Bp, Cp, S0, Sout, st, y, 1);
    else
        fwd_block_impl(T, P, N, a, xd, Bp, NULL, S0, Sout, st, NULL, 0);
}

/* ---- reverse recurrence: one tile of rows over a block of tokens, t = T-1 .. 0 -------- */

/* 4 rows of G (row stride N), given the tile's S_t rows at Ss + t*sst + r*N and S_{-1} rows
 * at S0 + r*N. x, dy, gb point at the tile's first column. */
M2_INLINE void rev_tile4(int64_t T, int64_t N, const float *a, float a_after, const float *x,
                         int64_t ldx, const float *dy, int64_t lddy, const float *Bp,
                         const float *Cp, const float *S0, const float *Ss, int64_t sst, float *g,
                         float *gb, int64_t ldgb, float *dBacc, float *dCacc, float *dec) {
    for (int64_t t = T - 1; t >= 0; t--) {
        const float *b = Bp + t * N, *c = Cp + t * N;
        const float *s = Ss + t * sst;                        /* S_t rows     */
        const float *sp = t > 0 ? Ss + (t - 1) * sst : S0;    /* S_{t-1} rows */
        float *dbt = dBacc + t * N, *dct = dCacc + t * N;
        const float *xt = x + t * ldx, *dyt = dy + t * lddy;
        const float an = t == T - 1 ? a_after : a[t + 1];
        const float x0 = xt[0], x1 = xt[1], x2 = xt[2], x3 = xt[3];
        const float e0 = dyt[0], e1 = dyt[1], e2 = dyt[2], e3 = dyt[3];
        const m2v van = m2v_set1(an);
        const m2v vx0 = m2v_set1(x0), vx1 = m2v_set1(x1), vx2 = m2v_set1(x2), vx3 = m2v_set1(x3);
        const m2v ve0 = m2v_set1(e0), ve1 = m2v_set1(e1), ve2 = m2v_set1(e2), ve3 = m2v_set1(e3);
        /* per-row accumulators: G·B for gb, G∘S_{t-1} for dec (four independent chains
         * rather than one, which would serialize on the FMA latency) */
        m2v gb0 = m2v_zero(), gb1 = m2v_zero(), gb2 = m2v_zero(), gb3 = m2v_zero();
        m2v de0 = m2v_zero(), de1 = m2v_zero(), de2 = m2v_zero(), de3 = m2v_zero();
        int64_t n = 0;
        for (; n + M2V_LEN <= N; n += M2V_LEN) {
            const m2v vb = m2v_load(b + n), vc = m2v_load(c + n);
            const m2v g0 = m2v_fma(ve0, vc, m2v_mul(van, m2v_load(g + n)));
            const m2v g1 = m2v_fma(ve1, vc, m2v_mul(van, m2v_load(g + N + n)));
            const m2v g2 = m2v_fma(ve2, vc, m2v_mul(van, m2v_load(g + 2 * N + n)));
            const m2v g3 = m2v_fma(ve3, vc, m2v_mul(van, m2v_load(g + 3 * N + n)));
            m2v_store(g + n, g0);
            m2v_store(g + N + n, g1);
            m2v_store(g + 2 * N + n, g2);
            m2v_store(g + 3 * N + n, g3);
            gb0 = m2v_fma(g0, vb, gb0);
            gb1 = m2v_fma(g1, vb, gb1);
            gb2 = m2v_fma(g2, vb, gb2);
            gb3 = m2v_fma(g3, vb, gb3);
            de0 = m2v_fma(g0, m2v_load(sp + n), de0);
            de1 = m2v_fma(g1, m2v_load(sp + N + n), de1);
            de2 = m2v_fma(g2, m2v_load(sp + 2 * N + n), de2);
            de3 = m2v_fma(g3, m2v_load(sp + 3 * N + n), de3);
            m2v vdb = m2v_load(dbt + n);
            vdb = m2v_fma(g0, vx0, vdb);
            vdb = m2v_fma(g1, vx1, vdb);
            vdb = m2v_fma(g2, vx2, vdb);
            vdb = m2v_fma(g3, vx3, vdb);
            m2v_store(dbt + n, vdb);
            m2v vdc = m2v_load(dct + n);
            vdc = m2v_fma(m2v_load(s + n), ve0, vdc);
            vdc = m2v_fma(m2v_load(s + N + n), ve1, vdc);
            vdc = m2v_fma(m2v_load(s + 2 * N + n), ve2, vdc);
            vdc = m2v_fma(m2v_load(s + 3 * N + n), ve3, vdc);
            m2v_store(dct + n, vdc);
        }
        float gbs[4], des[4];
        m2v_reduce4(gb0, gb1, gb2, gb3, gbs);
        m2v_reduce4(de0, de1, de2, de3, des);
        for (; n < N; n++) { /* scalar tail of N */
            const float bn = b[n], cn = c[n];
            const float g0 = e0 * cn + an * g[n];
            const float g1 = e1 * cn + an * g[N + n];
            const float g2 = e2 * cn + an * g[2 * N + n];
            const float g3 = e3 * cn + an * g[3 * N + n];
            g[n] = g0;
            g[N + n] = g1;
            g[2 * N + n] = g2;
            g[3 * N + n] = g3;
            gbs[0] += g0 * bn;
            gbs[1] += g1 * bn;
            gbs[2] += g2 * bn;
            gbs[3] += g3 * bn;
            des[0] += g0 * sp[n];
            des[1] += g1 * sp[N + n];
            des[2] += g2 * sp[2 * N + n];
            des[3] += g3 * sp[3 * N + n];
            float db = dbt[n];
            db += g0 * x0;
            db += g1 * x1;
            db += g2 * x2;
            db += g3 * x3;
            dbt[n] = db;
            float dc = dct[n];
            dc += s[n] * e0;
            dc += s[N + n] * e1;
            dc += s[2 * N + n] * e2;
            dc += s[3 * N + n] * e3;
            dct[n] = dc;
        }
        float *gbt = gb + t * ldgb;
        gbt[0] = gbs[0];
        gbt[1] = gbs[1];
        gbt[2] = gbs[2];
        gbt[3] = gbs[3];
        dec[t] += (des[0] + des[1]) + (des[2] + des[3]);
    }
}

/* The same for one row. */
M2_INLINE void rev_tile1(int64_t T, int64_t N, const float *a, float a_after, const float *x,
                         int64_t ldx, const float *dy, int64_t lddy, const float *Bp,
                         const float *Cp, const float *S0, const float *Ss, int64_t sst, float *g,
                         float *gb, int64_t ldgb, float *dBacc, float *dCacc, float *dec) {
    for (int64_t t = T - 1; t >= 0; t--) {
        const float *b = Bp + t * N, *c = Cp + t * N;
        const float *s = Ss + t * sst;
        const float *sp = t > 0 ? Ss + (t - 1) * sst : S0;
        float *dbt = dBacc + t * N, *dct = dCacc + t * N;
        const float an = t == T - 1 ? a_after : a[t + 1];
        const float x0 = x[t * ldx], e0 = dy[t * lddy];
        const m2v van = m2v_set1(an), vx0 = m2v_set1(x0), ve0 = m2v_set1(e0);
        m2v gb0 = m2v_zero(), de0 = m2v_zero();
        int64_t n = 0;
        for (; n + M2V_LEN <= N; n += M2V_LEN) {
            const m2v g0 = m2v_fma(ve0, m2v_load(c + n), m2v_mul(van, m2v_load(g + n)));
            m2v_store(g + n, g0);
            gb0 = m2v_fma(g0, m2v_load(b + n), gb0);
            de0 = m2v_fma(g0, m2v_load(sp + n), de0);
            m2v_store(dbt + n, m2v_fma(g0, vx0, m2v_load(dbt + n)));
            m2v_store(dct + n, m2v_fma(m2v_load(s + n), ve0, m2v_load(dct + n)));
        }
        float gbs = m2v_reduce(gb0), des = m2v_reduce(de0);
        for (; n < N; n++) {
            const float g0 = e0 * c[n] + an * g[n];
            g[n] = g0;
            gbs += g0 * b[n];
            des += g0 * sp[n];
            dbt[n] += g0 * x0;
            dct[n] += s[n] * e0;
        }
        gb[t * ldgb] = gbs;
        dec[t] += des;
    }
}

/* Backward of one block: per 4-row tile, recompute the tile's states S_0..S_{T-1} from the
 * checkpoint rows into Stile (T*4*N floats: L1-sized for T = 8, N = 128), then run the
 * reverse recurrence over the same rows while they are still in L1. The rows of S and G
 * never interact, only the sums over p (dBacc, dCacc, dec) do, and those are accumulated
 * tile after tile in p order. */
M2_INLINE void bwd_block_impl(int64_t T, int64_t P, int64_t N, const float *a, float a_after,
                              const float *xd, const float *x, int64_t ldx, const float *dy,
                              const float *Bp, const float *Cp, const float *S0, float *G,
                              float *Stile, float *y, float *gb, float *dBacc, float *dCacc,
                              float *dec, const int want_y) {
    int64_t p = 0;
    for (; p + 4 <= P; p += 4) {
        fwd_tile4(T, N, a, xd + p, P, Bp, Cp, S0 + p * N, Stile, 4 * N, want_y ? y + p : NULL, P,
                  want_y);
        rev_tile4(T, N, a, a_after, x + p, ldx, dy + p, P, Bp, Cp, S0 + p * N, Stile, 4 * N,
                  G + p * N, gb + p, P, dBacc, dCacc, dec);
    }
    for (; p < P; p++) {
        fwd_tile1(T, N, a, xd + p, P, Bp, Cp, S0 + p * N, Stile, N, want_y ? y + p : NULL, P,
                  want_y);
        rev_tile1(T, N, a, a_after, x + p, ldx, dy + p, P, Bp, Cp, S0 + p * N, Stile, N,
                  G + p * N, gb + p, P, dBacc, dCacc, dec);
    }
}

static void M2K(bwd_block_4xN)(int64_t T, int64_t P, int64_t N, const float *a, float a_after,
                               const float *xd, const float *x, int64_t ldx, const float *dy,
                               const float *Bp, const float *Cp, const float *S0, float *G,
                               float *Stile, float *y, float *gb, float *dBacc, float *dCacc,
                               float *dec) {
    if (y)
        bwd_block_impl(T, P, N, a, a_after, xd, x, ldx, dy, Bp, Cp, S0, G, Stile, y, gb, dBacc,
                       dCacc, dec, 1);
    else
        bwd_block_impl(T, P, N, a, a_after, xd, x, ldx, dy, Bp, Cp, S0, G, Stile, NULL, gb,
                       dBacc, dCacc, dec, 0);
}

/* ---- element-wise rows (length P) --------------------------------------------------- */

static void M2K(scale)(int64_t n, float s, const float *x, float *out) {
    const m2v vs = m2v_set1(s);
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) m2v_store(out + i, m2v_mul(vs, m2v_load(x + i)));
    for (; i < n; i++) out[i] = s * x[i];
}

/* silu(v) = v / (1 + e^-v) */
M2_INLINE m2v silu_v(m2v v) {
    return m2v_div(v, m2v_add(m2v_set1(1.0f), m2v_exp(m2v_sub(m2v_zero(), v))));
}
M2_INLINE float silu_s(float v) { return v / (1.0f + expf(-v)); }
/* silu'(v) = σ(v) (1 + v (1 - σ(v))) */
M2_INLINE m2v dsilu_v(m2v v) {
    const m2v one = m2v_set1(1.0f);
    const m2v sg = m2v_div(one, m2v_add(one, m2v_exp(m2v_sub(m2v_zero(), v))));
    return m2v_mul(sg, m2v_fma(v, m2v_sub(one, sg), one));
}
M2_INLINE float dsilu_s(float v) {
    const float sg = 1.0f / (1.0f + expf(-v));
    return sg * (1.0f + v * (1.0f - sg));
}

static void M2K(fwd_out)(int64_t n, const float *y, const float *x, const float *D,
                         const float *z, float *out) {
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        m2v v = m2v_load(y + i);
        if (D) v = m2v_fma(m2v_load(D + i), m2v_load(x + i), v);
        if (z) v = m2v_mul(v, silu_v(m2v_load(z + i)));
        m2v_store(out + i, v);
    }
    for (; i < n; i++) {
        float v = y[i];
        if (D) v += D[i] * x[i];
        if (z) v *= silu_s(z[i]);
        out[i] = v;
    }
}

static void M2K(bwd_dy)(int64_t n, const float *dout, const float *z, float *dy) {
    int64_t i = 0;
    if (!z) {
        for (; i < n; i++) dy[i] = dout[i];
        return;
    }
    for (; i + M2V_LEN <= n; i += M2V_LEN)
        m2v_store(dy + i, m2v_mul(m2v_load(dout + i), silu_v(m2v_load(z + i))));
    for (; i < n; i++) dy[i] = dout[i] * silu_s(z[i]);
}

static void M2K(bwd_dxdz)(int64_t n, float d, const float *gb, const float *dy, const float *x,
                          const float *D, const float *y, const float *dout, const float *z,
                          float *dx, float *dz) {
    if (dx) {
        const m2v vd = m2v_set1(d);
        int64_t i = 0;
        for (; i + M2V_LEN <= n; i += M2V_LEN) {
            m2v v = m2v_mul(vd, m2v_load(gb + i));
            if (D) v = m2v_fma(m2v_load(D + i), m2v_load(dy + i), v);
            m2v_store(dx + i, v);
        }
        for (; i < n; i++) {
            float v = d * gb[i];
            if (D) v += D[i] * dy[i];
            dx[i] = v;
        }
    }
    if (dz) {
        int64_t i = 0;
        for (; i + M2V_LEN <= n; i += M2V_LEN) {
            m2v v = m2v_load(y + i); /* y before the gate: S_t·C_t + D x_t */
            if (D) v = m2v_fma(m2v_load(D + i), m2v_load(x + i), v);
            m2v_store(dz + i, m2v_mul(m2v_mul(m2v_load(dout + i), v), dsilu_v(m2v_load(z + i))));
        }
        for (; i < n; i++) {
            float v = y[i];
            if (D) v += D[i] * x[i];
            dz[i] = dout[i] * v * dsilu_s(z[i]);
        }
    }
}
