/*
 * ssd_kernels_impl.h — the SSD kernel text, compiled once per instruction set.
 *
 * Included only by ssd_kernels_<isa>.c, after cpu/simd.h has mapped m2v_* onto that ISA and
 * M2_KSUFFIX names it (e.g. __avx2). It defines static kernels named <kernel><M2_KSUFFIX>;
 * the .c file puts them in its m2_cpu_kernels table.
 *
 * What is here and why (docs/cpu_ssd.md has the measurements):
 *  - sweep: the one kernel that touches state elements. The state is carried rescaled inside
 *    a segment (ssd_cpu.h), so each token costs one FMA per state element for the update and
 *    one more per contraction asked for: the w row (over the state's rows, vertical: lanes
 *    accumulate in registers) and the r row (over its columns, horizontal: a lane sum). The
 *    forward ([N][P] states) uses update + w; the backward's two passes ([P][N] states,
 *    so that dC and dB are w rows) use update + w (+ r), forward and reversed. A register
 *    tile of 2 vectors by 4 columns (16 x 4 floats with AVX2, 32 x 4 with AVX-512) stays in
 *    registers for the whole token loop; the state lives in the sweep's own layout [Np][Pp],
 *    padded with zeros to the tile (so there are no edge cases in the kernel) and stored
 *    tile-major (one sequential stream per sweep). Reductions run
 *    in orders fixed by (Pp, Np): results never depend on threads.
 *  - sweep_direct: the reverse sweep plus the decay gradient contracted from its definition,
 *    for blocks where the backward's telescoping form would lose precision (strong decay).
 *  - dt_block: dt processing and the segment scales of a set of heads, vectorized over the
 *    heads (their dt are adjacent); the scales in double.
 *  - rows of length P: x scaling, the forward epilogue (D and the silu gate), the
 *    backward's per-token rows. The gate's sigmoid is the lean one of ssd_fast_simd.h: it
 *    shares the two FMA ports with the sweep and is the largest per-token cost left.
 * Every loop has a vector body and a scalar tail; the scalar kernel set (M2V_LEN = 1) is
 * the same text.
 */
#ifndef M2_KSUFFIX
#error "define M2_KSUFFIX before including ssd_kernels_impl.h"
#endif

#include <stddef.h>
#include <stdint.h>

#include "cpu/kernels.h"
#include "cpu/simd.h"
#include "cpu/ssd_fast_simd.h"

#define M2_CAT2(a, b) a##b
#define M2_CAT(a, b) M2_CAT2(a, b)
#define M2K(name) M2_CAT(name, M2_KSUFFIX)

/* ---- the sweep: one rescaled state over a block of tokens ----------------------------- */

/* The state lives in the kernel's own layout S[Np][Pp] (P contiguous, stored tile-major as
 * below, both padded with zeros to the register tile). Per token t of the block (t = 0..T-1, or T-1..0 with rev):
 *     S[n][p] += u_t[p] V_t[n]                      (the rescaled update: one FMA)
 *     w_t[p]  += sum_n S[n][p] W_t[n]               (when W: one FMA; w zeroed by the caller;
 *                                                    with w_pre, from S before the update)
 *     acc_t[n] = sum_p S[n][p] r_t[p]               (when r: one FMA, then a lane sum)
 * u, r, w: [T][Pp]; V, W: packed [Np/4][T][4], or rows [T][Np] with M2_SWEEP_VROWS (the 4
 * values of a tile's columns for one token are adjacent either way); acc: [T][Np]. The
 * state is multiplied by f when a tile is loaded (a segment restart; f = 1 is exact).
 * Register tile: 2 vectors of p x 4 columns n (16 x 4 floats with AVX2, 32 x 4 with
 * AVX-512), held for the whole token loop; only the w rows and the r partial sums go
 * through memory. Tiles run n-tile outer, p-tile inner, so a tile's V/W columns (T x 4
 * floats) are reused across the p-tiles and u, w, r (T*Pp floats each) stay in L1. The r
 * partial sums keep one vector of lanes per (token, column), added p-tile after p-tile and
 * reduced once per n-tile: every sum has one order fixed by (Pp, Np), never by threads. */
#define M2_SW_TMAX 64
/* The register tile (kernels.h): M2_SW_TILE_P floats of p (the table's tile_p) by
 * M2_TILE_COLS columns n (tile_n). The macros below name its registers s0a s0b .. s3b
 * (column 0..3, vector a, b), so they hold for that tile only. */
#define M2_SW_TILE_P (M2_TILE_VECS * M2V_LEN)
#define M2_SW_TILE_REGS (M2_TILE_VECS * M2_TILE_COLS)
_Static_assert(M2_TILE_VECS == 2 && M2_TILE_COLS == 4, "the SW_* macros spell a 2 x 4 tile");
/* The state is stored tile-major (kernels.h, m2_tile_off): register tile (n0, p0) is one
 * contiguous block of 8 vectors s0a s0b s1a .. s3b, the tiles in the order the sweep visits
 * them (n-tile outer), so a sweep reads and writes its state as one sequential stream (faster
 * than row-major [Np][Pp], whose tiles are 4 rows Pp apart: docs/code_notes.md). */
