/*
 * conv1d.h — the validated causal depthwise conv1d problem (SPEC §4 and §6 conv1d_step), as
 * the entry points in conv1d_api.c hand it to a backend.
 *
 * One struct serves the three calls (forward, backward, step); the fields a call does not use
 * are zero. act_dtype is F32 or F64, and for the step also BF16/F16 where the backend
 * declares step_extra_act_dtypes (x, out and conv_cache share it). Every tensor is an m2_view (data pointer + element strides, PyTorch order); the
 * last dimension is contiguous, except for the step's conv_cache (any strides). A backend may assume: 1 <= W <= 8, C >= 1, shapes agree,
 * dtypes are ones it declared, outputs overlap no input (the step's conv_cache is the one
 * in-place tensor), cu_seqlens is valid (B == 1), state indices are < S and the non-negative
 * ones are distinct.
 */
#ifndef MAMBA2C_CONV1D_H
#define MAMBA2C_CONV1D_H

#include "core/internal.h"

#define M2_CONV1D_MAX_W 8

struct m2_conv1d_problem {
    int64_t B, L, C, W;       /* step: L = T, the tokens per row (1 for x[B,C])                 */
    int64_t nseq;             /* forward/backward: state rows S (B, or cu_seqlens length - 1)  */
    int64_t S;                /* step: conv_cache slots                                         */
    mamba2_dtype_t act_dtype; /* x, out, conv states, dout, dx, dfinal, dinit                   */
    mamba2_dtype_t par_dtype; /* weight, bias, dweight, dbias (the step with BF16/F16 x:
                               * F32 or x's dtype)                                              */
    int silu;                 /* activation: 1 SiLU, 0 none                                     */

    /* cu_seqlens (NULL when absent: sequence s is batch row s, tokens [0, L)) */
    const void *cu_seqlens;
    mamba2_dtype_t cu_dtype;
    /* step: state_indices[B] (NULL: row b uses slot b) */
    const void *state_indices;
    mamba2_dtype_t idx_dtype;
    /* step: cache_seqlens[B] (NULL: shift mode; else circular mode, values >= 0 for the
     * non-padding rows) */
    const void *cache_seqlens;
    mamba2_dtype_t seq_dtype;
    int64_t Lc; /* step: the cache length (conv_cache[S,C,Lc], Lc >= W-1) */

    /* inputs                       shape                    strides used                   */
    m2_view x;      /* [B,L,C]                             s[0], s[1] (s[1] = 0 when L == 1) */
    m2_view weight; /* [C,W]                               s[0]                              */
    m2_view bias;   /* [C], optional                       (stride 1)                        */
    m2_view init;   /* [S,C,W-1], optional                 s[0], s[1]                        */

    /* forward outputs */
    m2_view out;    /* [B,L,C]                             s[0], s[1]                        */
    m2_view final;  /* [S,C,W-1], optional                                                   */

    /* backward inputs */
    m2_view dout;   /* [B,L,C]                                                               */
    m2_view dfinal; /* [S,C,W-1], optional (zero when absent)                                */
    /* backward outputs, each optional, all overwritten */
    m2_view dx;     /* [B,L,C]                                                               */
    m2_view dweight;/* [C,W]                                                                 */
    m2_view dbias;  /* [C]                                                                   */
    m2_view dinit;  /* [S,C,W-1]                                                             */

    /* step: conv_cache[S,C,Lc], read and updated in place, element strides s[0], s[1], s[2]
     * (any; s[2] need not be 1); x and out are [B,T,C] views (a rank-2 [B,C] tensor is
     * presented as T = 1) */
    m2_view cache;
};

/* Sequence s covers tokens [*t0, *t1) of batch row *b. */
static inline void m2_conv1d_seq(const m2_conv1d_problem *pr, int64_t s, int64_t *b, int64_t *t0,
                                 int64_t *t1) {
    if (!pr->cu_seqlens) {
        *b = s;
        *t0 = 0;
        *t1 = pr->L;
    } else if (pr->cu_dtype == MAMBA2_DTYPE_I32) {
        const int32_t *cu = (const int32_t *)pr->cu_seqlens;
        *b = 0;
        *t0 = cu[s];
        *t1 = cu[s + 1];
    } else {
        const int64_t *cu = (const int64_t *)pr->cu_seqlens;
        *b = 0;
        *t0 = cu[s];
        *t1 = cu[s + 1];
    }
}

/* Step: the cache slot of row b (negative: padding row, skip). */
static inline int64_t m2_conv1d_slot(const m2_conv1d_problem *pr, int64_t b) {
    if (!pr->state_indices) return b;
    if (pr->idx_dtype == MAMBA2_DTYPE_I32) return ((const int32_t *)pr->state_indices)[b];
    return ((const int64_t *)pr->state_indices)[b];
}

/* Step, circular mode: cache_seqlens[b]. */
static inline int64_t m2_conv1d_seqlen(const m2_conv1d_problem *pr, int64_t b) {
    if (pr->seq_dtype == MAMBA2_DTYPE_I32) return ((const int32_t *)pr->cache_seqlens)[b];
    return ((const int64_t *)pr->cache_seqlens)[b];
}

/* Step: the cache position (0 .. Lc-1) of window entry j of row b, where entries 0 .. W-2 are
 * the history (oldest first) and W-1+t is new token t; meaningful for the entries a mode
 * keeps in the cache. Shift mode: history at Lc-W+1+j. Circular mode: (seqlen - W+1 + j)
 * mod Lc (seqlen = cache_seqlens[b] >= 0). */
static inline int64_t m2_conv1d_cache_pos(const m2_conv1d_problem *pr, int64_t seqlen, int64_t j) {
    if (!pr->cache_seqlens) return pr->Lc - (pr->W - 1) + j;
    int64_t r = (seqlen - (pr->W - 1) + j) % pr->Lc;
    return r < 0 ? r + pr->Lc : r;
}

/* conv1d_api.c: mamba2_conv1d_step's checks (opts not NULL), for an entry point already
 * holding ctx (mamba2_block_step). */
mamba2_status_t m2_conv1d_step_prepare(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                       const mamba2_tensor_t *conv_cache,
                                       const mamba2_tensor_t *x, const mamba2_tensor_t *weight,
                                       const mamba2_conv1d_step_options_t *opts,
                                       m2_conv1d_problem *pr);

#endif /* MAMBA2C_CONV1D_H */
