/*
 * conv1d_kernels_impl.h — the conv1d kernel text, compiled once per instruction set.
 *
 * Included only by conv1d_kernels_<isa>.c, after M2_SIMD_<ISA> and M2_KSUFFIX (e.g. __avx2)
 * are defined; cpu/simd.h maps the m2v_* names onto that ISA. It defines conv1d_fwd<SUFFIX>,
 * conv1d_bwd<SUFFIX>, conv1d_step<SUFFIX> and conv1d_pack_w<SUFFIX>, which the .c file puts
 * in its m2_conv1d_kernels table.
 *
 * Structure (why it looks like this):
 *  - Channels are the vector dimension (depthwise: no reduction across channels), tokens the
 *    inner loop. For one vector of channels the W weights and the W-value input window live
 *    in registers; each token loads one new input row, so x is read once however wide the
 *    kernel. The window is seeded from the packed history rows (the W-1 inputs before the
 *    block: a conv state or earlier tokens).
 *  - W and the activation are compile-time constants of every kernel body: the public
 *    entry switches over W = 1..8 and the activation, so the k loops unroll completely and
 *    the window shift is register renaming (the fast path for every W, 2..4 included).
 *  - Channels left over after the last full vector run the same loop in scalar float (the
 *    "tail"); in the scalar build the vector is one lane and the tail never runs.
 *  - SiLU uses m2v_exp_neg (the backward: m2v_exp_neg_tab), and the backward splits each
 *    vector's tokens into a compute loop (g) and two short loops (sums, dx): the FMA ports and
 *    the scheduler, not the memory, had bounded the SiLU paths. Rows are prefetched ahead
 *    along the channels (C1_AHEAD). The backward writes dx with non-temporal stores, a whole
 *    line per token, when the caller allows it and the rows are line-aligned: no read of dx
 *    before the write (a quarter of the traffic otherwise).
 *  - With 16 lanes (AVX-512) a vector is a whole line: each dependency chain of the SiLU
 *    backward covers twice the channels of the AVX2 build, which the scheduler overlaps
 *    better (the per-token chain, not the port count, had bounded it). Every lane does the
 *    same float operations in every build; only which channels fall to the scalar tail
 *    (n mod M2V_LEN) differs.
 *  - The decode step reads and writes the channel-major conv cache in place, de-interleaving
 *    a vector of channels in registers (width 4) instead of packing it through a buffer.
 */
#ifndef M2_KSUFFIX
#error "define M2_KSUFFIX before including conv1d_kernels_impl.h"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/conv1d_kernels.h"
#include "cpu/simd.h"

#define C1_CAT2(a, b) a##b
#define C1_CAT(a, b) C1_CAT2(a, b)
#define C1K(name) C1_CAT(name, M2_KSUFFIX)

/* Rows of consecutive tokens are far apart (C floats or more), and a kernel walks a vector
 * column down T rows of each of its arrays at once: more concurrent streams than the hardware
 * prefetchers follow. So each row access also prefetches the same row C1_PF_BYTES further on
 * (the vectors to come; past the block, the task's next channel block). The address is
 * formed as an integer: it may lie past the end of the array, which a prefetch may touch. */
#define C1_PF_BYTES 192
#define C1_AHEAD(p) ((const void *)((uintptr_t)(const void *)(p) + C1_PF_BYTES))
/* The decode step streams one contiguous cache slot (W-1 floats per channel) per row: its
 * prefetch runs further ahead (a cold cache comes from DRAM, and nothing else is in flight). */
#define C1_STEP_PF_BYTES 2048

/* ---- activation ------------------------------------------------------------------- */

/* silu(v) = v / (1 + exp(-v)). The vector form uses m2v_exp_neg (a few ulp, about a quarter
 * fewer ops than m2v_exp): the activation, not the memory, had bounded the SiLU forward.
 * Below the exp's clamp the limit v * 0 (cpu/simd.h, "Saturation"). */
M2_INLINE m2v silu_v(m2v v) {
    return m2v_exp_sat(v, M2_EXP_NEG_LIM, m2v_mul(v, m2v_zero()),
                       m2v_div(v, m2v_add(m2v_set1(1.0f), m2v_exp_neg(v))));
}
M2_INLINE float silu_s(float v) { return v / (1.0f + expf(-v)); }

