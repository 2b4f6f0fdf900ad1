/*
 * conv1d_kernels_scalar.c — the conv1d kernels in portable C (one channel per "vector"):
 * the fallback for CPUs without AVX2+FMA, and what mamba2_context_force_isa(ctx, "scalar")
 * selects. Same kernel text (conv1d_kernels_impl.h) as the AVX2 set.
 */
#define M2_SIMD_SCALAR 1
#define M2_KSUFFIX __scalar
#include "cpu/conv1d_kernels_impl.h"

const m2_conv1d_kernels m2_conv1d_kernels_scalar = {
    "scalar",
    conv1d_fwd__scalar,
    conv1d_bwd__scalar,
    conv1d_step__scalar,
    conv1d_pack_w__scalar,
    conv1d_stream_fence__scalar,
};
