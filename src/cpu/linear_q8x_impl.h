/*
 * linear_q8x_impl.h — the Q8_0 integer-activation kernel text (mamba2_linear_options_t's
 * quantize_x), compiled once per instruction set.
 *
 * Included by linear_kernels_<isa>.c after simd.h's mapping is chosen (M2_SIMD_<ISA>, and
 * M2_Q8X_VNNI / M2_Q8X_DOT for the dot-product variants) and M2_KSUFFIX is defined; defines
 * the tile kernels lin_q8x_<NR>x<MB><suffix> and the M2_LIN_Q8X_TABLE initializer.
 *
 * x arrives quantized (linear_cpu.c, the layout of linear_kernels.h): per block b an int8
 * qx[32] and a float dx. Per output (r, m) one float32 accumulator, over the blocks in order:
 *     acc = fma(m2q_dot(qw_b, qx_b), dw_b · dx_b, acc)
 * (the block's exact integer lanes, converted; dw · dx rounded to float32), then the lanes
 * summed (m2v_reduce). The same operations in every tile shape, so a result never depends on
 * the tile, M, the row's position or the thread count. One chain per output: a block is ~10
 * vector instructions per weight row, enough independent work across the tile's NR · MB
 * chains to cover the FMA latency. A tile reads NR weight rows side by side and shares each
 * weight block between its MB rows of x (the compiler keeps one |w| for both); the same
 * prefetch of the block NR rows on as the float kernels (linear_kernels_impl.h).
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

M2_INLINE void lin_q8x_body(const int NR, const int MB, int64_t I, const unsigned char *w,
                            int64_t wrb, const unsigned char *xq, int64_t xqs, float *res) {
    const int64_t nb = I / 32;
    m2v acc[4][2];
    const int8_t *qx[2];
    const float *dx[2];
    for (int m = 0; m < MB; m++) {
        qx[m] = (const int8_t *)(const void *)(xq + m * xqs);
        dx[m] = (const float *)(const void *)(xq + m * xqs + nb * 32);
        for (int r = 0; r < NR; r++) acc[r][m] = m2v_zero();
    }
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < NR; r++) {
            const unsigned char *blk = w + r * wrb + b * 34;
            m2_prefetch(blk + NR * wrb); /* the same block NR rows on */
            const int8_t *qw = (const int8_t *)(const void *)(blk + 2);
            const float dw = m2_load_f16(blk);
            for (int m = 0; m < MB; m++)
                acc[r][m] = m2v_fma(m2q_dot(qw, qx[m] + b * 32), m2v_set1(dw * dx[m][b]), acc[r][m]);
        }
    for (int r = 0; r < NR; r++)
        for (int m = 0; m < MB; m++) res[m * 4 + r] = m2v_reduce(acc[r][m]);
}

#define M2Q_TILE(NR, MB)                                                                       \
    static void M2Q(lin_q8x_##NR##x##MB)(int64_t I, const unsigned char *w, int64_t wrb,       \
                                         const unsigned char *xq, int64_t xqs, float *res) {   \
        lin_q8x_body(NR, MB, I, w, wrb, xq, xqs, res);                                         \
    }
M2Q_TILE(4, 1)
M2Q_TILE(2, 2)
M2Q_TILE(2, 1)
M2Q_TILE(1, 2)
M2Q_TILE(1, 1)

/* the q8x table's tile[] initializer, in the tile order of linear_kernels.h */
#define M2_LIN_Q8X_TABLE                                                                       \
    {M2Q(lin_q8x_4x1), M2Q(lin_q8x_2x2), M2Q(lin_q8x_2x1), M2Q(lin_q8x_1x2), M2Q(lin_q8x_1x1)}
