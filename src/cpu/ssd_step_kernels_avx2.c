/*
 * ssd_step_kernels_avx2.c — the SSD decode-step kernels for x86-64 with AVX2 and FMA (8 floats
 * of N per vector). Compiled with -mavx2 -mfma (see CMakeLists.txt) and called only when
 * run-time detection found both (ctx->isa == M2_ISA_AVX2). The kernel text is
 * ssd_step_kernels_impl.h.
 */
#define M2_SIMD_AVX2 1
#define M2_KSUFFIX __avx2
#include "cpu/ssd_step_kernels_impl.h"

const m2_ssd_step_kernels m2_ssd_step_kernels_avx2 = {
    "avx2+fma",
    ssd_step_rows__avx2,
    ssd_step_epilogue__avx2,
};
