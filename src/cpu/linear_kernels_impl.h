/*
 * linear_kernels_impl.h — the decode linear-layer kernel text, compiled once per instruction
 * set.
 *
 * Included only by linear_kernels_<isa>.c after it defines M2_SIMD_<ISA> and M2_KSUFFIX;
 * defines the tile kernels lin_<format>_<NR>x<MB><suffix> and the M2_LIN_TABLE initializer
 * for the table in that file.
 *
 * One body per weight format (f32, bf16, q8_0), inlined with constant NR and MB so that the
 * NR x MB accumulators live in registers. The decode products read every weight once and x
 * (a few KiB) from cache: a tile streams NR weight rows side by side (NR independent
 * accumulator chains, enough to cover the FMA latency at memory speed) and shares each
 * widened weight vector between the MB rows of x.
 *   f32, bf16:  two accumulators per output, a0 += w ⊙ x over the even vectors of M2V_LEN
 *               and a1 over the odd ones (an odd last vector goes to a0), then the lanes of
 *               a0 + a1 summed (m2v_reduce), then the scalar tail i in [I - I % M2V_LEN, I)
 *               added in order.
 *   q8_0:       per 32-element block, t = Σ_j q_j ⊙ x_j over its 32 / M2V_LEN vectors in
 *               order (q widened to float exactly), then a_(b mod 2) += t * d (the block's
 *               f16 scale); the lanes of a0 + a1 summed at the end. x is not quantized: the
 *               only roundings are float32's. (Splitting t into even / odd chains measured
 *               ~4% slower in cache: the blocks' chains already overlap.)
 * Software prefetch (PF = 1): a tile reads NR consecutive rows side by side, so each row is a
 * short stream (a 1024-wide Q8_0 row is 17 cache lines) that the hardware prefetchers barely
 * learn before it ends; each load is paired with a prefetch of the same column NR rows further
 * on, the next tile's (prefetches never fault, past the end of the weight included). The
 * 4x1s tile (PF = 0) is the 4x1 tile without it, for rows far apart: linear_cpu.c passes a
 * row stride of 16 rows so that the 4 rows are 4 long streams (16 rows each, back to back),
 * which the hardware prefetchers follow (docs/decode.md, "Four streams").
 * Two chains per output because a decode tile is bound by the latency of its
 * accumulator chains, not by the FMA throughput: 4 rows x 1 chain of 4-5-cycle FMAs read 32
 * floats per latency, about what one core streams from memory.
 * The bf16 widening is exact, so a bf16 weight gives the bits its float32 copy would.
 */
#ifndef M2_KSUFFIX
#error "define M2_KSUFFIX before including linear_kernels_impl.h"
#endif

#include <stddef.h>
#include <stdint.h>

#include "core/half.h"
#include "cpu/linear_kernels.h"
#include "cpu/simd.h"

#define M2L_CAT2(a, b) a##b
#define M2L_CAT(a, b) M2L_CAT2(a, b)
#define M2L(name) M2L_CAT(name, M2_KSUFFIX)

#define M2L_NRMAX 4
#define M2L_MBMAX 2

/* a0 + a1, lanes summed, then the tail of each (r, m) (f32 and bf16; tail from i0 on). */
#define M2L_FINISH(TAIL_W)                                                                     \
    for (int r = 0; r < NR; r++)                                                               \
        for (int m = 0; m < MB; m++) {                                                         \
            float s = m2v_reduce(m2v_add(acc[r][m], acc1[r][m]));                              \
            const float *xm = x + m * xs;                                                      \
            for (int64_t k = i0; k < I; k++) s += (TAIL_W) * xm[k];                            \
            res[m * 4 + r] = s;                                                                \
        }

