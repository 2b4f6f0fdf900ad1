/*
 * linear_kernels_neondot.c — the Q8_0 integer-activation kernels (quantize_x) with the
 * AArch64 dot-product extension (sdot, Armv8.2 FEAT_DotProd): the NEON set's kernel text
 * (linear_q8x_impl.h over simd.h's 4-lane mapping) with two sdot per block where plain NEON
 * needs six multiplies and pairwise adds (linear_q8x_simd.h); the lanes, and so the results,
 * equal the NEON set's bit for bit. Compiled with +dotprod (CMakeLists.txt); linear_cpu.c
 * calls it when the context runs the neon set and the CPU reports the extension (hwcap).
 */
#define M2_SIMD_NEON 1
#define M2_Q8X_DOT 1
#define M2_KSUFFIX __neondot
#include "cpu/linear_q8x_impl.h"

const m2_linear_q8x_kernels m2_linear_q8x_neondot = {"neon+dotprod", M2_LIN_Q8X_TABLE};