/* d silu'(v) = d sigmoid(v) (1 + v (1 - sigmoid(v))), the backward's activation term. It
 * bounds the SiLU backward (the FMA ports and the length of each token's dependency chain,
 * which decides how many tokens the scheduler overlaps): m2v_exp_neg_tab (two fewer FMA-port
 * operations, a shorter chain), and d sigmoid formed beside the last FMA, not after it. */
M2_INLINE m2v dsilu_v(m2v d, m2v v) {
    const m2v one = m2v_set1(1.0f);
    const m2v sg = m2v_exp_sat(v, M2_EXP_NEG_LIM, m2v_zero(),
                               m2v_div(one, m2v_add(one, m2v_exp_neg_tab(v)))); /* σ -> +0 */
    return m2v_mul(m2v_mul(d, sg), m2v_fma(v, m2v_sub(one, sg), one));
}
M2_INLINE float silu_grad_s(float v) {
    const float sg = 1.0f / (1.0f + expf(-v));
    return sg * (v * (1.0f - sg) + 1.0f);
}

/* ---- forward ------------------------------------------------------------------------ */

M2_INLINE void fwd_impl(const int W, const int silu, int64_t T, int64_t n, const float *x,
                        int64_t ldx, const float *hist, int64_t ldh, const float *wt,
                        int64_t ldw, const float *bias, float *out, int64_t ldo) {
    int64_t c = 0;
    for (; c + M2V_LEN <= n; c += M2V_LEN) {
        m2v w[M2C1_MAX_W], u[M2C1_MAX_W];
        for (int k = 0; k < W; k++) w[k] = m2v_load(wt + k * ldw + c);
        for (int k = 0; k < W - 1; k++) u[k] = m2v_load(hist + k * ldh + c);
        const m2v b = bias ? m2v_load(bias + c) : m2v_zero();
        for (int64_t t = 0; t < T; t++) {
            m2_prefetch(C1_AHEAD(x + t * ldx + c));
            m2_prefetch_w(C1_AHEAD(out + t * ldo + c));
            u[W - 1] = m2v_load(x + t * ldx + c);
            m2v acc = b;
            for (int k = 0; k < W; k++) acc = m2v_fma(w[k], u[k], acc);
            if (silu) acc = silu_v(acc);
            m2v_store(out + t * ldo + c, acc);
            for (int k = 0; k < W - 1; k++) u[k] = u[k + 1];
        }
    }
    for (; c < n; c++) { /* scalar tail: the same operations, one channel */
        float w[M2C1_MAX_W], u[M2C1_MAX_W];
        for (int k = 0; k < W; k++) w[k] = wt[k * ldw + c];
        for (int k = 0; k < W - 1; k++) u[k] = hist[k * ldh + c];
        const float b = bias ? bias[c] : 0.0f;
        for (int64_t t = 0; t < T; t++) {
            u[W - 1] = x[t * ldx + c];
            float acc = b;
            for (int k = 0; k < W; k++) acc = w[k] * u[k] + acc;
            if (silu) acc = silu_s(acc);
            out[t * ldo + c] = acc;
            for (int k = 0; k < W - 1; k++) u[k] = u[k + 1];
        }
    }
}

/* ---- backward: g, dx, dweight and dbias in one pass over the tokens ------------------ */

/* Vectors per 64-byte line (AVX2: 2, AVX-512: 1): a column of that many vectors writes whole
 * lines of dx, what streaming stores need. The scalar build's lanes do not fill a line in
 * one column (it streams nothing): 1 there keeps bwd_cols' arrays in bounds. */
#define C1_LINE_NV (64 / (M2V_LEN * (int)sizeof(float)))
#define C1_STREAM_NV (C1_LINE_NV <= 2 ? C1_LINE_NV : 1)

/* A column of NV vectors of channels (NV = C1_STREAM_NV: one 64-byte line of a row, or 1)
 * goes through its tokens in sub-chunks of BWD_SUB, each in three short loops over rows that
 * stay in L1: (A) g_t = dout_t act'(pre_t) into a small buffer gb that also holds the W-1
 * gradients before the sub-chunk, (B) the dweight / dbias sums with the input window in
 * registers, both a vector at a time, then (C) dx of input t-W+1 = Σ_k w_k g_{t-k} from gb,
 * the NV vectors of a token together (a whole line of dx per token: what streaming stores
 * need). x, dout and dx each pass through memory once. One loop doing all three would need about 18 vector
 * registers (weights, two windows, five sums): the spilled sums then chain through memory,
 * and the sums would also sit in the scheduler waiting for g's long exp-and-divide chain. */