#define M2_SW_TILE_AT(n0, p0, Pp) m2_tile_off((n0), (p0), (Pp), M2_SW_TILE_P)
/* the tile in registers from p, and `put` (m2v_store or m2v_stream) of it to p */
#define SW_TILE_LOAD(p)                                                                         \
    m2v s0a = m2v_load(p), s0b = m2v_load((p) + M2V_LEN), s1a = m2v_load((p) + 2 * M2V_LEN),    \
        s1b = m2v_load((p) + 3 * M2V_LEN), s2a = m2v_load((p) + 4 * M2V_LEN),                   \
        s2b = m2v_load((p) + 5 * M2V_LEN), s3a = m2v_load((p) + 6 * M2V_LEN),                   \
        s3b = m2v_load((p) + 7 * M2V_LEN)
#define SW_TILE_PUT(put, p)                                                                     \
    do {                                                                                        \
        put((p), s0a); put((p) + M2V_LEN, s0b); put((p) + 2 * M2V_LEN, s1a);                   \
        put((p) + 3 * M2V_LEN, s1b); put((p) + 4 * M2V_LEN, s2a); put((p) + 5 * M2V_LEN, s2b);  \
        put((p) + 6 * M2V_LEN, s3a); put((p) + 7 * M2V_LEN, s3b);                               \
    } while (0)

/* tile *= f (a segment restart) */
#define SW_SCALE_TILE(f)                                                                        \
    do {                                                                                        \
        const m2v vf_ = m2v_set1(f);                                                            \
        s0a = m2v_mul(vf_, s0a); s0b = m2v_mul(vf_, s0b); s1a = m2v_mul(vf_, s1a);              \
        s1b = m2v_mul(vf_, s1b); s2a = m2v_mul(vf_, s2a); s2b = m2v_mul(vf_, s2b);              \
        s3a = m2v_mul(vf_, s3a); s3b = m2v_mul(vf_, s3b);                                       \
    } while (0)

/* One token of one register tile (see sweep_impl): the update, the w row (from the tile
 * before the update when w_pre, after it otherwise), the r partial sums (after). */
#define SW_UPDATE(t)                                                                            \
    do {                                                                                        \
        const float *ut = u + (t) * Pp, *vt = V + vst * (t);                                      \
        const m2v ua = m2v_load(ut), ub = m2v_load(ut + M2V_LEN);                               \
        m2v bb = m2v_set1(vt[0]);                                                               \
        s0a = m2v_fma(ua, bb, s0a); s0b = m2v_fma(ub, bb, s0b);                                 \
        bb = m2v_set1(vt[1]);                                                                   \
        s1a = m2v_fma(ua, bb, s1a); s1b = m2v_fma(ub, bb, s1b);                                 \
        bb = m2v_set1(vt[2]);                                                                   \
        s2a = m2v_fma(ua, bb, s2a); s2b = m2v_fma(ub, bb, s2b);                                 \
        bb = m2v_set1(vt[3]);                                                                   \
        s3a = m2v_fma(ua, bb, s3a); s3b = m2v_fma(ub, bb, s3b);                                 \
    } while (0)
#define SW_WROW(t)                                                                              \
    do {                                                                                        \
        float *wt = w + (t) * Pp;                                                               \
        const float *ct = W + vst * (t);                                                          \
        m2v ya = m2v_load(wt), yb = m2v_load(wt + M2V_LEN);                                     \
        m2v cc = m2v_set1(ct[0]);                                                               \
        ya = m2v_fma(s0a, cc, ya); yb = m2v_fma(s0b, cc, yb);                                   \
        cc = m2v_set1(ct[1]);                                                                   \
        ya = m2v_fma(s1a, cc, ya); yb = m2v_fma(s1b, cc, yb);                                   \
        cc = m2v_set1(ct[2]);                                                                   \
        ya = m2v_fma(s2a, cc, ya); yb = m2v_fma(s2b, cc, yb);                                   \
        cc = m2v_set1(ct[3]);                                                                   \
        ya = m2v_fma(s3a, cc, ya); yb = m2v_fma(s3b, cc, yb);                                   \
        m2v_store(wt, ya); m2v_store(wt + M2V_LEN, yb);                                         \
    } while (0)