M2_INLINE void lin_f32_body(const int NR, const int MB, const int PF, int64_t I, const unsigned char *w,
                            int64_t wrb, const float *x, int64_t xs, float *res) {
    m2v acc[M2L_NRMAX][M2L_MBMAX], acc1[M2L_NRMAX][M2L_MBMAX];
    for (int r = 0; r < NR; r++)
        for (int m = 0; m < MB; m++) acc[r][m] = acc1[r][m] = m2v_zero();
    int64_t i = 0;
    for (; i + 2 * M2V_LEN <= I; i += 2 * M2V_LEN) {
        m2v xv[M2L_MBMAX], xw[M2L_MBMAX];
        for (int m = 0; m < MB; m++) {
            xv[m] = m2v_load(x + m * xs + i);
            xw[m] = m2v_load(x + m * xs + i + M2V_LEN);
        }
        for (int r = 0; r < NR; r++) {
            for (int pf = 0; PF && pf < 2 * M2V_LEN * 4; pf += 64) /* the same place NR rows on */
                m2_prefetch(w + (r + NR) * wrb + i * 4 + pf);
            const m2v wv = m2v_load((const float *)(const void *)(w + r * wrb) + i), wu = m2v_load((const float *)(const void *)(w + r * wrb) + i + M2V_LEN);
            for (int m = 0; m < MB; m++) {
                acc[r][m] = m2v_fma(wv, xv[m], acc[r][m]);
                acc1[r][m] = m2v_fma(wu, xw[m], acc1[r][m]);
            }
        }
    }
    if (i + M2V_LEN <= I) {
        for (int r = 0; r < NR; r++) {
            const m2v wv = m2v_load((const float *)(const void *)(w + r * wrb) + i);
            for (int m = 0; m < MB; m++) acc[r][m] = m2v_fma(wv, m2v_load(x + m * xs + i), acc[r][m]);
        }
        i += M2V_LEN;
    }
    const int64_t i0 = i;
    M2L_FINISH(((const float *)(const void *)(w + r * wrb))[k])
}

M2_INLINE void lin_bf16_body(const int NR, const int MB, const int PF, int64_t I, const unsigned char *w,
                             int64_t wrb, const float *x, int64_t xs, float *res) {
    m2v acc[M2L_NRMAX][M2L_MBMAX], acc1[M2L_NRMAX][M2L_MBMAX];
    for (int r = 0; r < NR; r++)
        for (int m = 0; m < MB; m++) acc[r][m] = acc1[r][m] = m2v_zero();
    int64_t i = 0;
    for (; i + 2 * M2V_LEN <= I; i += 2 * M2V_LEN) {
        m2v xv[M2L_MBMAX], xw[M2L_MBMAX];
        for (int m = 0; m < MB; m++) {
            xv[m] = m2v_load(x + m * xs + i);
            xw[m] = m2v_load(x + m * xs + i + M2V_LEN);
        }
        for (int r = 0; r < NR; r++) {
            for (int pf = 0; PF && pf < 2 * M2V_LEN * 2; pf += 64) /* the same place NR rows on */
                m2_prefetch(w + (r + NR) * wrb + i * 2 + pf);
            const m2v wv = m2v_load_bf16((const uint16_t *)(const void *)(w + r * wrb) + i), wu = m2v_load_bf16((const uint16_t *)(const void *)(w + r * wrb) + i + M2V_LEN);
            for (int m = 0; m < MB; m++) {
                acc[r][m] = m2v_fma(wv, xv[m], acc[r][m]);
                acc1[r][m] = m2v_fma(wu, xw[m], acc1[r][m]);
            }
        }
    }
    if (i + M2V_LEN <= I) {
        for (int r = 0; r < NR; r++) {
            const m2v wv = m2v_load_bf16((const uint16_t *)(const void *)(w + r * wrb) + i);
            for (int m = 0; m < MB; m++) acc[r][m] = m2v_fma(wv, m2v_load(x + m * xs + i), acc[r][m]);
        }
        i += M2V_LEN;
    }
    const int64_t i0 = i;
    M2L_FINISH(m2_bf16_to_f32(((const uint16_t *)(const void *)(w + r * wrb))[k]))
}

/* Q8_0 block b of row r: the f16 scale at byte 34 b, the 32 int8 after it (I % 32 == 0).
 * Σ q x of block b for the tile's rows, added to a (t * d): x's block is loaded once into
 * registers for all NR rows. */
