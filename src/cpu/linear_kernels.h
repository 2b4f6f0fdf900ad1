/*
 * linear_kernels.h — the CPU backend's decode linear-layer kernels: one table per
 * instruction set, same signatures (the arrangement of rmsnorm_kernels.h).
 *
 * linear_cpu.c (row blocks, threads, bias and accumulation) calls these through an
 * m2_linear_kernels table chosen from ctx->isa. A tile kernel computes the dot products of
 * NR weight rows with MB rows of x and writes them, unrounded beyond float32, to
 * res[m * 4 + r] (m < MB, r < NR). Each (r, m) product is one float32 accumulator chain over
 * vectors of I (Q8_0: over 32-element blocks, Σ q x of a block times its scale), reduced over
 * lanes, then the scalar tail: the same operations in every tile shape, so a result never
 * depends on which tile (or which thread) computed it.
 */
#ifndef MAMBA2C_CPU_LINEAR_KERNELS_H
#define MAMBA2C_CPU_LINEAR_KERNELS_H

#include <stdint.h>

#include "core/ksets.h"

/* w: row 0 of the tile; row r at w + r * w_row_bytes. x: row 0; row m at x + m * x_stride. */
typedef void (*m2_lin_tile_fn)(int64_t I, const unsigned char *w, int64_t w_row_bytes,
                               const float *x, int64_t x_stride, float *res);

/* weight formats, in table order */
enum { M2_LIN_F32 = 0, M2_LIN_BF16 = 1, M2_LIN_Q8_0 = 2, M2_LIN_NFMT = 3 };
/* tile shapes NR x MB, in table order; 4x1S is 4x1 without software prefetch, for 4 rows
 * far apart (4 separate long streams: w_row_bytes is then a multiple of a row) */
enum {
    M2_LIN_4x1 = 0, M2_LIN_2x2 = 1, M2_LIN_2x1 = 2, M2_LIN_1x2 = 3, M2_LIN_1x1 = 4,
    M2_LIN_4x1S = 5, M2_LIN_NTILE = 6
};

typedef struct m2_linear_kernels {
    const char *isa;
    m2_lin_tile_fn tile[M2_LIN_NFMT][M2_LIN_NTILE];
} m2_linear_kernels;

/* Q8_0 weights with integer activations (quantize_x; linear_q8x_impl.h): x arrives
 * quantized, row m at xq + m * xq_stride bytes: I/32 blocks of 32 int8 qx, then I/32 float dx
 * (so x_j ~ dx · qx_j); rows m2_lin_q8x_row_bytes(I) apart, the buffer 64-byte aligned. */
typedef void (*m2_lin_q8x_tile_fn)(int64_t I, const unsigned char *w, int64_t w_row_bytes,
                                   const unsigned char *xq, int64_t xq_stride, float *res);
static inline int64_t m2_lin_q8x_row_bytes(int64_t I) { return ((I / 32) * 36 + 63) & ~(int64_t)63; }

/* q8x tiles: one weight row (a single sequential stream, see linear_q8x_impl.h) against 1,
 * 2 or 4 rows of x */
enum { M2_Q8X_1x1 = 0, M2_Q8X_1x2 = 1, M2_Q8X_1x4 = 2, M2_Q8X_NTILE = 3 };
typedef struct m2_linear_q8x_kernels {
    const char *isa;
    m2_lin_q8x_tile_fn tile[M2_Q8X_NTILE];
} m2_linear_q8x_kernels;

/* bf16 weights times a bf16-exact row of x (AVX512-BF16 vdpbf16ps; linear_kernels_avx512bf16.c):
 * x arrives as bf16, row m at xb + m * xb_stride elements; the tile shapes of
 * m2_linear_kernels (M2_LIN_4x1 .. M2_LIN_4x1S), res as there. */
typedef void (*m2_lin_bf16x_tile_fn)(int64_t I, const unsigned char *w, int64_t w_row_bytes,
                                     const uint16_t *xb, int64_t xb_stride, float *res);
typedef struct m2_linear_bf16x_kernels {
    const char *isa;
    m2_lin_bf16x_tile_fn tile[M2_LIN_NTILE];
} m2_linear_bf16x_kernels;

extern const m2_linear_kernels m2_linear_kernels_scalar;  /* linear_kernels_scalar.c       */
extern const m2_linear_q8x_kernels m2_linear_q8x_scalar;
#if defined(M2_KSETS_X86)
extern const m2_linear_kernels m2_linear_kernels_avx2;    /* linear_kernels_avx2.c         */
extern const m2_linear_kernels m2_linear_kernels_avx512;  /* linear_kernels_avx512.c       */
extern const m2_linear_q8x_kernels m2_linear_q8x_avx2;     /* linear_kernels_avx2.c     */
extern const m2_linear_q8x_kernels m2_linear_q8x_avx512vnni; /* linear_kernels_avx512vnni.c */
extern const m2_linear_bf16x_kernels m2_linear_bf16x_avx512bf16; /* linear_kernels_avx512bf16.c */
#elif defined(M2_KSETS_NEON)
extern const m2_linear_kernels m2_linear_kernels_neon;    /* linear_kernels_neon.c         */
extern const m2_linear_q8x_kernels m2_linear_q8x_neon;     /* linear_kernels_neon.c     */
extern const m2_linear_q8x_kernels m2_linear_q8x_neondot;  /* linear_kernels_neondot.c  */
#endif

#endif /* MAMBA2C_CPU_LINEAR_KERNELS_H */