#define SW_RSUM(t)                                                                              \
    do {                                                                                        \
        const float *rt = r + (t) * Pp;                                                         \
        float *pt = part + (t) * M2_TILE_COLS * M2V_LEN;                                        \
        const m2v ra = m2v_load(rt), rb = m2v_load(rt + M2V_LEN);                               \
        m2v q0, q1, q2, q3;                                                                     \
        if (first) {                                                                            \
            q0 = m2v_mul(s0a, ra); q1 = m2v_mul(s1a, ra);                                       \
            q2 = m2v_mul(s2a, ra); q3 = m2v_mul(s3a, ra);                                       \
        } else {                                                                                \
            q0 = m2v_fma(s0a, ra, m2v_load(pt));                                                \
            q1 = m2v_fma(s1a, ra, m2v_load(pt + M2V_LEN));                                      \
            q2 = m2v_fma(s2a, ra, m2v_load(pt + 2 * M2V_LEN));                                  \
            q3 = m2v_fma(s3a, ra, m2v_load(pt + 3 * M2V_LEN));                                  \
        }                                                                                       \
        q0 = m2v_fma(s0b, rb, q0); q1 = m2v_fma(s1b, rb, q1);                                   \
        q2 = m2v_fma(s2b, rb, q2); q3 = m2v_fma(s3b, rb, q3);                                   \
        if (last) {                                                                             \
            m2v_reduce4(q0, q1, q2, q3, acc + (t) * Np);                                        \
        } else {                                                                                \
            m2v_store(pt, q0); m2v_store(pt + M2V_LEN, q1);                                     \
            m2v_store(pt + 2 * M2V_LEN, q2); m2v_store(pt + 3 * M2V_LEN, q3);                   \
        }                                                                                       \
    } while (0)
#define SW_TOKEN(t)                                                                             \
    do {                                                                                        \
        if (want_w && w_pre) SW_WROW(t);                                                        \
        if (want_r == 2) SW_RSUM(t);                                                            \
        SW_UPDATE(t);                                                                           \
        if (want_w && !w_pre) SW_WROW(t);                                                       \
        if (want_r == 1) SW_RSUM(t);                                                            \
    } while (0)

/* One register tile (2 vectors of p x 4 columns n) over the block. The tokens run in runs
 * between the restarts: forward, the tile is multiplied by rf[k] before token ridx[k];
 * reverse, after it (the adjoint of the same multiply). pf: a few prefetches every 8
 * tokens. */
M2_INLINE void sweep_tile(int64_t T, int64_t Np, int64_t Pp, int64_t vst, const float *u,
                          const float *V, const float *W, const float *r, float *s, float *sc,
                          float *w, float *part, float *acc, int nr, const int32_t *ridx,
                          const float *rf, m2_pf *pf, const int want_w, const int w_pre,
                          const int want_r, const int rev, const int first, const int last) {
    SW_TILE_LOAD(s);
    const int64_t per8 = pf ? pf->per8 : 0;
    if (!rev) {
        for (int k = 0; k <= nr; k++) {
            const int64_t lo = k == 0 ? 0 : ridx[k - 1], hi = k == nr ? T : ridx[k];
            for (int64_t t = lo; t < hi; t++) {
                if ((t & 7) == 0 && per8) m2_pf_issue(pf, per8);
                SW_TOKEN(t);
            }
            if (k < nr) SW_SCALE_TILE(rf[k]);
        }
    } else {
        for (int k = nr; k >= 0; k--) {
            const int64_t lo = k == 0 ? 0 : ridx[k - 1], hi = k == nr ? T : ridx[k];
            for (int64_t t = hi - 1; t >= lo; t--) {
                if ((t & 7) == 0 && per8) m2_pf_issue(pf, per8);
                SW_TOKEN(t);
            }
            if (k > 0) SW_SCALE_TILE(rf[k - 1]);
        }
    }
    SW_TILE_PUT(m2v_store, s);
    if (sc && ((uintptr_t)sc % M2V_STREAM_ALIGN) == 0)
        SW_TILE_PUT(m2v_stream, sc); /* the snapshot is read one pass later: past the caches */
    else if (sc)
        SW_TILE_PUT(m2v_store, sc);
}

M2_INLINE void sweep_impl(int64_t T, int64_t Np, int64_t Pp, int nr, const int32_t *ridx,
                          const float *rf, const float *u, const float *V, const float *W,
                          const float *r, float *S, float *Sc, float *w, float *acc, m2_pf *pf,
                          const int vrows, const int want_w, const int w_pre, const int want_r,
                          const int rev) {
    _Alignas(64) float part[M2_SW_TMAX * M2_TILE_COLS * M2V_LEN];
    /* V, W element (t, n): packed [Np/4][T][4], or rows [T][Np] (M2_SWEEP_VROWS) */
    const int64_t vsn = vrows ? 1 : T, vst = vrows ? Np : M2_TILE_COLS;
    for (int64_t n0 = 0; n0 < Np; n0 += M2_TILE_COLS) {
        const float *Vn = V + n0 * vsn, *Wn = want_w ? W + n0 * vsn : NULL;
        for (int64_t p = 0; p < Pp; p += M2_SW_TILE_P) {
            float *s = S + M2_SW_TILE_AT(n0, p, Pp), *sc = Sc ? Sc + M2_SW_TILE_AT(n0, p, Pp) : NULL;
            const float *rp = want_r ? r + p : NULL;
            float *wp = want_w ? w + p : NULL;
            float *an = want_r ? acc + n0 : NULL;
#define SW_TILE(fi, la)                                                                         \
    sweep_tile(T, Np, Pp, vst, u + p, Vn, Wn, rp, s, sc, wp, part, an, nr, ridx, rf, pf, want_w, \
               w_pre, want_r, rev, fi, la)
            /* the r sums: lanes kept per (token, column) across the p-tiles, reduced in the last
             * one's token loop, where the lane sums overlap the FMAs */
            const int lst = p + M2_SW_TILE_P == Pp;
            if (!want_r) SW_TILE(0, 0);
            else if (p == 0 && lst) SW_TILE(1, 1);
            else if (p == 0) SW_TILE(1, 0);
            else if (lst) SW_TILE(0, 1);
            else SW_TILE(0, 0);
#undef SW_TILE
        }
    }
}

