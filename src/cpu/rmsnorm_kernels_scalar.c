/*
 * rmsnorm_kernels_scalar.c — the gated RMSNorm kernels in portable C (one-lane "vectors").
 *
 * The fallback for CPUs without AVX2+FMA and the path mamba2_context_force_isa(ctx,
 * "scalar") selects: the same kernel text (rmsnorm_kernels_impl.h) with simd.h's scalar
 * mapping, so both sets share loop structure and reduction order.
 */
#define M2_SIMD_SCALAR 1
#define M2_KSUFFIX __scalar
#include "cpu/rmsnorm_kernels_impl.h"

const m2_rmsnorm_kernels m2_rmsnorm_kernels_scalar = {
    "scalar",
    rms_fwd_group__scalar,
    rms_bwd_group__scalar,
};
