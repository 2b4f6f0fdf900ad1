/*
 * linear_kernels_avx512vnni.c — the Q8_0 integer-activation kernels (quantize_x) with AVX-512
 * VNNI: vpdpbusd on 256-bit vectors (AVX512VL), so the kernel text and its 8 float lanes are
 * the AVX2 set's (linear_q8x_impl.h over simd.h's AVX2 mapping) with one instruction per
 * block where AVX2 needs two (linear_q8x_simd.h); the results equal the AVX2 set's bit for
 * bit. Compiled with the AVX-512 flags and -mavx512vnni (CMakeLists.txt); linear_cpu.c calls
 * it when the context runs the avx512 set and the CPU has VNNI.
 */
#define M2_SIMD_AVX2 1
#define M2_Q8X_VNNI 1
#define M2_KSUFFIX __avx512vnni
#include "cpu/linear_q8x_impl.h"

const m2_linear_q8x_kernels m2_linear_q8x_avx512vnni = {"avx512vnni", M2_LIN_Q8X_TABLE};
