/*
 * conv1d_kernels_impl.h — the conv1d kernel text, compiled once per instruction set.
 *
 * Included only by conv1d_kernels_<isa>.c, after M2_SIMD_<ISA> and M2_KSUFFIX (e.g. __avx2)
 * are defined; cpu/simd.h maps the m2v_* names onto that ISA. It defines conv1d_fwd<SUFFIX>
 * and conv1d_bwd_g<SUFFIX>, which the .c file puts in its m2_conv1d_kernels table.
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

/* ---- activation ------------------------------------------------------------------- */

/* silu(v) = v / (1 + exp(-v)) */
M2_INLINE m2v silu_v(m2v v) {
    return m2v_div(v, m2v_add(m2v_set1(1.0f), m2v_exp(m2v_sub(m2v_zero(), v))));
}
M2_INLINE float silu_s(float v) { return v / (1.0f + expf(-v)); }

/* silu'(v) = sigmoid(v) (1 + v (1 - sigmoid(v))) */
M2_INLINE m2v silu_grad_v(m2v v) {
    const m2v one = m2v_set1(1.0f);
    const m2v sg = m2v_div(one, m2v_add(one, m2v_exp(m2v_sub(m2v_zero(), v))));
    return m2v_mul(sg, m2v_fma(v, m2v_sub(one, sg), one));
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

/* ---- backward: g_t = dout_t act'(pre_t), and the weight / bias sums ------------------ */

M2_INLINE void bwd_g_impl(const int W, const int silu, int64_t T, int64_t Tacc, int64_t n,
                          const float *x, int64_t ldx, const float *hist, int64_t ldh,
                          const float *wt, int64_t ldw, const float *bias, const float *dout,
                          int64_t lddo, float *G, int64_t ldg, float *dw, float *db) {
    int64_t c = 0;
    for (; c + M2V_LEN <= n; c += M2V_LEN) {
        m2v w[M2C1_MAX_W], u[M2C1_MAX_W], dwa[M2C1_MAX_W];
        for (int k = 0; k < W; k++) {
            w[k] = m2v_load(wt + k * ldw + c);
            dwa[k] = m2v_zero();
        }
        for (int k = 0; k < W - 1; k++) u[k] = m2v_load(hist + k * ldh + c);
        const m2v b = bias ? m2v_load(bias + c) : m2v_zero();
        m2v dba = m2v_zero();
        for (int64_t t = 0; t < T; t++) {
            u[W - 1] = m2v_load(x + t * ldx + c);
            m2v g = m2v_load(dout + t * lddo + c);
            if (silu) {
                m2v pre = b;
                for (int k = 0; k < W; k++) pre = m2v_fma(w[k], u[k], pre);
                g = m2v_mul(g, silu_grad_v(pre));
            }
            m2v_store(G + t * ldg + c, g);
            if (t < Tacc) {
                dba = m2v_add(dba, g);
                for (int k = 0; k < W; k++) dwa[k] = m2v_fma(g, u[k], dwa[k]);
            }
            for (int k = 0; k < W - 1; k++) u[k] = u[k + 1];
        }
        for (int k = 0; k < W; k++)
            m2v_store(dw + k * ldw + c, m2v_add(m2v_load(dw + k * ldw + c), dwa[k]));
        m2v_store(db + c, m2v_add(m2v_load(db + c), dba));
    }
    for (; c < n; c++) { /* scalar tail */
        float w[M2C1_MAX_W], u[M2C1_MAX_W], dwa[M2C1_MAX_W];
        for (int k = 0; k < W; k++) {
            w[k] = wt[k * ldw + c];
            dwa[k] = 0.0f;
        }
        for (int k = 0; k < W - 1; k++) u[k] = hist[k * ldh + c];
        const float b = bias ? bias[c] : 0.0f;
        float dba = 0.0f;
        for (int64_t t = 0; t < T; t++) {
            u[W - 1] = x[t * ldx + c];
            float g = dout[t * lddo + c];
            if (silu) {
                float pre = b;
                for (int k = 0; k < W; k++) pre = w[k] * u[k] + pre;
                g = g * silu_grad_s(pre);
            }
            G[t * ldg + c] = g;
            if (t < Tacc) {
                dba = dba + g;
                for (int k = 0; k < W; k++) dwa[k] = g * u[k] + dwa[k];
            }
            for (int k = 0; k < W - 1; k++) u[k] = u[k + 1];
        }
        for (int k = 0; k < W; k++) dw[k * ldw + c] += dwa[k];
        db[c] += dba;
    }
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
            bwd_g_impl(WW, 1, T, Tacc, n, x, ldx, hist, ldh, wt, ldw, bias, dout, lddo, G, \
                       ldg, dw, db);                                                       \
        else                                                                               \
            bwd_g_impl(WW, 0, T, Tacc, n, x, ldx, hist, ldh, wt, ldw, bias, dout, lddo, G, \
                       ldg, dw, db);                                                       \
        break;

static void C1K(conv1d_bwd_g)(int64_t W, int silu, int64_t T, int64_t Tacc, int64_t n,
                               const float *x, int64_t ldx, const float *hist, int64_t ldh,
                               const float *wt, int64_t ldw, const float *bias,
                               const float *dout, int64_t lddo, float *G, int64_t ldg, float *dw,
                               float *db) {
    switch (W) {
        C1_FOR_EACH_W(C1_BWD_CASE)
    default: break;
    }
}
