/*
 * linear_kernels_neon.c — the decode linear-layer kernels for AArch64 with Advanced SIMD (NEON).
 * Compiled into AArch64 builds only (CMakeLists.txt) and called when ctx->isa == M2_ISA_NEON.
 * The kernel text is linear_kernels_impl.h (and linear_q8x_impl.h: Q8_0 with integer
 * activations, vmull; linear_kernels_neondot.c has their sdot twin) over simd.h's 4-lane mapping.
 */
#define M2_SIMD_NEON 1
#define M2_KSUFFIX __neon
#include "cpu/linear_kernels_impl.h"
#include "cpu/linear_q8x_impl.h"

const m2_linear_kernels m2_linear_kernels_neon = {"neon", M2_LIN_TABLE};
const m2_linear_q8x_kernels m2_linear_q8x_neon = {"neon", M2_LIN_Q8X_TABLE};
