/*
 * conv1d_kernels.h — the CPU kernels of the causal depthwise conv1d (SPEC §4, §6), one table
 * per instruction set with the same signatures (as kernels.h does for the SSD).
 *
 * conv1d_cpu.c (tiling, threading, state packing, reductions) calls them only through an
 * m2_conv1d_kernels table chosen from ctx->isa. All three tables (scalar, AVX2, AVX-512) are
 * generated from the one kernel text in conv1d_kernels_impl.h.
 *
 * Conventions: channels are the vector dimension. A kernel call covers n contiguous channels
 * of a block of T tokens; `ld*` is the element distance between the rows of consecutive
 * tokens (any value, 0 included for a broadcast input). Packed per-block arrays (weights
 * wt[k*ldw + c], the history rows) are row-major with row length ldw / ldh. The window of
 * token t is u_{t-W+1} .. u_t with
 *   u_j = x[j*ldx + c]              for j >= 0
 *   u_j = hist[(W-1+j)*ldh + c]     for -(W-1) <= j < 0   (the W-1 inputs before the block)
 * Every channel's result is the same sequence of float operations whatever the block it is
 * in, provided blocks start at a multiple of M2C1_BLOCK_ALIGN channels (the widest set's
 * lanes; each set's lanes then map to the same channels): acc = bias; acc = fma(w_k, u_k, acc)
 * for k = 0..W-1.
 */
#ifndef MAMBA2C_CPU_CONV1D_KERNELS_H
#define MAMBA2C_CPU_CONV1D_KERNELS_H

#include <stdint.h>

#include "core/ksets.h"

#define M2C1_MAX_W 8        /* largest kernel width (W in 1..8)                           */
#define M2C1_BLOCK_ALIGN 16 /* channel blocks start at multiples of this (AVX-512: 16 lanes) */

typedef struct m2_conv1d_kernels {
    const char *isa;

    /* out[t*ldo + c] = act(bias[c] + Σ_{k<W} wt[k*ldw + c] u_{t-W+1+k}[c]),  t < T, c < n.
     * bias may be NULL (0); act is SiLU when silu != 0, else the identity. */
    void (*fwd)(int64_t W, int silu, int64_t T, int64_t n, const float *x, int64_t ldx,
                const float *hist, int64_t ldh, const float *wt, int64_t ldw, const float *bias,
                float *out, int64_t ldo);

    /* The fused backward over T consecutive tokens of one sequence (a chunk of a longer run;
     * the windows carry over between calls through st). For t < T, with u as in fwd:
     *   pre_t = bias[c] + Σ_k wt[k*ldw + c] u_{t-W+1+k}[c]
     *   g_t   = dout[t*lddo + c] * act'(pre_t)  for t < Tg,  0 for Tg <= t < T
     *   dw[k*ldw + c] += Σ_{t<Tacc} g_t u_{t-W+1+k}[c]    db[c] += Σ_{t<Tacc} g_t
     *     (summed in registers in an order fixed by T and Tacc, then added once; Tacc <= Tg;
     *     with Tacc == 0, dw and db are not touched)
     *   for temit <= t < T (when dx != NULL), the gradient of input t-W+1:
     *     dx[(t-temit)*lddx + c] = Σ_k wt[k*ldw + c] g_{t-k}
     * x and dout rows are read for t < Tg only. st holds 2(W-1) rows (length ldst): rows
     * 0..W-2 the inputs u_{-W+1..-1} (the history, as hist in fwd), rows W-1..2W-3 the
     * gradients g_{-W+1..-1} (zeros at the start of a run); on return they hold the same for
     * the next chunk (u_{T-W+1..T-1}, g_{T-W+1..T-1}; inputs past Tg read as 0). One call per
     * chunk of at most a few dozen tokens keeps its rows in L1 while n spans many vectors.
     * stream != 0: dx is written once and not read again soon, so the kernel may write it
     * with non-temporal stores (where dx and lddx put whole 64-byte lines under columns of
     * vectors: pairs of 8-lane ones, single 16-lane ones);
     * the caller then calls stream_fence before another thread may read dx. */
    void (*bwd)(int64_t W, int silu, int64_t T, int64_t Tg, int64_t Tacc, int64_t temit,
                int64_t n, const float *x, int64_t ldx, const float *dout, int64_t lddo,
                const float *wt, int64_t ldw, const float *bias, float *st, int64_t ldst,
                float *dx, int64_t lddx, float *dw, float *db, int stream);

    /* One decode token of one row, n channels, against its conv cache cache[c*(W-1) + i]
     * (channel-major, contiguous), updated in place:
     *   out[c] = act(bias[c] + Σ_{k<W-1} wt[k*ldw + c] cache[c*(W-1) + k] + wt[(W-1)*ldw + c] x[c])
     *   cache[c] <- (cache[c*(W-1) + 1 ..], x[c])
     * The same float operations, channel for channel, as fwd with the cache as history. */
    void (*step)(int64_t W, int silu, int64_t n, const float *x, float *cache, const float *wt,
                 int64_t ldw, const float *bias, float *out);

    /* Packs weights w[c*lds + k] (c < n, k < W) into wt[k*ldw + c]. */
    void (*pack_w)(int64_t W, int64_t n, const float *w, int64_t lds, float *wt, int64_t ldw);

    /* Orders this thread's non-temporal stores (bwd with stream != 0) before its later
     * stores: called at the end of a task, before the pool reports it done. */
    void (*stream_fence)(void);
} m2_conv1d_kernels;

extern const m2_conv1d_kernels m2_conv1d_kernels_scalar; /* conv1d_kernels_scalar.c           */
#if defined(M2_KSETS_X86)
extern const m2_conv1d_kernels m2_conv1d_kernels_avx2;   /* conv1d_kernels_avx2.c, -mavx2 -mfma */
extern const m2_conv1d_kernels m2_conv1d_kernels_avx512; /* conv1d_kernels_avx512.c, -mavx512f.. */
#elif defined(M2_KSETS_NEON)
extern const m2_conv1d_kernels m2_conv1d_kernels_neon;   /* conv1d_kernels_neon.c, AArch64     */
#endif

#endif /* MAMBA2C_CPU_CONV1D_KERNELS_H */