/* Every flag combination is its own specialization of sweep_impl (no flag tests in the token
 * loop), one function per V/W layout: the packed layout's constant stride (4 floats) beats a
 * row stride in L1, and one function holding both layouts' 36 variants compiled slower
 * (docs/code_notes.md, dev/sweep_micro.c). */
#define SW_CALL(ww, pp, rr, rv, vr)                                                             \
    sweep_impl(T, Np, Pp, nr, ridx, rf, u, V, ww ? W : NULL, rr ? r : NULL, S, Sc,             \
               ww ? w : NULL,                                                                   \
               rr ? acc : NULL, pf, vr, ww, pp, rr, rv)
#define SW_CALL_R(ww, pp, rv, vr)                                                               \
    do {                                                                                        \
        if (r && rpre) SW_CALL(ww, pp, 2, rv, vr);                                              \
        else if (r) SW_CALL(ww, pp, 1, rv, vr);                                                 \
        else SW_CALL(ww, pp, 0, rv, vr);                                                        \
    } while (0)
#define SW_CALL_W(rv, vr)                                                                       \
    do {                                                                                        \
        if (!W) SW_CALL_R(0, 0, rv, vr);                                                        \
        else if (pre) SW_CALL_R(1, 1, rv, vr);                                                  \
        else SW_CALL_R(1, 0, rv, vr);                                                           \
    } while (0)
#define SW_LAYOUT_FN(name, vr)                                                                  \
    static __attribute__((noinline)) void name(int64_t T, int64_t Np, int64_t Pp, int nr,       \
                                               const int32_t *ridx, const float *rf, int flags, \
                                               const float *u, const float *V, const float *W,  \
                                               const float *r, float *S, float *Sc, float *w,   \
                                               float *acc, m2_pf *pf) {                         \
        const int rev = (flags & M2_SWEEP_REV) != 0, pre = (flags & M2_SWEEP_W_PRE) != 0;       \
        const int rpre = (flags & M2_SWEEP_R_PRE) != 0;                                         \
        if (rev) SW_CALL_W(1, vr); else SW_CALL_W(0, vr);                                       \
    }
SW_LAYOUT_FN(M2K(sweep_packed), 0)
SW_LAYOUT_FN(M2K(sweep_rows), 1)
#undef SW_LAYOUT_FN
#undef SW_CALL_W
#undef SW_CALL_R
#undef SW_CALL

static void M2K(sweep)(int64_t T, int64_t Np, int64_t Pp, int nr, const int32_t *ridx,
                       const float *rf, int flags, const float *u, const float *V,
                       const float *W, const float *r, float *S, float *Sc, float *w,
                       float *acc, m2_pf *pf) {
    if (flags & M2_SWEEP_VROWS)
        M2K(sweep_rows)(T, Np, Pp, nr, ridx, rf, flags, u, V, W, r, S, Sc, w, acc, pf);
    else
        M2K(sweep_packed)(T, Np, Pp, nr, ridx, rf, flags, u, V, W, r, S, Sc, w, acc, pf);
}

/* ---- the reverse sweep with the decay gradient contracted directly ------------------- */

/* For blocks where the decay is strong, the suffix-sum form of the decay gradient loses
 * precision (ssd_cpu_bwd_pass.c); this sweep computes it from its definition instead,
 * lam[t] = Σ Ĝ_t ∘ Ŝ_{t-1} (Ŝ_{t-1}: the state before token t's update, after its restart
 * factor), besides everything the plain reverse sweep of the backward does (flags
 * M2_SWEEP_REV | M2_SWEEP_R_PRE: w row += Ĝ_t·W_t, acc = Ĝ_{t+1}·r_t). Per register tile it
 * first reruns the forward update (uf, Vf) from the block's starting state S0, keeping the
 * tile before every token (T x 8 vectors, in L1), then runs the reverse recurrence (ur, Vr)
 * against them. Layouts as in the sweep with M2_SWEEP_VROWS: uf, ur, r rows [T][Pp] over the
 * vector dimension, Vf, Vr, W rows [T][Np] over the other. */
