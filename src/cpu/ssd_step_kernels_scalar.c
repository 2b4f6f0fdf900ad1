/*
 * ssd_step_kernels_scalar.c — the SSD decode-step kernels in portable C (one float per
 * "vector"): the fallback for CPUs without AVX2+FMA, and what
 * mamba2_context_force_isa(ctx, "scalar") selects. Same kernel text (ssd_step_kernels_impl.h)
 * as the AVX2 set.
 */
#define M2_SIMD_SCALAR 1
#define M2_KSUFFIX __scalar
#include "cpu/ssd_step_kernels_impl.h"

const m2_ssd_step_kernels m2_ssd_step_kernels_scalar = {
    "scalar",
    ssd_step_rows__scalar,
    ssd_step_epilogue__scalar,
};
