/*
 * conv1d_kernels_avx2.c — the conv1d kernels for x86-64 with AVX2 and FMA (8 channels per
 * vector). Compiled with -mavx2 -mfma (see CMakeLists.txt) and called only when run-time
 * detection found both (ctx->isa == M2_ISA_AVX2). The kernel text is conv1d_kernels_impl.h.
 */
#define M2_SIMD_AVX2 1
#define M2_KSUFFIX __avx2
#include "cpu/conv1d_kernels_impl.h"

const m2_conv1d_kernels m2_conv1d_kernels_avx2 = {
    "avx2+fma",
    conv1d_fwd__avx2,
    conv1d_bwd__avx2,
    conv1d_step__avx2,
    conv1d_pack_w__avx2,
    conv1d_stream_fence__avx2,
};
