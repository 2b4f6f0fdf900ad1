/*
 * rmsnorm.h — the gated RMSNorm problem (SPEC §5) as the core hands it to a backend.
 *
 * rmsnorm_api.c validates every argument and fills an m2_rmsnorm_problem; the backends
 * (src/ref/rmsnorm_ref.c, src/cpu/rmsnorm_cpu.c) may assume what is written here: shapes
 * agree, last dimensions are contiguous, outputs overlap nothing, dtypes are supported,
 * S >= 1 divides D, eps is finite and >= 0.
 */
#ifndef MAMBA2C_RMSNORM_H
#define MAMBA2C_RMSNORM_H

#include "core/internal.h"

struct m2_rmsnorm_problem {
    int64_t M, D;              /* rows, channels per row                                    */
    int64_t S, G;              /* group size (>= 1, divides D) and groups per row G = D / S */
    double eps;
    int norm_before_gate;      /* 0: out = norm(x*silu(z)); 1: out = norm(x)*silu(z)        */
    mamba2_dtype_t act_dtype;  /* x, z, out, dout, dx, dz                                   */
    mamba2_dtype_t par_dtype;  /* weight, bias, rstd, dweight, dbias                        */

    /* inputs        shape     strides used                                                  */
    m2_view x;      /* [M,D]   element (m,c) at s[0]*m + c                                   */
    m2_view z;      /* [M,D]   optional                                                      */
    m2_view weight; /* [D]     contiguous                                                    */
    m2_view bias;   /* [D]     optional, contiguous                                          */

    /* forward outputs */
    m2_view out;    /* [M,D]                                                                 */
    m2_view rstd;   /* [M,G]   optional; element (m,g) at s[0]*m + g                         */

    /* backward inputs */
    m2_view dout;    /* [M,D]                                                                */
    m2_view rstd_in; /* [M,G]  optional: the forward's rstd, used instead of recomputing     */

    /* backward outputs, each optional (p == NULL: not wanted), all overwritten */
    m2_view dx, dz;         /* [M,D]                                                         */
    m2_view dweight, dbias; /* [D], contiguous                                               */
};

/* rmsnorm_api.c: the forward's checks (no rstd, no bias) and its padded workspace size,
 * for an entry point already holding ctx (mamba2_block_step). */
mamba2_status_t m2_rmsnorm_forward_prepare(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                           const mamba2_tensor_t *x, const mamba2_tensor_t *z,
                                           const mamba2_tensor_t *weight,
                                           const mamba2_rmsnorm_gated_options_t *opts,
                                           m2_rmsnorm_problem *pr, size_t *bytes);

#endif /* MAMBA2C_RMSNORM_H */
