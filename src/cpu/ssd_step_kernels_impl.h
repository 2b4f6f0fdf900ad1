/*
 * ssd_step_kernels_impl.h — the SSD decode-step kernel text, compiled once per instruction set.
 *
 * Included only by ssd_step_kernels_<isa>.c, after M2_SIMD_<ISA> and M2_KSUFFIX (e.g. __avx2)
 * are defined; cpu/simd.h maps the m2v_* names onto that ISA. It defines ssd_step_rows<SUFFIX>
 * and ssd_step_epilogue<SUFFIX>, which the .c file puts in its m2_ssd_step_kernels table.
 *
 * Structure (why it looks like this):
 *  - A decode step reads and writes the whole state once (P*N floats per head) and does two
 *    multiply-adds per element: it is bound by memory bandwidth. The kernel therefore makes
 *    exactly one pass over the state: each element is loaded, decayed, updated, stored and
 *    used for y in the same iteration, and B_t, C_t (one row each, shared by every row of
 *    the head) stay in L1.
 *  - N is the vector dimension (rows of the state, B_t and C_t are contiguous over N), with a
 *    scalar tail; rows of P are tiled 4 at a time so one B_t / C_t load serves four rows.
 *  - With several tokens the token loop runs inside the 4-row tile: the tile (2 KiB at
 *    N = 128) stays in L1 across the tokens, and each token performs exactly the operations of
 *    a one-token call (T calls of one token give the same bits as one call of T tokens).
 *  - The arithmetic is that of the fused forward kernel (S = xd B + a S with xd = d x, y by
 *    per-row vector accumulators reduced once per token), so a prefill and the same tokens
 *    run as steps agree to rounding.
 */
#ifndef M2_KSUFFIX
#error "define M2_KSUFFIX before including ssd_step_kernels_impl.h"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/simd.h"
#include "cpu/ssd_step_kernels.h"

#define SK_CAT2(a, b) a##b
#define SK_CAT(a, b)  SK_CAT2(a, b)
#define SK(name)      SK_CAT(name, M2_KSUFFIX)

/* 4 rows (s + r*lds) over T tokens; see m2_ssd_step_kernels.rows. want_all is a compile-time
 * constant at both call sites. */
M2_INLINE void step_tile4(int64_t T, int64_t N, const float *a, const float *d, const float *x,
                          int64_t ldx, const float *Bm, int64_t ldb, const float *Cm, int64_t ldc,
                          float *s, int64_t lds, float *y, int64_t ldy, float *all, int64_t ldat,
                          int64_t ldar, const int want_all) {
    float *s0 = s, *s1 = s + lds, *s2 = s + 2 * lds, *s3 = s + 3 * lds;
    for (int64_t t = 0; t < T; t++) {
        const float *b = Bm + t * ldb, *c = Cm + t * ldc, *xt = x + t * ldx;
        const float as = a[t], ds = d[t];
        const float x0 = ds * xt[0], x1 = ds * xt[1], x2 = ds * xt[2], x3 = ds * xt[3];
        float *o0 = NULL, *o1 = NULL, *o2 = NULL, *o3 = NULL;
        if (want_all) {
            o0 = all + t * ldat;
            o1 = o0 + ldar;
            o2 = o0 + 2 * ldar;
            o3 = o0 + 3 * ldar;
        }
        const m2v va = m2v_set1(as);
        const m2v vx0 = m2v_set1(x0), vx1 = m2v_set1(x1), vx2 = m2v_set1(x2), vx3 = m2v_set1(x3);
        m2v y0 = m2v_zero(), y1 = m2v_zero(), y2 = m2v_zero(), y3 = m2v_zero();
        int64_t n = 0;
        for (; n + M2V_LEN <= N; n += M2V_LEN) {
            const m2v vb = m2v_load(b + n), vc = m2v_load(c + n);
            const m2v v0 = m2v_fma(vx0, vb, m2v_mul(va, m2v_load(s0 + n)));
            const m2v v1 = m2v_fma(vx1, vb, m2v_mul(va, m2v_load(s1 + n)));
            const m2v v2 = m2v_fma(vx2, vb, m2v_mul(va, m2v_load(s2 + n)));
            const m2v v3 = m2v_fma(vx3, vb, m2v_mul(va, m2v_load(s3 + n)));
            m2v_store(s0 + n, v0);
            m2v_store(s1 + n, v1);
            m2v_store(s2 + n, v2);
            m2v_store(s3 + n, v3);
            if (want_all) {
                m2v_store(o0 + n, v0);
                m2v_store(o1 + n, v1);
                m2v_store(o2 + n, v2);
                m2v_store(o3 + n, v3);
            }
            y0 = m2v_fma(v0, vc, y0);
            y1 = m2v_fma(v1, vc, y1);
            y2 = m2v_fma(v2, vc, y2);
            y3 = m2v_fma(v3, vc, y3);
        }
        float ys[4];
        m2v_reduce4(y0, y1, y2, y3, ys);
        for (; n < N; n++) { /* scalar tail of N */
            const float bn = b[n], cn = c[n];
            const float v0 = x0 * bn + as * s0[n];
            const float v1 = x1 * bn + as * s1[n];
            const float v2 = x2 * bn + as * s2[n];
            const float v3 = x3 * bn + as * s3[n];
            s0[n] = v0;
            s1[n] = v1;
            s2[n] = v2;
            s3[n] = v3;
            if (want_all) {
                o0[n] = v0;
                o1[n] = v1;
                o2[n] = v2;
                o3[n] = v3;
            }
            ys[0] += v0 * cn;
            ys[1] += v1 * cn;
            ys[2] += v2 * cn;
            ys[3] += v3 * cn;
        }
        float *yt = y + t * ldy;
        yt[0] = ys[0];
        yt[1] = ys[1];
        yt[2] = ys[2];
        yt[3] = ys[3];
    }
}