#define BWD_SUB 16

M2_INLINE void bwd_cols(const int W, const int silu, const int NV, int64_t T, int64_t Tg,
                        int64_t Tacc, int64_t te, int64_t temit, int64_t c, const float *x,
                        int64_t ldx, const float *dout, int64_t lddo, const float *wt,
                        int64_t ldw, const float *bias, float *st, int64_t ldst, float *dx,
                        int64_t lddx, float *dw, float *db, const int nt) {
    m2v u[2][M2C1_MAX_W], dwa[2][M2C1_MAX_W], dwb[2][M2C1_MAX_W], dba[2], dbb[2], b[2];
    m2v gb[2][2 * M2C1_MAX_W - 1 + BWD_SUB];
    for (int h = 0; h < NV; h++) {
        const int64_t ch = c + h * M2V_LEN;
        for (int k = 0; k < W; k++) dwa[h][k] = dwb[h][k] = m2v_zero();
        for (int k = 0; k < W - 1; k++) {
            u[h][k] = m2v_load(st + k * ldst + ch);
            gb[h][k] = m2v_load(st + (W - 1 + k) * ldst + ch);
        }
        b[h] = bias ? m2v_load(bias + ch) : m2v_zero();
        dba[h] = dbb[h] = m2v_zero();
    }
    for (int64_t t0 = 0, t1; t0 < T; t0 = t1) {
        t1 = T - t0 < BWD_SUB + M2C1_MAX_W ? T : t0 + BWD_SUB; /* no short remainder */
        const int64_t tg = t1 < Tg ? t1 : Tg, ta = t1 < Tacc ? t1 : Tacc;
        for (int h = 0; h < NV; h++) {
            const int64_t ch = c + h * M2V_LEN;
            m2v *g = gb[h] + (W - 1); /* g[t - t0] = g_t for t0-W+1 <= t < t1 */
            { /* (A) */
                m2v w[M2C1_MAX_W], v[M2C1_MAX_W];
                for (int k = 0; k < W; k++) w[k] = m2v_load(wt + k * ldw + ch);
                for (int k = 0; k < W - 1; k++) v[k] = u[h][k];
                int64_t t = t0;
                for (; t < tg; t++) {
                    if (h == 0) { /* one line of each row serves the NV vectors */
                        m2_prefetch(C1_AHEAD(dout + t * lddo + ch));
                        m2_prefetch(C1_AHEAD(x + t * ldx + ch));
                    }
                    const m2v d = m2v_load(dout + t * lddo + ch);
                    if (silu) {
                        v[W - 1] = m2v_load(x + t * ldx + ch);
                        /* two half sums: a shorter chain ahead of the activation */
                        m2v pre = b[h], p2 = m2v_zero();
                        for (int k = 0; k < (W + 1) / 2; k++) pre = m2v_fma(w[k], v[k], pre);
                        if (W > 1) p2 = m2v_mul(w[(W + 1) / 2], v[(W + 1) / 2]);
                        for (int k = (W + 1) / 2 + 1; k < W; k++) p2 = m2v_fma(w[k], v[k], p2);
                        if (W > 1) pre = m2v_add(pre, p2);
                        g[t - t0] = dsilu_v(d, pre);
                        for (int k = 0; k < W - 1; k++) v[k] = v[k + 1];
                    } else {
                        g[t - t0] = d;
                    }
                }
                for (; t < t1; t++) g[t - t0] = m2v_zero(); /* past the sequence end */
            }
            { /* (B): two sets of sums (even and odd tokens) halve the FMA chains */
                m2v *uh = u[h], *wa = dwa[h], *wb = dwb[h];
                int64_t t = t0;
                for (; t + 1 < ta; t += 2) {
                    uh[W - 1] = m2v_load(x + t * ldx + ch);
                    const m2v g0 = g[t - t0];
                    dba[h] = m2v_add(dba[h], g0);
                    for (int k = 0; k < W; k++) wa[k] = m2v_fma(g0, uh[k], wa[k]);
                    for (int k = 0; k < W - 1; k++) uh[k] = uh[k + 1];
                    uh[W - 1] = m2v_load(x + (t + 1) * ldx + ch);
                    const m2v g1 = g[t + 1 - t0];
                    dbb[h] = m2v_add(dbb[h], g1);
                    for (int k = 0; k < W; k++) wb[k] = m2v_fma(g1, uh[k], wb[k]);
                    for (int k = 0; k < W - 1; k++) uh[k] = uh[k + 1];
                }
                for (; t < ta; t++) {
                    uh[W - 1] = m2v_load(x + t * ldx + ch);
                    const m2v gt = g[t - t0];
                    dba[h] = m2v_add(dba[h], gt);
                    for (int k = 0; k < W; k++) wa[k] = m2v_fma(gt, uh[k], wa[k]);
                    for (int k = 0; k < W - 1; k++) uh[k] = uh[k + 1];
                }
                for (; t < t1; t++) { /* the look-ahead: the window moves on, no sums */
                    uh[W - 1] = t < Tg ? m2v_load(x + t * ldx + ch) : m2v_zero();
                    for (int k = 0; k < W - 1; k++) uh[k] = uh[k + 1];
                }
            }
        }
        { /* (C) */
            m2v w[2][M2C1_MAX_W];
            for (int h = 0; h < NV; h++)
                for (int k = 0; k < W; k++) w[h][k] = m2v_load(wt + k * ldw + c + h * M2V_LEN);
            for (int64_t t = t0 > te ? t0 : te; t < t1; t++) { /* oldest g first */
                float *row = dx + (t - temit) * lddx + c;
                for (int h = 0; h < NV; h++) {
                    const m2v *g = gb[h] + (W - 1);
                    m2v acc = m2v_mul(w[h][W - 1], g[t - t0 - W + 1]);
                    for (int k = W - 2; k >= 0; k--) acc = m2v_fma(w[h][k], g[t - t0 - k], acc);
                    if (nt) {
                        m2v_stream(row + h * M2V_LEN, acc);
                    } else {
                        m2_prefetch_w(C1_AHEAD(row + h * M2V_LEN));
                        m2v_store(row + h * M2V_LEN, acc);
                    }
                }
            }
        }
        for (int h = 0; h < NV; h++)
            for (int k = 0; k < W - 1; k++) gb[h][k] = gb[h][t1 - t0 + k];
    }
    for (int h = 0; h < NV; h++) {
        const int64_t ch = c + h * M2V_LEN;
        for (int k = 0; k < W - 1; k++) {
            m2v_store(st + k * ldst + ch, u[h][k]);
            m2v_store(st + (W - 1 + k) * ldst + ch, gb[h][k]);
        }
        if (Tacc > 0) {
            for (int k = 0; k < W; k++)
                m2v_store(dw + k * ldw + ch,
                          m2v_add(m2v_load(dw + k * ldw + ch), m2v_add(dwa[h][k], dwb[h][k])));
            m2v_store(db + ch, m2v_add(m2v_load(db + ch), m2v_add(dba[h], dbb[h])));
        }
    }
}

