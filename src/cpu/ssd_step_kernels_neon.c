/*
 * ssd_step_kernels_neon.c — the SSD decode-step kernels for AArch64 with Advanced SIMD (NEON,
 * 4 floats of N per vector). Compiled into AArch64 builds only (CMakeLists.txt) and called
 * when ctx->isa == M2_ISA_NEON. The kernel text is ssd_step_kernels_impl.h.
 */
#define M2_SIMD_NEON 1
#define M2_KSUFFIX __neon
#include "cpu/ssd_step_kernels_impl.h"

const m2_ssd_step_kernels m2_ssd_step_kernels_neon = {
    "neon",
    ssd_step_rows__neon,
    ssd_step_epilogue__neon,
};