M2_INLINE void direct_tile(int64_t T, int64_t Pp, int64_t vst, const float *uf, const float *Vf,
                           const float *ur, const float *Vr, const float *Wr, const float *rr,
                           const float *s0, float *s, float *wo, float *part, float *dpart,
                           m2v *buf, int nr, const int32_t *ridx, const float *rf,
                           const int want_w, const int want_r, const int first,
                           const int first_d) {
    {   /* the forward update, the tile before each token kept in buf */
        const float *u = uf, *V = Vf;
        SW_TILE_LOAD(s0);
        int k = 0;
        for (int64_t t = 0; t < T; t++) {
            while (k < nr && ridx[k] == t) { SW_SCALE_TILE(rf[k]); k++; }
            m2v *bt = buf + M2_SW_TILE_REGS * t;
            bt[0] = s0a; bt[1] = s0b; bt[2] = s1a; bt[3] = s1b;
            bt[4] = s2a; bt[5] = s2b; bt[6] = s3a; bt[7] = s3b;
            SW_UPDATE(t);
        }
    }
    {   /* the reverse recurrence, contracted with the kept tiles */
        const float *u = ur, *V = Vr, *W = Wr, *r = rr;
        float *w = wo, *const acc = NULL;
        const int w_pre = 0, last = 0; /* the r sums go through part, reduced by direct_impl */
        const int64_t Np = 0;
        (void)acc; (void)Np;
        SW_TILE_LOAD(s);
        int k = nr - 1;
        for (int64_t t = T - 1; t >= 0; t--) {
            SW_TOKEN(t);
            const m2v *bt = buf + M2_SW_TILE_REGS * t;
            m2v dv = first_d ? m2v_mul(s0a, bt[0])
                             : m2v_fma(s0a, bt[0], m2v_load(dpart + t * M2V_LEN));
            dv = m2v_fma(s0b, bt[1], dv);
            dv = m2v_fma(s1a, bt[2], dv);
            dv = m2v_fma(s1b, bt[3], dv);
            dv = m2v_fma(s2a, bt[4], dv);
            dv = m2v_fma(s2b, bt[5], dv);
            dv = m2v_fma(s3a, bt[6], dv);
            dv = m2v_fma(s3b, bt[7], dv);
            m2v_store(dpart + t * M2V_LEN, dv);
            while (k >= 0 && ridx[k] == t) { SW_SCALE_TILE(rf[k]); k--; }
        }
        SW_TILE_PUT(m2v_store, s);
        (void)w_pre;
    }
}

M2_INLINE void direct_impl(int64_t T, int64_t Np, int64_t Pp, int nr, const int32_t *ridx,
                           const float *rf, const float *S0, const float *uf, const float *Vf,
                           const float *ur, const float *Vr, const float *Wr, const float *rr,
                           float *G, float *w, float *acc, float *lam, const int want_w,
                           const int want_r) {
    _Alignas(64) float part[M2_SW_TMAX * M2_TILE_COLS * M2V_LEN];
    _Alignas(64) float dpart[M2_SW_TMAX * M2V_LEN];
    _Alignas(64) m2v buf[M2_SW_TMAX * M2_SW_TILE_REGS];
    for (int64_t n0 = 0; n0 < Np; n0 += M2_TILE_COLS) {
        for (int64_t p = 0; p < Pp; p += M2_SW_TILE_P) {
            const int64_t o = M2_SW_TILE_AT(n0, p, Pp);
            float *wp = want_w ? w + p : NULL;
            const float *rp = want_r ? rr + p : NULL;
            if (n0 == 0 && p == 0)
                direct_tile(T, Pp, Np, uf + p, Vf + n0, ur + p, Vr + n0,
                            want_w ? Wr + n0 : NULL, rp, S0 + o, G + o, wp, part, dpart, buf,
                            nr, ridx, rf, want_w, want_r ? 2 : 0, 1, 1);
            else if (p == 0)
                direct_tile(T, Pp, Np, uf + p, Vf + n0, ur + p, Vr + n0,
                            want_w ? Wr + n0 : NULL, rp, S0 + o, G + o, wp, part, dpart, buf,
                            nr, ridx, rf, want_w, want_r ? 2 : 0, 1, 0);
            else
                direct_tile(T, Pp, Np, uf + p, Vf + n0, ur + p, Vr + n0,
                            want_w ? Wr + n0 : NULL, rp, S0 + o, G + o, wp, part, dpart, buf,
                            nr, ridx, rf, want_w, want_r ? 2 : 0, 0, 0);
        }
        if (want_r)
            for (int64_t t = 0; t < T; t++) {
                const float *pt = part + t * M2_TILE_COLS * M2V_LEN;
                m2v_reduce4(m2v_load(pt), m2v_load(pt + M2V_LEN), m2v_load(pt + 2 * M2V_LEN),
                            m2v_load(pt + 3 * M2V_LEN), acc + t * Np + n0);
            }
    }
    for (int64_t t = 0; t < T; t++) lam[t] = m2v_reduce(m2v_load(dpart + t * M2V_LEN));
}

