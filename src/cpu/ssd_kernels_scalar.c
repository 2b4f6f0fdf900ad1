/*
 * ssd_kernels_scalar.c — the SSD kernels in portable C (one float per "vector").
 *
 * The fallback for CPUs without AVX2+FMA, and the path tests force with
 * mamba2_context_force_isa(ctx, "scalar"). It is the same kernel text as the AVX2 set
 * (ssd_kernels_impl.h) with simd.h's one-lane mapping, so both sets share the tiling, the
 * loop order and every reduction order; only the lane count and FMA rounding differ.
 */
#define M2_SIMD_SCALAR 1
#define M2_KSUFFIX __scalar
#include "cpu/ssd_kernels_impl.h"

const m2_cpu_kernels m2_cpu_kernels_scalar = M2_SSD_KERNELS("scalar");
