/*
 * rmsnorm_kernels_avx2.c — the gated RMSNorm kernels for x86-64 with AVX2 and FMA.
 *
 * Compiled with -mavx2 -mfma (CMakeLists.txt) and called only when run-time detection
 * chose M2_ISA_AVX2. The kernel text is rmsnorm_kernels_impl.h over simd.h's 8-lane mapping.
 */
#define M2_SIMD_AVX2 1
#define M2_KSUFFIX __avx2
#include "cpu/rmsnorm_kernels_impl.h"

const m2_rmsnorm_kernels m2_rmsnorm_kernels_avx2 = {
    "avx2+fma",
    rms_fwd_group__avx2,
    rms_bwd_group__avx2,
};