static void M2K(sweep_direct)(int64_t T, int64_t Np, int64_t Pp, int nr, const int32_t *ridx,
                              const float *rf, const float *S0, const float *uf,
                              const float *Vf, const float *ur, const float *Vr,
                              const float *W, const float *r, float *G, float *w, float *acc,
                              float *lam) {
    if (w && acc)
        direct_impl(T, Np, Pp, nr, ridx, rf, S0, uf, Vf, ur, Vr, W, r, G, w, acc, lam, 1, 1);
    else if (w)
        direct_impl(T, Np, Pp, nr, ridx, rf, S0, uf, Vf, ur, Vr, W, r, G, w, NULL, lam, 1, 0);
    else if (acc)
        direct_impl(T, Np, Pp, nr, ridx, rf, S0, uf, Vf, ur, Vr, W, r, G, NULL, acc, lam, 0, 1);
    else
        direct_impl(T, Np, Pp, nr, ridx, rf, S0, uf, Vf, ur, Vr, W, r, G, NULL, NULL, lam, 0, 0);
}

#include "cpu/ssd_dt_impl.h" /* dt processing and segment scales (dt_heads, dt_block) */

/* ---- element-wise rows (length P) --------------------------------------------------- */

/* Row operations over nh heads at once (row j of each operand ld* floats further; the heads of
 * a set are adjacent in the activation tensors, so one call per token serves the set). */
static void M2K(scale)(int64_t nh, int64_t n, const float *s, int64_t lds, const float *x,
                       int64_t ldx, float *out, int64_t ldo) {
    for (int64_t j = 0; j < nh; j++, s += lds, x += ldx, out += ldo) {
        const m2v vs = m2v_set1(*s);
        int64_t i = 0;
        for (; i + M2V_LEN <= n; i += M2V_LEN) m2v_store(out + i, m2v_mul(vs, m2v_load(x + i)));
        for (; i < n; i++) out[i] = *s * x[i];
    }
}

/* silu(v) = v σ(v) (the vector loops: σ from ssd_fast_simd.h, no division) */
M2_INLINE float silu_s(float v) { return v / (1.0f + expf(-v)); }

static void M2K(fwd_out)(int64_t nh, int64_t n, const float *e, int64_t lde, const float *y,
                         int64_t ldy, const float *x, int64_t ldx, const float *D, int64_t ldD,
                         const float *z, int64_t ldz, float *out, int64_t ldo, float *outx,
                         int64_t ldox, int stream) {
    for (int64_t j = 0; j < nh; j++) {
        const m2v ve = m2v_set1(*e);
        const int nt = stream && outx && ((uintptr_t)outx % M2V_STREAM_ALIGN) == 0;
        const int nto = stream && ((uintptr_t)out % M2V_STREAM_ALIGN) == 0;
        int64_t i = 0;
        for (; i + M2V_LEN <= n; i += M2V_LEN) {
            m2v v = m2v_mul(ve, m2v_load(y + i));
            if (D) v = m2v_fma(m2v_load(D + i), m2v_load(x + i), v);
            if (nt)
                m2v_stream(outx + i, v);
            else if (outx)
                m2v_store(outx + i, v);
            if (z) { /* v silu(z) as (v z) σ(z), v z off σ's chain; v (z 0) below σ's clamp */
                const m2v zv = m2v_load(z + i);
                v = m2v_exp_sat(zv, M2_SIGMOID_LIM, m2v_mul(v, m2v_mul(zv, m2v_zero())),
                                m2v_mul(m2v_mul(v, zv), m2v_sigmoid(zv)));
            }
            if (nto)
                m2v_stream(out + i, v);
            else
                m2v_store(out + i, v);
        }
        for (; i < n; i++) {
            float v = *e * y[i];
            if (D) v += D[i] * x[i];
            if (outx) outx[i] = v;
            if (z) v *= silu_s(z[i]);
            out[i] = v;
        }
        e += lde, y += ldy, x += ldx, out += ldo;
        if (D) D += ldD;
        if (z) z += ldz;
        if (outx) outx += ldox;
    }
}

/* ---- per-token rows of the rescaled backward (length n = P) --------------------------- */

/* u = w x (the sweep input d_t x_t / E_t); dy = dout silu(z) (dout without z);
 * r = E dy (the rescaled dL/dy); gz = dout silu'(z) = dout σ (1 + z (1 - σ)) (when gz: dz is
 * then (y + D x) gz, bwd_a_out); dD += dy x (when dD). */
static void M2K(bwd_prep)(int64_t n, float w, float E, const float *x, const float *dout,
                          const float *z, float *u, float *dy, float *r, float *gz, float *dD) {
    const m2v vw = m2v_set1(w), vE = m2v_set1(E), one = m2v_set1(1.0f);
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        const m2v dv = m2v_load(dout + i), xv = m2v_load(x + i);
        m2v g = dv;
        if (z) { /* a = dout σ, dy = a z, gz = dout σ (1 + z (1 - σ)) = a + dy (1 - σ) */
            const m2v zv = m2v_load(z + i), sv = m2v_sigmoid(zv), a = m2v_mul(dv, sv);
            g = m2v_mul(a, zv);
            if (gz) m2v_store(gz + i, m2v_fma(g, m2v_sub(one, sv), a));
        }
        m2v_store(u + i, m2v_mul(vw, xv));
        m2v_store(dy + i, g);
        m2v_store(r + i, m2v_mul(vE, g));
        if (dD) m2v_store(dD + i, m2v_fma(g, xv, m2v_load(dD + i)));
    }
    for (; i < n; i++) {
        float g = dout[i];
        if (z) {
            const float sv = 1.0f / (1.0f + expf(-z[i])), a = g * sv;
            g = a * z[i];
            if (gz) gz[i] = a + g * (1.0f - sv);
        }
        u[i] = w * x[i];
        dy[i] = g;
        r[i] = E * g;
        if (dD) dD[i] += g * x[i];
    }
}

