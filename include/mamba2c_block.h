/*
 * mamba2c_block.h — the decode step of a whole Mamba-2 block, one call per layer.
 *
 * Part of the public API: include/mamba2c.h includes this file at its end (include either;
 * the conventions written at the top of mamba2c.h hold here too). Kept in its own header so
 * that mamba2c.h stays one readable file per operator family.
 */
#ifndef MAMBA2C_BLOCK_H
#define MAMBA2C_BLOCK_H

#include "mamba2c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/* Mamba-2 block decode step                                                 */
/* ------------------------------------------------------------------------- */
/*
 * One new token per sequence through one mamba_ssm Block(Mamba2) with an RMSNorm block norm
 * and residual_in_fp32, for M >= 1 rows, updating the caches in place:
 *
 *   residual = hidden + residual        (add_residual == 0, the first block: residual = hidden)
 *   u        = rmsnorm(residual) * norm_weight                       eps = norm_eps, per row
 *   zxbcdt   = u · in_projᵀ (+ in_proj_bias)                         [M, 2·d_inner + 2·G·N + H]
 *   z, xBC, dt = zxbcdt split as [d_inner | d_inner + 2·G·N | H]     (mamba_ssm's layout)
 *   xBC      = silu(conv1d_step(xBC, conv_cache, conv_weight, conv_bias))
 *   x, Bm, Cm = xBC split as [d_inner | G·N | G·N]
 *   y        = ssd_step(x, dt, A, Bm, Cm, D, dt_bias, softplus, dt_limit, state_cache)
 *   g        = rmsnorm_gated(y, z, gnorm_weight)   (gnorm_eps, gnorm_group_size,
 *                                                   norm_before_gate; SPEC §5)
 *   hidden   = g · out_projᵀ (+ out_proj_bias)
 *
 * Each line is exactly the op of that name (mamba2_rmsnorm_gated_forward without z,
 * mamba2_linear_forward, mamba2_conv1d_step with SiLU, mamba2_ssd_step, ...) on the same
 * backend, so this call gives the bits of those calls made one by one with float32
 * intermediates; it only saves the calls, the descriptors and the intermediate tensors.
 *
 * Sizes come from the tensors: d_model from hidden, H from A, (H, P, N) from state_cache
 * [S_ssm,H,P,N], d_inner = H·P, conv_dim = C and W from conv_weight [C,W],
 * G = (C - d_inner) / (2N) (H % G == 0), d_in_proj = 2·d_inner + 2·G·N + H.
 *
 * In/out tensors (float32, row m = one sequence):
 *   hidden[M,d_model]    in: the previous block's output (or the embedding); out: this
 *                        block's output. residual[M,d_model] in: the running residual (not
 *                        read when add_residual == 0); out: hidden + residual.
 *   conv_cache[S_conv,C,Lc]    as mamba2_conv1d_step's (shift mode, any Lc >= W-1).
 *   state_cache[S_ssm,H,P,N]   as mamba2_ssd_step's (float32).
 * Weights (inputs, mamba2_block_step_weights_t): norm_weight[d_model] F32;
 * in_proj_weight[d_in_proj,d_model] and out_proj_weight[d_model,d_inner]: F32, BF16 or Q8_0
 * as mamba2_linear_forward takes them (Q8_0: d_model and d_inner multiples of 32);
 * in_proj_bias[d_in_proj], out_proj_bias[d_model] F32 or NULL; conv_weight[C,W],
 * conv_bias[C] or NULL; A[H]; D[H] or [H,P] or NULL; dt_bias[H] or NULL;
 * gnorm_weight[d_inner]; all F32.
 * Options: state_indices[M] (int32/int64 or NULL: row m -> slot m) picks the slots of
 * state_cache and, unless conv_state_indices is given, of conv_cache; the rules are the
 * steps' (non-negative indices distinct and < S, negative = padding row). A padding row
 * (negative index in either) leaves both its cache slots as they are; its residual is still
 * updated and its hidden becomes out_proj of a zero mixer output (the out_proj bias, or 0).
 * The two index tensors must agree on which rows are padding.
 *
 * Activations are float32 tensors. A bfloat16 model (Mamba2.step in bf16, whose every op
 * output is rounded to bf16) runs with opts->round_bf16 set: the block norm's output, the
 * in_proj output, the conv output, the SSD output, the gated norm's output and out_proj's
 * output (hidden) are rounded to bf16 (to nearest even) in their float32 storage right after
 * the op, and with round_norm_input the block norm reads residual rounded to bf16
 * (mamba_ssm's unfused add + norm: norm(residual.to(dtype))) while residual itself stays
 * float32 (residual_in_fp32). The result is the bits of those ops called one by one with the
 * same roundings between them (tested). The in_proj / out_proj inputs are then bf16 values,
 * which mamba2_linear_forward multiplies with vdpbf16ps where the CPU has AVX512-BF16.
 * F16 models: call the ops one by one. Runs on the CPU
 * and reference backends (float64 accumulation in every op there); GPU backends return
 * MAMBA2_STATUS_UNSUPPORTED. The intermediates (M·(2·d_model + d_in_proj + C + 2·d_inner)
 * floats, M·d_model more with round_norm_input) live in the workspace:
 * mamba2_block_step_workspace_size reports its size;
 * workspace == NULL makes the call allocate it. hidden, residual, conv_cache and
 * state_cache may overlap nothing (each other, a weight, an index tensor).
 */
