/*
 * linear_kernels_avx512.c — the decode linear-layer kernels for x86-64 with AVX-512 (F, VL, BW,
 * DQ) and F16C. Compiled with the AVX-512 flags (CMakeLists.txt) and called when run-time
 * detection chose M2_ISA_AVX512. The kernel text is linear_kernels_impl.h over simd.h's 16-lane
 * mapping: one weight vector is a whole 64-byte line (f32), and a Q8_0 block two vectors.
 */
#define M2_SIMD_AVX512 1
#define M2_KSUFFIX __avx512
#include "cpu/linear_kernels_impl.h"

const m2_linear_kernels m2_linear_kernels_avx512 = {"avx512", M2_LIN_TABLE};