/* The same for one row (rows of P left over from the 4-row tiles). */
M2_INLINE void step_tile1(int64_t T, int64_t N, const float *a, const float *d, const float *x,
                          int64_t ldx, const float *Bm, int64_t ldb, const float *Cm, int64_t ldc,
                          float *s0, float *y, int64_t ldy, float *all, int64_t ldat,
                          const int want_all) {
    for (int64_t t = 0; t < T; t++) {
        const float *b = Bm + t * ldb, *c = Cm + t * ldc;
        const float as = a[t], x0 = d[t] * x[t * ldx];
        float *o0 = want_all ? all + t * ldat : NULL;
        const m2v va = m2v_set1(as), vx0 = m2v_set1(x0);
        m2v y0 = m2v_zero();
        int64_t n = 0;
        for (; n + M2V_LEN <= N; n += M2V_LEN) {
            const m2v v0 = m2v_fma(vx0, m2v_load(b + n), m2v_mul(va, m2v_load(s0 + n)));
            m2v_store(s0 + n, v0);
            if (want_all) m2v_store(o0 + n, v0);
            y0 = m2v_fma(v0, m2v_load(c + n), y0);
        }
        float ys = m2v_reduce(y0);
        for (; n < N; n++) {
            const float v0 = x0 * b[n] + as * s0[n];
            s0[n] = v0;
            if (want_all) o0[n] = v0;
            ys += v0 * c[n];
        }
        y[t * ldy] = ys;
    }
}

/* Software prefetch distance, in bytes of state ahead of the tile being updated. The 4 rows
 * of a tile are 4 short interleaved streams (512 B each at N = 128), which the hardware
 * prefetchers pick up late; asking for the rows ~8 KiB ahead keeps enough misses in flight
 * (docs/code_notes.md). */
#define SK_PF_BYTES 8192
#if defined(__GNUC__)
#define SK_PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#else
#define SK_PREFETCH_W(p) ((void)(p))
#endif

/* Prefetch (for writing) state rows [r0, r1). */
M2_INLINE void step_prefetch_rows(const float *S, int64_t lds, int64_t N, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++)
        for (int64_t n = 0; n < N; n += 16) SK_PREFETCH_W(S + r * lds + n);
}

M2_INLINE void step_rows_impl(int64_t T, int64_t P, int64_t N, const float *a, const float *d,
                              const float *x, int64_t ldx, const float *Bm, int64_t ldb,
                              const float *Cm, int64_t ldc, float *S, int64_t lds, float *y,
                              int64_t ldy, float *all, int64_t ldat, int64_t ldar,
                              const int want_all) {
    const int64_t ahead = (SK_PF_BYTES / (4 * N) + 3) / 4 * 4 + 4; /* rows, a multiple of 4 */
    step_prefetch_rows(S, lds, N, 0, ahead < P ? ahead : P);
    int64_t p = 0;
    for (; p + 4 <= P; p += 4) {
        if (p + ahead < P)
            step_prefetch_rows(S, lds, N, p + ahead, p + ahead + 4 < P ? p + ahead + 4 : P);
        step_tile4(T, N, a, d, x + p, ldx, Bm, ldb, Cm, ldc, S + p * lds, lds, y + p, ldy,
                   want_all ? all + p * ldar : NULL, ldat, ldar, want_all);
    }
    for (; p < P; p++)
        step_tile1(T, N, a, d, x + p, ldx, Bm, ldb, Cm, ldc, S + p * lds, y + p, ldy,
                   want_all ? all + p * ldar : NULL, ldat, want_all);
}

static void SK(ssd_step_rows)(int64_t T, int64_t P, int64_t N, const float *a, const float *d,
                              const float *x, int64_t ldx, const float *Bm, int64_t ldb,
                              const float *Cm, int64_t ldc, float *S, int64_t lds, float *y,
                              int64_t ldy, float *all, int64_t ldat, int64_t ldar) {
    if (all)
        step_rows_impl(T, P, N, a, d, x, ldx, Bm, ldb, Cm, ldc, S, lds, y, ldy, all, ldat, ldar, 1);
    else
        step_rows_impl(T, P, N, a, d, x, ldx, Bm, ldb, Cm, ldc, S, lds, y, ldy, NULL, 0, 0, 0);
}

/* ---- output: (y + D x) * silu(z) ------------------------------------------------------- */

/* silu(v) = v / (1 + e^-v); v * 0 below the exp's clamp (cpu/simd.h, "Saturation") */
M2_INLINE m2v step_silu_v(m2v v) {
    return m2v_exp_sat(v, M2_EXP_NEG_LIM, m2v_mul(v, m2v_zero()),
                       m2v_div(v, m2v_add(m2v_set1(1.0f), m2v_exp(m2v_sub(m2v_zero(), v)))));
}
M2_INLINE float step_silu_s(float v) { return v / (1.0f + expf(-v)); }

static void SK(ssd_step_epilogue)(int64_t n, const float *y, const float *x, const float *D,
                                  int64_t Ds, const float *z, float *out) {
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        m2v v = m2v_load(y + i);
        if (D) v = m2v_fma(Ds ? m2v_load(D + i) : m2v_set1(D[0]), m2v_load(x + i), v);
        if (z) v = m2v_mul(v, step_silu_v(m2v_load(z + i)));
        m2v_store(out + i, v);
    }
    for (; i < n; i++) {
        float v = y[i];
        if (D) v += D[i * Ds] * x[i];
        if (z) v *= step_silu_s(z[i]);
        out[i] = v;
    }
}
