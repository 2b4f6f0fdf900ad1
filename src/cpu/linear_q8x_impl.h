/*
 * linear_q8x_impl.h — the Q8_0 integer-activation kernel text (mamba2_linear_options_t's
 * quantize_x), compiled once per instruction set.
 *
 * Included by linear_kernels_<isa>.c after simd.h's mapping is chosen (M2_SIMD_<ISA>, and
 * M2_Q8X_VNNI / M2_Q8X_DOT for the dot-product variants) and M2_KSUFFIX is defined; defines
 * the tile kernels lin_q8x_<NR>x<MB><suffix> and the M2_LIN_Q8X_TABLE initializer.
 *
 * x arrives quantized (linear_cpu.c, the layout of linear_kernels.h): per block b an int8
 * qx[32] and a float dx. Per output two float32 accumulators, a0 over the even blocks and a1
 * over the odd ones, each step
 *     a = fma(m2q_dot(qw_b, qx_b), dw_b · dx_b, a)
 * (the block's exact integer lanes, converted; dw · dx rounded to float32), then the lanes of
 * a0 + a1 summed (m2v_reduce). The same operations in every tile shape, so a result never
 * depends on the tile, M, the row's position or the thread count.
 * A tile is ONE weight row (1x1, or 1x2 / 1x4: two or four rows of x sharing each weight
 * block, its |w| and its scale): the rows of a task are then read in address order, one
 * sequential stream that the hardware prefetchers follow, where the float kernels' 4x1 tile
 * reads four short streams side by side (a 1024-wide Q8_0 row is only 17 cache lines). From
 * memory that measured ~1.5x the 4x1 tile's rate (docs/decode.md); in cache the 4x1 tile is
 * faster (x's block and scale loaded once for four rows), which the memory-bound decode
 * shapes do not need. Every other block also prefetches the same place one row on.
 */
#ifndef M2_KSUFFIX
#error "define M2_KSUFFIX before including linear_q8x_impl.h"
#endif

#include <stdint.h>

#include "cpu/linear_kernels.h"
#include "cpu/linear_q8x_simd.h"
#include "cpu/simd.h"

#define M2Q_CAT2(a, b) a##b
#define M2Q_CAT(a, b) M2Q_CAT2(a, b)
#define M2Q(name) M2Q_CAT(name, M2_KSUFFIX)
#define M2Q_NRMAX 1
#define M2Q_MBMAX 4

/* block b of the tile's NR weight rows against its MB rows of x, added to a */
M2_INLINE void lin_q8x_block(const int NR, const int MB, const int pf, int64_t b,
                             const unsigned char *w, int64_t wrb, const int8_t *const *qx,
                             const float *const *dx, m2v a[M2Q_NRMAX][M2Q_MBMAX]) {
    for (int r = 0; r < NR; r++) {
        const unsigned char *blk = w + r * wrb + b * 34;
        if (pf) m2_prefetch(blk + wrb); /* the same place one row on, once per 68 bytes */
        const int8_t *qw = (const int8_t *)(const void *)(blk + 2);
        const float dw = m2_load_f16(blk);
        for (int m = 0; m < MB; m++)
            a[r][m] = m2v_fma(m2q_dot(qw, qx[m] + b * 32), m2v_set1(dw * dx[m][b]), a[r][m]);
    }
}

M2_INLINE void lin_q8x_body(const int NR, const int MB, int64_t I, const unsigned char *w,
                            int64_t wrb, const unsigned char *xq, int64_t xqs, float *res) {
    const int64_t nb = I / 32;
    m2v a0[M2Q_NRMAX][M2Q_MBMAX], a1[M2Q_NRMAX][M2Q_MBMAX];
    const int8_t *qx[M2Q_MBMAX];
    const float *dx[M2Q_MBMAX];
    for (int m = 0; m < MB; m++) {
        qx[m] = (const int8_t *)(const void *)(xq + m * xqs);
        dx[m] = (const float *)(const void *)(xq + m * xqs + nb * 32);
        for (int r = 0; r < NR; r++) a0[r][m] = a1[r][m] = m2v_zero();
    }
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) { /* even blocks into a0, odd ones into a1 */
        lin_q8x_block(NR, MB, 1, b, w, wrb, qx, dx, a0);
        lin_q8x_block(NR, MB, 0, b + 1, w, wrb, qx, dx, a1);
    }
    if (b < nb) lin_q8x_block(NR, MB, 1, b, w, wrb, qx, dx, a0);
    for (int r = 0; r < NR; r++)
        for (int m = 0; m < MB; m++) res[m * 4 + r] = m2v_reduce(m2v_add(a0[r][m], a1[r][m]));
}

#define M2Q_TILE(NR, MB)                                                                       \
    static void M2Q(lin_q8x_##NR##x##MB)(int64_t I, const unsigned char *w, int64_t wrb,       \
                                         const unsigned char *xq, int64_t xqs, float *res) {   \
        lin_q8x_body(NR, MB, I, w, wrb, xq, xqs, res);                                         \
    }
M2Q_TILE(1, 1)
M2Q_TILE(1, 2)
M2Q_TILE(1, 4)

/* the q8x table's tile[] initializer, in the order of linear_kernels.h's M2_Q8X_* */
#define M2_LIN_Q8X_TABLE {M2Q(lin_q8x_1x1), M2Q(lin_q8x_1x2), M2Q(lin_q8x_1x4)}
