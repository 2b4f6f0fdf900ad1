/*
 * conv1d_kernels.h — the CPU kernels of the causal depthwise conv1d (SPEC §4, §6), one table
 * per instruction set with the same signatures (as kernels.h does for the SSD).
 *
 * conv1d_cpu.c (tiling, threading, state packing, reductions) calls them only through an
 * m2_conv1d_kernels table chosen from ctx->isa. Both tables are generated from the one kernel
 * text in conv1d_kernels_impl.h.
 *
 * Conventions: channels are the vector dimension. A kernel call covers n contiguous channels
 * of a block of T tokens; `ld*` is the element distance between the rows of consecutive
 * tokens (any value, 0 included for a broadcast input). Packed per-block arrays (weights
 * wt[k*ldw + c], the history rows) are row-major with row length ldw / ldh. The window of
 * token t is u_{t-W+1} .. u_t with
 *   u_j = x[j*ldx + c]              for j >= 0
 *   u_j = hist[(W-1+j)*ldh + c]     for -(W-1) <= j < 0   (the W-1 inputs before the block)
 * Every channel's result is the same sequence of float operations whatever the block it is
 * in, provided blocks start at a multiple of 8 channels (lanes then map to the same
 * channels): acc = bias; acc = fma(w_k, u_k, acc) for k = 0..W-1.
 */
#ifndef MAMBA2C_CPU_CONV1D_KERNELS_H
#define MAMBA2C_CPU_CONV1D_KERNELS_H

#include <stdint.h>

#define M2C1_MAX_W 8 /* largest kernel width (W in 1..8) */

typedef struct m2_conv1d_kernels {
    const char *isa;

    /* out[t*ldo + c] = act(bias[c] + Σ_{k<W} wt[k*ldw + c] u_{t-W+1+k}[c]),  t < T, c < n.
     * bias may be NULL (0); act is SiLU when silu != 0, else the identity. */
    void (*fwd)(int64_t W, int silu, int64_t T, int64_t n, const float *x, int64_t ldx,
                const float *hist, int64_t ldh, const float *wt, int64_t ldw, const float *bias,
                float *out, int64_t ldo);

    /* The backward's per-token gradient, same window as fwd, for t < T:
     *   pre_t = bias[c] + Σ_k wt[k*ldw + c] u_{t-W+1+k}[c]
     *   g_t   = dout[t*lddo + c] * act'(pre_t),   stored at G[t*ldg + c]
     * and for t < Tacc (<= T) the parameter sums, added to what dw / db hold:
     *   dw[k*ldw + c] += Σ_t g_t u_{t-W+1+k}[c]      db[c] += Σ_t g_t
     * (summed over t in order in registers, then added once). */
    void (*bwd_g)(int64_t W, int silu, int64_t T, int64_t Tacc, int64_t n, const float *x,
                  int64_t ldx, const float *hist, int64_t ldh, const float *wt, int64_t ldw,
                  const float *bias, const float *dout, int64_t lddo, float *G, int64_t ldg,
                  float *dw, float *db);
} m2_conv1d_kernels;

extern const m2_conv1d_kernels m2_conv1d_kernels_scalar; /* conv1d_kernels_scalar.c           */
extern const m2_conv1d_kernels m2_conv1d_kernels_avx2;   /* conv1d_kernels_avx2.c, -mavx2 -mfma */

#endif /* MAMBA2C_CPU_CONV1D_KERNELS_H */
