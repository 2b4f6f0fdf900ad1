/*
 * conv1d_kernels_avx512.c — the conv1d kernels for x86-64 with AVX-512 F/VL/BW/DQ (16
 * channels per vector: one 64-byte line). Compiled with -mavx512f -mavx512vl -mavx512bw
 * -mavx512dq -mavx2 -mfma (see CMakeLists.txt) and called only when run-time detection found
 * them, with OS support for the ZMM state (ctx->isa == M2_ISA_AVX512). The kernel text is
 * conv1d_kernels_impl.h, as for the AVX2 set: each lane does the same float operations, so a
 * channel in a full vector gets the same bits from both sets (the tails differ: n mod 16
 * channels here, n mod 8 there, run the scalar code).
 */
#define M2_SIMD_AVX512 1
#define M2_KSUFFIX __avx512
#include "cpu/conv1d_kernels_impl.h"

const m2_conv1d_kernels m2_conv1d_kernels_avx512 = {
    "avx512",
    conv1d_fwd__avx512,
    conv1d_bwd__avx512,
    conv1d_step__avx512,
    conv1d_pack_w__avx512,
    conv1d_stream_fence__avx512,
};
