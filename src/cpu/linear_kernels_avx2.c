/*
 * linear_kernels_avx2.c — the decode linear-layer kernels for x86-64 with AVX2 and FMA (and
 * F16C, for the Q8_0 scales). Compiled with -mavx2 -mfma -mf16c (CMakeLists.txt) and called when
 * run-time detection chose M2_ISA_AVX2. The kernel text is linear_kernels_impl.h over simd.h's
 * 8-lane mapping, and linear_q8x_impl.h (Q8_0 with integer activations, vpmaddubsw; also
 * the avx512 set's where the CPU lacks VNNI).
 */
#define M2_SIMD_AVX2 1
#define M2_KSUFFIX __avx2
#include "cpu/linear_kernels_impl.h"
#include "cpu/linear_q8x_impl.h"

const m2_linear_kernels m2_linear_kernels_avx2 = {"avx2+fma", M2_LIN_TABLE};
const m2_linear_q8x_kernels m2_linear_q8x_avx2 = {"avx2+fma", M2_LIN_Q8X_TABLE};