/* After the forward sweep of the backward, for one token (ym = Ŝ_{t-1} C_t, the output
 * before the token's update; u = x̂_t; r = E_t dy_t): y = E (ym + cb u) with cb = B_t·C_t
 * (the SSM output S_t C_t, D term excluded), dz = (y + D x) gz (when dz; gz = dout silu'(z)
 * from bwd_prep; y + D x is read from vx, the forward's out_x row, when given, and x is then
 * not read); returns Σ r ym = a_t dy_t·(S_{t-1} C_t) (when ym; else 0). */
static float M2K(bwd_a_out)(int64_t n, float E, float cb, const float *ym, const float *vx,
                            const float *u, const float *r, const float *x, const float *D,
                            const float *gz, float *dz, int stream) {
    const int nt = stream && dz && ((uintptr_t)dz % M2V_STREAM_ALIGN) == 0;
    const m2v vE = m2v_set1(E), vcb = m2v_set1(cb);
    m2v acc = m2v_zero();
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        if (ym) acc = m2v_fma(m2v_load(r + i), m2v_load(ym + i), acc);
        if (dz && (ym || vx)) {
            m2v v;
            if (vx) {
                v = m2v_load(vx + i);
            } else {
                v = m2v_mul(vE, m2v_fma(vcb, m2v_load(u + i), m2v_load(ym + i)));
                if (D) v = m2v_fma(m2v_load(D + i), m2v_load(x + i), v);
            }
            const m2v g = m2v_mul(v, m2v_load(gz + i));
            if (nt)
                m2v_stream(dz + i, g);
            else
                m2v_store(dz + i, g);
        }
    }
    float s = m2v_reduce(acc);
    for (; i < n; i++) {
        if (ym) s += r[i] * ym[i];
        if (dz && (ym || vx)) {
            float v;
            if (vx) {
                v = vx[i];
            } else {
                v = E * (ym[i] + cb * u[i]);
                if (D) v += D[i] * x[i];
            }
            dz[i] = v * gz[i];
        }
    }
    return s;
}


/* After the reverse sweep, for one token (gp = Ĝ_{t+1} B_t, before the token's update;
 * r = E_t dy_t; u = x̂_t): gb = gp + cb r = Ĝ_t B_t, dx = w gb + D dy (when dx),
 * xg[0] = Σ x gb (E_t x_t·G_t B_t), xg[1] = Σ u gp (= a_{t+1} d_t x_t·G_{t+1} B_t). */
static void M2K(bwd_b_out)(int64_t n, float w, float cb, const float *gp, const float *r,
                           const float *u, const float *x, const float *D, const float *dy,
                           float *dx, float *xg, int stream) {
    const m2v vw = m2v_set1(w), vcb = m2v_set1(cb);
    const int nt = stream && dx && ((uintptr_t)dx % M2V_STREAM_ALIGN) == 0;
    m2v a0 = m2v_zero(), a1 = m2v_zero();
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        const m2v g = m2v_load(gp + i);
        const m2v gb = m2v_fma(vcb, m2v_load(r + i), g);
        a0 = m2v_fma(m2v_load(x + i), gb, a0);
        a1 = m2v_fma(m2v_load(u + i), g, a1);
        if (dx) {
            m2v v = m2v_mul(vw, gb);
            if (D) v = m2v_fma(m2v_load(D + i), m2v_load(dy + i), v);
            if (nt)
                m2v_stream(dx + i, v);
            else
                m2v_store(dx + i, v);
        }
    }
    float s0 = m2v_reduce(a0), s1 = m2v_reduce(a1);
    for (; i < n; i++) {
        const float gb = gp[i] + cb * r[i];
        s0 += x[i] * gb;
        s1 += u[i] * gp[i];
        if (dx) {
            float v = w * gb;
            if (D) v += D[i] * dy[i];
            dx[i] = v;
        }
    }
    xg[0] = s0;
    xg[1] = s1;
}