typedef struct mamba2_block_step_weights {
    uint32_t struct_size;                   /* sizeof(mamba2_block_step_weights_t), or 0  */
    const mamba2_tensor_t *norm_weight;     /* [d_model]            the block's RMSNorm    */
    const mamba2_tensor_t *in_proj_weight;  /* [d_in_proj,d_model]  F32, BF16 or Q8_0      */
    const mamba2_tensor_t *in_proj_bias;    /* [d_in_proj], or NULL                        */
    const mamba2_tensor_t *conv_weight;     /* [C,W]                                       */
    const mamba2_tensor_t *conv_bias;       /* [C], or NULL                                */
    const mamba2_tensor_t *A;               /* [H] (negative: -exp(A_log))                 */
    const mamba2_tensor_t *D;               /* [H] or [H,P], or NULL                       */
    const mamba2_tensor_t *dt_bias;         /* [H], or NULL                                */
    const mamba2_tensor_t *gnorm_weight;    /* [d_inner]            the gated RMSNorm      */
    const mamba2_tensor_t *out_proj_weight; /* [d_model,d_inner]    F32, BF16 or Q8_0      */
    const mamba2_tensor_t *out_proj_bias;   /* [d_model], or NULL                          */
} mamba2_block_step_weights_t;

typedef struct mamba2_block_step_options {
    uint32_t struct_size;                      /* sizeof(mamba2_block_step_options_t), or 0 */
    int32_t add_residual;      /* nonzero: residual = hidden + residual; 0: = hidden       */
    double norm_eps;           /* the block RMSNorm's eps (default 1e-5)                    */
    double gnorm_eps;          /* the gated RMSNorm's eps (default 1e-5)                    */
    int64_t gnorm_group_size;  /* channels per gated-norm group; 0 = d_inner (default)      */
    int32_t norm_before_gate;  /* default 0 (mamba_ssm's Mamba2)                           */
    int32_t dt_softplus;       /* default 1 (Mamba2.step)                                  */
    double dt_limit_lo;        /* default (0, +inf), as mamba2_ssd_step                     */
    double dt_limit_hi;
    const mamba2_tensor_t *state_indices;      /* [M] int32/int64, or NULL                 */
    const mamba2_tensor_t *conv_state_indices; /* [M], or NULL: state_indices              */
    /* appended after ABI v1 (read only when struct_size covers them) */
    int32_t round_bf16;        /* nonzero: a bfloat16 model's roundings (above); default 0  */
    int32_t round_norm_input;  /* with round_bf16: the block norm reads bf16(residual)      */
} mamba2_block_step_options_t;

/* Defaults: struct_size set, add_residual 1, eps 1e-5 (both), whole-d_inner gated-norm
 * group, norm_before_gate 0, dt_softplus 1, dt_limit (0, +inf), identity slots, no bf16
 * rounding. */
MAMBA2_API mamba2_block_step_options_t mamba2_block_step_options_default(void);
/* All tensors NULL, struct_size set. */
MAMBA2_API mamba2_block_step_weights_t mamba2_block_step_weights_default(void);

/* Checks every argument as mamba2_block_step does and reports the workspace it needs. */
MAMBA2_API mamba2_status_t mamba2_block_step_workspace_size(
    mamba2_context_t *ctx, const mamba2_tensor_t *hidden, const mamba2_tensor_t *residual,
    const mamba2_tensor_t *conv_cache, const mamba2_tensor_t *state_cache,
    const mamba2_block_step_weights_t *weights, const mamba2_block_step_options_t *opts,
    size_t *workspace_size);

/* weights is required; opts may be NULL (defaults). */
MAMBA2_API mamba2_status_t mamba2_block_step(
    mamba2_context_t *ctx, const mamba2_tensor_t *hidden, const mamba2_tensor_t *residual,
    const mamba2_tensor_t *conv_cache, const mamba2_tensor_t *state_cache,
    const mamba2_block_step_weights_t *weights, const mamba2_block_step_options_t *opts,
    void *workspace, size_t workspace_size);

#ifdef __cplusplus
}
#endif

#endif /* MAMBA2C_BLOCK_H */