M2_INLINE void bwd_impl(const int W, const int silu, int64_t T, int64_t Tg, int64_t Tacc,
                        int64_t temit, int64_t n, const float *x, int64_t ldx,
                        const float *dout, int64_t lddo, const float *wt, int64_t ldw,
                        const float *bias, float *st, int64_t ldst, float *dx, int64_t lddx,
                        float *dw, float *db, int stream) {
    const int64_t te = dx ? temit : T; /* no dx wanted: emit nothing */
    /* Streaming stores need each dx row's column of C1_STREAM_NV vectors on one whole line */
    const int nt = stream && dx && C1_STREAM_NV * M2V_LEN * (int)sizeof(float) == 64 &&
                   ((uintptr_t)dx % 64 == 0) && ((uintptr_t)lddx * sizeof(float)) % 64 == 0;
    int64_t c = 0;
    if (nt)
        for (; c + C1_STREAM_NV * M2V_LEN <= n; c += C1_STREAM_NV * M2V_LEN)
            bwd_cols(W, silu, C1_STREAM_NV, T, Tg, Tacc, te, temit, c, x, ldx, dout, lddo, wt,
                     ldw, bias, st, ldst, dx, lddx, dw, db, 1);
    for (; c + M2V_LEN <= n; c += M2V_LEN)
        bwd_cols(W, silu, 1, T, Tg, Tacc, te, temit, c, x, ldx, dout, lddo, wt, ldw, bias, st,
                 ldst, dx, lddx, dw, db, 0);
    for (; c < n; c++) { /* scalar tail */
        float w[M2C1_MAX_W], u[M2C1_MAX_W], g[M2C1_MAX_W], dwa[M2C1_MAX_W];
        for (int k = 0; k < W; k++) {
            w[k] = wt[k * ldw + c];
            dwa[k] = 0.0f;
        }
        for (int k = 0; k < W - 1; k++) {
            u[k] = st[k * ldst + c];
            g[k] = st[(W - 1 + k) * ldst + c];
        }
        const float b = bias ? bias[c] : 0.0f;
        float dba = 0.0f;
        for (int64_t t = 0; t < T; t++) {
            if (t < Tg) {
                u[W - 1] = x[t * ldx + c];
                float gt = dout[t * lddo + c];
                if (silu) {
                    float pre = b;
                    for (int k = 0; k < W; k++) pre = w[k] * u[k] + pre;
                    gt = gt * silu_grad_s(pre);
                }
                g[W - 1] = gt;
                if (t < Tacc) {
                    dba = dba + gt;
                    for (int k = 0; k < W; k++) dwa[k] = gt * u[k] + dwa[k];
                }
            } else {
                u[W - 1] = 0.0f;
                g[W - 1] = 0.0f;
            }
            if (t >= te) {
                float acc = w[W - 1] * g[0];
                for (int k = 1; k < W; k++) acc = w[W - 1 - k] * g[k] + acc;
                dx[(t - temit) * lddx + c] = acc;
            }
            for (int k = 0; k < W - 1; k++) {
                u[k] = u[k + 1];
                g[k] = g[k + 1];
            }
        }
        for (int k = 0; k < W - 1; k++) {
            st[k * ldst + c] = u[k];
            st[(W - 1 + k) * ldst + c] = g[k];
        }
        if (Tacc > 0) {
            for (int k = 0; k < W; k++) dw[k * ldw + c] += dwa[k];
            db[c] += dba;
        }
    }
}