/* Σ a[i] b[i] over n floats: four vector accumulators (fixed lanes), summed in double. */
/* activation rows in their storage dtype <-> float (see kernels.h) */
static void M2K(load_row)(int64_t n, int dtype, const void *src, float *dst) {
    int64_t i = 0;
    if (dtype == MAMBA2_DTYPE_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        for (; i + M2V_LEN <= n; i += M2V_LEN) m2v_store(dst + i, m2v_load_bf16(s + i));
        for (; i < n; i++) dst[i] = m2_bf16_to_f32(s[i]);
    } else if (dtype == MAMBA2_DTYPE_F16) {
        const uint16_t *s = (const uint16_t *)src;
        for (; i + M2V_LEN <= n; i += M2V_LEN) m2v_store(dst + i, m2v_load_f16(s + i));
        for (; i < n; i++) dst[i] = m2_f16_to_f32(s[i]);
    } else {
        const float *s = (const float *)src;
        for (; i < n; i++) dst[i] = s[i];
    }
}
static void M2K(store_row)(int64_t n, int dtype, const float *src, void *dst, int stream) {
    int64_t i = 0;
    if (dtype == MAMBA2_DTYPE_BF16 || dtype == MAMBA2_DTYPE_F16) {
        const int bf = dtype == MAMBA2_DTYPE_BF16;
        uint16_t *d = (uint16_t *)dst;
        if (stream && ((uintptr_t)d % M2V_STREAM_ALIGN) == 0) /* whole lines, no read first */
            for (; i + 2 * M2V_LEN <= n; i += 2 * M2V_LEN) {
                const m2v a = m2v_load(src + i), b = m2v_load(src + i + M2V_LEN);
                if (bf)
                    m2v_stream_bf16x2(d + i, a, b);
                else
                    m2h_stream2(d + i, m2v_to_f16(a), m2v_to_f16(b));
            }
        if (bf) {
            for (; i + M2V_LEN <= n; i += M2V_LEN) m2v_store_bf16(d + i, m2v_load(src + i));
            for (; i < n; i++) d[i] = m2_f32_to_bf16(src[i]);
        } else {
            for (; i + M2V_LEN <= n; i += M2V_LEN) m2v_store_f16(d + i, m2v_load(src + i));
            for (; i < n; i++) d[i] = m2_f32_to_f16(src[i]);
        }
    } else {
        float *d = (float *)dst;
        for (; i < n; i++) d[i] = src[i];
    }
}

static void M2K(axpy)(int64_t n, float a, const float *x, float *y) {
    const m2v va = m2v_set1(a);
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN)
        m2v_store(y + i, m2v_fma(va, m2v_load(x + i), m2v_load(y + i)));
    for (; i < n; i++) y[i] = y[i] + a * x[i];
}

static void M2K(head_sum)(int64_t n, int64_t k, const float *src, int64_t ld, float *dst,
                          int stream) {
    const int nt = stream && ((uintptr_t)dst % M2V_STREAM_ALIGN) == 0;
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        m2v v = m2v_load(src + i);
        for (int64_t q = 1; q < k; q++) v = m2v_add(v, m2v_load(src + q * ld + i));
        if (nt)
            m2v_stream(dst + i, v);
        else
            m2v_store(dst + i, v);
    }
    for (; i < n; i++) {
        float v = src[i];
        for (int64_t q = 1; q < k; q++) v = v + src[q * ld + i];
        dst[i] = v;
    }
}

static double M2K(dot)(int64_t n, const float *a, const float *b) {
    m2v s0 = m2v_zero(), s1 = m2v_zero(), s2 = m2v_zero(), s3 = m2v_zero();
    int64_t i = 0;
    for (; i + 4 * M2V_LEN <= n; i += 4 * M2V_LEN) {
        s0 = m2v_fma(m2v_load(a + i), m2v_load(b + i), s0);
        s1 = m2v_fma(m2v_load(a + i + M2V_LEN), m2v_load(b + i + M2V_LEN), s1);
        s2 = m2v_fma(m2v_load(a + i + 2 * M2V_LEN), m2v_load(b + i + 2 * M2V_LEN), s2);
        s3 = m2v_fma(m2v_load(a + i + 3 * M2V_LEN), m2v_load(b + i + 3 * M2V_LEN), s3);
    }
    /* one lane sum (the backward takes short dots per token: N or P elements, where four
     * lane sums cost more than the products) */
    double r = (double)m2v_reduce(m2v_add(m2v_add(s0, s1), m2v_add(s2, s3)));
    for (; i < n; i++) r += (double)a[i] * (double)b[i];
    return r;
}

/* ---- the table ------------------------------------------------------------------------ */

/* This set's m2_cpu_kernels (ssd_kernels_<isa>.c: `... m2_cpu_kernels_<isa> =
 * M2_SSD_KERNELS("<isa>");`), its tile from the one definition above. */
#define M2_SSD_KERNELS(name)                                                                    \
    {                                                                                           \
        .isa = name, .tile_p = M2_SW_TILE_P, .tile_n = M2_TILE_COLS, .sweep = M2K(sweep),      \
        .sweep_direct = M2K(sweep_direct), .dt_block = M2K(dt_block), .scale = M2K(scale),     \
        .fwd_out = M2K(fwd_out), .bwd_prep = M2K(bwd_prep), .bwd_a_out = M2K(bwd_a_out),       \
        .bwd_b_out = M2K(bwd_b_out), .load_row = M2K(load_row), .store_row = M2K(store_row),   \
        .dot = M2K(dot), .axpy = M2K(axpy), .head_sum = M2K(head_sum),                         \
    }
