/*
 * ssd_chunked_kernels_impl.h — the staged SSD kernel text, compiled once per instruction set.
 *
 * Included only by ssd_chunked_kernels_<isa>.c, after M2_SIMD_<ISA> and M2_KSUFFIX (e.g.
 * __avx2) are defined; cpu/simd.h maps the m2v_* names onto that ISA. It defines the
 * chunk_*<SUFFIX> kernels the .c file puts in its m2_ssd_chunk_kernels table.
 *
 * Structure (why it looks like this):
 *  - The three heavy stages are small matrix products per (row, chunk, head or group), all
 *    with the contiguous dimension of the operands in memory:
 *      bmm_chunk      CB = C Bᵀ             rows of C and B are contiguous over N  -> dots
 *      chunk_state    states = (w ⊙ X)ᵀ B   rows of B are contiguous over N        -> rank_update
 *      chunk_scan     C_i · S_start[p,:]    rows of both contiguous over N         -> dots
 *                     Σ_j W[i,j] x_j        rows of x are contiguous over P        -> rank_update
 *    so no operand is ever transposed or packed, and no scratch is needed.
 *  - dots keeps a 4 x 2 tile of vector accumulators (8 registers, 6 loads per 8 FMAs) and
 *    reduces each once (m2v_reduce4, also for partial tiles, so every element is summed in
 *    the same order); rank_update keeps a 4-row x 16-column tile in registers across the
 *    whole rank J, broadcasting one scalar per row and j. Both handle their own edges: rows
 *    left over from the 4-row tiles run the same code with fewer rows (compile-time R),
 *    columns left over from the vector blocks run a scalar tail.
 *  - exp is evaluated a vector at a time (m2v_exp) in weights, which folds the decay
 *    exp(cs_ref - cs_j), the step d_j and (chunk_scan) CB[i,j] into one weight per j.
 */
#ifndef M2_KSUFFIX
#error "define M2_KSUFFIX before including ssd_chunked_kernels_impl.h"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/simd.h"
#include "cpu/ssd_chunked_kernels.h"

#define CK_CAT2(a, b) a##b
#define CK_CAT(a, b)  CK_CAT2(a, b)
#define CK(name)      CK_CAT(name, M2_KSUFFIX)

/* ---- dots: Y[i,j] = alpha_i A_i · Bt_j ------------------------------------------------- */

/* One tile of R (<= 4) rows of A x C (<= 2) rows of Bt. */
M2_INLINE void dots_tile(const int R, const int C, int64_t K, const float *A, int64_t lda,
                         const float *Bt, int64_t ldb, const float *alpha, float *Y, int64_t ldy) {
    m2v acc[4][2];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 2; c++) acc[r][c] = m2v_zero();
    int64_t n = 0;
    for (; n + M2V_LEN <= K; n += M2V_LEN) {
        m2v vb[2];
        for (int c = 0; c < C; c++) vb[c] = m2v_load(Bt + c * ldb + n);
        for (int r = 0; r < R; r++) {
            const m2v va = m2v_load(A + r * lda + n);
            for (int c = 0; c < C; c++) acc[r][c] = m2v_fma(va, vb[c], acc[r][c]);
        }
    }
    float s[2][4];
    for (int c = 0; c < C; c++) m2v_reduce4(acc[0][c], acc[1][c], acc[2][c], acc[3][c], s[c]);
    for (; n < K; n++) /* scalar tail of K */
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) s[c][r] += A[r * lda + n] * Bt[c * ldb + n];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) Y[r * ldy + c] = alpha ? alpha[r] * s[c][r] : s[c][r];
}

M2_INLINE void dots_rows(const int R, int64_t Nc, int64_t K, const float *A, int64_t lda,
                         const float *Bt, int64_t ldb, const float *alpha, float *Y, int64_t ldy) {
    int64_t j = 0;
    for (; j + 2 <= Nc; j += 2) dots_tile(R, 2, K, A, lda, Bt + j * ldb, ldb, alpha, Y + j, ldy);
    if (j < Nc) dots_tile(R, 1, K, A, lda, Bt + j * ldb, ldb, alpha, Y + j, ldy);
}

static void CK(chunk_dots)(int64_t M, int64_t Nc, int64_t K, const float *A, int64_t lda,
                           const float *Bt, int64_t ldb, const float *alpha, float *Y,
                           int64_t ldy) {
    int64_t i = 0;
    for (; i + 4 <= M; i += 4)
        dots_rows(4, Nc, K, A + i * lda, lda, Bt, ldb, alpha ? alpha + i : NULL, Y + i * ldy, ldy);
    const float *Ai = A + i * lda, *al = alpha ? alpha + i : NULL;
    float *Yi = Y + i * ldy;
    switch (M - i) {
    case 3: dots_rows(3, Nc, K, Ai, lda, Bt, ldb, al, Yi, ldy); break;
    case 2: dots_rows(2, Nc, K, Ai, lda, Bt, ldb, al, Yi, ldy); break;
    case 1: dots_rows(1, Nc, K, Ai, lda, Bt, ldb, al, Yi, ldy); break;
    default: break;
    }
}

/* ---- rank_update: Y[r,:] (+)= Σ_j a_rj Bv_j ---------------------------------------------- */