/* ---- decode step ---------------------------------------------------------------------- */

/* The cache row of a vector of channels is W-1 interleaved floats per channel: width 4 (the
 * Mamba-2 default) de-interleaves in registers (m2v_load_deint3 / m2v_store_int3), other
 * widths through a small buffer. The arithmetic is fwd's, lane for lane. */
M2_INLINE void step_impl(const int W, const int silu, int64_t n, const float *x, float *cache,
                         const float *wt, int64_t ldw, const float *bias, float *out) {
    const int W1 = W - 1;
    int64_t c = 0;
    for (; c + M2V_LEN <= n; c += M2V_LEN) {
        m2v u[M2C1_MAX_W];
        float *cc = cache + c * W1;
        /* one prefetch per whole line the iteration moves, at least one (AVX-512: 3 at W=4) */
        for (int64_t o = 0; o == 0 || o + 64 <= M2V_LEN * W1 * (int64_t)sizeof(float); o += 64)
            m2_prefetch_w((const void *)((uintptr_t)cc + C1_STEP_PF_BYTES + (uintptr_t)o));
        if (W == 4) {
            m2v_load_deint3(cc, &u[0], &u[1], &u[2]);
        } else if (W == 2) {
            u[0] = m2v_load(cc);
        } else {
            float buf[M2C1_MAX_W - 1][M2V_LEN];
            for (int l = 0; l < M2V_LEN; l++)
                for (int k = 0; k < W1; k++) buf[k][l] = cc[l * W1 + k];
            for (int k = 0; k < W1; k++) u[k] = m2v_load(buf[k]);
        }
        u[W1] = m2v_load(x + c);
        m2v acc = bias ? m2v_load(bias + c) : m2v_zero();
        for (int k = 0; k < W; k++) acc = m2v_fma(m2v_load(wt + k * ldw + c), u[k], acc);
        if (silu) acc = silu_v(acc);
        m2v_store(out + c, acc);
        if (W == 4) {
            m2v_store_int3(cc, u[1], u[2], u[3]);
        } else if (W == 2) {
            m2v_store(cc, u[1]);
        } else if (W > 1) {
            float buf[M2C1_MAX_W - 1][M2V_LEN];
            for (int k = 0; k < W1; k++) m2v_store(buf[k], u[k + 1]);
            for (int l = 0; l < M2V_LEN; l++)
                for (int k = 0; k < W1; k++) cc[l * W1 + k] = buf[k][l];
        }
    }
    for (; c < n; c++) { /* scalar tail: fwd's tail operations */
        float u[M2C1_MAX_W];
        float *cc = cache + c * W1;
        for (int k = 0; k < W1; k++) u[k] = cc[k];
        u[W1] = x[c];
        float acc = bias ? bias[c] : 0.0f;
        for (int k = 0; k < W; k++) acc = wt[k * ldw + c] * u[k] + acc;
        if (silu) acc = silu_s(acc);
        out[c] = acc;
        for (int k = 0; k < W1; k++) cc[k] = u[k + 1];
    }
}