#define M2L_QV (32 / M2V_LEN) /* vectors per block (even for every mapping: 32, 8, 4, 2) */
M2_INLINE void lin_q8_0_block(const int NR, const int MB, const int PF, int64_t b, const unsigned char *w,
                              int64_t wrb, const float *x, int64_t xs,
                              m2v a[M2L_NRMAX][M2L_MBMAX]) {
    m2v xv[M2L_MBMAX][M2L_QV];
    for (int m = 0; m < MB; m++)
        for (int j = 0; j < M2L_QV; j++) xv[m][j] = m2v_load(x + m * xs + b * 32 + j * M2V_LEN);
    for (int r = 0; r < NR; r++) {
        const unsigned char *blk = w + r * wrb + b * 34;
        const int8_t *q = (const int8_t *)(const void *)(blk + 2);
        if (PF) m2_prefetch(blk + NR * wrb); /* the same block NR rows on */
        m2v t0[M2L_MBMAX];
        const m2v q0 = m2v_load_i8(q);
        for (int m = 0; m < MB; m++) t0[m] = m2v_mul(q0, xv[m][0]);
        for (int j = 1; j < M2L_QV; j++) {
            const m2v qv = m2v_load_i8(q + j * M2V_LEN);
            for (int m = 0; m < MB; m++) t0[m] = m2v_fma(qv, xv[m][j], t0[m]);
        }
        const m2v d = m2v_set1(m2_load_f16(blk));
        for (int m = 0; m < MB; m++) a[r][m] = m2v_fma(t0[m], d, a[r][m]);
    }
}

M2_INLINE void lin_q8_0_body(const int NR, const int MB, const int PF, int64_t I,
                             const unsigned char *w, int64_t wrb, const float *x, int64_t xs, float *res) {
    m2v a0[M2L_NRMAX][M2L_MBMAX], a1[M2L_NRMAX][M2L_MBMAX];
    for (int r = 0; r < NR; r++)
        for (int m = 0; m < MB; m++) a0[r][m] = a1[r][m] = m2v_zero();
    const int64_t nb = I / 32;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) { /* even blocks into a0, odd ones into a1 */
        lin_q8_0_block(NR, MB, PF, b, w, wrb, x, xs, a0);
        lin_q8_0_block(NR, MB, PF, b + 1, w, wrb, x, xs, a1);
    }
    if (b < nb) lin_q8_0_block(NR, MB, PF, b, w, wrb, x, xs, a0);
    for (int r = 0; r < NR; r++)
        for (int m = 0; m < MB; m++) res[m * 4 + r] = m2v_reduce(m2v_add(a0[r][m], a1[r][m]));
}

/* one tile kernel per (format, NR, MB): the body with constants; 4x1s: 4x1 without prefetch */
#define M2L_TILE(fmt, NR, MB, PF, name)                                                        \
    static void M2L(lin_##fmt##_##name)(int64_t I, const unsigned char *w, int64_t wrb,        \
                                        const float *x, int64_t xs, float *res) {              \
        lin_##fmt##_body(NR, MB, PF, I, w, wrb, x, xs, res);                                   \
    }
#define M2L_TILES(fmt)                                                                         \
    M2L_TILE(fmt, 4, 1, 1, 4x1) M2L_TILE(fmt, 2, 2, 1, 2x2) M2L_TILE(fmt, 2, 1, 1, 2x1)        \
    M2L_TILE(fmt, 1, 2, 1, 1x2) M2L_TILE(fmt, 1, 1, 1, 1x1) M2L_TILE(fmt, 4, 1, 0, 4x1s)

M2L_TILES(f32)
M2L_TILES(bf16)
M2L_TILES(q8_0)

/* the table's tile[][] initializer, in the enum orders of linear_kernels.h */
#define M2L_ROW(fmt)                                                                           \
    {M2L(lin_##fmt##_4x1), M2L(lin_##fmt##_2x2), M2L(lin_##fmt##_2x1), M2L(lin_##fmt##_1x2),   \
     M2L(lin_##fmt##_1x1), M2L(lin_##fmt##_4x1s)}
#define M2_LIN_TABLE {M2L_ROW(f32), M2L_ROW(bf16), M2L_ROW(q8_0)}
