/*
 * linear_kernels_scalar.c — the decode linear-layer kernels in portable C (one-lane "vectors"):
 * the fallback for CPUs without a vector set and what mamba2_context_force_isa(ctx, "scalar")
 * selects; the same kernel text (linear_kernels_impl.h, and linear_q8x_impl.h for Q8_0 with
 * integer activations) with simd.h's scalar mapping.
 */
#define M2_SIMD_SCALAR 1
#define M2_KSUFFIX __scalar
#include "cpu/linear_kernels_impl.h"
#include "cpu/linear_q8x_impl.h"

const m2_linear_kernels m2_linear_kernels_scalar = {"scalar", M2_LIN_TABLE};
const m2_linear_q8x_kernels m2_linear_q8x_scalar = {"scalar", M2_LIN_Q8X_TABLE};