/* ---- weight packing ------------------------------------------------------------------- */

M2_INLINE void pack_w_impl(const int W, int64_t n, const float *w, int64_t lds, float *wt,
                           int64_t ldw) {
    int64_t c = 0;
    if (W == 4 && lds == 4)
        for (; c + M2V_LEN <= n; c += M2V_LEN) {
            m2v a, b, d, e;
            m2v_load_deint4(w + c * 4, &a, &b, &d, &e);
            m2v_store(wt + c, a);
            m2v_store(wt + ldw + c, b);
            m2v_store(wt + 2 * ldw + c, d);
            m2v_store(wt + 3 * ldw + c, e);
        }
    for (; c < n; c++)
        for (int k = 0; k < W; k++) wt[k * ldw + c] = w[c * lds + k];
}

/* ---- entry points: W and the activation become constants --------------------------- */

#define C1_FOR_EACH_W(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)

#define C1_FWD_CASE(WW)                                                                    \
    case WW:                                                                               \
        if (silu) fwd_impl(WW, 1, T, n, x, ldx, hist, ldh, wt, ldw, bias, out, ldo);       \
        else fwd_impl(WW, 0, T, n, x, ldx, hist, ldh, wt, ldw, bias, out, ldo);            \
        break;

static void C1K(conv1d_fwd)(int64_t W, int silu, int64_t T, int64_t n, const float *x,
                             int64_t ldx, const float *hist, int64_t ldh, const float *wt,
                             int64_t ldw, const float *bias, float *out, int64_t ldo) {
    switch (W) {
        C1_FOR_EACH_W(C1_FWD_CASE)
    default: break; /* W is validated to 1..8 */
    }
}

#define C1_BWD_CASE(WW)                                                                    \
    case WW:                                                                               \
        if (silu)                                                                          \
            bwd_impl(WW, 1, T, Tg, Tacc, temit, n, x, ldx, dout, lddo, wt, ldw, bias, st,  \
                     ldst, dx, lddx, dw, db, stream);                                      \
        else                                                                               \
            bwd_impl(WW, 0, T, Tg, Tacc, temit, n, x, ldx, dout, lddo, wt, ldw, bias, st,  \
                     ldst, dx, lddx, dw, db, stream);                                      \
        break;

static void C1K(conv1d_bwd)(int64_t W, int silu, int64_t T, int64_t Tg, int64_t Tacc,
                            int64_t temit, int64_t n, const float *x, int64_t ldx,
                            const float *dout, int64_t lddo, const float *wt, int64_t ldw,
                            const float *bias, float *st, int64_t ldst, float *dx, int64_t lddx,
                            float *dw, float *db, int stream) {
    switch (W) {
        C1_FOR_EACH_W(C1_BWD_CASE)
    default: break;
    }
}

#define C1_STEP_CASE(WW)                                                                   \
    case WW:                                                                               \
        if (silu) step_impl(WW, 1, n, x, cache, wt, ldw, bias, out);                       \
        else step_impl(WW, 0, n, x, cache, wt, ldw, bias, out);                            \
        break;

static void C1K(conv1d_step)(int64_t W, int silu, int64_t n, const float *x, float *cache,
                             const float *wt, int64_t ldw, const float *bias, float *out) {
    switch (W) {
        C1_FOR_EACH_W(C1_STEP_CASE)
    default: break;
    }
}

static void C1K(conv1d_stream_fence)(void) { m2_stream_fence(); }

static void C1K(conv1d_pack_w)(int64_t W, int64_t n, const float *w, int64_t lds, float *wt,
                               int64_t ldw) {
    if (W == 4)
        pack_w_impl(4, n, w, lds, wt, ldw);
    else
        pack_w_impl((int)W, n, w, lds, wt, ldw);
}
