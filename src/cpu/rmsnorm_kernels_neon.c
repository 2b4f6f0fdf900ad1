/*
 * rmsnorm_kernels_neon.c — the gated RMSNorm kernels for AArch64 with Advanced SIMD (NEON).
 *
 * Compiled into AArch64 builds only (CMakeLists.txt) and called when ctx->isa ==
 * M2_ISA_NEON. The kernel text is rmsnorm_kernels_impl.h over simd.h's 4-lane NEON mapping.
 */
#define M2_SIMD_NEON 1
#define M2_KSUFFIX __neon
#include "cpu/rmsnorm_kernels_impl.h"

const m2_rmsnorm_kernels m2_rmsnorm_kernels_neon = {
    "neon",
    rms_fwd_group__neon,
    rms_bwd_group__neon,
};