/* R (<= 4) rows x V (<= 2) vectors of columns. */
M2_INLINE void ru_tile(const int R, const int V, int64_t J, const float *A, int64_t ars,
                       int64_t ajs, const float *w, const float *Bv, int64_t ldb, float *Y,
                       int64_t ldy, int accumulate) {
    m2v acc[4][2];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++)
            acc[r][v] = accumulate ? m2v_load(Y + r * ldy + v * M2V_LEN) : m2v_zero();
    for (int64_t j = 0; j < J; j++) {
        m2v vb[2];
        for (int v = 0; v < V; v++) vb[v] = m2v_load(Bv + j * ldb + v * M2V_LEN);
        for (int r = 0; r < R; r++) {
            float ar = A[r * ars + j * ajs];
            if (w) ar *= w[j];
            const m2v va = m2v_set1(ar);
            for (int v = 0; v < V; v++) acc[r][v] = m2v_fma(va, vb[v], acc[r][v]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) m2v_store(Y + r * ldy + v * M2V_LEN, acc[r][v]);
}

/* R rows x one column (the scalar tail of the columns). */
M2_INLINE void ru_col(const int R, int64_t J, const float *A, int64_t ars, int64_t ajs,
                      const float *w, const float *Bv, int64_t ldb, float *Y, int64_t ldy,
                      int accumulate) {
    float s[4];
    for (int r = 0; r < R; r++) s[r] = accumulate ? Y[r * ldy] : 0.0f;
    for (int64_t j = 0; j < J; j++) {
        const float b = Bv[j * ldb];
        for (int r = 0; r < R; r++) {
            float ar = A[r * ars + j * ajs];
            if (w) ar *= w[j];
            s[r] += ar * b;
        }
    }
    for (int r = 0; r < R; r++) Y[r * ldy] = s[r];
}

M2_INLINE void ru_rows(const int R, int64_t Nc, int64_t J, const float *A, int64_t ars, int64_t ajs,
                       const float *w, const float *Bv, int64_t ldb, float *Y, int64_t ldy,
                       int accumulate) {
    int64_t c = 0;
    for (; c + 2 * M2V_LEN <= Nc; c += 2 * M2V_LEN)
        ru_tile(R, 2, J, A, ars, ajs, w, Bv + c, ldb, Y + c, ldy, accumulate);
    for (; c + M2V_LEN <= Nc; c += M2V_LEN)
        ru_tile(R, 1, J, A, ars, ajs, w, Bv + c, ldb, Y + c, ldy, accumulate);
    for (; c < Nc; c++) ru_col(R, J, A, ars, ajs, w, Bv + c, ldb, Y + c, ldy, accumulate);
}

static void CK(chunk_rank_update)(int64_t R, int64_t Nc, int64_t J, const float *A, int64_t ars,
                                  int64_t ajs, const float *w, const float *Bv, int64_t ldb,
                                  float *Y, int64_t ldy, int accumulate) {
    int64_t r = 0;
    for (; r + 4 <= R; r += 4)
        ru_rows(4, Nc, J, A + r * ars, ars, ajs, w, Bv, ldb, Y + r * ldy, ldy, accumulate);
    const float *Ar = A + r * ars;
    float *Yr = Y + r * ldy;
    switch (R - r) {
    case 3: ru_rows(3, Nc, J, Ar, ars, ajs, w, Bv, ldb, Yr, ldy, accumulate); break;
    case 2: ru_rows(2, Nc, J, Ar, ars, ajs, w, Bv, ldb, Yr, ldy, accumulate); break;
    case 1: ru_rows(1, Nc, J, Ar, ars, ajs, w, Bv, ldb, Yr, ldy, accumulate); break;
    default: break;
    }
}

/* ---- elementwise ---------------------------------------------------------------------- */

static void CK(chunk_weights)(int64_t n, float ref, const float *cs, const float *d,
                              const float *cb, float *w) {
    const m2v vr = m2v_set1(ref);
    int64_t j = 0;
    for (; j + M2V_LEN <= n; j += M2V_LEN) {
        m2v v = m2v_mul(m2v_exp(m2v_sub(vr, m2v_load(cs + j))), m2v_load(d + j));
        if (cb) v = m2v_mul(v, m2v_load(cb + j));
        m2v_store(w + j, v);
    }
    for (; j < n; j++) {
        float v = expf(ref - cs[j]) * d[j];
        if (cb) v *= cb[j];
        w[j] = v;
    }
}

static void CK(chunk_decay_add)(int64_t n, float a, const float *S, const float *X, float *out) {
    const m2v va = m2v_set1(a);
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN)
        m2v_store(out + i, m2v_fma(va, m2v_load(S + i), m2v_load(X + i)));
    for (; i < n; i++) out[i] = a * S[i] + X[i];
}

/* silu(v) = v / (1 + e^-v); v * 0 below the exp's clamp (cpu/simd.h, "Saturation") */
M2_INLINE m2v chunk_silu_v(m2v v) {
    return m2v_exp_sat(v, M2_EXP_NEG_LIM, m2v_mul(v, m2v_zero()),
                       m2v_div(v, m2v_add(m2v_set1(1.0f), m2v_exp(m2v_sub(m2v_zero(), v)))));
}
M2_INLINE float chunk_silu_s(float v) { return v / (1.0f + expf(-v)); }

static void CK(chunk_epilogue)(int64_t n, const float *y, const float *x, const float *D,
                               int64_t Ds, const float *z, float *out) {
    int64_t i = 0;
    for (; i + M2V_LEN <= n; i += M2V_LEN) {
        m2v v = m2v_load(y + i);
        if (D) v = m2v_fma(Ds ? m2v_load(D + i) : m2v_set1(D[0]), m2v_load(x + i), v);
        if (z) v = m2v_mul(v, chunk_silu_v(m2v_load(z + i)));
        m2v_store(out + i, v);
    }
    for (; i < n; i++) {
        float v = y[i];
        if (D) v += D[i * Ds] * x[i];
        if (z) v *= chunk_silu_s(z[i]);
        out[i] = v;
    }
}
